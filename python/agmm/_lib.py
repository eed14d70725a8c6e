"""libagmm.so through ctypes: finding and loading the library, the structs of include/agmm.h, the
prototypes, and the exceptions a status becomes.

Which library: AGMM_LIBRARY when it is set (and nothing else: a wrong path is an error, not a
fallback); else the one inside this package (`pip install ./python` builds it, or copies the one
AGMM_LIBRARY named at install time, into agmm/lib/); else, when running from the source tree,
../build/libagmm.so next to python/; else the system's libagmm.so.0.<minor> (`make install`).
Before a CUDA build is loaded, _deps finds its NCCL and cuBLASLt the way PyTorch finds its own.
Loading is lazy, at the first call that needs the library, so that `import agmm.torch` has loaded
torch (and its NCCL) before libagmm.so asks the dynamic loader for libnccl.so.2.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import math
import numbers
import operator
import os
import re
import threading

from . import _deps

# The header this binding mirrors: include/agmm.h, AGMM_VERSION_MAJOR/MINOR. A library of another
# major.minor may lay its structs out differently, so it is refused.
ABI_MAJOR, ABI_MINOR = 0, 2
UNIQUE_ID_BYTES = 256
MAX_RANKS = 64
MAX_TIMEOUT_S = 86400.0         # the longest wait for a peer a world allows (include/agmm.h)
C_INT = (-2**31, 2**31 - 1)     # the ranges of the C types that Python ints are passed as
C_INT64 = (-2**63, 2**63 - 1)

SUCCESS, INVALID_ARG, UNSUPPORTED, NO_MEMORY, CUDA, NCCL, CUBLAS, TIMEOUT, VERSION, INTERNAL = range(10)
OP_AG_MATMUL, OP_ALL_REDUCE, OP_MATMUL_REDUCE_SCATTER, OP_MATMUL_ALL_REDUCE, OP_ALL_REDUCE_RMSNORM = 0, 1, 2, 3, 4
DTYPE_BF16, DTYPE_F32 = 0, 1
LAYOUT_COL_MAJOR, LAYOUT_ROW_MAJOR = 0, 1
WORLD_KINDS = {"auto": 0, "cpu": 1, "gpu": 2, "emulated": 3}
WORLD_KIND_NAMES = {v: k for k, v in WORLD_KINDS.items()}
OPS = {"ag_matmul": OP_AG_MATMUL, "all_reduce": OP_ALL_REDUCE, "matmul_reduce_scatter": OP_MATMUL_REDUCE_SCATTER,
       "matmul_all_reduce": OP_MATMUL_ALL_REDUCE, "all_reduce_rmsnorm": OP_ALL_REDUCE_RMSNORM}


# ---- exceptions -------------------------------------------------------------------------------

class LibraryError(OSError):
    """libagmm.so could not be found or loaded; the message lists every place tried and why."""


class Error(RuntimeError):
    """A call into libagmm failed. `status` is the agmm_status value, `status_name` its text
    (agmm_status_str), `detail` the library's message (agmm_last_error)."""

    def __init__(self, message, status=INTERNAL, status_name="", detail=""):
        super().__init__(message)
        self.status = status
        # An error this package raises itself (a peer that never reached the ranks' check) has no
        # library detail: its status's name and its message stand in.
        self.status_name = status_name or (status_str(status) if _loaded is not None else "")
        self.detail = detail or message


class Unsupported(Error):
    """AGMM_ERR_UNSUPPORTED: valid, but this backend, world or build cannot do it."""


class OutOfMemory(Error):
    """AGMM_ERR_NO_MEMORY."""


class CudaError(Error):
    """AGMM_ERR_CUDA, AGMM_ERR_NCCL or AGMM_ERR_CUBLAS."""


class Timeout(Error):
    """AGMM_ERR_TIMEOUT, or a peer that never reached the same call: a bounded wait expired. The
    ranks are out of step from then on; finalize (or leave the world's run) and start again."""


class VersionMismatch(Error):
    """AGMM_ERR_VERSION: NCCL's headers and library differ."""


_STATUS_CLASS = {UNSUPPORTED: Unsupported, NO_MEMORY: OutOfMemory, CUDA: CudaError, NCCL: CudaError,
                 CUBLAS: CudaError, TIMEOUT: Timeout, VERSION: VersionMismatch}


_LOCATION = re.compile(r"^([\w./-]+\.(?:c|cu|h):\d+): ")


def _strip_location(detail):
    """'validate.c:42: K=100 is ...' -> ('K=100 is ...', 'validate.c:42')."""
    m = _LOCATION.match(detail)
    return (detail[m.end():], m.group(1)) if m else (detail, "")


def raise_status(status, detail, what, arg=None):
    """Raises the exception for a failed call. `what` names the call ("ag_matmul"); `arg` names
    the caller's argument an INVALID_ARG is about (a string, or a callable from the library's
    message to one). INVALID_ARG becomes ValueError; every other status an Error subclass."""
    text, where = _strip_location(detail or "")
    if text.startswith(f"{what}: "):   # the library named the operation too: once is enough
        text = text[len(what) + 2:]
    suffix = f" [{where}]" if where else ""
    if status == INVALID_ARG:
        name = arg(text) if callable(arg) else arg
        prefix = f"{what}: {name}: " if name else f"{what}: "
        raise ValueError(f"{prefix}{text or 'invalid argument'}{suffix}")
    name = status_str(status)
    cls = _STATUS_CLASS.get(status, Error)
    raise cls(f"{what}: {name}: {text or '(no detail from the library)'}{suffix}", status, name, detail)


# ---- structs of include/agmm.h (reserved tails are zero: ctypes zero-initialises) ---------------

class WorldConfig(ctypes.Structure):
    _fields_ = [("kind", ctypes.c_int), ("nranks", ctypes.c_int), ("timeout_s", ctypes.c_double),
                ("allow_nvls", ctypes.c_int), ("reserved", ctypes.c_int32 * 11)]


class UniqueId(ctypes.Structure):
    _fields_ = [("bytes", ctypes.c_ubyte * UNIQUE_ID_BYTES)]


class JoinConfig(ctypes.Structure):
    _fields_ = [("kind", ctypes.c_int), ("rank", ctypes.c_int), ("nranks", ctypes.c_int),
                ("device", ctypes.c_int), ("id", ctypes.POINTER(UniqueId)), ("nccl_comm", ctypes.c_void_p),
                ("timeout_s", ctypes.c_double), ("allow_nvls", ctypes.c_int), ("multi_host", ctypes.c_int),
                ("reserved", ctypes.c_int32 * 9)]


class AgMatmulDesc(ctypes.Structure):
    _fields_ = [("m", ctypes.c_int64), ("n", ctypes.c_int64), ("k", ctypes.c_int64), ("b_layout", ctypes.c_int),
                ("splits", ctypes.c_int), ("backend", ctypes.c_char_p), ("reserved", ctypes.c_int64 * 8)]


class AgMatmulIo(ctypes.Structure):
    _fields_ = [("b", ctypes.c_void_p), ("a_gathered", ctypes.c_void_p), ("c", ctypes.c_void_p),
                ("input", ctypes.c_void_p), ("reserved", ctypes.c_void_p * 4)]


class AllReduceDesc(ctypes.Structure):
    _fields_ = [("n", ctypes.c_int64), ("dtype", ctypes.c_int), ("backend", ctypes.c_char_p),
                ("reserved", ctypes.c_int64 * 8)]


class AllReduceIo(ctypes.Structure):
    _fields_ = [("out", ctypes.c_void_p), ("input", ctypes.c_void_p), ("reserved", ctypes.c_void_p * 6)]


class MatmulReduceDesc(ctypes.Structure):
    """agmm_matmul_reduce_scatter_desc and agmm_matmul_all_reduce_desc (the same fields)."""
    _fields_ = [("m", ctypes.c_int64), ("n", ctypes.c_int64), ("k", ctypes.c_int64), ("b_layout", ctypes.c_int),
                ("backend", ctypes.c_char_p), ("reserved", ctypes.c_int64 * 8)]


class MatmulReduceIo(ctypes.Structure):
    """agmm_matmul_reduce_scatter_io (out) and agmm_matmul_all_reduce_io (c): the same layout."""
    _fields_ = [("a", ctypes.c_void_p), ("b", ctypes.c_void_p), ("out", ctypes.c_void_p),
                ("reserved", ctypes.c_void_p * 5)]
class AllReduceRmsnormDesc(ctypes.Structure):
    _fields_ = [("tokens", ctypes.c_int64), ("hidden", ctypes.c_int64), ("eps", ctypes.c_double),
                ("backend", ctypes.c_char_p), ("reserved", ctypes.c_int64 * 8)]


class AllReduceRmsnormIo(ctypes.Structure):
    _fields_ = [("y", ctypes.c_void_p), ("residual_out", ctypes.c_void_p), ("gamma", ctypes.c_void_p),
                ("bias", ctypes.c_void_p), ("residual", ctypes.c_void_p), ("input", ctypes.c_void_p),
                ("reserved", ctypes.c_void_p * 4)]


# agmm_rank_fn: agmm_status (*)(agmm_ctx *ctx, void *arg). ctypes takes the GIL to run it.
RANK_FN = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p)

_P = ctypes.c_void_p
_PROTOTYPES = {
    "agmm_status_str": (ctypes.c_char_p, [ctypes.c_int]),
    "agmm_version": (ctypes.c_int, []),
    "agmm_op_name": (ctypes.c_char_p, [ctypes.c_int]),
    "agmm_world_create": (ctypes.c_int, [ctypes.POINTER(_P), ctypes.POINTER(WorldConfig), ctypes.c_char_p,
                                         ctypes.c_size_t]),
    "agmm_world_destroy": (None, [_P]),
    "agmm_world_kind_of": (ctypes.c_int, [_P]),
    "agmm_world_nranks": (ctypes.c_int, [_P]),
    "agmm_world_local_ranks": (ctypes.c_int, [_P]),
    "agmm_world_first_rank": (ctypes.c_int, [_P]),
    "agmm_world_describe": (ctypes.c_char_p, [_P]),
    "agmm_world_default_timeout_s": (ctypes.c_double, []),
    "agmm_unique_id_create": (ctypes.c_int, [ctypes.c_int, ctypes.POINTER(UniqueId)]),
    "agmm_world_join": (ctypes.c_int, [ctypes.POINTER(_P), ctypes.POINTER(JoinConfig), ctypes.c_char_p,
                                       ctypes.c_size_t]),
    "agmm_ctx_create": (ctypes.c_int, [ctypes.POINTER(_P), _P, ctypes.c_int]),
    "agmm_ctx_destroy": (None, [_P]),
    "agmm_ctx_rank": (ctypes.c_int, [_P]),
    "agmm_ctx_device": (ctypes.c_int, [_P]),
    "agmm_last_error": (ctypes.c_char_p, [_P]),
    "agmm_ctx_sync": (ctypes.c_int, [_P]),
    "agmm_world_run": (ctypes.c_int, [_P, RANK_FN, _P]),
    "agmm_backend_name": (ctypes.c_char_p, [ctypes.c_int, ctypes.c_int]),
    "agmm_backend_summary": (ctypes.c_char_p, [ctypes.c_int, ctypes.c_char_p]),
    "agmm_backend_available": (ctypes.c_int, [_P, ctypes.c_int, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_size_t]),
    "agmm_plan_ag_matmul": (ctypes.c_int, [ctypes.POINTER(_P), _P, ctypes.POINTER(AgMatmulDesc)]),
    "agmm_plan_all_reduce": (ctypes.c_int, [ctypes.POINTER(_P), _P, ctypes.POINTER(AllReduceDesc)]),
    "agmm_plan_destroy": (None, [_P]),
    "agmm_plan_backend": (ctypes.c_char_p, [_P]),
    "agmm_plan_input": (_P, [_P]),
    "agmm_symmetric_alloc": (ctypes.c_int, [_P, ctypes.c_size_t, ctypes.POINTER(_P)]),
    "agmm_symmetric_free": (None, [_P, _P]),
    "agmm_ag_matmul": (ctypes.c_int, [_P, ctypes.POINTER(AgMatmulIo), _P]),
    "agmm_all_reduce": (ctypes.c_int, [_P, ctypes.POINTER(AllReduceIo), _P]),
    "agmm_matmul_reduce_scatter_rows": (ctypes.c_int64, [ctypes.c_int64, ctypes.c_int, ctypes.c_int,
                                                         ctypes.POINTER(ctypes.c_int64)]),
    "agmm_plan_matmul_reduce_scatter": (ctypes.c_int, [ctypes.POINTER(_P), _P, ctypes.POINTER(MatmulReduceDesc)]),
    "agmm_plan_matmul_all_reduce": (ctypes.c_int, [ctypes.POINTER(_P), _P, ctypes.POINTER(MatmulReduceDesc)]),
    "agmm_matmul_reduce_scatter": (ctypes.c_int, [_P, ctypes.POINTER(MatmulReduceIo), _P]),
    "agmm_matmul_all_reduce": (ctypes.c_int, [_P, ctypes.POINTER(MatmulReduceIo), _P]),
    "agmm_plan_all_reduce_rmsnorm": (ctypes.c_int, [ctypes.POINTER(_P), _P, ctypes.POINTER(AllReduceRmsnormDesc)]),
    "agmm_all_reduce_rmsnorm": (ctypes.c_int, [_P, ctypes.POINTER(AllReduceRmsnormIo), _P]),
}


# ---- arguments passed to C: ctypes keeps only the low bits of an int too large for its C type ----

def int_arg(what, name, value, c_range=C_INT):
    """value as a Python int that fits the C type whose range is c_range. bool and non-integers
    (numpy's integers are integers) are a TypeError, values outside the range a ValueError."""
    if isinstance(value, bool):
        raise TypeError(f"{what}: {name}: bool; want an int")
    try:
        v = operator.index(value)
    except TypeError:
        raise TypeError(f"{what}: {name}: {type(value).__name__}; want an int") from None
    lo, hi = c_range
    if not lo <= v <= hi:
        ctype = "int" if c_range == C_INT else "int64_t"
        raise ValueError(f"{what}: {name}: {name}={v} does not fit the library's {ctype} ({lo}..{hi})")
    return v


def timeout_arg(what, value):
    """timeout_s as the library takes it: 0 (its default) or a finite number of seconds up to a day."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{what}: timeout_s: {type(value).__name__}; want a number of seconds")
    v = float(value)
    if not (math.isfinite(v) and 0 <= v <= MAX_TIMEOUT_S):
        raise ValueError(f"{what}: timeout_s: timeout_s={value!r}: want 0 (the library's default: AGMM_TIMEOUT_S, "
                         f"else 5 s) or a number of seconds up to {MAX_TIMEOUT_S:g}")
    return v


def reduce_scatter_rows(m, nranks, rank):
    """(first row, rows) of S that `rank` gets from matmul_reduce_scatter (the library's split:
    blocks of ceil(M/W) rows in rank order, the last ranks short or empty)."""
    what = "reduce_scatter_rows"
    m = int_arg(what, "M", m, C_INT64)
    nranks = int_arg(what, "nranks", nranks)
    rank = int_arg(what, "rank", rank)
    if not 1 <= nranks <= MAX_RANKS:
        raise ValueError(f"{what}: nranks: nranks={nranks}: want 1..{MAX_RANKS}")
    if not 0 <= rank < nranks:
        raise ValueError(f"{what}: rank: rank={rank}: want 0..{nranks - 1} (nranks={nranks})")
    first = ctypes.c_int64()
    rows = lib().agmm_matmul_reduce_scatter_rows(m, nranks, rank, ctypes.byref(first))
    if rows < 0:    # nranks and rank are valid: the library refuses M (include/agmm.h has its range)
        raise ValueError(f"{what}: M: M={m}: want 1..2^40 rows (the most a descriptor allows)")
    return first.value, rows


# ---- finding and loading ------------------------------------------------------------------------

_lock = threading.Lock()
_loaded = None        # (ctypes.CDLL, path, why)


def _candidates():
    """(path, why) in the order they are tried."""
    env = os.environ.get("AGMM_LIBRARY")
    if env:
        return [(env, "AGMM_LIBRARY")]
    out = []
    here = os.path.dirname(os.path.abspath(__file__))
    try:
        from . import _build_info
        out.append((os.path.join(here, _build_info.LIBRARY), f"inside this package ({_build_info.ORIGIN})"))
    except ImportError:
        pass
    source_tree = os.path.normpath(os.path.join(here, "..", "..", "build", "libagmm.so"))
    if os.path.exists(os.path.join(here, "..", "pyproject.toml")):
        out.append((source_tree, "the repository's build/ next to this source tree"))
    soname = f"libagmm.so.{ABI_MAJOR}.{ABI_MINOR}"
    out.append((ctypes.util.find_library("agmm") or soname, "the system's dynamic loader"))
    return out


def _open(path):
    _deps.prepare(path)
    lib = ctypes.CDLL(path)
    for name, (restype, argtypes) in _PROTOTYPES.items():
        fn = getattr(lib, name)     # AttributeError: a library without this call
        fn.restype, fn.argtypes = restype, argtypes
    v = lib.agmm_version()
    major, minor, patch = v // 10000, v // 100 % 100, v % 100
    if (major, minor) != (ABI_MAJOR, ABI_MINOR):
        raise OSError(f"it is version {major}.{minor}.{patch}; this package mirrors agmm.h "
                      f"{ABI_MAJOR}.{ABI_MINOR} (struct layouts differ between versions)")
    return lib


def lib():
    """The loaded library (loads it on first use). Raises LibraryError naming every candidate."""
    global _loaded
    if _loaded is not None:
        return _loaded[0]
    with _lock:
        if _loaded is None:
            tried = []
            for path, why in _candidates():
                try:
                    _loaded = (_open(path), path, why)
                    break
                except (OSError, AttributeError) as e:
                    tried.append(f"  {path} ({why}): {e}")
            else:
                raise LibraryError("agmm: could not load libagmm.so; tried:\n" + "\n".join(tried) +
                                   "\nInstall the package with `pip install ./python` from the repository (it builds "
                                   "the library into the package), or build it with `make` and set "
                                   "AGMM_LIBRARY=/path/to/libagmm.so")
    return _loaded[0]


def library_path():
    """(path, why): the libagmm.so this process loaded (loading it if needed) and why that one."""
    lib()
    return _loaded[1], _loaded[2]


def status_str(status):
    return lib().agmm_status_str(status).decode()


def text(p):
    return p.decode(errors="replace") if p else ""
