// A FUSE file system that answers everyone but root: a user's daemon, mounted with
// `allow_other`, that holds every request a process of root's makes for ever (root's reads of
// its files then wait as long as the daemon likes), whoever's credentials it comes with (an
// overlay reads its layers with its mounter's). It serves three files: `lib.so`, the bytes of
// LIBRARY, `data`, a megabyte of zeros, and `hold`, a megabyte whose reads it holds whoever
// asks. Each request held is logged to LOG (`held 0 OPERATION`, `held hold read`). With `in-namespace`, it is mounted by the daemon itself, as root of a user
// namespace (fusermount3's auto_unmount is not for those).
//
// usage: fuse_stall MOUNTPOINT LIBRARY LOG [in-namespace]
//        (runs in the foreground until unmounted or killed)
#define FUSE_USE_VERSION 31
#include <errno.h>
#include <fuse.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static char *library;
static size_t library_len;
static FILE *log_file;
static const size_t data_len = 1 << 20;

// Whether process `pid` (in the daemon's pid namespace) is not the daemon's user's: a process
// whose user namespace the daemon cannot see (a request's uid is the credentials it comes with,
// as the daemon's user namespace maps them, and /proc shows ids as the reader's namespace maps
// them: neither tells root's processes from the user's once the daemon runs in a namespace).
static int roots(pid_t pid) {
    char path[64], theirs[64] = "", own[64] = "";
    snprintf(path, sizeof path, "/proc/%d/ns/user", (int)pid);
    if (readlink(path, theirs, sizeof theirs - 1) < 0) return 1;
    if (readlink("/proc/self/ns/user", own, sizeof own - 1) < 0) return 1;
    return strcmp(theirs, own) != 0;
}

// Holds the request for ever if a process of root's made it.
static void hold_root(const char *operation) {
    if (!roots(fuse_get_context()->pid)) return;
    fprintf(log_file, "held 0 %s\n", operation);
    fflush(log_file);
    for (;;) pause();
}

static int fs_getattr(const char *path, struct stat *st, struct fuse_file_info *fi) {
    (void)fi;
    hold_root("getattr");
    memset(st, 0, sizeof *st);
    if (strcmp(path, "/") == 0) {
        st->st_mode = S_IFDIR | 0755;
        st->st_nlink = 2;
    } else if (strcmp(path, "/lib.so") == 0 || strcmp(path, "/data") == 0 || strcmp(path, "/hold") == 0) {
        st->st_mode = S_IFREG | 0755;
        st->st_nlink = 1;
        st->st_size = strcmp(path, "/lib.so") == 0 ? library_len : data_len;
    } else {
        return -ENOENT;
    }
    st->st_uid = getuid();
    st->st_gid = getgid();
    return 0;
}

static int fs_readdir(const char *path, void *buf, fuse_fill_dir_t fill, off_t offset, struct fuse_file_info *fi,
                      enum fuse_readdir_flags flags) {
    (void)offset, (void)fi, (void)flags;
    hold_root("readdir");
    if (strcmp(path, "/") != 0) return -ENOENT;
    fill(buf, ".", NULL, 0, 0);
    fill(buf, "..", NULL, 0, 0);
    fill(buf, "lib.so", NULL, 0, 0);
    fill(buf, "data", NULL, 0, 0);
    fill(buf, "hold", NULL, 0, 0);
    return 0;
}

static int fs_open(const char *path, struct fuse_file_info *fi) {
    (void)fi;
    hold_root("open");
    return strcmp(path, "/lib.so") == 0 || strcmp(path, "/data") == 0 || strcmp(path, "/hold") == 0 ? 0 : -ENOENT;
}

static int fs_read(const char *path, char *buf, size_t size, off_t offset, struct fuse_file_info *fi) {
    (void)fi;
    hold_root("read");
    if (strcmp(path, "/hold") == 0) {
        fprintf(log_file, "held hold read\n");
        fflush(log_file);
        for (;;) pause();
    }
    int data = strcmp(path, "/data") == 0;
    size_t len = data ? data_len : library_len;
    if ((size_t)offset >= len) return 0;
    if (offset + size > len) size = len - offset;
    if (data) memset(buf, 0, size);
    else memcpy(buf, library + offset, size);
    return (int)size;
}

static const struct fuse_operations operations = {
    .getattr = fs_getattr,
    .readdir = fs_readdir,
    .open = fs_open,
    .read = fs_read,
};

int main(int argc, char **argv) {
    if (argc != 4 && argc != 5) {
        fprintf(stderr, "usage: fuse_stall MOUNTPOINT LIBRARY LOG [in-namespace]\n");
        return 2;
    }
    FILE *lib = fopen(argv[2], "rb");
    if (!lib) return 1;
    fseek(lib, 0, SEEK_END);
    library_len = ftell(lib);
    fseek(lib, 0, SEEK_SET);
    library = malloc(library_len);
    if (fread(library, 1, library_len, lib) != library_len) return 1;
    fclose(lib);
    log_file = fopen(argv[3], "a");
    if (!log_file) return 1;
    // Foreground, many threads (a held request holds one), everyone's reads allowed, no cached
    // attributes or names, so that root's lookups reach the daemon.
    char *options = argc == 5 ? "allow_other,attr_timeout=0,entry_timeout=0"
                              : "allow_other,auto_unmount,attr_timeout=0,entry_timeout=0";
    char *args[] = {argv[0], "-f", "-o", options, argv[1], NULL};
    return fuse_main(5, args, &operations, NULL);
}
