/* A shared library the tracer tests dlopen: its function must be named in the report. */
__attribute__((noinline)) long plugin_work(long x) { return x * 2 + 1; }
