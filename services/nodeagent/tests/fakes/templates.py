"""A fake TemplateStore: templates made at once over files in a directory, never booted.

Each template's disk is a real (empty) qcow2 image, as overlays and FakeVm's disk chains read
its header; its device state holds FakeVm's marker, so FakeVm restores it; its RAM file and the
guest artifacts are dummy files.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
from pathlib import Path
from typing import Protocol

from aenv_nodeagent.artifacts import GuestArtifacts, RootfsImage
from aenv_nodeagent.templates import TemplateInputs, TemplateSnapshot, TemplateStore
from aenv_nodeagent.templates.model import TemplateCatalog
from aenv_nodeagent.templates.steps import Log
from aenv_nodeagent.vmm import Accelerator, AcceleratorChoice

from .vm import STATE_MARKER

TCG = AcceleratorChoice(Accelerator.TCG, "fake")


class FakeTemplates(TemplateCatalog):
    """Implements TemplateStore's public methods; `add` makes a template ready at once."""

    def __init__(self, root: Path) -> None:
        super().__init__()
        self.root = root
        self._ready: dict[str, TemplateSnapshot] = {}
        # Unset: `get` waits on it (a test holding back whoever looks a template up).
        self.gets_open = asyncio.Event()
        self.gets_open.set()

    def add(
        self, template_id: str = "base", *, vcpus: int = 1, memory_mib: int = 128,
        disk_mib: int = 64, envd_version: str = "0.9.0-template",
    ) -> TemplateSnapshot:
        """A template, registered and ready: its directory, qcow2 disk, RAM and state."""
        artifacts = self._artifacts()
        directory = self.root / template_id
        directory.mkdir(parents=True)
        subprocess.run(["qemu-img", "create", "-q", "-f", "qcow2", str(directory / "disk.qcow2"),
                        f"{disk_mib}M"], check=True)
        snapshot = TemplateSnapshot(
            template_id=template_id, directory=directory, vcpus=vcpus, memory_mib=memory_mib,
            disk_mib=disk_mib, accelerator=str(TCG.accel),
            kernel_version=artifacts.kernel_version, artifacts_digest=artifacts.digest,
            envd_version=envd_version, boot_seconds=0.0)
        snapshot.memory.write_bytes(b"")
        snapshot.state.write_bytes(STATE_MARKER + json.dumps({"template": template_id}).encode())
        rootfs = self.root / "rootfs.qcow2"
        rootfs.touch()
        self.register(TemplateInputs(
            template_id=template_id, artifacts=artifacts,
            rootfs=RootfsImage(rootfs, "rootfs-digest", ()), accel=TCG, vcpus=vcpus,
            memory_mib=memory_mib, disk_mib=disk_mib, tcg_tb_mib=16))
        self._ready[template_id] = snapshot
        return snapshot

    def cached(self) -> list[TemplateSnapshot]:
        return list(self._ready.values())

    def on_disk(self) -> list[TemplateSnapshot]:
        return list(self._ready.values())

    async def get(self, template_id: str, build_log: Log | None = None) -> TemplateSnapshot:
        self.inputs(template_id)  # NotFound for unknown ids
        await self.gets_open.wait()
        await asyncio.sleep(0)
        return self._ready[template_id]

    def _artifacts(self) -> GuestArtifacts:
        files = self.root / "artifacts"
        files.mkdir(parents=True, exist_ok=True)
        for name in ("vmlinux", "initrd", "tools.img"):
            (files / name).touch()
        return GuestArtifacts(kernel=files / "vmlinux", initrd=files / "initrd",
                              tools_disk=files / "tools.img", kernel_version="6.1.0-fake",
                              cmdline="console=ttyS0", digest="f" * 64)


class _Templates(Protocol):
    """TemplateStore's public surface, which mypy checks both classes against below."""

    def register(self, inputs: TemplateInputs) -> None: ...
    def has(self, template_id: str) -> bool: ...
    def inputs(self, template_id: str) -> TemplateInputs: ...
    def registered(self) -> list[str]: ...
    def cached(self) -> list[TemplateSnapshot]: ...
    def on_disk(self) -> list[TemplateSnapshot]: ...
    async def get(self, template_id: str, build_log: Log | None = None) -> TemplateSnapshot: ...


_REAL_TEMPLATES: type[_Templates] = TemplateStore
_FAKE_TEMPLATES: type[_Templates] = FakeTemplates
