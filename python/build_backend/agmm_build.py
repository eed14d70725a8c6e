"""The PEP 517 build backend of the agmm Python package (pyproject.toml names it).

The package is pure Python over libagmm.so, so a wheel is a zip of agmm/*.py, one generated module
(agmm/_build_info.py: the absolute path of the library to load) and the dist-info files. Written
here rather than taken from setuptools so that `pip install ./python` works where nothing can be
downloaded and setuptools is absent (a fresh venv, the GPU machines).

The library recorded: AGMM_LIBRARY if set, else <repository>/build/libagmm.so; it must exist.
"""
import base64
import hashlib
import io
import os
import re
import tarfile
import zipfile

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))     # python/
PACKAGE = os.path.join(HERE, "agmm")
NAME = "agmm"
TAG = "py3-none-any"


def _version():
    with open(os.path.join(PACKAGE, "__init__.py")) as f:
        return re.search(r'^__version__ = "([^"]+)"', f.read(), re.M).group(1)


def _metadata():
    return (f"Metadata-Version: 2.1\nName: {NAME}\nVersion: {_version()}\n"
            "Summary: all-gather matmul and all-reduce for tensor-parallel models (ctypes over libagmm.so)\n"
            "Requires-Python: >=3.8\nProvides-Extra: numpy\nRequires-Dist: numpy; extra == \"numpy\"\n"
            "Provides-Extra: torch\nRequires-Dist: torch; extra == \"torch\"\n")


def _library():
    path = os.environ.get("AGMM_LIBRARY") or os.path.join(os.path.dirname(HERE), "build", "libagmm.so")
    path = os.path.realpath(path)
    if not os.path.isfile(path):
        raise RuntimeError(f"agmm: no library at {path}: run `make` in the repository first (it builds "
                           "build/libagmm.so), or set AGMM_LIBRARY=/path/to/libagmm.so for the one to record")
    return path


class _Wheel:
    def __init__(self, directory, editable):
        self.version = _version()
        self.dist_info = f"{NAME}-{self.version}.dist-info"
        self.name = f"{NAME}-{self.version}-{TAG}.whl"
        self.path = os.path.join(directory, self.name)
        self.records = []
        self.zip = zipfile.ZipFile(self.path, "w", zipfile.ZIP_DEFLATED)
        self.editable = editable

    def add(self, arcname, data):
        data = data.encode() if isinstance(data, str) else data
        self.zip.writestr(arcname, data)
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        self.records.append(f"{arcname},sha256={digest},{len(data)}")

    def close(self):
        self.add(f"{self.dist_info}/METADATA", _metadata())
        self.add(f"{self.dist_info}/WHEEL", f"Wheel-Version: 1.0\nGenerator: agmm_build\nRoot-Is-Purelib: true\n"
                                            f"Tag: {TAG}\n")
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
    library = _library()
    wheel = _Wheel(wheel_directory, editable=False)
    for name in sorted(os.listdir(PACKAGE)):
        if name.endswith(".py") and name != "_build_info.py":
            with open(os.path.join(PACKAGE, name), "rb") as f:
                wheel.add(f"{NAME}/{name}", f.read())
    wheel.add(f"{NAME}/_build_info.py",
              '"""Written by python/build_backend/agmm_build.py when this package was built."""\n'
              f"LIBRARY = {library!r}\n")
    return wheel.close()


def build_editable(wheel_directory, config_settings=None, metadata_directory=None):
    """`pip install -e ./python`: a .pth that puts python/ on sys.path; the package then finds the
    library next to the source tree (../build/libagmm.so) or through AGMM_LIBRARY."""
    wheel = _Wheel(wheel_directory, editable=True)
    wheel.add(f"{NAME}_editable.pth", HERE + "\n")
    return wheel.close()


def build_sdist(sdist_directory, config_settings=None):
    base = f"{NAME}-{_version()}"
    name = f"{base}.tar.gz"

    def keep(info):
        return None if "__pycache__" in info.name or info.name.endswith("_build_info.py") else info

    with tarfile.open(os.path.join(sdist_directory, name), "w:gz") as tar:
        for entry in ("pyproject.toml", "build_backend", "agmm"):
            tar.add(os.path.join(HERE, entry), f"{base}/{entry}", filter=keep)
        info = tarfile.TarInfo(f"{base}/PKG-INFO")
        data = _metadata().encode()
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    return name
