/* Burns CPU in two functions in a 2:1 proportion of work (sampler tests).
 * Usage: smp_ratio ROUNDS. Each round does 2*N steps in burn_two and N steps in burn_one; the
 * steps cost the same (one multiply-add each, different constants so the compiler cannot merge
 * the functions). */
#include <stdlib.h>

static volatile unsigned long sink;

__attribute__((noinline)) void burn_two(unsigned long n)
{
    unsigned long x = sink;
    for (unsigned long i = 0; i < n; i++)
        x = x * 6364136223846793005UL + 1442695040888963407UL;
    sink = x;
}

__attribute__((noinline)) void burn_one(unsigned long n)
{
    unsigned long x = sink;
    for (unsigned long i = 0; i < n; i++)
        x = x * 2862933555777941757UL + 3037000493UL;
    sink = x;
}

int main(int argc, char **argv)
{
    long rounds = argc > 1 ? atol(argv[1]) : 100;
    const unsigned long n = 200000;
    for (long r = 0; r < rounds; r++) {
        burn_two(2 * n);
        burn_one(n);
    }
    return 0;
}
