"""Exceptions carrying libspclient's status and message.

An SpcollError is a RuntimeError; when the status is SPC_EINVAL (a bad
argument, the message names it) it is also a ValueError, so callers can
catch argument mistakes the Python way.
"""
from . import _lib


class SpcollError(RuntimeError):
    """A libspclient call failed: .status is the SPC_E* code (negative),
    .status_name its name, and the message is spcoll's own."""

    def __init__(self, status, message, call=None):
        self.status = status
        self.status_name = _lib.STATUS_NAMES.get(status, "status %d" % status)
        self.call = call
        where = "%s: " % call if call else ""
        if status == _lib.SPC_ETIMEDOUT:     # torch's words for a timeout
            message = "Timed out: %s" % message
        super().__init__("spcoll %s%s (%s)" % (where, message, self.status_name))


class SpcollValueError(SpcollError, ValueError):
    """SPC_EINVAL: an argument was wrong; the message says which."""


class GpuPathUnavailable(RuntimeError):
    """A CUDA tensor was passed but the GPU path cannot run here: the CUDA
    driver cannot be loaded, or the daemon has no GPU or no CUDA (the
    message is libspclient's, naming which)."""


def raise_status(status, message, call=None):
    cls = SpcollValueError if status == _lib.SPC_EINVAL else SpcollError
    raise cls(status, message or _lib.lib.spc_strerror(status).decode(), call)
