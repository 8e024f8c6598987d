/* Closes its standard descriptors and opens them again, in a loop, while a second thread
 * makes the runtime write its file as often as it can (culprit_flush): every round must get
 * 0, 1 and 2 back, never find one taken by the runtime (tests/tests/tracer_starved.rs).
 *
 *   stdfds ROUNDS
 *
 * Prints "rounds N wrong K flushes F"; exits 1 when a round got another descriptor. Linked
 * with -lculprit_rt (for culprit_flush). */
#define _GNU_SOURCE
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "culprit.h"

#define NOINLINE __attribute__((noinline))
#define NOTRACE __attribute__((no_instrument_function))

static volatile int stop;
static volatile long sink;
static long flushes;

NOINLINE void work(long i) { sink += i; }

static NOTRACE void *flusher(void *arg) {
    (void)arg;
    while (!stop) {
        work(1);
        if (culprit_flush() == 0) flushes++;
    }
    return NULL;
}

NOTRACE int main(int argc, char **argv) {
    long rounds = argc > 1 ? atol(argv[1]) : 10000;
    /* Report through a descriptor of our own: 1 and 2 are closed and reopened below. */
    int out = dup(1);
    pthread_t t;
    pthread_create(&t, NULL, flusher, NULL);
    long wrong = 0;
    for (long r = 0; r < rounds; r++) {
        work(r);
        close(0);
        close(1);
        close(2);
        int a = open("/dev/null", O_RDONLY);
        int b = open("/dev/null", O_WRONLY);
        int c = open("/dev/null", O_WRONLY);
        if (a != 0 || b != 1 || c != 2) {
            int got[3] = {a, b, c};
            wrong++;
            for (int k = 0; k < 3; k++)
                if (got[k] > 2) close(got[k]);
        }
    }
    stop = 1;
    pthread_join(t, NULL);
    dprintf(out, "rounds %ld wrong %ld flushes %ld\n", rounds, wrong, flushes);
    return wrong ? 1 : 0;
}
