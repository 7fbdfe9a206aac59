"""Whether this node jails its VMs, by its `vmm_jail` setting: `required` fails the node's start
when the host cannot, `auto` runs QEMU as root there (a WARNING, and the node's status says
so), `off` does not try. Told by jailing a real command once at start: a uid from the range, a
mount namespace, pivot_root, dropped capabilities, as every VM will be."""

from __future__ import annotations

import logging
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from aenv_common.errors import Unavailable
from aenv_nodeagent.vmm import jail
from aenv_nodeagent.vmm.confined import JAIL_ROOT
from aenv_nodeagent.vmm.uids import ETC, UidRange, VmUids, check_unclaimed

log = logging.getLogger(__name__)

JailMode = Literal["required", "auto", "off"]
_PROBE_TIMEOUT_S = 30.0


class JailUnavailable(Unavailable):
    """The host cannot jail VMs (no mount namespaces, no root to drop...)."""


@dataclass(frozen=True)
class JailChoice:
    uids: VmUids | None  # None: QEMU runs as root in the host's mount namespace
    status: str


def probe(uids: VmUids, root: Path = JAIL_ROOT) -> str | None:
    """Why a command cannot be jailed here, or None when it can."""
    uid = uids.acquire()
    try:
        root.mkdir(mode=0o700, parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(prefix="aenv-jail-probe-") as own:
            argv = jail.wrapped(["true"], jailed=jail.jail_options(uid, root, [Path(own)]))
            done = subprocess.run(argv, capture_output=True, text=True, timeout=_PROBE_TIMEOUT_S)
        return None if done.returncode == 0 else done.stderr.strip() or f"exit {done.returncode}"
    except (OSError, subprocess.SubprocessError) as err:
        return str(err)
    finally:
        uids.release(uid)


def choose(mode: JailMode, uid_range: UidRange, root: Path = JAIL_ROOT,
           etc: Path = ETC) -> JailChoice:
    """:raise JailUnavailable: `required`, and the host cannot jail VMs.
    :raise UidRangeTaken: the range holds ids the host gives to others (whatever the mode but
        `off`: a misconfiguration, not something the host lacks)."""
    if mode == "off":
        log.warning("VMs run as root, unjailed (vmm_jail=off)")
        return JailChoice(None, "unjailed: vmm_jail=off")
    check_unclaimed(uid_range, etc)
    uids = VmUids(uid_range)
    reason = probe(uids, root)
    if reason is None:
        last = uid_range.first + uid_range.count - 1
        return JailChoice(uids, f"jailed: uid {uid_range.first}-{last}, mount namespace, "
                                "no capabilities, seccomp (QEMU's sandbox; exec and "
                                "fork killed)")
    if mode == "required":
        raise JailUnavailable(f"vmm_jail=required, but VMs cannot be jailed: {reason}")
    log.warning("VMs run as root, unjailed: the host cannot jail them", extra={"reason": reason})
    return JailChoice(None, f"unjailed: {reason}")
