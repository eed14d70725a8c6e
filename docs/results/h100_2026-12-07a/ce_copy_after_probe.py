# ce and fused at W = 1 under torch_bench.py's timer (the seed's method: L2 flush, events, the host
# queued ahead), on torch's legacy default stream and on a created one; each result checked (the
# gathered A equal to the shard, C within 2e-2 of fp32). Run once per library build, from the
# repository root:
#   AGMM_LIBRARY=build/libagmm.so PYTHONPATH=python torchrun --nproc-per-node 1 \
#       docs/results/h100_2026-12-07a/ce_copy_after_probe.py
# (The script as it ran, but for its result check, written here without the tuple test it had.)
import sys, types, torch, torch.distributed as dist
sys.path[:0] = ["bench", "python"]
import torch_bench as tb
import agmm.torch as at
torch.cuda.set_device(0)
dist.init_process_group("nccl", device_id=torch.device("cuda", 0))
at.init()
timer = tb.Timer(types.SimpleNamespace(warmup=50, iters=100, no_flush=False))
side = torch.cuda.Stream()
for n in (256, 512, 768, 1024, 1536, 2048, 3072, 4096):
    b = torch.randn(n, n, device="cuda").bfloat16()
    a = at.symm_empty((n, n))
    a.copy_(torch.randn(n, n, device="cuda").bfloat16())
    ref = a.float() @ b.float()
    for be in ("ce", "fused"):
        def plain():
            return at.ag_matmul(a, b, backend=be)
        r1 = timer(plain)
        with torch.cuda.stream(side):
            r3 = timer(plain)
        ag, c = at.ag_matmul(a, b, backend=be)
        ok = torch.allclose(c.float(), ref, rtol=2e-2, atol=2e-2 * n ** 0.5) and torch.equal(ag, a)
        print(f"{n} {be:6s} legacy {r1['median_us']:7.2f}  side {r3['median_us']:7.2f}  ok {ok}", flush=True)
at.finalize()
dist.destroy_process_group()
