"""Sandbox lifecycle events as the gateway serves them (docs/events.md): listed by key, sandbox,
type and metadata (reader.py); followed live through one shared etcd watch fanned out to every
subscriber (stream.py); in E2B's JSON and aenv's own (wire.py); and the death certificate every
later answer about a dead sandbox carries (deaths.py). Node agents and the scheduler write them
(aenv_common.events); the gateway only reads.
"""
