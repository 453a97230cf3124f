// A Java thread that waits: main calls waitHere, which naps 5 times in Thread.sleep, for SECONDS
// (the first argument).
public class Sleeper {
    static void nap() throws InterruptedException {
        Thread.sleep(10);
    }

    static void waitHere() throws InterruptedException {
        for (int i = 0; i < 5; i++) {
            nap();
        }
    }

    public static void main(String[] args) throws Exception {
        long end = System.nanoTime() + (long) (Double.parseDouble(args[0]) * 1e9);
        while (System.nanoTime() < end) {
            waitHere();
        }
    }
}
