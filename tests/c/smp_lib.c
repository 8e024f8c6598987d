/* A shared library with a CPU-burning function (sampler tests: samples in a library are
 * attributed to the library image and its function). */
static volatile unsigned long lib_sink;

__attribute__((noinline)) void lib_spin(unsigned long n)
{
    unsigned long x = lib_sink;
    for (unsigned long i = 0; i < n; i++)
        x = x * 6364136223846793005UL + 1;
    lib_sink = x;
}
