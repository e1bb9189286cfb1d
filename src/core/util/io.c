#include "core/util/io.h"

#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

#include "core/util/error.h"

#define IO_PIECE ((size_t)1 << 30)

/* One loop for the four transfers: op moves at most n bytes at `at` (or the position) and
 * returns what it moved, as write/pwrite/pread do. */
typedef ssize_t (*io_op)(int fd, void *p, size_t n, uint64_t at);

static int transfer(int fd, char *p, size_t bytes, uint64_t at, io_op op) {
    while (bytes > 0) {
        ssize_t r = op(fd, p, bytes > IO_PIECE ? IO_PIECE : bytes, at);
        if (r < 0) {
            if (errno == EINTR) continue;
            return -1;
        }
        if (r == 0) {
            errno = EIO; /* a device that takes nothing, or a file shorter than promised */
            return -1;
        }
        p += r;
        at += (uint64_t)r;
        bytes -= (size_t)r;
    }
    return 0;
}

static ssize_t op_write(int fd, void *p, size_t n, uint64_t at) {
    (void)at;
    return write(fd, p, n);
}
static ssize_t op_pwrite(int fd, void *p, size_t n, uint64_t at) {
    return pwrite(fd, p, n, (off_t)at);
}
static ssize_t op_pread(int fd, void *p, size_t n, uint64_t at) {
    return pread(fd, p, n, (off_t)at);
}

int io_write_all(int fd, const void *data, size_t bytes) {
    return transfer(fd, (char *)data, bytes, 0, op_write);
}
int io_pwrite_all(int fd, const void *data, size_t bytes, uint64_t at) {
    return transfer(fd, (char *)data, bytes, at, op_pwrite);
}
int io_pread_all(int fd, void *data, size_t bytes, uint64_t at) {
    return transfer(fd, data, bytes, at, op_pread);
}

int io_fsync_path(const char *path) {
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return -1;
    int rc = fsync(fd);
    int e = errno;
    close(fd);
    errno = e;
    return rc;
}

int io_fsync_close(int fd, const char *path, int rc, char *err, size_t errlen) {
    if (rc == 0 && fsync(fd) != 0) {
        err_set(err, errlen, "%s: fsync failed: %s", path, strerror(errno));
        rc = -1;
    }
    if (close(fd) != 0 && rc == 0) {
        err_set(err, errlen, "%s: close failed: %s", path, strerror(errno));
        rc = -1;
    }
    return rc;
}

/* fsync of the directory that holds `path` ("/" for "/x", "." for a bare name). */
static void fsync_parent(const char *path) {
    char parent[PATH_MAX];
    snprintf(parent, sizeof parent, "%s", path);
    char *slash = strrchr(parent, '/');
    if (slash == parent) parent[1] = 0;
    else if (slash) *slash = 0;
    else snprintf(parent, sizeof parent, ".");
    io_fsync_path(parent);
}

int io_mkdir_p(const char *dir, int sync_parents, char *err, size_t errlen) {
    char buf[PATH_MAX];
    int n = snprintf(buf, sizeof buf, "%s", dir);
    if (n < 0 || (size_t)n >= sizeof buf) {
        err_set(err, errlen, "%s: path too long", dir);
        return -1;
    }
    size_t len = strlen(buf);
    while (len > 1 && buf[len - 1] == '/') buf[--len] = 0;
    for (size_t i = 1; i <= len; i++) {
        if (buf[i] != '/' && buf[i] != 0) continue;
        char saved = buf[i];
        buf[i] = 0;
        if (mkdir(buf, 0755) == 0) {
            if (sync_parents) fsync_parent(buf);
        } else if (errno != EEXIST) {
            err_set(err, errlen, "%s: cannot create directory: %s", buf, strerror(errno));
            return -1;
        } else {
            struct stat sb;
            if (stat(buf, &sb) != 0 || !S_ISDIR(sb.st_mode)) {
                err_set(err, errlen, "%s: exists and is not a directory", buf);
                return -1;
            }
        }
        buf[i] = saved;
    }
    return 0;
}

int io_map_file(const char *path, const void **map, size_t *size, char *err, size_t errlen) {
    *map = NULL;
    *size = 0;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        err_set(err, errlen, "%s: cannot open: %s", path, strerror(errno));
        return -1;
    }
    struct stat st;
    const int stat_rc = fstat(fd, &st);
    if (stat_rc != 0 || !S_ISREG(st.st_mode)) {
        if (stat_rc != 0)
            err_set(err, errlen, "%s: cannot stat: %s", path, strerror(errno));
        else
            err_set(err, errlen, "%s: cannot open: not a regular file", path);
        close(fd);
        return -1;
    }
    if (st.st_size > 0) {
        void *p = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_SHARED, fd, 0);
        if (p == MAP_FAILED) {
            err_set(err, errlen, "%s: cannot mmap: %s", path, strerror(errno));
            close(fd);
            return -1;
        }
        *map = p;
        *size = (size_t)st.st_size;
    }
    close(fd);
    return 0;
}

void io_unmap(const void *map, size_t size) {
    if (map) munmap((void *)map, size);
}

char *io_read_file(const char *path, size_t *len, int *open_failed, const char **why) {
    *open_failed = 0;
    FILE *f = fopen(path, "rb");
    if (!f) {
        *open_failed = 1;
        *why = strerror(errno);
        return NULL;
    }
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap + 1);
    while (buf) {
        n += fread(buf + n, 1, cap - n, f);
        if (n < cap) break;
        cap *= 2;
        char *nb = cap <= SIZE_MAX / 2 ? realloc(buf, cap + 1) : NULL;
        if (!nb) free(buf);
        buf = nb;
    }
    const int read_errno = ferror(f) ? errno : 0;
    fclose(f);
    if (!buf || read_errno) {
        *why = buf ? strerror(read_errno) : "out of memory";
        free(buf);
        return NULL;
    }
    buf[n] = 0;
    *len = n;
    return buf;
}

static int rm_one(const char *path, const struct stat *sb, int type, struct FTW *ftw) {
    (void)sb;
    (void)type;
    (void)ftw;
    return remove(path) == 0 || errno == ENOENT ? 0 : -1;
}

int io_rm_rf(const char *path) {
    struct stat sb;
    if (lstat(path, &sb) != 0) return errno == ENOENT ? 0 : -1;
    return nftw(path, rm_one, 16, FTW_DEPTH | FTW_PHYS);
}
