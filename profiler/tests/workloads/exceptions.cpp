// Threads that throw and catch C++ exceptions in a tight loop. Each throw walks the unwind
// tables through dl_iterate_phdr, under the loader lock: where in-process profilers that unwind
// from a signal handler deadlock. Prints its progress every 100 ms: "SECONDS OPERATIONS".
//
// usage: exceptions [SECONDS] [THREADS]   (defaults: 10 s, 2 threads)
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <stdexcept>
#include <thread>
#include <vector>

static std::atomic<unsigned long> operations{0};
static std::atomic<bool> stop{false};

__attribute__((noinline)) static void fail(int depth) {
    if (depth == 0) throw std::runtime_error("expected");
    fail(depth - 1);
    __asm__ volatile("" ::: "memory");
}

static void worker() {
    while (!stop.load(std::memory_order_relaxed)) {
        try {
            fail(3);
        } catch (const std::exception &) {
            operations.fetch_add(1, std::memory_order_relaxed);
        }
    }
}

int main(int argc, char **argv) {
    double seconds = argc > 1 ? std::atof(argv[1]) : 10;
    int threads = argc > 2 ? std::atoi(argv[2]) : 2;
    std::vector<std::thread> workers;
    for (int i = 0; i < threads; i++) workers.emplace_back(worker);
    auto start = std::chrono::steady_clock::now();
    for (;;) {
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
        double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
        std::printf("%.3f %lu\n", elapsed, operations.load());
        std::fflush(stdout);
        if (elapsed >= seconds) break;
    }
    stop = true;
    for (auto &t : workers) t.join();
    return 0;
}
