// alpha, beta and gamma take 60%, 30% and 10% of the work, each round calling them, and they
// the same spin 6, 3 and 1 times, until SECONDS (the first argument) have passed.
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
        long end = System.nanoTime() + (long) (Double.parseDouble(args[0]) * 1e9);
        while (System.nanoTime() < end) {
            for (int i = 0; i < 100; i++) {
                alpha();
                beta();
                gamma();
            }
        }
    }
}
