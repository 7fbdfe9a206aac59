"""The VMM layer's failures, by what they mean for the VM rather than by where they arose.

Every one is an `Internal` (to API callers a VMM failure is the platform's fault, whatever its
kind), so a caller that catches Internal, and every status an edge answers, stays as it was; a
caller that must decide what to do next catches the kind instead of reading messages.

    Internal
     +-- VmmError                 any failure of the VMM layer
          +-- VmStartError        QEMU did not start, or did not open its QMP session in time
          +-- QmpError            a QMP exchange failed
          |    +-- QmpCommandFailed   QEMU answered with an error, or a reply of the wrong
          |    |                      shape; the session and the VM go on
          |    +-- QmpConnectionLost  the session broke: QEMU exited or closed it
          +-- VmExited            QEMU exited while an operation waited on it
          +-- MigrationError      a migration (capture's or restore's) ended other than completed
          +-- DiskJobError        a block job (a disk's layers merged) failed or was cancelled
          +-- RemapFailed         a pre-started VM could not take another memory image or disk
                                  chain: its guest must never run
          +-- CaptureError        a capture made no usable state or image
               +-- CaptureFailed  recoverable: the VM runs as before (stopped at worst, and
               |                  resumable); the capture can be retried or the sandbox kept
               +-- CaptureLostVm  terminal: QEMU is gone or in a state no one knows

Raised elsewhere in vmm/: `stream.UnsupportedStream`, a VmmError (a migration stream this code
cannot split or build on; the VM it came from is untouched).
"""

from __future__ import annotations

from aenv_common.errors import Internal


class VmmError(Internal):
    """A failure of the VMM layer."""


class VmStartError(VmmError):
    """QEMU could not be started, or did not complete its QMP handshake in time."""


class QmpError(VmmError):
    """A QMP exchange with QEMU failed."""


class QmpCommandFailed(QmpError):
    """QEMU refused a command (`error_class` is QMP's, e.g. GenericError) or answered it with a
    reply this code cannot read. QEMU and its session are still up."""

    def __init__(self, message: str, command: str, error_class: str = "") -> None:
        super().__init__(message)
        self.command = command
        self.error_class = error_class


class QmpConnectionLost(QmpError):
    """The QMP session broke off mid-exchange: QEMU exited, or closed the socket."""


class VmExited(VmmError):
    """QEMU exited while an operation (a migration, a block job) waited on it."""


class MigrationError(VmmError):
    """A migration ended failed or cancelled (the reason is QEMU's)."""


class DiskJobError(VmmError):
    """A block job on a disk's layers failed or was cancelled."""


class RemapFailed(VmmError):
    """A VM waiting for its incoming state could not be re-pointed at another memory image or
    disk layer; its RAM or disk may be neither the old nor the new one, so it is discarded."""


class CaptureError(VmmError):
    """A capture (device state, memory image, delta, frozen copy) made nothing usable."""


class CaptureFailed(CaptureError):
    """Recoverable: the VM is as it was before the capture (perhaps stopped, and resumable);
    the capture may be tried again, or the sandbox kept running."""


class CaptureLostVm(CaptureError):
    """Terminal: QEMU exited or its state is unknown; the sandbox cannot run on."""


def capture_error(err: VmmError) -> CaptureError:
    """The capture kind of a VMM failure met during a capture, with its message: terminal when
    it says QEMU is gone, recoverable otherwise."""
    if isinstance(err, CaptureError):
        return err
    if isinstance(err, (QmpConnectionLost, VmExited)):
        return CaptureLostVm(err.message)
    return CaptureFailed(err.message)
