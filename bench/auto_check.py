#!/usr/bin/env python3
"""Reads agmm-bench CSVs that have an "auto" column and says how well auto chose (issue 17).

    python3 bench/auto_check.py w1.csv [--tol 0.03] [--need 29]
    python3 bench/auto_check.py w1.csv --fixed fixed.csv emu8.csv

For every shape of the first CSV: the fastest backend measured in that run (mean µs, as the Best
Backend column; auto itself left out), the backend auto chose (the CSV's `chose` column) and that
backend's own time in the same run. auto passes a shape when its choice's time is within --tol of
the fastest. Also: the cost of choosing per shape (`tune_ms`, the plan creation's measuring) and
auto's own column against the fastest. Exit status 0 when at least --need shapes pass.

--fixed: further CSVs whose rows are printed as a plain table (pull's per-call fixed cost next to
the other backends, tiny shapes and emulated worlds). Needs only the standard library.
"""
import argparse
import csv
import statistics
import sys


def load(path):
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def shapes(rows):
    """{(m, n, k): {backend: row}} in first-seen order."""
    out = {}
    for r in rows:
        out.setdefault((int(r["m"]), int(r["n"]), int(r["k"])), {})[r["backend"]] = r
    return out


def mean(row):
    return float(row["mean_us"]) if row and row["state"] == "ok" and row["mean_us"] else None


def check_auto(path, tol, need):
    rows = shapes(load(path))
    passed, costs, lines = 0, [], []
    for shape, cells in rows.items():
        auto = cells.get("auto")
        timed = {b: mean(c) for b, c in cells.items() if b != "auto" and mean(c) is not None}
        if not auto or not timed:
            lines.append(f"{str(shape):22} no auto cell or no timed backend")
            continue
        best = min(timed, key=timed.get)
        chose = auto.get("chose", "")
        t_chose = timed.get(chose)
        ratio = t_chose / timed[best] if t_chose else float("inf")
        ok = ratio <= 1 + tol
        passed += ok
        cost = float(auto["tune_ms"]) if auto.get("tune_ms") else None
        if cost is not None:
            costs.append(cost)
        t_auto = mean(auto)
        lines.append(f"{str(shape):22} {best:>6} {timed[best]:9.1f}  {chose:>6} {t_chose or float('nan'):9.1f} "
                     f"{ratio:6.3f} {'ok' if ok else 'MISS':>4}  auto col {t_auto or float('nan'):9.1f} "
                     f"({(t_auto or float('nan')) / timed[best]:5.3f})  {auto.get('how', ''):>8} "
                     f"{cost if cost is not None else float('nan'):7.1f} ms")
    print(f"# {path}: auto's choice against the fastest backend of the same run (mean us)")
    print(f"{'shape':22} {'best':>6} {'best_us':>9}  {'chose':>6} {'chose_us':>9} {'ratio':>6} {'':>4}  "
          f"{'auto column (ratio)':>26}  {'how':>8} {'tune cost':>10}")
    print("\n".join(lines))
    n = len(rows)
    print(f"auto within {tol:.0%} of the fastest on {passed}/{n} shapes (target: >= {need})")
    if costs:
        print(f"tuning cost per new shape: median {statistics.median(costs):.1f} ms, "
              f"min {min(costs):.1f}, max {max(costs):.1f} ms over {len(costs)} shapes")
    return passed >= need


def table(path):
    rows = load(path)
    print(f"# {path}")
    for shape, cells in shapes(rows).items():
        figs = "  ".join(f"{b} {mean(c):.1f}" if mean(c) is not None else f"{b} {c['state']}"
                         for b, c in cells.items())
        print(f"{rows[0]['world']} W={rows[0]['nranks']} {str(shape):22} {figs}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("csv")
    ap.add_argument("--tol", type=float, default=0.03)
    ap.add_argument("--need", type=int, default=29)
    ap.add_argument("--fixed", nargs="*", default=[])
    args = ap.parse_args()
    ok = check_auto(args.csv, args.tol, args.need)
    for p in args.fixed:
        table(p)
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
