"""`aenv cp` both ways, files and folders, over a fake SDK file system."""

from __future__ import annotations

from pathlib import Path
from typing import cast

import pytest
from aenv_cli_fake_guest import FakeFiles, FakeGuest, FakeTerminal
from aenv_cli_fake_server import FakeServer, fake_clients, invoke, sandbox
from e2b import AsyncSandbox

from aenv_cli.commands.context import Clients
from aenv_cli.commands.copy import Place
from aenv_common.errors import InvalidArgument


@pytest.fixture
def files() -> FakeFiles:
    return FakeFiles()


@pytest.fixture
def given(files: FakeFiles) -> Clients:
    server = FakeServer()
    server.add(sandbox("sb1"))
    guest = FakeGuest(files=files)

    async def open_guest(sandbox_id: str) -> AsyncSandbox:
        return cast(AsyncSandbox, guest)

    made: Clients = fake_clients(server, open_guest=open_guest,
                                 terminal=FakeTerminal(tty=False))
    return made


def test_a_file_up_into_a_folder_and_to_a_new_name(given: Clients, files: FakeFiles,
                                                   tmp_path: Path) -> None:
    (tmp_path / "a.txt").write_bytes(b"hello world")
    result = invoke(given, "cp", str(tmp_path / "a.txt"), "sb1:/tmp")
    assert result.exit_code == 0, result.output
    assert files.files["/tmp/a.txt"] == b"hello world" and "copied 1 file" in result.stderr
    assert invoke(given, "cp", str(tmp_path / "a.txt"), "sb1:/tmp/b.txt").exit_code == 0
    assert files.files["/tmp/b.txt"] == b"hello world"


def test_a_folder_up_and_back_down(given: Clients, files: FakeFiles, tmp_path: Path) -> None:
    tree = tmp_path / "tree"
    (tree / "sub").mkdir(parents=True)
    (tree / "one").write_bytes(b"1")
    (tree / "sub" / "two").write_bytes(b"22222")
    assert invoke(given, "cp", str(tree), "sb1:/home/user/").exit_code == 0
    assert files.files == {"/home/user/tree/one": b"1", "/home/user/tree/sub/two": b"22222"}
    back = tmp_path / "back"
    result = invoke(given, "cp", "sb1:/home/user/tree", str(back))
    assert result.exit_code == 0 and "copied 2 files" in result.stderr
    assert (back / "one").read_bytes() == b"1" and (back / "sub" / "two").read_bytes() == b"22222"


def test_a_file_down_into_a_folder(given: Clients, files: FakeFiles, tmp_path: Path) -> None:
    files.files["/tmp/out.bin"] = bytes(range(10))
    assert invoke(given, "cp", "sb1:/tmp/out.bin", str(tmp_path)).exit_code == 0
    assert (tmp_path / "out.bin").read_bytes() == bytes(range(10))
    assert [p.name for p in tmp_path.iterdir()] == ["out.bin"]  # no partial file left


def test_missing_sources_and_bad_places_are_one_line(given: Clients, tmp_path: Path) -> None:
    down = invoke(given, "cp", "sb1:/nope", str(tmp_path))
    assert down.exit_code == 1 and down.stderr == "error: path '/nope' does not exist\n"
    up = invoke(given, "cp", str(tmp_path / "nope"), "sb1:/tmp")
    assert up.exit_code == 1 and "no such local file or folder" in up.stderr
    both = invoke(given, "cp", "a", "b")
    assert both.exit_code == 2 and "one side of cp is a local path" in both.stderr


@pytest.mark.parametrize(("text", "place"), [
    ("sb1:/tmp/x", Place("/tmp/x", "sb1")), ("./a:b", Place("./a:b")),
    ("/x:y", Place("/x:y")), ("plain", Place("plain")),
])
def test_places(text: str, place: Place) -> None:
    assert Place.parse(text) == place


def test_a_sandbox_without_a_path() -> None:
    with pytest.raises(InvalidArgument):
        Place.parse("sb1:")
