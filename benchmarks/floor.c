/* The floor for the holder scan: one thread, one readlinkat per fd of every
 * process in /proc, and a string compare of each target with NODE. Nothing
 * can find a process's open device nodes with less work (fuser stats every
 * fd on top). Prints how many processes hold NODE. */
#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

int main(int argc, char **argv) {
    if (argc != 2) { fprintf(stderr, "usage: floor NODE\n"); return 2; }
    DIR *proc = opendir("/proc");
    if (!proc) { perror("/proc"); return 1; }
    char path[300], target[4096];
    int holders = 0;
    for (struct dirent *p; (p = readdir(proc));) {
        if (p->d_name[0] < '1' || p->d_name[0] > '9') continue;
        snprintf(path, sizeof path, "/proc/%s/fd", p->d_name);
        int dfd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (dfd < 0) continue;
        DIR *fds = fdopendir(dfd);
        if (!fds) { close(dfd); continue; }
        int holds = 0;
        for (struct dirent *f; (f = readdir(fds));) {
            if (f->d_name[0] == '.') continue;
            ssize_t n = readlinkat(dfd, f->d_name, target, sizeof target - 1);
            if (n <= 0) continue;
            target[n] = 0;
            if (!holds && strcmp(target, argv[1]) == 0) holds = 1;
        }
        closedir(fds);
        holders += holds;
    }
    closedir(proc);
    printf("%d\n", holders);
    return 0;
}
