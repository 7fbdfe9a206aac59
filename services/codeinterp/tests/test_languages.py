"""TypeScript cells and PIL images as E2B's code interpreter serves them (the official suite's
`test_cwd_typescript` and `images/test_images.py`, ported), against the real kernels."""

from __future__ import annotations

import base64

import pytest

from .conftest import Server

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
IMAGE = ("import numpy\nfrom PIL import Image\n"
         "pixels = numpy.random.rand(16, 16, 3) * 255\n"
         "image = Image.fromarray(pixels.astype('uint8')).convert('RGBA')\n")


def _png(result_png: str | None) -> bytes:
    assert result_png
    return base64.b64decode(result_png)


def test_typescript_runs_on_node_with_its_types_stripped(server: Server) -> None:
    assert server.run("process.cwd()", language="ts").text == str(server.cwd)
    assert server.run("const base: number = 40\ninterface Pair { a: number }",
                      language="typescript").error is None
    awaited = server.run("const more = await Promise.resolve<number>(2)\nbase + more",
                         language="ts")
    assert awaited.text == "42"
    imported = server.run("import { join } from 'node:path'\nconst p: string = join('a', 'b')\n"
                          "console.log(p)", language="ts")
    assert imported.logs.stdout == ["a/b\n"]
    thrown = server.run("throw new TypeError('bad')", language="ts")
    assert thrown.error is not None
    assert (thrown.error.name, thrown.error.value) == ("TypeError", "bad")


def test_a_typescript_cell_that_does_not_parse_is_a_compiler_error(server: Server) -> None:
    failed = server.run("const broken: = 1", language="ts")
    assert failed.error is not None and failed.error.name == "TypeScriptCompilerError"
    assert 'Unexpected "="' in failed.error.value
    assert server.run("1 + 1", language="ts").text == "2"  # the context goes on


def test_a_typescript_context_is_its_own(server: Server) -> None:
    made = server.post("/contexts", language="ts").json()
    assert made["language"] == "typescript"
    assert server.run("const only: string = 'here'", context_id=made["id"]).error is None
    elsewhere = server.run("only", language="ts")
    assert elsewhere.error is not None and elsewhere.error.name == "ReferenceError"


@pytest.mark.parametrize("show", ["image.save('saved.png')\nprint('Image saved.')",
                                  "image.show()\nprint('Image shown.')",
                                  "image"])
def test_a_pil_image_saved_shown_or_last_is_a_png_result(server: Server, show: str) -> None:
    execution = server.run(IMAGE + show)
    assert execution.error is None
    assert _png(execution.results[0].png).startswith(PNG_MAGIC)


def test_a_saved_pil_image_is_also_written(server: Server) -> None:
    execution = server.run(IMAGE + "image.save('written.png')")
    assert _png(execution.results[0].png).startswith(PNG_MAGIC)
    assert (server.cwd / "written.png").read_bytes().startswith(PNG_MAGIC)
