"""The stream's lines as the SDK reads them (pure)."""

from __future__ import annotations

import json

from e2b_code_interpreter.models import Execution, parse_output

from aenv_codeinterp import outputs


def test_a_bundle_maps_each_mime_type_to_the_sdks_field() -> None:
    line = outputs.result({"text/plain": "'quoted'", "image/png": "iVBOR", "e2b/data": {"a": [1]},
                           "application/vnd.custom": "x"}, main=True)
    assert line == {"type": "result", "is_main_result": True, "text": "quoted", "png": "iVBOR",
                    "data": {"a": [1]}, "extra": {"application/vnd.custom": "x"}}
    execution = Execution()
    parse_output(execution, json.dumps(line))
    [result] = execution.results
    assert (result.text, result.png, result.data, result.is_main_result) == (
        "quoted", "iVBOR", {"a": [1]}, True)
    assert execution.text == "quoted"


def test_streams_errors_counts_and_keepalives_parse() -> None:
    execution = Execution()
    for line in (outputs.execution_count(3), outputs.stream("stdout", "a\n"),
                 outputs.stream("stderr", "b\n"), outputs.KEEPALIVE,
                 outputs.error("ValueError", "bad", "tb")):
        parse_output(execution, outputs.line(line).decode())
    assert execution.execution_count == 3
    assert (execution.logs.stdout, execution.logs.stderr) == (["a\n"], ["b\n"])
    assert execution.error is not None and execution.error.name == "ValueError"
