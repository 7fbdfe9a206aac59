"""aenv snapstore service."""
