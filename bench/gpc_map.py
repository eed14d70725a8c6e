#!/usr/bin/env python3
"""Which SMs share a GPC, measured: a cluster never spans GPCs, so every cluster that
build/sm-placement (bench/sm_placement.cu) places names SMs of one GPC. Runs it with clusters of
16, 9 and 8 (each CTA holding its SM 200 us, so all are resident at once), joins the SMs that any
cluster put together, and repeats that REPEATS times: the map is the hardware's (its floorsweeping)
if every repeat finds the same one. On an H100 80GB HBM3 (twenty-second session) 7 GPCs hold a
cluster of 16 and at most 15 clusters of 8 fit, so it expects 7 GPCs of 16-18 SMs and one smaller;
SMs that no cluster shared with another are printed as their own group.

    make sm-placement && python3 bench/gpc_map.py [--bin build/sm-placement] [--repeats 3]

Prints one line per GPC (its SMs), then whether the repeats agree. What the engine's pairs would
need from it: docs/gemm_engine.md, "Multicast"."""
import argparse
import subprocess
import sys

# (cluster size, grid): more CTAs than fit at once, so every GPC gets clusters of each size.
RUNS = ((16, 16 * 8), (9, 9 * 14), (8, 8 * 16))


def clusters(binary, size, grid):
    out = subprocess.run([binary, str(grid), str(size)], check=True, capture_output=True, text=True).stdout
    groups = {}
    for line in out.splitlines():
        if line.startswith("#"):
            continue
        _, _, cid, smid = (int(x) for x in line.split())
        groups.setdefault(cid, set()).add(smid)
    return list(groups.values())


def gpc_map(binary):
    parent = {}

    def find(x):
        parent.setdefault(x, x)
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    for size, grid in RUNS:
        for group in clusters(binary, size, grid):
            first, *rest = sorted(group)
            for sm in rest:
                parent[find(sm)] = find(first)
            find(first)
    gpcs = {}
    for sm in parent:
        gpcs.setdefault(find(sm), []).append(sm)
    return sorted(sorted(g) for g in gpcs.values())


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--bin", default="build/sm-placement")
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    maps = [gpc_map(args.bin) for _ in range(args.repeats)]
    same = all(m == maps[0] for m in maps)
    for i, g in enumerate(maps[0]):
        print(f"GPC {i}: {len(g)} SMs: {' '.join(map(str, g))}")
    print(f"{sum(len(g) for g in maps[0])} SMs in {len(maps[0])} groups; "
          + ("every repeat found the same map" if same else f"the repeats DIFFER: {[len(m) for m in maps]} groups"))
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
