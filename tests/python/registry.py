"""The multi-rank checks: each is a function of a Ctx run on every rank of
one launch, in the same order everywhere (collectives must match). A check
records mismatches in ctx instead of raising, so that every rank goes on
issuing the same ops; an exception ends only that check."""
import hashlib

import torch

CHECKS = {}          # name -> (fn, worlds)


def check(*worlds):
    def deco(fn):
        name = fn.__name__
        assert name not in CHECKS, name
        CHECKS[name] = (fn, worlds or (2, 3, 4))
        return fn
    return deco


def params():
    """(world, name) pairs for pytest, in registration order."""
    return [(w, n) for n, (_, ws) in CHECKS.items() for w in ws]


def names_for(world):
    return [n for n, (_, ws) in CHECKS.items() if world in ws]


def _seed(*parts):
    h = hashlib.sha256("/".join(map(str, parts)).encode()).digest()
    return int.from_bytes(h[:6], "little")


class Ctx:
    def __init__(self, name, rank, world, group):
        self.name, self.rank, self.world, self.group = name, rank, world, group
        self.client = group.client
        self.failures = []
        self.compared = 0

    # -- data --
    def data(self, shape, dtype=torch.float32, owner="same", salt=0):
        """Deterministic data. owner='same': identical on every rank;
        an int: that rank's data (any rank can regenerate it). Floats are
        multiples of 1/64 in [-32, 32): sums and scalings by powers of two
        are exact."""
        key = "same" if owner == "same" else "rank%d" % owner
        g = torch.Generator().manual_seed(_seed(self.name, key, salt, tuple(shape)))
        if dtype.is_floating_point:
            return (torch.randint(-2048, 2048, shape, generator=g)
                    .to(torch.float64) / 64).to(dtype)
        if dtype == torch.bool:
            return torch.randint(0, 2, shape, generator=g).bool()
        lo, hi = (0, 255) if dtype == torch.uint8 else (-100, 100)
        return torch.randint(lo, hi, shape, generator=g).to(dtype)

    def mine(self, shape, dtype=torch.float32, salt=0):
        return self.data(shape, dtype, self.rank, salt)

    # -- comparisons (recorded, never raised) --
    def same(self, label, got, want):
        self.compared += 1
        if not isinstance(got, torch.Tensor):
            self.failures.append("%s: got %r, want %r" % (label, got, want))
            return False
        if got.shape != want.shape or got.dtype != want.dtype:
            self.failures.append("%s: got %s %s, want %s %s" % (
                label, got.dtype, tuple(got.shape), want.dtype, tuple(want.shape)))
            return False
        if not torch.equal(got, want):
            diff = (got != want).nonzero()
            self.failures.append("%s: %d element(s) differ, first at %s: got "
                                 "%r, want %r" % (
                label, diff.shape[0], diff[0].tolist(),
                got[tuple(diff[0])].item(), want[tuple(diff[0])].item()))
            return False
        return True

    def close(self, label, got, want, rtol=1e-5, atol=1e-6):
        self.compared += 1
        if got.shape != want.shape:
            self.failures.append("%s: shape %s, want %s" % (
                label, tuple(got.shape), tuple(want.shape)))
            return False
        if not torch.allclose(got, want, rtol=rtol, atol=atol):
            err = (got - want).abs().max().item()
            self.failures.append("%s: max abs error %g (rtol %g, atol %g)"
                                 % (label, err, rtol, atol))
            return False
        return True

    def true(self, label, cond, detail=""):
        self.compared += 1
        if not cond:
            self.failures.append("%s %s" % (label, detail))
        return bool(cond)
