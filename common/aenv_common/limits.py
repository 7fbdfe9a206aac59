"""Limits every service enforces alike: the gateway checks them first, the node agent again."""

from __future__ import annotations

# A sandbox's lifetime when the request names none, and the longest one may ask for.
DEFAULT_TIMEOUT_S = 300
MAX_TIMEOUT_S = 24 * 3600
# Children one fork may make (each is a whole microVM on the parent's node).
MAX_FORK_CHILDREN = 100
# Sandboxes one batch create may ask for (each is a create of its own, placed anywhere).
MAX_BATCH_CREATE = 100
