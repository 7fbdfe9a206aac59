"""A seccomp filter that keeps QEMU 7.2 from punching holes into files (x86-64 only).

Balloon free page reporting discards the guest's free pages with `ram_block_discard_range`. For
a RAM block backed by a file, QEMU 7.2 does that with `fallocate(PUNCH_HOLE | KEEP_SIZE)` on the
file and then `madvise(MADV_DONTNEED)`, even when the file is mapped share=off: a sandbox mapping
a template or memory image copy-on-write would zero those pages in the file itself, under every
other sandbox and later restore that maps it (fixed in later QEMUs, which only madvise).

Under this filter that `fallocate` succeeds without doing anything, so only the `madvise` acts:
the process drops its private copies of the pages, the memory goes back to the host, and the
file is never written. The guest reads the file's content there next, which it accepts: reported
pages are free, and our guest kernel zeroes pages when it allocates them (init_on_alloc).

Everything else QEMU punches is a disk discard of a writable qcow2 overlay, after the qcow2 layer
has already dropped the cluster from its metadata: only the host space of those clusters stays
allocated (the overlay is thrown away with its sandbox). A zero-write falls back to punching
only on filesystems without `FALLOC_FL_ZERO_RANGE`, which node state directories must have
(ext4, xfs).

QEMU's exec step (jail.py) installs the filter before it execs QEMU in place (same PID), which
inherits it in all its threads, for good; this file run as a script (`wrapped`) does only that.
Not in a `preexec_fn`: Python code between fork and exec runs gRPC's fork handlers, which abort
the child. The script imports only the standard library and starts with `-I -S`, in 10-20 ms.
"""

from __future__ import annotations

import ctypes
import os
import struct
import sys
from collections.abc import Sequence

_AUDIT_ARCH_X86_64 = 0xC000003E
_NR_FALLOCATE_X86_64 = 285
_PUNCH_HOLE_KEEP_SIZE = 0x02 | 0x01  # FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE

_PR_SET_NO_NEW_PRIVS = 38
_PR_SET_SECCOMP = 22
_SECCOMP_MODE_FILTER = 2
_SECCOMP_RET_ALLOW = 0x7FFF0000
_SECCOMP_RET_ERRNO = 0x00050000  # with errno 0: the call is skipped and returns 0

# classic BPF opcodes
_LD_W_ABS = 0x20
_JEQ_K = 0x15
_RET_K = 0x06

# struct seccomp_data: nr, arch, instruction_pointer, args[6] (u64, little-endian)
_NR, _ARCH, _ARG1_LOW = 0, 4, 16 + 8 * 1


def _insn(code: int, jt: int, jf: int, k: int) -> bytes:
    return struct.pack("<HBBI", code, jt, jf, k)


def _program() -> bytes:
    """if arch == x86-64 and nr == fallocate and mode == PUNCH_HOLE|KEEP_SIZE: return 0."""
    return b"".join((
        _insn(_LD_W_ABS, 0, 0, _ARCH),
        _insn(_JEQ_K, 0, 5, _AUDIT_ARCH_X86_64),
        _insn(_LD_W_ABS, 0, 0, _NR),
        _insn(_JEQ_K, 0, 3, _NR_FALLOCATE_X86_64),
        _insn(_LD_W_ABS, 0, 0, _ARG1_LOW),
        _insn(_JEQ_K, 0, 1, _PUNCH_HOLE_KEEP_SIZE),
        _insn(_RET_K, 0, 0, _SECCOMP_RET_ERRNO),
        _insn(_RET_K, 0, 0, _SECCOMP_RET_ALLOW),
    ))


class _SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]


def wrapped(argv: Sequence[str]) -> list[str]:
    """`argv` run under the filter."""
    return [sys.executable, "-I", "-S", __file__, *argv]


def install() -> None:
    if os.uname().machine != "x86_64":
        raise OSError(f"the hole-punch filter is written for x86_64, not {os.uname().machine}")
    code = _program()
    buffer = ctypes.create_string_buffer(code, len(code))
    fprog = _SockFprog(len(code) // 8, ctypes.cast(buffer, ctypes.c_void_p))
    prctl = ctypes.CDLL(None, use_errno=True).prctl
    prctl.argtypes = [ctypes.c_int, *[ctypes.c_ulong] * 4]
    prctl.restype = ctypes.c_int
    if prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_NO_NEW_PRIVS) failed")
    if prctl(_PR_SET_SECCOMP, _SECCOMP_MODE_FILTER, ctypes.addressof(fprog), 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_SECCOMP) failed")


if __name__ == "__main__":
    install()
    os.execvp(sys.argv[1], sys.argv[1:])
