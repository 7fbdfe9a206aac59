"""What a jailed VM's root binds: its own directory writable, shared files (kernel, template
disks down the backing chain, a memory image) read-only."""

from __future__ import annotations

import dataclasses
import subprocess
from pathlib import Path

from aenv_nodeagent.vmm import DiskSpec, VmSpec
from aenv_nodeagent.vmm.argv import VmFiles
from aenv_nodeagent.vmm.jailed_files import backing_chain, binds


def _qcow2(path: Path, backing: Path | None = None) -> Path:
    command = ["qemu-img", "create", "-q", "-f", "qcow2"]
    if backing is not None:
        command += ["-b", str(backing), "-F", "qcow2" if backing.suffix == ".qcow2" else "raw"]
    subprocess.run([*command, str(path), "16M"], check=True)
    return path


def test_the_backing_chain_is_read_from_the_headers(tmp_path: Path) -> None:
    base = _qcow2(tmp_path / "base.qcow2")
    (tmp_path / "layers").mkdir()
    layer = _qcow2(tmp_path / "layers" / "l1.qcow2", base)
    top = _qcow2(tmp_path / "top.qcow2", Path("layers/l1.qcow2"))  # relative: to its directory
    assert backing_chain(top) == [tmp_path / "layers" / "l1.qcow2", base]
    assert backing_chain(layer) == [base]
    assert backing_chain(base) == []


def test_the_vms_directory_is_writable_and_what_it_shares_read_only(
    tmp_path: Path, ticker_spec: VmSpec
) -> None:
    template = tmp_path / "template"
    template.mkdir()
    base = _qcow2(template / "disk.qcow2")
    own = tmp_path / "sandbox"
    own.mkdir()
    overlay = _qcow2(own / "root.qcow2", base)
    tools = tmp_path / "tools.ext4"
    tools.write_bytes(b"")
    spec = dataclasses.replace(
        ticker_spec, mem_path=template / "memory", mem_shared=False,
        disks=(DiskSpec("root", overlay, "qcow2", readonly=False, by_fd=True),
               DiskSpec("tools", tools, "raw", readonly=True)))
    made = binds(spec, own / "vm", VmFiles.in_dir(own / "vm"), own / "console.log")
    assert made.writable == [own]
    assert made.readonly == [spec.boot_kernel, spec.initrd, base, tools, template / "memory"]

