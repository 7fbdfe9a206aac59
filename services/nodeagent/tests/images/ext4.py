"""Reading a built base disk without mounting it: qcow2 -> raw, then e2fsprogs' debugfs."""

from __future__ import annotations

import re
import subprocess
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Inode:
    type: str
    mode: int  # permission bits with setuid/setgid/sticky
    uid: int
    gid: int
    links: int
    size: int


class Ext4:
    def __init__(self, qcow2: Path, work: Path) -> None:
        self.raw = work / f"{qcow2.stem}.raw"
        subprocess.run(["qemu-img", "convert", "-f", "qcow2", "-O", "raw", str(qcow2),
                        str(self.raw)], check=True)

    def debugfs(self, command: str) -> str:
        return subprocess.run(["debugfs", "-R", command, str(self.raw)], check=True,
                              capture_output=True, text=True).stdout

    def names(self, path: str) -> list[str]:
        """Entries of a directory (`ls -p` lines are /inode/mode/uid/gid/name/size/)."""
        found = [line.split("/")[5] for line in self.debugfs(f"ls -p {path}").splitlines()
                 if line.startswith("/")]
        return sorted(n for n in found if n not in (".", ".."))

    def stat(self, path: str) -> Inode | None:
        out = self.debugfs(f"stat {path}")
        head = re.search(r"Type: (.+?)\s+Mode:\s+(\d+)", out)
        if head is None:
            return None
        owner = re.search(r"User:\s+(\d+)\s+Group:\s+(\d+).*?Size: (\d+)", out)
        links = re.search(r"Links: (\d+)", out)
        assert owner is not None and links is not None, out
        return Inode(head.group(1), int(head.group(2), 8), int(owner.group(1)),
                     int(owner.group(2)), int(links.group(1)), int(owner.group(3)))

    def inode_number(self, path: str) -> int:
        match = re.search(r"Inode: (\d+)", self.debugfs(f"stat {path}"))
        assert match is not None
        return int(match.group(1))

    def cat(self, path: str) -> bytes:
        return subprocess.run(["debugfs", "-R", f"cat {path}", str(self.raw)], check=True,
                              capture_output=True).stdout

    def xattr_hex(self, path: str, name: str) -> str:
        match = re.search(rf"{re.escape(name)} \(\d+\) = ([0-9a-f ]+)",
                          self.debugfs(f"ea_list {path}"))
        return match.group(1).replace(" ", "") if match else ""

    def symlink(self, path: str) -> str:
        match = re.search(r'Fast link dest: "(.*)"', self.debugfs(f"stat {path}"))
        return match.group(1) if match else ""
