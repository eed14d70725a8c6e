"""agmm from Python: a thin ctypes layer over libagmm.so (all-gather matmul and all-reduce for
tensor-parallel models on NVLink GPUs).

    agmm.torch   the operations as torch ops inside a torch.distributed job (GPUs)
    agmm.numpy   the CPU world driven with numpy arrays (threads, or processes from a launcher)

This module itself needs neither torch nor numpy: it says which library it loaded (library_path),
what the library offers (backends, backend_summary) and defines the exceptions every level raises:
ValueError/TypeError for bad arguments (naming the argument), agmm.Error subclasses for the rest
(Unsupported, Timeout, OutOfMemory, CudaError, VersionMismatch), LibraryError when libagmm.so
cannot be loaded. docs/python.md has the whole story.
"""
from ._core import backend_names as backends, backend_summary
from ._lib import (CudaError, Error, LibraryError, OutOfMemory, Timeout, Unsupported, VersionMismatch,
                   library_path)

__version__ = "0.2.0"


def version():
    """The loaded library's version as (major, minor, patch)."""
    from ._lib import lib
    v = lib().agmm_version()
    return v // 10000, v // 100 % 100, v % 100


__all__ = ["backends", "backend_summary", "library_path", "version", "Error", "LibraryError", "Unsupported",
           "Timeout", "OutOfMemory", "CudaError", "VersionMismatch"]
