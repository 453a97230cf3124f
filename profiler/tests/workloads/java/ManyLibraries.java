// Loads every native library of DIRECTORY (the first argument) with System.load, as a program
// using many JNI libraries does once the JVM runs (each mapped below libjvm.so, so listed before
// it in the process's maps), then works as Shares does for SECONDS (the second). Prints "ready"
// once they are all loaded.
import java.io.File;
import java.util.Arrays;

public class ManyLibraries {
    public static void main(String[] args) throws Exception {
        File[] libraries = new File(args[0]).listFiles((dir, name) -> name.endsWith(".so"));
        Arrays.sort(libraries);
        for (File library : libraries) {
            System.load(library.getAbsolutePath());
        }
        System.out.println("ready");
        System.out.flush();
        Shares.main(new String[] {args[1]});
    }
}
