"""The build backend (python/build_backend/agmm_build.py), from a checkout: what it says when a tool
is missing, the CPU-only fallback without nvcc, and a whole build: the sdist carries the C sources
and `pip wheel` of that sdist with AGMM_CUDA=0 gives a platform wheel holding a CPU-only
libagmm.so that an install outside any checkout loads. CI runs these from its clone; with the
tests copied out of the repository they skip, saying so."""
import importlib.util
import os
import shutil
import subprocess
import sys
import tarfile
import zipfile

import pytest

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
BACKEND = os.path.join(REPO, "python", "build_backend", "agmm_build.py")

if not os.path.exists(BACKEND):
    pytest.skip(f"SKIPPED LOUDLY: needs the repository's build backend ({BACKEND}): these tests run outside a checkout",
                allow_module_level=True)

spec = importlib.util.spec_from_file_location("agmm_build", BACKEND)
agmm_build = importlib.util.module_from_spec(spec)
spec.loader.exec_module(agmm_build)


@pytest.fixture
def tools(tmp_path):
    """A PATH holding make and cc and nothing else (no nvcc)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in ("make", "cc"):
        found = shutil.which(tool)
        if found is None:
            pytest.skip(f"SKIPPED LOUDLY: needs {tool}")
        os.symlink(found, bin_dir / tool)
    return str(bin_dir)


def plan(environ):
    said = []
    return agmm_build.plan(environ, nvcc_homes=(), log=said.append), said


def test_missing_make_and_compiler_are_named(tmp_path):
    with pytest.raises(agmm_build.BuildError, match=r"missing make \(GNU make.*; a C compiler \('cc'"):
        plan({"PATH": str(tmp_path)})
    with pytest.raises(agmm_build.BuildError, match=r"a C compiler \('no-such-cc -m64'; .*or set CC\)"):
        plan({"PATH": os.environ["PATH"], "CC": "no-such-cc -m64"})


def test_no_nvcc_builds_the_cpu_library_and_says_so(tools):
    what, said = plan({"PATH": tools})
    assert what["vars"] == {"CUDA": "0"} and not what["cuda"] and what["nccl_headers"] is None
    assert len(said) == 1 and said[0].startswith("building the CPU-only library (make CUDA=0): no nvcc (looked at PATH")
    what, said = plan({"PATH": tools, "AGMM_CUDA": "0", "NVCC": shutil.which("nvcc") or "/x/nvcc"})
    assert not what["cuda"] and "AGMM_CUDA=0" in said[0]


def test_cuda_required_without_nvcc_is_an_error(tools):
    with pytest.raises(agmm_build.BuildError, match=r"missing nvcc, which AGMM_CUDA=1 asks for \(looked at PATH"):
        plan({"PATH": tools, "AGMM_CUDA": "1", "CUDA_HOME": "/nonexistent"})
    with pytest.raises(agmm_build.BuildError, match=r"AGMM_CUDA='yes': give 1 .*, 0 .* or leave it unset"):
        plan({"PATH": tools, "AGMM_CUDA": "yes"})


def test_nvcc_is_found_beside_cuda_home(tools, tmp_path):
    fake = tmp_path / "cuda" / "bin"
    fake.mkdir(parents=True)
    (fake / "nvcc").write_text("#!/bin/sh\n")
    (fake / "nvcc").chmod(0o755)
    path, looked = agmm_build.find_nvcc({"PATH": tools, "CUDA_HOME": str(tmp_path / "cuda")}, homes=())
    assert path == str(fake / "nvcc") and looked == ["PATH", "$CUDA_HOME/bin"]


def test_sdist_then_a_cpu_wheel_outside_the_checkout(tmp_path):
    """The sdist holds the C sources; its wheel (AGMM_CUDA=0) is tagged for this platform, named
    +cpu, holds the library (no NCCL needed), agmm.h and how it was built, and loads when
    installed into a folder with no checkout anywhere near."""
    sdist = agmm_build.build_sdist(str(tmp_path))
    with tarfile.open(tmp_path / sdist) as tar:
        names = tar.getnames()
    base = sdist[:-len(".tar.gz")]
    for member in ("pyproject.toml", "build_backend/agmm_build.py", "agmm/_lib.py", "csrc/Makefile",
                   "csrc/bench/lab.mk", "csrc/include/agmm.h", "csrc/src/api/plan.c"):
        assert f"{base}/{member}" in names, member
    env = {k: v for k, v in os.environ.items() if k not in ("AGMM_LIBRARY", "AGMM_BUILD_DIR")}
    env["AGMM_CUDA"] = "0"
    wheels = tmp_path / "wheels"
    built = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-index", "--no-deps", "-w", str(wheels),
                            str(tmp_path / sdist)], env=env, capture_output=True, text=True, timeout=600)
    assert built.returncode == 0, built.stdout + built.stderr
    (wheel,) = os.listdir(wheels)
    assert wheel == f"{base}+cpu-py3-none-{agmm_build._platform_tag()}.whl"
    with zipfile.ZipFile(wheels / wheel) as z:
        names = z.namelist()
        info = z.read("agmm/_build_info.py").decode()
        z.extract("agmm/lib/libagmm.so", tmp_path / "x")
        assert z.read(f"{base}+cpu.dist-info/WHEEL").decode().count("Root-Is-Purelib: false") == 1
    assert "agmm/include/agmm.h" in names and "agmm/__main__.py" in names
    assert "NCCL_HEADERS = None" in info and "make CUDA=0: AGMM_CUDA=0" in info
    needed, _ = agmm_build._elf().dynamic(str(tmp_path / "x" / "agmm" / "lib" / "libagmm.so"))
    assert needed and not [n for n in needed if "nccl" in n or "cublas" in n], needed

    site = tmp_path / "site"
    installed = subprocess.run([sys.executable, "-m", "pip", "install", "--no-index", "--no-deps", "--target", str(site),
                                str(wheels / wheel)], env=env, capture_output=True, text=True, timeout=300)
    assert installed.returncode == 0, installed.stdout + installed.stderr
    code = "import agmm\nprint(*agmm.library_path(), sep='|')\nprint(agmm.backends('all_reduce'))\n"
    run_env = {k: v for k, v in env.items() if k != "PYTHONPATH"}
    out = subprocess.run([sys.executable, "-c", code], env=dict(run_env, PYTHONPATH=str(site)), cwd=str(tmp_path),
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stdout + out.stderr
    path, why = out.stdout.splitlines()[0].split("|")
    assert path == str(site / "agmm" / "lib" / "libagmm.so") and why.startswith("inside this package (built from ")
    assert "one_shot" in out.stdout
