"""envd's advertised protocol level.

The E2B SDK gates features on this (spec §5.3). 0.6.4 is reported because every gated feature is
implemented: octet-stream/gzip uploads, CloseStdin, file metadata, watch include_entry and the
network-mount guard.
"""

ENVD_VERSION = "0.6.4"
