"""Small stand-in services for the launcher tests: real processes that listen where the launcher
tells them (through the same AENV_* environment as the real services) and stop on SIGTERM."""
