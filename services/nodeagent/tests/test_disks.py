"""qcow2 overlays: named copies of a template qemu-img made once must be what qemu-img makes."""

from __future__ import annotations

import asyncio
import json
import subprocess
from pathlib import Path

import pytest

from aenv_common.errors import Internal
from aenv_nodeagent.disks import create_overlay

GIB = 1 << 30


def _qemu_img(*args: str) -> str:
    return subprocess.run(["qemu-img", *args], check=True, capture_output=True,
                          text=True).stdout


def _qemu_io(image: Path, command: str) -> bool:
    """Whether the qemu-io command succeeds (a read with a pattern fails on a mismatch)."""
    return subprocess.run(["qemu-io", "-c", command, str(image)], capture_output=True,
                          text=True).returncode == 0


@pytest.fixture
def base(tmp_path: Path) -> Path:
    path = tmp_path / "base.qcow2"
    _qemu_img("create", "-q", "-f", "qcow2", str(path), str(GIB))
    return path


@pytest.mark.parametrize("name", ["b.qcow2", "a-much-longer-layer-name-" + "x" * 200 + ".qcow2"])
async def test_an_overlay_is_byte_for_byte_what_qemu_img_makes(
    tmp_path: Path, base: Path, name: str
) -> None:
    backing = tmp_path / name
    backing.hardlink_to(base)
    ours, theirs = tmp_path / "ours.qcow2", tmp_path / "theirs.qcow2"
    await create_overlay(backing, ours)
    _qemu_img("create", "-q", "-f", "qcow2", "-F", "qcow2", "-b", str(backing), "-u",
              str(theirs), str(GIB))
    assert ours.read_bytes() == theirs.read_bytes()
    info = json.loads(_qemu_img("info", "--output=json", str(ours)))
    assert (info["backing-filename"], info["virtual-size"]) == (str(backing), GIB)
    _qemu_img("check", str(ours))


async def test_an_overlay_can_name_a_backing_that_is_not_there_yet(
    tmp_path: Path, base: Path
) -> None:
    """A capture makes the next overlay before it links the layer it stands on."""
    later = tmp_path / "layer.qcow2"
    overlays = [tmp_path / f"next{n}.qcow2" for n in range(3)]
    await asyncio.gather(*(create_overlay(later, overlay, like=base) for overlay in overlays))
    later.hardlink_to(base)
    assert _qemu_io(base, "write -P 7 0 4096")
    for overlay in overlays:  # reads fall through to the layer
        assert _qemu_io(overlay, "read -P 7 0 4096")
        assert not _qemu_io(overlay, "read -P 8 0 4096")
        _qemu_img("check", str(overlay))


async def test_a_backing_path_that_does_not_fit_the_header_is_refused(
    tmp_path: Path, base: Path
) -> None:
    with pytest.raises(Internal, match="does not fit"):
        await create_overlay(Path("/" + "x" * 70000), tmp_path / "o.qcow2", like=base)
