/*
 * Preloaded into QEMU with dirtylog.c: QEMU 7.2 opens a memory-backend-file read-write even to
 * map it copy-on-write (share=off), and a jailed QEMU may neither write nor even read the memory
 * image or template it restores from (another uid's file, 0600, or bound read-only into its
 * root). So QEMU's open of the file named by AENV_DIRTY_LOG_MEMORY answers a copy of the
 * read-only descriptor the node agent opened for it (AENV_MEMORY_FD, inherited): a private
 * mapping of it is still writable, its writes stay in the process, and the file is never
 * written. Any other open is QEMU's own.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef int (*openat_fn)(int, const char *, int, ...);

static int opened(int dirfd, const char *path, int flags, mode_t mode)
{
    static openat_fn real;
    const char *memory = getenv("AENV_DIRTY_LOG_MEMORY");
    const char *fd_text = getenv("AENV_MEMORY_FD");
    if (memory != NULL && fd_text != NULL && !(flags & O_CREAT) && strcmp(path, memory) == 0)
        return fcntl(atoi(fd_text), F_DUPFD_CLOEXEC, 0);
    if (real == NULL)
        real = (openat_fn)dlsym(RTLD_NEXT, "openat");
    return real(dirfd, path, flags, mode);
}

static mode_t mode_of(int flags, va_list args)
{
    return (flags & (O_CREAT | O_TMPFILE)) ? (mode_t)va_arg(args, int) : 0;
}

int open(const char *path, int flags, ...)
{
    va_list args;
    mode_t mode;
    va_start(args, flags);
    mode = mode_of(flags, args);
    va_end(args);
    return opened(AT_FDCWD, path, flags, mode);
}

int open64(const char *path, int flags, ...) __attribute__((alias("open")));

/* What _FORTIFY_SOURCE makes of a two-argument open whose flags are not constant (QEMU's is). */
int __open_2(const char *path, int flags)
{
    return opened(AT_FDCWD, path, flags, 0);
}

int __open64_2(const char *path, int flags) __attribute__((alias("__open_2")));
