#!/usr/bin/env python3
"""torch.matmul on the lab's shapes, timed the way bench/gemm_lab.cu times (the other yardstick).

Per shape: A is (W*M) x K bf16, B = b.T of a contiguous N x K bf16 tensor (the seed's layout, the
lab's default column-major B), values uniform in [-1, 1) (never all zeros: cuBLAS is ~13% faster on
zeros). Every call is timed alone between CUDA events after a 256 MB buffer is written (the L2
flush), after --warmup untimed calls; the median of --reps is reported. The CSV has the lab's
shape keys (shape, W, M, rows, N, K), so bench/gemm_ratio.py can join the two. With --kernels, one
more call per shape runs under torch.profiler and the CSV gets the name of the CUDA kernel it ran
(torch.matmul's cuBLAS pick, to hold against the cuBLASLt algorithms gemm-lab times).

    gemm-lab --list-shapes > shapes.txt
    python3 bench/torch_matmul.py --shapes-file shapes.txt --csv torch.csv
"""
import argparse
import csv
import statistics
import sys

import torch


def read_shapes(path):
    shapes = []
    with open(path) as f:
        for lineno, line in enumerate(f, 1):
            line = line.split("#", 1)[0].replace(",", " ").split()
            if not line:
                continue
            if len(line) != 5:
                sys.exit(f"{path}:{lineno}: want 'label W M N K'")
            label, w, m, n, k = line[0], *map(int, line[1:])
            shapes.append((label, w, m, n, k))
    return shapes


def time_shape(label, w, m, n, k, args, flush):
    rows = w * m
    gen = torch.Generator(device="cuda").manual_seed(rows * 131 + n * 7 + k)
    a = torch.rand(rows, k, device="cuda", dtype=torch.float32, generator=gen).mul_(2).sub_(1).to(torch.bfloat16)
    bt = torch.rand(n, k, device="cuda", dtype=torch.float32, generator=gen).mul_(2).sub_(1).to(torch.bfloat16)
    b = bt.T
    c = torch.empty(rows, n, device="cuda", dtype=torch.bfloat16)
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    for _ in range(args.warmup):
        torch.matmul(a, b, out=c)
    times = []
    for rep in range(args.reps):
        if not args.no_flush:
            flush.fill_(rep & 0xFF)
        start.record()
        torch.matmul(a, b, out=c)
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) * 1000.0)
    if torch.isnan(c).any().item():
        sys.exit(f"torch.matmul gave NaN at {rows}x{n}x{k}")
    return statistics.median(times), kernel_of(lambda: torch.matmul(a, b, out=c)) if args.kernels else ""


def kernel_of(call):
    """The CUDA kernel that takes the longest in one profiled call (the GEMM's own)."""
    from torch.profiler import ProfilerActivity, profile
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        call()
        torch.cuda.synchronize()
    kernels = [e for e in prof.key_averages() if e.device_type == torch.autograd.DeviceType.CUDA]
    if not kernels:
        return "?"
    return max(kernels, key=lambda e: e.device_time_total).key


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shapes-file", required=True, help="'label W M N K' per line (gemm-lab --list-shapes)")
    ap.add_argument("--csv", help="write the results here")
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--no-flush", action="store_true")
    ap.add_argument("--kernels", action="store_true", help="add the CUDA kernel torch.matmul runs (torch.profiler)")
    args = ap.parse_args()
    if not torch.cuda.is_available():
        sys.exit("torch_matmul.py: no CUDA device")
    shapes = read_shapes(args.shapes_file)
    flush = torch.empty(256 << 20, dtype=torch.uint8, device="cuda")
    props = torch.cuda.get_device_properties(0)
    print(f"# torch {torch.__version__} (CUDA {torch.version.cuda}) on {props.name}; torch.matmul bf16, B = b.T of "
          f"N x K; {'L2 flushed (256 MB)' if not args.no_flush else 'no flush'} before each call; median of "
          f"{args.reps} after {args.warmup} warm-ups")
    out = open(args.csv, "w", newline="") if args.csv else None
    writer = csv.writer(out) if out else None
    if writer:
        writer.writerow(["shape", "W", "M", "rows", "N", "K", "torch_us", "torch_tflops"] +
                        (["torch_kernel"] if args.kernels else []))
    print(f"{'shape':8} {'W':>2} {'M':>5} {'rows':>6} {'N':>5} {'K':>5} {'torch_us':>9} {'TF':>6}")
    for label, w, m, n, k in shapes:
        us, kernel = time_shape(label, w, m, n, k, args, flush)
        rows = w * m
        tflops = 2.0 * rows * n * k / us * 1e-6
        print(f"{label:8} {w:2d} {m:5d} {rows:6d} {n:5d} {k:5d} {us:9.1f} {tflops:6.1f} {kernel}", flush=True)
        if writer:
            writer.writerow([label, w, m, rows, n, k, f"{us:.2f}", f"{tflops:.1f}"] + ([kernel] if args.kernels else []))
            out.flush()
    if out:
        out.close()


if __name__ == "__main__":
    main()
