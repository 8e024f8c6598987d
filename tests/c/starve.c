/* A multi-threaded program that keeps its own exact call counters, for the tracer's
 * starvation tests (tests/tests/tracer_starved.rs).
 *
 *   starve THREADS SECONDS SLOT_MS
 *
 * THREADS threads call mid() (which calls leaf_a() and leaf_b()) in batches of BATCH calls
 * for SECONDS of wall-clock time. Each thread counts its calls per function, and per
 * wall-clock slot of SLOT_MS (the slot the clock is in when a batch ends: a batch that
 * straddles a slot boundary is counted in the later slot). At exit it prints
 *
 *   fn mid N / fn leaf_a N / fn leaf_b N     the exact totals
 *   slot S N                                 calls of the three functions in slot S
 *                                            (S = wall-clock ms / SLOT_MS)
 *   active A                                 culprit_is_active() at the end (1 tracing,
 *                                            0 not), when the runtime is loaded
 *   batch B                                  the batch size (the slots' uncertainty)
 *
 * Only mid, leaf_a and leaf_b are instrumented (the rest is no_instrument_function), so a
 * trace interval's calls are all theirs. */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#define NOINLINE __attribute__((noinline))
#define NOTRACE __attribute__((no_instrument_function))
#define BATCH 100
#define MAX_SLOTS 4096

/* The runtime's C API (include/culprit.h), weak: the program runs without the runtime too. */
int culprit_is_active(void) __attribute__((weak));

static volatile long sink;

NOINLINE void leaf_a(void) { sink++; }
NOINLINE void leaf_b(long x) { sink += x; }
NOINLINE void mid(long i) {
    leaf_a();
    leaf_b(i);
}

static long threads, seconds, slot_ms;
static long long first_slot, end_ns;
static long long counts[3];
static long long slots[MAX_SLOTS];
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;

static NOTRACE long long now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static NOTRACE void *body(void *arg) {
    (void)arg;
    long long mine = 0;
    long long *per = calloc(MAX_SLOTS, sizeof *per);
    for (;;) {
        for (long k = 0; k < BATCH; k++) mid(k);
        mine += BATCH;
        long long t = now_ns();
        long long s = t / (slot_ms * 1000000LL) - first_slot;
        if (s >= 0 && s < MAX_SLOTS) per[s] += 3 * BATCH;
        if (t >= end_ns) break;
    }
    pthread_mutex_lock(&lock);
    for (int i = 0; i < 3; i++) counts[i] += mine;
    for (int s = 0; s < MAX_SLOTS; s++) slots[s] += per[s];
    pthread_mutex_unlock(&lock);
    free(per);
    return NULL;
}

NOTRACE int main(int argc, char **argv) {
    if (argc < 4) {
        fprintf(stderr, "usage: starve THREADS SECONDS SLOT_MS\n");
        return 2;
    }
    threads = atol(argv[1]);
    seconds = atol(argv[2]);
    slot_ms = atol(argv[3]);
    long long t0 = now_ns();
    first_slot = t0 / (slot_ms * 1000000LL);
    end_ns = t0 + seconds * 1000000000LL;
    pthread_t *t = calloc(threads, sizeof *t);
    for (long i = 0; i < threads; i++) pthread_create(&t[i], NULL, body, NULL);
    for (long i = 0; i < threads; i++) pthread_join(t[i], NULL);
    printf("fn mid %lld\nfn leaf_a %lld\nfn leaf_b %lld\n", counts[0], counts[1], counts[2]);
    for (int s = 0; s < MAX_SLOTS; s++)
        if (slots[s]) printf("slot %lld %lld\n", first_slot + s, slots[s]);
    /* The runtime's own word on whether it traces (its C API, when it is loaded). */
    if (culprit_is_active) printf("active %d\n", culprit_is_active());
    printf("batch %d\n", BATCH);
    return 0;
}
