// The 60/30/10 workload of split.c in C++: each leaf is reached through templates and a
// std::function call:  main -> burn -> run_round -> outer<L> -> middle<L> -> [std::function]
// -> inner<L> -> Leaf<N>::hot.
//
// With PROGRESS=1, reports completed rounds (see progress.h).
//
// usage: split-cpp [SECONDS]   (0 or absent: until killed)
#include <chrono>
#include <cstdlib>
#include <functional>

extern "C" {
#include "progress.h"
}

#define NOINLINE __attribute__((noinline))
#define BARRIER() __asm__ volatile("" ::: "memory")

static volatile unsigned long sink;

template <int Id>
struct Leaf {
    NOINLINE static void hot(unsigned long units) {
        unsigned long x = sink;
        for (unsigned long i = 0; i < units * 100000UL; i++) {
            x = x * 6364136223846793005UL + 1442695040888963407UL;
            __asm__ volatile("" : "+r"(x));
        }
        sink = x;
        BARRIER();
    }
};
using LeafA = Leaf<0>;
using LeafB = Leaf<1>;
using LeafC = Leaf<2>;

template <typename L>
NOINLINE void inner(unsigned long units) {
    L::hot(units);
    BARRIER();
}

template <typename L>
NOINLINE void middle(const std::function<void(unsigned long)> &call, unsigned long units) {
    call(units);
    BARRIER();
}

template <typename L>
NOINLINE void outer(unsigned long units) {
    std::function<void(unsigned long)> call = inner<L>;
    middle<L>(call, units);
    BARRIER();
}

NOINLINE void run_round() {
    outer<LeafA>(6);
    outer<LeafB>(3);
    outer<LeafC>(1);
    progress_add(1);
    BARRIER();
}

NOINLINE void burn(double seconds) {
    auto stop = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
    while (seconds <= 0 || std::chrono::steady_clock::now() < stop) run_round();
    BARRIER();
}

int main(int argc, char **argv) {
    progress_start();
    burn(argc > 1 ? std::atof(argv[1]) : 0);
    BARRIER();
    return 0;
}
