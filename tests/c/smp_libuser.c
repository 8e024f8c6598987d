/* Calls lib_spin from libsmp_lib.so. Usage: smp_libuser ROUNDS. */
#include <stdlib.h>

void lib_spin(unsigned long n);

int main(int argc, char **argv)
{
    long rounds = argc > 1 ? atol(argv[1]) : 100;
    for (long r = 0; r < rounds; r++)
        lib_spin(400000);
    return 0;
}
