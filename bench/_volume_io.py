"""The file-system probe of bench/volumes.py (standard library only: run by python3 in a guest,
on a volume and on the guest's own disk, and by the host on the volume server's working dir).

    python3 _volume_io.py <dir> <seq_mib> <rand_ops> <small_files> <repeats>

Prints one JSON object of medians over `repeats`: sequential write (1 MiB blocks, then fsync)
and read (the file's cached pages dropped first with POSIX_FADV_DONTNEED: on NFS the read goes
to the server, on a local disk to the device or the host's cache under it), 4 KiB random
writes (then one fsync) and reads at aligned offsets of that file, and small files (4 KiB each,
open/write/close) made per second in a fresh directory."""

from __future__ import annotations

import json
import os
import random
import shutil
import statistics
import sys
import time

MIB = 1 << 20
BLOCK = 4096


def _drop(fd: int) -> None:
    os.fsync(fd)
    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)


def one_run(
    root: str, seq_mib: int, rand_ops: int, small_files: int, seed: int
) -> dict[str, float]:
    path = os.path.join(root, "seq.bin")
    data = os.urandom(MIB)
    started = time.perf_counter()
    with open(path, "wb") as f:
        for _ in range(seq_mib):
            f.write(data)
        f.flush()
        os.fsync(f.fileno())
    seq_write = seq_mib / (time.perf_counter() - started)

    fd = os.open(path, os.O_RDONLY)
    _drop(fd)
    os.close(fd)
    started = time.perf_counter()
    with open(path, "rb", buffering=0) as f:
        while f.read(MIB):
            pass
    seq_read = seq_mib / (time.perf_counter() - started)

    rng = random.Random(seed)
    blocks = seq_mib * MIB // BLOCK
    page = os.urandom(BLOCK)
    fd = os.open(path, os.O_RDWR)
    try:
        started = time.perf_counter()
        for _ in range(rand_ops):
            os.pwrite(fd, page, rng.randrange(blocks) * BLOCK)
        os.fsync(fd)
        rand_write = rand_ops / (time.perf_counter() - started)
        _drop(fd)
        started = time.perf_counter()
        for _ in range(rand_ops):
            os.pread(fd, BLOCK, rng.randrange(blocks) * BLOCK)
        rand_read = rand_ops / (time.perf_counter() - started)
    finally:
        os.close(fd)
    os.unlink(path)

    small_dir = os.path.join(root, f"small-{seed}")
    os.mkdir(small_dir)
    started = time.perf_counter()
    for i in range(small_files):
        with open(os.path.join(small_dir, f"f{i}"), "wb") as f:
            f.write(page)
    creates = small_files / (time.perf_counter() - started)
    shutil.rmtree(small_dir)
    return {
        "seq_write_MiB_s": seq_write,
        "seq_read_MiB_s": seq_read,
        "rand_write_4k_iops": rand_write,
        "rand_read_4k_iops": rand_read,
        "small_file_creates_per_s": creates,
    }


def main() -> None:
    root, seq_mib, rand_ops, small_files, repeats = sys.argv[1:6]
    os.makedirs(root, exist_ok=True)
    runs = [
        one_run(root, int(seq_mib), int(rand_ops), int(small_files), n) for n in range(int(repeats))
    ]
    print(json.dumps({k: round(statistics.median(r[k] for r in runs), 1) for k in runs[0]}))


if __name__ == "__main__":
    main()
