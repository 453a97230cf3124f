/* A program that poses as CPython 3.11 (it exports what an interpreter is recognised by) whose
 * eval loop, `_PyEval_EvalFrameDefault`, is a spinning loop followed by JUMPS direct jumps
 * (never taken) into PARTS parts of code of PART_BYTES each, each part with an unwind entry of
 * its own, as the parts GCC splits off the loop are: each jump lands at another place, so that
 * a reader finds hundreds of thousands of landings, in one part or in thousands. It spins in its
 * eval loop, on a thread of its own, for SECONDS. Prints "ready" once it does.
 *
 * usage: fake_eval_loop SECONDS   (built with -DJUMPS=N -DPARTS=N -DPART_BYTES=N, -rdynamic) */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#define TEXT(x) #x
#define STRING(x) TEXT(x)

char _PyRuntime[4096];
char PyCode_Type[512];
char PyUnicode_Type[512];
const uint32_t Py_Version = 0x030b07f0;
const char *PyUnicode_AsUTF8(void *unicode) { return unicode ? "" : 0; }

void _PyEval_EvalFrameDefault(void);

__asm__(
    ".text\n"
    ".globl _PyEval_EvalFrameDefault\n"
    ".type _PyEval_EvalFrameDefault, @function\n"
    "_PyEval_EvalFrameDefault:\n"
    ".cfi_startproc\n"
    "1: jmp 1b\n"
    ".set landing, 0\n"
    ".rept " STRING(JUMPS) "\n"
    ".byte 0xe9\n"
    ".long parts + (landing % " STRING(PARTS) ") * " STRING(PART_BYTES) " + 1 + (landing / " STRING(PARTS)
    ") % (" STRING(PART_BYTES) " - 2) - (. + 4)\n"
    ".set landing, landing + 1\n"
    ".endr\n"
    ".cfi_endproc\n"
    ".size _PyEval_EvalFrameDefault, . - _PyEval_EvalFrameDefault\n"
    "parts:\n"
    ".rept " STRING(PARTS) "\n"
    ".cfi_startproc\n"
    ".fill " STRING(PART_BYTES) ", 1, 0x90\n"
    ".cfi_endproc\n"
    ".endr\n");

static void *spin(void *unused) {
    (void)unused;
    _PyEval_EvalFrameDefault();
    return NULL;
}

int main(int argc, char **argv) {
    if (argc != 2) return 2;
    pthread_t thread;
    if (pthread_create(&thread, NULL, spin, NULL) != 0) return 1;
    printf("ready\n");
    fflush(stdout);
    sleep(atoi(argv[1]));
    return 0;
}
