"""`python -m agmm [--world KIND]`: what this agmm is and what it finds here, for checking an install
and for bug reports (as `python -m torch.utils.collect_env` is for torch): the package's version,
the libagmm.so loaded and why that one, the NCCL and cuBLASLt it got and why, NCCL's version
against the headers the library was built with, the GPUs the CUDA driver sees, and the backends
with which of them a world of KIND runs (default cpu; gpu and emulated start NCCL or the GPUs).

It imports neither torch nor numpy: torch would load its own NCCL first and change the answer.
Exit status 1 when the library cannot be loaded, its NCCL differs from its headers (a GPU world
would refuse to start) or the world cannot be made; else 0.
"""
import argparse
import ctypes
import os
import platform
import sys

from . import __version__, _core, _deps, _lib

_ENV = ("AGMM_LIBRARY", "AGMM_LOG", "AGMM_TUNE", "AGMM_CHECK_RUNS", "CUDA_VISIBLE_DEVICES", "NCCL_NVLS_ENABLE",
        "LD_LIBRARY_PATH", "LD_PRELOAD")


def _installed(name):
    """The version pip installed of distribution `name`, or None (read from its metadata: nothing
    is imported)."""
    try:
        from importlib import metadata
        return metadata.version(name)
    except Exception:           # PackageNotFoundError, or metadata unreadable
        return None


def _devices():
    """(count or None, lines): the GPUs the CUDA driver sees, asked of libcuda.so.1 directly."""
    try:
        cuda = ctypes.CDLL("libcuda.so.1")
    except OSError as e:
        return None, [f"none: no CUDA driver ({e}); the CPU world only"]
    rc = cuda.cuInit(0)
    if rc != 0:
        text = ctypes.c_char_p()
        cuda.cuGetErrorString(rc, ctypes.byref(text))
        return None, [f"none: cuInit -> {rc} ({_lib.text(text.value)}); the CPU world only"]
    driver, count = ctypes.c_int(), ctypes.c_int()
    cuda.cuDriverGetVersion(ctypes.byref(driver))
    cuda.cuDeviceGetCount(ctypes.byref(count))
    lines = [f"{count.value} (CUDA driver API {driver.value // 1000}.{driver.value % 1000 // 10})"]
    for i in range(count.value):
        dev, major, minor, mem = ctypes.c_int(), ctypes.c_int(), ctypes.c_int(), ctypes.c_size_t()
        name = ctypes.create_string_buffer(256)
        cuda.cuDeviceGet(ctypes.byref(dev), i)
        cuda.cuDeviceGetName(name, len(name), dev)
        cuda.cuDeviceGetAttribute(ctypes.byref(major), 75, dev)    # CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR
        cuda.cuDeviceGetAttribute(ctypes.byref(minor), 76, dev)    # ..._MINOR
        cuda.cuDeviceTotalMem_v2(ctypes.byref(mem), dev)
        lines.append(f"  {i}: {_lib.text(name.value)}, sm_{major.value}{minor.value}, {mem.value / 2**30:.1f} GiB")
    return count.value, lines


def _nccl(lib_path):
    """(lines, ok): the NCCL the library got, why, and its version against the build's headers."""
    chosen = _deps.chosen()
    nccl = [s for s in chosen if s.startswith("libnccl")]
    if not nccl:
        return ["not used (a CPU-only build)"], True
    soname = nccl[0]
    version = _deps.nccl_version()
    headers = None
    try:
        from . import _build_info
        if os.path.realpath(lib_path) == os.path.realpath(os.path.join(os.path.dirname(__file__),
                                                                         _build_info.LIBRARY)):
            headers = _build_info.NCCL_HEADERS
    except ImportError:
        pass
    lines = [f"{version or '?'} from {_deps.loaded(soname) or '?'}", f"why: {chosen[soname][1]}"]
    ok = headers is None or headers == version
    if headers is None:
        lines.append("headers: not recorded for this library (the library checks them when a GPU world starts)")
    elif ok:
        lines.append(f"headers: {headers}, the same version (required: the device API reads NCCL's structs)")
    else:
        lines.append(f"headers: {headers}: MISMATCH: a GPU world will fail with AGMM_ERR_VERSION; load NCCL "
                     f"{headers} (LD_PRELOAD or LD_LIBRARY_PATH) or rebuild against {version}")
    return lines, ok


def _a(word):
    """The article before `word`: "an emulated world", "a cpu world"."""
    return "an" if word[0] in "aeiou" else "a"


def _backends(kind):
    """(lines, ok): every backend with its summary, and whether a world of `kind` runs it."""
    lib, w = _lib.lib(), max(len(op) for op in _lib.OPS)
    cfg = _lib.WorldConfig(kind=_lib.WORLD_KINDS[kind], nranks=2 if kind in ("cpu", "emulated") else 0)
    world, err = ctypes.c_void_p(), ctypes.create_string_buffer(1024)
    st = lib.agmm_world_create(ctypes.byref(world), ctypes.byref(cfg), err, len(err))
    if st != _lib.SUCCESS:
        lines = [f"{_a(kind)} {kind} world could not be made: {_lib.status_str(st)}: {_lib.text(err.value)}"]
        for op in _lib.OPS:
            lines += [f"  {op:<{w}} {name:<11} {_core.backend_summary(op, name)}" for name in _core.backend_names(op)]
        return lines, False
    try:
        lines = [f"in {_a(kind)} {kind} world: {_lib.text(lib.agmm_world_describe(world))}"]
        for op in _lib.OPS:
            for name, why in _core.backends_available(world, op).items():
                lines.append(f"  {op:<{w}} {name:<11} {'runs' if not why else 'no: ' + why}")
                lines.append(f"  {'':<{w}} {'':<11} {_core.backend_summary(op, name)}")
    finally:
        lib.agmm_world_destroy(world)
    return lines, True


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m agmm", description=__doc__.split("\n\n")[0])
    parser.add_argument("--world", choices=("cpu", "gpu", "emulated", "auto"), default="cpu",
                        help="the world whose backends are listed (default cpu; gpu starts NCCL on every visible GPU)")
    args = parser.parse_args(argv)
    out = []

    def section(title, lines):
        out.append(f"{title + ':':<10}{lines[0]}")
        out.extend(f"{'':<10}{line}" for line in lines[1:])

    installed = _installed("agmm")
    how = f"installed as agmm {installed}" if installed else "not installed: a source tree on sys.path"
    section("agmm", [f"{__version__} (package {os.path.dirname(os.path.abspath(__file__))}; {how})",
                     f"Python {platform.python_version()} ({sys.executable}), {platform.platform()}"])
    try:
        path, why = _lib.library_path()
    except _lib.LibraryError as e:
        print("\n".join(out))
        print(f"library:  NOT LOADED\n{e}")
        return 1
    major, minor, patch = (lambda v: (v // 10000, v // 100 % 100, v % 100))(_lib.lib().agmm_version())
    cublas = [s for s in _deps.chosen() if s.startswith("libcublasLt")]
    section("library", [path, f"why: {why}", f"version {major}.{minor}.{patch}, " +
                        ("CUDA build" if _deps.chosen() else "CPU-only build (the CPU world only)")])
    nccl_lines, nccl_ok = _nccl(path)
    section("NCCL", nccl_lines)
    if cublas:
        section("cuBLASLt", [f"{_deps.loaded(cublas[0]) or '?'}", f"why: {_deps.chosen()[cublas[0]][1]}"])
    section("devices", _devices()[1])
    backend_lines, world_ok = _backends(args.world)
    section("backends", backend_lines)
    torch = _installed("torch")
    section("others", [f"torch {torch} (not imported)" if torch else "torch: not installed",
                       f"numpy {_installed('numpy') or 'not installed'}"])
    section("env", [f"{name}={os.environ[name]}" for name in _ENV if name in os.environ] or ["(none of "
                                                                                              + ", ".join(_ENV) + ")"])
    print("\n".join(out))
    return 0 if nccl_ok and world_ok else 1


if __name__ == "__main__":
    sys.exit(main())
