"""The step every QEMU is exec'd through: it joins the VM's cgroup, drops core dumps, bounds its
descriptors; when jailed, opens the VM's tap for it, enters a mount namespace whose root holds
only the VM's files (jailroot.py) and becomes the sandbox's uid without capabilities
(privileges.py), and asks the preload library, if loaded, for its exec filter (execfilter.c);
then sets `no_new_privs`, installs the hole-punch filter when asked (seccomp.py), and execs its
command line in place (same PID). So no guest instruction ever runs outside the cgroup or as
root, and nothing of a guest's memory can land in a core file. Without huge pages when asked: a
TCG QEMU advises them for its translation cache, whose 2 MiB pages are mostly unused code space
(~3 MiB more per VM, unshared, bench/lifecycle.py).

Run as a script (`wrapped`), not in a `preexec_fn`: Python code between fork and exec runs gRPC's
fork handlers, which abort the child. Standard library only, started with `-I -S` (10-20 ms).
A step that fails exits non-zero before the exec, with its reason on stderr: the VM never starts.
"""

from __future__ import annotations

import ctypes
import os
import resource
import sys
from collections.abc import Sequence
from pathlib import Path

_PR_SET_NO_NEW_PRIVS = 38
_PR_SET_THP_DISABLE = 41  # kept across the exec, as the kernel documents it
_FAILED = 125  # the exit status of a step that failed (as env(1) and friends use it)
# Read (and removed) by the preload's execfilter.c: a jailed QEMU may not exec or fork.
EXEC_FILTER_ENV = "AENV_EXEC_FILTER"


def jail_options(
    uid: int, root: Path, writable: Sequence[Path] = (), readonly: Sequence[Path] = (),
    tap: str | None = None,
) -> list[str]:
    """Options of `wrapped` that jail the command: run as `uid` (and a gid of that number) in a
    `/` made in the empty directory `root`, holding the `writable` and `readonly` paths; QEMU's
    `-netdev tap` on `tap` (in the caller's netns) given a descriptor opened before."""
    return [f"--uid={uid}", f"--root={root}", *([f"--tap={tap}"] if tap else []),
            *(f"--bind={path}" for path in writable),
            *(f"--bind-ro={path}" for path in readonly)]


def wrapped(
    argv: Sequence[str], *, cgroup_procs: Sequence[Path] = (), nofile: int = 4096,
    hole_punch_filter: bool = False, huge_pages: bool = True, jailed: Sequence[str] = (),
) -> list[str]:
    """`argv` run in the cgroup whose `cgroup.procs` files are `cgroup_procs` (one per
    hierarchy), with at most `nofile` descriptors, transparent huge pages only if `huge_pages`,
    jailed as `jailed` (jail_options) says."""
    options = [f"--cgroup={path}" for path in cgroup_procs] + [f"--nofile={nofile}"]
    if hole_punch_filter:
        options.append("--hole-punch-filter")
    if not huge_pages:
        options.append("--no-huge-pages")
    options += jailed
    return [sys.executable, "-I", "-S", __file__, *options, "--", *argv]


def _join_cgroups(procs_files: list[str]) -> None:
    pid = str(os.getpid())
    for procs in procs_files:
        with open(procs, "w") as fh:  # pathlib would cost start-up time here
            fh.write(pid)


def _limit_resources(nofile: int) -> None:
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    bound = nofile if hard == resource.RLIM_INFINITY else min(nofile, hard)
    resource.setrlimit(resource.RLIMIT_NOFILE, (bound, bound))


def _prctl_set(option: int, name: str) -> None:
    prctl = ctypes.CDLL(None, use_errno=True).prctl
    prctl.argtypes = [ctypes.c_int, *[ctypes.c_ulong] * 4]
    prctl.restype = ctypes.c_int
    if prctl(option, 1, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), f"prctl({name}) failed")


def _values(options: list[str], name: str) -> list[str]:
    return [o.removeprefix(name) for o in options if o.startswith(name)]


def main(args: list[str]) -> None:
    split = args.index("--")
    options, argv = args[:split], args[split + 1:]
    nofile = int(_values(options, "--nofile=")[0])
    # The sibling steps, imported before the jail's root hides this directory.
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import jailroot
    import privileges
    import seccomp

    try:
        _join_cgroups(_values(options, "--cgroup="))
        _limit_resources(nofile)
        if uids := _values(options, "--uid="):
            # Tap and root first: they need root.
            uid, last_cap = int(uids[0]), privileges.last_cap()
            for tap in _values(options, "--tap="):
                argv = privileges.tap_by_fd(argv, tap, privileges.open_tap(tap, uid))
            jailroot.enter(_values(options, "--root=")[0], _values(options, "--bind="),
                           _values(options, "--bind-ro="))
            privileges.drop_to(uid, uid, last_cap)
            os.environ[EXEC_FILTER_ENV] = "1"
        if "--no-huge-pages" in options:
            _prctl_set(_PR_SET_THP_DISABLE, "PR_SET_THP_DISABLE")
        _prctl_set(_PR_SET_NO_NEW_PRIVS, "PR_SET_NO_NEW_PRIVS")
        if "--hole-punch-filter" in options:
            seccomp.install()
    except OSError as err:
        print(f"aenv jail: {err}", file=sys.stderr)
        sys.exit(_FAILED)
    os.execvp(argv[0], argv)


if __name__ == "__main__":
    main(sys.argv[1:])
