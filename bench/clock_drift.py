#!/usr/bin/env python3
"""How far one GEMM's time moves while the GPU works: torch.matmul of one shape called back to
back after the GPU has idled, each call timed alone between CUDA events, first without and then
with a 100 MB write (an L2 flush) before each call. Prints the first calls, the medians of
successive windows and the range. A long product under a GPU's power cap runs its first calls at
the top clock and then lower, back and forth (docs/results, thirty-second session: 4650 to 6400 us
for the same kernel at 8192 x 28672 x 8192 on an H100): why auto's candidates and cuBLASLt's timed
algorithms take turns (src/api/tune.c, src/backends/gemm_lt.c). Run nvidia-smi beside it to see
the clock:

    nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw,clocks_event_reasons.active \\
        --format=csv -lms 50 > smi.csv &
    python3 bench/clock_drift.py [--shape 8192,28672,8192] [--calls 300] [--window 25]
"""
import argparse
import statistics
import time

import torch


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shape", default="8192,28672,8192", help="M,N,K of (M x K) @ (K x N), bf16")
    ap.add_argument("--calls", type=int, default=300)
    ap.add_argument("--window", type=int, default=25, help="calls per median printed")
    ap.add_argument("--idle", type=float, default=2.0, help="seconds the GPU idles before each series")
    args = ap.parse_args()
    m, n, k = (int(x) for x in args.shape.split(","))
    gen = torch.Generator(device="cuda").manual_seed(1)
    a = torch.rand((m, k), generator=gen, device="cuda").sub(0.5).to(torch.bfloat16)
    b = torch.rand((n, k), generator=gen, device="cuda").sub(0.5).to(torch.bfloat16).T
    flush = torch.empty(100 << 20, dtype=torch.uint8, device="cuda")
    torch.matmul(a, b)                                     # cuBLAS's set-up, untimed
    print(f"# clock_drift: {m} x {n} x {k} bf16 on {torch.cuda.get_device_name()}, {args.calls} calls per series")
    for flushing in (False, True):
        torch.cuda.synchronize()
        time.sleep(args.idle)
        events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
                  for _ in range(args.calls)]
        t0 = time.time()
        for start, end in events:
            if flushing:
                flush.fill_(1)
            start.record()
            torch.matmul(a, b)
            end.record()
        torch.cuda.synchronize()
        us = [s.elapsed_time(e) * 1e3 for s, e in events]
        windows = [statistics.median(us[i:i + args.window]) for i in range(0, len(us), args.window)]
        print(f"flush={int(flushing)} wall {time.time() - t0:.2f} s; first 10 calls (us): "
              + " ".join(f"{x:.0f}" for x in us[:10]))
        print(f"  medians of {args.window} calls: " + " ".join(f"{x:.0f}" for x in windows))
        print(f"  min {min(us):.0f} median {statistics.median(us):.0f} max {max(us):.0f}")


if __name__ == "__main__":
    main()
