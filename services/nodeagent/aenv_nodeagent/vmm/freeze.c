/*
 * Preloaded into QEMU (LD_PRELOAD) so the node agent can take a frozen copy of a stopped VM: a
 * fork of the QEMU process, whose memory the kernel keeps as it was at the fork (copy-on-write)
 * while the guest runs on. A snapshot then stops the guest only to fork it, and its memory image
 * is read from the copy afterwards (vmm/frozen.py).
 *
 * With AENV_FREEZE_FD naming an inherited unix socket, a thread (all signals blocked) serves it:
 * each message carries one byte and the read end of a pipe. The thread forks the process with a
 * raw clone(CLONE_PARENT), so that no atfork handler of QEMU runs and the copy is the node
 * agent's child, and answers with the copy's pid (or -errno). The copy closes every descriptor
 * but the pipe, waits for the pipe to close (the agent is done, or gone) and exits. The thread
 * ends when the socket closes.
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
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

typedef int (*madvise_fn)(void *, size_t, int);

static int control_fd = -1;

/* The copy: only raw system calls, as the thread that forked may have held any libc lock. */
static void run_copy(int pipe_fd)
{
    char byte;
    long got;
    if (pipe_fd > 0)
        syscall(SYS_close_range, 0, pipe_fd - 1, 0);
    syscall(SYS_close_range, pipe_fd + 1, ~0U, 0);
    do
        got = syscall(SYS_read, pipe_fd, &byte, 1);
    while (got > 0 || (got < 0 && errno == EINTR));
    syscall(SYS_exit_group, 0);
}

static int received_fd(struct msghdr *msg)
{
    struct cmsghdr *cmsg = CMSG_FIRSTHDR(msg);
    int fd;
    if (cmsg == NULL || cmsg->cmsg_level != SOL_SOCKET || cmsg->cmsg_type != SCM_RIGHTS
        || cmsg->cmsg_len != CMSG_LEN(sizeof(int)))
        return -1;
    memcpy(&fd, CMSG_DATA(cmsg), sizeof(int));
    return fd;
}

static void *serve(void *unused)
{
    (void)unused;
    for (;;) {
        char byte;
        union { char buf[CMSG_SPACE(sizeof(int))]; struct cmsghdr align; } control;
        struct iovec iov = { .iov_base = &byte, .iov_len = 1 };
        struct msghdr msg = {
            .msg_iov = &iov, .msg_iovlen = 1,
            .msg_control = control.buf, .msg_controllen = sizeof(control.buf),
        };
        ssize_t got = recvmsg(control_fd, &msg, MSG_CMSG_CLOEXEC);
        int32_t answer;
        int pipe_fd;
        if (got < 0 && errno == EINTR)
            continue;
        if (got <= 0)
            break;
        pipe_fd = received_fd(&msg);
        if (pipe_fd < 0) {
            answer = -EINVAL;
        } else {
            long pid = syscall(SYS_clone, CLONE_PARENT | SIGCHLD, 0, NULL, NULL, 0);
            if (pid == 0)
                run_copy(pipe_fd);
            answer = pid < 0 ? -errno : (int32_t)pid;
            close(pipe_fd);
        }
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
