"""aenv gateway service."""
