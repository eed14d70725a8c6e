"""How a CUDA build's NCCL is found (agmm/_deps.py), with stand-ins compiled here: four copies of a
"libnccl.so.2" whose ncclGetVersion answers a different version each, and a "libagmm.so" that needs
it and has a RUNPATH. Each case runs in a fresh process (what is loaded cannot be unloaded) and
checks which copy the process got and the reason given: PyTorch's order, LD_PRELOAD (already
loaded) before LD_LIBRARY_PATH before the nvidia wheel on sys.path before the library's RUNPATH.
Needs only a C compiler, no GPU or NCCL."""
import os
import shutil
import subprocess
import sys

import pytest

import agmm
from agmm import _elf

PACKAGE_PARENT = os.path.dirname(os.path.dirname(os.path.abspath(agmm.__file__)))
# Where each stand-in NCCL lives, and the version its ncclGetVersion answers.
COPIES = {"preload": ("preload", 21201), "ld_library_path": ("ldpath", 21202),
          "wheel": ("site/nvidia/nccl/lib", 21203), "runpath": ("runpath", 21204)}


@pytest.fixture(scope="module")
def stand_ins(tmp_path_factory):
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        pytest.skip("SKIPPED LOUDLY: needs a C compiler to make the stand-in libraries")
    root = tmp_path_factory.mktemp("deps")
    for folder, code in COPIES.values():
        os.makedirs(root / folder, exist_ok=True)
        src = root / f"nccl_{code}.c"
        src.write_text(f"int ncclGetVersion(int *v) {{ *v = {code}; return 0; }}\n")
        subprocess.run([cc, "-shared", "-fPIC", "-Wl,-soname,libnccl.so.2", "-o", str(root / folder / "libnccl.so.2"),
                        str(src)], check=True)
    (root / "agmm.c").write_text("int ncclGetVersion(int *v);\nint agmm_stand_in(void) { int v; return ncclGetVersion(&v); }\n")
    library = root / "libagmm.so"
    subprocess.run([cc, "-shared", "-fPIC", "-o", str(library), str(root / "agmm.c"), f"-L{root / 'runpath'}",
                    "-l:libnccl.so.2", f"-Wl,--enable-new-dtags,-rpath,{root / 'runpath'}"], check=True)
    return root, library


def which_nccl(root, library, **env):
    """(file loaded, version, why) in a fresh process loading the stand-in libagmm.so. Wheels are
    looked for in the stand-in site/ only (when `wheel`), not along this Python's sys.path, which
    may hold PyTorch's real one."""
    wheels = [str(root / "site")] if env.pop("wheel", False) else []
    code = ("import ctypes, sys\nfrom agmm import _deps\n"
            f"why = _deps.prepare({str(library)!r}, path={wheels!r})['libnccl.so.2'][1]\nctypes.CDLL({str(library)!r})\n"
            "print(_deps.loaded('libnccl.so.2')); print(_deps.nccl_version()); print(why)\n")
    base = {k: v for k, v in os.environ.items() if k not in ("LD_LIBRARY_PATH", "LD_PRELOAD", "PYTHONPATH")}
    out = subprocess.run([sys.executable, "-c", code], env=dict(base, PYTHONPATH=PACKAGE_PARENT, **env),
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stdout + out.stderr
    return out.stdout.splitlines()


def version_text(code):
    return f"{code // 10000}.{code // 100 % 100}.{code % 100}"


def test_the_stand_in_needs_nccl_and_has_a_runpath(stand_ins):
    root, library = stand_ins
    needed, runpath = _elf.dynamic(str(library))
    assert "libnccl.so.2" in needed and runpath == [str(root / "runpath")]


@pytest.mark.parametrize("case", ["runpath", "wheel", "ld_library_path", "preload"])
def test_nccl_is_found_in_pytorchs_order(stand_ins, case):
    """Each case adds one place ahead of the ones before it: that place must win."""
    root, library = stand_ins
    env = {}
    order = ["runpath", "wheel", "ld_library_path", "preload"]
    upto = order[:order.index(case) + 1]
    if "wheel" in upto:
        env["wheel"] = True
    if "ld_library_path" in upto:
        env["LD_LIBRARY_PATH"] = str(root / COPIES["ld_library_path"][0])
    if "preload" in upto:
        env["LD_PRELOAD"] = str(root / COPIES["preload"][0] / "libnccl.so.2")
    path, version, why = which_nccl(root, library, **env)
    folder, code = COPIES[case]
    assert os.path.dirname(path) == str(root / folder), (case, path, why)
    assert version == version_text(code)
    expected = {"runpath": "the loader: libagmm.so's RUNPATH", "wheel": "the nvidia/nccl wheel on sys.path",
                "ld_library_path": "LD_LIBRARY_PATH", "preload": "already in this process"}[case]
    assert why.startswith(expected), why


def test_a_cpu_build_needs_nothing_from_the_wheels(stand_ins, tmp_path):
    cc = shutil.which("cc") or shutil.which("gcc")
    (tmp_path / "cpu.c").write_text("int agmm_cpu(void) { return 0; }\n")
    subprocess.run([cc, "-shared", "-fPIC", "-o", str(tmp_path / "libcpu.so"), str(tmp_path / "cpu.c")], check=True)
    from agmm import _deps
    assert _deps.needs(str(tmp_path / "libcpu.so")) == []
    assert _deps.needs(str(tmp_path / "cpu.c")) == []          # not ELF: nothing to find, the loader says the rest


def test_installed_nccl_comes_from_the_nvidia_wheel_when_there_is_one():
    """The real library: with PyTorch's NCCL wheel on sys.path (CI's second venv, the GPU machine)
    and neither LD_LIBRARY_PATH nor LD_PRELOAD naming an NCCL, a fresh process gets the wheel's."""
    from agmm import _deps
    path, _ = agmm.library_path()
    wheel = _deps.in_wheels("libnccl.so.2")
    if "libnccl.so.2" not in _deps.needs(path) or wheel is None:
        pytest.skip(f"SKIPPED LOUDLY: needs a CUDA build ({path}) and an nvidia NCCL wheel on sys.path ({wheel})")
    code = ("import agmm\nfrom agmm import _deps\nagmm.library_path()\n"
            "print(_deps.loaded('libnccl.so.2')); print(_deps.chosen()['libnccl.so.2'][1])\n")
    base = {k: v for k, v in os.environ.items() if k not in ("LD_LIBRARY_PATH", "LD_PRELOAD")}
    out = subprocess.run([sys.executable, "-c", code], env=base, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stdout + out.stderr
    loaded, why = out.stdout.splitlines()
    assert os.path.realpath(loaded) == os.path.realpath(wheel) and "nvidia/nccl wheel" in why, out.stdout
