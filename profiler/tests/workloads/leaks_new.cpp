// Allocates through every form of C++ operator new and delete (plain, array, sized, aligned,
// nothrow) and leaks exactly 1000 blocks of 4096 bytes from leak_one(); everything else is
// freed. Built against libstdc++ (operator new calls malloc) and against an allocator that
// defines operator new itself (tcmalloc), the outstanding set is the same.
//
// usage: leaks_new [ROUNDS]
#include <cstdio>
#include <cstdlib>
#include <new>

struct Block {
    char bytes[4096];
};

struct alignas(64) Aligned {
    char bytes[256];
};

static Block *kept[1000];

// The compiler may drop a new/delete pair whose block nobody looks at; this one is looked at.
template <typename T> T *seen(T *block) {
    asm volatile("" : : "r"(block) : "memory");
    return block;
}

__attribute__((noinline)) Block *leak_one() { return new Block; }

__attribute__((noinline)) void leak_blocks() {
    for (auto &block : kept) block = leak_one();
}

__attribute__((noinline)) void churn(int rounds) {
    for (int round = 0; round < rounds; round++) {
        delete seen(new int(round));
        delete[] seen(new char[100 + round % 50]);
        delete seen(new Aligned);
        delete[] seen(new Aligned[3]);
        delete seen(new (std::nothrow) int(round));
    }
}

int main(int argc, char **argv) {
    int rounds = argc > 1 ? atoi(argv[1]) : 2000;
    churn(rounds);
    leak_blocks();
    churn(rounds);
    std::printf("leaked %zu blocks of %zu bytes\n", sizeof kept / sizeof kept[0], sizeof(Block));
    return 0;
}
