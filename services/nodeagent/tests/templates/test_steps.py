"""A recipe's steps over a fake guest: what each step asks of envd, what the sandboxes inherit,
and how a failing step, start command or ready check ends the build."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from aenv_common.errors import InvalidArgument, NotFound
from aenv_nodeagent.guest_commands import CommandResult, CommandSpec
from aenv_nodeagent.templates import steps as steps_module
from aenv_nodeagent.templates.recipe import Recipe
from aenv_nodeagent.templates.steps import BuildContexts, BuildStepFailed, GuestDefaults, StepRunner


class FakeGuest:
    """GuestCommands' surface; `answers` picks a result by the command run."""

    def __init__(self, answer: Callable[[CommandSpec], CommandResult] | None = None) -> None:
        self.ran: list[CommandSpec] = []
        self.started: list[CommandSpec] = []
        self.uploads: list[tuple[Path, str]] = []
        self._answer = answer or (lambda spec: CommandResult(0, b"", b""))

    async def run(self, host: str, spec: CommandSpec, *, timeout_s: float,
                  token: str = "") -> CommandResult:
        self.ran.append(spec)
        return self._answer(spec)

    async def start(self, host: str, spec: CommandSpec, *, token: str = "") -> int:
        self.started.append(spec)
        return 42

    async def upload(self, host: str, source: Path, path: str, *, user: str = "root",
                     token: str = "") -> None:
        self.uploads.append((source, path))


def _runner(
    guest: FakeGuest, tmp_path: Path, lines: list[str] | None = None,
    steps: list[str] | None = None, ready_timeout_s: float = 120.0,
) -> StepRunner:
    def record(line: str, step: str = "", /) -> None:
        (lines if lines is not None else []).append(line)
        (steps if steps is not None else []).append(step)

    return StepRunner(guest, "10.0.0.2", BuildContexts(tmp_path),  # type: ignore[arg-type]
                      record, ready_timeout_s)


def _recipe(*steps: dict[str, object], **commands: str) -> Recipe:
    return Recipe.from_e2b({"steps": list(steps), **commands})


def _s(kind: str, *args: str, **extra: object) -> dict[str, object]:
    return {"type": kind, "args": list(args), **extra}


async def test_each_step_sees_what_the_ones_before_it_left(tmp_path: Path) -> None:
    guest = FakeGuest()
    defaults = await _runner(guest, tmp_path).run(_recipe(
        _s("RUN", "echo as-user"), _s("ENV", "A", "1"), _s("WORKDIR", "app"),
        _s("RUN", "make", "root"), _s("ENV", "A", "2", "B", "3"), _s("USER", "runner"),
        _s("RUN", "echo last")))
    configure, first, workdir, make, user, last = guest.ran
    assert configure.user == "root" and ">> /etc/passwd" in configure.command
    assert "'user ALL=(ALL:ALL) NOPASSWD: ALL' >> /etc/sudoers" in configure.command
    assert (first.user, first.cwd, first.envs) == ("user", "/home/user", {})
    assert workdir.command.endswith("mkdir -p /home/user/app")
    assert (make.user, make.cwd, make.envs) == ("root", "/home/user/app", {"A": "1"})
    assert user.user == "root" and "u=runner;" in user.command
    assert "/etc/sudoers" not in user.command  # a sudoer only when the step says "true"
    assert (last.user, last.cwd, last.envs) == ("runner", "/home/user/app", {"A": "2", "B": "3"})
    assert defaults == GuestDefaults("runner", "/home/user/app", {"A": "2", "B": "3"})


async def test_a_failing_step_names_itself_and_quotes_its_output(tmp_path: Path) -> None:
    def answer(spec: CommandSpec) -> CommandResult:
        if "pip" in spec.command:
            return CommandResult(1, b"Collecting nothing\n", b"warning\nERROR: no such package\n")
        return CommandResult(0, b"", b"")

    lines: list[str] = []
    steps: list[str] = []
    with pytest.raises(BuildStepFailed) as failed:
        await _runner(FakeGuest(answer), tmp_path, lines, steps).run(
            _recipe(_s("RUN", "true"), _s("RUN", "pip install nothing"), _s("RUN", "never")))
    assert failed.value.message == "step 2 (RUN): exited with code 1: ERROR: no such package"
    assert "step 2: RUN pip install nothing" in lines and "ERROR: no such package" in lines
    # Each line carries its step, as E2B's SDK maps a failure back to the user's code.
    by_line = dict(zip(lines, steps, strict=True))
    assert by_line["step 1: RUN true"] == "1"
    assert by_line["ERROR: no such package"] == "2"


async def test_copy_uploads_the_context_and_unpacks_it_as_root(tmp_path: Path) -> None:
    (tmp_path / "ab12").write_bytes(b"\x1f\x8b rest of a gzip")
    guest = FakeGuest()
    await _runner(guest, tmp_path).run(_recipe(
        _s("WORKDIR", "/srv"), _s("COPY", "site", "www/", "", "0755", filesHash="ab12")))
    assert guest.uploads == [(tmp_path / "ab12", "/tmp/.aenv-copy-ab12")]
    copy = guest.ran[-1]
    assert copy.user == "root"
    for piece in ("tar -xzf /tmp/.aenv-copy-ab12", "chown -hR user: /tmp/.aenv-copy-ab12.d/site",
                  "chmod -R 0755", "/srv/www/"):
        assert piece in copy.command


async def test_copy_of_files_never_uploaded_fails_the_step(tmp_path: Path) -> None:
    with pytest.raises(BuildStepFailed, match=r"step 1 \(COPY\): no uploaded files for hash cd34"):
        await _runner(FakeGuest(), tmp_path).run(
            _recipe(_s("COPY", "a", "/b", "", "", filesHash="cd34")))


async def test_the_start_command_runs_as_the_recipe_left_and_ready_is_polled(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(steps_module, "READY_INTERVAL_S", 0)
    checks = iter([1, 1, 0])

    def answer(spec: CommandSpec) -> CommandResult:
        return CommandResult(next(checks) if "ready" in spec.command else 0, b"", b"")

    guest = FakeGuest(answer)
    await _runner(guest, tmp_path).run(_recipe(
        _s("ENV", "PORT", "8000"), startCmd="serve", readyCmd="ready-check"))
    (start,) = guest.started
    assert (start.command, start.user, start.envs) == ("serve", "user", {"PORT": "8000"})
    assert [spec.command for spec in guest.ran].count("ready-check") == 3


async def test_a_ready_command_that_never_succeeds_fails_the_build(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(steps_module, "READY_INTERVAL_S", 0)
    guest = FakeGuest(lambda spec: CommandResult(7 if spec.command == "false" else 0, b"", b""))
    with pytest.raises(BuildStepFailed, match=r"ready command `false` did not succeed .*code 7"):
        await _runner(guest, tmp_path, ready_timeout_s=0.05).run(
            _recipe(startCmd="serve", readyCmd="false"))


async def test_steps_start_from_the_images_environment_and_directory(tmp_path: Path) -> None:
    guest = FakeGuest()
    recipe = _recipe(_s("ENV", "B", "2"), _s("RUN", "make")).on_image(
        {"config": {"Env": ["PATH=/bin", "B=1"], "WorkingDir": "/src"}})
    defaults = await _runner(guest, tmp_path).run(recipe)
    make = guest.ran[-1]
    assert (make.cwd, make.envs) == ("/src", {"PATH": "/bin", "B": "2"})
    assert defaults == GuestDefaults("user", "/src", {"PATH": "/bin", "B": "2"})
    configure = guest.ran[0].command
    assert "'root:x:0:0:root:/root:/bin/sh' >> /etc/passwd" in configure  # none in the image


async def test_uploaded_files_are_pulled_from_snapstore_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pulls: list[str] = []

    async def pull_context(stub: object, files_hash: str, folder: Path) -> Path:
        pulls.append(files_hash)
        if files_hash != "abc1":
            raise NotFound("no such manifest")
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "context").write_bytes(b"tarball")
        return folder / "context"

    monkeypatch.setattr(steps_module, "pull_context", pull_context)
    contexts = BuildContexts(tmp_path / "contexts", stub=object())
    first = await contexts.archive("abc1")
    assert first == tmp_path / "contexts" / "abc1" and first.read_bytes() == b"tarball"
    assert await contexts.archive("abc1") == first and pulls == ["abc1"]
    with pytest.raises(NotFound, match="no uploaded files for hash dead"):
        await contexts.archive("dead")
    with pytest.raises(InvalidArgument, match="not a lower-case hex digest"):
        await contexts.archive("../x")
    assert sorted(p.name for p in (tmp_path / "contexts").iterdir()) == ["abc1"]


async def test_each_step_is_checkpointed_after_the_guest_synced(tmp_path: Path) -> None:
    guest = FakeGuest()
    points: list[tuple[int, GuestDefaults]] = []

    async def checkpoint(number: int, now: GuestDefaults) -> None:
        assert guest.ran[-1].command.endswith("busybox sync")  # the disk holds the step
        points.append((number, now))

    await _runner(guest, tmp_path).run(
        _recipe(_s("RUN", "make"), _s("ENV", "A", "1")), checkpoint=checkpoint)
    assert [number for number, _ in points] == [0, 1, 2]
    assert points[-1][1].env_vars == {"A": "1"}


async def test_a_resumed_build_runs_only_the_steps_after_its_layer(tmp_path: Path) -> None:
    guest = FakeGuest()
    lines: list[str] = []
    points: list[int] = []

    async def checkpoint(number: int, now: GuestDefaults) -> None:
        points.append(number)

    left = GuestDefaults("builder", "/src", {"A": "1"})
    defaults = await _runner(guest, tmp_path, lines).run(
        _recipe(_s("RUN", "first"), _s("RUN", "second"), _s("RUN", "third")),
        resume=(2, left), checkpoint=checkpoint)
    ran = [spec.command for spec in guest.ran if not spec.command.endswith("sync")]
    assert ran == ["third"]  # no configure phase, no first or second step
    assert (guest.ran[0].user, guest.ran[0].cwd, guest.ran[0].envs) == ("builder", "/src",
                                                                        {"A": "1"})
    assert points == [3] and defaults == left
    assert "steps 1-2 unchanged: their layers are reused" in lines
