"""The server against the real kernels, read with the SDK's own parser."""

from __future__ import annotations

import base64
import time

import httpx
import pytest

from .conftest import Server

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def test_python_keeps_state_streams_and_counts(server: Server) -> None:
    first = server.run("x = 1")
    second = server.run("import sys\nprint('out')\nprint('err', file=sys.stderr)\nx += 1\nx")
    assert second.text == "2"
    assert (second.logs.stdout, second.logs.stderr) == (["out\n"], ["err\n"])
    assert first.execution_count is not None
    assert second.execution_count == first.execution_count + 1


def test_python_errors_figures_frames_and_display_data(server: Server) -> None:
    failed = server.run("1 / 0")
    assert failed.error is not None
    assert (failed.error.name, failed.error.value) == ("ZeroDivisionError", "division by zero")
    assert "ZeroDivisionError" in failed.error.traceback  # IPython's, colours and all

    figure = server.run("import matplotlib.pyplot as plt\nplt.plot([1, 2])\nplt.show()")
    [png] = [r.png for r in figure.results if r.png]
    assert base64.b64decode(png).startswith(PNG_MAGIC)

    frame = server.run("import pandas as pd\npd.DataFrame({'a': [1, 2], 'b': ['x', None]})")
    [main] = frame.results
    assert main.is_main_result and main.data == {"a": [1, 2], "b": ["x", None]}
    assert main.html and "<table" in main.html

    shown = server.run("from IPython.display import HTML, display\n"
                       "display(HTML('<i>1</i>'))\n'last'")
    assert [(r.is_main_result, r.html) for r in shown.results] == [
        (False, "<i>1</i>"), (True, None)]
    assert shown.text == "last"


def test_contexts_are_made_listed_restarted_and_removed(server: Server) -> None:
    made = server.post("/contexts", cwd=str(server.cwd / "..")).json()
    assert made["language"] == "python"
    assert server.run("import os; os.getcwd()", context_id=made["id"]).text == str(
        (server.cwd / "..").resolve())
    server.run("kept = 1", context_id=made["id"])
    assert made in httpx.get(f"{server.url}/contexts").json()
    assert server.post(f"/contexts/{made['id']}/restart").status_code == 204
    gone = server.run("kept", context_id=made["id"])
    assert gone.error is not None and gone.error.name == "NameError"
    assert httpx.delete(f"{server.url}/contexts/{made['id']}").status_code == 204
    assert httpx.delete(f"{server.url}/contexts/{made['id']}").status_code == 404
    assert server.post(f"/contexts/{made['id']}/restart").status_code == 404
    unknown = server.post("/execute", code="1", context_id=made["id"])
    assert (unknown.status_code, unknown.text) == (404, f"Context {made['id']} not found")


def test_requests_the_server_cannot_run_are_refused_with_their_reason(server: Server) -> None:
    java = server.post("/execute", code="1", language="java")
    assert java.status_code == 400 and "java" in java.text and "python" in java.text
    both = server.post("/execute", code="1", language="python", context_id="x")
    assert both.status_code == 400
    assert httpx.post(f"{server.url}/execute", content=b"{", timeout=10).status_code == 400
    assert server.post("/execute", code=1).status_code == 400
    assert server.post("/contexts", language="deno").status_code == 400


def test_javascript_awaits_imports_and_throws(server: Server) -> None:
    assert server.run("const base = 40", language="javascript").error is None
    assert server.run("const more = await Promise.resolve(2); base + more",
                      language="js").text == "42"
    assert server.run("import { join } from 'node:path'; join('a', 'b')",
                      language="javascript").text == "a/b"
    printed = server.run("console.log('out'); console.error('err'); 'done'", language="js")
    assert (printed.logs.stdout, printed.logs.stderr, printed.text) == (
        ["out\n"], ["err\n"], "done")
    thrown = server.run("throw new TypeError('bad')", language="javascript")
    assert thrown.error is not None
    assert (thrown.error.name, thrown.error.value) == ("TypeError", "bad")
    last = server.run("base", language="javascript")
    assert last.text == "40"
    assert thrown.execution_count is not None and last.execution_count == (
        thrown.execution_count + 1)


def test_bash_keeps_its_shell_and_reports_exit_statuses(server: Server) -> None:
    assert server.run("N=41; f() { echo $((N + 1)); }; cd /tmp", language="bash").error is None
    assert server.run("f; pwd", language="bash").logs.stdout == ["42\n", "/tmp\n"]
    failed = server.run("echo before; false", language="bash")
    assert failed.logs.stdout == ["before\n"]
    assert failed.error is not None and failed.error.value == "exit status 1"
    again = server.run("true", language="bash")
    assert failed.execution_count is not None and again.execution_count == (
        failed.execution_count + 1)


def test_the_sandboxs_variables_follow_envd_and_a_cells_last_for_it(server: Server) -> None:
    server.envd.variables = {"FROM_ENVD": "one", "E2B_SANDBOX_ID": "a"}
    probe = "import os; os.environ.get('FROM_ENVD'), os.environ.get('ONCE')"
    assert server.run(probe).text == "('one', None)"
    assert server.envd.tokens[-1] == "tok"  # the request's access token went on to envd
    assert server.run(probe, env_vars={"ONCE": "1", "FROM_ENVD": "two"}).text == "('two', '1')"
    assert server.run(probe).text == "('one', None)"
    server.envd.variables = {"E2B_SANDBOX_ID": "a"}
    assert server.run(probe).text == "(None, None)"
    assert server.run("echo ${ONCE:-none}", language="bash", env_vars={"ONCE": "b"}
                      ).logs.stdout == ["b\n"]
    assert server.run("echo ${ONCE:-none}", language="bash").logs.stdout == ["none\n"]


def test_a_new_sandbox_identity_reseeds_the_kernels_random_generators(server: Server) -> None:
    server.envd.variables = {"E2B_SANDBOX_ID": "parent"}
    server.run("import random\nrandom.seed(7)")
    seeded = server.run("random.random()").text
    server.run("random.seed(7)")
    assert server.run("random.random()").text == seeded  # same sandbox: nothing reseeds
    server.run("random.seed(7)")
    server.envd.variables = {"E2B_SANDBOX_ID": "child"}  # as a fork child's envd says
    assert server.run("random.random()").text != seeded


@pytest.mark.parametrize(("language", "setup", "busy", "probe", "expected"), [
    ("python", "kept = 'state'", "import time\nwhile True: time.sleep(0.1)", "kept", "state"),
    ("javascript", "var kept = 'state'", "while (true) {}", "kept", "state"),
    ("javascript", "var kept = 'state'", "await new Promise(() => {})", "kept", "state"),
])
def test_a_client_that_goes_away_interrupts_its_cell(
    server: Server, language: str, setup: str, busy: str, probe: str, expected: str
) -> None:
    server.run(setup, language=language)
    with pytest.raises(httpx.ReadTimeout):
        httpx.post(f"{server.url}/execute", json={"code": busy, "language": language},
                   timeout=2)
    started = time.monotonic()
    assert server.run(probe, language=language, timeout=30).text == expected
    assert time.monotonic() - started < 15


def test_an_interrupted_bash_cell_leaves_the_shell(server: Server) -> None:
    server.run("KEPT=state", language="bash")
    with pytest.raises(httpx.ReadTimeout):
        httpx.post(f"{server.url}/execute",
                   json={"code": "while true; do sleep 1; done", "language": "bash"}, timeout=2)
    assert server.run("echo $KEPT", language="bash", timeout=30).logs.stdout == ["state\n"]


def test_a_quiet_cell_streams_keepalives(server: Server) -> None:
    with httpx.stream("POST", f"{server.url}/execute",
                      json={"code": "import time; time.sleep(6); 'woke'"}, timeout=30) as response:
        kinds = [line.split('"type": "')[1].split('"')[0] for line in response.iter_lines()]
    assert "keepalive" in kinds and kinds[-1] == "end_of_execution"


def test_a_contexts_missing_cwd_is_made_and_one_that_cannot_be_is_refused(
    server: Server
) -> None:
    missing = server.cwd / "made" / "here"
    made = server.post("/contexts", cwd=str(missing)).json()
    assert made["cwd"] == str(missing)
    assert server.run("import os; os.getcwd()", context_id=made["id"]).text == str(missing)
    (server.cwd / "a-file").write_text("")
    refused = server.post("/contexts", cwd=str(server.cwd / "a-file" / "below"))
    assert refused.status_code == 400 and "a-file" in refused.text
