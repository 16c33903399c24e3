"""Point-to-point send/recv for the torch backend.

Groups whose ranks are all on this node use the daemon's point-to-point op
(spc_start_send / spc_start_recv): messages are matched per (group, src,
dst, tag) in posting order, as torch's are; a receive may name no source
(recv_anysource) and learns who sent; the daemon checks that the two sides
agree on dtype and element count, so a disagreement fails both sides
instead of hanging, and a lost peer, the op timeout or an abort fail a
waiting side with the collectives' errors.

Groups spanning nodes (the daemon's P2P op is one node's) keep the older
path: a message from src to dst travels on the two-rank group
"<group>.p2p.<src>-<dst>" (rank 0 the sender) as one all_to_all_v. Those
pair groups are joined when the process group is made, in one global order
of (src, dst) (joining lazily at the first send would deadlock a ring).
There every tag shares one ordered channel per (src, dst), and a receive
must name its source.
"""
from . import _lib
from ._inflight import Call
from .memory import spc_dtype
from .ops import _Op


def _a2av(a, b):
    x, y = _lib.int64_array(a), _lib.int64_array(b)
    return _Op("p2p", _lib.lib.spc_op_all_to_all_v, x, y, arrays=(x, y))


class Links:
    """Point to point of one process group: the daemon's op, or (across
    nodes) pair groups joined on creation."""

    def __init__(self, pg):
        self.pg = pg
        g = pg._group
        self.r, self.w = g.rank, g.size
        self.native = not g.spans_nodes
        self.groups = {}
        if self.native:
            return
        for s in range(self.w):
            for d in range(self.w):
                if s != d and self.r in (s, d):
                    name = "%s.p2p.%d-%d" % (g.name, s, d)
                    t = pg._timeout_s
                    self.groups[(s, d)] = g.client.join(
                        name, 2, 0 if self.r == s else 1,
                        timeout=t if t > 0 else None)

    def _check_peer(self, peer, any_ok=False):
        if any_ok and peer == -1:
            return
        if not 0 <= peer < self.w or peer == self.r:
            raise ValueError("spcoll: peer rank %d is not another rank of "
                             "this group of %d (this is rank %d)"
                             % (peer, self.w, self.r))

    def _coll(self, group):
        from ._dist_coll import Coll
        return Coll(group)

    # -- the daemon's op --
    def _start(self, send, x, peer, tag, name, finish=None):
        c = self._coll(self.pg._group)
        dt = spc_dtype(x.dtype, "tensor")
        with c.client._lock:
            g = c.group._handle()
            cten = c.pool.spc_tensor(x, c.pool.locate(x), dt, "tensor")
            call = Call(c.client, name, (x, cten), finish)
            return call.start_p2p(g, send, cten, peer, tag)

    def send(self, t, dst, tag):
        self._check_peer(dst)
        name = "send(dst=%d, tag=%d)" % (dst, tag)
        if not self.native:
            return self._pair_send(t, dst, tag, name)
        x = self._coll(self.pg._group).flat_in(t)
        return self._start(True, x, dst, tag, name)

    def recv(self, t, src, tag):
        """src -1: from any rank (the call's .source says which)."""
        self._check_peer(src, any_ok=self.native)
        name = "recv(src=%s, tag=%d)" % ("any" if src == -1 else src, tag)
        if not self.native:
            return self._pair_recv(t, src, tag, name)
        y, back = self._coll(self.pg._group).flat_out(t)

        def fin():
            if back is not None:
                back.copy_(y.view(back.shape))
        return self._start(False, y, src, tag, name, fin)

    # -- pair groups, across nodes --
    def _pair_send(self, t, dst, tag, name):
        c = self._coll(self.groups[(self.r, dst)])
        x = c.flat_in(t)
        y = c.empty(0, t.dtype)
        return c.start(name, _a2av([0, x.numel()], [0, 0]), x, y)

    def _pair_recv(self, t, src, tag, name):
        c = self._coll(self.groups[(src, self.r)])
        x = c.empty(0, t.dtype)
        y, back = c.flat_out(t)

        def fin():
            if back is not None:
                back.copy_(y.view(back.shape))
        return c.start(name, _a2av([0, 0], [y.numel(), 0]), x, y, fin)
