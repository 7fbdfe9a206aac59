"""Tools disk: a read-only ext4 image mounted at /opt/aenv in every guest.

It carries a self-contained Python 3.11 (Debian's interpreter, its stdlib and every shared
library it needs, started through its own ELF loader, so it runs in any rootfs), envd with its
dependencies, static busybox and tini, and aenv-init (the guest's PID 1). It also carries the
code interpreter's server (`services/codeinterp`, at CODE_INTERPRETER_DIR), which only the
`code-interpreter-v1` template runs, on its rootfs's own Python and Jupyter packages.
"""

from __future__ import annotations

import asyncio
import importlib.util
import os
import re
import shutil
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from aenv_common.errors import Internal, InvalidArgument

from .cache import CacheEntry, CacheKey, cached_build
from .initramfs import static_busybox
from .proc import run

_BUILD_VERSION = "1"
PREFIX = "/opt/aenv"  # mount point inside the guest
PYTHON = "/usr/bin/python3.11"
TINI = "/usr/bin/tini-static"
ENVD_MODULE = "aenv_envd"
LOADER = "ld-linux-x86-64.so.2"
SITE_PACKAGES = "lib/python3/dist-packages"  # on Debian's site.py search path under PYTHONHOME
CODE_INTERPRETER_SERVER = "aenv_codeinterp"
CODE_INTERPRETER_DIR = f"{PREFIX}/codeinterp"  # on the server's PYTHONPATH, nothing else there
TOOLS_LABEL = "aenv-tools"

# Host Debian packages whose files end up on the disk: a new version means a rebuild.
SOURCE_PACKAGES = ("python3.11-minimal", "libpython3.11-minimal", "libpython3.11-stdlib",
                   "libc6", "libssl3", "libffi8", "libsqlite3-0", "zlib1g", "libexpat1",
                   "busybox-static", "tini")

# Stdlib parts a headless daemon never uses (about a third of the stdlib's size).
_STDLIB_EXCLUDES = ("test", "idlelib", "tkinter", "turtledemo", "ensurepip", "lib2to3",
                    "__pycache__", "site-packages", "dist-packages", "sitecustomize.py",
                    "EXTERNALLY-MANAGED", "turtle.py")
_STDLIB_EXCLUDE_GLOBS = ("config-3.11-*",)


@dataclass(frozen=True)
class ToolsDiskBuild:
    path: Path
    entry: CacheEntry


def code_interpreter_package() -> Path:
    """The server's source folder, found where Python imports it from (only located: nothing
    of it runs on the host)."""
    spec = importlib.util.find_spec(CODE_INTERPRETER_SERVER)
    if spec is None or spec.origin is None:
        raise InvalidArgument(f"cannot locate the {CODE_INTERPRETER_SERVER} package")
    return Path(spec.origin).parent


def python_command(prefix: str = PREFIX) -> list[str]:
    """argv that runs the bundled Python inside a guest (needs PYTHONHOME=prefix)."""
    return [f"{prefix}/lib/{LOADER}", "--library-path", f"{prefix}/lib", f"{prefix}/bin/python3"]


def render_aenv_init(envd_module: str = ENVD_MODULE) -> str:
    template = resources.files(__package__).joinpath("guest/aenv-init.sh").read_text()
    return template.replace("@ENVD_MODULE@", envd_module)


async def debian_versions(packages: Sequence[str]) -> str:
    try:
        out = await run(["dpkg-query", "-W", "-f", "${Package}=${Version}\n", *packages])
    except Internal as exc:
        raise InvalidArgument(
            f"tools disk sources missing: run `apt-get install {' '.join(packages)}` ({exc})"
        ) from exc
    return out.decode()


async def tools_disk_key(envd_packages: Sequence[Path]) -> str:
    key = (
        CacheKey("toolsdisk")
        .add("build", _BUILD_VERSION)
        .add("debian", await debian_versions(SOURCE_PACKAGES))
        .add_file("python", Path(PYTHON))
        .add("aenv-init", render_aenv_init())
        .add_tree("codeinterp", code_interpreter_package())
    )
    for i, package in enumerate(envd_packages):
        if not (package / "pyproject.toml").is_file() and not (package / "setup.py").is_file():
            raise InvalidArgument(f"{package} is not a Python package directory")
        key.add_tree(f"package{i}", package)
    return key.hexdigest()


def copy_stdlib(dest: Path) -> None:
    source = Path("/usr/lib/python3.11")

    def ignore(directory: str, names: list[str]) -> set[str]:
        skipped = {n for n in names if n in _STDLIB_EXCLUDES}
        for pattern in _STDLIB_EXCLUDE_GLOBS:
            skipped |= {p.name for p in Path(directory).glob(pattern)}
        # Debian points a few files at /etc; a dangling link would break the copy
        skipped |= {n for n in names if not os.path.exists(os.path.join(directory, n))}
        return skipped

    shutil.copytree(source, dest, ignore=ignore)


async def install_packages(envd_packages: Sequence[Path], target: Path, scratch: Path) -> None:
    """Build the local packages into wheels, then install them with their deps from wheels only."""
    if not envd_packages:
        return
    wheels = scratch / "wheels"
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "-q"]
    await run([*pip, "wheel", "--no-deps", "--wheel-dir", wheels, *envd_packages])
    await run([
        *pip, "install", "--target", target, "--only-binary=:all:", "--python-version", "3.11",
        "--implementation", "cp", "--no-compile", "--find-links", wheels,
        *sorted(wheels.glob("*.whl")),
    ])


async def shared_libraries(elf: Path) -> dict[str, Path]:
    """soname -> host path of each library `ldd` resolves for an ELF file."""
    out = (await run(["ldd", elf])).decode()
    if "not found" in out:
        raise Internal(f"{elf} needs libraries missing on this host:\n{out}")
    libs: dict[str, Path] = {}
    for line in out.splitlines():
        match = re.match(r"\s*(\S+)\s+=>\s+(/\S+)", line) or re.match(r"\s*(/\S+)\s+\(", line)
        if match:
            path = Path(match.groups()[-1])
            libs[Path(match.group(1)).name] = path
    return libs


def _elf_files(root: Path) -> list[Path]:
    """The interpreter and every extension module (not lib/, which holds the copies)."""
    modules = [*root.rglob("*.so"), *root.rglob("*.so.*")]
    return [root / "bin/python3", *sorted(m for m in modules if m.parent != root / "lib")]


def _copy_libraries(needed: dict[str, Path], root: Path) -> None:
    if LOADER not in needed:
        raise Internal(f"ldd did not report the ELF loader {LOADER}")
    inside = root.resolve()
    for soname, path in needed.items():
        # wheels' own vendored libs (found through their RPATH) stay where they are
        if not path.resolve().is_relative_to(inside):
            shutil.copy2(path.resolve(), root / "lib" / soname)


async def bundle_libraries(root: Path) -> None:
    """Copy into lib/ every library the interpreter and all extension modules need."""
    needed: dict[str, Path] = {}
    for elf in await asyncio.to_thread(_elf_files, root):
        needed.update(await shared_libraries(elf))
    await asyncio.to_thread(_copy_libraries, needed, root)


async def compile_bytecode(root: Path) -> None:
    """Precompile once: the disk is read-only and compiling under TCG would cost seconds a boot."""
    await run([PYTHON, "-m", "compileall", "-q", "-j0", "--invalidation-mode", "unchecked-hash",
               root / "lib", root / CODE_INTERPRETER_DIR.removeprefix(PREFIX + "/")])


def _tree_size(source: Path) -> tuple[int, int]:
    """(inodes needed, KiB needed incl. slack for per-file block rounding and metadata)."""
    files = sum(len(f) + len(d) for _, d, f in os.walk(source))
    size = sum(p.stat().st_size for p in source.rglob("*") if p.is_file() and not p.is_symlink())
    return files + 1024, (size * 5 // 4) // 1024 + files * 4 + 16 * 1024


async def make_ext4(source: Path, image: Path) -> None:
    inodes, kib = await asyncio.to_thread(_tree_size, source)
    # no journal: the disk is only ever mounted read-only
    await run(["mkfs.ext4", "-q", "-F", "-L", TOOLS_LABEL, "-O", "^has_journal", "-m", "0",
               "-N", str(inodes), "-d", source, image, f"{kib}K"])


def _copy_runtime(root: Path) -> None:
    """Interpreter, stdlib, static busybox and tini, and aenv-init."""
    if not Path(TINI).is_file():
        raise InvalidArgument(f"{TINI} is missing: run `apt-get install tini`")
    for sub in ("bin", "lib"):
        (root / sub).mkdir(parents=True)
    shutil.copy2(PYTHON, root / "bin/python3")
    shutil.copy2(static_busybox(), root / "bin/busybox")
    shutil.copy2(TINI, root / "bin/tini-static")
    init = root / "bin/aenv-init"
    init.write_text(render_aenv_init())
    init.chmod(0o755)
    copy_stdlib(root / "lib/python3.11")


async def _populate(root: Path, envd_packages: Sequence[Path], scratch: Path) -> None:
    await asyncio.to_thread(_copy_runtime, root)
    await install_packages(envd_packages, root / SITE_PACKAGES, scratch)
    await asyncio.to_thread(
        shutil.copytree, code_interpreter_package(),
        root / CODE_INTERPRETER_DIR.removeprefix(PREFIX + "/") / CODE_INTERPRETER_SERVER,
        ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    await bundle_libraries(root)
    await compile_bytecode(root)


async def ensure_tools_disk(cache_dir: Path, envd_packages: Sequence[Path]) -> ToolsDiskBuild:
    packages = [p.resolve() for p in envd_packages]
    key = await tools_disk_key(packages)

    async def build(tmp: Path) -> None:
        await _populate(tmp / "root", packages, tmp / "scratch")
        await make_ext4(tmp / "root", tmp / "tools.ext4")
        for scratch in ("root", "scratch"):
            await asyncio.to_thread(shutil.rmtree, tmp / scratch, True)

    entry = await cached_build(cache_dir, "toolsdisk", key, build)
    return ToolsDiskBuild(entry.path / "tools.ext4", entry)
