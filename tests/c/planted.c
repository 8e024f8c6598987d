/* A hostile process for the sampler (tests/tests/security_planted.rs; docs/security.md): run
 * as another user, it maps a library from a directory it owns, replaces the library's path with
 * a FIFO (or a link to one), and keeps burning CPU inside the library. A sampler that resolves
 * this process's images and opens the path as root blocks in open() for ever (no writer ever
 * comes), unless it checks what it opens.
 *
 * Usage: planted LIB SECONDS [fifo|link]
 *   prints "ready" once the path is replaced, then spins in the library for SECONDS. */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

int main(int argc, char **argv)
{
    if (argc < 3)
        return 2;
    const char *lib = argv[1];
    double seconds = atof(argv[2]);
    int link = argc > 3 && strcmp(argv[3], "link") == 0;
    void *h = dlopen(lib, RTLD_NOW);
    if (!h) {
        fprintf(stderr, "dlopen: %s\n", dlerror());
        return 1;
    }
    void (*spin)(unsigned long) = (void (*)(unsigned long))dlsym(h, "planted_spin");
    if (!spin)
        return 1;
    if (unlink(lib) != 0)
        return 1;
    if (link) {
        char fifo[4096];
        snprintf(fifo, sizeof fifo, "%s.fifo", lib);
        if (mkfifo(fifo, 0644) != 0 || symlink(fifo, lib) != 0)
            return 1;
    } else if (mkfifo(lib, 0644) != 0) {
        return 1;
    }
    printf("ready\n");
    fflush(stdout);
    struct timespec t0, t;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    do {
        spin(2000000);
        clock_gettime(CLOCK_MONOTONIC, &t);
    } while ((t.tv_sec - t0.tv_sec) + (t.tv_nsec - t0.tv_nsec) / 1e9 < seconds);
    return 0;
}
