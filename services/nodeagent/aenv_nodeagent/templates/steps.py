"""Running a recipe in a booted build VM: E2B's configure phase, then each step, then the start
command and its ready check — all through the guest's envd, so the image needs no Python, no
shell of ours beyond the tools disk's busybox, and any libc.

    runner = StepRunner(commands, host, contexts, log)
    defaults = await runner.run(recipe)      # the user and workdir the sandboxes inherit

Each step sees what the ones before it left: ENV adds to the environment of later RUNs and of the
start and ready commands (not of sandboxes' commands: E2B's `set_envs` is for the build only),
WORKDIR is created and becomes their cwd, USER their user. A failing step ends the
build with `BuildStepFailed`, whose message names the step and quotes its output's last line.
"""

from __future__ import annotations

import asyncio
import os
import posixpath
import re
import shlex
import shutil
import tempfile
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Protocol

from aenv_common.errors import AenvError, DeadlineExceeded, InvalidArgument, NotFound
from aenv_common.snapshots.contexts import context_manifest_id, pull_context
from aenv_nodeagent.guest_commands import CommandSpec, GuestCommands
from aenv_nodeagent.templates.recipe import Recipe, Step, StepKind

# The tools disk's static busybox: present whatever the image ships.
BUSYBOX = "/opt/aenv/bin/busybox"
# As E2B's configure phase: a passwordless-sudo `user` owning /home/user, open /usr/local.
CONFIGURE_TAIL = (
    f" && {BUSYBOX} mkdir -p /home/user && {BUSYBOX} chown -R user: /home/user"
    f" && {BUSYBOX} mkdir -p /usr/local && {BUSYBOX} chmod -R a+rwX /usr/local"
)
# An image may ship no account database at all (a static binary and busybox): give it root's.
_ROOT_ACCOUNT = (
    f"{BUSYBOX} mkdir -p /etc && {BUSYBOX} touch /etc/passwd /etc/group && "
    f"{{ {BUSYBOX} grep -q '^root:' /etc/passwd || echo 'root:x:0:0:root:/root:/bin/sh' "
    f">> /etc/passwd; }} && {{ {BUSYBOX} grep -q '^root:' /etc/group || "
    f"echo 'root:x:0:' >> /etc/group; }}"
)
STEP_TIMEOUT_S = 3600.0
READY_TIMEOUT_S = 120.0
READY_INTERVAL_S = 0.5

# E2B's names for the parts of a build, as its SDKs map them back to the user's code.
BASE_STEP = "base"
FINALIZE_STEP = "finalize"


class Log(Protocol):
    """Where a build's lines go, each with the step it belongs to ("base", "1".."n",
    "finalize"; empty: none)."""

    def __call__(self, line: str, step: str = "", /) -> None: ...


class BuildStepFailed(InvalidArgument):
    """A step of the recipe (or its start or ready command) failed: the build's reason."""


@dataclass(frozen=True)
class GuestDefaults:
    user: str = "user"
    workdir: str = "/home/user"
    env_vars: dict[str, str] = field(default_factory=dict)


# Where a resumed build starts: the number of steps its disk holds, and what they left.
Resume = tuple[int, GuestDefaults]
Checkpoint = Callable[[int, GuestDefaults], Awaitable[None]]


def _user_script(user: str, sudo: str = "") -> str:
    """As E2B's USER: the user is made when the image lacks it (and, asked, a sudoer)."""
    return _add_user(user) + (" && " + _sudoer(user) if sudo == "true" else "")


def _add_user(user: str) -> str:
    """`adduser -D` with what any image has: the user (uid and group past the highest below
    60000, at least 1000, no password as E2B leaves it), a home from /etc/skel. Nothing when
    the image has the user already."""
    bb, q = BUSYBOX, shlex.quote(user)
    passwd_line = '"$u:x:$id:$id::/home/$u:/bin/sh"'
    return (
        f"{_ROOT_ACCOUNT} && "
        f"u={q}; {bb} grep -q \"^$u:\" /etc/passwd || {{ "
        f"id=$({bb} awk -F: 'BEGIN {{ m = 999 }} $3 > m && $3 < 60000 {{ m = $3 }} "
        f"END {{ print m + 1 }}' /etc/passwd /etc/group) && "
        f"echo \"$u:x:$id:\" >> /etc/group && echo {passwd_line} >> /etc/passwd && "
        f"{{ [ ! -f /etc/shadow ] || echo \"$u::19000:0:99999:7:::\" >> /etc/shadow; }} && "
        f"{bb} mkdir -p \"/home/$u\" && {{ [ ! -d /etc/skel ] || {bb} cp -a /etc/skel/. "
        f"\"/home/$u/\"; }} && {bb} chown -R \"$id:$id\" \"/home/$u\"; }}"
    )


def _sudoer(user: str) -> str:
    """A passwordless sudoer, in /etc/sudoers itself as E2B does (an image's sudoers may not
    include /etc/sudoers.d)."""
    line = shlex.quote(f"{user} ALL=(ALL:ALL) NOPASSWD: ALL")
    present = f"{BUSYBOX} grep -qxF {line} /etc/sudoers 2>/dev/null"
    return f"{{ {present} || echo {line} >> /etc/sudoers; }}"


def _gzipped(archive: Path) -> bool:
    with archive.open("rb") as fh:
        return fh.read(2) == b"\x1f\x8b"


class BuildContexts:
    """The COPY steps' uploaded files, one tarball per `filesHash` as the SDK packs them
    (gzipped unless the step says otherwise): `<root>/<filesHash>`, pulled from snapstore
    (`aenv_common.snapshots.contexts`) the first time a step needs it."""

    def __init__(self, root: Path, stub: Any | None = None) -> None:
        self._root = root
        self._stub = stub  # a snapstore stub; None: local files only

    async def archive(self, files_hash: str) -> Path:
        """:raise NotFound: nobody uploaded these files. :raise InvalidArgument: a bad hash."""
        context_manifest_id(files_hash)  # refuses what is no hex digest before it is a path
        path = self._root / files_hash
        if path.is_file():
            return path
        if self._stub is None:
            raise NotFound(f"no uploaded files for hash {files_hash}")
        staging = Path(tempfile.mkdtemp(prefix=".pull-", dir=self._mkroot()))
        try:
            os.replace(await pull_context(self._stub, files_hash, staging), path)
        except NotFound:
            raise NotFound(f"no uploaded files for hash {files_hash}") from None
        finally:
            shutil.rmtree(staging, ignore_errors=True)
        return path

    def _mkroot(self) -> Path:
        self._root.mkdir(parents=True, exist_ok=True)
        return self._root


class StepRunner:
    def __init__(
        self, commands: GuestCommands, host: str, contexts: BuildContexts, log: Log,
        ready_timeout_s: float = READY_TIMEOUT_S,
    ) -> None:
        self._commands = commands
        self._host = host
        self._contexts = contexts
        self._log = log
        self._ready_timeout_s = ready_timeout_s

    async def run(
        self, recipe: Recipe, *, resume: Resume | None = None,
        checkpoint: Checkpoint | None = None,
    ) -> GuestDefaults:
        """Runs the recipe; with `resume` (the disk already holds the configure phase and the
        first steps), only the steps after it. `checkpoint` is called after the configure
        phase (0) and each step run (its number), with the defaults so far.

        :raise BuildStepFailed: a step failed; :raise AenvError: the guest broke off.
        """
        if resume is None:
            configure = _add_user("user") + CONFIGURE_TAIL + " && " + _sudoer("user")
            await self._shell("configure", CommandSpec(configure, user="root"), BASE_STEP)
            defaults = GuestDefaults(workdir=recipe.image_workdir or GuestDefaults.workdir,
                                     env_vars=dict(recipe.image_env))
            done = 0
            if checkpoint is not None:
                await self._checkpoint(checkpoint, 0, defaults)
        else:
            done, defaults = resume
            if done:
                self._log(f"steps 1-{done} unchanged: their layers are reused", BASE_STEP)
        for number, step in enumerate(recipe.steps, start=1):
            if number <= done:
                continue
            self._log(f"step {number}: {step.describe()}", str(number))
            defaults = await self._step(number, step, defaults)
            if checkpoint is not None:
                await self._checkpoint(checkpoint, number, defaults)
        if recipe.start_cmd:
            await self._start(recipe, defaults)
        return defaults

    async def _checkpoint(self, checkpoint: Checkpoint, number: int, now: GuestDefaults) -> None:
        # What the guest wrote is on the virtual disk before its layer is frozen.
        await self._shell(f"step {number} (sync)", CommandSpec(f"{BUSYBOX} sync", user="root"),
                          str(number) if number else BASE_STEP)
        await checkpoint(number, now)

    async def _step(self, number: int, step: Step, now: GuestDefaults) -> GuestDefaults:
        name, at = f"step {number} ({step.kind})", str(number)
        if step.kind is StepKind.ENV:
            pairs = dict(zip(step.args[::2], step.args[1::2], strict=True))
            return replace(now, env_vars={**now.env_vars, **pairs})
        if step.kind is StepKind.USER:
            await self._shell(name, CommandSpec(_user_script(*step.args), user="root"), at)
            return replace(now, user=step.args[0])
        if step.kind is StepKind.WORKDIR:
            workdir = posixpath.join(now.workdir, step.args[0])
            await self._shell(
                name, self._as(now, f"{BUSYBOX} mkdir -p {shlex.quote(workdir)}"), at)
            return replace(now, workdir=workdir)
        if step.kind is StepKind.RUN:
            user = step.args[1] if len(step.args) > 1 else now.user
            await self._shell(name, replace(self._as(now, step.args[0]), user=user), at)
            return now
        await self._copy(name, at, step, now)
        return now

    async def _copy(self, name: str, at: str, step: Step, now: GuestDefaults) -> None:
        src, dest, user, mode = step.args
        assert step.files_hash is not None  # Recipe.from_e2b refuses a COPY without it
        staged = f"/tmp/.aenv-copy-{step.files_hash}"
        try:
            archive = await self._contexts.archive(step.files_hash)
            await self._commands.upload(self._host, archive, staged)
        except AenvError as err:
            raise BuildStepFailed(f"{name}: {err.message}") from err
        target = posixpath.join(now.workdir, dest)
        owner = user or now.user
        script = _copy_script(staged, _gzipped(archive), src, target, owner, mode)
        await self._shell(name, CommandSpec(script, user="root", cwd="/"), at)

    async def _start(self, recipe: Recipe, now: GuestDefaults) -> None:
        assert recipe.start_cmd is not None
        self._log(f"start command: {recipe.start_cmd}", FINALIZE_STEP)
        await self._commands.start(self._host, self._as(now, recipe.start_cmd))
        if not recipe.ready_cmd:
            return
        self._log(f"waiting for: {recipe.ready_cmd}", FINALIZE_STEP)
        within_s = recipe.ready_timeout_s or self._ready_timeout_s
        deadline = time.monotonic() + within_s
        while True:
            result = await self._commands.run(self._host, self._as(now, recipe.ready_cmd),
                                              timeout_s=within_s)
            if result.exit_code == 0:
                return
            if time.monotonic() > deadline:
                raise BuildStepFailed(
                    f"ready command `{recipe.ready_cmd}` did not succeed within "
                    f"{within_s:.0f}s (last exit code {result.exit_code})")
            await asyncio.sleep(READY_INTERVAL_S)

    def _as(self, now: GuestDefaults, command: str) -> CommandSpec:
        return CommandSpec(command, user=now.user, envs=now.env_vars, cwd=now.workdir)

    async def _shell(self, name: str, spec: CommandSpec, step: str) -> None:
        try:
            result = await self._commands.run(self._host, spec, timeout_s=STEP_TIMEOUT_S)
        except DeadlineExceeded:
            raise BuildStepFailed(f"{name}: did not finish within {STEP_TIMEOUT_S:.0f}s") from None
        except AenvError as err:
            raise BuildStepFailed(f"{name}: {err.message}") from err
        for line in (result.stdout + result.stderr).decode(errors="replace").splitlines():
            self._log(line, step)
        if result.exit_code != 0:
            tail = result.output_tail()
            raise BuildStepFailed(
                f"{name}: exited with code {result.exit_code}" + (f": {tail}" if tail else ""))


_GLOB = re.compile(r"[*?[{]")


def static_source(src: str) -> str:
    """What of a COPY source is no glob, as E2B's builder takes it: the SDK tarred only the
    matches, so a glob's folder (`folder` of `folder/*.txt`; the context itself, `.`, of
    `*.txt`) holds them, and its contents are what is copied."""
    meta = _GLOB.search(src)
    if meta is None:
        return src.rstrip("/") or "."
    cut = src.rfind("/", 0, meta.start())
    return src[:cut].rstrip("/") or "." if cut > 0 else "."


def _copy_script(staged: str, gzipped: bool, src: str, target: str, owner: str, mode: str) -> str:
    """Unpacks the SDK's tarball (entries are paths relative to the build context) into a
    scratch directory, gives `src` its owner and mode there, then puts it at `target` as
    Docker's COPY does: a directory's contents into `target`; a file into `target` when that
    ends in / or is a directory, else as `target`. Symlinks are copied as they are (E2B's),
    also ones pointing nowhere in the guest: they get the owner, never their targets."""
    bb, q = BUSYBOX, shlex.quote
    scratch = f"{staged}.d"
    entry = q(posixpath.normpath(posixpath.join(scratch, static_source(src))))
    into = "true" if target.endswith("/") else f"[ -d {q(target)} ]"
    lines = [
        f"{bb} rm -rf {q(scratch)} && {bb} mkdir -p {q(scratch)}",
        f"{bb} tar -x{'z' if gzipped else ''}f {q(staged)} -C {q(scratch)}",
        f"{{ [ -e {entry} ] || [ -L {entry} ]; }} || "
        f"{{ echo {q(f'no such file in the uploaded context: {src}')} >&2; exit 1; }}",
        f"{bb} chown -hR {q(owner)}: {entry}",
        *([f"{bb} chmod -R {q(mode)} {entry}"] if mode else []),
        f"{bb} mkdir -p {q(posixpath.dirname(target.rstrip('/')) or '/')}",
        f"if [ -d {entry} ]; then {bb} mkdir -p {q(target)} && {bb} cp -a {entry}/. {q(target)}; "
        f"elif {into}; then {bb} mkdir -p {q(target)} && {bb} cp -a {entry} {q(target)}/; "
        f"else {bb} cp -a {entry} {q(target)}; fi",
        f"{bb} rm -rf {q(scratch)} {q(staged)}",
    ]
    return " && ".join(lines)
