/* A server for the window-defaults test (tests/tests/verdicts.rs): two worker threads serve
 * requests (handle_request -> compute, ~2 ms each) for argv[1] seconds. With argv[2] = N, from
 * N seconds on compute does five times the work (a fault that begins mid-run). */
#include <pthread.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

static volatile long sink;
static double t0, fault_at = -1;

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

__attribute__((noinline)) void compute(int n)
{
    /* Every node reads the clock, faulty or not: a call only the faulty node made from its
     * first second would be a difference since its data began (the rare-function rule sees
     * it), which is not what this server is for. */
    double t = now();
    int rounds = (fault_at >= 0 && t - t0 >= fault_at) ? 5 : 1;
    for (int r = 0; r < rounds; r++)
        for (int i = 0; i < 200000; i++)
            sink += i ^ n;
}

__attribute__((noinline)) void handle_request(int n)
{
    compute(n);
    usleep(2000);
}

static void *worker(void *arg)
{
    (void)arg;
    for (int n = 0;; n++)
        handle_request(n);
    return 0;
}

int main(int argc, char **argv)
{
    int secs = argc > 1 ? atoi(argv[1]) : 10;
    if (argc > 2)
        fault_at = atof(argv[2]);
    t0 = now();
    pthread_t t[2];
    for (long i = 0; i < 2; i++)
        pthread_create(&t[i], 0, worker, 0);
    sleep(secs);
    return 0;
}
