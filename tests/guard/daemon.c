/* A driver daemon's stand-in: holds the node it is given, says "ready PID", waits.
 * Copied under a daemon's name (slogd, ...) into the folder a test wants it run from;
 * SIGINT ends it (the default action), so a test sees whether it was signalled. */
#include <fcntl.h>
#include <stdio.h>
#include <unistd.h>

int main(int argc, char **argv) {
    if (argc < 2)
        return 2;
    int fd = open(argv[1], O_RDONLY);
    if (fd < 0) {
        perror(argv[1]);
        return 1;
    }
    printf("ready %d\n", (int)getpid());
    fflush(stdout);
    for (;;)
        pause();
}
