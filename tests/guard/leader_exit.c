/* A holder whose main thread has exited (pthread_exit) and whose one live thread
 * has SIGINT blocked, or not:
 *
 *   leader_exit NODE blocked   the thread blocks SIGINT, nothing waits for it: a
 *                              SIGINT stays pending for ever (the zombie leader
 *                              takes no signal), though the leader's own mask,
 *                              the one /proc/PID/status shows, does not block it
 *   leader_exit NODE open      the thread takes SIGINT: its handler exits (0)
 *
 * Prints "ready PID" once the node is held and the leader is about to exit.
 */
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

static void on_int(int sig) { (void)sig; _exit(0); }

static void *worker(void *arg) {
    (void)arg;
    for (;;) pause();
}

int main(int argc, char **argv) {
    pthread_t t;
    sigset_t set;
    if (argc != 3 || open(argv[1], O_RDONLY) < 0) return 2;
    signal(SIGINT, on_int);
    sigemptyset(&set);
    sigaddset(&set, SIGINT);
    if (strcmp(argv[2], "blocked") == 0) pthread_sigmask(SIG_BLOCK, &set, NULL);
    if (pthread_create(&t, NULL, worker, NULL) != 0) return 2;
    pthread_sigmask(SIG_UNBLOCK, &set, NULL);  /* the leader's mask: SIGINT not blocked */
    printf("ready %d\n", (int)getpid());
    fflush(stdout);
    pthread_exit(NULL);
}
