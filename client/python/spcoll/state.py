"""The process's default groups, as the seeds keep them.

The sequence-parallel group (LightRFT's set/get_sequence_parallel_group) is
what every wrapper uses when it is given no group; Megatron's mappings look
for the tensor-model-parallel group first and fall back to it.
"""
_sp_group = None
_tp_group = None


def set_sequence_parallel_group(group):
    """Make `group` (a spcoll.Group, or None to clear) the default group."""
    global _sp_group
    group = _as_group(group)
    _check(group, "group")
    _sp_group = group


def get_sequence_parallel_group():
    return _sp_group


def get_sequence_parallel_world_size():
    """The SP group's size, 1 when none is set (as LightRFT does)."""
    return _sp_group.size if _sp_group is not None else 1


def get_sequence_parallel_rank():
    return _sp_group.rank if _sp_group is not None else 0


def set_tensor_model_parallel_group(group):
    global _tp_group
    group = _as_group(group)
    _check(group, "group")
    _tp_group = group


def get_tensor_model_parallel_group():
    return _tp_group if _tp_group is not None else _sp_group


def _as_group(group):
    """group itself (a spcoll.Group), or the spcoll.Group under a
    torch.distributed process group of backend "spcoll"."""
    from .client import Group
    if group is None or isinstance(group, Group):
        return group
    from .distributed import process_group_of
    pg = process_group_of(group)
    return pg.spcoll_group if pg is not None else group


def _check(group, what):
    from .client import Group
    if group is not None and not isinstance(group, Group):
        raise TypeError("spcoll: %s must be a spcoll.Group (from "
                        "spcoll.join or Group.split) or a process group of "
                        "backend \"spcoll\", got %s"
                        % (what, type(group).__name__))


def resolve(group, default=None):
    """group, else the default for the call, else a clear error."""
    group = _as_group(group)
    if group is None:
        group = default if default is not None else _sp_group
    if group is None:
        raise ValueError("spcoll: no group given and no sequence-parallel "
                         "group set (spcoll.set_sequence_parallel_group)")
    _check(group, "group")
    return group
