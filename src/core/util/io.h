/* File helpers shared by the checkpoint writers and readers, safetensors and the tools: whole
 * transfers that survive short writes and EINTR, and the fsyncs that make a rename durable.
 * The transfer functions return 0, or -1 with errno set (EIO when the file ended or the
 * device took nothing), and leave the message to the caller, who knows what it was writing;
 * the others write their message into err (error.h). */
#ifndef MEGADLM_CORE_UTIL_IO_H
#define MEGADLM_CORE_UTIL_IO_H

#include <stddef.h>
#include <stdint.h>

/* All `bytes` of data to fd at its position / at file offset `at`; reads likewise. Transfers
 * go in pieces of at most 1 GiB (what Linux moves in one call anyway). */
int io_write_all(int fd, const void *data, size_t bytes);
int io_pwrite_all(int fd, const void *data, size_t bytes, uint64_t at);
int io_pread_all(int fd, void *data, size_t bytes, uint64_t at);

/* fsync of a file or directory by name (a directory's fsync makes the names in it durable). */
int io_fsync_path(const char *path);

/* The end of writing a file: fsync (only when rc == 0, i.e. nothing failed before) and close.
 * Returns rc, or -1 with "<path>: fsync failed: ..." / "<path>: close failed: ..." in err when
 * rc was 0 and one of them failed. */
int io_fsync_close(int fd, const char *path, int rc, char *err, size_t errlen);

/* mkdir -p with mode 0755, refusing a path component that exists and is not a directory. With
 * sync_parents, fsyncs the parent of every directory it creates (checkpoints: the new names
 * survive a crash). 0, or -1 with "<dir>: cannot create directory: ..." or "<dir>: exists and
 * is not a directory" in err. */
int io_mkdir_p(const char *dir, int sync_parents, char *err, size_t errlen);

/* rm -rf path (a link is removed, not followed): 0 when path is gone, -1 (errno) otherwise. */
int io_rm_rf(const char *path);

/* Reads a whole file into a NUL-terminated buffer of *len bytes (malloc'ed; free it). NULL with
 * the reason in *why: the system's (strerror) when it cannot be opened (*open_failed = 1) or
 * read (a directory: "Is a directory"), or "out of memory". The callers word the message. */
char *io_read_file(const char *path, size_t *len, int *open_failed, const char **why);

/* Maps a whole regular file read-only (the dataset and safetensors readers). *map is NULL for
 * an empty file; unmap with io_unmap. 0, or -1 with "<path>: cannot open: ..." (also "not a
 * regular file"), "<path>: cannot stat: ..." or "<path>: cannot mmap: ..." in err. */
int io_map_file(const char *path, const void **map, size_t *size, char *err, size_t errlen);
void io_unmap(const void *map, size_t size);

#endif
