"""Guest memory: images restores map copy-on-write, captures of running guests into them, and the
deltas of paused sandboxes (see docs/architecture.md, "The node agent's rooms")."""
