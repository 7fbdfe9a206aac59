"""The BuildTemplate request read into a build (fast): base, credentials, sizes, steps."""

from __future__ import annotations

import pytest

from aenv.cluster.v1 import cluster_pb2
from aenv.nodeagent.v1 import nodeagent_pb2 as pb
from aenv_common.errors import InvalidArgument
from aenv_nodeagent.servicer import build_request
from aenv_nodeagent.templates.recipe import StepKind


def test_an_image_build_with_credentials_steps_and_sizes() -> None:
    request = build_request(pb.BuildTemplateRequest(
        template_id="app", build_id="b7", from_image="registry:5000/app:1",
        registry=pb.RegistryCredentials(username="ci", password="s3cret"),
        steps=[pb.TemplateStep(type="RUN", args=["make"]),
               pb.TemplateStep(type="COPY", args=["src", "/app/", "", ""], files_hash="ab")],
        start_cmd="./serve", ready_cmd="true",
        resources=cluster_pb2.Resources(vcpus=2, memory_mib=1024, disk_mib=4096)))
    assert (request.template_id, request.build_id) == ("app", "b7")
    assert (request.from_image, request.from_template) == ("registry:5000/app:1", None)
    assert request.login is not None and request.login.user == "ci"
    assert "s3cret" not in repr(request)  # never in a log line
    assert [s.kind for s in request.recipe.steps] == [StepKind.RUN, StepKind.COPY]
    assert request.recipe.steps[1].files_hash == "ab"
    assert (request.recipe.start_cmd, request.recipe.ready_cmd) == ("./serve", "true")
    assert (request.vcpus, request.memory_mib, request.disk_mib) == (2, 1024, 4096)


def test_a_template_build_without_credentials_takes_the_nodes_sizes() -> None:
    request = build_request(pb.BuildTemplateRequest(template_id="t", from_template="base"))
    assert (request.from_image, request.from_template, request.login) == (None, "base", None)
    assert (request.vcpus, request.memory_mib, request.disk_mib) == (0, 0, 0)
    assert not request.recipe


def test_a_step_the_sdk_never_sends_is_refused() -> None:
    with pytest.raises(InvalidArgument, match=r"step 1 \(COPY\): needs the filesHash"):
        build_request(pb.BuildTemplateRequest(template_id="t", from_template="base", steps=[
            pb.TemplateStep(type="COPY", args=["a", "/b", "", ""])]))
