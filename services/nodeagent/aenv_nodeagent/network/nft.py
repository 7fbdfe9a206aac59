"""Apply nft scripts through libnftables (Debian `libnftables1`, from the `nftables` package).

In-process via ctypes rather than `nft -f -`: no exec per call, and the netlink socket opens in
the calling thread's network namespace, so a thread that entered a slot's netns programs that
netns. One script is one nft transaction: it applies whole or not at all.
"""

from __future__ import annotations

import ctypes
import threading
from functools import cache

from aenv_common.errors import Internal

# libnftables keeps some process-global parser state; one call at a time (each is ~1 ms).
_lock = threading.Lock()


@cache
def _library() -> ctypes.CDLL:
    try:
        lib = ctypes.CDLL("libnftables.so.1", use_errno=True)
    except OSError as exc:
        raise Internal("libnftables.so.1 not found: install the nftables package") from exc
    lib.nft_ctx_new.restype = ctypes.c_void_p
    lib.nft_ctx_new.argtypes = [ctypes.c_uint32]
    lib.nft_ctx_free.restype = None
    lib.nft_ctx_free.argtypes = [ctypes.c_void_p]
    lib.nft_ctx_buffer_output.argtypes = [ctypes.c_void_p]
    lib.nft_ctx_buffer_error.argtypes = [ctypes.c_void_p]
    lib.nft_ctx_get_output_buffer.restype = ctypes.c_char_p
    lib.nft_ctx_get_output_buffer.argtypes = [ctypes.c_void_p]
    lib.nft_ctx_get_error_buffer.restype = ctypes.c_char_p
    lib.nft_ctx_get_error_buffer.argtypes = [ctypes.c_void_p]
    lib.nft_run_cmd_from_buffer.argtypes = [ctypes.c_void_p, ctypes.c_char_p]
    return lib


class NftError(Internal):
    """nft rejected a script; the message carries nft's own error text."""


def run_nft(script: str) -> str:
    """Run an nft script in the calling thread's netns; returns nft's output."""
    lib = _library()
    with _lock:
        ctx = lib.nft_ctx_new(0)
        if not ctx:
            raise Internal("nft_ctx_new failed")
        try:
            lib.nft_ctx_buffer_output(ctx)
            lib.nft_ctx_buffer_error(ctx)
            if lib.nft_run_cmd_from_buffer(ctx, script.encode()) != 0:
                error = (lib.nft_ctx_get_error_buffer(ctx) or b"").decode(errors="replace")
                raise NftError(f"nft failed: {error.strip()}")
            return (lib.nft_ctx_get_output_buffer(ctx) or b"").decode(errors="replace")
        finally:
            lib.nft_ctx_free(ctx)
