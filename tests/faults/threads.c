/* A holder whose node is seen under /proc/PID/task/TID/fd only.
 *
 *   threads NODE leader-exit    the main thread opens NODE, starts a thread
 *                               and exits with pthread_exit: the process
 *                               lives on in that thread
 *   threads NODE unshare-files  a thread unshares its fd table, then opens
 *                               NODE: the leader's table never holds it
 *
 * Prints "ready PID" once the node is held; SIGINT ends the process (exit 0).
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

static const char *node;
static int unshare_files;
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t held = PTHREAD_COND_INITIALIZER;
static int ready;

static void on_int(int sig) { (void)sig; _exit(0); }

static void say_ready(void) {
    char line[64];
    int n = snprintf(line, sizeof line, "ready %d\n", (int)getpid());
    if (write(1, line, (size_t)n) != n) _exit(3);
}

static void *worker(void *arg) {
    (void)arg;
    if (unshare_files) {
        if (unshare(CLONE_FILES) != 0 || open(node, O_RDONLY) < 0) _exit(2);
        pthread_mutex_lock(&lock);
        ready = 1;
        pthread_cond_signal(&held);
        pthread_mutex_unlock(&lock);
    }
    for (;;) pause();
}

int main(int argc, char **argv) {
    pthread_t t;
    if (argc != 3) return 2;
    node = argv[1];
    unshare_files = strcmp(argv[2], "unshare-files") == 0;
    signal(SIGINT, on_int);
    if (!unshare_files && open(node, O_RDONLY) < 0) return 2;
    if (pthread_create(&t, NULL, worker, NULL) != 0) return 2;
    if (unshare_files) {
        pthread_mutex_lock(&lock);
        while (!ready) pthread_cond_wait(&held, &lock);
        pthread_mutex_unlock(&lock);
        say_ready();
        for (;;) pause();
    }
    say_ready();
    pthread_exit(NULL);
}
