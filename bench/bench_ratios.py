#!/usr/bin/env python3
"""Each backend's time over the GEMM engine's alone and over the nccl baseline, from an agmm-bench CSV.

agmm-bench writes per shape and backend the backend's median time (median_us) and, for the ops
whose backends run agmm's GEMM engine, the engine alone on the same shape (engine_us: the t/engine
column of its table). This prints, per operation, world and rank count, one markdown row per
backend: its shapes, the geomean and worst of median_us / engine_us (issue 20's "fused ÷ engine")
and the geomean of median_us / nccl's median_us on the same shape. Only rows that ran ("ok") count.
Under each heading a line says how the rows were timed (the CSV's turns and alone columns): in turns,
each row's backends and plain GEMMs meeting the same clocks, or one after the other (held alone, or a
CSV from before agmm-bench took turns), where a long product's moving clock is part of each ratio.

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


def timing(rows):
    """{(op, world, nranks): a sentence on how its ok rows were timed}."""
    seen = defaultdict(set)
    for r in rows:
        if r["state"] == "ok":
            seen[(r["op"], r["world"], r["nranks"])].add((r.get("m"), r.get("n"), r.get("k"), r.get("turns"),
                                                          r.get("alone")))
    out = {}
    for group, shapes in seen.items():
        turns = {t for *_, t, _ in shapes}
        alone = sum(1 for *_, a in shapes if a == "1")
        if None in turns or "" in turns:
            out[group] = ("Timing not recorded (a CSV from before agmm-bench took turns): each backend was timed "
                          "alone, the plain GEMMs first.")
        elif alone:
            out[group] = (f"Timed in turns ({', '.join(sorted(turns))} rounds), but {alone} of {len(shapes)} "
                          "shapes held one backend at a time: their ratios compare figures timed one after the "
                          "other.")
        else:
            out[group] = (f"Timed in turns ({', '.join(sorted(turns))} rounds): every shape's backends and plain "
                          "GEMMs met the same clocks.")
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("csv", help="an agmm-bench --csv file")
    args = ap.parse_args()
    with open(args.csv, newline="") as f:
        rows = list(csv.DictReader(f))
    table, how = ratios(rows), timing(rows)
    for (op, world, nranks), backends in table.items():
        print(f"\n## {op}, {world} world, {nranks} ranks\n")
        print(how[(op, world, nranks)] + "\n")
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
