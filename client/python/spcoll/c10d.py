"""Backend "spcoll" on torch 2.x: a C++ c10d::Backend (spcoll._c10d, built
by `make` against the installed torch) over libspclient. torch's dispatch
calls it directly: no Python runs per op, and completion (wait, futures)
needs neither the GIL nor a Python thread. Debian's torch 1.13 ships no
c10d headers; there the Python backend (spcoll.distributed) serves.

Where the extension comes from, first match wins: $SPCOLL_C10D (a path to
_c10d.so); _c10d.so beside this file (`make install` puts it there);
<repo>/build/python/spcoll/_c10d.so when the package runs from the source
tree. $SPCOLL_BACKEND=python keeps the Python backend even where the
extension loads.

Group names: see group_name(). CUDA tensors of torch's caching allocator
go in place on the process group's own spcoll group, ordered on torch's
current stream (client/torch/cuda.hpp); what the C++ backend leaves to the
Python backend's device path (a second spcoll group per process group,
joined when torch sees a GPU) is listed in docs/python.md.
"""
import datetime
import hashlib
import importlib.machinery
import importlib.util
import os
import uuid
import zlib

import torch
import torch.distributed as dist

_ext = None            # the loaded extension module
_why_not = None        # why it could not be loaded
_conn = None           # this process's connection (spcoll._c10d.Conn)
_conn_pid = None
_job = None            # the job id drawn by the world group's rank 0


def _candidates():
    env = os.environ.get("SPCOLL_C10D")
    if env:
        return [env]
    here = os.path.dirname(os.path.abspath(__file__))
    repo = os.path.dirname(os.path.dirname(os.path.dirname(here)))
    build = os.environ.get("SPCOLL_BUILD", "build")
    return [os.path.join(here, "_c10d.so"),
            os.path.join(repo, build, "python", "spcoll", "_c10d.so")]


def load():
    """The extension module, or None (why_not() says why)."""
    global _ext, _why_not
    if _ext is not None or _why_not is not None:
        return _ext
    if os.environ.get("SPCOLL_BACKEND") == "python":
        _why_not = "SPCOLL_BACKEND=python"
        return None
    for path in _candidates():
        if not os.path.exists(path):
            continue
        try:
            loader = importlib.machinery.ExtensionFileLoader(
                "spcoll._c10d", path)
            spec = importlib.util.spec_from_file_location(
                "spcoll._c10d", path, loader=loader)
            mod = importlib.util.module_from_spec(spec)
            loader.exec_module(mod)
        except ImportError as e:
            _why_not = "%s does not load: %s" % (path, e)
            return None
        _ext = mod
        return _ext
    _why_not = "no _c10d.so (looked at %s)" % ", ".join(_candidates())
    return None


def why_not():
    return _why_not


def connection():
    """This process's connection for the C++ backend (a forked child
    makes its own)."""
    global _conn, _conn_pid
    if _conn is None or _conn_pid != os.getpid():
        _conn = load().Conn(os.environ.get("SPCOLL_SOCKET", ""))
        _conn_pid = os.getpid()
    return _conn


def _job_id(store, rank):
    """The job's id: drawn by rank 0 of the world group, read by every
    rank from the store init_process_group made (the world group is made
    before torch counts itself initialized)."""
    global _job
    if _job is None or not dist.is_initialized():
        if rank == 0:
            store.set("spcoll/job", uuid.uuid4().hex[:16])
        _job = store.get("spcoll/job").decode()
    return _job


def group_name(job, group_id, global_ranks):
    """The spcoll group of a torch group: "torch.<job>.<id>.<members>",
    where members are the global ranks in group order, spelled out as
    ranges when they fit and as a SHA-256 digest of that spelling when
    not. Two different member sets never share a name, even when torch
    gives them the same id (new_subgroups, use_local_synchronization);
    the same member set made twice differs by torch's group id."""
    ranks = [int(r) for r in global_ranks]
    parts, i = [], 0
    while i < len(ranks):
        j = i
        while j + 1 < len(ranks) and ranks[j + 1] == ranks[j] + 1:
            j += 1
        parts.append(str(ranks[i]) if i == j else "%d-%d" % (ranks[i], ranks[j]))
        i = j + 1
    members = "_".join(parts) or "world"
    gid = "".join(c if c.isalnum() or c in "._-" else "-" for c in str(group_id))
    name = "torch.%s.%s.%s" % (job, gid or "world", members)
    if len(name) > 127:
        digest = hashlib.sha256(members.encode()).hexdigest()[:32]
        gid = hashlib.sha256(gid.encode()).hexdigest()[:16] if len(gid) > 40 else gid
        name = "torch.%s.%s.h%s" % (job, gid, digest)
    return name


def create(opts, pg_options=None):
    """Backend creator (extended API): join the spcoll group of this torch
    group; a second, Python-side group for CUDA tensors where torch sees a
    GPU."""
    store, rank, size = opts.store, opts.group_rank, opts.group_size
    ranks = list(opts.global_ranks_in_group) or list(range(size))
    name = group_name(_job_id(store, rank), opts.group_id, ranks)
    timeout = opts.timeout
    if not isinstance(timeout, datetime.timedelta):
        timeout = datetime.timedelta(seconds=float(timeout))
    if os.environ.get("SPCOLL_CPU_ALLOCATOR") == "1":
        use_cpu_allocator()
    device = None
    if torch.cuda.is_available():
        from .distributed import python_group
        device = python_group(name + ".cuda", rank, size,
                              timeout.total_seconds(), store)
    return load().make_backend(connection(), name, rank, size, timeout,
                               device, _pg_id(opts.group_id), ranks)


def _pg_id(group_id):
    """The group's number in torch's FlightRecorder: torch's group name
    where it is one ("0", "1", ...), else a hash of it."""
    name = str(group_id)
    return int(name) if name.isdigit() else zlib.crc32(name.encode())


def records_flight():
    """Whether the C++ backend feeds torch's FlightRecorder itself."""
    ext = load()
    return ext is not None and ext.records_flight()


def use_cpu_allocator():
    """Opt in: torch's CPU tensors made from now on live in spcoll memory,
    so backend "spcoll" reads and writes them in place (no staging copy).
    Also turned on by SPCOLL_CPU_ALLOCATOR=1 when the first process group
    is made. What it changes (memory shared with the daemon and with
    children forked later): docs/python.md."""
    global _allocator_pid
    if load() is None:
        raise RuntimeError("spcoll: the C++ backend is not available (%s)"
                           % why_not())
    if _allocator_pid != os.getpid():
        load().use_cpu_allocator(connection())
        _allocator_pid = os.getpid()


_allocator_pid = None


def empty(shape, dtype=torch.float32, device=None):
    """A tensor the C++ backend takes in place: on the CPU, in this
    process's spcoll memory; on a GPU, from torch's caching allocator,
    whose segments (or, with expandable segments, cuMem mappings) the
    backend registers itself (torch.empty), or from spcoll's pool
    (mem_pool) where SPCOLL_CUDA_DIRECT=0 keeps torch's memory out."""
    d = torch.device(device) if device is not None else torch.device("cpu")
    if d.type == "cuda":
        ext = load()
        if ext is None or not ext.built_with_cuda() or ext.cuda_direct() or \
                not hasattr(torch.cuda, "use_mem_pool"):
            return torch.empty(shape, dtype=dtype, device=d)
        # SPCOLL_CUDA_DIRECT=0: torch's own memory does not go in place
        with torch.cuda.use_mem_pool(mem_pool(d), device=d):
            return torch.empty(shape, dtype=dtype, device=d)
    count = 1
    for n in shape:
        count *= int(n)
    size = torch.empty((), dtype=dtype).element_size()
    raw = load().empty_bytes(connection(), count * size)
    return raw.view(dtype).view(list(shape))


def mem_pool(device=None):
    """spcoll's torch.cuda.MemPool on a GPU (the current one by default):
    tensors allocated under ``torch.cuda.use_mem_pool(mem_pool())`` live
    in device memory that spcoll allocated and registered with the daemon,
    so the C++ backend takes them in place with no registration on first
    use, also in processes run with SPCOLL_CUDA_DIRECT=0 (whose own memory
    is then not registered). One pool per GPU and process; it
    allocates through this process's spcoll connection."""
    ext = load()
    if ext is None:
        raise RuntimeError("spcoll: the C++ backend is not available (%s)"
                           % why_not())
    if not ext.built_with_cuda():
        raise RuntimeError("spcoll: mem_pool: the C++ backend was built "
                           "without CUDA")
    d = torch.device(device) if device is not None else \
        torch.device("cuda", torch.cuda.current_device())
    if d.type != "cuda":
        raise ValueError("spcoll: mem_pool: device must be a CUDA device, "
                         "got %s" % d)
    idx = d.index if d.index is not None else torch.cuda.current_device()
    key = (os.getpid(), idx)
    entry = _pools.get(key)
    if entry is None:
        global _pool_allocator
        if _pool_allocator is None or _pool_allocator[0] != os.getpid():
            a = torch.cuda.memory.CUDAPluggableAllocator(
                ext.__file__, "spc_torch_pool_alloc", "spc_torch_pool_free")
            _pool_allocator = (os.getpid(), a)
        with torch.cuda.device(idx):
            pool = torch.cuda.MemPool(_pool_allocator[1].allocator())
            scratch = torch.cuda.MemPool(_pool_allocator[1].allocator())
        # the ops' own scratch goes to a pool of its own (routing to a
        # pool is one at a time, and the users route to theirs)
        ext.pool_use(connection(), idx, int(scratch.id[0]),
                     int(scratch.id[1]))
        entry = _pools[key] = (pool, scratch)
    return entry[0]


_pools = {}               # (pid, device) -> (users' MemPool, scratch's)
_pool_allocator = None    # (pid, CUDAPluggableAllocator)


def in_place(t):
    """Whether the C++ backend takes t (as input or output) without a
    copy."""
    return load().in_place(connection(), t)


def counts():
    """Bytes of op operands the C++ backend took in place (spcoll memory and
    CUDA tensors of torch's caching allocator: direct_bytes; other memory
    of blocking collectives, handed to libspclient as caller memory:
    wrapped_bytes), copied into staging, and copied back (this process, all
    groups); the segments of torch's CUDA allocator registered with the
    daemon (cuda_segments) and released again before torch freed them
    (cuda_segments_released); the allocations of spcoll's MemPool
    (cuda_pool_allocs) and those torch gave back (cuda_pool_frees)."""
    return load().counts(connection())


def spcoll_name(backend):
    """The spcoll group name of a C++ backend object."""
    return load().group_name(backend)


class NativeView:
    """What spcoll's own wrappers (spcoll.ops, autograd, ...) use when
    given a process group of the C++ backend: `spcoll_group`, a group of
    the Python client named "<backend's group>.py", joined on first use.
    Those wrappers are collectives, so every rank of the group gets here
    together."""

    _groups = {}

    def __init__(self, backend):
        self.name = spcoll_name(backend)
        self.rank, self.size = backend.rank(), backend.size()

    @property
    def spcoll_group(self):
        from .client import default_client
        key = (os.getpid(), self.name)
        g = NativeView._groups.get(key)
        if g is None or g._h is None:
            g = default_client(os.environ.get("SPCOLL_SOCKET")).join(
                self.name + ".py", self.size, self.rank)
            NativeView._groups[key] = g
        return g


def native_view(pg):
    """A NativeView of a torch process group whose CPU backend is the C++
    backend, else None."""
    if _ext is None:
        return None
    try:
        b = pg._get_backend(torch.device("cpu"))
    except Exception:
        return None
    try:
        return NativeView(b)
    except (ValueError, TypeError, RuntimeError):
        return None
