#!/usr/bin/env python3
"""bench/engine_probe.sh's table: per config, CTA budget and shape, the engine's median time, the SM
clock while loaded (the samples with power above 60% of the run's highest), and the cycles per K
block of one CTA: time x clock / (ceil(tiles / CTAs) x K/64). The same cycles at fewer CTAs: a limit
of each SM's own; fewer: a shared one (the L2, HBM).

    python3 bench/engine_probe.py OUT_DIR
"""
import csv
import glob
import math
import os
import re
import statistics
import sys


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


def main():
    d = sys.argv[1] if len(sys.argv) > 1 else "out"
    print(f"{'config':<22} {'ctas':>4} {'shape':<16} {'us':>9} {'MHz':>6} {'W':>5} {'cyc/KB':>7} {'TF/CTA':>7}")
    for f in sorted(glob.glob(os.path.join(d, "probe_*_*.csv"))):
        m = re.match(r".*probe_(\d+)_(\d+)\.csv$", f)
        if not m:
            continue
        mhz, watts = loaded_clock(os.path.join(d, f"clk_{m.group(1)}_{m.group(2)}.csv"))
        for r in csv.DictReader(open(f)):
            tiles = int(re.search(r"tiles=(\d+)", r["config"]).group(1))
            ctas = int(re.search(r"ctas=(\d+)", r["config"]).group(1))
            us, kb = float(r["engine_us"]), math.ceil(int(r["K"]) / 64)
            cyc = us * mhz / (math.ceil(tiles / ctas) * kb)
            shape = f"{r['rows']}x{r['N']}x{r['K']}"
            print(f"{r['config'].split()[0]:<22} {ctas:>4} {shape:<16} {us:>9.1f} {mhz:>6.0f} {watts:>5.0f} "
                  f"{cyc:>7.0f} {float(r['engine_tflops']) / ctas:>7.2f}")


if __name__ == "__main__":
    main()
