"""Hybrid context parallelism: a ring (zigzag) group and an Ulysses group
composed, ring first, as MindSpeed's *_with_cp functions do.

initialize_context_parallel splits a world group of R * U ranks: global
rank = u * R + r, ring groups are consecutive ranks (color rank // R),
Ulysses groups the ranks with the same ring position (color rank % R).
"""
from . import autograd as A
from . import ops
from .state import resolve


class ParallelState:
    """Which CP groups are on: get_parallel_state() answers the *_with_cp
    functions. A group of size 1 (or none) is off."""

    def __init__(self, ring_group=None, ulysses_group=None):
        self.ring_group = ring_group
        self.ulysses_group = ulysses_group

    def is_ring_enable(self):
        return self.ring_group is not None and self.ring_group.size > 1

    def is_ulysses_enable(self):
        return self.ulysses_group is not None and self.ulysses_group.size > 1

    def get_ring_group(self):
        return self.ring_group

    def get_ulysses_group(self):
        return self.ulysses_group

    def get_ring_group_size(self):
        return self.ring_group.size if self.ring_group is not None else 1

    def get_ring_rank(self):
        return self.ring_group.rank if self.ring_group is not None else 0

    def get_ulysses_group_size(self):
        return self.ulysses_group.size if self.ulysses_group is not None else 1

    def get_ulysses_rank(self):
        return self.ulysses_group.rank if self.ulysses_group is not None else 0


_state = ParallelState()


def get_parallel_state():
    return _state


def set_parallel_state(ring_group=None, ulysses_group=None):
    global _state
    _state = ParallelState(ring_group, ulysses_group)
    return _state


def initialize_context_parallel(group=None, ring_size=1):
    """Split `group` (default: the SP group) into ring groups of ring_size
    consecutive ranks and Ulysses groups across them; every rank calls it.
    Returns the new ParallelState (also the current one)."""
    group = resolve(group)
    R = int(ring_size)
    if R < 1 or group.size % R:
        raise ValueError("spcoll: ring_size %r must divide the group size %d"
                         % (ring_size, group.size))
    ring = group.split(group.rank // R, group.rank)
    uly = group.split(group.rank % R, group.rank)
    return set_parallel_state(ring, uly)


def split_forward_gather_backward_with_cp(input_, dim):
    """Ring: zigzag split (length a multiple of 2 * ring size); then
    Ulysses: rule split of what the ring left."""
    ps = get_parallel_state()
    if ps.is_ring_enable():
        # a length that is not a multiple of 2 * ring size fails the zigzag
        # op on every rank (SpcollValueError naming the length)
        input_ = A.load_balanced_split_forward_gather_backward(
            input_, ps.get_ring_group(), dim)
    if ps.is_ulysses_enable():
        n = input_.shape[ops._dim(input_, dim)]
        input_ = A.split_forward_gather_backward(
            input_, ps.get_ulysses_group(), dim,
            A.cal_split_sizes(n, ps.get_ulysses_group_size()))
    return input_


def gather_forward_split_backward_with_cp(input_, dim, gather_size):
    """The inverse: Ulysses gather (sizes by the rule on this ring rank's
    share of gather_size), then the ring's zigzag gather."""
    ps = get_parallel_state()
    gather_size = int(gather_size)
    if ps.is_ring_enable():
        if gather_size % (2 * ps.get_ring_group_size()):
            raise ValueError("spcoll: gather_size %d is not a multiple of 2 * "
                             "ring size (%d)"
                             % (gather_size, 2 * ps.get_ring_group_size()))
        gather_size //= ps.get_ring_group_size()
    if ps.is_ulysses_enable():
        input_ = A.gather_forward_split_backward(
            input_, ps.get_ulysses_group(), dim,
            A.cal_split_sizes(gather_size, ps.get_ulysses_group_size()))
    if ps.is_ring_enable():
        input_ = A.load_balanced_gather_forward_split_backward(
            input_, ps.get_ring_group(), dim)
    return input_


def packed_data_split_forward_gather_backward_with_cp(x, dim, seq_lens):
    """Ring: each packed sequence split over the ring; then Ulysses: a rule
    split of the result."""
    ps = get_parallel_state()
    if ps.is_ring_enable():
        x = A.packed_data_split_forward_gather_backward(
            x, ps.get_ring_group(), seq_lens, dim)
    if ps.is_ulysses_enable():
        n = x.shape[ops._dim(x, dim)]
        x = A.split_forward_gather_backward(
            x, ps.get_ulysses_group(), dim,
            A.cal_split_sizes(n, ps.get_ulysses_group_size()))
    return x


def packed_data_gather_forward_split_backward_with_cp(x, dim, seq_lens):
    """Ulysses gather of this ring rank's packed share, then the ring's
    packed gather."""
    ps = get_parallel_state()
    table = A.cal_split_sizes_multi(seq_lens, ps.get_ring_group_size())
    if ps.is_ulysses_enable():
        mine = int(table[ps.get_ring_rank()].sum())
        x = A.gather_forward_split_backward(
            x, ps.get_ulysses_group(), dim,
            A.cal_split_sizes(mine, ps.get_ulysses_group_size()))
    if ps.is_ring_enable():
        x = A.packed_data_gather_forward_split_backward(
            x, table, ps.get_ring_group(), dim)
    return x
