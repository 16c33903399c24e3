"""CUDA tensors: where an op runs (host or device path), the stream it is
ordered on, and torch tensors over spcoll-owned device memory.

The package's ops (and the Python backend) only have the daemon import
device memory that spcoll allocated itself
(spc_buffer_alloc_device: one cudaMalloc per arena, freed by spcoll after
it is unregistered). A CUDA tensor from torch's caching allocator is never
registered: it is staged into an spcoll arena by one device-to-device copy
on the current stream (and an output copied back the same way). Why not
register torch's memory in place: torch can cudaFree a cached segment at
any moment (torch.cuda.empty_cache, the retry after an out-of-memory) and
neither torch 1.13 nor 2.x calls anything before it does, so the daemon
could still hold the segment imported (undefined behaviour per CUDA);
expandable segments (PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True) are
VMM memory, which legacy CUDA IPC cannot share at all. Tensors made with
spcoll.empty(..., device="cuda") are spcoll memory: zero copy. The C++
torch.distributed backend registers the caching allocator's segments
instead, released from the allocator's own hook before torch frees them
(client/torch/cuda.hpp).
"""
import ctypes

import torch

from . import _lib
from .errors import GpuPathUnavailable

lib = _lib.lib


def place(tensors, what):
    """-1 when every tensor is on the CPU, the CUDA ordinal when all are on
    one GPU; ValueError when they mix host and device memory or GPUs (the
    daemon runs an op's tensors on one path)."""
    devs = []
    for t in tensors:
        d = t.device
        if d.type not in ("cpu", "cuda"):
            raise ValueError("spcoll: %s is on device '%s'; only CPU and CUDA "
                             "tensors are supported" % (what, d))
        key = -1 if d.type == "cpu" else _index(d)
        if key not in devs:
            devs.append(key)
    if len(devs) <= 1:
        return devs[0] if devs else -1
    names = ", ".join("cpu" if k < 0 else "cuda:%d" % k for k in devs)
    if -1 in devs:
        raise ValueError("spcoll: %s mix host and device tensors (%s); an "
                         "op's tensors must all be on the CPU or all on one "
                         "GPU: move them with .cpu() or .to(device)"
                         % (what, names))
    raise ValueError("spcoll: %s are on different GPUs (%s); an op's tensors "
                     "must be on one GPU" % (what, names))


def _index(d):
    return d.index if d.index is not None else torch.cuda.current_device()


def device_index(device):
    """A device argument (None, "cpu", "cuda", "cuda:N", torch.device) as a
    place: -1 for the CPU, else a CUDA ordinal."""
    d = torch.device(device) if device is not None else torch.device("cpu")
    if d.type == "cpu":
        return -1
    if d.type != "cuda":
        raise ValueError("spcoll: device '%s': only 'cpu' and 'cuda' memory "
                         "is supported" % d)
    return _index(d)


def torch_device(dev):
    """The torch.device of a place() value."""
    return torch.device("cpu") if dev < 0 else torch.device("cuda", dev)


def current_stream(dev):
    """torch's current stream on CUDA ordinal dev (None for the host path):
    the daemon's work is ordered after what was queued on it, and what is
    queued on it next runs after the daemon's work."""
    if dev < 0:
        return None
    return torch.cuda.current_stream(torch.device("cuda", dev))


def stream_context(stream):
    """`with` this: stream is torch's current stream inside."""
    return torch.cuda.stream(stream)


def stream_handle(stream):
    """A torch Stream as the spc_stream (cudaStream_t) libspclient takes."""
    if stream is None:
        return None
    return ctypes.c_void_p(int(stream.cuda_stream) or None)


def unavailable(client, rc, what):
    """GpuPathUnavailable for a device call that failed with
    SPC_EUNSUPPORTED (no driver, no GPU in the daemon), with spcoll's
    message."""
    h = client._h if client is not None else None
    msg = lib.spc_last_error(h).decode() if h else ""
    return GpuPathUnavailable(
        "spcoll: %s: the GPU path is not available: %s (%s); move the "
        "tensors to the CPU with .cpu() to use the host path"
        % (what, msg or lib.spc_strerror(rc).decode(),
           _lib.STATUS_NAMES.get(rc, rc)))


class DeviceView:
    """One block of a device arena as torch sees it: torch.as_tensor keeps
    this object alive as the tensor storage's owner (through
    __cuda_array_interface__), so its death means torch freed the block."""
    __slots__ = ("__cuda_array_interface__", "__weakref__")

    def __init__(self, ptr, nbytes):
        self.__cuda_array_interface__ = {
            "shape": (nbytes,), "typestr": "|u1", "data": (ptr, False),
            "strides": None, "version": 2}


def device_tensor(view, dev, dtype, shape):
    """A tensor of dtype/shape over a DeviceView's bytes on CUDA ordinal
    dev (no copy: the bytes are the arena's)."""
    raw = torch.as_tensor(view, device=torch.device("cuda", dev))
    return raw.view(dtype).view(shape)
