"""Point-to-point send/recv for the torch backend, over spcoll groups.

A message from src to dst travels on the two-rank group
"<group>.p2p.<src>-<dst>" (rank 0 the sender, rank 1 the receiver) as one all_to_all_v that
moves n elements from rank 0 to rank 1. Ops on one spcoll group are matched
in issue order, so messages are matched per (group, src, dst) in order, as
torch's send/recv are; the daemon checks the sizes (and dtype) the two
sides give, so a send and a recv that disagree fail on both sides instead
of hanging, and a lost peer fails them with SPC_EPEERLOST.

The pair groups are joined when the process group is made (lazily joining
at the first send would deadlock a ring: every rank would block joining
the group of its send before posting its recv). Joining in one global
order of (src, dst) cannot deadlock: the first incomplete group in that
order has all its members waiting at it.

Tags: torch matches per (src, dst, tag). Here every tag shares one ordered
channel per (src, dst); programs that use one tag per pair (ring attention,
pipelines) are unaffected, two tags interleaved differently on the two
sides are not supported (the sizes usually disagree and both sides get an
error).
"""
from . import _lib
from .ops import _Op


def _a2av(a, b):
    x, y = _lib.int64_array(a), _lib.int64_array(b)
    return _Op("p2p", _lib.lib.spc_op_all_to_all_v, x, y, arrays=(x, y))


class Links:
    """The pair groups of one process group, joined on creation."""

    def __init__(self, pg):
        self.pg = pg
        g = pg._group
        self.r, self.w = g.rank, g.size
        self.groups = {}
        for s in range(self.w):
            for d in range(self.w):
                if s != d and self.r in (s, d):
                    name = "%s.p2p.%d-%d" % (g.name, s, d)
                    t = pg._timeout_s
                    self.groups[(s, d)] = g.client.join(
                        name, 2, 0 if self.r == s else 1,
                        timeout=t if t > 0 else None)

    def _coll(self, s, d):
        from ._dist_coll import Coll
        if not 0 <= (d if s == self.r else s) < self.w or s == d:
            raise ValueError("spcoll: peer rank %d is not another rank of "
                             "this group of %d" % (d if s == self.r else s,
                                                   self.w))
        return Coll(self.groups[(s, d)])

    def send(self, t, dst, tag):
        c = self._coll(self.r, dst)
        x = c.flat_in(t)
        y = c.empty(0, t.dtype)
        return c.start("send(dst=%d, tag=%d)" % (dst, tag),
                       _a2av([0, x.numel()], [0, 0]), x, y)

    def recv(self, t, src, tag):
        c = self._coll(src, self.r)
        x = c.empty(0, t.dtype)
        y, back = c.flat_out(t)

        def fin():
            if back is not None:
                back.copy_(y.view(back.shape))
        return c.start("recv(src=%d, tag=%d)" % (src, tag),
                       _a2av([0, 0], [y.numel(), 0]), x, y, fin)
