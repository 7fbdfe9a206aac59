"""`code-interpreter-v1`: the template E2B's code-interpreter SDK creates by default.

Its rootfs is `base`'s plus Debian's Jupyter stack (artifacts/rootfs.py); its server
(`services/codeinterp`) comes on the tools disk every guest has. Its recipe only starts that
server, which warms the default Python, JavaScript and bash contexts before its health check
answers, so the captured snapshot holds warm kernels and every sandbox answers `run_code` at
once. Built and kept like any template: captured on first use, or ahead of it at the node's
start (`prewarm_code_interpreter`).
"""

from __future__ import annotations

import dataclasses

from aenv_nodeagent.artifacts import RootfsImage
from aenv_nodeagent.artifacts.toolsdisk import CODE_INTERPRETER_DIR, CODE_INTERPRETER_SERVER
from aenv_nodeagent.templates.model import TemplateInputs
from aenv_nodeagent.templates.recipe import Recipe

CODE_INTERPRETER_TEMPLATE = "code-interpreter-v1"
SERVER_PORT = 49999
# E2B's default sandbox size. The kernels, pandas and a Node.js process take ~300 MiB of it
# before any user data; a node's memory capacity holds twice as many as at 1 GiB (a fork of 16
# is 17 sandboxes).
MEMORY_MIB = 512
VCPUS = 2  # as E2B's default sandbox; the kernels start side by side
DISK_MIB = 3072  # its rootfs's size (artifacts/rootfs.py)

RECIPE = Recipe(
    # As root, as E2B's template starts its server (`sudo .../start-up.sh`), so its kernels run
    # as root with root's environment (HOME=/root) and any cwd works; their default cwd stays
    # /home/user. sudo resets the environment as E2B's does; PYTHONPATH is passed through it.
    start_cmd=f"exec sudo -H PYTHONPATH={CODE_INTERPRETER_DIR} python3 -m"
              f" {CODE_INTERPRETER_SERVER} --port {SERVER_PORT}",
    # One probe process that waits, not one per try: under TCG each command through envd costs
    # the guest more CPU than the kernels starting beside it.
    ready_cmd=f"until curl -sf http://127.0.0.1:{SERVER_PORT}/health; do sleep 3; done",
    # Three kernels start and Python imports numpy, pandas and matplotlib: minutes under TCG.
    ready_timeout_s=600.0,
)


def code_interpreter_inputs(base: TemplateInputs, rootfs: RootfsImage) -> TemplateInputs:
    """The template on this node: `base`'s kernel, tools and VM shape, its own rootfs."""
    return dataclasses.replace(
        base, template_id=CODE_INTERPRETER_TEMPLATE, rootfs=rootfs, recipe=RECIPE,
        vcpus=max(base.vcpus, VCPUS), memory_mib=max(base.memory_mib, MEMORY_MIB),
        disk_mib=max(base.disk_mib, DISK_MIB))
