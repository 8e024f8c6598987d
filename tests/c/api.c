/* Compiles against include/culprit.h and calls every function of the C API
 * (tests/tests/tracer_api.rs checks what it prints and what the runtime wrote). */
#include <stdio.h>
#include <string.h>

#include "culprit.h"

static volatile long sink;
__attribute__((noinline)) void counted(void) { sink++; }
__attribute__((noinline)) void while_paused(void) { sink++; }
__attribute__((noinline)) void on_new_node(void) { sink++; }
__attribute__((no_instrument_function, noinline)) void never_traced(void) { sink++; }

int main(void) {
    printf("version %s %d\n", culprit_version(), strcmp(culprit_version(), CULPRIT_VERSION) == 0);
    printf("active %d\n", culprit_is_active());
    for (int i = 0; i < 10; i++) counted();
    for (int i = 0; i < 10; i++) never_traced();
    printf("resume-unpaused %d\n", culprit_resume());
    printf("pause %d\n", culprit_pause());
    for (int i = 0; i < 7; i++) while_paused();
    printf("resume %d\n", culprit_resume());
    printf("flush %d\n", culprit_flush());
    printf("bad-node %d %d\n", culprit_set_node("bad/name"), culprit_set_node(NULL));
    printf("set-node %d\n", culprit_set_node("api-node2"));
    for (int i = 0; i < 3; i++) on_new_node();
    return 0;
}
