"""The ways turning an OCI image into a root disk can fail.

Every failure of this package is one of the classes below. Each is also one of the project's
typed errors (`aenv_common.errors`), so the edges map it to a status without knowing about images:

    AenvError
     +-- NotFound
     |    +-- ImageNotFound          the repository, tag or digest does not exist
     +-- Unauthenticated
     |    +-- RegistryAuthFailed     credentials missing, wrong, or not allowed to pull
     +-- Unavailable
     |    +-- RegistryUnavailable    no endpoint of the registry answered usefully
     +-- InvalidArgument
     |    +-- BadReference           the image name does not parse
     |    +-- WrongArchitecture      no linux/amd64 image in the index
     |    +-- UnsupportedImage       a manifest, media type or layer entry we cannot use
     |    +-- LayerCorrupt           content does not match its digest
     |    +-- RootfsTooLarge         the unpacked files do not fit the requested disk
     +-- Internal                    (from `artifacts.proc.run`: a host tool failed)

The message of each error becomes a template build's failure `reason` as it is, so it is one line
that tells the user what to change, names the image and registry, and never carries a password,
token or `Authorization` header (the constructors below take only what is safe to show).
"""

from __future__ import annotations

from aenv_common.errors import InvalidArgument, NotFound, Unauthenticated, Unavailable


def _one_line(text: str) -> str:
    # Registry error bodies and tool output may span lines; a reason is one line.
    return " ".join(text.split())


class ImageNotFound(NotFound):
    """The registry says the repository, tag or digest does not exist (HTTP 404)."""

    def __init__(self, image: str, detail: str = "") -> None:
        why = f" ({_one_line(detail)})" if detail else ""
        super().__init__(f"image {image} not found{why}: check the name and tag")


class RegistryAuthFailed(Unauthenticated):
    """The registry or its token server refused us (HTTP 401/403)."""

    def __init__(self, registry: str, detail: str) -> None:
        super().__init__(
            f"registry {registry} refused access: {_one_line(detail)}; "
            "check the credentials configured for it"
        )


class RegistryUnavailable(Unavailable):
    """No endpoint of the registry (mirrors, then upstream) could be reached or answered."""

    def __init__(self, registry: str, detail: str) -> None:
        super().__init__(f"registry {registry} is unavailable: {_one_line(detail)}")


class BadReference(InvalidArgument):
    """The image reference is not a valid `[registry/]repository[:tag][@digest]`."""

    def __init__(self, reference: str, detail: str) -> None:
        super().__init__(f"invalid image reference {reference!r}: {_one_line(detail)}")


class WrongArchitecture(InvalidArgument):
    """The image index has no manifest for linux/amd64, the only platform guests run."""

    def __init__(self, image: str, available: list[str]) -> None:
        found = ", ".join(available) or "none"
        super().__init__(
            f"image {image} has no linux/amd64 variant (it has: {found}); "
            "build or pick an amd64 image"
        )


class UnsupportedImage(InvalidArgument):
    """Something in the image this package does not handle (media type, compression, entry)."""

    def __init__(self, image: str, detail: str) -> None:
        super().__init__(f"image {image} is not supported: {_one_line(detail)}")


class LayerCorrupt(InvalidArgument):
    """A blob's bytes do not hash to the digest (or size) its descriptor promises."""

    def __init__(self, digest: str, detail: str) -> None:
        super().__init__(
            f"layer {digest} is corrupt: {_one_line(detail)}; "
            "push the image again or check the registry's storage"
        )


class RootfsTooLarge(InvalidArgument):
    """The image's files need more room than the disk size asked for, or its files and the free
    room asked for (E2B's minFreeDiskMb) more than the node lets a template's disk have."""

    def __init__(self, image: str, needed_mib: int, disk_mib: int, *, limit: bool = False) -> None:
        if limit:
            super().__init__(
                f"image {image} with the free room asked for needs a {needed_mib} MiB disk, "
                f"but a template's disk is at most {disk_mib} MiB: ask for less free room")
            return
        super().__init__(
            f"image {image} needs about {needed_mib} MiB but the disk is {disk_mib} MiB: "
            "ask for a larger disk"
        )
