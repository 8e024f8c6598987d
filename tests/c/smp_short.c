/* A short-lived process: burns a few milliseconds in short_burn and exits (sampler tests:
 * processes that live less than a drain round are still named). Usage: smp_short STEPS. */
#include <stdlib.h>

static volatile unsigned long short_sink;

__attribute__((noinline)) void short_burn(unsigned long n)
{
    unsigned long x = short_sink;
    for (unsigned long i = 0; i < n; i++)
        x = x * 6364136223846793005UL + 3;
    short_sink = x;
}

int main(int argc, char **argv)
{
    short_burn(argc > 1 ? strtoul(argv[1], 0, 10) : 1000000);
    return 0;
}
