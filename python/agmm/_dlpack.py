"""Device memory that libagmm owns, seen as a torch tensor, through a DLPack capsule made with
ctypes (no numpy needed, unlike __cuda_array_interface__). The tensor does not own the memory:
the library frees it (agmm_symmetric_free, agmm_plan_destroy), collectively. What the consumer's
deleter tells us is when the last tensor over it died, which `live` reports.
"""
import ctypes
import itertools
import threading

_KDL_DEVICE = {"cpu": 1, "cuda": 2}


class _Device(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class _DataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class _Tensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("device", _Device), ("ndim", ctypes.c_int32), ("dtype", _DataType),
                ("shape", ctypes.POINTER(ctypes.c_int64)), ("strides", ctypes.POINTER(ctypes.c_int64)),
                ("byte_offset", ctypes.c_uint64)]


class _Managed(ctypes.Structure):
    pass


_DELETER = ctypes.CFUNCTYPE(None, ctypes.POINTER(_Managed))
_Managed._fields_ = [("dl_tensor", _Tensor), ("manager_ctx", ctypes.c_void_p), ("deleter", _DELETER)]

_capsule_new = ctypes.pythonapi.PyCapsule_New
_capsule_new.restype = ctypes.py_object
_capsule_new.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]
_CAPSULE_NAME = ctypes.c_char_p(b"dltensor")    # the capsule keeps this pointer, not a copy

_keys = itertools.count(1)
_lock = threading.Lock()
_alive = {}       # key -> (managed struct, shape array, strides array, base pointer)


def _release(managed):
    key = managed.contents.manager_ctx
    with _lock:
        _alive.pop(key, None)


_release_fn = _DELETER(_release)


def live(ptr):
    """How many tensors made by `tensor` over the allocation at `ptr` are still alive."""
    with _lock:
        return sum(1 for v in _alive.values() if v[3] == ptr)


def tensor(torch, ptr, shape, dtype, device, base=None):
    """A torch tensor over `ptr` (contiguous, `shape`, `dtype`) on `device` (a torch.device, cuda
    or cpu). `base` is the allocation it belongs to, for `live` (default: ptr)."""
    code_bits = {torch.bfloat16: (4, 16), torch.float16: (2, 16), torch.float32: (2, 32), torch.float64: (2, 64),
                 torch.uint8: (1, 8), torch.int8: (0, 8), torch.int16: (0, 16), torch.int32: (0, 32),
                 torch.int64: (0, 64)}
    if dtype not in code_bits:
        raise TypeError(f"dtype: {dtype} has no DLPack code here; use one of {', '.join(map(str, code_bits))}")
    ndim = len(shape)
    shape_arr = (ctypes.c_int64 * max(ndim, 1))(*shape)
    strides = []
    step = 1
    for d in reversed(shape):
        strides.append(step)
        step *= d
    strides_arr = (ctypes.c_int64 * max(ndim, 1))(*reversed(strides))
    code, bits = code_bits[dtype]
    managed = _Managed()
    where = _Device(_KDL_DEVICE[device.type], device.index or 0)
    managed.dl_tensor = _Tensor(ptr, where, ndim, _DataType(code, bits, 1),
                                shape_arr, strides_arr, 0)
    key = next(_keys)
    managed.manager_ctx = key
    managed.deleter = _release_fn
    with _lock:
        _alive[key] = (managed, shape_arr, strides_arr, ptr if base is None else base)
    capsule = _capsule_new(ctypes.addressof(managed), _CAPSULE_NAME, None)
    try:
        return torch.utils.dlpack.from_dlpack(capsule)
    except BaseException:
        with _lock:
            _alive.pop(key, None)     # never consumed: no deleter will come
        raise
