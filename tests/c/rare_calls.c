/* A server that logs a debug line now and then (issue 31, 5: a node logging 859 lines against
 * its peers' 2 was invisible to a keep rule of 1 s of time per window).
 *
 * Usage: rare_calls SECONDS [LOG_PER_S]
 *
 * Every millisecond it waits for a "request" (wait_request: a 1 ms sleep, so it holds nearly
 * all of the process's wall-clock time and passes any keep rule), serves it (serve_request: a
 * few microseconds of arithmetic), and writes log lines (log_line: a formatted line into a
 * buffer, about a microsecond) at LOG_PER_S lines per second of wall-clock time (default 4).
 * The rate is kept against the clock: a process starved for a while catches up afterwards, so
 * every node writes the same number of lines per second whatever the machine's load. At 1,600
 * lines a second log_line still takes a few ms per second, far below the keep rule.
 *
 * Built with -finstrument-functions and run with libculprit_rt.so preloaded. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static char line[256];
static volatile unsigned long sink;

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

static void wait_request(void)
{
    struct timespec d = {0, 1000000};
    nanosleep(&d, NULL);
}

static unsigned long serve_request(unsigned long id)
{
    unsigned long h = id * 2654435761UL;
    for (int i = 0; i < 200; i++)
        h = (h ^ (h >> 13)) * 0x5bd1e995UL + (unsigned long)i;
    return h;
}

static void log_line(unsigned long n, unsigned long h)
{
    int len = snprintf(line, sizeof line, "debug: request %lu served, hash %lx", n, h);
    sink += (unsigned long)len + (unsigned char)line[len / 2];
}

int main(int argc, char **argv)
{
    double secs = argc > 1 ? atof(argv[1]) : 10.0;
    double rate = argc > 2 ? atof(argv[2]) : 4.0;
    if (secs <= 0 || rate < 0) {
        fprintf(stderr, "usage: rare_calls SECONDS [LOG_PER_S]\n");
        return 2;
    }
    double start = now_s();
    unsigned long served = 0, logged = 0;
    for (;;) {
        double t = now_s() - start;
        if (t >= secs)
            break;
        wait_request();
        unsigned long h = serve_request(++served);
        while ((double)logged < t * rate)
            log_line(++logged, h);
    }
    printf("served %lu, logged %lu\n", served, logged);
    return 0;
}
