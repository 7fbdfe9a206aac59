/*
 * Preloaded into QEMU (LD_PRELOAD) so the node agent can ask which guest RAM pages were written
 * since it last asked: QEMU 7.2 keeps such a log only inside a migration, and userfaultfd
 * registration only works from inside the process that maps the memory.
 *
 * When QEMU maps the file named by AENV_DIRTY_LOG_MEMORY copy-on-write, this registers the
 * mapping with an asynchronous write-protect userfaultfd (Linux 6.7+: the kernel resolves the
 * faults itself and only records them) and write-protects all of it. The node agent then reads
 * and re-arms the log with the PAGEMAP_SCAN ioctl on /proc/<pid>/pagemap (vmm/dirtylog.py). The
 * descriptor stays open for the life of the process; nothing else of QEMU changes. Any failure
 * leaves the mapping unregistered and the node agent falls back to whole captures.
 *
 * A QEMU waiting for an incoming state has never let its guest run, so nothing reads its RAM:
 * `aenv_remap_ram` (asked for over freeze.c's socket) maps another memory image there in place
 * of the one QEMU mapped, with the same protection and flags, and logs writes to it anew. A VM
 * pre-started on a template's RAM so becomes a fork's child, whose RAM is its parent's capture.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <unistd.h>

/* Linux 6.7 uapi, not in the headers of older distributions. */
#define AENV_UFFD_API 0xAAULL
#define AENV_UFFD_FEATURE_WP_UNPOPULATED (1ULL << 13)
#define AENV_UFFD_FEATURE_WP_ASYNC (1ULL << 15)
#define AENV_UFFDIO_REGISTER_MODE_WP (1ULL << 1)
#define AENV_PM_SCAN_WP_MATCHING (1ULL << 0)
#define AENV_PAGE_IS_WRITTEN (1ULL << 1)
/* Linux 5.11: lets a process without privileges make one (vm.unprivileged_userfaultfd=0), as a
 * jailed QEMU is; asynchronous write-protect never delivers a fault, so it loses nothing. */
#define AENV_UFFD_USER_MODE_ONLY 1

struct aenv_uffdio_api { uint64_t api, features, ioctls; };
struct aenv_uffdio_register { uint64_t start, len, mode, ioctls; };
struct aenv_page_region { uint64_t start, end, categories; };
struct aenv_pm_scan_arg {
    uint64_t size, flags, start, end, walk_end, vec, vec_len, max_pages;
    uint64_t category_inverted, category_mask, category_anyof_mask, return_mask;
};

#define AENV_UFFDIO_API _IOWR(0xAA, 0x3F, struct aenv_uffdio_api)
#define AENV_UFFDIO_REGISTER _IOWR(0xAA, 0x00, struct aenv_uffdio_register)
#define AENV_PAGEMAP_SCAN _IOWR('f', 16, struct aenv_pm_scan_arg)

typedef void *(*mmap_fn)(void *, size_t, int, int, int, off_t);

static int tracked_file(int fd)
{
    const char *path = getenv("AENV_DIRTY_LOG_MEMORY");
    struct stat want, got;
    if (path == NULL || fd < 0 || stat(path, &want) != 0 || fstat(fd, &got) != 0)
        return 0;
    return want.st_dev == got.st_dev && want.st_ino == got.st_ino;
}

static void complain(const char *what)
{
    fprintf(stderr, "aenv dirty log: %s: %s\n", what, strerror(errno));
}

/* Write-protect every page of [start, start + len): from now on the log holds what is written. */
static int arm(uint64_t start, uint64_t len)
{
    struct aenv_page_region regions[64];
    struct aenv_pm_scan_arg scan = {
        .size = sizeof(scan), .flags = AENV_PM_SCAN_WP_MATCHING,
        .start = start, .end = start + len,
        .vec = (uint64_t)(uintptr_t)regions, .vec_len = 64,
        .category_mask = AENV_PAGE_IS_WRITTEN, .return_mask = AENV_PAGE_IS_WRITTEN,
    };
    int pagemap = open("/proc/self/pagemap", O_RDONLY | O_CLOEXEC);
    if (pagemap < 0)
        return -1;
    while (scan.start < scan.end) {
        if (ioctl(pagemap, AENV_PAGEMAP_SCAN, &scan) < 0) {
            close(pagemap);
            return -1;
        }
        scan.start = scan.walk_end;
    }
    close(pagemap);
    return 0;
}

/* The RAM mapping QEMU made of the tracked file (or a remap put there), and its log. */
static struct {
    void *addr;
    size_t len;
    int prot, flags;
    off_t offset;
    int uffd;
} ram = {.uffd = -1};

static mmap_fn real_mmap;

/* Returns the registered descriptor, or -1 (the mapping stays unlogged). */
static int track(void *addr, size_t len)
{
    int uffd = (int)syscall(SYS_userfaultfd, O_CLOEXEC | O_NONBLOCK | AENV_UFFD_USER_MODE_ONLY);
    struct aenv_uffdio_api api = {
        .api = AENV_UFFD_API,
        .features = AENV_UFFD_FEATURE_WP_ASYNC | AENV_UFFD_FEATURE_WP_UNPOPULATED,
    };
    struct aenv_uffdio_register reg = {
        .start = (uint64_t)(uintptr_t)addr, .len = len, .mode = AENV_UFFDIO_REGISTER_MODE_WP,
    };
    if (uffd < 0) {
        complain("userfaultfd");
        return -1;
    }
    if (ioctl(uffd, AENV_UFFDIO_API, &api) < 0) {
        complain("UFFDIO_API (asynchronous write-protect needs Linux 6.7)");
    } else if (ioctl(uffd, AENV_UFFDIO_REGISTER, &reg) < 0) {
        complain("UFFDIO_REGISTER");
    } else if (arm(reg.start, reg.len) < 0) {
        complain("PAGEMAP_SCAN");
    } else {
        return uffd; /* registered: the descriptor lives as long as the mapping */
    }
    close(uffd);
    return -1;
}

static void *mapped(void *addr, size_t len, int prot, int flags, int fd, off_t offset)
{
    void *result;
    if (real_mmap == NULL)
        real_mmap = (mmap_fn)dlsym(RTLD_NEXT, "mmap");
    result = real_mmap(addr, len, prot, flags, fd, offset);
    if (result != MAP_FAILED && (flags & MAP_PRIVATE) && (prot & PROT_WRITE)
        && tracked_file(fd)) {
        ram.addr = result;
        ram.len = len;
        ram.prot = prot;
        ram.flags = flags;
        ram.offset = offset;
        ram.uffd = track(result, len);
    }
    return result;
}

/* Called by freeze.c's thread only, while QEMU waits for an incoming state. Returns 0, or
 * -errno: -ENOENT when no RAM is tracked, -EINVAL for an image smaller than the RAM, -EIO when
 * the new mapping could not be logged. After a failed map the RAM may be gone: the caller must
 * not run that guest. */
int aenv_remap_ram(int fd)
{
    struct stat st;
    if (ram.addr == NULL || real_mmap == NULL)
        return -ENOENT;
    if (fstat(fd, &st) != 0)
        return -errno;
    if (st.st_size < ram.offset + (off_t)ram.len)
        return -EINVAL;
    if (real_mmap(ram.addr, ram.len, ram.prot, ram.flags | MAP_FIXED, fd, ram.offset)
        == MAP_FAILED)
        return -errno;
    if (ram.uffd >= 0)
        close(ram.uffd); /* its registration went with the mapping it replaced */
    ram.uffd = track(ram.addr, ram.len);
    return ram.uffd >= 0 ? 0 : -EIO;
}

void *mmap(void *addr, size_t len, int prot, int flags, int fd, off_t offset)
{
    return mapped(addr, len, prot, flags, fd, offset);
}

void *mmap64(void *addr, size_t len, int prot, int flags, int fd, off_t offset)
{
    return mapped(addr, len, prot, flags, fd, offset);
}
