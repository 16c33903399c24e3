"""libspclient through ctypes: finding the library and declaring its C API.

Nothing here knows about torch. The declarations mirror client/spcoll.h;
ctypes needs them spelled out so that 64-bit values and struct returns
cross the boundary intact.

Where the library comes from, first match wins:
1. $SPCOLL_LIB (a path to libspclient.so);
2. the build tree when this package runs from the source tree
   (<repo>/build/lib/libspclient.so, or $SPCOLL_BUILD instead of build);
3. the directory `make install` recorded in _install.py;
4. the system's libspclient.so.1 (the dynamic loader's search path).
"""
import collections
import ctypes
import os

SPC_MAX_DIMS = 8

# Status codes (negative: errors), as in spcoll.h.
STATUS_NAMES = {
    0: "SPC_OK", -1: "SPC_EINVAL", -2: "SPC_EPROTOCOL", -3: "SPC_EVERSION",
    -4: "SPC_ENOTFOUND", -5: "SPC_ECONFLICT", -6: "SPC_EMISMATCH",
    -7: "SPC_EPEERLOST", -8: "SPC_ESHUTDOWN", -9: "SPC_ENOMEM",
    -10: "SPC_ESYSTEM", -11: "SPC_EABORTED", -12: "SPC_ECONNECTION",
    -13: "SPC_EPERM", -14: "SPC_ETIMEDOUT", -15: "SPC_EUNSUPPORTED",
    -16: "SPC_EDEVICE", -17: "SPC_ENODELOST", -18: "SPC_ERESTARTED",
}
SPC_EINVAL = -1
SPC_ENOTFOUND = -4
SPC_ETIMEDOUT = -14

# spc_dtype
FLOAT32, FLOAT64, FLOAT16, BFLOAT16, INT8, UINT8, INT32, INT64 = range(8)

# spc_grad_scale
SCALE_NONE, SCALE_UP, SCALE_DOWN = 0, 1, 2

# spc_reduce_op
SUM, MAX, MIN = 0, 1, 2


class Op(ctypes.Structure):
    """spc_op: made only by the spc_op_* constructors (kind is internal)."""
    _fields_ = [
        ("kind", ctypes.c_int),
        ("ndims", ctypes.c_int),
        ("dims", ctypes.c_int * 2),
        ("sizes", ctypes.POINTER(ctypes.c_int64)),
        ("nsizes", ctypes.c_int),
        ("sizes2", ctypes.POINTER(ctypes.c_int64)),
        ("nsizes2", ctypes.c_int),
        ("scalar", ctypes.c_int64),
        ("flags", ctypes.c_uint),
    ]


class Tensor(ctypes.Structure):
    """spc_tensor: (buffer, byte offset, dtype, shape), C-contiguous."""
    _fields_ = [
        ("buf", ctypes.c_void_p),
        ("offset", ctypes.c_uint64),
        ("dtype", ctypes.c_int),
        ("ndim", ctypes.c_int),
        ("shape", ctypes.c_int64 * SPC_MAX_DIMS),
    ]


class Timing(ctypes.Structure):
    _fields_ = [("daemon_ns", ctypes.c_uint64), ("wait_ns", ctypes.c_uint64),
                ("plan_ns", ctypes.c_uint64), ("move_ns", ctypes.c_uint64)]


_P = ctypes.c_void_p
_PP = ctypes.POINTER(ctypes.c_void_p)
_I64P = ctypes.POINTER(ctypes.c_int64)
_TP = ctypes.POINTER(Tensor)
_OPP = ctypes.POINTER(Op)
_I, _I64, _SZ, _S = ctypes.c_int, ctypes.c_int64, ctypes.c_size_t, ctypes.c_char_p

# name: (restype, argtypes)
_PROTOS = {
    "spc_abi": (_S, []),
    "spc_strerror": (_S, [_I]),
    "spc_dtype_size": (_SZ, [_I]),
    "spc_default_socket": (_S, [ctypes.c_char_p, _SZ]),
    "spc_connect": (_I, [_S, _S, _PP]),
    "spc_disconnect": (None, [_P]),
    "spc_last_error": (_S, [_P]),
    "spc_group_join": (_I, [_P, _S, _I, _I, _PP]),
    "spc_set_op_timeout": (_I, [_P, ctypes.c_int64]),
    "spc_set_reconnect_timeout": (_I, [_P, ctypes.c_int64]),
    "spc_group_leave": (_I, [_P]),
    "spc_group_rank": (_I, [_P]),
    "spc_group_size": (_I, [_P]),
    "spc_group_spans_nodes": (_I, [_P]),
    "spc_group_split": (_I, [_P, _I, _I, _PP]),
    "spc_buffer_alloc": (_I, [_P, _SZ, _PP]),
    "spc_buffer_free": (_I, [_P]),
    "spc_buffer_data": (_P, [_P]),
    "spc_buffer_size": (_SZ, [_P]),
    "spc_tensor_init": (_I, [_TP, _P, ctypes.c_uint64, _I, _I, _I64P]),
    "spc_op_split": (Op, [_I, _I64P]),
    "spc_op_all_gather": (Op, [_I, _I64P]),
    "spc_op_all_to_all": (Op, [_I, _I, _I64]),
    "spc_op_all_to_all_v": (Op, [_I64P, _I64P]),
    "spc_op_all_reduce": (Op, [_I]),
    "spc_op_reduce_scatter": (Op, [_I, _I64P]),
    "spc_op_zigzag_split": (Op, [_I]),
    "spc_op_zigzag_gather": (Op, [_I]),
    "spc_op_packed_split": (Op, [_I, _I64P, _I]),
    "spc_op_packed_gather": (Op, [_I, _I64P, _I]),
    "spc_op_scaled": (Op, [Op, _I]),
    "spc_op_info": (_I, [_I, ctypes.POINTER(_S), ctypes.POINTER(_I),
                         ctypes.POINTER(_I), ctypes.POINTER(_I)]),
    "spc_out_shape": (_I, [_P, _OPP, _TP, _I64P, ctypes.POINTER(_I)]),
    "spc_run": (_I, [_P, _OPP, _TP, _TP]),
    "spc_start": (_I, [_P, _OPP, _TP, _TP, _PP]),
    "spc_wait": (_I, [_PP]),
    "spc_test": (_I, [_PP, ctypes.POINTER(_I)]),
    "spc_start_send": (_I, [_P, _TP, _I, _I, _PP]),
    "spc_start_recv": (_I, [_P, _TP, _I, _I, ctypes.POINTER(_I), _PP]),
    "spc_last_timing": (_I, [_P, ctypes.POINTER(Timing)]),
    "spc_sp_pad_len": (_I64, [_I64, _I]),
    # GPU (spcoll_gpu.h, "GPU: tensors in CUDA device memory"); a stream is a
    # cudaStream_t as an integer (torch's Stream.cuda_stream).
    "spc_gpu_probe": (_I, [ctypes.POINTER(_I)]),
    "spc_buffer_alloc_device": (_I, [_P, _I, _SZ, _PP]),
    "spc_buffer_device": (_I, [_P]),
    "spc_start_on_stream": (_I, [_P, _OPP, _TP, _TP, _P, _PP]),
    "spc_wait_on_stream": (_I, [_PP, _P]),
    "spc_async_error": (_I, [_P, _I]),
    "spc_run_on_stream": (_I, [_P, _OPP, _TP, _TP, _P]),
    "spc_sp_positions": (_I, [_I64, _I, _I, _I64P]),
    "spc_sp_keep_mask": (_I, [_I64, _I64, _I, _I, ctypes.POINTER(ctypes.c_uint8)]),
}


# The layouts this package's ctypes structs have, in spc_abi()'s format;
# the library's line must match (its version apart) or import fails.
ABI_VERSION = 1


def abi_line(version="0.1.0"):
    def fields(cls):
        return "".join(" %s %d" % (n, getattr(cls, n).offset)
                       for n, _ in cls._fields_)
    return ("spcoll %s abi %d; spc_tensor %d%s; spc_op %d%s; spc_timing %d; "
            "SPC_MAX_DIMS %d" % (version, ABI_VERSION, ctypes.sizeof(Tensor),
                                 fields(Tensor), ctypes.sizeof(Op), fields(Op),
                                 ctypes.sizeof(Timing), SPC_MAX_DIMS))


def check_abi(line, path):
    """Raise ImportError unless the library's spc_abi() line is ours."""
    version = line.split(" ", 2)[1] if line.startswith("spcoll ") else "?"
    if line != abi_line(version):
        raise ImportError(
            "spcoll: %s has another ABI than this package: the library says "
            "%r, the package's ctypes layout is %r; use the package and the "
            "library of one build" % (path, line, abi_line(version)))


def _candidates():
    env = os.environ.get("SPCOLL_LIB")
    if env:
        # An explicit choice is the only one: falling back would hide a typo.
        return [env]
    out = []
    here = os.path.dirname(os.path.abspath(__file__))
    repo = os.path.dirname(os.path.dirname(os.path.dirname(here)))
    if os.path.isfile(os.path.join(repo, "client", "spcoll.h")):
        build = os.environ.get("SPCOLL_BUILD", "build")
        out.append(os.path.join(repo, build, "lib", "libspclient.so"))
    try:
        from . import _install  # written by `make install`
        out.append(os.path.join(_install.LIBDIR, "libspclient.so.1"))
    except ImportError:
        pass
    out.append("libspclient.so.1")
    return out


def _load():
    tried = []
    for path in _candidates():
        if os.sep in path and not os.path.exists(path):
            tried.append("%s (no such file)" % path)
            continue
        try:
            lib = ctypes.CDLL(path)
        except OSError as e:
            tried.append("%s (%s)" % (path, e))
            continue
        missing = [n for n in _PROTOS if not hasattr(lib, n)]
        if missing:
            raise ImportError("spcoll: %s lacks %s: it is another version of "
                              "libspclient than this package (%s) expects"
                              % (path, ", ".join(missing), ABI_VERSION))
        for name, (res, args) in _PROTOS.items():
            fn = getattr(lib, name)
            fn.restype = res
            fn.argtypes = args
        check_abi(lib.spc_abi().decode(), path)
        lib.spcoll_path = path
        return lib
    raise ImportError("spcoll: cannot load libspclient; tried: " +
                      "; ".join(tried) +
                      ". Set SPCOLL_LIB to the library's path, or build it "
                      "with `make` (or install it with `make install`).")


lib = _load()


class OpInfo(collections.namedtuple("OpInfo",
                                    "kind name grad grad_scale reduces")):
    """One row of the library's op list (spc_op_info): kind number, name,
    the name of the op that (with the same arguments) is its gradient
    (None: none listed), that gradient's scale ('up', 'down' or None), and
    whether it combines values."""


_SCALE_NAMES = {SCALE_NONE: None, SCALE_UP: "up", SCALE_DOWN: "down"}


def read_op_list(library):
    """{name: OpInfo} from library's op list: kinds 1, 2, ... until
    SPC_ENOTFOUND, as spcoll.h documents spc_op_info."""
    rows, kind = {}, 1
    while True:
        name, grad, scale, red = _S(), _I(), _I(), _I()
        rc = library.spc_op_info(kind, ctypes.byref(name), ctypes.byref(grad),
                                 ctypes.byref(scale), ctypes.byref(red))
        if rc == SPC_ENOTFOUND:
            break
        if rc < 0 or scale.value not in _SCALE_NAMES:
            raise ImportError("spcoll: spc_op_info(%d) of %s returned %d "
                              "(grad scale %d)" % (kind, library.spcoll_path,
                                                   rc, scale.value))
        rows[kind] = (name.value.decode(), grad.value, scale.value,
                      bool(red.value))
        kind += 1
    return {n: OpInfo(k, n, rows[g][0] if g else None, _SCALE_NAMES[s], r)
            for k, (n, g, s, r) in rows.items()}


# The op list, read from the library at import: the gradient pairs of the
# autograd functions come from it (ops.gradient), not from a copy here.
OPS = read_op_list(lib)


def int64_array(values):
    """A C int64 array of values (kept alive by the caller), or None."""
    if values is None:
        return None
    vals = [int(v) for v in values]
    return (ctypes.c_int64 * max(len(vals), 1))(*vals)


def has_symbol(name):
    return hasattr(lib, name)
