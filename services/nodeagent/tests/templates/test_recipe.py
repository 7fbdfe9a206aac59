"""E2B's build body read into a recipe: every step kind the SDK sends, and the refusals that
name the step."""

from __future__ import annotations

from typing import Any

import pytest

from aenv_common.errors import InvalidArgument
from aenv_nodeagent.templates.recipe import Recipe, Step, StepKind


def _step(kind: str, *args: str, **extra: Any) -> dict[str, Any]:
    return {"type": kind, "args": list(args), "force": False, **extra}


def test_the_sdks_steps_and_commands_are_read() -> None:
    recipe = Recipe.from_e2b({
        "fromImage": "python:3.11", "force": False,
        "steps": [
            _step("RUN", "pip install x && echo done"), _step("RUN", "apt-get update", "root"),
            _step("ENV", "A", "1", "B", "two words"), _step("WORKDIR", "/app"),
            _step("USER", "runner", "true"),
            _step("COPY", "app.py", "/app/", "", "0755", filesHash="ab12", forceUpload=None),
        ],
        "startCmd": "python app.py", "readyCmd": "curl -sf localhost:8000",
    })
    assert recipe.steps == (
        Step(StepKind.RUN, ("pip install x && echo done",)),
        Step(StepKind.RUN, ("apt-get update", "root")),
        Step(StepKind.ENV, ("A", "1", "B", "two words")),
        Step(StepKind.WORKDIR, ("/app",)), Step(StepKind.USER, ("runner", "true")),
        Step(StepKind.COPY, ("app.py", "/app/", "", "0755"), files_hash="ab12"),
    )
    assert (recipe.start_cmd, recipe.ready_cmd) == ("python app.py", "curl -sf localhost:8000")
    assert recipe and not Recipe.from_e2b({"fromTemplate": "base"})


def test_the_digest_follows_what_shapes_the_template() -> None:
    one = Recipe.from_e2b({"steps": [_step("RUN", "true")]})
    forced = Recipe.from_e2b({"steps": [_step("RUN", "true")], "force": True})
    assert one.digest() == forced.digest()
    assert one.digest() != Recipe.from_e2b({"steps": [_step("RUN", "false")]}).digest()
    assert one.digest() != Recipe.from_e2b(
        {"steps": [_step("RUN", "true")], "startCmd": "x"}).digest()


@pytest.mark.parametrize(("body", "message"), [
    ({"steps": [_step("RUN")]}, "step 1 (RUN): needs a command"),
    ({"steps": [_step("RUN", "true"), _step("ENV", "A")]}, "step 2 (ENV): needs key/value pairs"),
    ({"steps": [_step("WORKDIR", "/a", "/b")]}, "step 1 (WORKDIR): needs one path"),
    ({"steps": [_step("USER")]}, "step 1 (USER): needs a user name"),
    ({"steps": [_step("COPY", "a", "/b", "", "")]}, "step 1 (COPY): needs the filesHash"),
    ({"steps": [_step("COPY", "a", "/b")]}, "step 1 (COPY): needs src, dest, user and mode"),
    ({"steps": [_step("ADD", "x")]}, "step 1: unknown step type 'ADD'"),
    ({"steps": [{"type": "RUN", "args": [1]}]}, "step 1 (RUN): args must be strings"),
    ({"steps": "RUN x"}, "steps must be a list"),
    ({"readyCmd": "true"}, "readyCmd needs a startCmd"),
    ({"startCmd": 5}, "startCmd must be a string"),
])
def test_what_the_sdk_never_sends_is_refused_naming_the_step(
    body: dict[str, Any], message: str
) -> None:
    with pytest.raises(InvalidArgument, match=message.replace("(", r"\(").replace(")", r"\)")):
        Recipe.from_e2b(body)


def test_an_images_config_gives_the_environment_and_directory_steps_start_from() -> None:
    config = {"architecture": "amd64", "config": {
        "Env": ["PATH=/usr/local/bin:/usr/bin", "LANG=C.UTF-8", "EMPTY=", "NOEQUALS"],
        "WorkingDir": "/app", "Cmd": ["python"]}}
    recipe = Recipe.from_e2b({"steps": [_step("RUN", "true")]}).on_image(config)
    assert recipe.image_env == (("PATH", "/usr/local/bin:/usr/bin"), ("LANG", "C.UTF-8"),
                                ("EMPTY", ""))
    assert recipe.image_workdir == "/app" and recipe.from_image
    # An image alone (no step) is still a recipe: the build makes E2B's `user` in it.
    bare = Recipe().on_image({"config": {}})
    assert bare and bare.image_workdir is None and bare.digest() != Recipe().digest()


def test_a_recipe_is_saved_and_read_back_whole() -> None:
    recipe = Recipe.from_e2b({"steps": [
        _step("ENV", "A", "1"), _step("COPY", "a", "/b", "user", "0644", filesHash="h1")],
        "startCmd": "serve", "readyCmd": "check"}).on_image(
            {"config": {"Env": ["PATH=/bin"], "WorkingDir": "/w"}})
    assert Recipe.from_json(recipe.to_json()) == recipe


def test_a_template_built_on_another_runs_its_steps_then_ours() -> None:
    parent = Recipe.from_e2b({"steps": [_step("RUN", "one")], "startCmd": "serve",
                              "readyCmd": "check"}).on_image({"config": {"Env": ["X=1"]}})
    child = Recipe.from_e2b({"steps": [_step("RUN", "two")]}).after(parent)
    assert [s.args for s in child.steps] == [("one",), ("two",)]
    assert (child.start_cmd, child.ready_cmd, child.image_env) == ("serve", "check",
                                                                  (("X", "1"),))
    own = Recipe.from_e2b({"startCmd": "mine"}).after(parent)
    assert (own.start_cmd, own.ready_cmd) == ("mine", None)
