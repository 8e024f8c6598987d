/* The C frame of tests/c/exc.cpp: compiled as C, so an exception passing through it runs no
 * cleanup and its exit hook is never called. */
void c_middle(void (*cb)(int), int i);
void c_middle(void (*cb)(int), int i) { cb(i); }
