"""Caller identity (Basic auth user names) and E2B path resolution for that user."""

from __future__ import annotations

import base64
import binascii
import errno
import grp
import os
import pwd
from dataclasses import dataclass

from .errors import EnvdError, NoSpace, invalid_argument, unauthenticated

FALLBACK_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


@dataclass(frozen=True)
class User:
    name: str
    uid: int
    gid: int
    home: str
    groups: tuple[int, ...]


def lookup_user(name: str) -> User:
    """Resolves a user name from the guest's passwd database; unknown -> unauthenticated."""
    try:
        entry = pwd.getpwnam(name)
    except (KeyError, ValueError):  # ValueError: a NUL byte, which no name holds
        if name == "root":  # an image without /etc/passwd still has uid 0
            return User("root", 0, 0, "/root", (0,))
        raise unauthenticated(f"invalid username: '{name}'") from None
    groups = tuple(os.getgrouplist(entry.pw_name, entry.pw_gid))
    return User(entry.pw_name, entry.pw_uid, entry.pw_gid, entry.pw_dir or "/", groups)


def user_exists(name: str) -> bool:
    try:
        pwd.getpwnam(name)
    except (KeyError, ValueError):
        return False
    return True


def username_from_authorization(header: str | None) -> str | None:
    """`Basic base64("<user>:")` -> user name; None when the header is absent."""
    if not header:
        return None
    scheme, _, token = header.partition(" ")
    if scheme.lower() != "basic":
        raise unauthenticated(f"unsupported authorization scheme '{scheme}'")
    try:
        decoded = base64.b64decode(token.strip(), validate=True).decode()
    except (binascii.Error, UnicodeDecodeError):
        raise unauthenticated("invalid basic authorization header") from None
    name = decoded.split(":", 1)[0]
    if not name:
        raise unauthenticated("invalid username: ''")
    return name


def resolve_path(path: str, user: User, default_workdir: str | None) -> str:
    """`~` expands to the user's home; relative paths are under the home (empty -> workdir).

    :raise EnvdError: invalid_argument for a NUL byte (no path holds one: the OS refuses it)
        and for `~user` forms."""
    if "\x00" in path:
        raise invalid_argument("path holds a NUL byte")
    if path == "":
        return default_workdir or user.home
    if path == "~":
        return user.home
    if path.startswith("~/"):
        return os.path.normpath(os.path.join(user.home, path[2:]))
    if path.startswith("~"):
        raise invalid_argument(f"path '{path}' uses an unsupported ~user form")
    if os.path.isabs(path):
        return os.path.normpath(path) if path != "/" else "/"
    return os.path.normpath(os.path.join(user.home, path))


def owner_names(uid: int, gid: int) -> tuple[str, str]:
    """User and group names; numeric strings when the databases do not know them."""
    try:
        owner = pwd.getpwuid(uid).pw_name
    except KeyError:
        owner = str(uid)
    try:
        group = grp.getgrgid(gid).gr_name
    except KeyError:
        group = str(gid)
    return owner, group


def chown_to(entry: str | int, user: User) -> None:
    """Gives an entry (a path, not followed if a symlink, or an open fd) to the calling user;
    no-op when not permitted (envd not root: a test)."""
    try:
        if isinstance(entry, int):
            os.fchown(entry, user.uid, user.gid)
        else:
            os.chown(entry, user.uid, user.gid, follow_symlinks=False)
    except PermissionError:
        pass


def make_dirs_owned(path: str, user: User) -> None:
    """`mkdir -p` where every directory created is owned by the user."""
    missing: list[str] = []
    current = path
    while not os.path.lexists(current):
        missing.append(current)
        parent = os.path.dirname(current)
        if parent == current:
            break
        current = parent
    if os.path.lexists(current) and not os.path.isdir(current):
        raise invalid_argument(f"path '{current}' exists and is not a directory")
    for directory in reversed(missing):
        try:
            os.mkdir(directory, 0o755)
        except FileExistsError:
            continue
        except NotADirectoryError:
            raise invalid_argument(f"a parent of '{directory}' is not a directory") from None
        chown_to(directory, user)


def os_error_to_envd(exc: OSError, path: str) -> EnvdError:
    """Maps filesystem errors to Connect codes the SDK understands."""
    if exc.errno == errno.ENOENT:
        return EnvdError("not_found", f"path '{path}' does not exist")
    if exc.errno in (errno.EACCES, errno.EPERM):
        return EnvdError("permission_denied", f"permission denied: '{path}'")
    if exc.errno == errno.ENOTDIR:
        return invalid_argument(f"a component of '{path}' is not a directory")
    if exc.errno == errno.EEXIST:
        return EnvdError("already_exists", f"path '{path}' already exists")
    if exc.errno == errno.ENOSPC:
        return NoSpace(f"no space left on device: '{path}'")
    return EnvdError("internal", f"{exc.strerror or exc} ('{path}')")
