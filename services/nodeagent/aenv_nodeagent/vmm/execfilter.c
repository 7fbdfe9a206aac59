/*
 * Preloaded into QEMU: with AENV_EXEC_FILTER set (the jail step sets it for jailed QEMUs only;
 * it is removed from the environment here), a seccomp filter that kills the process on any
 * execve/execveat, fork/vfork, or clone that is not a thread's, and on the namespace, mount and
 * cross-process calls listed in `killed`. It stands in for QEMU's
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

/* Never made by QEMU as we run it: new programs and processes, and the calls by which a process
 * leaves its namespaces or reaches into another's memory. Capabilities and QEMU's own sandbox
 * already refuse most of the latter; killing them here does not depend on either. */
static const unsigned int killed[] = {
    __NR_execve, __NR_execveat, __NR_fork, __NR_vfork,
    __NR_unshare, __NR_setns, __NR_ptrace, __NR_process_vm_readv, __NR_process_vm_writev,
    __NR_mount, __NR_umount2, __NR_pivot_root, __NR_chroot,
};
#define KILLED (sizeof(killed) / sizeof(killed[0]))
#define LENGTH (KILLED + 12)
/* The endings, the program's last three instructions. */
#define KILL (LENGTH - 3)
#define NOSYS (LENGTH - 2)
#define ALLOW (LENGTH - 1)
/* A jump's offset counts the instructions it skips, from the one after it. */
#define TO(from, target) ((unsigned char)((target) - (from) - 1))

static int install(int freezes)
{
    struct sock_filter program[LENGTH];
    unsigned int at = 0;
/* Appends one instruction; a jump in it may aim with TO(at, ...) at an ending. */
#define EMIT(instruction) (program[at] = (struct sock_filter)instruction, at++)
    EMIT(LOAD(arch));
    EMIT(IS(AUDIT_ARCH_X86_64, 0, TO(at, KILL)));
    EMIT(LOAD(nr));
    EMIT(BPF_JUMP(BPF_JMP | BPF_JGE | BPF_K, X32_SYSCALL_BIT, TO(at, KILL), 0));
    for (unsigned int i = 0; i < KILLED; i++)
        EMIT(IS(killed[i], TO(at, KILL), 0));
    EMIT(IS(__NR_clone3, TO(at, NOSYS), 0));
    EMIT(IS(__NR_clone, 0, TO(at, ALLOW)));
    EMIT(LOAD(args[0]));  /* clone's flags, all in the low half (the kernel drops the rest) */
    EMIT(BPF_JUMP(BPF_JMP | BPF_JSET | BPF_K, CLONE_THREAD, TO(at, ALLOW), 0));  /* a thread */
    EMIT(IS(freezes ? FREEZE_CLONE_FLAGS : ~0U, TO(at, ALLOW), 0));              /* a frozen copy */
    EMIT(RET(SECCOMP_RET_KILL_PROCESS));
    EMIT(RET(SECCOMP_RET_ERRNO | ENOSYS));
    EMIT(RET(SECCOMP_RET_ALLOW));
#undef EMIT
    if (at != LENGTH) {
        errno = EINVAL;
        return -1;
    }
    struct sock_fprog prog = {LENGTH, program};
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
