"""One daemon op in flight (spc_start ... spc_test / spc_wait), as the
torch backend and the native async API use it.

A Call owns the request, keeps alive every tensor the daemon reads or
writes until the op is over (a staged input freed early would hand its
bytes to the next allocation while the daemon still reads them), and runs
`finish` once, after success, to put the result where the caller wants it
(copy back into a torch tensor, a local reduction, ...).

Completion is polled with spc_test under the client's lock, so another
thread may start or complete ops meanwhile; a wait with a deadline that
passes raises a TimeoutError-like SpcollError and marks the call lost.

A call on CUDA tensors carries torch's stream it was issued on: the
daemon's work is ordered after what was queued on it (spc_start_on_stream),
wait() makes that stream wait for the daemon's work (spc_wait_on_stream:
the host waits only for the daemon's answer) and `finish` runs with that
stream current, so its copies are ordered after the op. Such a wait does
not take a deadline from Python: the daemon fails an op that some rank
never issues after the group's op timeout, which ends the wait.
"""
import ctypes
import time

from . import _cuda, _lib
from .errors import SpcollError, raise_status

lib = _lib.lib

# Polling: spin on spc_test for the first few tries (a small op answers in
# tens of microseconds), then sleep, doubling up to _MAX_NAP seconds.
_SPINS = 64
_MAX_NAP = 0.001


class Call:
    """A started op. state: 'pending', 'ok' or 'failed' (self.error)."""

    def __init__(self, client, name, keep, finish=None, stream=None):
        self.client = client
        self.stream = stream      # torch.cuda.Stream for device tensors
        self.name = name
        self.keep = keep          # tensors/arrays the daemon may still touch
        self.finish = finish      # () -> result, run once after success
        self.req = ctypes.c_void_p()
        self.state = "pending"
        self.error = None
        self.result = None

    # -- start --
    def start(self, group_h, op, cin, cout):
        """spc_start; a failure to send fails the call at once."""
        with self.client._lock:
            if self.stream is not None:

                rc = lib.spc_start_on_stream(
                    group_h, ctypes.byref(op), ctypes.byref(cin),
                    ctypes.byref(cout), _cuda.stream_handle(self.stream),
                    ctypes.byref(self.req))
            else:
                rc = lib.spc_start(group_h, ctypes.byref(op),
                                   ctypes.byref(cin), ctypes.byref(cout),
                                   ctypes.byref(self.req))
            if rc < 0:
                self._fail(rc, self._msg())
        return self

    def start_p2p(self, group_h, send, cten, peer, tag):
        """spc_start_send / spc_start_recv; a receive's source lands in
        self.source when it completes."""
        self.source = ctypes.c_int(-1)
        with self.client._lock:
            if send:
                rc = lib.spc_start_send(group_h, ctypes.byref(cten), peer,
                                        tag, ctypes.byref(self.req))
            else:
                rc = lib.spc_start_recv(group_h, ctypes.byref(cten), peer,
                                        tag, ctypes.byref(self.source),
                                        ctypes.byref(self.req))
            if rc < 0:
                self._fail(rc, self._msg())
        return self

    def fail_now(self, exc):
        """Mark the call failed without a request (a local error found
        after the op was sent elsewhere, or before it could be)."""
        self.state, self.error = "failed", exc
        return self

    # -- completion --
    def _msg(self):
        h = self.client._h
        return lib.spc_last_error(h).decode() if h else ""

    def _fail(self, rc, msg):
        try:
            raise_status(rc, msg, self.name)
        except SpcollError as e:
            self.state, self.error = "failed", e
        self.keep = None

    def _done(self):
        self.keep = None
        try:
            if self.finish is None:
                self.result = None
            elif self.stream is not None:

                with _cuda.stream_context(self.stream):
                    self.result = self.finish()
            else:
                self.result = self.finish()
            self.state = "ok"
        except Exception as e:            # a local step after the op failed
            self.state, self.error = "failed", e

    def poll(self):
        """One non-blocking look; True when the call is over."""
        if self.state != "pending":
            return True
        with self.client._lock:
            if self.state != "pending":   # another thread finished it
                return True
            done = ctypes.c_int()
            rc = lib.spc_test(ctypes.byref(self.req), ctypes.byref(done))
            if rc < 0:
                self._fail(rc, self._msg())
                return True
            if not done.value:
                return False
            self._done()
            return True

    def wait(self, timeout=None):
        """Block until the op is over or `timeout` seconds (None: forever)
        pass; raise its error, or a timeout error (status SPC_ETIMEDOUT)."""
        if self.stream is not None:
            return self._wait_on_stream()
        deadline = None if timeout is None else time.monotonic() + timeout
        tries, nap = 0, 0.00002
        while not self.poll():
            if deadline is not None and time.monotonic() > deadline:
                self.state = "lost"
                self.error = SpcollError(
                    -14, "no answer from the daemon within %.3g s (a rank "
                    "did not issue the op, or is stuck)" % timeout, self.name)
                # The request stays with the client (its memory is kept:
                # the daemon may still write into it).
                _LOST.append(self)
                raise self.error
            tries += 1
            if tries > _SPINS:
                time.sleep(nap)
                nap = min(nap * 2, _MAX_NAP)
        if self.state != "ok":
            raise self.error
        return self.result


    def _wait_on_stream(self):

        with self.client._lock:
            if self.state == "pending":
                rc = lib.spc_wait_on_stream(ctypes.byref(self.req),
                                            _cuda.stream_handle(self.stream))
                if rc < 0:
                    self._fail(rc, self._msg())
                else:
                    self._done()
        if self.state != "ok":
            raise self.error
        return self.result


# Calls given up on after a timeout: their buffers must outlive the daemon's
# last possible write, so they are never freed.
_LOST = []
