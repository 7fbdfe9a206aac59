"""The sandbox wing of the node agent: the sandboxes of this node and every operation on them
(create, pause/resume, snapshot, fork/reset, kill), each a module, over one restore pipeline.
Map: docs/architecture.md, "The node agent's rooms"."""
