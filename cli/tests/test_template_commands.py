"""`aenv template build|ls|rm` against a gateway over a fake scheduler and node agent (no VM),
with a real in-process snapstore holding the COPY contexts the official SDK uploads.

The CLI is synchronous (the SDK's `Template.build` polls with sleeps): it runs in a worker
thread while the stack serves on the test's event loop."""

from __future__ import annotations

import asyncio
import contextlib
import json
import tarfile
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
import httpx
import pytest
from rich.console import Console
from typer.testing import CliRunner, Result

from aenv.cluster.v1 import cluster_pb2
from aenv.nodeagent.v1 import nodeagent_pb2, nodeagent_pb2_grpc
from aenv.scheduler.v1 import scheduler_pb2, scheduler_pb2_grpc
from aenv_cli import main
from aenv_cli.files import API_KEY_FILE
from aenv_cli.ports import PlatformPorts
from aenv_cli.state import save_ports
from aenv_common.grpc_server import start_grpc_server
from aenv_common.snapshots import snapstore_stub
from aenv_common.snapshots.contexts import pull_context
from aenv_gateway.cluster.directory import InMemoryClusterView
from aenv_gateway.config import GatewaySettings
from aenv_gateway.core.templates.records import InMemoryTemplateRecords
from aenv_gateway.server import start_gateway
from aenv_snapstore.config import SnapstoreSettings
from aenv_snapstore.server import start_snapstore
from aenv_testing.builds import build_result, build_steps, image_digest
from aenv_testing.ports import free_port

pytestmark = pytest.mark.sdk
API_KEY = "e2b_" + "0123456789abcdef" * 2 + "fedcba98"
NODE_ID = "node1"


class FakeScheduler(scheduler_pb2_grpc.SchedulerServiceServicer):
    def __init__(self, placement: scheduler_pb2.Placement) -> None:
        self.placement = placement

    async def Schedule(
        self, request: scheduler_pb2.ScheduleRequest, context: grpc.aio.ServicerContext
    ) -> scheduler_pb2.ScheduleResponse:
        return scheduler_pb2.ScheduleResponse(placement=self.placement)


class FakeNodeAgent(nodeagent_pb2_grpc.NodeAgentServiceServicer):
    """Builds as the real agent streams a build: a line per step, a COPY's context pulled from
    snapstore (its members kept), a RUN of `false` fails the build."""

    def __init__(self, snapstore: Any, scratch: Path) -> None:
        self._snapstore = snapstore
        self._scratch = scratch
        self.builds: list[nodeagent_pb2.BuildTemplateRequest] = []
        self.contexts: dict[str, list[str]] = {}  # files hash -> the tarball's members

    async def BuildTemplate(
        self, request: nodeagent_pb2.BuildTemplateRequest, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[nodeagent_pb2.BuildTemplateResponse]:
        self.builds.append(request)
        async for line in build_steps(request, self._keep_context):
            yield line
        yield build_result(request)

    async def ResolveImage(
        self, request: nodeagent_pb2.ResolveImageRequest, context: grpc.aio.ServicerContext
    ) -> nodeagent_pb2.ResolveImageResponse:
        return nodeagent_pb2.ResolveImageResponse(digest=image_digest(request.reference))

    async def _keep_context(self, step: nodeagent_pb2.TemplateStep) -> None:
        if step.type == "COPY":
            tarball = await pull_context(self._snapstore, step.files_hash,
                                         self._scratch / step.files_hash)
            with tarfile.open(tarball) as archive:
                self.contexts[step.files_hash] = archive.getnames()


@dataclass
class TemplateStack:
    home: Path
    url: str
    nodeagent: FakeNodeAgent

    async def aenv(self, *args: str) -> Result:
        """`aenv <args> --home <home>`, in a worker thread (the stack serves meanwhile)."""
        return await aenv(*args, "--home", str(self.home))


async def aenv(*args: str) -> Result:
    return await asyncio.to_thread(CliRunner().invoke, main.app, list(args))


@pytest.fixture(autouse=True)
def wide_console(monkeypatch: pytest.MonkeyPatch) -> None:
    """Tables and lines unwrapped, whatever the terminal of the test run."""
    monkeypatch.setattr(main, "console", Console(width=200))


@pytest.fixture
async def tstack(tmp_path: Path) -> AsyncIterator[TemplateStack]:
    async with contextlib.AsyncExitStack() as stack:
        snapstore = await start_snapstore(SnapstoreSettings(
            listen="127.0.0.1:0", gc_interval_seconds=0, fs_root=tmp_path / "store",
            volume_nfs_listen="127.0.0.1:0", volume_work_dir=tmp_path / "volumes"))
        stack.push_async_callback(snapstore.stop, 0)
        channel = grpc.aio.insecure_channel(f"127.0.0.1:{snapstore.port}")
        stack.push_async_callback(channel.close)
        nodeagent = FakeNodeAgent(snapstore_stub(channel), tmp_path / "node")
        na_server, na_port = await start_grpc_server("127.0.0.1:0", [(
            nodeagent_pb2_grpc.add_NodeAgentServiceServicer_to_server, nodeagent,
            "aenv.nodeagent.v1.NodeAgentService")])
        stack.push_async_callback(na_server.stop, None)
        view = InMemoryClusterView()
        view.node_records[NODE_ID] = cluster_pb2.NodeRecord(
            node_id=NODE_ID, nodeagent_address=f"127.0.0.1:{na_port}")
        scheduler = FakeScheduler(scheduler_pb2.Placement(
            node_id=NODE_ID, nodeagent_address=f"127.0.0.1:{na_port}"))
        sch_server, sch_port = await start_grpc_server("127.0.0.1:0", [(
            scheduler_pb2_grpc.add_SchedulerServiceServicer_to_server, scheduler,
            "aenv.scheduler.v1.SchedulerService")])
        stack.push_async_callback(sch_server.stop, None)
        gateway = await start_gateway(GatewaySettings(
            listen="127.0.0.1:0", grpc_listen="127.0.0.1:0",
            scheduler_address=f"127.0.0.1:{sch_port}",
            snapstore_address=f"127.0.0.1:{snapstore.port}", domain="aenv.test",
        ), view, InMemoryTemplateRecords(), API_KEY)
        stack.push_async_callback(gateway.stop)
        home = _home(tmp_path / "home", gateway.http_port)
        yield TemplateStack(home, f"http://127.0.0.1:{gateway.http_port}", nodeagent)


def _home(home: Path, gateway_http: int) -> Path:
    """A data directory as `aenv up` leaves it: the ports file and the API key."""
    home.mkdir(parents=True)
    save_ports(home, PlatformPorts(gateway_http=gateway_http))
    (home / API_KEY_FILE).write_text(API_KEY + "\n")
    return home


def _dockerfile(folder: Path, *lines: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "Dockerfile"
    path.write_text("\n".join(lines) + "\n")
    return path


APP_DOCKERFILE = ("FROM alpine:3", "RUN echo hello", "ENV MODE=test", "WORKDIR /srv",
                  "COPY app.py /srv/app.py")


async def _build(stack: TemplateStack, dockerfile: Path, name: str, *more: str) -> Result:
    return await stack.aenv("template", "build", "-f", str(dockerfile), "--name", name, *more)


def _kinds(steps: Sequence[nodeagent_pb2.TemplateStep]) -> list[str]:
    return [step.type for step in steps]


async def test_a_dockerfile_builds_with_its_copy_uploaded(
    tstack: TemplateStack, tmp_path: Path
) -> None:
    dockerfile = _dockerfile(tmp_path / "app", *APP_DOCKERFILE)
    (tmp_path / "app" / "app.py").write_text("print('hi')\n")
    result = await _build(tstack, dockerfile, "web-app", "--tag", "v1", "--tag", "stable",
                          "--cpu", "2", "--memory-mb", "1024")
    assert result.exit_code == 0, result.output
    [request] = tstack.nodeagent.builds
    assert request.from_image == "alpine:3"
    assert [k for k in _kinds(request.steps) if k != "USER"] == [
        "WORKDIR", "RUN", "ENV", "WORKDIR", "COPY"]
    run, env, workdir, copy = request.steps[2:6]
    assert list(run.args) == ["echo hello"] and list(env.args) == ["MODE", "test"]
    assert list(workdir.args) == ["/srv"] and list(copy.args)[:2] == ["app.py", "/srv/app.py"]
    # The COPY's context reached the snapstore: the node pulled it by the step's hash.
    assert copy.files_hash and "app.py" in tstack.nodeagent.contexts[copy.files_hash]
    assert request.resources.vcpus == 2 and request.resources.memory_mib == 1024
    # The build's lines were streamed: the SDK's own and the node's, through the gateway.
    assert "Uploaded 'app.py'" in result.output
    assert "step 3: RUN echo hello" in result.output
    async with httpx.AsyncClient(base_url=tstack.url, headers={"X-API-Key": API_KEY}) as http:
        [listed] = (await http.get("/templates")).json()
        tags = {t["tag"] for t in (await http.get(
            f"/templates/{listed['templateID']}/tags")).json()}
    assert tags == {"default", "v1", "stable"}
    assert f"template id {listed['templateID']}, build id {listed['buildID']}" in result.output


async def test_the_context_folder_can_be_another_than_the_dockerfiles(
    tstack: TemplateStack, tmp_path: Path
) -> None:
    dockerfile = _dockerfile(tmp_path / "docker", "FROM alpine:3", "COPY data /data")
    (tmp_path / "ctx" / "data").mkdir(parents=True)
    (tmp_path / "ctx" / "data" / "one.txt").write_text("1\n")
    result = await _build(tstack, dockerfile, "ctx", "--context", str(tmp_path / "ctx"))
    assert result.exit_code == 0, result.output
    [copy] = [s for s in tstack.nodeagent.builds[0].steps if s.type == "COPY"]
    assert "data/one.txt" in tstack.nodeagent.contexts[copy.files_hash]

    missing = await _build(tstack, dockerfile, "ctx2")  # `data` is not beside the Dockerfile
    assert missing.exit_code == 1 and "error:" in missing.output


async def test_a_failing_run_exits_1_and_names_the_step(
    tstack: TemplateStack, tmp_path: Path
) -> None:
    dockerfile = _dockerfile(tmp_path / "bad", "FROM alpine:3", "RUN echo fine", "RUN false")
    result = await _build(tstack, dockerfile, "broken")
    assert result.exit_code == 1
    # USER and WORKDIR come first (the SDK's defaults): the RUN of `false` is step 4.
    assert "error: step 4 (RUN): exited with code 1" in result.output
    assert "step 3: RUN echo fine" in result.output  # the log up to the failure was streamed


async def test_unchanged_inputs_reuse_the_build_unless_skip_cache(
    tstack: TemplateStack, tmp_path: Path
) -> None:
    dockerfile = _dockerfile(tmp_path / "a", "FROM alpine:3", "RUN echo once")
    for _ in range(2):
        assert (await _build(tstack, dockerfile, "cached")).exit_code == 0
    assert len(tstack.nodeagent.builds) == 1
    skipped = await _build(tstack, dockerfile, "cached", "--skip-cache")
    assert skipped.exit_code == 0 and len(tstack.nodeagent.builds) == 2


async def test_ls_lists_the_templates(tstack: TemplateStack, tmp_path: Path) -> None:
    empty = await tstack.aenv("template", "ls")
    assert empty.exit_code == 0 and "web" not in empty.output
    await _build(tstack, _dockerfile(tmp_path / "a", "FROM alpine:3", "RUN echo a"), "web",
                 "--cpu", "2", "--memory-mb", "512")
    await _build(tstack, _dockerfile(tmp_path / "a", "FROM alpine:3", "RUN echo b"), "web",
                 "--cpu", "2", "--memory-mb", "512")
    result = await tstack.aenv("template", "ls")
    assert result.exit_code == 0, result.output
    async with httpx.AsyncClient(base_url=tstack.url, headers={"X-API-Key": API_KEY}) as http:
        [listed] = (await http.get("/templates")).json()
    [row] = [line for line in result.output.splitlines() if listed["templateID"] in line]
    cells = [cell.strip() for cell in row.strip("│ ").split("│")]
    assert cells[:6] == ["web", listed["templateID"], "ready", "2", "512 MiB", "2"]
    assert cells[6].endswith(" UTC")


async def test_rm_removes_a_template_and_an_unknown_name_exits_1(
    tstack: TemplateStack, tmp_path: Path
) -> None:
    await _build(tstack, _dockerfile(tmp_path / "a", "FROM alpine:3"), "gone")
    result = await tstack.aenv("template", "rm", "gone")
    assert result.exit_code == 0 and "removed gone" in result.output
    assert "gone" not in (await tstack.aenv("template", "ls")).output

    again = await tstack.aenv("template", "rm", "gone")
    assert again.exit_code == 1 and "no template 'gone'" in again.output


async def test_without_a_platform_the_commands_say_so(tmp_path: Path) -> None:
    dockerfile = _dockerfile(tmp_path / "a", "FROM alpine:3")
    nothing = tmp_path / "nothing"
    result = await aenv("template", "build", "-f", str(dockerfile), "--name", "x",
                        "--home", str(nothing))
    assert result.exit_code == 1 and f"no API key under {nothing}" in result.output

    stopped = _home(tmp_path / "stopped", free_port())
    listing = await aenv("template", "ls", "--home", str(stopped))
    assert listing.exit_code == 1 and f"is `aenv up --home {stopped}` running?" in listing.output

    no_file = await aenv("template", "build", "-f", str(tmp_path / "none"), "--name", "x",
                         "--home", str(stopped))
    assert no_file.exit_code == 1 and "no Dockerfile at" in no_file.output


async def test_pull_makes_a_template_of_an_image(
    tstack: TemplateStack, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`aenv template pull` (the SDK's from_image) on the server of AENV_URL/AENV_API_KEY."""
    monkeypatch.setenv("AENV_URL", tstack.url)
    monkeypatch.setenv("AENV_API_KEY", API_KEY)
    result = await aenv("template", "pull", "alpine:3", "--name", "alp", "--cpu", "2")
    assert result.exit_code == 0, result.output
    [request] = tstack.nodeagent.builds
    assert request.from_image == "alpine:3" and request.resources.vcpus == 2
    assert "pulled alpine:3 as alp" in result.output
    inspected = await aenv("template", "inspect", "alp")
    assert inspected.exit_code == 0, inspected.output
    assert "alp" in json.loads(inspected.stdout)["names"]
