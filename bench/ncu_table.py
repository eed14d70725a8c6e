#!/usr/bin/env python3
"""An ncu CSV (`ncu --csv --metrics ...`, one row per kernel and metric) as a markdown table: one
line per kernel launch, in launch order, with its time, clock, cycles, tensor pipe, L2 and DRAM
bytes, L2 hit rate, and the sectors the SMs read from L2 beside the bytes delivered to them, where
the CSV has them. The GEMM engine's kernels are named by their config
(gemm_cfg's template arguments), cuBLAS's by their own name.

    python3 bench/ncu_table.py ncu.csv [--engine-only]
"""
import argparse
import collections
import csv
import re

COLUMNS = [  # (header, metric, scale, format)
    ("us", "gpu__time_duration.sum", 1e-3, "{:.1f}"),
    ("GHz", "sm__cycles_elapsed.avg.per_second", 1e-9, "{:.2f}"),
    ("SM cycles (max)", "sm__cycles_elapsed.max", 1, "{:.0f}"),
    ("tensor pipe active %", "sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active", 1, "{:.2f}"),
    ("L2 GB", "lts__t_bytes.sum", 1e-9, "{:.2f}"),
    ("DRAM GB", "dram__bytes.sum", 1e-9, "{:.2f}"),
    ("L2 hit %", "lts__t_sector_hit_rate.pct", 1, "{:.1f}"),
    # The feed: sectors the SMs read from L2 against the bytes L2 delivered to them (multicast
    # delivers one read to both CTAs of a pair; docs/results, twentieth session, ncu_pairs_l2.md).
    ("L2 read by SMs M sectors", "lts__t_sectors_srcunit_tex_op_read.sum", 1e-6, "{:.2f}"),
    ("delivered to SMs MB", "l1tex__m_xbar2l1tex_read_bytes.sum", 1e-6, "{:.1f}"),
]


def kernels(path):
    """[(id, name, grid, {metric: value})] in launch order."""
    rows = [r for r in csv.reader(open(path)) if len(r) > 10]
    if not rows:
        return []
    ix = {h: i for i, h in enumerate(rows[0])}
    out = collections.OrderedDict()
    for r in rows[1:]:
        key = r[ix["ID"]]
        if key not in out:
            out[key] = (r[ix["Kernel Name"]], r[ix["Grid Size"]], {})
        out[key][2][r[ix["Metric Name"]]] = float(r[ix["Metric Value"]].replace(",", ""))
    return [(k, n, g, m) for k, (n, g, m) in out.items()]


def short(name):
    m = re.search(r"gemm_cfg<([^>]*)>", name)
    return "engine <" + m.group(1) + ">" if m else name.split("(")[0][:60]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("csv")
    ap.add_argument("--engine-only", action="store_true", help="leave cuBLAS's kernels out")
    args = ap.parse_args()
    ks = [k for k in kernels(args.csv) if not args.engine_only or "gemm_cfg" in k[1]]
    cols = [c for c in COLUMNS if any(c[1] in m for _, _, _, m in ks)]
    print("| # | kernel | grid | " + " | ".join(c[0] for c in cols) + " |")
    print("|---" * (3 + len(cols)) + "|")
    for kid, name, grid, m in ks:
        cells = [c[3].format(m[c[1]] * c[2]) if c[1] in m else "" for c in cols]
        print(f"| {kid} | {short(name)} | {grid} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
