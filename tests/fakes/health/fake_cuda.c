/* A stand-in for NVIDIA's libcuda.so.1: the driver API calls the health
 * probe makes, with the answers seen after a resume that went wrong.
 * Driven by the environment, as the probe's child inherits it:
 *   FAKE_CUDA_RELOADED  a file; until it exists cuInit returns 999
 *                       (CUDA_ERROR_UNKNOWN), as after resume until
 *                       nvidia_uvm is reloaded (the fake modprobe makes it)
 *   FAKE_CUDA_MODE      ok (always healthy) | broken (999 even after a
 *                       reload) | hang (cuInit never returns) | ctx (the
 *                       context on the last device fails with 999) |
 *                       nodevice (cuInit returns 100, CUDA_ERROR_NO_DEVICE,
 *                       as on a host with the driver's libraries and no GPU) |
 *                       exclusive (the context on the last device fails with
 *                       46, CUDA_ERROR_DEVICES_UNAVAILABLE, as on a GPU in
 *                       exclusive-process mode that a job's process uses) |
 *                       full (the context on the last device fails with 2,
 *                       CUDA_ERROR_OUT_OF_MEMORY: a job holds its memory) |
 *                       crash (cuInit dies of SIGSEGV, as a driver in a bad
 *                       state after resume can take its caller down)
 *   FAKE_CUDA_COUNT     how many devices (default 1)
 *   FAKE_CUDA_LOG       each call is appended here
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void note(const char *call, int arg) {
    const char *path = getenv("FAKE_CUDA_LOG");
    if (path == NULL) return;
    FILE *f = fopen(path, "a");
    if (f == NULL) return;
    fprintf(f, "%s %d\n", call, arg);
    fclose(f);
}

static int mode(const char *want) {
    const char *m = getenv("FAKE_CUDA_MODE");
    return m != NULL && strcmp(m, want) == 0;
}

static int count(void) {
    const char *c = getenv("FAKE_CUDA_COUNT");
    return c != NULL ? atoi(c) : 1;
}

int cuInit(unsigned int flags) {
    note("cuInit", (int)flags);
    if (mode("hang")) for (;;) pause();
    if (mode("crash")) { volatile int *nowhere = NULL; return *nowhere; }
    if (mode("ok") || mode("ctx") || mode("exclusive") || mode("full")) return 0;
    if (mode("broken")) return 999;
    if (mode("nodevice")) return 100;
    const char *marker = getenv("FAKE_CUDA_RELOADED");
    return marker != NULL && access(marker, F_OK) == 0 ? 0 : 999;
}

int cuDeviceGetCount(int *n) {
    note("cuDeviceGetCount", 0);
    *n = count();
    return 0;
}

int cuDeviceGet(int *device, int ordinal) {
    note("cuDeviceGet", ordinal);
    if (ordinal < 0 || ordinal >= count()) return 101;
    *device = ordinal;
    return 0;
}

int cuCtxCreate_v2(void **ctx, unsigned int flags, int device) {
    note("cuCtxCreate_v2", device);
    (void)flags;
    if (mode("ctx") && device == count() - 1) return 999;
    if (mode("exclusive") && device == count() - 1) return 46;
    if (mode("full") && device == count() - 1) return 2;
    *ctx = (void *)(long)(0x1000 + device);
    return 0;
}

int cuCtxDestroy_v2(void *ctx) {
    note("cuCtxDestroy_v2", (int)((long)ctx - 0x1000));
    return 0;
}
