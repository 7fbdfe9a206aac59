"""The node's egress process: filtering by name, header rules, dialers (docs/egress.md)."""
