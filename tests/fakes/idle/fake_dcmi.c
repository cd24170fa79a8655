/*
 * A stand-in for Ascend's libdcmi.so with the real C signatures, for tests on
 * machines without an Ascend driver. Every call re-reads the state file named
 * by $FAKE_DCMI_STATE, so a test changes the "hardware" between samples by
 * rewriting that file. Lines (first match wins, unknown lines ignored):
 *   init RET                      dcmi_init's return code (default 0)
 *   cards ID ID ...               dcmi_get_card_list (default: none)
 *   cards_ret RET
 *   devices CARD N                dcmi_get_device_num_in_card (default 1)
 *   devices_ret CARD RET
 *   util CARD DEV PERCENT         AI Core rate (input_type 2)
 *   util_ret CARD DEV RET         e.g. -8255: not supported
 *   procs CARD DEV PID:BYTES ...  dcmi_get_device_resource_info
 *   procs_ret CARD DEV RET
 *   hang FUNCTION [SECONDS]       that function sleeps (an hour unless told)
 * Each call's name is appended to $FAKE_DCMI_LOG when set.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

struct dcmi_proc_mem_info {
    int proc_id;
    unsigned long proc_mem_usage;
};

static void log_call(const char *name)
{
    const char *path = getenv("FAKE_DCMI_LOG");
    FILE *f;
    if (!path || !(f = fopen(path, "a")))
        return;
    fprintf(f, "%s\n", name);
    fclose(f);
}

/* Copies into out the rest of the first line "KEY [A [B]] rest"; 1 if found. */
static int lookup(const char *key, int nargs, int a, int b, char *out, size_t size)
{
    const char *path = getenv("FAKE_DCMI_STATE");
    char line[4096], word[64];
    FILE *f;
    int found = 0;
    if (!path || !(f = fopen(path, "r")))
        return 0;
    while (!found && fgets(line, sizeof line, f)) {
        int x, y, used = 0;
        if (sscanf(line, "%63s%n", word, &used) != 1 || strcmp(word, key) != 0)
            continue;
        char *rest = line + used;
        if (nargs >= 1) {
            int n = 0;
            if (sscanf(rest, "%d%n", &x, &n) != 1 || x != a)
                continue;
            rest += n;
        }
        if (nargs >= 2) {
            int n = 0;
            if (sscanf(rest, "%d%n", &y, &n) != 1 || y != b)
                continue;
            rest += n;
        }
        rest[strcspn(rest, "\n")] = '\0';
        snprintf(out, size, "%s", rest);
        found = 1;
    }
    fclose(f);
    return found;
}

static void maybe_hang(const char *name)
{
    const char *path = getenv("FAKE_DCMI_STATE");
    char line[256], word[64], fn[128];
    FILE *f;
    int hang = 0, seconds;
    if (!path || !(f = fopen(path, "r")))
        return;
    while (fgets(line, sizeof line, f)) {
        seconds = 3600;
        if (sscanf(line, "%63s %127s %d", word, fn, &seconds) >= 2 && !strcmp(word, "hang")
            && !strcmp(fn, name))
            hang = seconds;
    }
    fclose(f);
    if (hang > 0)
        sleep((unsigned int)hang);
}

static int ret_of(const char *key, int nargs, int a, int b)
{
    char rest[4096];
    return lookup(key, nargs, a, b, rest, sizeof rest) ? atoi(rest) : 0;
}

int dcmi_init(void)
{
    log_call("dcmi_init");
    maybe_hang("dcmi_init");
    return ret_of("init", 0, 0, 0);
}

int dcmi_get_card_list(int *card_num, int *card_list, int list_len)
{
    char rest[4096];
    int ret, n = 0, used = 0, id;
    log_call("dcmi_get_card_list");
    maybe_hang("dcmi_get_card_list");
    if ((ret = ret_of("cards_ret", 0, 0, 0)) != 0)
        return ret;
    if (lookup("cards", 0, 0, 0, rest, sizeof rest)) {
        char *p = rest;
        while (n < list_len && sscanf(p, "%d%n", &id, &used) == 1) {
            card_list[n++] = id;
            p += used;
        }
    }
    *card_num = n;
    return 0;
}

int dcmi_get_device_num_in_card(int card_id, int *device_num)
{
    char rest[4096];
    int ret;
    log_call("dcmi_get_device_num_in_card");
    maybe_hang("dcmi_get_device_num_in_card");
    if ((ret = ret_of("devices_ret", 1, card_id, 0)) != 0)
        return ret;
    *device_num = lookup("devices", 1, card_id, 0, rest, sizeof rest) ? atoi(rest) : 1;
    return 0;
}

int dcmi_get_device_utilization_rate(int card_id, int device_id, int input_type,
                                     unsigned int *utilization_rate)
{
    char rest[4096];
    int ret;
    log_call("dcmi_get_device_utilization_rate");
    maybe_hang("dcmi_get_device_utilization_rate");
    if (input_type != 2)
        return -8255;
    if ((ret = ret_of("util_ret", 2, card_id, device_id)) != 0)
        return ret;
    *utilization_rate = lookup("util", 2, card_id, device_id, rest, sizeof rest)
        ? (unsigned int)atoi(rest) : 0;
    return 0;
}

int dcmi_get_device_resource_info(int card_id, int device_id,
                                  struct dcmi_proc_mem_info *proc_info, int *proc_num)
{
    char rest[4096];
    int ret, n = 0, used = 0, pid;
    unsigned long bytes;
    log_call("dcmi_get_device_resource_info");
    maybe_hang("dcmi_get_device_resource_info");
    if ((ret = ret_of("procs_ret", 2, card_id, device_id)) != 0)
        return ret;
    if (lookup("procs", 2, card_id, device_id, rest, sizeof rest)) {
        char *p = rest;
        /* the real library reports at most 32 */
        while (n < 32 && sscanf(p, " %d:%lu%n", &pid, &bytes, &used) == 2) {
            proc_info[n].proc_id = pid;
            proc_info[n].proc_mem_usage = bytes;
            n++;
            p += used;
        }
    }
    *proc_num = n;
    return 0;
}
