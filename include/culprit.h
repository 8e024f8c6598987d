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
 * function. No function here is async-signal-safe except culprit_version, culprit_is_active
 * and the I/O marks (culprit_io_admit, _issue, _complete, _callback).
 */
#ifndef CULPRIT_H
#define CULPRIT_H

#include <stdint.h>

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

/* Writes what the current interval has counted so far (and the I/O layer events marked so far)
 * to the data file now and waits (up to 5 s) until it is written. The interval's remainder is written at its end; both records are
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

/* ---- I/O layers ------------------------------------------------------------------------------
 *
 * Mark where a request crosses the boundaries of the layers your program owns (seed 003, Lu &
 * Shen: ADMIT when a layer receives a request from the layer above, ISSUE when it passes it to
 * the layer below, COMPLETE when the layer below says it is done, CALLBACK when the layer tells
 * the layer above). `culprit diagnose` derives, per layer and second, latency, time per stage,
 * request sizes, sequential runs, concurrency, idleness and throughput; compares them across the
 * peer nodes (the `layers` metric) and, bottom-up, names each anomalous node's lowest layer
 * whose characteristics stray from the peers' (docs/layers.md).
 *
 *   int disk = culprit_io_layer("io-queue");             // once, at start-up
 *   culprit_io_admit(disk, req_id, CULPRIT_IO_READ, file_id, offset, len);
 *   culprit_io_issue(disk, req_id, CULPRIT_IO_READ, file_id, offset, len);
 *   ... the request runs below ...
 *   culprit_io_complete(disk, req_id, CULPRIT_IO_READ, file_id, offset, done);
 *   culprit_io_callback(disk, req_id, CULPRIT_IO_READ, file_id, offset, done);
 *
 * `req` identifies the request among the layer's outstanding ones in this process (a pointer
 * or a counter); `obj` the file or object (0 if unknown: sequential runs are found per object),
 * `offset` its position (CULPRIT_IO_NO_OFFSET if none), `bytes` the size asked (ADMIT, ISSUE)
 * or done (COMPLETE, CALLBACK). A layer may mark fewer than four events (a request is then
 * outstanding from its first mark to its last). Marks are cheap (a timestamp and a few stores
 * into a per-thread buffer: no lock, no system call, no allocation except a thread's first mark)
 * and async-signal-safe; they return 0, -1 (not tracing), -2 (no such layer) or -3 (dropped:
 * the thread's buffer was full, or a signal handler interrupted a mark; counted in the data).
 *
 * With CULPRIT_IO=1 the runtime also marks the C library's boundary itself: read, write, pread,
 * pwrite, preadv, pwritev on files (layer "libc") and aio_read, aio_write, aio_return (layer
 * "libc-aio"). */

#define CULPRIT_IO_OTHER 0 /* op: neither (metadata, sync) */
#define CULPRIT_IO_READ 1
#define CULPRIT_IO_WRITE 2
#define CULPRIT_IO_NO_OFFSET UINT64_MAX

/* The id of the layer called `name` (1..64 bytes, no control characters), registering it on
 * first use; the same name gives the same id. Register your layers top-down: the first is the
 * highest (nearest the application); they all lie above the C library. Not async-signal-safe.
 * Returns the id (>= 0), -2 (bad name) or -4 (64 layers are named already). Works whether or
 * not the process is traced. */
int culprit_io_layer(const char *name);

/* One event of request `req` at `layer`; see above. */
int culprit_io_admit(int layer, uint64_t req, int op, uint64_t obj, uint64_t offset,
                     uint64_t bytes);
int culprit_io_issue(int layer, uint64_t req, int op, uint64_t obj, uint64_t offset,
                     uint64_t bytes);
int culprit_io_complete(int layer, uint64_t req, int op, uint64_t obj, uint64_t offset,
                        uint64_t bytes);
int culprit_io_callback(int layer, uint64_t req, int op, uint64_t obj, uint64_t offset,
                        uint64_t bytes);

/* Requests (seed 004, CloudDiag): mark where a request begins and ends on a thread, and
 * `culprit diagnose --requests` finds the anomalous method and node from the latencies of the
 * calls made in sampled requests, with no training (docs/requests.md).
 *
 *   culprit_request_begin(req_id, REQ_READ, 0);     // the thread that receives the request
 *   ... handle it: traced calls are recorded while a sampled request is open ...
 *   culprit_request_end(req_id);
 *
 *   // a part handed off to another thread (or process, or node), with its own id:
 *   culprit_request_begin(part_id, REQ_READ, req_id); // parent = the root request's id
 *   ... culprit_request_end(part_id);
 *
 * `id` identifies the request among those of the program (seed 004 §IV: a node number and a
 * counter); `type` is the program's kind of request (requests are grouped by call tree, the
 * type is reported with them); `parent` is 0 for a request's root and the root request's id
 * for a part handed off elsewhere (seed 004's MID), so the parts form one call tree. One
 * request in CULPRIT_REQUEST_SAMPLE (default 10) is recorded, decided by a hash of the root
 * id, so all parts of a request are sampled alike. One sampled request may be open per
 * thread at a time.
 *
 * culprit_request_begin returns 1 (sampled: recorded), 0 (not sampled), -1 (not tracing),
 * -3 (dropped: the thread's buffer was full) or -5 (another sampled request is open on this
 * thread). culprit_request_end returns 0, -1 (not tracing) or -2 (another sampled request is
 * open on this thread). Unsampled requests cost a hash; while a sampled one is open, traced
 * calls take the runtime's general path (docs/performance.md, "Requests"). Not
 * async-signal-safe. */
int culprit_request_begin(uint64_t id, uint64_t type, uint64_t parent);
int culprit_request_end(uint64_t id);

/* The hooks gcc's -finstrument-functions calls; defined by the runtime. Never call them. */
void __cyg_profile_func_enter(void *fn, void *call_site) __attribute__((no_instrument_function));
void __cyg_profile_func_exit(void *fn, void *call_site) __attribute__((no_instrument_function));

#ifdef __cplusplus
}
#endif

#endif /* CULPRIT_H */
