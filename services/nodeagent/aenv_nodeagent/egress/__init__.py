"""The node's egress process: filtering by name, header rules, dialers (architecture.md, Egress)."""
