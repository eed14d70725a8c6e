#!/usr/bin/env python3
"""A tensor-parallel MLP block with agmm, to copy: the sequence-parallel input's rows all-gathered
into the column-parallel up projection (agmm.torch.ag_matmul), GELU, and the row-parallel down
projection whose partial sums are reduce-scattered back to each rank's rows
(agmm.torch.matmul_reduce_scatter). Checked against the same block in plain torch on one GPU,
and timed against the plain-torch tensor-parallel block (all_gather_into_tensor, matmul, GELU,
matmul, reduce_scatter_tensor), both in this one job, taking turns.

    torchrun --nproc-per-node W examples/tp_mlp.py [--tokens 8192 --hidden 8192 --ffn 28672]
                                                   [--ag-backend auto --rs-backend auto]

Default shape: LLaMA-3 70B's MLP (hidden 8192, FFN 28672) over 8192 tokens. W must divide the
tokens and the FFN. Needs torch with CUDA and the agmm package (`pip install ./python` after
`make`). Rank 0 prints the check, the backend each agmm op ran (auto's choice, unless forced) and
the times; exit status 1 if the check fails.
"""
import argparse
import os
import statistics
import sys

os.environ.setdefault("NCCL_NVLS_ENABLE", "0")              # never NVLink multicast

import torch                                               # noqa: E402
import torch.distributed as dist                           # noqa: E402
import torch.nn.functional as F                            # noqa: E402

import agmm.torch as at                                    # noqa: E402


def agmm_block(x_shard, w_up, w_down, ag_backend="auto", rs_backend="auto"):
    """x_shard: this rank's (T/W, H) rows; w_up: (F/W, H) and w_down: (H, F/W), this rank's slices.
    Returns this rank's (T/W, H) rows of the block's output."""
    _, h = at.ag_matmul(x_shard, w_up.T, backend=ag_backend)                  # (T, F/W): all rows
    return at.matmul_reduce_scatter(F.gelu(h), w_down.T, backend=rs_backend)  # partials scattered


def torch_block(x_shard, w_up, w_down):
    """The same block in plain torch.distributed: what a framework runs."""
    w = dist.get_world_size()
    x = x_shard.new_empty((w * x_shard.shape[0], x_shard.shape[1]))
    dist.all_gather_into_tensor(x, x_shard)
    partial = F.gelu(x @ w_up.T) @ w_down.T
    out = partial.new_empty((partial.shape[0] // w, partial.shape[1]))
    dist.reduce_scatter_tensor(out, partial)
    return out


def time_us(fns, warmup, iters, rounds=5):
    """{name: (median, mean)} of `iters` calls of each of fns ({name: fn}) after `warmup`, CUDA
    events on the current stream. The functions take turns, in `rounds` rounds of iters/rounds
    calls each, the order alternating: a GPU's clock moves under a long block's load (an H100 at
    its power cap drops from 1980 MHz to 1100-1425 MHz and back, docs/results), and one block timed
    after the other would meet another clock."""
    for fn in fns.values():
        for _ in range(warmup):
            fn()
    dist.barrier()
    torch.cuda.synchronize()
    per_round = max(1, iters // rounds)
    events = {name: [] for name in fns}
    for r in range(rounds):
        for name in (list(fns) if r % 2 == 0 else list(fns)[::-1]):
            for _ in range(per_round):
                start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                start.record()
                fns[name]()
                end.record()
                events[name].append((start, end))
    torch.cuda.synchronize()
    out = {}
    for name, evs in events.items():
        times = [s.elapsed_time(e) * 1e3 for s, e in evs]
        out[name] = (statistics.median(times), statistics.fmean(times))
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tokens", type=int, default=8192)
    ap.add_argument("--hidden", type=int, default=8192)
    ap.add_argument("--ffn", type=int, default=28672)
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--iters", type=int, default=50)
    ap.add_argument("--ag-backend", default="auto", help="ag_matmul's backend (default: auto's choice)")
    ap.add_argument("--rs-backend", default="auto", help="matmul_reduce_scatter's backend (default: auto's choice)")
    args = ap.parse_args()
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    torch.cuda.set_device(local_rank)
    dist.init_process_group("nccl", device_id=torch.device("cuda", local_rank))
    rank, w = dist.get_rank(), dist.get_world_size()
    if args.tokens % w or args.ffn % w:
        sys.exit(f"tp_mlp.py: W={w} must divide --tokens {args.tokens} and --ffn {args.ffn}")
    at.init()

    # The whole block's weights and input, the same on every rank (one seed); each rank keeps its slices.
    gen = torch.Generator(device="cuda").manual_seed(1234)
    t, h, f = args.tokens, args.hidden, args.ffn
    x_full = torch.randn((t, h), generator=gen, device="cuda").to(torch.bfloat16)
    w_up_full = torch.randn((f, h), generator=gen, device="cuda").div(h ** 0.5).to(torch.bfloat16)
    w_down_full = torch.randn((h, f), generator=gen, device="cuda").div(f ** 0.5).to(torch.bfloat16)
    rows, cols = t // w, f // w
    x_shard = x_full[rank * rows:(rank + 1) * rows].contiguous()
    w_up = w_up_full[rank * cols:(rank + 1) * cols].contiguous()
    w_down = w_down_full[:, rank * cols:(rank + 1) * cols].contiguous()

    # The check: this rank's rows of the block computed on one GPU in plain torch.
    y = agmm_block(x_shard, w_up, w_down, args.ag_backend, args.rs_backend)
    ref = (F.gelu(x_full @ w_up_full.T) @ w_down_full.T)[rank * rows:(rank + 1) * rows]
    err = ((y.double() - ref.double()).norm() / ref.double().norm()).item()
    worst = torch.tensor([err], device="cuda")
    dist.all_reduce(worst, op=dist.ReduceOp.MAX)
    del x_full, w_up_full, w_down_full, ref
    torch.cuda.empty_cache()

    times = time_us({"agmm": lambda: agmm_block(x_shard, w_up, w_down, args.ag_backend, args.rs_backend),
                     "torch": lambda: torch_block(x_shard, w_up, w_down)}, args.warmup, args.iters)
    (agmm_med, agmm_mean), (torch_med, torch_mean) = times["agmm"], times["torch"]
    ok = worst.item() <= 2e-2
    if rank == 0:
        flop = 2 * 2 * t * h * (f // w)            # per GPU: two GEMMs of T x H x F/W
        print(f"# tp_mlp: W={w} tokens={t} hidden={h} ffn={f}; {at.describe()}")
        print(f"check: every rank's rows vs the block on one GPU in plain torch: max rel_fro {worst.item():.2e} "
              f"({'ok' if ok else 'WRONG'}, tolerance 2e-2)")
        for key, backend in at.plans():
            print(f"agmm plan {key}: runs {backend}")
        print(f"{'block':>22} {'median_us':>10} {'mean_us':>10} {'TFLOP/s':>8}")
        for name, med, mean in (("agmm (ag_matmul+rs)", agmm_med, agmm_mean), ("torch TP", torch_med, torch_mean)):
            print(f"{name:>22} {med:10.1f} {mean:10.1f} {flop / med * 1e-6:8.1f}")
        print(f"agmm / torch (median): {agmm_med / torch_med:.3f}")
    at.finalize()
    dist.destroy_process_group()
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
