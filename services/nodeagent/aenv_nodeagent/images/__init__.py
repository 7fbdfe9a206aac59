"""OCI and Docker images turned into read-only qcow2 root disks for templates.

    reference  image names and which endpoints (mirrors, upstream) serve them   pure
    manifest   indexes, manifests, configs, descriptors                           pure
    auth       WWW-Authenticate challenges, credentials, bearer tokens
    registry   the distribution v2 client (manifests, blobs, redirects, mirrors)
    sources    registry / OCI layout / docker archive -> config + layers
    blobs      digests, verified reads, the content-addressed layer cache
    unpack     layers applied in order, whiteouts and all, safely, into a directory
    rootfs     directory -> ext4 -> read-only qcow2, timed by phase
    errors     what can go wrong, each a one-line reason a user can act on
"""

from .auth import Credentials, load_credentials
from .blobs import BlobCache
from .reference import ImageReference, RegistryHosts, parse_reference
from .rootfs import BaseDisk, DiskSize, build_base_disk
from .sources import DockerArchiveSource, ImageSource, OciLayoutSource, RegistrySource

__all__ = [
    "BaseDisk",
    "BlobCache",
    "Credentials",
    "DiskSize",
    "DockerArchiveSource",
    "ImageReference",
    "ImageSource",
    "OciLayoutSource",
    "RegistryHosts",
    "RegistrySource",
    "build_base_disk",
    "load_credentials",
    "parse_reference",
]
