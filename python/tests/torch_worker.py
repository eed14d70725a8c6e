"""One rank of an emulated process world: test_torch.py starts 2 or 3 of these with torchrun on one
GPU (a gloo job: NCCL refuses two ranks on one GPU). agmm.torch.init sees the shared GPU and makes
an emulated world; every backend it runs (ag_matmul, all_reduce, the row-parallel matmuls) is
checked exactly against the gathered inputs. Prints OK, or UNSUPPORTED and exits 77 when this
libagmm cannot join a process world."""
import os
import sys

import torch
import torch.distributed as dist

import agmm
import agmm.torch as at

UNSUPPORTED_EXIT = 77


def all_gather_cpu(t):
    """Every rank's t, concatenated on dim 0, through gloo (in float32: exact for bf16 values)."""
    parts = [torch.empty_like(t, device="cpu", dtype=torch.float32) for _ in range(dist.get_world_size())]
    dist.all_gather(parts, t.float().cpu())
    return torch.cat(parts).to(device=t.device, dtype=t.dtype)


def small_ints(shape, gen):
    return torch.randint(-1, 2, shape, generator=gen, device="cuda").to(torch.bfloat16)


def main():
    seed = int(os.environ["AGMM_TEST_SEED"])
    dist.init_process_group("gloo")
    torch.cuda.set_device(0)
    try:
        at.init(timeout_s=20)
    except agmm.Unsupported as e:
        print(f"UNSUPPORTED: {e}", flush=True)
        return UNSUPPORTED_EXIT
    r = at.rank()
    gen = torch.Generator(device="cuda").manual_seed(seed + r)
    checked = 0
    for backend, why in at.available("ag_matmul").items():
        if why:
            continue
        for m, n, k, col in ((1, 8, 8, False), (7, 264, 72, False), (129, 3, 8, True), (256, 512, 384, True)):
            a = small_ints((m, k), gen)
            b = small_ints((n, k), gen).T if col else small_ints((k, n), gen)
            a_gathered, c = at.ag_matmul(a, b, backend=backend)
            a_ref = all_gather_cpu(a)
            assert torch.equal(a_gathered, a_ref), (backend, m, n, k)
            assert torch.equal(c.double(), a_ref.double() @ b.double()), (backend, m, n, k)
            checked += 1
    for backend, why in at.available("all_reduce").items():
        if why:
            continue
        for dtype in (torch.bfloat16, torch.float32):
            for n in (1, 4093, 16387):
                x = torch.randint(-2, 3, (n,), generator=gen, device="cuda").to(dtype)
                want = all_gather_cpu(x.view(1, -1)).sum(0)
                s = at.symm_empty((n,), dtype)
                s.copy_(x)
                at.all_reduce_(s, backend=backend)
                assert torch.equal(at.all_reduce_(x, backend=backend), want), (backend, dtype, n)
                assert torch.equal(s, want), (backend, dtype, n)
                at.symm_free(s)
                checked += 1
    w = dist.get_world_size()
    for op in ("matmul_reduce_scatter", "matmul_all_reduce"):
        for backend, why in at.available(op).items():
            if why:
                continue
            for m, n, k in ((1, 8, 8), (7, 33, 72), (130, 24, 64)):
                a = small_ints((m, k), gen)
                b = small_ints((n, k), gen).T          # the seed's layout: odd N allowed
                got = getattr(at, op)(a, b, backend=backend)
                a_all = all_gather_cpu(a).double().view(w, m, k)
                b_all = all_gather_cpu(b.contiguous()).double().view(w, k, n)
                want = (a_all @ b_all).sum(0)
                if op == "matmul_reduce_scatter":
                    first, rows = at.reduce_scatter_rows(m)
                    want = want[first:first + rows]
                assert torch.equal(got.double(), want.to(torch.bfloat16).double()), (op, backend, m, n, k)
                checked += 1
    shared = torch.Generator(device="cuda").manual_seed(seed)        # gamma, bias, residual: replicated
    for backend, why in at.available("all_reduce_rmsnorm").items():
        if why:
            continue
        for t, h in ((1, 4096), (2 * at.world_size() + 1, 264), (33, 8192)):
            x = torch.randint(-4, 5, (t, h), generator=gen, device="cuda").to(torch.bfloat16)
            gamma = torch.randn((h,), generator=shared, device="cuda").to(torch.bfloat16)
            bias = torch.randint(-4, 5, (h,), generator=shared, device="cuda").to(torch.bfloat16)
            residual = torch.randint(-4, 5, (t, h), generator=shared, device="cuda").to(torch.bfloat16)
            y, res = at.all_reduce_rmsnorm(x, gamma, bias=bias, residual=residual, backend=backend)
            # Small integers: every sum exact, so r' is exact; y within one bf16 rounding of float64.
            want = (all_gather_cpu(x.view(1, t, h)).float().sum(0) + bias.float() + residual.float()).to(torch.bfloat16)
            assert torch.equal(res, want), (backend, t, h)
            q = want.double()
            y64 = q * torch.rsqrt(q.square().mean(-1, keepdim=True) + float(torch.tensor(1e-6))) * gamma.double()
            assert bool(((y.double() - y64).abs() <= y64.abs() * 2.0 ** -8 * (1 + 2.0 ** -10)).all()), (backend, t, h)
            checked += 1
    try:
        at.ag_matmul(torch.zeros((4 + (r == 1), 8), dtype=torch.bfloat16, device="cuda"),
                     torch.zeros((8, 8), dtype=torch.bfloat16, device="cuda"))
        raise AssertionError("ranks with different M were not refused")
    except ValueError as e:
        assert "disagree on M" in str(e), str(e)
    at.finalize()
    dist.destroy_process_group()
    print(f"OK rank {r}: {checked} cases ({at.__name__})", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
