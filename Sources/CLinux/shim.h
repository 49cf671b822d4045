#ifndef CONSENTLEDGER_CLINUX_SHIM_H
#define CONSENTLEDGER_CLINUX_SHIM_H

#include <errno.h>
#include <fcntl.h>
#include <linux/stat.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/sysmacros.h>
#include <unistd.h>

/* Declared by <fcntl.h> only with _GNU_SOURCE. */
#ifndef AT_EMPTY_PATH
#define AT_EMPTY_PATH 0x1000
#endif

/// The type and identity of a file, asked of the kernel without its times: `statx(2)` with the
/// mask STATX_TYPE | STATX_INO. On Linux 6.13 and later, a `stat` that reads a file's times
/// marks them as seen, and the file's next write then takes a fine-grained time, which dirties
/// its inode: an `fdatasync` that would have written the data alone writes the inode too.
/// `path` is followed unless `flags` holds AT_SYMLINK_NOFOLLOW. Returns 0, or -1 with errno set.
static inline int consentledger_identity(int dirfd, const char *path, int flags,
                                         unsigned int *mode, unsigned long long *device,
                                         unsigned long long *inode) {
    struct statx sx;
    if (syscall(SYS_statx, dirfd, path, flags, STATX_TYPE | STATX_INO, &sx) == 0) {
        *mode = sx.stx_mode;
        *device = ((unsigned long long)sx.stx_dev_major << 32) | sx.stx_dev_minor;
        *inode = sx.stx_ino;
        return 0;
    }
    /* A kernel without statx (before 4.11), or a sandbox that refuses it: the plain stat, with
       the same answers (and the times marked as seen, as before). */
    if (errno != ENOSYS && errno != EPERM) return -1;
    struct stat st;
    if (fstatat(dirfd, path, &st, flags) != 0) return -1;
    *mode = st.st_mode;
    *device = ((unsigned long long)major(st.st_dev) << 32) | minor(st.st_dev);
    *inode = st.st_ino;
    return 0;
}

/// The same of the file the open descriptor `fd` is open on.
static inline int consentledger_descriptor_identity(int fd, unsigned int *mode, unsigned long long *device,
                                                    unsigned long long *inode) {
    return consentledger_identity(fd, "", AT_EMPTY_PATH, mode, device, inode);
}

#endif
