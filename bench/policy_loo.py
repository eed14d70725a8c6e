#!/usr/bin/env python3
"""How the engine's config policy does on shapes it has not measured, from one lab run of every config.

For each shape of the run, the config the policy (src/kernels/gemm/policy.c) would take were that shape
missing from the measured table: the fastest config of the nearest other shape within the radius
(AGMM_GEMM_MEASURED_RADIUS, read from policy.h), else the cost model's (agmm_gemm_policy_model, mirrored
below over the pick = 1 configs and eff numbers read from gemm_configs.h; tiles and CTAs from the lab's
config column). Its time over best cuBLAS (gemm_ratio.py's yardstick), against the oracle (the fastest
config per shape: the policy on a measured shape) and the cost model alone; --radius R tries another
radius. Leave-one-out: each shape is judged by the others' winners only.

--fit also tries a cost model fitted per config (every config of the run, not only pick = 1): a
wave of config c costs a_c x BM x BN x K + b_c microseconds, a_c and b_c by least squares on the
relative error over the shapes it is fitted on, and the config of least waves x that cost is
taken. Judged by two-fold cross-validation (the shapes split in halves 20 times at random, each
half judged by the fit on the other), beside the fit on all shapes judged on them.

    python3 bench/policy_loo.py lab.csv [torch.csv] [--radius R] [--fit]

lab.csv: gemm-lab --configs all --csv lab.csv (every config forced on every shape).
"""
import argparse
import math
import os
import random
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gemm_ratio import best_cublas, fastest, geomean, load, ok  # noqa: E402

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
K_OVERHEAD = 192  # policy.c's per-tile fixed cost, in units of K


def configs():
    """{name: (pick, eff)} from gemm_configs.h's X-macro: the last three fields of every row."""
    text = open(os.path.join(ROOT, "src/kernels/gemm/gemm_configs.h")).read()
    body = text[text.index("#define AGMM_GEMM_CONFIGS(X)"):text.index("#define AGMM_GEMM_MEASURED")]
    return {m.group(3): (int(m.group(1)), float(m.group(2)))
            for m in re.finditer(r"X\((?:[^,\n]*,){6,}\s*(\d+),\s*([\d.]+),\s*\"([^\"]+)\"\)", body)}


def radius():
    text = open(os.path.join(ROOT, "src/kernels/gemm/policy.h")).read()
    return float(re.search(r"#define AGMM_GEMM_MEASURED_RADIUS ([\d.]+)", text).group(1))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("lab_csv")
    ap.add_argument("torch_csv", nargs="?")
    ap.add_argument("--radius", type=float, help="the table's reach (default: policy.h's)")
    ap.add_argument("--fit", action="store_true", help="also the per-config fitted cost model, cross-validated")
    args = ap.parse_args()
    lab, torch_us = load(args.lab_csv, args.torch_csv)
    table = configs()
    reach = radius() if args.radius is None else args.radius

    def us(rows, c):
        return float(rows[c]["engine_us"])

    # the correct forced configs of every shape, and the fastest of them (gemm_ratio.py's, as --policy-table)
    forced = {k: {c: r for c, r in rows.items() if c >= 0 and ok(r)} for k, rows in lab.items()}
    forced = {k: rows for k, rows in forced.items() if rows}
    winner = {k: int(fastest(rows)["config_req"]) for k, rows in forced.items()}

    def tile_waves(row):
        """A forced run's tile (BM, BN) and waves (tiles over CTAs, rounded up), from its config column."""
        bm, bn = (int(x) for x in re.match(r"(\d+)x(\d+)", row["config"]).groups())
        tiles, ctas = (int(re.search(rf"{f}=(\d+)", row["config"]).group(1)) for f in ("tiles", "ctas"))
        return bm, bn, -(-tiles // ctas)

    def waves_macs(row, k):
        """Its waves and one tile's multiply-adds."""
        bm, bn, waves = tile_waves(row)
        return waves, bm * bn * k[4]

    def model(k):
        """agmm_gemm_policy_model: the pick = 1 config whose waves x (BM/128) x BN x (K + 192) / eff is
        least; a later config must beat the best so far by 2%."""
        best, best_cost = None, None
        for c, row in sorted(forced[k].items()):
            name = row["config"].split()[0]
            pick, eff = table.get(name, (0, 1.0))
            if not pick:
                continue
            bm, bn, waves = tile_waves(row)
            cost = waves * bm / 128 * bn * (k[4] + K_OVERHEAD) / eff
            if best is None or cost < best_cost * 0.98:
                best, best_cost = c, cost
        return best

    def dist(a, b):
        return sum(abs(math.log2(a[i] / b[i])) for i in (2, 3, 4))

    out = {"oracle": [], "cost model": [], f"policy, unmeasured (radius {reach:g})": []}
    by_table = 0
    for k, rows in forced.items():
        best, _ = best_cublas(k, lab[k], torch_us)
        near = min(((dist(k, o), o) for o in forced if o != k), default=(math.inf, None))
        pick = winner[near[1]] if near[0] <= reach else model(k)
        by_table += near[0] <= reach
        out["oracle"].append(us(rows, winner[k]) / best)
        out["cost model"].append(us(rows, model(k)) / best)
        out[f"policy, unmeasured (radius {reach:g})"].append(us(rows, pick) / best)
    if args.fit:
        def fit(keys):
            """{config: (a, b)}: waves x (a x macs + b) against the engine's time, least squares on the
            relative error over `keys`."""
            coef = {}
            for c in {c for k in keys for c in forced[k]}:
                suu = suv = svv = su = sv = 0.0
                for k in keys:
                    if c in forced[k]:
                        w, x = waves_macs(forced[k][c], k)
                        t = us(forced[k], c)
                        u, v = w * x / t, w / t
                        suu, suv, svv, su, sv = suu + u * u, suv + u * v, svv + v * v, su + u, sv + v
                det = suu * svv - suv * suv
                if det > 0:
                    coef[c] = ((su * svv - sv * suv) / det, (sv * suu - su * suv) / det)
            return coef

        def judged(keys, coef):
            v = []
            for k in keys:
                def cost(c):
                    w, x = waves_macs(forced[k][c], k)
                    return w * (coef[c][0] * x + coef[c][1])
                pick = min((c for c in forced[k] if c in coef), key=cost)
                v.append(us(forced[k], pick) / best_of[k])
            return v

        best_of = {k: best_cublas(k, lab[k], torch_us)[0] for k in forced}
        keys, cv = sorted(forced), []
        for seed in range(20):
            random.Random(seed).shuffle(keys)
            half = len(keys) // 2
            cv += judged(keys[half:], fit(keys[:half])) + judged(keys[:half], fit(keys[half:]))
        out["fitted per config, cross-validated"] = cv
        out["fitted per config, on all shapes"] = judged(keys, fit(keys))
    print(f"{len(forced)} shapes; engine / best cuBLAS (leave-one-out: {by_table} took a neighbour's config)")
    print("| policy | geomean | worst |")
    print("|---|---|---|")
    for name, v in out.items():
        print(f"| {name} | {geomean(v):.3f} | {max(v):.3f} |")


if __name__ == "__main__":
    main()
