# ag_matmul's ce, fused, pull and nccl at W = 1 under torch_bench.py's timer (the seed's method:
# L2 flush, events, the host queued ahead), three ways: on torch's legacy default stream (as
# torch_bench.py runs), forked onto a created stream and joined back, and all on a created stream.
# From the repository root, with libagmm.so built:
#   PYTHONPATH=python AGMM_LIBRARY=build/libagmm.so torchrun --nproc-per-node 1 \
#       docs/results/h100_2026-12-06d/legacy_stream_probe.py
import sys, types, torch, torch.distributed as dist
sys.path[:0] = ["bench", "python"]
import torch_bench as tb
import agmm.torch as at
torch.cuda.set_device(0)
dist.init_process_group("nccl", device_id=torch.device("cuda", 0))
at.init()
timer = tb.Timer(types.SimpleNamespace(warmup=50, iters=100, no_flush=False))
side = torch.cuda.Stream()
for n in (256, 512, 1024, 2048):
    b = torch.randn(n, n, device="cuda").bfloat16()
    a = at.symm_empty((n, n))
    a.copy_(torch.randn(n, n, device="cuda").bfloat16())
    for be in ("ce", "fused", "pull", "nccl"):
        def plain():
            return at.ag_matmul(a, b, backend=be)
        def fork():
            cur = torch.cuda.current_stream()
            side.wait_stream(cur)
            with torch.cuda.stream(side):
                r = at.ag_matmul(a, b, backend=be)
            cur.wait_stream(side)
            return r
        r1 = timer(plain)
        r2 = timer(fork)
        with torch.cuda.stream(side):
            r3 = timer(plain)
        print(f"{n} {be:6s} legacy {r1['median_us']:6.2f}  fork {r2['median_us']:6.2f}  side {r3['median_us']:6.2f}", flush=True)
at.finalize()
dist.destroy_process_group()
