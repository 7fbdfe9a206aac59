"""The code interpreter through the official `e2b-code-interpreter` SDK, unmodified, against
the whole platform: `Sandbox.create()` gets `code-interpreter-v1` with warm kernels; state, streams,
rich results, errors, contexts, languages, env vars and reconnects behave as the
SDK expects; and the agent code built on it (smolagents' E2BExecutor, an open-r1-style batch)
runs as it does against E2B."""

from __future__ import annotations

import asyncio
import base64
import textwrap
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import pytest
from e2b import NotFoundException, SandboxException, ServiceBusyException, TimeoutException
from e2b_code_interpreter import AsyncSandbox, Sandbox

from aenv_cli.platform import Platform

from .conftest import grpc_reset

pytestmark = [pytest.mark.vm, pytest.mark.sdk, pytest.mark.etcd, pytest.mark.netns]

# The node captures the template in the background from its start (once per cache): the
# first create of a run may wait for that.
CAPTURE_WITHIN_S = 900.0
_captured: list[bool] = []
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def _create(made: list[str], **kwargs: Any) -> Sandbox:
    deadline = time.monotonic() + (0 if _captured else CAPTURE_WITHIN_S)
    while True:
        try:
            sandbox = Sandbox.create(timeout=300, request_timeout=180, **kwargs)
            break
        except (SandboxException, ServiceBusyException, httpx.TimeoutException):
            if time.monotonic() > deadline:
                raise
            time.sleep(5)
    _captured.append(True)
    made.append(sandbox.sandbox_id)
    return sandbox


def test_state_streams_and_execution_count(sandboxes: list[str]) -> None:
    sandbox = _create(sandboxes)
    assert sandbox.get_info().template_id  # created from the SDK's default template
    first = sandbox.run_code("x = 1")
    assert first.error is None and first.results == []
    out: list[str] = []
    err: list[str] = []
    results: list[Any] = []
    second = sandbox.run_code(
        "import sys\nprint('to out')\nprint('to err', file=sys.stderr)\nx += 1\nx",
        on_stdout=lambda m: out.append(m.line), on_stderr=lambda m: err.append(m.line),
        on_result=results.append)
    assert second.text == "2"
    assert second.logs.stdout == ["to out\n"] and out == ["to out\n"]
    assert second.logs.stderr == ["to err\n"] and err == ["to err\n"]
    assert [r.text for r in results] == ["2"] and results[0].is_main_result
    assert first.execution_count is not None
    assert second.execution_count == first.execution_count + 1


def test_errors_carry_name_value_and_traceback(sandboxes: list[str]) -> None:
    sandbox = _create(sandboxes)
    errors: list[Any] = []
    execution = sandbox.run_code("def f():\n    return 1 / 0\nf()", on_error=errors.append)
    assert execution.error is not None
    assert execution.error.name == "ZeroDivisionError"
    assert execution.error.value == "division by zero"
    assert "ZeroDivisionError" in execution.error.traceback  # IPython's, coloured
    assert errors == [execution.error]
    assert sandbox.run_code("1 + 1").text == "2"  # the kernel goes on


def test_figures_dataframes_and_display_data(sandboxes: list[str]) -> None:
    sandbox = _create(sandboxes)
    figure = sandbox.run_code(
        "import matplotlib.pyplot as plt\nplt.plot([1, 2, 3], [3, 1, 2])\nplt.show()")
    assert figure.error is None
    pngs = [r.png for r in figure.results if r.png]
    assert pngs and base64.b64decode(pngs[0]).startswith(PNG_MAGIC)

    frame = sandbox.run_code("import pandas as pd\npd.DataFrame({'a': [1, 2], 'b': [3, 4]})")
    main = next(r for r in frame.results if r.is_main_result)
    assert main.data is not None and main.html and "<table" in main.html

    shown = sandbox.run_code(
        "from IPython.display import display, HTML\ndisplay(HTML('<b>one</b>'))\n"
        "display(HTML('<b>two</b>'))\n'last'")
    extras = [r.html for r in shown.results if not r.is_main_result]
    assert extras == ["<b>one</b>", "<b>two</b>"]
    assert shown.text == "last"


def test_contexts_have_their_own_state_and_cwd(sandboxes: list[str]) -> None:
    sandbox = _create(sandboxes)
    sandbox.run_code("shared = 'default'")
    context = sandbox.create_code_context(cwd="/tmp")
    assert context.language == "python" and context.cwd == "/tmp"
    assert sandbox.run_code("import os; os.getcwd()", context=context).text == "/tmp"
    isolated = sandbox.run_code("shared", context=context)
    assert isolated.error is not None and isolated.error.name == "NameError"
    assert context.id in {c.id for c in sandbox.list_code_contexts()}

    sandbox.run_code("kept = 1", context=context)
    sandbox.restart_code_context(context)
    gone = sandbox.run_code("kept", context=context)
    assert gone.error is not None and gone.error.name == "NameError"

    sandbox.remove_code_context(context)
    assert context.id not in {c.id for c in sandbox.list_code_contexts()}
    with pytest.raises(NotFoundException):
        sandbox.run_code("1", context=context)
    assert sandbox.run_code("shared").text == "default"


def test_bash_and_javascript_contexts(sandboxes: list[str]) -> None:
    sandbox = _create(sandboxes)
    assert sandbox.run_code("N=41; cd /tmp", language="bash").error is None
    bash = sandbox.run_code("echo $((N + 1)) $(pwd)", language="bash")
    assert bash.logs.stdout == ["42 /tmp\n"]
    failed = sandbox.run_code("false", language="bash")
    assert failed.error is not None

    assert sandbox.run_code("const base = 40", language="javascript").error is None
    js = sandbox.run_code("const more = await Promise.resolve(2); base + more",
                          language="javascript")
    assert js.text == "42"
    imported = sandbox.run_code("import { join } from 'node:path'; join('a', 'b')",
                                language="js")
    assert imported.text == "a/b"
    thrown = sandbox.run_code("throw new TypeError('bad')", language="javascript")
    assert thrown.error is not None and thrown.error.name == "TypeError"

    with pytest.raises(SandboxException, match="java"):
        sandbox.run_code("System.out.println(1);", language="java")


def test_env_vars_of_the_sandbox_and_of_one_run(sandboxes: list[str]) -> None:
    sandbox = _create(sandboxes, envs={"FROM_CREATE": "global"})
    probe = "import os; os.environ.get('FROM_CREATE'), os.environ.get('ONLY_ONCE')"
    assert sandbox.run_code(probe).text == "('global', None)"
    assert sandbox.run_code(probe, envs={"ONLY_ONCE": "1"}).text == "('global', '1')"
    assert sandbox.run_code(probe).text == "('global', None)"
    bash = sandbox.run_code("echo $FROM_CREATE", language="bash")
    assert bash.logs.stdout == ["global\n"]
    # E2B's default variables, this sandbox's own (its kernels were started in the template).
    assert sandbox.run_code("os.environ['E2B_SANDBOX_ID']").text == sandbox.sandbox_id
    assert sandbox.commands.run("echo $E2B_SANDBOX").stdout == "true\n"


def test_a_reconnected_sandbox_keeps_its_kernel(sandboxes: list[str]) -> None:
    sandbox = _create(sandboxes)
    sandbox.run_code("kept = 'state'")
    assert Sandbox.connect(sandbox.sandbox_id).run_code("kept").text == "state"


def test_a_timed_out_cell_is_interrupted_and_its_kernel_goes_on(sandboxes: list[str]) -> None:
    sandbox = _create(sandboxes)
    sandbox.run_code("kept = 41")
    with pytest.raises(TimeoutException):
        sandbox.run_code("import time\nwhile True: time.sleep(0.05)", timeout=3)
    # The loop was interrupted when the client went away: the context runs the next cell
    # (cells of a context are serialised, so a loop still running would time this out).
    after = sandbox.run_code("kept + 1", timeout=60)
    assert after.error is None and after.text == "42"
    with pytest.raises(TimeoutException):
        sandbox.run_code("sleep 600", language="bash", timeout=3)
    assert sandbox.run_code("echo on", language="bash", timeout=60).logs.stdout == ["on\n"]


def test_kernel_state_survives_pause_fork_and_reset(
    sandboxes: list[str], platform: Platform
) -> None:
    """Set up once, branch many: what the kernel holds before a pause, a snapshot or a fork is
    there after it, each fork child diverges, and a reset rewinds the kernel."""
    parent = _create(sandboxes)
    parent.run_code("import random\ndataset = list(range(1000))\nstage = 'set up'")
    assert parent.pause() is True
    resumed = Sandbox.connect(parent.sandbox_id, timeout=300)
    assert resumed.run_code("stage, len(dataset)").text == "('set up', 1000)"
    snapshot = parent.create_snapshot()
    parent.run_code("stage = 'moved on'")

    children = [c for c in parent.fork(count=16, timeout=300) if isinstance(c, Sandbox)]
    sandboxes.extend(child.sandbox_id for child in children)
    assert len(children) == 16

    def branch(child: Sandbox) -> tuple[str | None, str | None]:
        seen = child.run_code("stage, sum(dataset)", timeout=240, request_timeout=240)
        own = child.run_code(f"stage = '{child.sandbox_id}'\nrandom.random()", timeout=240,
                             request_timeout=240)
        return seen.text, own.text

    with ThreadPoolExecutor(len(children)) as pool:
        seen, draws = zip(*pool.map(branch, children), strict=True)
    assert set(seen) == {"('moved on', 499500)"}
    assert len(set(draws)) == len(children)  # reseeded per child: their rollouts diverge
    assert parent.run_code("stage").text == "moved on"  # children's writes stay theirs

    asyncio.run(grpc_reset(platform, parent.sandbox_id, snapshot.snapshot_id))
    assert parent.run_code("stage").text == "set up"
    Sandbox.delete_snapshot(snapshot.snapshot_id)


@pytest.mark.asyncio(loop_scope="session")
async def test_async_sandboxes_stream_through_async_callbacks(sandboxes: list[str]) -> None:
    _create(sandboxes).kill()  # the template is captured before the async sandbox's create
    lines: list[str] = []

    async def on_stdout(message: Any) -> None:
        lines.append(message.line)

    sandbox = await AsyncSandbox.create(timeout=300)
    sandboxes.append(sandbox.sandbox_id)
    execution = await sandbox.run_code("for i in range(3): print(i)", on_stdout=on_stdout)
    assert "".join(lines) == "0\n1\n2\n" == "".join(execution.logs.stdout)
    context = await sandbox.create_code_context(language="bash")
    assert (await sandbox.run_code("echo hi", context=context)).logs.stdout == ["hi\n"]


@pytest.mark.asyncio(loop_scope="session")
async def test_an_open_r1_style_batch_is_all_correct(sandboxes: list[str]) -> None:
    """32 snippets over 8 sandboxes at once, as open-r1's E2B code reward provider runs them:
    `AsyncSandbox.create` -> `run_code` -> `kill` under a semaphore."""
    _create(sandboxes).kill()
    limit = asyncio.Semaphore(8)

    async def score(number: int) -> str | None:
        async with limit:
            sandbox = await AsyncSandbox.create(timeout=120)
            try:
                execution = await sandbox.run_code(f"print(sum(range({number})))")
                return "".join(execution.logs.stdout).strip()
            finally:
                await sandbox.kill()

    outputs = await asyncio.gather(*(score(n) for n in range(32)))
    assert outputs == [str(sum(range(n))) for n in range(32)]


def test_smolagents_e2b_executor_runs_code_and_final_answers(sandboxes: list[str]) -> None:
    from smolagents.default_tools import FinalAnswerTool
    from smolagents.monitoring import AgentLogger, LogLevel
    from smolagents.remote_executors import E2BExecutor

    _create(sandboxes).kill()
    executor = E2BExecutor(additional_imports=[], logger=AgentLogger(level=LogLevel.OFF))
    try:
        sandboxes.append(executor.sandbox.sandbox_id)
        executor.send_tools({"final_answer": FinalAnswerTool()})
        output = executor("numbers = [6, 7]\nprint('multiplying')\nnumbers[0] * numbers[1]")
        assert output.output == "42" and "multiplying" in output.logs
        assert not output.is_final_answer
        final = executor("final_answer(numbers[0] * numbers[1])")
        assert final.is_final_answer and final.output == 42
    finally:
        executor.cleanup()


# The official suite's image cell (e2b-code-interpreter `tests/images/test_images.py`), indented
# as there: IPython strips the common indentation.
PIL_IMAGE = """
    import numpy
    from PIL import Image

    imarray = numpy.random.rand(16,16,3) * 255
    image = Image.fromarray(imarray.astype('uint8')).convert('RGBA')

"""


def test_kernels_run_as_root_with_home_user_as_their_default_cwd(sandboxes: list[str]) -> None:
    """As E2B's template runs them (`sudo .../start-up.sh`): a context may live in /root; the
    defaults' cwd is /home/user (the official `test_cwd_*` and `test_contexts`)."""
    sandbox = _create(sandboxes)
    default = sandbox.run_code("from pathlib import Path; print(Path.cwd())")
    assert "".join(default.logs.stdout).strip() == "/home/user"
    assert sandbox.run_code("process.cwd()", language="js").text == "/home/user"
    assert sandbox.run_code("whoami", language="bash").logs.stdout == ["root\n"]

    root = sandbox.create_code_context(cwd="/root")
    assert (root.language, root.cwd) == ("python", "/root")
    assert sandbox.run_code("import os; os.getcwd(), os.getuid(), os.environ['HOME']",
                            context=root).text == "('/root', 0, '/root')"
    made = sandbox.create_code_context(language="python", cwd="/home/user/test")
    last = sandbox.list_code_contexts()[-1]
    assert (last.id, last.language, last.cwd) == (made.id, "python", "/home/user/test")
    assert sandbox.run_code("import os; os.getcwd()", context=made).text == "/home/user/test"


def test_pil_images_saved_shown_or_last_are_png_results(sandboxes: list[str]) -> None:
    sandbox = _create(sandboxes)
    for last, printed in (("image.save('test.png')\nprint('Image saved.')", ["Image saved.\n"]),
                          ("image.show()\nprint('Image shown.')", ["Image shown.\n"]),
                          ("image", [])):
        execution = sandbox.run_code(PIL_IMAGE + textwrap.indent(last, "    "))
        assert execution.error is None and execution.logs.stdout == printed
        image = execution.results[0].png
        assert image and base64.b64decode(image).startswith(PNG_MAGIC)
    saved = sandbox.files.read("/home/user/test.png", format="bytes")
    assert bytes(saved).startswith(PNG_MAGIC)  # displayed and written


def test_typescript_cells_run_on_node_with_their_types_stripped(sandboxes: list[str]) -> None:
    sandbox = _create(sandboxes)
    assert sandbox.run_code("process.cwd()", language="ts").text == "/home/user"
    typed = sandbox.run_code(
        "interface Pair { a: number }\nconst base: Pair = { a: 40 }\n"
        "const more = await Promise.resolve<number>(2)\nconsole.log(`sum ${base.a + more}`)\n"
        "base.a + more", language="typescript")
    assert typed.error is None and typed.logs.stdout == ["sum 42\n"] and typed.text == "42"
    broken = sandbox.run_code("const x: = 1", language="ts")
    assert broken.error is not None and broken.error.name == "TypeScriptCompilerError"
    assert 'Unexpected "="' in broken.error.value
    context = sandbox.create_code_context(language="ts")
    assert context.language == "typescript"
    unseen = sandbox.run_code("base", context=context)
    assert unseen.error is not None and unseen.error.name == "ReferenceError"


def test_r_cells_print_return_and_see_the_sandboxs_variables(sandboxes: list[str]) -> None:
    """The official `test_r_kernel`, `test_cwd_r` and `env_vars/test_r.py`."""
    sandbox = _create(sandboxes, envs={"TEST_ENV_VAR": "supertest"})
    # The first R cell starts the R kernel: tens of seconds under TCG.
    hello = sandbox.run_code('print("Hello, World!")', language="r", timeout=300,
                             request_timeout=300)
    assert hello.error is None and hello.logs.stdout == ['[1] "Hello, World!"\n']
    assert sandbox.run_code("getwd()", language="r").results[0].text.strip() == (
        '[1] "/home/user"')
    probe = "Sys.getenv('TEST_ENV_VAR')"
    assert sandbox.run_code(probe, language="r").results[0].text.strip() == '[1] "supertest"'
    overwritten = sandbox.run_code(probe, language="r", envs={"TEST_ENV_VAR": "overwrite"})
    assert overwritten.results[0].text.strip() == '[1] "overwrite"'
    once = sandbox.run_code("Sys.getenv('FOO')", language="r", envs={"FOO": "bar"})
    assert once.results[0].text.strip() == '[1] "bar"'
    after = sandbox.run_code("Sys.getenv('FOO', unset = 'default')", language="r")
    assert after.results[0].text.strip() == '[1] "default"'
    failed = sandbox.run_code('stop("bad input")', language="r")
    assert failed.error is not None and "bad input" in failed.error.value
