// alpha, beta and gamma take 60%, 30% and 10% of the work, each round calling them, and they
// the same spin 6, 3 and 1 times, until SECONDS (the first argument) have passed. With
// PROGRESS=1 in the environment, prints "SECONDS ROUNDS" about every 100 ms (the benchmarks read
// its speed from them).
public class Shares {
    static volatile long sink;

    static long spin(long n) {
        long total = 0;
        for (long i = 0; i < n; i++) {
            total += i * i % 7;
        }
        return total;
    }

    static void alpha() {
        for (int i = 0; i < 6; i++) {
            sink += spin(1000);
        }
    }

    static void beta() {
        for (int i = 0; i < 3; i++) {
            sink += spin(1000);
        }
    }

    static void gamma() {
        sink += spin(1000);
    }

    public static void main(String[] args) {
        boolean progress = "1".equals(System.getenv("PROGRESS"));
        long start = System.nanoTime();
        long end = start + (long) (Double.parseDouble(args[0]) * 1e9);
        long rounds = 0;
        long shown = start;
        for (long now = start; now < end; now = System.nanoTime()) {
            for (int i = 0; i < 100; i++) {
                alpha();
                beta();
                gamma();
            }
            rounds += 100;
            if (progress && now - shown >= 100_000_000L) {
                System.out.printf("%.3f %d%n", (now - start) / 1e9, rounds);
                System.out.flush();
                shown = now;
            }
        }
    }
}
