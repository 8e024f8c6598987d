/*
 * A multi-threaded CPU-bound program for the starvation tests (tests/tests/starvation.rs): one
 * node of a peer group.
 * THREADS threads each serve "requests" in a loop until SECONDS have passed on the wall
 * clock: parse_field, hash_word (the heaviest), mix_state and build_reply, leaf functions
 * called hundreds of thousands of times a second and more, under serve_request. Built with
 * -finstrument-functions and run under libculprit_rt.so.
 *
 *   starve_peer THREADS SECONDS [START]
 *
 * With START (seconds since the epoch) it waits until then before it starts its threads, so
 * that peers started one after the other on a loaded machine run the same seconds.
 * At exit it prints its own count of each function's calls, one "name count" line each, so
 * a test can hold the tracer's counts against them. Thread scaffolding and the counters are
 * not instrumented.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#define NOTRACE __attribute__((no_instrument_function))
#define MAX_THREADS 64

enum { PARSE, HASH, MIX, REPLY, REQUEST, FUNCS };
static const char *const names[FUNCS] = {"parse_field", "hash_word", "mix_state", "build_reply",
                                         "serve_request"};

struct worker {
    pthread_t thread;
    unsigned long calls[FUNCS];
    unsigned long state;
} __attribute__((aligned(64)));

static struct worker workers[MAX_THREADS];
static double deadline;
static volatile unsigned long sink;

static NOTRACE double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

__attribute__((noinline)) unsigned long parse_field(struct worker *w, unsigned long x)
{
    w->calls[PARSE]++;
    return x * 2654435761UL + 1;
}

__attribute__((noinline)) unsigned long hash_word(struct worker *w, unsigned long x)
{
    w->calls[HASH]++;
    for (int i = 0; i < 24; i++)
        x = (x ^ (x >> 13)) * 0x9E3779B97F4A7C15UL;
    return x;
}

__attribute__((noinline)) unsigned long mix_state(struct worker *w, unsigned long x)
{
    w->calls[MIX]++;
    w->state = (w->state << 7) ^ (w->state >> 3) ^ x;
    return w->state;
}

__attribute__((noinline)) unsigned long build_reply(struct worker *w, unsigned long x)
{
    w->calls[REPLY]++;
    return x ^ (x << 17);
}

__attribute__((noinline)) void serve_request(struct worker *w)
{
    w->calls[REQUEST]++;
    unsigned long x = w->state;
    for (int i = 0; i < 4; i++) {
        x = parse_field(w, x + i);
        x = hash_word(w, x);
    }
    x = mix_state(w, x);
    sink = build_reply(w, x);
}

static NOTRACE void *run(void *arg)
{
    struct worker *w = arg;
    while (now() < deadline)
        for (int i = 0; i < 64; i++)
            serve_request(w);
    return NULL;
}

NOTRACE int main(int argc, char **argv)
{
    if (argc != 3 && argc != 4) {
        fprintf(stderr, "usage: starve THREADS SECONDS [START]\n");
        return 2;
    }
    int threads = atoi(argv[1]);
    if (threads < 1 || threads > MAX_THREADS) {
        fprintf(stderr, "starve: 1 to %d threads\n", MAX_THREADS);
        return 2;
    }
    if (argc == 4) {
        double start = atof(argv[3]), wait;
        while ((wait = start - now()) > 0) {
            struct timespec ts = {(time_t)wait, (long)((wait - (time_t)wait) * 1e9)};
            nanosleep(&ts, NULL);
        }
    }
    deadline = now() + atof(argv[2]);
    for (int t = 0; t < threads; t++) {
        workers[t].state = 0x12345 + t;
        if (pthread_create(&workers[t].thread, NULL, run, &workers[t]) != 0) {
            perror("pthread_create");
            return 1;
        }
    }
    unsigned long total[FUNCS] = {0};
    for (int t = 0; t < threads; t++) {
        pthread_join(workers[t].thread, NULL);
        for (int f = 0; f < FUNCS; f++)
            total[f] += workers[t].calls[f];
    }
    for (int f = 0; f < FUNCS; f++)
        printf("%s %lu\n", names[f], total[f]);
    return 0;
}
