// A recursion DEPTH (the second argument) calls deep, spinning at its end, round after round
// until SECONDS (the first argument) have passed: compiled, each call is a frame of its own
// (down's result is used after the call, so it is no tail call), all in one nmethod.
public class Deep {
    static volatile long sink;

    static long down(int depth, long seed) {
        if (depth == 0) {
            long total = 0;
            for (int i = 0; i < 200000; i++) {
                total += (i ^ seed) % 7;
            }
            return total;
        }
        return down(depth - 1, seed + 1) + (depth & 1);
    }

    public static void main(String[] args) {
        long end = System.nanoTime() + Long.parseLong(args[0]) * 1_000_000_000L;
        int depth = Integer.parseInt(args[1]);
        while (System.nanoTime() < end) {
            sink += down(depth, sink);
        }
    }
}
