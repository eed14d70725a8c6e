"""NCCL and cuBLASLt for a CUDA build of libagmm.so, found the way PyTorch finds its own, before
the library is loaded; and which ones the process got (agmm.library_path's callers, `python -m
agmm`).

A CUDA build needs libnccl.so.2 and libcublasLt.so.<CUDA major> from the dynamic loader (the CUDA
runtime is linked in). A wheel's libagmm.so must find them where the toolkit it was built with does
not exist, and NCCL must be the version of the headers it was built with (the device API reads
structs the library fills; the library refuses a GPU world otherwise, AGMM_ERR_VERSION). For each
of the two names the library needs (its DT_NEEDED), the first of:

1. one already in this process (torch imported first loaded its NCCL; or LD_PRELOAD): the loader
   reuses a loaded library of the same soname, so nothing is left to choose;
2. a folder of LD_LIBRARY_PATH holding it: the loader searches those first, for torch too;
3. the nvidia wheel on sys.path that PyTorch depends on (nvidia/nccl/lib; nvidia/cu13/lib from
   CUDA 13, nvidia/cublas/lib before): loaded here by its path with RTLD_GLOBAL, so that when the
   loader resolves libagmm.so's DT_NEEDED by soname it takes this copy. Any sys.path entry counts:
   a venv over the system's site-packages keeps agmm and torch's wheels in different folders,
   where a RUNPATH of $ORIGIN/../nvidia/... would miss them, so the wheel carries none;
4. the loader's own search: libagmm.so's RUNPATH (the build's NCCL and CUDA toolkit folders), then
   the system's libraries.

That is PyTorch's order (its libraries' RUNPATH names the wheels, after LD_LIBRARY_PATH), so a
process that imports both gets one NCCL whichever comes first. `pip install ./python` builds
against the headers of that same wheel when the installing Python has it (build_backend), so
library and headers agree.
"""
import ctypes
import glob
import os
import sys

from . import _elf

# The sonames a CUDA build asks the loader for that PyTorch's nvidia wheels also ship, by prefix.
WHEEL_LIBS = {"libnccl.so": "NCCL", "libcublasLt.so": "cuBLASLt"}

_chosen = {}      # soname -> (path or None, why): what prepare() decided in this process


def needs(library):
    """The sonames of WHEEL_LIBS that `library` needs, in its order ([] for a CPU build, or a file
    this cannot read: the loader then reports what is missing)."""
    try:
        needed, _ = _elf.dynamic(library)
    except (OSError, ValueError, StopIteration, IndexError):
        return []
    return [name for name in needed if name.startswith(tuple(WHEEL_LIBS))]


def what(soname):
    """'NCCL' for libnccl.so.2, and so on."""
    return next(v for k, v in WHEEL_LIBS.items() if soname.startswith(k))


def in_process(soname):
    """Whether a library of this soname is loaded in this process already (asked of the loader
    without loading anything: RTLD_NOLOAD)."""
    try:
        ctypes.CDLL(soname, mode=os.RTLD_NOLOAD | os.RTLD_LAZY)
        return True
    except OSError:
        return False


def in_ld_library_path(soname, environ=None):
    """The first LD_LIBRARY_PATH folder's copy of soname, or None."""
    for folder in (os.environ if environ is None else environ).get("LD_LIBRARY_PATH", "").split(":"):
        if folder and os.path.isfile(os.path.join(folder, soname)):
            return os.path.join(folder, soname)
    return None


def in_wheels(soname, path=None):
    """The first nvidia/<package>/lib/<soname> along sys.path (or `path`), or None."""
    for entry in sys.path if path is None else path:
        if entry and os.path.isdir(os.path.join(entry, "nvidia")):
            hits = sorted(glob.glob(os.path.join(entry, "nvidia", "*", "lib", soname)))
            if hits:
                return hits[0]
    return None


def prepare(library, path=None):
    """Called just before loading `library`: decides where each library of WHEEL_LIBS it needs
    comes from (the order above; wheels looked for along `path`, default sys.path), loading a
    wheel's copy now where that is the choice. Returns {soname: (path or None, why)}; OSError when
    a wheel's copy does not load."""
    runpath = []
    try:
        runpath = _elf.dynamic(library)[1]
    except (OSError, ValueError, StopIteration, IndexError):
        pass
    out = {}
    for soname in needs(library):
        if in_process(soname):
            out[soname] = (None, "already in this process, loaded before libagmm.so (by torch, or LD_PRELOAD)")
            continue
        found = in_ld_library_path(soname)
        if found:
            out[soname] = (found, "LD_LIBRARY_PATH, which the loader searches first")
            continue
        found = in_wheels(soname, path)
        if found:
            try:
                ctypes.CDLL(found, mode=ctypes.RTLD_GLOBAL)
            except OSError as e:
                raise OSError(f"{what(soname)} of the nvidia wheel ({found}) does not load: {e}") from e
            package = os.path.basename(os.path.dirname(os.path.dirname(found)))
            out[soname] = (found, f"the nvidia/{package} wheel on sys.path (as PyTorch loads it), loaded first")
            continue
        out[soname] = (None, "the loader: libagmm.so's RUNPATH (" + (":".join(runpath) or "none") +
                       "), then the system's libraries (no nvidia wheel on sys.path holds it)")
    _chosen.update(out)
    return out


def loaded(soname):
    """The file this process has mapped for `soname` (libnccl.so.2 may be the file
    libnccl.so.2.28.3), or None."""
    try:
        with open("/proc/self/maps") as f:
            for line in f:
                path = line.split(None, 5)[-1].strip()
                name = os.path.basename(path)
                if name == soname or name.startswith(soname + "."):
                    return path
    except OSError:
        pass
    return None


def chosen():
    """{soname: (path or None, why)} as prepare() decided for the library this process loaded."""
    return dict(_chosen)


def nccl_version():
    """The loaded NCCL's version as "2.28.9" (ncclGetVersion; no GPU needed), or None when no NCCL
    is loaded."""
    try:
        nccl = ctypes.CDLL("libnccl.so.2", mode=os.RTLD_NOLOAD | os.RTLD_LAZY)
    except OSError:
        return None
    code = ctypes.c_int(0)
    if nccl.ncclGetVersion(ctypes.byref(code)) != 0:
        return None
    return f"{code.value // 10000}.{code.value // 100 % 100}.{code.value % 100}"
