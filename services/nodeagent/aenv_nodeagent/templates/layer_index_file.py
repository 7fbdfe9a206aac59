"""`<key>.json` in the step-layer cache (templates/layers.py): the newest disk layer a build
step left for its key, with the guest defaults it left and the rootfs under it, so a later
build of the same steps starts after them.

Format 1 (also what agents wrote before files carried a format): `disk` (the layer's file
name), `defaults` (user, workdir, env_vars) and `rootfs`. Unknown fields are ignored: the
entry is a cache, matched by its key and rootfs, and a newer agent's hints do not change which
disk it names; a newer format is refused all the same.
"""

from __future__ import annotations

from aenv_common.state_files import StateFormat, Unknown

LAYER_INDEX_FORMAT = StateFormat(
    "step layer", 1, frozenset({"disk", "defaults", "rootfs"}), Unknown.IGNORE)
