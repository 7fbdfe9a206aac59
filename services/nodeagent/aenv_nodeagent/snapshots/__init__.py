"""Snapshots on this node and beyond it: their metadata and disk layers, their cluster records,
their persistence to snapstore, and paused sandboxes handed over through it."""
