/*
 * A small request-serving "server" for the diagnosis tests: each process is one node of a peer
 * group. It serves a fixed number of requests per 10 ms tick (ticks on wall-clock deadlines, so
 * every node does the same work per second while it keeps up) through a few functions, and can
 * be told to misbehave in one of them after a while.
 *
 *   diag_server SECONDS [FAULT FUNCTION AMOUNT AFTER_SECONDS]
 *
 * FAULT is one of
 *   work   FUNCTION does AMOUNT times its usual computation   (more time, same calls)
 *   block  FUNCTION sleeps AMOUNT microseconds per call       (more blocked time)
 *   calls  FUNCTION is called AMOUNT times per request        (more calls)
 * and FUNCTION one of parse_request, lookup_object, checksum_payload, write_reply.
 *
 * Built with -finstrument-functions and run under libculprit_rt.so by the tests.
 *
 * Idle time is kept out of the profile, as in a server whose event loop waits inside an
 * uninstrumented library: wait_tick is not instrumented and main, which accumulates the idle
 * time, never returns (it calls exit), so no traced function's time is "the rest of the
 * second". Otherwise any extra work shows twice, as more time in the function that does it and
 * as exactly as much less time in the wait. Compile with -DTRACE_IDLE to trace the wait too.
 */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define REQUESTS_PER_TICK 8
#define TICK_NS 10000000L

static unsigned char payload[4096];
static volatile unsigned long sink;

static const char *fault_kind = "none";
static const char *fault_func = "";
static long fault_amount = 1;
static int fault_on = 0;

/* Test scaffolding, not server functions: not instrumented. */
__attribute__((no_instrument_function)) static long amount_for(const char *func,
                                                               const char *kind)
{
    if (fault_on && strcmp(fault_kind, kind) == 0 && strcmp(fault_func, func) == 0)
        return fault_amount;
    return kind[0] == 'b' ? 0 : 1;
}

__attribute__((no_instrument_function)) static void maybe_block(const char *func)
{
    long us = amount_for(func, "block");
    if (us > 0) {
        struct timespec ts = {0, us * 1000L};
        nanosleep(&ts, NULL);
    }
}

/* Not instrumented, and inlined even at -O0 (so CPU samples land in the caller too): the work
 * of the function calling it is that function's own. */
__attribute__((no_instrument_function, always_inline)) static inline unsigned long
mix(unsigned long h, unsigned long v)
{
    return (h ^ v) * 0x100000001b3UL;
}

void parse_request(int id)
{
    unsigned long h = 0xcbf29ce484222325UL;
    long n = amount_for("parse_request", "work");
    for (long r = 0; r < n; r++)
        for (int i = 0; i < 64; i++)
            h = mix(h, (unsigned long)(id + i));
    maybe_block("parse_request");
    sink += h;
}

void lookup_object(int id)
{
    unsigned long h = (unsigned long)id;
    long n = amount_for("lookup_object", "work");
    for (long r = 0; r < n; r++)
        for (int i = 0; i < 256; i++)
            h = mix(h, payload[(id * 31 + i) % sizeof payload]);
    maybe_block("lookup_object");
    sink += h;
}

void checksum_payload(int id)
{
    unsigned long h = (unsigned long)id;
    long n = amount_for("checksum_payload", "work");
    for (long r = 0; r < n; r++)
        for (size_t i = 0; i < sizeof payload; i++)
            h = mix(h, payload[i]);
    maybe_block("checksum_payload");
    sink += h;
}

void write_reply(int id)
{
    unsigned long h = (unsigned long)id;
    long n = amount_for("write_reply", "work");
    for (long r = 0; r < n; r++)
        for (int i = 0; i < 128; i++)
            h = mix(h, (unsigned long)i);
    maybe_block("write_reply");
    sink += h;
}

void handle_request(int id)
{
    long parses = amount_for("parse_request", "calls");
    for (long i = 0; i < parses; i++)
        parse_request(id);
    long lookups = amount_for("lookup_object", "calls");
    for (long i = 0; i < lookups; i++)
        lookup_object(id);
    long sums = amount_for("checksum_payload", "calls");
    for (long i = 0; i < sums; i++)
        checksum_payload(id);
    long replies = amount_for("write_reply", "calls");
    for (long i = 0; i < replies; i++)
        write_reply(id);
}

/* Sleeps until the next tick deadline (absolute, so lateness does not accumulate). */
#ifndef TRACE_IDLE
__attribute__((no_instrument_function))
#endif
void wait_tick(struct timespec *next)
{
    next->tv_nsec += TICK_NS;
    if (next->tv_nsec >= 1000000000L) {
        next->tv_nsec -= 1000000000L;
        next->tv_sec += 1;
    }
    while (clock_nanosleep(CLOCK_REALTIME, TIMER_ABSTIME, next, NULL) != 0) {
    }
}

int main(int argc, char **argv)
{
    if (argc != 2 && argc != 6) {
        fprintf(stderr, "usage: %s SECONDS [work|block|calls FUNCTION AMOUNT AFTER]\n", argv[0]);
        return 2;
    }
    double seconds = atof(argv[1]);
    double after = 0;
    if (argc == 6) {
        fault_kind = argv[2];
        fault_func = argv[3];
        fault_amount = atol(argv[4]);
        after = atof(argv[5]);
    }
    for (size_t i = 0; i < sizeof payload; i++)
        payload[i] = (unsigned char)(i * 7 + 3);
    struct timespec start, next;
    clock_gettime(CLOCK_REALTIME, &start);
    /* Ticks on multiples of 10 ms of wall-clock time, like the peers. */
    next.tv_sec = start.tv_sec;
    next.tv_nsec = start.tv_nsec / TICK_NS * TICK_NS;
    long ticks = (long)(seconds * 1e9 / TICK_NS);
    int id = 0;
    for (long t = 0; t < ticks; t++) {
        fault_on = argc == 6 && t * (double)TICK_NS / 1e9 >= after;
        for (int r = 0; r < REQUESTS_PER_TICK; r++)
            handle_request(id++);
        wait_tick(&next);
    }
    printf("served %d requests\n", id);
    fflush(stdout);
    exit(0);
}
