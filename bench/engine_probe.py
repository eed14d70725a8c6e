#!/usr/bin/env python3
"""bench/engine_probe.sh's tables.

1. Per config, CTA budget and shape: the engine's median time, the SM clock it ran at (gemm-lab
   --clock's sm_mhz; without it, nvidia-smi's samples with power above 60% of the run's highest,
   which miss short runs), the power while loaded, and the cycles per K block of one CTA:
   time x clock / (ceil(tiles / CTAs) x K/64), beside the MMAs' own cycles per K block
   (BM x BN x 64 multiply-adds at 2048 per SM clock, dense bf16 on Hopper). The same cycles at
   fewer CTAs: a limit of each SM's own; fewer: a shared one (the L2, HBM). With the whole GPU,
   cuBLASLt's fastest of 4 algorithms beside it: its time and its clock (lt_us, lt_MHz).
2. Per config and CTA budget, the 8192 x 8192 x K runs (K = 1024, 4096, 16384) fitted as
   cycles per tile = per_tile + per_kb x K blocks (least squares): per_kb against the MMAs' cycles
   says how well the mainloop keeps the tensor pipe busy; per_tile is what a tile costs outside it
   (epilogue, decode, pipeline fill).

    python3 bench/engine_probe.py OUT_DIR
"""
import csv
import glob
import math
import os
import re
import statistics
import sys

MMA_PER_CLOCK = 2048  # dense bf16 multiply-adds per SM clock (Hopper)


def loaded_clock(path):
    """(MHz, W): medians over the samples drawn while the GPU was loaded; nan without samples."""
    samples = []
    try:
        for line in open(path):
            p = [x.strip() for x in line.split(",")]
            if len(p) >= 3 and p[1].endswith("MHz") and p[2].endswith("W"):
                samples.append((float(p[1].split()[0]), float(p[2].split()[0])))
    except OSError:
        pass
    top = max((w for _, w in samples), default=0)
    busy = [(c, w) for c, w in samples if w > 0.6 * top]
    if not busy:
        return float("nan"), float("nan")
    return statistics.median(c for c, _ in busy), statistics.median(w for _, w in busy)


def mma_cycles(config):
    """The MMAs' cycles per K block of a tile named like 128x256x64/s4/...; nan if unnamed."""
    m = re.match(r"(\d+)x(\d+)x(\d+)", config)
    return int(m.group(1)) * int(m.group(2)) * int(m.group(3)) / MMA_PER_CLOCK if m else float("nan")


def rows(d):
    """Every probe run: dicts of config, ctas, shape, K, us, MHz, W, tiles per CTA, K blocks."""
    out = []
    for f in sorted(glob.glob(os.path.join(d, "probe_*.csv"))):
        tag = os.path.basename(f)[len("probe_"):-len(".csv")]
        smi_mhz, watts = loaded_clock(os.path.join(d, f"clk_{tag}.csv"))
        for r in csv.DictReader(open(f)):
            mhz = float(r.get("sm_mhz") or "nan")
            mhz = smi_mhz if mhz != mhz else mhz
            tiles = int(re.search(r"tiles=(\d+)", r["config"]).group(1))
            ctas = int(re.search(r"ctas=(\d+)", r["config"]).group(1))
            out.append(dict(config=r["config"].split()[0], ctas=ctas, rows=int(r["rows"]), n=int(r["N"]),
                            k=int(r["K"]), us=float(r["engine_us"]), mhz=mhz, watts=watts,
                            per_cta=math.ceil(tiles / ctas), kb=math.ceil(int(r["K"]) / 64),
                            tf=float(r["engine_tflops"]), lt_us=float(r.get("lt_best_us") or "nan"),
                            lt_mhz=float(r.get("lt_best_mhz") or "nan")))
    return out


def fit(points):
    """Least-squares line y = a + b x through (x, y) points: (a, b)."""
    n = len(points)
    mx = sum(x for x, _ in points) / n
    my = sum(y for _, y in points) / n
    sxx = sum((x - mx) ** 2 for x, _ in points)
    b = sum((x - mx) * (y - my) for x, y in points) / sxx
    return my - b * mx, b


def main():
    d = sys.argv[1] if len(sys.argv) > 1 else "out"
    runs = rows(d)
    runs.sort(key=lambda r: (r["config"], -r["ctas"], r["rows"], r["k"]))
    print(f"{'config':<22} {'ctas':>4} {'shape':<17} {'us':>9} {'MHz':>6} {'W':>5} {'cyc/KB':>7} {'MMA/KB':>7} "
          f"{'TF/CTA':>7} {'lt_us':>9} {'lt_MHz':>6}")
    for r in runs:
        cyc = r["us"] * r["mhz"] / (r["per_cta"] * r["kb"])
        shape = f"{r['rows']}x{r['n']}x{r['k']}"
        print(f"{r['config']:<22} {r['ctas']:>4} {shape:<17} {r['us']:>9.1f} {r['mhz']:>6.0f} {r['watts']:>5.0f} "
              f"{cyc:>7.0f} {mma_cycles(r['config']):>7.0f} {r['tf'] / r['ctas']:>7.2f} {r['lt_us']:>9.1f} "
              f"{r['lt_mhz']:>6.0f}")
    print()
    print("8192 x 8192 x K, K = 1024 .. 16384: cycles per tile = per_tile + per_kb x K blocks")
    print(f"{'config':<22} {'ctas':>4} {'per_kb':>7} {'MMA/KB':>7} {'kb/MMA':>7} {'per_tile':>9}")
    groups = {}
    for r in runs:
        if r["rows"] == 8192 and r["n"] == 8192 and r["mhz"] == r["mhz"]:
            groups.setdefault((r["config"], r["ctas"]), []).append(r)
    for (config, ctas), g in sorted(groups.items(), key=lambda kv: (kv[0][0], -kv[0][1])):
        if len({r["kb"] for r in g}) < 2:
            continue
        a, b = fit([(r["kb"], r["us"] * r["mhz"] / r["per_cta"]) for r in g])
        mma = mma_cycles(config)
        print(f"{config:<22} {ctas:>4} {b:>7.0f} {mma:>7.0f} {b / mma:>7.3f} {a:>9.0f}")


if __name__ == "__main__":
    main()
