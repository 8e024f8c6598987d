/* Call-counting hooks for benches/realworld/run: linked into one build of the workload (never
 * instrumented themselves), they count each thread's instrumented calls so that the workload
 * can print how many calls its timed phase made (kv.c, benches/tracer/genmix.py). */
#include <stdint.h>

static __thread uint64_t calls;

__attribute__((no_instrument_function)) void __cyg_profile_func_enter(void *fn, void *site) {
  (void)fn;
  (void)site;
  calls++;
}

__attribute__((no_instrument_function)) void __cyg_profile_func_exit(void *fn, void *site) {
  (void)fn;
  (void)site;
}

__attribute__((no_instrument_function)) uint64_t bench_thread_calls(void) { return calls; }
