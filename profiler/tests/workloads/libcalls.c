// Calls a cheap libc function through the PLT in a loop: a good share of the samples land in
// the stub. Also the source of the PLT fixtures (tests/fixtures/plt, for src/plt.rs):
//
// calls:     gcc -O2 -fno-builtin -o calls libcalls.c
// calls-ibt: gcc -O2 -fno-builtin -fcf-protection=full -Wl,-z,ibtplt -o calls-ibt libcalls.c
//
// usage: libcalls [SECONDS]
#include <stdlib.h>
#include <time.h>

int main(int argc, char **argv) {
    double seconds = argc > 1 ? atof(argv[1]) : 1;
    volatile int v = -5;
    long sum = 0;
    time_t end = time(0) + (time_t)seconds;
    while (time(0) < end)
        for (int i = 0; i < 1000000; i++)
            sum += abs(v);
    return sum == 1;
}
