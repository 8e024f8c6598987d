/*
 * culprit.h — the C API of libculprit_rt.so, culprit's function-call tracing runtime.
 *
 * Tracing needs no code change: compile the program with -finstrument-functions and either
 *
 *   link the runtime:   gcc -finstrument-functions prog.c -o prog -lculprit_rt
 *                       (with -L<dir> -Wl,-rpath,<dir> if it is not installed system-wide), or
 *   inject it:          LD_PRELOAD=/path/to/libculprit_rt.so ./prog
 *                       (what `culprit record -- ./prog` does for you; glibc's own no-op
 *                       __cyg_profile_func_enter/exit are interposed).
 *
 * Profiles go to $CULPRIT_DIR/<node>/trace-<pid>-<start_ns>.cul (CULPRIT_DIR defaults to
 * ./culprit-data, the node to CULPRIT_NODE or the host name), one record per
 * CULPRIT_INTERVAL_MS (default 1000 ms). CULPRIT_INCLUDE / CULPRIT_EXCLUDE take comma-separated
 * glob patterns on function names.
 *
 * The functions below are optional. Calling them needs the program linked with
 * -lculprit_rt; a program that must also run without the runtime can declare them weak and
 * test for NULL:
 *
 *   #pragma weak culprit_flush
 *   ...
 *   if (culprit_flush) culprit_flush();
 *
 * Keeping functions out of the trace: mark them __attribute__((no_instrument_function)) (or
 * compile files with -finstrument-functions-exclude-file-list=... /
 * -finstrument-functions-exclude-function-list=...). Do this for tiny hot helpers whose
 * tracing would cost more than they do, and for code that must not call the hooks (a custom
 * malloc needs nothing: the hooks never allocate). Or leave the build alone and exclude them
 * at run time with CULPRIT_EXCLUDE (cheaper than tracing, but not free).
 *
 * The runtime also defines _exit() and _Exit() (they come first in the symbol lookup when
 * the runtime is linked or preloaded): they write the interval in progress and the end
 * marker, as exit() does, then end the process as glibc's do. A crash or abort() loses at most
 * the last 100 ms of calls. Under secure execution (a set-user-id program run by another
 * user) the runtime does nothing. See docs/security.md.
 *
 * Return codes: 0 success; -1 the runtime is not tracing this process (not loaded with data
 * written, set-up failed, or the program is exiting); other negative values as documented per
 * function. No function here is async-signal-safe except culprit_version and
 * culprit_is_active.
 */
#ifndef CULPRIT_H
#define CULPRIT_H

#ifdef __cplusplus
extern "C" {
#endif

/* Version of the runtime this header belongs to ("MAJOR.MINOR.PATCH"). */
#define CULPRIT_VERSION "0.1.0"

/* The runtime's version string, e.g. "0.1.0" (static storage; never NULL). Compare with
 * CULPRIT_VERSION to detect a header/library mismatch. */
const char *culprit_version(void);

/* 1 if the runtime is tracing this process, 0 if not. */
int culprit_is_active(void);

/* Writes what the current interval has counted so far to the data file now and waits (up to
 * 5 s) until it is written. The interval's remainder is written at its end; both records are
 * flagged partial and readers add them up. Returns 0, -1 (not tracing) or -2 (timed out). */
int culprit_flush(void);

/* Stops tracing calls in the calling thread until culprit_resume(). Nests: n pauses need n
 * resumes. Functions that are running when tracing pauses are accounted normally if they
 * return after it resumes; ones that return while paused are counted as unwound calls that
 * end when the runtime notices (as calls left by longjmp are). Returns 0 or -1. */
int culprit_pause(void);

/* Undoes one culprit_pause() in the calling thread. Returns 0, -1 (not tracing) or -2 (this
 * thread is not paused). */
int culprit_resume(void);

/* Moves this process's data to node `name` ($CULPRIT_DIR/<name>/): the current file is ended
 * and a new one started there (its Info names the old one). For programs that learn their
 * node identity at run time. `name` must be 1..64 bytes of [A-Za-z0-9._-], not starting with
 * '.' or '_'. Waits (up to 5 s) for the switch. Returns 0, -1 (not tracing), -2 (invalid
 * name) or -3 (timed out). */
int culprit_set_node(const char *name);

/* The hooks gcc's -finstrument-functions calls; defined by the runtime. Never call them. */
void __cyg_profile_func_enter(void *fn, void *call_site) __attribute__((no_instrument_function));
void __cyg_profile_func_exit(void *fn, void *call_site) __attribute__((no_instrument_function));

#ifdef __cplusplus
}
#endif

#endif /* CULPRIT_H */
