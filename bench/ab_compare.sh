#!/usr/bin/env bash
# Two builds of agmm-bench side by side, in one call on the GPU machine: runs A, B, A, B on the same
# arguments (the repeat shows the run-to-run spread) and prints, per backend, the ratio of B's
# median to A's per shape and its geometric mean (B/A < 1: B is faster).
#
#   OUT=dir bench/ab_compare.sh A_BENCH B_BENCH [agmm-bench args...]
#
# Writes $OUT/ab.tar (the four CSVs) and prints the table. NCCL: the PyTorch wheel's, as
# bench/gpu_run.sh does.
set -u -o pipefail
A=$1 B=$2
shift 2
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
        echo "== $side$pass: $bin $*"
        timeout 200 "$bin" "$@" --csv "$dir/$side$pass.csv" >"$dir/$side$pass.log" 2>&1
        echo "   rc=$?"
    done
done
tar -C "$dir" -cf "$OUT/ab.tar" .
python3 - "$dir" <<'EOF'
import csv, math, sys, os
d = sys.argv[1]
def load(name):
    t = {}
    p = os.path.join(d, name)
    if not os.path.exists(p):
        return t
    for r in csv.DictReader(open(p)):
        if r["state"] == "ok" and r["median_us"]:
            key = (r["m"], r["n"], r["k"]) if r["op"] == "ag_matmul" else (r["n"],)
            t[(key, r["backend"])] = float(r["median_us"])
    return t
runs = {s: load(s + ".csv") for s in ("A1", "B1", "A2", "B2")}
backends = sorted({b for t in runs.values() for (_, b) in t})
print("%-12s %6s %10s %10s %10s %10s %8s" % ("backend", "shapes", "B1/A1", "B2/A2", "A2/A1", "B2/B1", "worst"))
for b in backends:
    keys = [k for (k, bb) in runs["A1"] if bb == b and all((k, b) in runs[s] for s in runs)]
    if not keys:
        continue
    def gm(x, y):
        return math.exp(sum(math.log(runs[x][(k, b)] / runs[y][(k, b)]) for k in keys) / len(keys))
    worst = max(min(runs["B1"][(k, b)] / runs["A1"][(k, b)], runs["B2"][(k, b)] / runs["A2"][(k, b)]) for k in keys)
    print("%-12s %6d %10.3f %10.3f %10.3f %10.3f %8.3f" % (b, len(keys), gm("B1", "A1"), gm("B2", "A2"),
                                                            gm("A2", "A1"), gm("B2", "B1"), worst))
print("(geometric means of per-shape median ratios; A2/A1 and B2/B1 are the run-to-run spread;"
      " worst = the largest per-shape ratio, the better of the two passes)")
EOF
