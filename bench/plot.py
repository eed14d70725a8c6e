#!/usr/bin/env python3
"""Draws agmm-bench results: one line per backend, time (or TFLOP/s, or busbw) against the shape.

    python3 bench/plot.py docs/results/ag_matmul_w1.csv -o ag_matmul_w1.png
    python3 bench/plot.py docs/results/ag_matmul_w1.csv --metric tflops -o tflops.png
    python3 bench/plot.py docs/results/all_reduce_w1.csv --metric busbw_gbps -o ar.png
    python3 bench/plot.py out/torch_ag_matmul.csv --metric speedup_vs_best_torch -o vs_torch.png

Reads the CSV that `agmm-bench --csv` writes, or bench/torch_bench.py's (the same columns, plus
speedup_vs_best_torch on agmm's rows); only cells whose state is "ok" are drawn. Needs
matplotlib (not a dependency of the library or of the tests).
"""
import argparse
import csv
import sys


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("csv", help="a CSV written by agmm-bench --csv")
    ap.add_argument("--metric", default="mean_us",
                    help="column to draw: mean_us (default), median_us, tflops, busbw_gbps, algbw_gbps, speedup_vs_nccl, "
                         "speedup_vs_best_torch (torch_bench.py's CSV)")
    ap.add_argument("-o", "--output", default="agmm.png", help="PNG to write (default agmm.png)")
    args = ap.parse_args()

    with open(args.csv, newline="") as f:
        rows = list(csv.DictReader(f))
    if not rows:
        sys.exit(f"plot.py: {args.csv} has no rows")
    if args.metric not in rows[0]:
        sys.exit(f"plot.py: --metric {args.metric}: not a column of {args.csv} ({', '.join(rows[0])})")

    op = rows[0]["op"]
    series = {}
    for r in rows:
        if r["state"] != "ok" or r[args.metric] == "":
            continue
        x = int(r["m"]) if op in ("ag_matmul", "all_reduce_rmsnorm") else int(r["n"])
        # all_reduce_rmsnorm: one line per backend and H, against T
        name = f"{r['backend']} H={r['n']}" if op == "all_reduce_rmsnorm" else r["backend"]
        series.setdefault(name, []).append((x, float(r[args.metric])))
    if not series:
        sys.exit(f"plot.py: no timed, correct cells with {args.metric} in {args.csv}")

    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(9, 5))
    for backend, pts in sorted(series.items()):
        pts.sort()
        ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", markersize=3, label=backend)
    if op in ("all_reduce", "all_reduce_rmsnorm"):
        ax.set_xscale("log", base=2)
    if args.metric.endswith("_us"):
        ax.set_yscale("log")
    ax.set_xlabel({"ag_matmul": "M = N = K (rows per rank)", "all_reduce_rmsnorm": "T (rows of x)"}.get(
        op, "elements per rank"))
    ax.set_ylabel(args.metric)
    ax.set_title(f"{op}, W = {rows[0]['nranks']} ({rows[0]['world']}), {rows[0]['dtype']}")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(args.output, dpi=120)
    print(f"plot.py: wrote {args.output}")


if __name__ == "__main__":
    main()
