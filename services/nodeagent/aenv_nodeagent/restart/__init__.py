"""What survives a node agent restart: running VMs re-adopted, paused sandboxes and snapshots
taken back, everything else cleaned up."""
