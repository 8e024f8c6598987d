/* Rotation test program: ROUNDS rounds, each calling leaf() PER times and then sleeping
 * SLEEP_MS, so a run spans many intervals (and, with CULPRIT_ROTATE=1s, many pieces) with
 * an exactly known number of calls: leaf ROUNDS*PER, round ROUNDS, main 1. */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static volatile unsigned long sink;

void leaf(unsigned long i) { sink += i; }

void round_(long per) {
    for (long i = 0; i < per; i++)
        leaf((unsigned long)i);
}

static void sleep_ms(long ms) {
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0) {
    }
}

int main(int argc, char **argv) {
    long rounds = argc > 1 ? atol(argv[1]) : 100;
    long per = argc > 2 ? atol(argv[2]) : 1000;
    long ms = argc > 3 ? atol(argv[3]) : 100;
    for (long r = 0; r < rounds; r++) {
        round_(per);
        sleep_ms(ms);
    }
    printf("done %ld\n", rounds * per);
    return 0;
}
