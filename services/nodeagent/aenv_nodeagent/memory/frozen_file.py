"""`frozen.json`: which process is a snapshot's frozen copy (memory/deferred.py), so the agent's
next run finishes the snapshot's memory image from it.

Format 1 (also what agents wrote before files carried a format): the copy's pid and start time
(together they name one process, not a reused pid) and where it maps the RAM file
(`[address, length, file_offset]` each). Unknown fields are refused: the image is read from
the process at those mappings, and one read without a field a newer agent needed could copy
other pages than the guest's.
"""

from __future__ import annotations

from aenv_common.state_files import StateFormat, Unknown

FROZEN_FILE = StateFormat(
    "frozen copy", 1, frozenset({"pid", "start_time", "mappings"}), Unknown.REFUSE)
