// The native half of java/Mixed.java: Mixed.nativeSpin spins in C (c_spin), then calls back
// Mixed.callback in Java with the same count.
#include <jni.h>

static volatile unsigned long sink;

__attribute__((noinline)) static void c_spin(jlong n) {
    for (jlong i = 0; i < n; i++)
        sink += (unsigned long)(i * i) % 7;
}

JNIEXPORT jlong JNICALL Java_Mixed_nativeSpin(JNIEnv *env, jclass mixed, jlong n) {
    c_spin(n);
    jmethodID callback = (*env)->GetStaticMethodID(env, mixed, "callback", "(J)J");
    jlong total = callback ? (*env)->CallStaticLongMethod(env, mixed, callback, n) : 0;
    // Not a tail call: this frame stays under the Java it calls.
    sink += (unsigned long)total;
    return total;
}
