# fused at W = 1 on a build with fused_w1_modes_rejected.patch, under torch_bench.py's timer, on
# torch's legacy default stream and on a created stream; the mode comes from AGMM_EXP_FUSED_W1
# (read at plan creation: one process per mode). From the repository root:
#   for m in 0 1 2; do AGMM_EXP_FUSED_W1=$m PYTHONPATH=python AGMM_LIBRARY=build/libagmm.so \
#       torchrun --nproc-per-node 1 docs/results/h100_2026-12-06h/fused_w1_probe.py; done
import os, sys, types, torch, torch.distributed as dist
sys.path[:0] = ["bench", "python"]
import torch_bench as tb
import agmm.torch as at
torch.cuda.set_device(0)
dist.init_process_group("nccl", device_id=torch.device("cuda", 0))
at.init()
timer = tb.Timer(types.SimpleNamespace(warmup=50, iters=100, no_flush=False))
side = torch.cuda.Stream()
mode = os.environ.get("AGMM_EXP_FUSED_W1", "0")
for n in (256, 512, 1024, 1408, 2048, 2560, 4096):
    b = torch.randn(n, n, device="cuda").bfloat16()
    a = at.symm_empty((n, n))
    a.copy_(torch.randn(n, n, device="cuda").bfloat16())
    ref = a.float() @ b.float()
    ag, c = at.ag_matmul(a, b, backend="fused")
    torch.cuda.synchronize()
    ok = torch.equal(ag, a) and (c.float() - ref).abs().max().item() < 0.05 * ref.abs().max().item()
    f = lambda: at.ag_matmul(a, b, backend="fused")
    r1 = timer(f)
    with torch.cuda.stream(side):
        r3 = timer(f)
    print(f"mode {mode} {n} fused legacy {r1['median_us']:7.2f}  side {r3['median_us']:7.2f}  ok {ok}", flush=True)
at.finalize()
dist.destroy_process_group()
