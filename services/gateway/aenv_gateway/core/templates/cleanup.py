"""What a deleted catalog template leaves outside the catalog: the node-side templates its builds
made (named by their image ids) that no remaining build uses. Each is marked retired
(`retired-templates/<id>`: nodes drop their local copies once nothing stands on them, see the
node agent's templates/retire.py), loses its cluster record (`templates/<id>`: the scheduler
stops placing it) and its two snapstore manifests (`template-<id>`, `template-<id>-<key>`; their
chunks go in snapstore's next collection).

Builds of other templates may have reused an image (equal inputs): such an image stays.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from functools import partial
from typing import Any

from aenv.snapstore.v1 import snapstore_pb2 as pb
from aenv_common.errors import AenvError
from aenv_gateway.cluster.clients import call
from aenv_gateway.core.templates.records import BuildRecord, TemplateRecords

log = logging.getLogger(__name__)


def node_template_manifests(image_id: str, listed: Sequence[str]) -> list[str]:
    """The manifests of one node-side template among snapstore's (as the node agent's
    templates/distribution.py names them)."""
    name = f"template-{image_id}"
    return [m for m in listed if m == name or m.startswith(name + "-")]


class TemplateCleanup:
    def __init__(self, records: TemplateRecords, snapstore: Any | None) -> None:
        self._records = records
        self._snapstore = snapstore

    async def after_delete(self, removed: Sequence[BuildRecord]) -> list[str]:
        """Retires the images of `removed` builds no remaining build uses; returns their ids.
        Best effort: the catalog is already gone, so a failure is logged, not raised."""
        made = {b.image_id for b in removed if b.image_id}
        still = {b.image_id for b in await self._records.list_builds()}
        retired = sorted(made - still)
        for image_id in retired:
            try:
                await self._records.drop_node_template(image_id)
                await self._drop_manifests(image_id)
            except AenvError as err:
                log.warning("could not retire a deleted template's image",
                            extra={"image_id": image_id, "error": err.message})
        return retired

    async def _drop_manifests(self, image_id: str) -> None:
        if self._snapstore is None:
            return
        stub = self._snapstore
        listed = await call(lambda: stub.ListManifests(pb.ListManifestsRequest()))
        for manifest in node_template_manifests(image_id, listed.snapshot_ids):
            await call(partial(stub.DeleteManifest, pb.DeleteManifestRequest(snapshot_id=manifest)))
