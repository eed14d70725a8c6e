#!/usr/bin/env python3
"""Engine / best cuBLAS, per shape and per group, from a gemm-lab CSV and a torch_matmul.py CSV.

best cuBLAS = min(cuBLASLt-best of the lab, the lab's cublasGemmEx (CSVs since 2026-12-05 have it),
torch.matmul) per shape (the lab's alone when no torch CSV is given). Groups: the seed shapes per W,
and the model shapes. Prints markdown: one summary table per engine variant the lab ran (config -1
is the policy; "oracle" is the fastest variant per shape, what a perfect policy over these configs
would get), the policy against the same kernel forced by index in the same run (where both ran:
it should be ~1.00), then the per-shape table of the policy (or --config N). Each summary also has
the geomean against the lab's own cuBLAS alone ("same rounds": cuBLASLt's best and cublasGemmEx,
torch.matmul's route and kernel, timed in the engine's rounds), since torch.matmul's script runs
the GPU in another state (docs/results, thirtieth session: up to +-15% on the long shapes), and a
row of the large shapes issue 20 holds to 1.02 (>= 4096 rows, N = K >= 2048).

    python3 bench/gemm_ratio.py lab.csv [torch.csv] [--config N] [--per-shape]
    python3 bench/gemm_ratio.py lab.csv --policy-table --device H100   # measured rows for gemm_configs.h
    python3 bench/gemm_ratio.py lab.csv torch.csv --yardstick   # cuBLASLt's best against cuBLAS and torch

    python3 bench/gemm_ratio.py lab.csv --waves [--cublaslt-h PATH]   # how full the last wave is

--waves counts, per shape, the tiles of the engine's config (the policy's, or --config N) and of
cuBLASLt's fastest algorithm (its tile id named from cublasLt.h's cublasLtMatmulTile_t, read as
N x rows) per wave of --sms SMs, and prints how busy the last wave is, and the means.
--yardstick compares the two halves of the yardstick per shape: the lab's fastest cuBLASLt algorithm
(its name: algorithm id, tile, split-K, stages, cluster; gemm-lab --lt-clusters adds forced cluster
shapes) against the lab's cublasGemmEx and torch.matmul (and the kernel it ran, from torch_matmul.py
--kernels).
"""
import argparse
import collections
import csv
import math
import os
import re
import sys


def key(row):
    return (row["shape"], int(row["W"]), int(row["rows"]), int(row["N"]), int(row["K"]))


def group_of(k):
    return f"seed W={k[1]}" if k[0] == "seed" else "models"


def config_name(row):
    return row["config"].split()[0]  # "128x256x64/s4 ctas=132 tiles=1024" -> the config's name


def load(lab_path, torch_path):
    lab = collections.defaultdict(dict)  # shape key -> {config_req: row}
    with open(lab_path) as f:
        for row in csv.DictReader(f):
            lab[key(row)][int(row["config_req"])] = row
    torch_us = {}
    if torch_path:
        with open(torch_path) as f:
            for row in csv.DictReader(f):
                torch_us[key(row)] = float(row["torch_us"])
                TORCH_KERNEL[key(row)] = row.get("torch_kernel", "")
    return lab, torch_us


TORCH_KERNEL = {}  # shape key -> the kernel torch.matmul ran (torch_matmul.py --kernels), or ""


def print_yardstick(lab, torch_us):
    """Per shape: cuBLASLt's top1 and best (with its name) against the lab's cublasGemmEx and
    torch.matmul, and who wins."""
    print("\n## the yardstick: cuBLASLt best (gemm-lab) against cublasGemmEx (gemm-lab) and torch.matmul\n")
    print("| rows x N x K | Lt top1 us | Lt best us | Lt best | cublasGemmEx us | torch us | torch kernel | "
          "GemmEx / Lt best | torch / Lt best |")
    print("|---|---|---|---|---|---|---|---|---|")
    ratios, blas_ratios = [], []
    for k, rows in sorted(lab.items(), key=lambda kv: (order(group_of(kv[0])), kv[0][2] * kv[0][3])):
        r = next(iter(rows.values()))
        t, b = torch_us.get(k), blas_us(r)
        if t is None and b is None:
            continue
        best = float(r["lt_best_us"])
        if t is not None:
            ratios.append(t / best)
        if b is not None:
            blas_ratios.append(b / best)
        print(f"| {k[2]}x{k[3]}x{k[4]} | {float(r['lt_top1_us']):.1f} | {best:.1f} | {r.get('lt_best_name', '')} | "
              f"{'' if b is None else f'{b:.1f}'} | {'' if t is None else f'{t:.1f}'} | {TORCH_KERNEL.get(k, '')[:90]} | "
              f"{'' if b is None else f'{b / best:.3f}'} | {'' if t is None else f'{t / best:.3f}'} |")
    for name, xs in (("cublasGemmEx", blas_ratios), ("torch", ratios)):
        if xs:
            print(f"\n{name} / cuBLASLt best: geomean {geomean(xs):.3f}, faster on {sum(x < 1 for x in xs)} of {len(xs)}")


def blas_us(row):
    """The lab's cublasGemmEx time (torch.matmul's route, timed in the lab's rounds), or None."""
    x = float(row.get("blas_us") or "nan")
    return None if math.isnan(x) else x


def best_cublas(k, rows, torch_us):
    any_row = next(iter(rows.values()))
    cands = [(float(any_row["lt_best_us"]), "lt"), (blas_us(any_row), "blas"), (torch_us.get(k), "torch")]
    return min((c for c in cands if c[0] is not None), key=lambda c: c[0])


def ok(row):
    return row["nans"] == "0" and float(row["rel_err"]) <= 1e-2


def fastest(rows):
    """The fastest correct forced config's row of one shape ({config_req: row}), or None."""
    good = [r for c, r in rows.items() if c >= 0 and ok(r)]
    return min(good, key=lambda r: float(r["engine_us"])) if good else None


def geomean(xs):
    return math.exp(sum(map(math.log, xs)) / len(xs))


def summarise(lab, torch_us, variant):
    """variant: a config_req, or 'oracle'. Returns {group: [(ratio, key, engine_us, best_us, who)]}."""
    groups = collections.defaultdict(list)
    for k, rows in lab.items():
        if variant == "oracle":
            good = [r for r in rows.values() if ok(r)]
            if not good:
                continue
            row = min(good, key=lambda r: float(r["engine_us"]))
        else:
            row = rows.get(variant)
            if row is None or not ok(row):
                continue
        best, who = best_cublas(k, rows, torch_us)
        rounds, _ = best_cublas(k, rows, {})
        eng = float(row["engine_us"])
        groups[group_of(k)].append((eng / best, k, eng, best, who, row, eng / rounds))
    return groups


def large(k):
    """Issue 20's large shapes: at least 4096 rows, N = K >= 2048."""
    return k[2] >= 4096 and k[3] == k[4] and k[3] >= 2048


def order(g):
    return (0, int(g.split("=")[1])) if g.startswith("seed") else (1, 0)


def print_summary(title, groups):
    print(f"\n### {title}\n")
    print("| group | shapes | geomean engine/best-cuBLAS | worst (shape) | <= 1.00 | <= 1.10 | best is torch | "
          "best is cublasGemmEx | same rounds: geomean, worst |")
    print("|---|---|---|---|---|---|---|---|---|")
    rows_of = [(g, groups[g]) for g in sorted(groups, key=order)]
    every = [x for r in groups.values() for x in r]
    rows_of += [("all", every), ("large (>= 4096 rows, N = K >= 2048)", [x for x in every if large(x[1])])]
    for g, r in rows_of:
        if not r:
            continue
        worst = max(r, key=lambda x: x[0])
        wk = worst[1]
        print(f"| {g} | {len(r)} | {geomean([x[0] for x in r]):.3f} | {worst[0]:.3f} ({wk[2]}x{wk[3]}x{wk[4]}) | "
              f"{sum(x[0] <= 1.0 for x in r)} | {sum(x[0] <= 1.1 for x in r)} | {sum(x[4] == 'torch' for x in r)} | "
              f"{sum(x[4] == 'blas' for x in r)} | {geomean([x[6] for x in r]):.3f}, {max(x[6] for x in r):.3f} |")


def print_per_shape(title, groups, torch_us):
    print(f"\n### {title}: per shape\n")
    print("| group | rows x N x K | engine config | engine us | cuBLASLt top1 us | cuBLASLt best us (algo) "
          "| cublasGemmEx us | torch us | engine/best |")
    print("|---|---|---|---|---|---|---|---|---|")
    for g in sorted(groups, key=order):
        for ratio, k, eng, best, who, row, _ in sorted(groups[g], key=lambda x: x[1][2] * x[1][3]):
            t = torch_us.get(k)
            print(f"| {g} | {k[2]}x{k[3]}x{k[4]} | {config_name(row)} | {eng:.1f} | {float(row['lt_top1_us']):.1f} | "
                  f"{float(row['lt_best_us']):.1f} ({row['lt_best_algo']}) | "
                  f"{'' if blas_us(row) is None else f'{blas_us(row):.1f}'} | {'' if t is None else f'{t:.1f}'} | "
                  f"**{ratio:.3f}** |")


def print_self_check(lab):
    """The policy against the very kernel it ran, forced by index in the same run (same config,
    CTAs and tiles): the lab's noise, and what the order of the variants costs (a kernel timed right
    after itself runs faster on small shapes: docs/results, eighteenth session), which the same
    kernel should not show. Buckets by the shape's cuBLASLt best time."""
    pairs = []
    for rows in lab.values():
        pol = rows.get(-1)
        if pol is None or not ok(pol):
            continue
        same = [r for c, r in rows.items() if c >= 0 and ok(r) and r["config"] == pol["config"]]
        if same:
            pairs.append((float(pol["lt_best_us"]), float(pol["engine_us"]) / float(same[0]["engine_us"])))
    if not pairs:
        return
    print("\n### the policy / the same kernel forced by index, same run\n")
    print("| shapes (cuBLASLt best) | shapes | geomean | min | max |")
    print("|---|---|---|---|---|")
    for lo, hi, name in ((0, 30, "under 30 us"), (30, math.inf, "30 us and over"), (0, math.inf, "all")):
        r = [x for t, x in pairs if lo <= t < hi]
        if r:
            print(f"| {name} | {len(r)} | {geomean(r):.3f} | {min(r):.3f} | {max(r):.3f} |")


def library_configs():
    """The config names gemm_configs.h's AGMM_GEMM_CONFIGS has now: a lab run may hold configs tried
    and dropped since, which neither table may name."""
    text = open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "src/kernels/gemm/gemm_configs.h")).read()
    body = re.search(r"#define AGMM_GEMM_CONFIGS\(X\)(.*?)(?:\n\n|\Z)", text, re.S).group(1)
    return set(re.findall(r'X\([^)]*"([^"]+)"\)', body))


def policy_table(lab, device):
    """The fastest correct engine config of the library's per measured shape, as rows of
    AGMM_GEMM_MEASURED_<device>."""
    known = library_configs()
    print(f"#define AGMM_GEMM_MEASURED_{device}(X) \\")
    lines = []
    for k, rows in sorted(lab.items(), key=lambda kv: kv[0][2:]):
        best = fastest({c: r for c, r in rows.items() if config_name(r) in known})
        if best:
            lines.append(f'    X({k[2]}, {k[3]}, {k[4]}, "{config_name(best)}")')
    print(" \\\n".join(lines))


def tile_names(header):
    """cublasLtMatmulTile_t's values -> (n, rows) from cublasLt.h: 'CUBLASLT_MATMUL_TILE_112x128' -> (112, 128)."""
    text = open(header).read()
    body = re.search(r"typedef enum \{(.*?)\} cublasLtMatmulTile_t;", text, re.S).group(1)
    names, value = {}, 0
    for line in body.splitlines():
        line = line.split("/*")[0].strip().rstrip(",")
        if not line.startswith("CUBLASLT_MATMUL_TILE"):
            continue
        name, _, given = (part.strip() for part in line.partition("="))
        if given:
            value = int(given) if given.lstrip("-").isdigit() else names[given][2]
        dims = re.match(r"CUBLASLT_MATMUL_TILE_(\d+)x(\d+)$", name)
        names[name] = (int(dims.group(1)), int(dims.group(2)), value) if dims else (0, 0, value)
        value += 1
    return {v: (a, b) for a, b, v in names.values() if a}


def last_wave(tiles, sms):
    waves = -(-tiles // sms)
    return tiles / (waves * sms)


def print_waves(lab, config, header, sms):
    ids = tile_names(header)
    print(f"\n## the last wave: tiles per wave of {sms} SMs (cuBLASLt's tile read as N x rows)\n")
    print("| rows x N x K | engine config | engine tiles | last wave | cuBLASLt tile | tiles | last wave |")
    print("|---|---|---|---|---|---|---|")
    eng, lt = [], []
    for k, rows in sorted(lab.items(), key=lambda kv: (order(group_of(kv[0])), kv[0][2] * kv[0][3])):
        row = rows.get(config)
        tile = re.search(r"tile=(\d+)", row.get("lt_best_name", "") if row else "")
        if row is None or tile is None or int(tile.group(1)) not in ids:
            continue
        r, n = k[2], k[3]
        bm, bn = (int(x) for x in config_name(row).split("x")[:2])
        tn, tr = ids[int(tile.group(1))]
        et, lt_tiles = -(-r // bm) * -(-n // bn), -(-r // tr) * -(-n // tn)
        eng.append(last_wave(et, sms))
        lt.append(last_wave(lt_tiles, sms))
        print(f"| {r}x{n}x{k[4]} | {config_name(row)} | {et} | {eng[-1]:.2f} | {tn}x{tr} | {lt_tiles} | {lt[-1]:.2f} |")
    if eng:
        print(f"\nmean last-wave occupancy: engine {sum(eng) / len(eng):.3f}, cuBLASLt's best {sum(lt) / len(lt):.3f} "
              f"({len(eng)} shapes)")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("lab_csv")
    ap.add_argument("torch_csv", nargs="?")
    ap.add_argument("--config", type=int, default=-1, help="the variant of the per-shape table (-1: the policy)")
    ap.add_argument("--per-shape", action="store_true", help="also print the per-shape table")
    ap.add_argument("--policy-table", action="store_true", help="print AGMM_GEMM_MEASURED_<device>'s rows and stop")
    ap.add_argument("--device", choices=("H100", "H200"), default="H200",
                    help="for --policy-table: the device kind the run was on (policy.h's agmm_gemm_device)")
    ap.add_argument("--yardstick", action="store_true", help="cuBLASLt's best against torch.matmul per shape, and stop")
    ap.add_argument("--waves", action="store_true", help="how full the last wave is, engine and cuBLASLt, and stop")
    ap.add_argument("--cublaslt-h", default="/usr/local/cuda/include/cublasLt.h", help="for --waves: tile ids' names")
    ap.add_argument("--sms", type=int, default=132, help="for --waves: the GPU's SMs (an H200's)")
    args = ap.parse_args()
    lab, torch_us = load(args.lab_csv, args.torch_csv)
    if not lab:
        sys.exit(f"{args.lab_csv}: no rows")
    if args.policy_table:
        policy_table(lab, args.device)
        return
    if args.waves:
        print_waves(lab, args.config, args.cublaslt_h, args.sms)
        return
    if args.yardstick:
        if not torch_us:
            sys.exit("--yardstick needs the torch CSV")
        print_yardstick(lab, torch_us)
        return
    yard = "min(cuBLASLt best of 16, torch.matmul)" if torch_us else "cuBLASLt best of 16"
    print(f"## engine / best cuBLAS ({yard})")
    variants = sorted({c for rows in lab.values() for c in rows})
    names = {}
    for rows in lab.values():
        for c, r in rows.items():
            names.setdefault(c, "policy" if c < 0 else config_name(r))
    for c in variants:
        print_summary(f"config {c}: {names[c]}", summarise(lab, torch_us, c))
    if len(variants) > 1:
        print_summary("oracle: the fastest engine variant per shape", summarise(lab, torch_us, "oracle"))
        print_self_check(lab)
    if args.per_shape:
        print_per_shape(f"config {args.config}", summarise(lab, torch_us, args.config), torch_us)


if __name__ == "__main__":
    main()
