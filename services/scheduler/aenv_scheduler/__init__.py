"""aenv scheduler service."""
