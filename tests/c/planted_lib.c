/* The library tests/c/planted.c maps and then replaces by a FIFO (tests/tests/security_planted.rs):
 * one function that burns CPU, so the sampler's samples land in this image and it must name
 * them. Built with -shared -fPIC. */
volatile unsigned long planted_sink;

__attribute__((noinline)) void planted_spin(unsigned long n)
{
    for (unsigned long i = 0; i < n; i++)
        planted_sink += i ^ (planted_sink >> 3);
}
