/* Built with -rdynamic and stripped (sampler tests): exported_spin stays in .dynsym and keeps
 * its name; hidden_spin is in no symbol table and shows as image+offset.
 * Usage: smp_strip ROUNDS. */
#include <stdlib.h>

static volatile unsigned long strip_sink;

__attribute__((noinline)) void exported_spin(unsigned long n)
{
    unsigned long x = strip_sink;
    for (unsigned long i = 0; i < n; i++)
        x = x * 6364136223846793005UL + 7;
    strip_sink = x;
}

__attribute__((noinline)) static void hidden_spin(unsigned long n)
{
    unsigned long x = strip_sink;
    for (unsigned long i = 0; i < n; i++)
        x = x * 2862933555777941757UL + 11;
    strip_sink = x;
}

int main(int argc, char **argv)
{
    long rounds = argc > 1 ? atol(argv[1]) : 100;
    for (long r = 0; r < rounds; r++) {
        exported_spin(200000);
        hidden_spin(200000);
    }
    return 0;
}
