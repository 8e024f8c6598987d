/* Stack-snapshot benchmark workload: THREADS threads each descend DEPTH instrumented calls
 * and wait there (a server's idle workers inside their handlers), waking every 10 ms to do
 * a little work in the innermost call, for SECS seconds. The tracer's flusher copies every
 * thread's open calls at each interval; the cost shows in the process's CPU time.
 *   stacks THREADS DEPTH SECS */
#include <pthread.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

static int depth, secs;
static volatile long sink;
static struct timespec end;

static int before_end(void) {
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    return now.tv_sec < end.tv_sec || (now.tv_sec == end.tv_sec && now.tv_nsec < end.tv_nsec);
}

__attribute__((noinline)) void leaf(void) {
    for (int i = 0; i < 100; i++) sink += i;
}

__attribute__((noinline)) void descend(int d) {
    if (d > 1) {
        descend(d - 1);
        return;
    }
    while (before_end()) {
        leaf();
        usleep(10000);
    }
}

static void *worker(void *arg) {
    (void)arg;
    descend(depth);
    return 0;
}

int main(int argc, char **argv) {
    int threads = argc > 1 ? atoi(argv[1]) : 64;
    depth = argc > 2 ? atoi(argv[2]) : 20;
    secs = argc > 3 ? atoi(argv[3]) : 10;
    clock_gettime(CLOCK_MONOTONIC, &end);
    end.tv_sec += secs;
    pthread_t *t = calloc(threads, sizeof *t);
    for (int i = 0; i < threads; i++) pthread_create(&t[i], 0, worker, 0);
    for (int i = 0; i < threads; i++) pthread_join(t[i], 0);
    return 0;
}
