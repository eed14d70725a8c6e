"""The PEP 517 build backend of the agmm Python package (pyproject.toml names it).

`pip install ./python` and `pip wheel ./python` make a wheel holding the package, libagmm.so
(agmm/lib/) and its header (agmm/include/agmm.h), tagged for this platform: it installs on another
machine of the same kind with no checkout. The library:

- AGMM_LIBRARY=/path/libagmm.so: that one, copied in as it is;
- else built here by the repository's make, quietly, in a temporary folder outside the source tree
  (AGMM_BUILD_DIR=<dir> keeps one for the next build); the log is kept when the build fails.
  CUDA: AGMM_CUDA=1 requires it, AGMM_CUDA=0 leaves it out; unset, nvcc decides ($NVCC, PATH,
  $CUDA_HOME/bin, /usr/local/cuda/bin): without one the CPU library is built and pip's line says
  so (agmm-0.2.0+cpu, against agmm-0.2.0+cu13). NCCL of a CUDA build: NCCL_HOME when set; else the
  nvidia NCCL wheel of the Python running pip, when it has headers: the package loads that NCCL
  first at run time (agmm/_deps.py), and the library must match the headers it was built with;
  else the CUDA toolkit's or the system's (the Makefile's default).

A missing tool (make, a C compiler, nvcc's host C++ compiler, NCCL or cuBLASLt headers) is an
error naming it. Written here rather than taken from setuptools: its work is one make call and a
zip, and `requires = []` lets `pip install --no-index ./python` work where nothing can be
downloaded (the GPU machines reach no package index; a fresh venv of Python 3.12 has no setuptools).
"""
import base64
import datetime
import hashlib
import importlib.util
import io
import os
import re
import shlex
import shutil
import subprocess
import sys
import sysconfig
import tarfile
import tempfile
import zipfile

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))     # python/
PACKAGE = os.path.join(HERE, "agmm")
NAME = "agmm"
# The C sources an sdist carries (under csrc/) so that it builds like the checkout.
SOURCES = ("Makefile", "bench/lab.mk", "include", "src")


class BuildError(RuntimeError):
    """Something the build needs is missing or failed; the message says what and what to do."""


def _elf():
    """agmm/_elf.py, loaded by its path (importing the package here would be importing the thing
    being built)."""
    spec = importlib.util.spec_from_file_location("agmm_build_elf", os.path.join(PACKAGE, "_elf.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _version():
    with open(os.path.join(PACKAGE, "__init__.py")) as f:
        return re.search(r'^__version__ = "([^"]+)"', f.read(), re.M).group(1)


def _metadata(version):
    return (f"Metadata-Version: 2.1\nName: {NAME}\nVersion: {version}\n"
            "Summary: all-gather matmul and all-reduce for tensor-parallel models (ctypes over libagmm.so)\n"
            "Requires-Python: >=3.8\nProvides-Extra: numpy\nRequires-Dist: numpy; extra == \"numpy\"\n"
            "Provides-Extra: torch\nRequires-Dist: torch; extra == \"torch\"\n")


def _source():
    """The C sources: csrc/ in an unpacked sdist, else the repository python/ sits in."""
    for root in (os.path.join(HERE, "csrc"), os.path.dirname(HERE)):
        if all(os.path.exists(os.path.join(root, p)) for p in ("Makefile", "include/agmm.h", "src")):
            return root
    raise BuildError(f"agmm: no C sources next to {HERE} (neither ../Makefile, ../include, ../src of a checkout nor "
                     "csrc/ of an sdist): build from the repository (`pip install ./python` there), or give a "
                     "built library with AGMM_LIBRARY=/path/to/libagmm.so")


# ---- what to build with ---------------------------------------------------------------------------

def find_nvcc(environ, homes=("/usr/local/cuda",)):
    """(path of nvcc or None, the places looked)."""
    looked, candidates = [], []
    if environ.get("NVCC"):
        candidates.append(("$NVCC", environ["NVCC"]))
    candidates.append(("PATH", shutil.which("nvcc", path=environ.get("PATH", ""))))
    for var in ("CUDA_HOME", "CUDA_PATH"):
        if environ.get(var):
            candidates.append((f"${var}/bin", os.path.join(environ[var], "bin", "nvcc")))
    candidates += [(f"{home}/bin", os.path.join(home, "bin", "nvcc")) for home in homes]
    for where, path in candidates:
        looked.append(where)
        if path and os.path.isfile(path) and os.access(path, os.X_OK):
            return path, looked
    return None, looked


def _nccl_wheel(environ):
    """The nvidia NCCL wheel's folder (with include/ and lib/) of the Python running pip, or None.
    Asked of that Python as it starts outside pip's build isolation, which hides its site-packages
    from this process (PYTHONPATH and PYTHONNOUSERSITE are pip's, for the build)."""
    query = ("import importlib.util\ntry:\n    s = importlib.util.find_spec('nvidia.nccl')\nexcept ImportError:\n"
             "    s = None\nprint(list(s.submodule_search_locations)[0] if s and s.submodule_search_locations else '')\n")
    env = {k: v for k, v in environ.items() if k not in ("PYTHONPATH", "PYTHONNOUSERSITE")}
    try:
        out = subprocess.run([sys.executable, "-c", query], env=env, capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.SubprocessError):
        return None
    home = out.stdout.strip()
    need = ("include/nccl.h", "include/nccl_device.h", "lib/libnccl.so.2")
    return home if home and all(os.path.exists(os.path.join(home, p)) for p in need) else None


def _nccl_headers(cc, include_dirs, environ):
    """((major, minor, patch), path of the nccl.h) the C compiler finds first in include_dirs
    (then its own), or None when it finds none."""
    cmd = shlex.split(cc) + ["-E", "-dM", "-H"] + [f"-I{d}" for d in include_dirs] + ["-x", "c", "-"]
    out = subprocess.run(cmd, input="#include <nccl.h>\n", capture_output=True, text=True, env=environ)
    macros = dict(re.findall(r"#define NCCL_(MAJOR|MINOR|PATCH) (\d+)", out.stdout))
    if out.returncode != 0 or len(macros) != 3:
        return None
    header = next((line[2:].strip() for line in out.stderr.splitlines()
                   if line.startswith(". ") and line.rstrip().endswith("/nccl.h")), "nccl.h")
    return (int(macros["MAJOR"]), int(macros["MINOR"]), int(macros["PATCH"])), header


def plan(environ, nvcc_homes=("/usr/local/cuda",), log=None):
    """What `make` gets: {"vars": {name: value}, "cuda": bool, "origin": text, "nccl_headers":
    "2.28.9" or None}. BuildError naming whatever is missing."""
    log = log or (lambda text: print(f"agmm: {text}", file=sys.stderr))
    missing = []
    if not shutil.which("make", path=environ.get("PATH", "")):
        missing.append("make (GNU make; apt-get install make)")
    cc = environ.get("CC") or "cc"
    if not shutil.which(shlex.split(cc)[0], path=environ.get("PATH", "")):
        missing.append(f"a C compiler ('{cc}'; apt-get install gcc, or set CC)")
    want = environ.get("AGMM_CUDA", "")
    if want not in ("", "0", "1"):
        raise BuildError(f"agmm: AGMM_CUDA={want!r}: give 1 (CUDA required), 0 (the CPU library) or leave it unset "
                         "(CUDA when nvcc is found)")
    nvcc, looked = (None, []) if want == "0" else find_nvcc(environ, nvcc_homes)
    if want == "1" and nvcc is None:
        missing.append(f"nvcc, which AGMM_CUDA=1 asks for (looked at {', '.join(looked)}; set NVCC or CUDA_HOME)")
    if missing:
        raise BuildError("agmm: cannot build libagmm.so: missing " + "; ".join(missing))
    if nvcc is None:
        why = "AGMM_CUDA=0" if want == "0" else f"no nvcc (looked at {', '.join(looked)})"
        log(f"building the CPU-only library (make CUDA=0): {why}; the CPU world only. "
            "AGMM_CUDA=1 requires CUDA")
        return {"vars": {"CUDA": "0"}, "cuda": False, "nccl_headers": None, "origin": f"make CUDA=0: {why}"}
    return _cuda_plan(environ, nvcc, cc, log)


def _cuda_plan(environ, nvcc, cc, log):
    cuda_home = environ.get("CUDA_HOME") or os.path.dirname(os.path.dirname(os.path.realpath(nvcc)))
    release = re.search(r"release (\d+)\.(\d+)", subprocess.run([nvcc, "--version"], capture_output=True,
                                                                 text=True).stdout or "")
    cuda_text = f"CUDA {release.group(1)}.{release.group(2)}" if release else "CUDA (version unknown)"
    missing = []
    host = environ.get("NVCC_CCBIN") or "g++"
    if not shutil.which(host, path=environ.get("PATH", "")):
        missing.append(f"nvcc's host C++ compiler ('{host}'; apt-get install g++, or set NVCC_CCBIN)")
    if not os.path.exists(os.path.join(cuda_home, "include", "cublasLt.h")):
        missing.append(f"cuBLASLt's header ({cuda_home}/include/cublasLt.h: a CUDA toolkit with cuBLAS)")
    make_vars = {"CUDA": "1", "NVCC": nvcc, "CUDA_HOME": cuda_home}
    nccl_home, nccl_why = environ.get("NCCL_HOME"), "NCCL_HOME"
    if not nccl_home:
        nccl_home, nccl_why = _nccl_wheel(environ), "the nvidia NCCL wheel of the Python running pip"
    if nccl_home:
        make_vars["NCCL_HOME"] = nccl_home
    else:
        nccl_why = "the CUDA toolkit's or the system's"
    headers = _nccl_headers(cc, [os.path.join(nccl_home or cuda_home, "include"), os.path.join(cuda_home, "include")],
                            environ)
    if headers is None:
        missing.append(f"NCCL's headers (no nccl.h in {nccl_home or cuda_home}/include nor the system's: "
                       "pip install nvidia-nccl-cu13 into this Python, apt-get install libnccl-dev, or set NCCL_HOME)")
    elif headers[0] < (2, 28):
        missing.append(f"NCCL >= 2.28 (the device API): {headers[1]} is {'.'.join(map(str, headers[0]))}")
    if missing:
        raise BuildError(f"agmm: cannot build the CUDA library with {nvcc}: missing " + "; ".join(missing) +
                         ". AGMM_CUDA=0 builds the CPU-only library instead")
    version = ".".join(map(str, headers[0]))
    log(f"building the CUDA library (make CUDA=1) with {nvcc} ({cuda_text}), NCCL {version} headers of {nccl_why} "
        f"({headers[1]})")
    return {"vars": make_vars, "cuda": True, "nccl_headers": version,
            "origin": f"make CUDA=1 with {nvcc} ({cuda_text}); NCCL {version} headers of {nccl_why}, {headers[1]}"}


# ---- building -------------------------------------------------------------------------------------

def _build(environ):
    """Builds libagmm.so with the repository's make; returns (its path, the plan, a folder to
    remove afterwards or None)."""
    source = _source()
    what = plan(environ)
    keep = environ.get("AGMM_BUILD_DIR")
    build_dir = os.path.abspath(keep) if keep else tempfile.mkdtemp(prefix="agmm-build-")
    os.makedirs(build_dir, exist_ok=True)
    library = os.path.join(build_dir, "libagmm.so")
    jobs = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    cmd = (["make", "-C", source, "-s", f"-j{jobs}", f"BUILD={build_dir}"] +
           [f"{k}={v}" for k, v in what["vars"].items()] + [library])
    # Not a sub-make of whatever make may have started pip: its jobserver does not reach here.
    env = {k: v for k, v in environ.items() if k not in ("MAKEFLAGS", "MFLAGS", "MAKELEVEL")}
    log_path = os.path.join(build_dir, "build.log")
    with open(log_path, "w") as log:
        log.write("$ " + " ".join(shlex.quote(c) for c in cmd) + "\n")
        log.flush()
        rc = subprocess.run(cmd, stdout=log, stderr=subprocess.STDOUT, env=env).returncode
    if rc != 0 or not os.path.isfile(library):
        with open(log_path) as f:
            tail = f.read().splitlines()[-40:]
        raise BuildError(f"agmm: building libagmm.so failed (make exit {rc}); the end of {log_path}:\n" +
                         "\n".join(tail) + f"\n(the build folder {build_dir} is kept)")
    what["origin"] = f"built from {source} by {what['origin']}, {datetime.date.today().isoformat()}"
    return library, what, None if keep else build_dir


def _local_version(library):
    """'cu13' for a library linking CUDA 13's cuBLASLt, 'cpu' for one without NCCL: the wheel's
    version says which build it holds, on pip's 'Successfully installed' line."""
    needed, _ = _elf().dynamic(library)
    cublas = [re.search(r"libcublasLt\.so\.(\d+)", n) for n in needed]
    major = next((m.group(1) for m in cublas if m), None)
    return f"cu{major}" if major else ("cuda" if any(n.startswith("libnccl") for n in needed) else "cpu")


def _platform_tag():
    return re.sub(r"[-.]", "_", sysconfig.get_platform())


class _Wheel:
    def __init__(self, directory, version, tag, purelib):
        self.dist_info = f"{NAME}-{version}.dist-info"
        self.name = f"{NAME}-{version}-{tag}.whl"
        self.records, self.version, self.tag, self.purelib = [], version, tag, purelib
        self.zip = zipfile.ZipFile(os.path.join(directory, self.name), "w", zipfile.ZIP_DEFLATED)

    def add(self, arcname, data, mode=0o644):
        data = data.encode() if isinstance(data, str) else data
        info = zipfile.ZipInfo(arcname, date_time=(2020, 1, 1, 0, 0, 0))
        info.external_attr = (0o100000 | mode) << 16
        info.compress_type = zipfile.ZIP_DEFLATED
        self.zip.writestr(info, data)
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        self.records.append(f"{arcname},sha256={digest},{len(data)}")

    def close(self):
        self.add(f"{self.dist_info}/METADATA", _metadata(self.version))
        self.add(f"{self.dist_info}/WHEEL", f"Wheel-Version: 1.0\nGenerator: agmm_build\n"
                                            f"Root-Is-Purelib: {str(self.purelib).lower()}\nTag: {self.tag}\n")
        self.add(f"{self.dist_info}/top_level.txt", f"{NAME}\n")
        record = f"{self.dist_info}/RECORD"
        self.zip.writestr(record, "\n".join(self.records + [f"{record},,"]) + "\n")
        self.zip.close()
        return self.name


def get_requires_for_build_wheel(config_settings=None):
    return []


def get_requires_for_build_editable(config_settings=None):
    return []


def get_requires_for_build_sdist(config_settings=None):
    return []


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    environ = dict(os.environ)
    given = environ.get("AGMM_LIBRARY")
    cleanup = None
    if given:
        library = os.path.realpath(given)
        if not os.path.isfile(library):
            raise BuildError(f"agmm: AGMM_LIBRARY={given}: no such file (give a built libagmm.so, or unset it and "
                             "the build makes one)")
        what = {"origin": f"copied from AGMM_LIBRARY={library}", "nccl_headers": None}
    else:
        library, what, cleanup = _build(environ)
    try:
        wheel = _Wheel(wheel_directory, f"{_version()}+{_local_version(library)}", f"py3-none-{_platform_tag()}",
                       purelib=False)
        for name in sorted(os.listdir(PACKAGE)):
            if name.endswith(".py") and name != "_build_info.py":
                with open(os.path.join(PACKAGE, name), "rb") as f:
                    wheel.add(f"{NAME}/{name}", f.read())
        with open(library, "rb") as f:
            wheel.add(f"{NAME}/lib/libagmm.so", f.read(), mode=0o755)
        try:
            with open(os.path.join(_source(), "include", "agmm.h"), "rb") as f:
                wheel.add(f"{NAME}/include/agmm.h", f.read())
        except BuildError:
            pass            # a given library and no sources: no header to ship
        wheel.add(f"{NAME}/_build_info.py",
                  '"""Written by python/build_backend/agmm_build.py when this wheel was built."""\n'
                  '# The library, relative to the package; how it came to be; the NCCL headers it was built with.\n'
                  f'LIBRARY = "lib/libagmm.so"\nORIGIN = {what["origin"]!r}\nNCCL_HEADERS = {what["nccl_headers"]!r}\n')
        return wheel.close()
    finally:
        if cleanup:
            shutil.rmtree(cleanup, ignore_errors=True)


def build_editable(wheel_directory, config_settings=None, metadata_directory=None):
    """`pip install -e ./python`: a .pth that puts python/ on sys.path; the package then finds the
    library next to the source tree (../build/libagmm.so, after `make`) or through AGMM_LIBRARY."""
    wheel = _Wheel(wheel_directory, _version(), "py3-none-any", purelib=True)
    wheel.add(f"{NAME}_editable.pth", HERE + "\n")
    return wheel.close()


def build_sdist(sdist_directory, config_settings=None):
    """The package and, under csrc/, the C sources its wheel is built from."""
    base = f"{NAME}-{_version()}"
    name = f"{base}.tar.gz"
    source = _source()

    def keep(info):
        skip = "__pycache__" in info.name or info.name.endswith("_build_info.py") or info.name.endswith((".o", ".d"))
        return None if skip else info

    with tarfile.open(os.path.join(sdist_directory, name), "w:gz") as tar:
        for entry in ("pyproject.toml", "build_backend", "agmm"):
            tar.add(os.path.join(HERE, entry), f"{base}/{entry}", filter=keep)
        for entry in SOURCES:
            tar.add(os.path.join(source, entry), f"{base}/csrc/{entry}", filter=keep)
        info = tarfile.TarInfo(f"{base}/PKG-INFO")
        data = _metadata(_version()).encode()
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    return name
