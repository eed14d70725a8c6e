#!/usr/bin/env bash
# Two builds of the GEMM lab side by side, in one call on the GPU machine (bench/ab_compare.sh does
# the same for agmm-bench): runs A, B, A, B on the same arguments and prints, per engine variant
# (the policy, or a forced config), the geometric mean over shapes of B's ratio to A's, both of the
# engine's time against the best cuBLASLt measured in the same run (engine_over_best: immune to
# the SM clock moving between runs) and of the engine's median time. B/A < 1: B is faster; the
# A2/A1 and B2/B1 columns are the run-to-run spread. Then the policy's B - A in us, shape by shape.
#
#   OUT=dir bench/lab_ab.sh A_LAB B_LAB [gemm-lab args...]    default args: --configs -1 --reps 10
#
# e.g. the engine before and after a change: build each tree's lab (make gemm-lab BUILD=...),
# carry both over, then OUT=$OUT bench/lab_ab.sh build-old/gemm-lab build/gemm-lab. A_ARGS and
# B_ARGS add options to one side only: what fused's kernel costs over the plain GEMM at W = 1 is
# B_ARGS="--mode copy" bench/lab_ab.sh build/gemm-lab build/gemm-lab --w 1 --no-models. About 20 s
# per run with the default arguments on an H200 (every step under `timeout`). Writes $OUT/lab_ab.tar
# (the four CSVs and logs). NCCL: the PyTorch wheel's, as bench/gpu_run.sh does.
set -u -o pipefail
A=$1 B=$2
shift 2
[ $# -eq 0 ] && set -- --configs -1 --reps 10
OUT=${OUT:-$PWD/out}
mkdir -p "$OUT"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
NCCL_PKG=$(python3 -c 'import nvidia.nccl as m; print(list(m.__path__)[0])' 2>/dev/null || true)
[ -n "$NCCL_PKG" ] && [ -e "$NCCL_PKG/lib/libnccl.so.2" ] &&
    export LD_LIBRARY_PATH=$NCCL_PKG/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
for pass in 1 2; do
    for side in A B; do
        bin=$A
        [ $side = B ] && bin=$B
        extra=${A_ARGS:-}
        [ $side = B ] && extra=${B_ARGS:-}
        echo "== $side$pass: $bin $* $extra"
        # shellcheck disable=SC2086
        timeout 240 "$bin" "$@" $extra --csv "$dir/$side$pass.csv" >"$dir/$side$pass.log" 2>&1
        echo "   rc=$? ($(grep -c ' FAIL$' "$dir/$side$pass.log") engine variants FAILED the check)"
    done
done
tar -C "$dir" -cf "$OUT/lab_ab.tar" .
python3 - "$dir" <<'PY'
import csv, math, os, sys
d = sys.argv[1]
def load(name):
    t = {}
    p = os.path.join(d, name)
    if os.path.exists(p):
        for r in csv.DictReader(open(p)):
            if r["nans"] == "0" and float(r["rel_err"]) <= 1e-2:
                t[(r["shape"], r["W"], r["M"], r["N"], r["K"], r["config_req"])] = r
    return t
runs = {s: load(s + ".csv") for s in ("A1", "B1", "A2", "B2")}
variants = sorted({k[-1] for t in runs.values() for k in t}, key=int)
def checked(v):
    """Variant v's shapes that all four runs checked correct."""
    return [k for k in runs["A1"] if k[-1] == v and all(k in runs[s] for s in runs)]
print("%-9s %6s %7s %7s %7s %7s %9s %9s %7s" % ("variant", "shapes", "B1/A1", "B2/A2", "A2/A1", "B2/B1",
                                                 "us B1/A1", "us B2/A2", "worst"))
for v in variants:
    keys = checked(v)
    if not keys:
        continue
    def gm(x, y, col):
        return math.exp(sum(math.log(float(runs[x][k][col]) / float(runs[y][k][col])) for k in keys) / len(keys))
    worst = max(min(float(runs["B1"][k]["engine_over_best"]) / float(runs["A1"][k]["engine_over_best"]),
                    float(runs["B2"][k]["engine_over_best"]) / float(runs["A2"][k]["engine_over_best"])) for k in keys)
    print("%-9s %6d %7.3f %7.3f %7.3f %7.3f %9.3f %9.3f %7.3f" % (
        "policy" if v == "-1" else "config " + v, len(keys), gm("B1", "A1", "engine_over_best"),
        gm("B2", "A2", "engine_over_best"), gm("A2", "A1", "engine_over_best"), gm("B2", "B1", "engine_over_best"),
        gm("B1", "A1", "engine_us"), gm("B2", "A2", "engine_us"), worst))
print("(geometric means over the shapes every run checked correct; the first four columns compare "
      "engine/cuBLAS-best ratios, the us columns engine medians; worst = the largest per-shape B/A of "
      "engine/cuBLAS-best, the better of the two passes)")
# The policy's per-shape difference, where a geometric mean hides which shapes moved.
keys = checked("-1")
if keys:
    us = lambda s, k: float(runs[s][k]["engine_us"])
    print("policy, B - A in us per shape (rows x N x K: mean of the two passes):")
    print(" ".join("%sx%sx%s:%+.1f" % (runs["A1"][k]["rows"], k[3], k[4],
                                      (us("B1", k) + us("B2", k) - us("A1", k) - us("A2", k)) / 2) for k in keys))
PY
