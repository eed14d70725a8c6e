"""The binding itself: which library it loads and why, what it says when it cannot, the struct
layouts against agmm.h, `python -m agmm`, and installing with AGMM_LIBRARY (`pip install ./python`
shipping a given library). Runs from the checkout and from an installed package with the tests
copied elsewhere (CI moves the checkout away): what needs the repository skips, saying so."""
import hashlib
import os
import shutil
import subprocess
import sys
import textwrap

import pytest

import agmm
from agmm import _deps, _lib

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
PYTHON_DIR = os.path.join(REPO, "python")
PACKAGE_DIR = os.path.dirname(os.path.abspath(agmm.__file__))


def child_env(**extra):
    env = {k: v for k, v in os.environ.items() if k != "AGMM_LIBRARY"}
    env.update(extra)
    return env


def test_reports_which_library_and_why():
    path, why = agmm.library_path()
    assert os.path.exists(path) and why
    assert agmm.version()[:2] == (_lib.ABI_MAJOR, _lib.ABI_MINOR)


def test_a_wrong_agmm_library_is_an_error_naming_it(tmp_path):
    """AGMM_LIBRARY is taken alone: a bad one is reported, not silently replaced."""
    bogus = tmp_path / "libagmm.so"
    bogus.write_text("not a library")
    code = "import agmm\ntry:\n    agmm.backends('ag_matmul')\nexcept agmm.LibraryError as e:\n    print(e)\n"
    for path in (str(tmp_path / "missing.so"), str(bogus)):
        out = subprocess.run([sys.executable, "-c", code], env=child_env(AGMM_LIBRARY=path,
                             PYTHONPATH=os.path.dirname(os.path.dirname(agmm.__file__))),
                             capture_output=True, text=True, timeout=60)
        assert f"{path} (AGMM_LIBRARY)" in out.stdout, out.stdout + out.stderr
        assert "make" in out.stdout and "AGMM_LIBRARY=" in out.stdout


def test_structs_match_agmm_h(tmp_path):
    """Every field of the ctypes structs at the offset and size the C compiler gives it."""
    cc = shutil.which("cc") or shutil.which("gcc")
    # The header shipped with an installed package (the one its library was built from), else the checkout's.
    header = next((h for h in (os.path.join(PACKAGE_DIR, "include", "agmm.h"), os.path.join(REPO, "include", "agmm.h"))
                   if os.path.exists(h)), None)
    if cc is None or header is None:
        pytest.skip(f"SKIPPED LOUDLY: needs a C compiler ({cc}) and agmm.h, in the package or the repository ({header})")
    structs = {"agmm_world_config": _lib.WorldConfig, "agmm_unique_id": _lib.UniqueId,
               "agmm_join_config": _lib.JoinConfig, "agmm_ag_matmul_desc": _lib.AgMatmulDesc,
               "agmm_ag_matmul_io": _lib.AgMatmulIo, "agmm_all_reduce_desc": _lib.AllReduceDesc,
               "agmm_all_reduce_io": _lib.AllReduceIo, "agmm_all_reduce_rmsnorm_desc": _lib.AllReduceRmsnormDesc,
               "agmm_all_reduce_rmsnorm_io": _lib.AllReduceRmsnormIo}
    lines = ["#include <stddef.h>", "#include <stdio.h>", "#include \"agmm.h\"", "int main(void) {"]
    for c_name, cls in structs.items():
        lines.append(f'printf("{c_name} %zu\\n", sizeof({c_name}));')
        for field, _ in cls._fields_:
            lines.append(f'printf("{c_name}.{field} %zu %zu\\n", offsetof({c_name}, {field}), '
                         f"sizeof((({c_name} *)0)->{field}));")
    lines.append("return 0; }")
    src = tmp_path / "layout.c"
    src.write_text("\n".join(lines))
    exe = tmp_path / "layout"
    subprocess.run([cc, "-std=c11", f"-I{os.path.dirname(header)}", str(src), "-o", str(exe)], check=True)
    c_side = dict(line.split(" ", 1) for line in subprocess.check_output([str(exe)], text=True).splitlines())
    checked = 0
    for c_name, cls in structs.items():
        assert int(c_side[c_name]) == _lib.ctypes.sizeof(cls), c_name
        for field, _ in cls._fields_:
            desc = getattr(cls, field)
            assert c_side[f"{c_name}.{field}"] == f"{desc.offset} {desc.size}", f"{c_name}.{field}"
            checked += 1
    assert checked > 30


def test_backends_and_summaries():
    for op in _lib.OPS:                      # every operation the binding knows
        names = agmm.backends(op)
        assert names and "auto" not in names
        for name in names:
            assert agmm.backend_summary(op, name)


def test_pip_install_ships_the_given_library(tmp_path):
    """`AGMM_LIBRARY=... pip install ./python` offline, into a folder: the package holds a copy of
    that library and loads its own copy, saying so; the version says which build it is."""
    if not os.path.exists(os.path.join(PYTHON_DIR, "pyproject.toml")):
        pytest.skip(f"SKIPPED LOUDLY: needs the repository's python/ ({PYTHON_DIR}): these tests run outside a checkout")
    path, _ = agmm.library_path()
    target = tmp_path / "site"
    build = subprocess.run([sys.executable, "-m", "pip", "install", "--no-index", "--no-deps", "--target", str(target),
                            PYTHON_DIR], env=child_env(AGMM_LIBRARY=path), capture_output=True, text=True, timeout=300)
    if build.returncode != 0 and "No module named pip" in build.stderr:
        pytest.skip(f"SKIPPED LOUDLY: this Python has no pip: {build.stderr.strip()}")
    assert build.returncode == 0, build.stdout + build.stderr
    shipped = target / "agmm" / "lib" / "libagmm.so"
    digest = [hashlib.sha256(open(p, "rb").read()).hexdigest() for p in (path, shipped)]
    assert digest[0] == digest[1], "the package's copy differs from AGMM_LIBRARY's"
    build_kind = "cpu" if not _deps.needs(path) else "cu"
    assert [d for d in os.listdir(target) if d.startswith(f"agmm-{agmm.__version__}+{build_kind}")], os.listdir(target)
    code = textwrap.dedent("""
        import agmm
        print(agmm.__file__)
        print(*agmm.library_path(), sep="\\n")
    """)
    out = subprocess.run([sys.executable, "-c", code], env=child_env(PYTHONPATH=str(target)), cwd=str(tmp_path),
                         capture_output=True, text=True, timeout=60)
    lines = out.stdout.splitlines()
    assert out.returncode == 0 and len(lines) == 3, out.stdout + out.stderr
    assert lines[0].startswith(str(target))
    assert lines[1] == str(shipped)
    assert lines[2] == f"inside this package (copied from AGMM_LIBRARY={os.path.realpath(path)})"


def test_python_m_agmm_reports_library_nccl_devices_backends():
    """`python -m agmm`: the library this process loads and why, NCCL (or that a CPU build uses
    none), the devices, and every backend of every operation with whether the CPU world runs it."""
    out = subprocess.run([sys.executable, "-m", "agmm"], env=dict(os.environ, PYTHONPATH=os.path.dirname(PACKAGE_DIR)),
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stdout + out.stderr
    text = out.stdout
    path, why = agmm.library_path()
    assert f"library:  {path}\n" in text and f"why: {why}" in text, text
    assert f"agmm:     {agmm.__version__} " in text
    nccl = next(line for line in text.splitlines() if line.startswith("NCCL:"))
    if _deps.needs(path):
        assert "libnccl.so" in nccl and "why: " in text.split("NCCL:", 1)[1], text
    else:
        assert "not used (a CPU-only build)" in nccl
    assert "devices:  " in text and "backends: in a cpu world: " in text
    for op in _lib.OPS:
        for name in agmm.backends(op):
            assert any(line.split()[:2] == [op, name] for line in text.splitlines()), f"{op}/{name} missing:\n{text}"
