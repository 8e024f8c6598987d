/* A peer of a traced group for the sampler-under-load test (tests/tests/sampler_load.rs): four
 * threads, each calling small functions in a loop and sleeping 1 ms every 2000 rounds, as a
 * server's workers do (calls, context switches), for SECONDS. Built with
 * -finstrument-functions and run under `culprit record`.
 *
 * Usage: load_peer SECONDS */
#include <pthread.h>
#include <stdlib.h>
#include <time.h>

static volatile unsigned long sink;
static double seconds;

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

__attribute__((noinline)) void leaf(unsigned long i) { sink += i; }

__attribute__((noinline)) void handle(unsigned long i)
{
    for (int k = 0; k < 8; k++)
        leaf(i + k);
}

static void *worker(void *arg)
{
    (void)arg;
    double end = now() + seconds;
    struct timespec ms = {0, 1000000};
    for (unsigned long i = 0; now() < end; i++) {
        handle(i);
        if (i % 2000 == 0)
            nanosleep(&ms, NULL);
    }
    return NULL;
}

int main(int argc, char **argv)
{
    seconds = argc > 1 ? atof(argv[1]) : 5;
    pthread_t t[4];
    for (int i = 0; i < 4; i++)
        if (pthread_create(&t[i], NULL, worker, NULL) != 0)
            return 1;
    for (int i = 0; i < 4; i++)
        pthread_join(t[i], NULL);
    return 0;
}
