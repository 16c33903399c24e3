"""Point-to-point send/recv for the torch backend.

Every group uses the daemon's point-to-point op (spc_start_send /
spc_start_recv), on one node or across nodes: messages are matched per
(group, src, dst, tag) in posting order, as torch's are; a receive may
name no source (recv_anysource) and learns who sent; the daemon checks
that the two sides agree on dtype and element count, so a disagreement
fails both sides instead of hanging, and a lost peer (or node), the op
timeout or an abort fail a waiting side with the collectives' errors.
Across nodes the receiver's daemon matches and the bytes go from the
sender's tensor to the receiver's as one UCX stream
(daemon/core/op_p2p_peer.c).
"""
from ._inflight import Call
from .memory import spc_dtype


class Links:
    """Point to point of one process group, through the daemon's op."""

    def __init__(self, pg):
        self.pg = pg
        g = pg._group
        self.r, self.w = g.rank, g.size

    def _check_peer(self, peer, any_ok=False):
        if any_ok and peer == -1:
            return
        if not 0 <= peer < self.w or peer == self.r:
            raise ValueError("spcoll: peer rank %d is not another rank of "
                             "this group of %d (this is rank %d)"
                             % (peer, self.w, self.r))

    def _coll(self):
        from ._dist_coll import Coll
        return Coll(self.pg._group)

    def _start(self, send, x, peer, tag, name, finish=None):
        c = self._coll()
        dt = spc_dtype(x.dtype, "tensor")
        with c.client._lock:
            g = c.group._handle()
            cten = c.pool.spc_tensor(x, c.pool.locate(x), dt, "tensor")
            call = Call(c.client, name, (x, cten), finish)
            return call.start_p2p(g, send, cten, peer, tag)

    def send(self, t, dst, tag):
        self._check_peer(dst)
        name = "send(dst=%d, tag=%d)" % (dst, tag)
        x = self._coll().flat_in(t)
        return self._start(True, x, dst, tag, name)

    def recv(self, t, src, tag):
        """src -1: from any rank (the call's .source says which)."""
        self._check_peer(src, any_ok=True)
        name = "recv(src=%s, tag=%d)" % ("any" if src == -1 else src, tag)
        y, back = self._coll().flat_out(t)

        def fin():
            if back is not None:
                back.copy_(y.view(back.shape))
        return self._start(False, y, src, tag, name, fin)
