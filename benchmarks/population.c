/* A standard population for the scan benchmark: N processes with 60 fds each
 * (40% unix sockets, 20% pipes, 30% regular files, 10% /dev/null), the
 * first H of which also hold NODE. Prints "ready" when all are in place and
 * waits for stdin to close; then kills the children. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <fcntl.h>
#include <unistd.h>
#include <sys/socket.h>
#include <sys/wait.h>

int main(int argc, char **argv) {
    if (argc != 5) { fprintf(stderr, "usage: population N H NODE POOLDIR\n"); return 2; }
    int n = atoi(argv[1]), h = atoi(argv[2]);
    const char *node = argv[3], *pool = argv[4];
    pid_t *kids = calloc(n, sizeof(pid_t));
    int ready[2];
    if (pipe(ready)) return 1;
    for (int i = 0; i < n; i++) {
        pid_t pid = fork();
        if (pid < 0) { perror("fork"); break; }
        if (pid == 0) {
            close(ready[0]);
            int sv[2], pp[2];
            for (int k = 0; k < 12; k++) socketpair(AF_UNIX, SOCK_STREAM, 0, sv);   /* 24 */
            for (int k = 0; k < 6; k++) if (pipe(pp)) _exit(1);                    /* 12 */
            for (int k = 0; k < 18; k++) {                                          /* 18 */
                char path[4096];
                snprintf(path, sizeof path, "%s/f%d", pool, (i * 18 + k) % 500);
                open(path, O_RDONLY);
            }
            for (int k = 0; k < 6 - (i < h); k++) open("/dev/null", O_RDONLY);   /* 6 */
            if (i < h) open(node, O_RDONLY);
            if (write(ready[1], "x", 1) != 1) _exit(1);
            close(ready[1]);
            pause();
            _exit(0);
        }
        kids[i] = pid;
    }
    close(ready[1]);
    char c;
    for (int i = 0; i < n; i++) if (read(ready[0], &c, 1) != 1) break;
    printf("ready\n");
    fflush(stdout);
    while (read(0, &c, 1) > 0) {}
    for (int i = 0; i < n; i++) if (kids[i] > 0) kill(kids[i], SIGKILL);
    while (wait(NULL) > 0) {}
    return 0;
}
