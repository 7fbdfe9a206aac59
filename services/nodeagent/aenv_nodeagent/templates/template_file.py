"""`template.json`: a captured template snapshot's metadata (templates/model.py
`TemplateSnapshot`, its directory aside), which says the capture is complete and what its
sandboxes get (user, working directory).

Format 1 (also what agents wrote before files carried a format): TemplateSnapshot's fields;
older files also hold the directory they were written in, which is not read (the capture may
have moved since: a build's work directory, a pull's staging). Unknown fields are refused: they
would shape the sandboxes made from it (the defaults their envd gets) or how it restores.
"""

from __future__ import annotations

from aenv_common.state_files import StateFormat, Unknown

# Where the file lay when written: kept by format 1, never read.
STALE_DIRECTORY = "directory"
TEMPLATE_FILE = StateFormat(
    "template snapshot", 1,
    frozenset({"template_id", "vcpus", "memory_mib", "disk_mib", "accelerator",
               "kernel_version", "artifacts_digest", "envd_version", "boot_seconds",
               "default_user", "default_workdir", "env_vars", STALE_DIRECTORY}),
    Unknown.REFUSE)
