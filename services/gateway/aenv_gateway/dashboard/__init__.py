"""The operators' web dashboard: server-rendered pages over the gateway's operations."""
