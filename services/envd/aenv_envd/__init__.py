"""aenv envd service."""
