/*
 * Preloaded into QEMU: with AENV_EXEC_FILTER set (the jail step sets it for jailed QEMUs only;
 * it is removed from the environment here), a seccomp filter that kills the process on any
 * execve/execveat, fork/vfork, or clone that is not a thread's. It stands in for QEMU's
 * -sandbox spawn=deny, whose filter also kills the one clone QEMU must make: freeze.c's
 * clone(CLONE_PARENT | SIGCHLD) of a frozen copy, allowed here when AENV_FREEZE_FD is given.
 *
 * Kill, not EPERM: QEMU never forks or execs as we run it, so a call is an escaped or broken
 * QEMU, which should end (the node sees its VM crash with SIGSYS) rather than probe on; QEMU's
 * own sandbox kills the same way. clone3 gets ENOSYS: its flags are behind a pointer a filter
 * cannot read, and glibc then creates threads with clone. Foreign system call ABIs (i386,
 * x32), which QEMU never uses, are killed so they cannot bypass the numbers checked.
 *
 * Installed with TSYNC, so a thread started by another constructor (freeze.c's) is filtered too,
 * and before QEMU's main: a filter is inherited by every later thread and child, for good. A
 * filter that cannot be installed ends the process (exit 125, as the jail's failed steps do):
 * a jailed QEMU never runs without it.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <sched.h>
#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#define FILTER_ENV "AENV_EXEC_FILTER"
#define FREEZE_ENV "AENV_FREEZE_FD"
#define X32_SYSCALL_BIT 0x40000000U
#define FREEZE_CLONE_FLAGS (CLONE_PARENT | SIGCHLD)  /* freeze.c's, exactly */

#define LOAD(field) BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, field))
#define RET(action) BPF_STMT(BPF_RET | BPF_K, (action))
#define IS(value, then, otherwise) BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, (value), (then), (otherwise))

static int install(int freezes)
{
    /* Jump offsets count the instructions skipped; the endings are the last three. */
    struct sock_filter program[] = {
        LOAD(arch),                                                  /* 0 */
        IS(AUDIT_ARCH_X86_64, 0, 11),                                /* 1: else kill */
        LOAD(nr),                                                    /* 2 */
        BPF_JUMP(BPF_JMP | BPF_JGE | BPF_K, X32_SYSCALL_BIT, 9, 0),  /* 3: x32: kill */
        IS(__NR_execve, 8, 0),                                       /* 4 */
        IS(__NR_execveat, 7, 0),                                     /* 5 */
        IS(__NR_fork, 6, 0),                                         /* 6 */
        IS(__NR_vfork, 5, 0),                                        /* 7 */
        IS(__NR_clone3, 5, 0),                                       /* 8: ENOSYS */
        IS(__NR_clone, 0, 5),                                        /* 9: else allow */
        LOAD(args[0]),  /* 10: clone's flags, all in the low half (the kernel drops the rest) */
        BPF_JUMP(BPF_JMP | BPF_JSET | BPF_K, CLONE_THREAD, 3, 0),    /* 11: a thread: allow */
        IS(freezes ? FREEZE_CLONE_FLAGS : ~0U, 2, 0),                /* 12: a frozen copy */
        RET(SECCOMP_RET_KILL_PROCESS),                               /* 13 */
        RET(SECCOMP_RET_ERRNO | ENOSYS),                             /* 14 */
        RET(SECCOMP_RET_ALLOW),                                      /* 15 */
    };
    struct sock_fprog prog = {sizeof(program) / sizeof(program[0]), program};
    /* The jail set it already; without it an unprivileged process may not add a filter. */
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0)
        return -1;
    return syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, SECCOMP_FILTER_FLAG_TSYNC, &prog) == 0
               ? 0 : -1;
}

__attribute__((constructor)) static void filter_exec(void)
{
    if (getenv(FILTER_ENV) == NULL)
        return;
    unsetenv(FILTER_ENV);  /* nothing QEMU runs needs it, and a test child must not inherit it */
    if (install(getenv(FREEZE_ENV) != NULL) != 0) {
        fprintf(stderr, "aenv exec filter: cannot install it: %s\n", strerror(errno));
        _exit(125);
    }
}
