"""Connections and groups: spcoll.Client and spcoll.Group.

libspclient wants one thread at a time per client; every call here takes
the client's lock, so a client may be shared by threads (the ops then run
one after another). A blocking op releases the GIL while it waits (ctypes
does that for every foreign call), so other Python threads keep running.
"""
import ctypes
import os
import threading

from . import _lib
from .errors import raise_status
from .memory import Pool

lib = _lib.lib


def default_socket():
    """$SPCOLL_SOCKET, else /run/spcolld/spcolld.sock for root, else
    $XDG_RUNTIME_DIR/spcolld.sock (as spc_default_socket)."""
    buf = ctypes.create_string_buffer(256)
    return lib.spc_default_socket(buf, len(buf)).decode()


class Client:
    """A connection to spcolld. framework is the tag the daemon's stats show.

    Tensors made by this client (empty/zeros/shared, and every op output)
    live in its buffers: they keep the client alive, and close() refuses to
    run while any of them is alive (disconnecting unmaps the buffers).
    """

    def __init__(self, socket=None, framework="torch", arena_bytes=None):
        self._lock = threading.RLock()
        self._h = None
        h = ctypes.c_void_p()
        rc = lib.spc_connect(socket.encode() if socket else None,
                             framework.encode() if framework else None,
                             ctypes.byref(h))
        if rc < 0:
            raise_status(rc, lib.spc_last_error(None).decode(), "connect")
        self._h = h.value
        self._pid = os.getpid()
        self.socket = socket or default_socket()
        self.framework = framework
        self.pool = Pool(self, arena_bytes)

    # -- plumbing --
    def _handle(self):
        if self._h is None:
            raise RuntimeError("spcoll: this client is closed")
        if self._pid != os.getpid():
            # A forked child shares the parent's socket: one frame from it
            # would garble the parent's conversation with the daemon.
            raise RuntimeError("spcoll: this client belongs to process %d; a "
                               "forked process must connect its own "
                               "(spcoll.connect)" % self._pid)
        return self._h

    def _raise(self, rc, call):
        msg = lib.spc_last_error(self._h).decode() if self._h else ""
        raise_status(rc, msg, call)

    def async_error(self, wait=True):
        """Raise the first failure among ops on CUDA streams whose
        completion was left to the stream (queue and return: a handle's
        wait() on such an op only orders the stream), once; None when none
        failed. wait: first wait for every outstanding answer (each comes
        once the daemon's work on its op is done). The client's next op
        raises such a failure too."""
        with self._lock:
            rc = lib.spc_async_error(self._handle(), 1 if wait else 0)
            if rc < 0:
                self._raise(rc, "an op on a stream")

    # -- groups --
    def join(self, name, world_size, rank, timeout=None):
        """Join group `name` as `rank` of `world_size`; blocks until every
        rank has joined (another framework's ranks included). `timeout`
        (seconds): the daemon fails an op of this group that some rank has
        not issued in that time, on every rank (None: the daemon's
        op_timeout, 30 minutes by default)."""
        # ctypes would pass "job\0x" as "job": refuse the NUL here, the
        # library checks every other byte (docs/security.md).
        if not isinstance(name, str) or not name or "\0" in name:
            raise ValueError("spcoll: group name must be a non-empty string "
                             "without NUL bytes, got %r" % (name,))
        with self._lock:
            ms = 0 if timeout is None else max(1, int(timeout * 1000))
            rc = lib.spc_set_op_timeout(self._handle(), ms)
            if rc < 0:
                self._raise(rc, "join(%r): op timeout %r" % (name, timeout))
            g = ctypes.c_void_p()
            rc = lib.spc_group_join(self._handle(), name.encode(),
                                    int(world_size), int(rank), ctypes.byref(g))
            if rc < 0:
                self._raise(rc, "join(%r, world_size=%d, rank=%d)"
                            % (name, world_size, rank))
            return Group(self, g.value, name)

    # -- memory --
    def empty(self, shape, dtype=None, device=None):
        """An uninitialized tensor in spcoll memory: ops read it and write
        their outputs without any copy. device: None or "cpu" for host
        memory, "cuda" / "cuda:N" / a torch.device for device memory that
        spcoll allocates (spc_buffer_alloc_device)."""
        import torch
        from . import _cuda
        dev = _cuda.device_index(device)
        with self._lock:
            self._handle()
            return self.pool.empty(shape, dtype or torch.float32, dev)

    def zeros(self, shape, dtype=None, device=None):
        t = self.empty(shape, dtype, device)
        t.zero_()
        return t

    def shared(self, t):
        """t itself when it already lies in this client's spcoll memory
        (contiguous), else a copy of it there."""
        with self._lock:
            self._handle()
            if self.pool.locate(t) is not None:
                return t
            return self.pool.stage(t)

    def is_shared(self, t):
        """True when ops take t without staging it (zero copy)."""
        with self._lock:
            return self._h is not None and self.pool.locate(t) is not None

    def staging_stats(self):
        """(count, bytes) of inputs copied into spcoll memory so far."""
        return self.pool.staged_count, self.pool.staged_bytes

    def trim(self):
        """Give back the buffers that hold no live tensor."""
        with self._lock:
            self._handle()
            self.pool.trim()

    # -- lifetime --
    def close(self):
        """Disconnect. Groups of this client are left (their pending ops
        fail on the other ranks). Refused while tensors in this client's
        memory are alive."""
        with self._lock:
            if self._h is None:
                return
            live = self.pool.live_blocks()
            if live:
                raise RuntimeError(
                    "spcoll: cannot close the client: %d tensor(s) in its "
                    "shared memory are still alive (disconnecting would unmap "
                    "them); delete them or copy them out (t.clone()) first"
                    % live)
            h, self._h = self._h, None
            self.pool.forget()
            lib.spc_disconnect(h)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        # Reached only when no tensor holds the client any more (blocks keep
        # it alive), so unmapping is safe.
        h = getattr(self, "_h", None)
        if h is not None:
            self._h = None
            try:
                lib.spc_disconnect(h)
            except Exception:      # interpreter shutdown: the module is gone
                pass

    def __repr__(self):
        return "<spcoll.Client %s%s>" % (self.socket,
                                         "" if self._h else " closed")


class Group:
    """A joined group: .rank, .size, .name; split() makes sub-groups."""

    def __init__(self, client, handle, name):
        self.client = client
        self._h = handle
        self.name = name
        self.rank = lib.spc_group_rank(handle)
        self.size = lib.spc_group_size(handle)
        # Some rank runs on another node.
        self.spans_nodes = bool(lib.spc_group_spans_nodes(handle))

    def _handle(self):
        if self._h is None:
            raise RuntimeError("spcoll: group %r was left" % self.name)
        self.client._handle()
        return self._h

    # torch.distributed-like spellings
    def get_rank(self):
        return self.rank

    def get_world_size(self):
        return self.size

    def split(self, color, key=None):
        """Every rank calls it (collective). Ranks with the same color form
        a sub-group ranked by (key, rank); color < 0 gives None. key
        defaults to this rank."""
        key = self.rank if key is None else int(key)
        with self.client._lock:
            sub = ctypes.c_void_p()
            rc = lib.spc_group_split(self._handle(), int(color), key,
                                     ctypes.byref(sub))
            if rc < 0:
                self.client._raise(rc, "split(color=%d, key=%d)" % (color, key))
            if not sub.value:
                return None
            return Group(self.client, sub.value,
                         "%s/color%d" % (self.name, color))

    def leave(self):
        with self.client._lock:
            if self._h is None or self.client._h is None:
                self._h = None
                return
            h, self._h = self._h, None
            rc = lib.spc_group_leave(h)
            if rc < 0:
                self.client._raise(rc, "leave(%r)" % self.name)

    def last_timing(self):
        """Where the daemon spent this client's last op (ns): a dict of
        daemon/wait/plan/move."""
        t = _lib.Timing()
        with self.client._lock:
            lib.spc_last_timing(self.client._handle(), ctypes.byref(t))
        return {"daemon_ns": t.daemon_ns, "wait_ns": t.wait_ns,
                "plan_ns": t.plan_ns, "move_ns": t.move_ns}

    def __repr__(self):
        return "<spcoll.Group %r rank %d of %d>" % (self.name, self.rank,
                                                   self.size)


_default_client = None
_default_lock = threading.Lock()


def connect(socket=None, framework="torch", arena_bytes=None):
    """A new client (see Client)."""
    return Client(socket, framework, arena_bytes)


def default_client(socket=None):
    """The process's shared client, connected on first use."""
    global _default_client
    with _default_lock:
        if (_default_client is None or _default_client._h is None or
                _default_client._pid != os.getpid()):
            _default_client = Client(socket)
        return _default_client


def join(name, world_size, rank, socket=None, client=None):
    """Join `name` through `client` (default: the process's shared client)."""
    return (client or default_client(socket)).join(name, world_size, rank)
