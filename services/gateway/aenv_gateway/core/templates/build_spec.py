"""What a template build is asked to make (E2B's TemplateBuildStartV2, parsed): its base, steps
and commands, and the requests it becomes for a node agent."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field

from aenv.nodeagent.v1 import nodeagent_pb2
from aenv_gateway.core.templates.records import BuildRecord


@dataclass(frozen=True)
class StepSpec:
    type: str
    args: tuple[str, ...]
    files_hash: str
    force: bool


@dataclass(frozen=True)
class BuildStart:
    """TemplateBuildStartV2: a base (exactly one of `fromImage`, `fromTemplate`), the steps,
    the start and ready commands, and `force` (build again even when a template of the same
    inputs exists: the SDK's `skip_cache`)."""

    from_image: str | None
    from_template: str | None
    steps: tuple[StepSpec, ...]
    start_cmd: str
    ready_cmd: str
    force: bool
    login: tuple[str, str] | None = field(default=None, repr=False)

    def digest(
        self, build: BuildRecord, parent: str | None, image_digest: str | None = None,
    ) -> str:
        """What shapes the template (never the registry's credentials): with the image, the
        digest its reference names now, so a tag pushed again is built anew."""
        r = build.resources
        free = build.min_free_disk_mib if build.HasField("min_free_disk_mib") else None
        image = [self.from_image, image_digest] if image_digest else self.from_image
        plain = {"image": image, "parent": parent,
                 "steps": [[s.type, list(s.args), s.files_hash] for s in self.steps],
                 "start": self.start_cmd, "ready": self.ready_cmd,
                 "size": [r.vcpus, r.memory_mib, r.disk_mib, free]}
        return hashlib.sha256(json.dumps(plain, sort_keys=True).encode()).hexdigest()

    def resolve_request(self) -> nodeagent_pb2.ResolveImageRequest:
        request = nodeagent_pb2.ResolveImageRequest(reference=self.from_image or "")
        if self.login is not None:
            request.registry.username, request.registry.password = self.login
        return request

    def node_request(
        self, template_id: str, build_id: str, parent: str | None, build: BuildRecord,
    ) -> nodeagent_pb2.BuildTemplateRequest:
        request = nodeagent_pb2.BuildTemplateRequest(
            template_id=template_id, build_id=build_id, resources=build.resources,
            steps=[nodeagent_pb2.TemplateStep(type=s.type, args=s.args, files_hash=s.files_hash)
                   for s in self.steps],
            start_cmd=self.start_cmd, ready_cmd=self.ready_cmd, force=self.force)
        if parent is not None:
            request.from_template = parent
        else:
            request.from_image = self.from_image or ""
        if self.login is not None:
            request.registry.username, request.registry.password = self.login
        if build.HasField("min_free_disk_mib"):
            request.min_free_disk_mib = build.min_free_disk_mib
        return request
