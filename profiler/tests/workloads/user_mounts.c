// Mounts a user makes in a user and mount namespace of their own (which needs no privilege),
// and a library run from them: what the profiler must not take for the kernel's file systems.
// Each mode prints "ready" once it runs the library (plugin.c's plugin_work) from its mount.
//
// usage: user_mounts MODE DIR SECONDS [LIBRARY [SECOND_LIBRARY]]
//   tmpfs    LIBRARY copied into a tmpfs at DIR/t and run from there
//   overlay  LIBRARY copied into DIR/lower, run from an overlay of it at DIR/merged, mounted
//            without `userxattr`
//   bind     that overlay bound at DIR/bound, LIBRARY run from there
//   reuse    as tmpfs, until a line comes on standard input; then the tmpfs is unmounted, the
//            overlay (of SECOND_LIBRARY) mounted at DIR/t, where it takes the tmpfs's device
//            number, and SECOND_LIBRARY run from there: prints "reused" if it took the number,
//            "not reused" if not
//   fuse-overlay  SECOND_LIBRARY is fuse_stall (a FUSE daemon holding root's requests), run at
//            DIR/fuse serving LIBRARY; an overlay of it at DIR/merged, LIBRARY run from there
//   fuse-bind     that FUSE file system bound at DIR/bound, LIBRARY run from there
//   copied   LIBRARY run from DIR/merged, as root mounted it before the namespaces were made
//   churn    processes in new namespaces, each mounting a tmpfs, running 2 ms, sleeping 1 s and
//            leaving, 300 at a time
#define _GNU_SOURCE
#include <dlfcn.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

static void die(const char *what) {
    perror(what);
    exit(1);
}

static void write_file(const char *path, const char *text) {
    int fd = open(path, O_WRONLY);
    if (fd < 0 || write(fd, text, strlen(text)) != (ssize_t)strlen(text)) die(path);
    close(fd);
}

// Root of a user namespace of its own, with a mount namespace of its own.
static void own_namespaces(void) {
    uid_t uid = getuid();
    gid_t gid = getgid();
    if (unshare(CLONE_NEWUSER | CLONE_NEWNS) != 0) die("unshare");
    char map[64];
    snprintf(map, sizeof map, "0 %u 1", uid);
    write_file("/proc/self/uid_map", map);
    write_file("/proc/self/setgroups", "deny");
    snprintf(map, sizeof map, "0 %u 1", gid);
    write_file("/proc/self/gid_map", map);
    if (mount("none", "/", NULL, MS_REC | MS_PRIVATE, NULL) != 0) die("mount --make-rprivate /");
}

static void copy(const char *from, const char *to) {
    int in = open(from, O_RDONLY), out = open(to, O_WRONLY | O_CREAT | O_TRUNC, 0755);
    if (in < 0 || out < 0) die("copy");
    char buf[65536];
    ssize_t n;
    while ((n = read(in, buf, sizeof buf)) > 0)
        if (write(out, buf, n) != n) die("copy");
    close(in);
    close(out);
}

static void make_dir(const char *dir, const char *name, char *path) {
    sprintf(path, "%s/%s", dir, name);
    if (mkdir(path, 0755) != 0) die(path);
}

// An overlay of DIR/lower (LIBRARY copied in as its base name) at `at`, without userxattr.
static void overlay(const char *dir, const char *library, const char *at) {
    char lower[4096], upper[4096], work[4096], copied[8192], options[16384];
    make_dir(dir, "lower", lower);
    make_dir(dir, "upper", upper);
    make_dir(dir, "work", work);
    snprintf(copied, sizeof copied, "%s/%s", lower, strrchr(library, '/') + 1);
    copy(library, copied);
    snprintf(options, sizeof options, "lowerdir=%s,upperdir=%s,workdir=%s", lower, upper, work);
    if (mount("overlay", at, "overlay", 0, options) != 0) die("mount overlay");
}

// Runs plugin_work of `at`/LIBRARY's base name until `stop`, or while `running` says so.
static void *load(const char *at, const char *library) {
    char path[8192];
    snprintf(path, sizeof path, "%s/%s", at, strrchr(library, '/') + 1);
    void *handle = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!handle) {
        fprintf(stderr, "dlopen: %s\n", dlerror());
        exit(1);
    }
    return handle;
}

static void run(void *handle, double stop) {
    void (*work)(unsigned long) = (void (*)(unsigned long))dlsym(handle, "plugin_work");
    while (now() < stop) work(100000);
}

static volatile sig_atomic_t switched;

static void on_input(int signal) {
    (void)signal;
    switched = 1;
}

static void churn(const char *dir, double stop) {
    char mount_point[4096];
    make_dir(dir, "t", mount_point);
    printf("ready\n");
    fflush(stdout);
    int running = 0;
    while (now() < stop) {
        while (running < 300) {
            pid_t child = fork();
            if (child == 0) {
                own_namespaces();
                if (mount("tmpfs", mount_point, "tmpfs", 0, "size=64k") != 0) die("mount tmpfs");
                double end = now() + 0.002;
                volatile unsigned long x = 0;
                while (now() < end) x++;
                sleep(1);
                _exit(0);
            }
            if (child > 0) running++;
            else break;
        }
        if (wait(NULL) > 0) running--;
    }
    while (wait(NULL) > 0) {}
}

int main(int argc, char **argv) {
    if (argc < 4) {
        fprintf(stderr, "usage: user_mounts MODE DIR SECONDS [LIBRARY [SECOND_LIBRARY]]\n");
        return 2;
    }
    const char *mode = argv[1], *dir = argv[2];
    double stop = now() + atof(argv[3]);
    if (strcmp(mode, "churn") == 0) {
        churn(dir, stop);
        return 0;
    }
    if (argc < 5) return 2;
    const char *library = argv[4];
    own_namespaces();
    char at[4096];
    if (strcmp(mode, "overlay") == 0 || strcmp(mode, "bind") == 0) {
        make_dir(dir, "merged", at);
        overlay(dir, library, at);
        if (strcmp(mode, "bind") == 0) {
            char bound[4096];
            make_dir(dir, "bound", bound);
            if (mount(at, bound, NULL, MS_BIND, NULL) != 0) die("mount --bind");
            strcpy(at, bound);
        }
    } else if (strcmp(mode, "copied") == 0) {
        snprintf(at, sizeof at, "%s/merged", dir);
    } else if (strncmp(mode, "fuse-", 5) == 0) {
        if (argc < 6) return 2;
        char fuse[4096], log[4096];
        make_dir(dir, "fuse", fuse);
        snprintf(log, sizeof log, "%s/daemon.log", dir);
        if (fork() == 0) {
            prctl(PR_SET_PDEATHSIG, SIGKILL);
            execl(argv[5], argv[5], fuse, library, log, "in-namespace", (char *)NULL);
            die("exec fuse_stall");
        }
        char served[8192];
        snprintf(served, sizeof served, "%s/lib.so", fuse);
        struct stat st;
        double give_up = now() + 10;
        while (stat(served, &st) != 0) {
            if (now() > give_up) die("the FUSE file system was not mounted");
            usleep(20000);
        }
        if (strcmp(mode, "fuse-overlay") == 0) {
            char upper[4096], work[4096], options[16384];
            make_dir(dir, "upper", upper);
            make_dir(dir, "work", work);
            make_dir(dir, "merged", at);
            snprintf(options, sizeof options, "lowerdir=%s,upperdir=%s,workdir=%s", fuse, upper, work);
            if (mount("overlay", at, "overlay", 0, options) != 0) die("mount overlay");
        } else {
            make_dir(dir, "bound", at);
            if (mount(fuse, at, NULL, MS_BIND, NULL) != 0) die("mount --bind");
        }
        library = "/lib.so";
    } else if (strcmp(mode, "tmpfs") == 0 || strcmp(mode, "reuse") == 0) {
        make_dir(dir, "t", at);
        if (mount("tmpfs", at, "tmpfs", 0, "size=64m") != 0) die("mount tmpfs");
        char copied[8192];
        snprintf(copied, sizeof copied, "%s/%s", at, strrchr(library, '/') + 1);
        copy(library, copied);
    } else {
        return 2;
    }
    void *handle = load(at, library);
    printf("ready\n");
    fflush(stdout);
    if (strcmp(mode, "reuse") != 0) {
        run(handle, stop);
        return 0;
    }
    if (argc < 6) return 2;
    const char *second = argv[5];
    // A line on standard input switches: read by a thread of its own would be simpler, but a
    // signal from a reader keeps the process single-threaded (its one stack is what is sampled).
    pid_t reader = fork();
    if (reader == 0) {
        char line[16];
        if (fgets(line, sizeof line, stdin)) kill(getppid(), SIGUSR1);
        _exit(0);
    }
    signal(SIGUSR1, on_input);
    void (*work)(unsigned long) = (void (*)(unsigned long))dlsym(handle, "plugin_work");
    while (!switched && now() < stop) work(100000);
    struct stat before, after;
    if (stat(at, &before) != 0) die("stat");
    // The reader maps the library too, until it is gone.
    waitpid(reader, NULL, 0);
    dlclose(handle);
    if (umount(at) != 0) die("umount tmpfs");
    char base[4096];
    snprintf(base, sizeof base, "%s/o", dir);
    if (mkdir(base, 0755) != 0) die(base);
    overlay(base, second, at);
    if (stat(at, &after) != 0) die("stat");
    printf(after.st_dev == before.st_dev ? "reused\n" : "not reused\n");
    fflush(stdout);
    run(load(at, second), stop);
    return 0;
}
