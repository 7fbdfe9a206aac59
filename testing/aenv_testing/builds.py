"""A node agent's `BuildTemplate` stream as the real one streams it, for the tests of its callers
(the gateway's template API, the CLI): a line for the pull and one per step with E2B's step
number, a RUN of `false` failing the build as a failed step does, then the result."""

from __future__ import annotations

import hashlib
from collections.abc import AsyncIterator, Awaitable, Callable

from google.protobuf.timestamp_pb2 import Timestamp

from aenv.cluster.v1 import cluster_pb2
from aenv.nodeagent.v1 import nodeagent_pb2
from aenv_common.errors import InvalidArgument

OnStep = Callable[[nodeagent_pb2.TemplateStep], Awaitable[None]]


def image_digest(reference: str) -> str:
    """The digest a fake registry resolves `reference` to: fixed per reference, as an image
    never pushed again."""
    return "sha256:" + hashlib.sha256(reference.encode()).hexdigest()


def build_line(message: str, step: str) -> nodeagent_pb2.BuildTemplateResponse:
    now = Timestamp()
    now.GetCurrentTime()
    return nodeagent_pb2.BuildTemplateResponse(log=nodeagent_pb2.BuildLogLine(
        time=now, level="info", message=message, step=step))


async def build_steps(
    request: nodeagent_pb2.BuildTemplateRequest, on_step: OnStep | None = None
) -> AsyncIterator[nodeagent_pb2.BuildTemplateResponse]:
    """The build's lines up to its result; `on_step` sees each step as it runs.

    :raise InvalidArgument: a RUN of `false` (`step N (RUN): exited with code 1`).
    """
    yield build_line(f"pulling {request.from_image or request.from_template}", "base")
    for number, step in enumerate(request.steps, start=1):
        yield build_line(f"step {number}: {step.type} {' '.join(step.args)}", str(number))
        if on_step is not None:
            await on_step(step)
        if step.type == "RUN" and step.args[0] == "false":
            raise InvalidArgument(f"step {number} (RUN): exited with code 1")


def build_result(
    request: nodeagent_pb2.BuildTemplateRequest,
) -> nodeagent_pb2.BuildTemplateResponse:
    """The published template: the size asked for, else a node's defaults."""
    size = request.resources
    return nodeagent_pb2.BuildTemplateResponse(result=nodeagent_pb2.BuildTemplateResult(
        template=cluster_pb2.TemplateRecord(
            template_id=request.template_id, envd_version="0.5.7",
            default_resources=cluster_pb2.Resources(
                vcpus=size.vcpus or 2, memory_mib=size.memory_mib or 512, disk_mib=1024)),
        phases_ms={"base": 10.0, "capture": 20.0}))
