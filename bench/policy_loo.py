#!/usr/bin/env python3
"""How the engine's config policy does on shapes it has not measured, from one lab run of every config.

For each shape of the run, the config the policy (src/kernels/gemm/policy.c) would take were that shape
missing from the measured table: the fastest config of the nearest other shape within the radius
(AGMM_GEMM_MEASURED_RADIUS, read from policy.h), else the cost model's (agmm_gemm_policy_model, mirrored
below over the pick = 1 configs and eff numbers read from gemm_configs.h; tiles and CTAs from the lab's
config column). Its time over best cuBLAS (gemm_ratio.py's yardstick), against the oracle (the fastest
config per shape: the policy on a measured shape) and the cost model alone; --radius R tries another
radius. Leave-one-out: each shape is judged by the others' winners only.

    python3 bench/policy_loo.py lab.csv [torch.csv] [--radius R]

lab.csv: gemm-lab --configs all --csv lab.csv (every config forced on every shape).
"""
import argparse
import math
import os
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

    def model(k):
        """agmm_gemm_policy_model: the pick = 1 config whose waves x (BM/128) x BN x (K + 192) / eff is
        least; a later config must beat the best so far by 2%."""
        best, best_cost = None, None
        for c, row in sorted(forced[k].items()):
            name = row["config"].split()[0]
            pick, eff = table.get(name, (0, 1.0))
            if not pick:
                continue
            bm, bn = (int(x) for x in re.match(r"(\d+)x(\d+)", name).groups())
            tiles, ctas = (int(re.search(rf"{f}=(\d+)", row["config"]).group(1)) for f in ("tiles", "ctas"))
            waves = -(-tiles // ctas)
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
    print(f"{len(forced)} shapes; engine / best cuBLAS (leave-one-out: {by_table} took a neighbour's config)")
    print("| policy | geomean | worst |")
    print("|---|---|---|")
    for name, v in out.items():
        print(f"| {name} | {geomean(v):.3f} | {max(v):.3f} |")


if __name__ == "__main__":
    main()
