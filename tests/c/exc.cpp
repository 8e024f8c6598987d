// C++ exceptions through instrumented code (tests/tests/tracer_data.rs). Built with
// g++ -finstrument-functions; c_middle comes from exc_mid.c, compiled as C (no cleanups: its
// exit hook is not called when an exception passes through it).
//
//   exc N   N rounds of cpp_outer → c_middle → thrower_cb → thrower; even rounds throw from
//           thrower, caught in main. Prints "caught N/2".
#include <cstdio>
#include <cstdlib>
#include <stdexcept>

extern "C" void c_middle(void (*cb)(int), int i);

__attribute__((noinline)) void thrower(int i) {
    if (i % 2 == 0) throw std::runtime_error("even");
}
extern "C" __attribute__((noinline)) void thrower_cb(int i) { thrower(i); }
__attribute__((noinline)) void cpp_outer(int i) { c_middle(thrower_cb, i); }

int main(int argc, char **argv) {
    int n = argc > 1 ? atoi(argv[1]) : 10, caught = 0;
    for (int i = 0; i < n; i++) {
        try {
            cpp_outer(i);
        } catch (const std::exception &) {
            caught++;
        }
    }
    printf("caught %d\n", caught);
    return 0;
}
