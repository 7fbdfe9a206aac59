"""The volume server's NFSv3 endpoint (MOUNT v3 + NFS v3 over one TCP port): architecture.md,
Volumes. Guests reach it only through their node agent's relay, which opens each connection with
the sandbox's mount tickets."""

from .server import NfsServer

__all__ = ["NfsServer"]
