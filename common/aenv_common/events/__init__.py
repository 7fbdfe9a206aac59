"""A sandbox's lifecycle in the cluster: its events and, when it dies, its death certificate
(docs/architecture.md, "Events and death certificates").

Every service that changes a sandbox's state records what it did through `EventLog`: the node
agent (created, ready, paused, resumed, snapshotted, forked, killed, timed out, died), the
scheduler's sweep (lost). The gateway reads them back, streams them and delivers them to webhooks.
"""

from aenv_common.events.log import EventLog
from aenv_common.events.names import (
    CAUSE_NAMES,
    E2B_EVENT_TYPES,
    E2B_NAMES,
    TIMED_OUT_PAUSED,
    TYPE_NAMES,
    cause_name,
    death_message,
    e2b_event_type,
    new_event_id,
)

__all__ = [
    "CAUSE_NAMES",
    "E2B_EVENT_TYPES",
    "E2B_NAMES",
    "TIMED_OUT_PAUSED",
    "TYPE_NAMES",
    "EventLog",
    "cause_name",
    "death_message",
    "e2b_event_type",
    "new_event_id",
]
