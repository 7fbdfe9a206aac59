/*
 * Preloaded into QEMU (LD_PRELOAD) so the node agent can take a frozen copy of a stopped VM: a
 * fork of the QEMU process, whose memory the kernel keeps as it was at the fork (copy-on-write)
 * while the guest runs on. A snapshot then stops the guest only to fork it, and its memory image
 * is read from the copy afterwards (vmm/frozen.py).
 *
 * With AENV_FREEZE_FD naming an inherited unix socket, a thread (all signals blocked) serves it:
 * a one-byte message 'F' asks for a copy, 'R' with a descriptor for a memory image to map over
 * guest RAM before the guest first runs (dirtylog.c, `aenv_remap_ram`; answered 0 or -errno).
 * For a copy, the thread forks the process with a raw
 * clone(CLONE_PARENT), so that no atfork handler of QEMU runs and the copy is the node agent's
 * child, and answers with the copy's pid (or -errno). The copy closes every descriptor, names
 * itself COPY_NAME and sleeps until the agent kills it: it outlives a crash of the agent, whose
 * next run finishes the image from it. The thread ends when the socket closes.
 *
 * QEMU excludes guest RAM from forks (MADV_DONTFORK, against DMA into pages a child would
 * share). Nothing here does DMA, and a copy without guest RAM is of no use: that advice is
 * ignored when the socket is given.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

typedef int (*madvise_fn)(void *, size_t, int);

/* What a copy calls itself (its /proc/<pid>/comm), so that a later agent can find it. */
#define COPY_NAME "aenv-frozen"

static int control_fd = -1;

int aenv_remap_ram(int fd); /* dirtylog.c */

/* The copy: only raw system calls, as the thread that forked may have held any libc lock. Every
 * signal is blocked (the thread's mask), so only SIGKILL ends it. */
static void run_copy(void)
{
    syscall(SYS_close_range, 0, ~0U, 0);
    syscall(SYS_prctl, PR_SET_NAME, (unsigned long)COPY_NAME, 0, 0, 0);
    for (;;)
        syscall(SYS_ppoll, NULL, 0UL, NULL, NULL, 0UL);  /* no descriptor, no timeout */
}

static int32_t copy(void)
{
    long pid = syscall(SYS_clone, CLONE_PARENT | SIGCHLD, 0, NULL, NULL, 0);
    if (pid == 0)
        run_copy();
    return pid < 0 ? -errno : (int32_t)pid;
}

/* One message: its byte, and the descriptor it carries (-1: none). */
static ssize_t receive(char *byte, int *fd)
{
    union {
        struct cmsghdr header;
        char space[CMSG_SPACE(sizeof(int))];
    } control;
    struct iovec iov = {.iov_base = byte, .iov_len = 1};
    struct msghdr msg = {.msg_iov = &iov, .msg_iovlen = 1,
                         .msg_control = control.space, .msg_controllen = sizeof(control.space)};
    struct cmsghdr *cmsg;
    ssize_t got = recvmsg(control_fd, &msg, MSG_CMSG_CLOEXEC);
    *fd = -1;
    if (got > 0 && (cmsg = CMSG_FIRSTHDR(&msg)) != NULL && cmsg->cmsg_level == SOL_SOCKET
        && cmsg->cmsg_type == SCM_RIGHTS && cmsg->cmsg_len == CMSG_LEN(sizeof(int)))
        memcpy(fd, CMSG_DATA(cmsg), sizeof(int));
    return got;
}

static void *serve(void *unused)
{
    (void)unused;
    for (;;) {
        char byte;
        int fd;
        ssize_t got = receive(&byte, &fd);
        int32_t answer;
        if (got < 0 && errno == EINTR)
            continue;
        if (got <= 0)
            break;
        if (byte == 'F')
            answer = copy();
        else if (byte == 'R')
            answer = fd < 0 ? -EBADF : aenv_remap_ram(fd);
        else
            answer = -EINVAL;
        if (fd >= 0)
            close(fd);
        if (send(control_fd, &answer, sizeof(answer), MSG_NOSIGNAL) != sizeof(answer))
            break;
    }
    close(control_fd);
    return NULL;
}

__attribute__((constructor)) static void start(void)
{
    const char *fd_text = getenv("AENV_FREEZE_FD");
    sigset_t all, previous;
    pthread_t thread;
    if (fd_text == NULL)
        return;
    control_fd = atoi(fd_text);
    /* The thread must never take QEMU's signals (it inherits the mask it is created with). */
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &previous);
    if (pthread_create(&thread, NULL, serve, NULL) != 0) {
        fprintf(stderr, "aenv freeze: cannot start its thread\n");
        close(control_fd);
        control_fd = -1;
    } else {
        pthread_detach(thread);
    }
    pthread_sigmask(SIG_SETMASK, &previous, NULL);
}

int madvise(void *addr, size_t len, int advice)
{
    static madvise_fn real;
    if (advice == MADV_DONTFORK && control_fd >= 0)
        return 0;
    if (real == NULL)
        real = (madvise_fn)dlsym(RTLD_NEXT, "madvise");
    return real(addr, len, advice);
}
