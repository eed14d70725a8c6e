# ce at W = 1 on a build with ce_copy_after_rejected.patch: the shard's copy by a PDL kernel on the
# caller's stream (new) against the copy engine on the copy stream with two events (old:
# AGMM_EXP_CE_COPY_AFTER_MAX=0, read per run), on torch's legacy stream and on a created stream;
# fused and pull beside. torch_bench.py's timer. From the repository root:
#   PYTHONPATH=python AGMM_LIBRARY=build/libagmm.so torchrun --nproc-per-node 1 \
#       docs/results/h100_2026-12-06h/ce_copy_after_probe.py
# (The script as it ran, but for its result check, written here without the tuple test it had.)
import os, sys, types, torch, torch.distributed as dist
sys.path[:0] = ["bench", "python"]
import torch_bench as tb
import agmm.torch as at
torch.cuda.set_device(0)
dist.init_process_group("nccl", device_id=torch.device("cuda", 0))
at.init()
timer = tb.Timer(types.SimpleNamespace(warmup=50, iters=100, no_flush=False))
side = torch.cuda.Stream()
print(torch.cuda.get_device_name(0))
for n in (256, 512, 768, 1024, 1536, 2048, 3072, 4096):
    b = torch.randn(n, n, device="cuda").bfloat16()
    a = at.symm_empty((n, n))
    a.copy_(torch.randn(n, n, device="cuda").bfloat16())
    ref = a.float() @ b.float()
    for be, mode in (("ce", "old"), ("ce", "new"), ("fused", "-"), ("pull", "-"), ("ce", "old"), ("ce", "new")):
        if mode == "old":
            os.environ["AGMM_EXP_CE_COPY_AFTER_MAX"] = "0"
        else:
            os.environ.pop("AGMM_EXP_CE_COPY_AFTER_MAX", None)
        ag, c = at.ag_matmul(a, b, backend=be)
        torch.cuda.synchronize()
        ok = torch.equal(ag, a) and (c.float() - ref).abs().max().item() < 0.05 * ref.abs().max().item()
        def plain():
            return at.ag_matmul(a, b, backend=be)
        r1 = timer(plain)
        with torch.cuda.stream(side):
            r3 = timer(plain)
        print(f"{n} {be:6s} {mode:4s} legacy {r1['median_us']:7.2f}  side {r3['median_us']:7.2f}  ok {ok}", flush=True)
at.finalize()
dist.destroy_process_group()
