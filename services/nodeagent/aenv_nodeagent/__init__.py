"""aenv node agent: the only component that touches QEMU, netns, qcow2 and guest memory."""
