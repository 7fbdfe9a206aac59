"""A template's recipe: the E2B build steps run on its rootfs, then its start and ready commands.

The E2B SDKs send it as `TemplateBuildStartV2` (`steps: [{type, args, force, filesHash}]`,
`startCmd`, `readyCmd`); `Recipe.from_e2b` reads that shape and refuses what the SDK never sends,
naming the step (the SDK maps `step N` back to the line of the user's template code):

    RUN      [command] or [command, user]
    ENV      [key, value, key, value, ...]
    WORKDIR  [path]
    USER     [user] or [user, "true"]   (made when missing; "true": a passwordless sudoer)
    COPY     [src, dest, user, mode]   with filesHash: the uploaded context's tarball

Pure: no I/O. `digest()` keys the template's snapshot, so a changed recipe builds anew.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from enum import StrEnum
from typing import Any

from aenv_common.errors import InvalidArgument


class StepKind(StrEnum):
    RUN = "RUN"
    ENV = "ENV"
    WORKDIR = "WORKDIR"
    USER = "USER"
    COPY = "COPY"


@dataclass(frozen=True)
class Step:
    kind: StepKind
    args: tuple[str, ...]
    files_hash: str | None = None

    def describe(self) -> str:
        return f"{self.kind} {' '.join(self.args)}".strip()


@dataclass(frozen=True)
class Recipe:
    steps: tuple[Step, ...] = ()
    start_cmd: str | None = None
    ready_cmd: str | None = None
    # What an OCI image's config sets before any step (its Env and WorkingDir); `from_image`
    # also has the build make E2B's `user`, which an image lacks.
    image_env: tuple[tuple[str, str], ...] = ()
    image_workdir: str | None = None
    from_image: bool = False
    # How long the ready command may take to succeed (None: the node's setting); only the
    # built-in templates set it. Shapes nothing captured, so it is not in the digest.
    ready_timeout_s: float | None = None

    def __bool__(self) -> bool:
        return bool(self.steps or self.start_cmd or self.from_image)

    def digest(self) -> str:
        plain = {"steps": [[s.kind, list(s.args), s.files_hash] for s in self.steps],
                 "start": self.start_cmd, "ready": self.ready_cmd,
                 "image": [self.from_image, list(self.image_env), self.image_workdir]}
        return hashlib.sha256(json.dumps(plain, sort_keys=True).encode()).hexdigest()

    def to_json(self) -> dict[str, Any]:
        return {"steps": [{"type": s.kind.value, "args": list(s.args), "filesHash": s.files_hash}
                          for s in self.steps],
                "startCmd": self.start_cmd, "readyCmd": self.ready_cmd,
                "imageEnv": [list(pair) for pair in self.image_env],
                "imageWorkdir": self.image_workdir, "fromImage": self.from_image}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Recipe:
        """What `to_json` wrote (a node's saved templates)."""
        recipe = cls.from_e2b(data)
        return replace(recipe, image_env=tuple((k, v) for k, v in data.get("imageEnv") or []),
                       image_workdir=data.get("imageWorkdir"),
                       from_image=bool(data.get("fromImage")))

    def after(self, parent: Recipe) -> Recipe:
        """This recipe built on `parent`'s template (E2B's `from_template`): the parent's image
        settings and steps, then ours; our start command if we have one, else the parent's."""
        start, ready = (self.start_cmd, self.ready_cmd) if self.start_cmd else (
            parent.start_cmd, parent.ready_cmd)
        return replace(parent, steps=parent.steps + self.steps, start_cmd=start, ready_cmd=ready)

    def on_image(self, config: Mapping[str, Any]) -> Recipe:
        """This recipe run on an image whose config (OCI image config JSON) is `config`."""
        inner = config.get("config") or {}
        pairs = [entry.partition("=") for entry in inner.get("Env") or [] if "=" in entry]
        return replace(self, image_env=tuple((key, value) for key, _, value in pairs),
                       image_workdir=inner.get("WorkingDir") or None, from_image=True)

    @classmethod
    def from_e2b(cls, body: Mapping[str, Any]) -> Recipe:
        """:raise InvalidArgument: a step of a kind or shape the SDK never sends."""
        raw_steps = body.get("steps") or []
        if not isinstance(raw_steps, list):
            raise InvalidArgument("steps must be a list")
        steps = tuple(_step(number, raw) for number, raw in enumerate(raw_steps, start=1))
        start, ready = _optional_text(body, "startCmd"), _optional_text(body, "readyCmd")
        if ready and not start:
            raise InvalidArgument("readyCmd needs a startCmd")
        return cls(steps, start, ready)


def _step(number: int, raw: object) -> Step:
    if not isinstance(raw, Mapping):
        raise InvalidArgument(f"step {number}: not an object")
    kind_name, args = raw.get("type"), raw.get("args") or []
    try:
        kind = StepKind(str(kind_name))
    except ValueError:
        raise InvalidArgument(f"step {number}: unknown step type {kind_name!r}") from None
    if not isinstance(args, list) or not all(isinstance(a, str) for a in args):
        raise InvalidArgument(f"step {number} ({kind}): args must be strings")
    files_hash = raw.get("filesHash")
    _check_shape(number, kind, args, files_hash)
    return Step(kind, tuple(args), files_hash if kind is StepKind.COPY else None)


def _check_shape(number: int, kind: StepKind, args: Sequence[str], files_hash: object) -> None:
    problem = None
    if kind is StepKind.RUN and not (1 <= len(args) <= 2 and args[0].strip()):
        problem = "needs a command (and optionally a user)"
    elif kind is StepKind.ENV and (not args or len(args) % 2):
        problem = "needs key/value pairs"
    elif kind is StepKind.WORKDIR and (len(args) != 1 or not args[0]):
        problem = "needs one path"
    elif kind is StepKind.USER and not (1 <= len(args) <= 2 and args[0]):
        problem = "needs a user name (and optionally whether it may sudo)"
    elif kind is StepKind.COPY and len(args) != 4:
        problem = "needs src, dest, user and mode"
    elif kind is StepKind.COPY and not (isinstance(files_hash, str) and files_hash):
        problem = "needs the filesHash of its uploaded files"
    if problem:
        raise InvalidArgument(f"step {number} ({kind}): {problem}")


def _optional_text(body: Mapping[str, Any], name: str) -> str | None:
    value = body.get(name)
    if value is None or value == "":
        return None
    if not isinstance(value, str):
        raise InvalidArgument(f"{name} must be a string")
    return value
