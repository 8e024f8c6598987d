/* culprit record --sample: burns CPU in a named function for about a second, traced and
 * sampled. Exits 3 so the test can check the exit status is passed through. */
#include <stdio.h>
#include <time.h>

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

volatile unsigned long sink;

__attribute__((noinline)) void spin_here(void)
{
    for (unsigned long i = 0; i < 200000; i++)
        sink += i * i;
}

int main(void)
{
    double end = now() + 1.2;
    while (now() < end)
        spin_here();
    return 3;
}
