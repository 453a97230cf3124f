// Java calling native code calling Java: viaNative calls the native method nativeSpin (in
// mixed_jni.c, loaded from the second argument), which spins in C and then calls back into
// Java's callback(long), for SECONDS (the first argument). callback is overloaded: its frames
// need its signature.
public class Mixed {
    static volatile long sink;

    static native long nativeSpin(long n);

    static long callback(long n) {
        long total = 0;
        for (long i = 0; i < n; i++) {
            total += i * i % 7;
        }
        return total;
    }

    static int callback(int n) {
        return (int) callback((long) n);
    }

    static void viaNative() {
        sink += nativeSpin(200_000);
    }

    public static void main(String[] args) {
        System.load(args[1]);
        long end = System.nanoTime() + (long) (Double.parseDouble(args[0]) * 1e9);
        while (System.nanoTime() < end) {
            viaNative();
        }
    }
}
