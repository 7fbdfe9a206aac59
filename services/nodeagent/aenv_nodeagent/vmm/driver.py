"""The VMM driver interface: the node agent depends on this, not on QEMU, so another VMM
(Firecracker, on hosts that have it) can be plugged in."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Protocol

from aenv_nodeagent.vmm.qemu import QemuVm
from aenv_nodeagent.vmm.spec import VmSpec


class VmHandle(Protocol):
    """One running VMM process. Phase-timed methods return {phase: milliseconds}."""

    @property
    def pid(self) -> int: ...

    async def capture(self, state_path: Path, time_limit: float = 30.0) -> dict[str, float]: ...

    async def restore(self, state_path: Path, time_limit: float = 30.0) -> dict[str, float]: ...

    async def pause(self) -> None: ...

    async def resume(self) -> None: ...

    async def status(self) -> str: ...

    async def shutdown(self, grace: float = 2.0) -> None: ...


class VmmDriver(Protocol):
    name: str

    async def launch(
        self,
        spec: VmSpec,
        workdir: Path,
        *,
        incoming: bool,
        argv_prefix: Sequence[str] = (),
        console_log: Path | None = None,
    ) -> VmHandle: ...


class QemuDriver:
    """VmmDriver backed by QEMU `-M microvm`."""

    name = "qemu"

    async def launch(
        self,
        spec: VmSpec,
        workdir: Path,
        *,
        incoming: bool,
        argv_prefix: Sequence[str] = (),
        console_log: Path | None = None,
    ) -> QemuVm:
        return await QemuVm.launch(
            spec, workdir, incoming=incoming, argv_prefix=argv_prefix, console_log=console_log
        )
