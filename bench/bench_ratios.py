#!/usr/bin/env python3
"""Each backend's time over the GEMM engine's alone and over the nccl baseline, from an agmm-bench CSV.

agmm-bench writes per shape and backend the backend's median time (median_us) and, for the ops
whose backends run agmm's GEMM engine, the engine alone on the same shape (engine_us: the t/engine
column of its table). This prints, per operation, world and rank count, one markdown row per
backend: its shapes, the geomean and worst of median_us / engine_us (issue 20's "fused ÷ engine")
and the geomean of median_us / nccl's median_us on the same shape. Only rows that ran ("ok") count.

    python3 bench/bench_ratios.py ag_matmul_w1.csv
"""
import argparse
import csv
import math
from collections import defaultdict


def geomean(xs):
    return math.exp(sum(math.log(x) for x in xs) / len(xs))


def number(text):
    try:
        x = float(text)
    except (TypeError, ValueError):
        return None
    return x if x > 0 and math.isfinite(x) else None


def ratios(rows):
    """{(op, world, nranks): {backend: {"engine": [(ratio, shape)], "nccl": [ratio]}}}."""
    nccl = {}
    for r in rows:
        if r["backend"] == "nccl" and r["state"] == "ok":
            nccl[(r["op"], r["world"], r["nranks"], r["m"], r["n"], r["k"])] = number(r["median_us"])
    out = defaultdict(lambda: defaultdict(lambda: {"engine": [], "nccl": []}))
    for r in rows:
        t = number(r["median_us"])
        if r["state"] != "ok" or t is None:
            continue
        group, shape = (r["op"], r["world"], r["nranks"]), (r["m"], r["n"], r["k"])
        e = number(r.get("engine_us"))
        if e is not None:
            out[group][r["backend"]]["engine"].append((t / e, "x".join(shape)))
        base = nccl.get(group + shape)
        if base is not None:
            out[group][r["backend"]]["nccl"].append(t / base)
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("csv", help="an agmm-bench --csv file")
    args = ap.parse_args()
    with open(args.csv, newline="") as f:
        table = ratios(list(csv.DictReader(f)))
    for (op, world, nranks), backends in table.items():
        print(f"\n## {op}, {world} world, {nranks} ranks\n")
        print("| backend | shapes | ÷ engine, geomean | worst (shape) | ÷ nccl, geomean |")
        print("|---|---|---|---|---|")
        for name, r in backends.items():
            eng, base = r["engine"], r["nccl"]
            geo_e = f"{geomean([x for x, _ in eng]):.3f}" if eng else "-"
            worst = "{:.3f} ({})".format(*max(eng)) if eng else "-"
            geo_n = f"{geomean(base):.3f}" if base else "-"
            print(f"| {name} | {max(len(eng), len(base))} | {geo_e} | {worst} | {geo_n} |")


if __name__ == "__main__":
    main()
