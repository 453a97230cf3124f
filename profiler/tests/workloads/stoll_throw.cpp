// Threads that throw std::invalid_argument from std::stoll("") in a loop and catch it: samples
// land inside libgcc's unwinder (_Unwind_RaiseException and the static functions it calls),
// whose frames a DWARF unwinder must walk to reach __cxa_throw, the thrower and the thread's
// start.
//
// usage: stoll_throw [SECONDS] [THREADS]   (defaults: 3 s, 2 threads)
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

static std::atomic<unsigned long> caught{0};

__attribute__((noinline)) static long parse_empty() {
    return std::stoll(std::string());
}

__attribute__((noinline)) static void worker_loop(double seconds) {
    auto stop = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
    while (std::chrono::steady_clock::now() < stop) {
        try {
            parse_empty();
        } catch (const std::invalid_argument &) {
            caught.fetch_add(1, std::memory_order_relaxed);
        }
    }
}

int main(int argc, char **argv) {
    double seconds = argc > 1 ? std::atof(argv[1]) : 3;
    int threads = argc > 2 ? std::atoi(argv[2]) : 2;
    std::vector<std::thread> workers;
    for (int i = 0; i < threads; i++) workers.emplace_back(worker_loop, seconds);
    for (auto &t : workers) t.join();
    return caught.load() == 0;
}
