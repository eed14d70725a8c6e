#!/usr/bin/env python3
"""How the engine's config policy does on shapes it has not measured, from one lab run of every config;
and the cost model's coefficients, fitted on such a run.

For each shape of the run, the config the policy (src/kernels/gemm/policy.c) would take were that shape
missing from the measured table: the fastest config of the nearest other shape within the radius
(AGMM_GEMM_MEASURED_RADIUS, read from policy.h), else the cost model's (agmm_gemm_policy_model, mirrored
below with the coefficients of gemm_configs.h's AGMM_GEMM_FITTED_<device>; tiles and CTAs from the lab's
config column). Its time over best cuBLAS (gemm_ratio.py's yardstick), against the oracle (the fastest config
per shape: the policy on a measured shape) and the cost model alone; --radius R tries another radius.
Leave-one-out: each shape is judged by the others' winners only.

The cost model: config c costs waves x (a_c x BM x BN x K + b_c) + c_c microseconds (a wave's
multiply-adds, a wave's fixed cost, the run's), the coefficients fitted by least squares on the
relative error over a run's shapes (b_c or c_c dropped where it would come out negative), and the
config of least cost is taken, every config with coefficients a candidate. --fit judges a fit by two-fold cross-validation (the
shapes split in halves 20 times at random, each half judged by the fit on the other), beside the fit
on all shapes judged on them; --fit-table prints the fit on all shapes as the rows of
AGMM_GEMM_FITTED_<device>. --device H100|H200 (default H200): the kind the run was on, whose cost
model is judged.

    python3 bench/policy_loo.py lab.csv [torch.csv] [--device D] [--radius R] [--fit] [--fit-table]

lab.csv: gemm-lab --configs all --csv lab.csv (every config forced on every shape).
"""
import argparse
import math
import os
import random
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gemm_ratio import best_cublas, config_name, fastest, geomean, library_configs, load, ok  # noqa: E402

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")


def macro_rows(name):
    """The rows of one of gemm_configs.h's X-macros, each as its list of fields (strings unquoted)."""
    text = open(os.path.join(ROOT, "src/kernels/gemm/gemm_configs.h")).read()
    body = re.search(rf"#define {name}\(X\)(.*?)(?:\n\n|\Z)", text, re.S).group(1)
    return [[f.strip().strip('"') for f in m.group(1).split(",")] for m in re.finditer(r"X\(([^)]*)\)", body)]


def fitted(device):
    """{config name: (a, b, c)} from AGMM_GEMM_FITTED_<device>: a in picoseconds per multiply-add, b and
    c in microseconds."""
    return {r[0]: tuple(float(x) for x in r[1:4]) for r in macro_rows(f"AGMM_GEMM_FITTED_{device}")}


def least_squares(rows, terms):
    """The x minimising sum((row . x - 1)^2) over rows, only the terms' entries free (the others 0):
    the normal equations, solved by Gauss-Jordan elimination. None when they are singular."""
    n = len(terms)
    m = [[sum(r[i] * r[j] for r in rows) for j in terms] + [sum(r[i] for r in rows)] for i in terms]
    for col in range(n):
        piv = max(range(col, n), key=lambda i: abs(m[i][col]))
        if abs(m[piv][col]) < 1e-12 * max(1.0, abs(m[col][col])):
            return None
        m[col], m[piv] = m[piv], m[col]
        for i in range(n):
            if i != col:
                f = m[i][col] / m[col][col]
                m[i] = [a - f * b for a, b in zip(m[i], m[col])]
    x = [0.0] * len(rows[0])
    for i, t in enumerate(terms):
        x[t] = m[i][n] / m[i][i]
    return x


def fit_config(rows):
    """(a, b, c) for one config from rows of (waves x macs, waves, 1) / time: the least-squares fit of
    the relative error, a term whose coefficient comes out negative dropped (b, then c) so that no
    wave and no run costs less than nothing."""
    terms = [0, 1, 2]
    while True:
        x = least_squares(rows, terms)
        if x is None:
            return None
        neg = [t for t in terms[1:] if x[t] < 0]
        if not neg:
            return tuple(x)
        terms.remove(neg[0])


def radius():
    text = open(os.path.join(ROOT, "src/kernels/gemm/policy.h")).read()
    return float(re.search(r"#define AGMM_GEMM_MEASURED_RADIUS ([\d.]+)", text).group(1))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("lab_csv")
    ap.add_argument("torch_csv", nargs="?")
    ap.add_argument("--radius", type=float, help="the table's reach (default: policy.h's)")
    ap.add_argument("--fit", action="store_true", help="also the cost model fitted on this run, cross-validated")
    ap.add_argument("--fit-table", action="store_true",
                    help="print the fit on all shapes as AGMM_GEMM_FITTED_<device>'s rows")
    ap.add_argument("--device", choices=("H100", "H200"), default="H200",
                    help="the device kind of the run: whose cost model to judge, whose table to print")
    args = ap.parse_args()
    lab, torch_us = load(args.lab_csv, args.torch_csv)
    reach = radius() if args.radius is None else args.radius

    def us(rows, c):
        return float(rows[c]["engine_us"])

    # the correct forced configs of every shape that gemm_configs.h still has (a run may hold configs
    # tried and dropped), and the fastest of them (gemm_ratio.py's, as --policy-table)
    known = library_configs()
    forced = {k: {c: r for c, r in rows.items() if c >= 0 and ok(r) and config_name(r) in known}
              for k, rows in lab.items()}
    forced = {k: rows for k, rows in forced.items() if rows}
    winner = {k: int(fastest(rows)["config_req"]) for k, rows in forced.items()}
    best_of = {k: best_cublas(k, lab[k], torch_us)[0] for k in forced}
    name_of = {c: config_name(row) for rows in forced.values() for c, row in rows.items()}

    def waves_macs(row, k):
        """A forced run's waves (tiles over CTAs, rounded up) and one tile's multiply-adds, from its
        config column."""
        bm, bn = (int(x) for x in re.match(r"(\d+)x(\d+)", row["config"]).groups())
        tiles, ctas = (int(re.search(rf"{f}=(\d+)", row["config"]).group(1)) for f in ("tiles", "ctas"))
        return -(-tiles // ctas), bm * bn * k[4]

    def model(k, coef):
        """agmm_gemm_policy_model with coefficients {config: (ps per multiply-add, us, us)}: the config
        of least waves x (a x macs + b) + c; the earlier of equal costs."""
        def cost(c):
            waves, macs = waves_macs(forced[k][c], k)
            return waves * (coef[c][0] * 1e-6 * macs + coef[c][1]) + coef[c][2]
        return min((c for c in sorted(forced[k]) if c in coef), key=cost, default=None)

    def fit(keys):
        """{config: (a, b, c)}: waves x (a x macs + b) + c against the engine's time over `keys`
        (fit_config); a in picoseconds per multiply-add, b and c in microseconds."""
        coef = {}
        for c in {c for k in keys for c in forced[k]}:
            rows = []
            for k in keys:
                if c in forced[k]:
                    w, x = waves_macs(forced[k][c], k)
                    t = us(forced[k], c)
                    rows.append((w * x * 1e-6 / t, w / t, 1 / t))
            fitted_c = fit_config(rows) if len(rows) > 3 else None
            if fitted_c and fitted_c[0] > 0:
                coef[c] = fitted_c
        return coef

    def judged(keys, coef):
        return [us(forced[k], model(k, coef)) / best_of[k] for k in keys]

    if args.fit_table:
        coef = fit(sorted(forced))
        print(f"#define AGMM_GEMM_FITTED_{args.device}(X) \\")
        for c in sorted(coef):
            print(f'    X("{name_of[c]}", {coef[c][0]:.4f}, {coef[c][1]:.3f}, {coef[c][2]:.3f}) \\')
        return
    table = fitted(args.device)
    coef = {c: table[name] for c, name in name_of.items() if name in table}

    def dist(a, b):
        return sum(abs(math.log2(a[i] / b[i])) for i in (2, 3, 4))

    out = {"oracle": [], "cost model": [], f"policy, unmeasured (radius {reach:g})": []}
    by_table = 0
    for k, rows in forced.items():
        near = min(((dist(k, o), o) for o in forced if o != k), default=(math.inf, None))
        pick = winner[near[1]] if near[0] <= reach else model(k, coef)
        by_table += near[0] <= reach
        out["oracle"].append(us(rows, winner[k]) / best_of[k])
        out["cost model"].append(us(rows, model(k, coef)) / best_of[k])
        out[f"policy, unmeasured (radius {reach:g})"].append(us(rows, pick) / best_of[k])
    if args.fit:
        keys, cv = sorted(forced), []
        for seed in range(20):
            random.Random(seed).shuffle(keys)
            half = len(keys) // 2
            cv += judged(keys[half:], fit(keys[:half])) + judged(keys[:half], fit(keys[half:]))
        out["fitted, cross-validated"] = cv
        out["fitted on all shapes"] = judged(keys, fit(keys))
    print(f"{len(forced)} shapes; engine / best cuBLAS (leave-one-out: {by_table} took a neighbour's config)")
    print("| policy | geomean | worst |")
    print("|---|---|---|")
    for name, v in out.items():
        print(f"| {name} | {geomean(v):.3f} | {max(v):.3f} |")


if __name__ == "__main__":
    main()
