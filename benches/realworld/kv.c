/* A key-value / OLTP workload over SQLite's C API, for benches/realworld/run.
 *
 *   kv DB_PATH ROWS OPS [THREADS]
 *
 * Each thread opens its own database (DB_PATH.<thread>, WAL journal, synchronous=NORMAL; put it
 * on a tmpfs so the disk is not measured), loads ROWS rows (key, a 100-byte value, a counter)
 * in transactions of 100 prepared inserts, then runs OPS operations in transactions of 10, a
 * fixed pseudo-random mix:
 *   60 % point select by key, 15 % range scan (20 rows by key), 15 % update by key,
 *    5 % insert of a new key, 5 % delete by key.
 * The random sequence is fixed (seeded per thread), so every run does the same work.
 *
 * Prints one line on stderr for the timed phase (the operations, not the load):
 *   ops wall_ns thread_cpu_ns process_cpu_ns calls
 * wall = the slowest thread's, thread CPU summed over threads; process CPU = all threads of
 * the process (the tracer's flusher included) from start to end, load included; calls = instrumented calls made by the timed phase, or 0 when the
 * program is not linked with benches/realworld/count.c (the call-counting hooks).
 * Exits non-zero with one line on stderr on any SQLite error.
 */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "sqlite3.h"

/* Defined by count.c when linked in (the counting build); absent otherwise. */
extern uint64_t bench_thread_calls(void) __attribute__((weak));

static const char *db_path;
static long rows, ops;

struct result {
  long ops;
  uint64_t wall_ns, cpu_ns, calls;
};

static uint64_t now_ns(clockid_t c) {
  struct timespec t;
  clock_gettime(c, &t);
  return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
}

static void die(sqlite3 *db, const char *what) {
  fprintf(stderr, "kv: %s: %s\n", what, db ? sqlite3_errmsg(db) : "out of memory");
  exit(1);
}

static void exec(sqlite3 *db, const char *sql) {
  char *err = 0;
  if (sqlite3_exec(db, sql, 0, 0, &err) != SQLITE_OK) {
    fprintf(stderr, "kv: %s: %s\n", sql, err ? err : "?");
    exit(1);
  }
}

static sqlite3_stmt *prepare(sqlite3 *db, const char *sql) {
  sqlite3_stmt *s = 0;
  if (sqlite3_prepare_v3(db, sql, -1, SQLITE_PREPARE_PERSISTENT, &s, 0) != SQLITE_OK) die(db, sql);
  return s;
}

/* Runs a statement to completion; returns the rows it produced. */
static long step_all(sqlite3 *db, sqlite3_stmt *s) {
  long n = 0;
  int rc;
  while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
    /* Read the columns as a client would. */
    const unsigned char *v = sqlite3_column_text(s, 1);
    n += 1 + (sqlite3_column_int64(s, 0) < 0) + (v == 0);
  }
  if (rc != SQLITE_DONE) die(db, sqlite3_sql(s));
  sqlite3_reset(s);
  sqlite3_clear_bindings(s);
  return n;
}

static uint64_t xorshift(uint64_t *x) {
  *x ^= *x << 13;
  *x ^= *x >> 7;
  *x ^= *x << 17;
  return *x;
}

static void value(char *buf, uint64_t r) {
  static const char al[] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
  for (int i = 0; i < 100; i++) buf[i] = al[(r >> (i % 58)) % 62 ^ (i & 7)];
  buf[100] = 0;
}

static void *worker(void *arg) {
  long id = (long)arg;
  struct result *res = calloc(1, sizeof *res);
  char path[4096], buf[128];
  snprintf(path, sizeof path, "%s.%ld", db_path, id);
  unlink(path);
  snprintf(buf, sizeof buf, "%s-wal", path);
  unlink(buf);
  snprintf(buf, sizeof buf, "%s-shm", path);
  unlink(buf);
  sqlite3 *db;
  if (sqlite3_open_v2(path, &db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX, 0) !=
      SQLITE_OK)
    die(db, path);
  exec(db, "PRAGMA journal_mode=WAL");
  exec(db, "PRAGMA synchronous=NORMAL");
  exec(db, "PRAGMA cache_size=-16384");
  exec(db, "CREATE TABLE kv(k INTEGER PRIMARY KEY, v TEXT NOT NULL, n INTEGER NOT NULL DEFAULT 0)");
  exec(db, "CREATE INDEX kv_v ON kv(substr(v, 1, 8))");

  sqlite3_stmt *ins = prepare(db, "INSERT OR REPLACE INTO kv(k, v, n) VALUES(?1, ?2, 0)");
  sqlite3_stmt *get = prepare(db, "SELECT n, v FROM kv WHERE k = ?1");
  sqlite3_stmt *scan = prepare(db, "SELECT k, v FROM kv WHERE k >= ?1 ORDER BY k LIMIT 20");
  sqlite3_stmt *upd = prepare(db, "UPDATE kv SET n = n + 1, v = ?2 WHERE k = ?1");
  sqlite3_stmt *del = prepare(db, "DELETE FROM kv WHERE k = ?1");
  sqlite3_stmt *begin = prepare(db, "BEGIN");
  sqlite3_stmt *commit = prepare(db, "COMMIT");

  uint64_t x = 88172645463325252ull + (uint64_t)id * 7919;
  for (long i = 0; i < rows; i++) {
    if (i % 100 == 0) step_all(db, begin);
    value(buf, xorshift(&x));
    sqlite3_bind_int64(ins, 1, i * 2);
    sqlite3_bind_text(ins, 2, buf, 100, SQLITE_STATIC);
    step_all(db, ins);
    if (i % 100 == 99 || i == rows - 1) step_all(db, commit);
  }

  long next_key = rows * 2 + 1;
  uint64_t calls0 = bench_thread_calls ? bench_thread_calls() : 0;
  uint64_t w0 = now_ns(CLOCK_MONOTONIC), c0 = now_ns(CLOCK_THREAD_CPUTIME_ID);
  long seen = 0;
  for (long i = 0; i < ops; i++) {
    if (i % 10 == 0) step_all(db, begin);
    uint64_t r = xorshift(&x);
    long key = (long)((r >> 8) % (uint64_t)(rows * 2));
    unsigned pick = (unsigned)(r % 100);
    sqlite3_stmt *s;
    if (pick < 60) {
      s = get;
    } else if (pick < 75) {
      s = scan;
    } else if (pick < 90) {
      s = upd;
      value(buf, r);
      sqlite3_bind_text(s, 2, buf, 100, SQLITE_TRANSIENT);
    } else if (pick < 95) {
      s = ins;
      key = next_key++;
      value(buf, r);
      sqlite3_bind_text(s, 2, buf, 100, SQLITE_TRANSIENT);
    } else {
      s = del;
    }
    sqlite3_bind_int64(s, 1, key);
    seen += step_all(db, s);
    if (i % 10 == 9 || i == ops - 1) step_all(db, commit);
  }
  res->wall_ns = now_ns(CLOCK_MONOTONIC) - w0;
  res->cpu_ns = now_ns(CLOCK_THREAD_CPUTIME_ID) - c0;
  res->calls = bench_thread_calls ? bench_thread_calls() - calls0 : 0;
  res->ops = ops;
  if (seen == 0) {
    fprintf(stderr, "kv: no rows read\n");
    exit(1);
  }

  sqlite3_stmt *all[] = {ins, get, scan, upd, del, begin, commit};
  for (size_t i = 0; i < sizeof all / sizeof *all; i++) sqlite3_finalize(all[i]);
  sqlite3_close(db);
  unlink(path);
  snprintf(buf, sizeof buf, "%s-wal", path);
  unlink(buf);
  snprintf(buf, sizeof buf, "%s-shm", path);
  unlink(buf);
  return res;
}

int main(int argc, char **argv) {
  if (argc < 4) {
    fprintf(stderr, "usage: kv DB_PATH ROWS OPS [THREADS]\n");
    return 2;
  }
  db_path = argv[1];
  rows = atol(argv[2]);
  ops = atol(argv[3]);
  long threads = argc > 4 ? atol(argv[4]) : 1;
  if (rows < 1 || ops < 1 || threads < 1 || threads > 64) {
    fprintf(stderr, "kv: ROWS and OPS must be > 0, THREADS 1..64\n");
    return 2;
  }
  pthread_t t[64];
  uint64_t p0 = now_ns(CLOCK_PROCESS_CPUTIME_ID);
  for (long i = 0; i < threads; i++) pthread_create(&t[i], 0, worker, (void *)i);
  struct result sum = {0};
  for (long i = 0; i < threads; i++) {
    struct result *r;
    pthread_join(t[i], (void **)&r);
    sum.ops += r->ops;
    sum.wall_ns = r->wall_ns > sum.wall_ns ? r->wall_ns : sum.wall_ns;
    sum.cpu_ns += r->cpu_ns;
    sum.calls += r->calls;
    free(r);
  }
  uint64_t pcpu = now_ns(CLOCK_PROCESS_CPUTIME_ID) - p0;
  fprintf(stderr, "%ld %llu %llu %llu %llu\n", sum.ops, (unsigned long long)sum.wall_ns,
          (unsigned long long)sum.cpu_ns, (unsigned long long)pcpu, (unsigned long long)sum.calls);
  return 0;
}
