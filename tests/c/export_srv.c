/* A small "server" for the export tests (tests/tests/export.rs): `export_srv REQUESTS WAIT_MS`
 * handles REQUESTS requests (each: parse once, lookup twice, each lookup checksums three
 * times), then spins WAIT_MS in disk_wait (a node with a slow disk waits longer). Functions are
 * noinline and noipa (no clones renamed .constprop or .isra), so call counts and names are
 * exact at any optimisation level. */
#include <stdlib.h>
#include <time.h>

#define NOINLINE __attribute__((noinline, noipa))

static volatile long sink;

NOINLINE void checksum(int n) {
    for (int i = 0; i < n; i++) sink += i;
}

NOINLINE void lookup(int key) {
    for (int i = 0; i < 3; i++) checksum(8 + (key & 3));
}

NOINLINE void parse(int req) { sink ^= req; }

NOINLINE void handle(int req) {
    parse(req);
    lookup(req);
    lookup(req + 1);
}

NOINLINE void disk_wait(long ms) {
    struct timespec a, b;
    clock_gettime(CLOCK_MONOTONIC, &a);
    do {
        sink++;
        clock_gettime(CLOCK_MONOTONIC, &b);
    } while ((b.tv_sec - a.tv_sec) * 1000 + (b.tv_nsec - a.tv_nsec) / 1000000 < ms);
}

int main(int argc, char **argv) {
    int requests = argc > 1 ? atoi(argv[1]) : 100;
    long wait_ms = argc > 2 ? atol(argv[2]) : 10;
    for (int i = 0; i < requests; i++) handle(i);
    disk_wait(wait_ms);
    return 0;
}
