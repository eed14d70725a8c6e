#!/usr/bin/env bash
# The self-contained wheel on the GPU machine (issue 24), in one call (a few minutes): a clean copy
# of this checkout is built into a wheel there (`pip wheel ./python`: CUDA with the machine's nvcc,
# NCCL headers of PyTorch's NCCL wheel when the Python sees it), installed into a venv over the
# system's site-packages (torch), and the copy deleted; then, from a folder far from any checkout,
# `python -m agmm`, `python -m agmm --world gpu` (NCCL started: the library's own check of NCCL
# against its headers) and `torchrun --nproc-per-node 1 -m pytest tests` on the tests copied out
# (as `python -m torch.distributed.run`, torchrun's module, with the venv's Python). Writes under
# $OUT: wheel_build.log, agmm_info.txt, agmm_info_gpu.txt, wheel_pytest.log; prints a summary last.
#
#   bench/wheel_check.sh
#
# Carry .whl/ with pytest's wheels where the machine's Python has no pytest (bench/torch_run.sh
# says how). Environment: OUT (default ./out), PYTEST_TIMEOUT (default 300 s). LD_LIBRARY_PATH is
# left as the machine has it: the point is which NCCL the package finds by itself.
set -u -o pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
OUT=${OUT:-$PWD/out}
PYTEST_TIMEOUT=${PYTEST_TIMEOUT:-300}
mkdir -p "$OUT"
# Never NVLink multicast (gpu_env.sh, whose NCCL choice through LD_LIBRARY_PATH is left out here).
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export CUDA_DEVICE_MAX_CONNECTIONS=${CUDA_DEVICE_MAX_CONNECTIONS:-32}
work=$(mktemp -d /tmp/agmm-wheel-check.XXXXXX)
LOG=$OUT/wheel_build.log
: >"$LOG"
note() { echo "$*" | tee -a "$LOG"; }

# A clean copy: a clone of HEAD where there is a git repository and the tree is HEAD, else the
# tree without build outputs (the device's copy of a working tree may come without .git, or with
# a .git older than the tree: seen on the H200, whose clone then built a months-old package).
if git -C "$root" rev-parse --git-dir >/dev/null 2>&1 &&
    [ -z "$(git -C "$root" status --porcelain --untracked-files=no 2>/dev/null)" ]; then
    git clone -q "$root" "$work/src" && note "source: a clone of $(git -C "$root" rev-parse --short HEAD)"
else
    mkdir "$work/src"
    tar -C "$root" --exclude='./build*' --exclude=./out --exclude=./.whl --exclude=./.git --exclude='./.lab' \
        --exclude='*/__pycache__' -cf - . |
        tar -C "$work/src" -xf -
    note "source: a copy of $root without build outputs (no git repository here, or one older than the tree)"
fi

# A venv over the system's site-packages, where torch and its nvidia wheels are; pip itself may
# come from the system's site-packages too (--without-pip needs no ensurepip). Where that fails,
# the system's Python with the package installed into a folder of its own on PYTHONPATH.
python=$work/venv/bin/python3
install=()
# A python3 that is itself a venv (the H200's: /opt/torch/.venv) would give a new venv the base
# interpreter's site-packages, without torch: then straight to the --target folder.
in_venv=$(python3 -c 'import sys; print(int(sys.prefix != sys.base_prefix))' 2>/dev/null || echo 0)
if [ "$in_venv" = 1 ] || ! python3 -m venv --system-site-packages --without-pip "$work/venv" >>"$LOG" 2>&1 ||
    ! "$python" -m pip --version >>"$LOG" 2>&1; then
    python=python3
    install=(--target "$work/site")
    export PYTHONPATH=$work/site${PYTHONPATH:+:$PYTHONPATH}
    note "no venv over python3's packages here (python3 is a venv, or see the log): python3 itself, the package in $work/site"
fi
note "python: $("$python" -c 'import sys; print(sys.version.split()[0])'), torch $("$python" -c 'import torch; print(torch.__version__)' 2>&1 | tail -n 1)"

note "== pip wheel ./python (no index: the build backend needs nothing)"
start=$(date +%s)
"$python" -m pip wheel -v --no-index --no-deps -w "$work/wheels" "$work/src/python" >>"$LOG" 2>&1
rc=$?
wheel=$(ls "$work"/wheels/agmm-*.whl 2>/dev/null | head -n 1)
note "pip wheel exit $rc after $(( $(date +%s) - start )) s: ${wheel:-no wheel}"
grep -E '^ *agmm: ' "$LOG" | sed 's/^ *//'            # what the build backend chose, and why
[ -n "$wheel" ] || { echo "FAILED: no wheel (see $LOG)"; exit 1; }

cp -r "$work/src/python/tests" "$work/tests"
rm -rf "$work/src"                                  # the checkout moved away
"$python" -m pip install --no-index --no-deps "${install[@]}" "$wheel" >>"$LOG" 2>&1 ||
    { echo "FAILED: pip install of the wheel (see $LOG)"; exit 1; }
if ! "$python" -c 'import pytest' 2>/dev/null && [ -d "$root/.whl" ]; then
    "$python" -m pip install --no-index --find-links "$root/.whl" "${install[@]}" pytest >>"$LOG" 2>&1
fi

cd "$work" || exit 1
"$python" -m agmm >"$OUT/agmm_info.txt" 2>&1
info_rc=$?
"$python" -m agmm --world gpu >"$OUT/agmm_info_gpu.txt" 2>&1
gpu_rc=$?
if "$python" -c 'import pytest' 2>/dev/null; then
    timeout "$PYTEST_TIMEOUT" "$python" -m torch.distributed.run --nproc-per-node 1 -m pytest -q -rs -p no:cacheprovider \
        tests >"$OUT/wheel_pytest.log" 2>&1
    echo "pytest exit $?" >>"$OUT/wheel_pytest.log"
else
    echo "NOT RUN: no pytest here and no .whl/ to install it from" >"$OUT/wheel_pytest.log"
fi
cd "$root" && rm -rf "$work"

echo
echo "==================== summary ===================="
echo "wheel: $(basename "$wheel")"
echo "python -m agmm exit $info_rc; python -m agmm --world gpu exit $gpu_rc"
grep -E -A2 '^(library|NCCL): ' "$OUT/agmm_info.txt"
grep -E '^backends: ' "$OUT/agmm_info_gpu.txt"
grep -E '^(pytest exit|NOT RUN|[0-9]+ (passed|failed)|=+ .*(passed|failed))' "$OUT/wheel_pytest.log" | tail -n 3
