"""The row-parallel matmuls' columns of bench/torch_bench.py (matmul_reduce_scatter,
matmul_all_reduce): every rank multiplies its own A (M, K) by its own B (K, N) and the partial
sums are reduce-scattered (rank r gets its block of rows) or all-reduced.

matmul_reduce_scatter columns: nccl (torch.matmul, then dist.reduce_scatter_tensor: the baseline
frameworks run; M padded to a multiple of W with zero rows where it is not, agmm's row split),
torch_symm_mem (torch.ops.symm_mem.fused_matmul_reduce_scatter; it needs W | M), helion
(examples/distributed/matmul_reduce_scatter.py) and kraken (its fused GEMM + reduce-scatter) when
they import, agmm_<backend>. matmul_all_reduce columns: nccl (torch.matmul, dist.all_reduce),
symm_one_shot (torch.matmul into a symmetric buffer, torch.ops.symm_mem.one_shot_all_reduce),
helion and kraken (their fused GEMM + one-shot all-reduce) when they import, agmm_<backend>.
A is the seed's randn, B the seed's layout (b.T contiguous); agmm's A is a plain tensor (nothing
of it crosses ranks, so nothing is copied)."""
import torch
import torch.distributed as dist

import agmm.torch as at

OPS = ("matmul_reduce_scatter", "matmul_all_reduce")
DECODE_M = (1, 8, 32, 128)
# LLaMA-3 70B at TP 8, 8192 tokens: the MLP's down projection and attention's output projection.
MODEL_SHAPES = [(8192, 8192, 3584), (8192, 8192, 1024)]


def default_shapes(op, cubes):
    """The issue's sweep: decode shapes first for matmul_all_reduce, the seed's cubes, the 70B shapes."""
    decode = [(m, 8192, 3584) for m in DECODE_M] if op == "matmul_all_reduce" else []
    return decode + list(cubes) + MODEL_SHAPES


def peers(op, import_first):
    if op == "matmul_reduce_scatter":
        return {"helion": import_first([("examples.distributed.matmul_reduce_scatter", "helion_matmul_reduce_scatter"),
                                        ("examples.matmul_reduce_scatter", "helion_matmul_reduce_scatter")]),
                "kraken": import_first([("kraken.fused", "gemm_reduce_scatter"),
                                        ("kraken.fused", "gemm_reduce_scatter_ce_persistent")])}
    return {"helion": import_first([("examples.distributed.gemm_one_shot_all_reduce", "helion_gemm_one_shot_all_reduce"),
                                    ("examples.gemm_one_shot_all_reduce", "helion_gemm_one_shot_all_reduce")]),
            "kraken": import_first([("kraken.fused", "gemm_one_shot_all_reduce"),
                                    ("kraken.fused", "gemm_one_shot_all_reduce_fused")])}


def operands(key, gen):
    m, n, k = key
    a = torch.randn((m, k), generator=gen, device="cuda").to(torch.bfloat16)
    b = torch.randn((k, n), generator=gen, device="cuda").to(torch.bfloat16).T.contiguous().T
    return a, b


def columns(op, a, b, args, group_name, peer_fns, absent):
    """{column: (make inputs, call)} (absent: the Absent class of torch_bench.py)."""
    w = dist.get_world_size()
    m = a.shape[0]

    def nccl_rs(a_, b_):
        partial = torch.matmul(a_, b_)
        rows = -(-m // w)                      # agmm's split: blocks of ceil(M/W) rows in rank order
        if rows * w != m:
            partial = torch.cat([partial, partial.new_zeros((rows * w - m, partial.shape[1]))])
        out = partial.new_empty((rows, partial.shape[1]))
        dist.reduce_scatter_tensor(out, partial)
        r = dist.get_rank()
        return out[:max(0, min((r + 1) * rows, m) - min(r * rows, m))]

    def nccl_ar(a_, b_):
        c = torch.matmul(a_, b_)
        dist.all_reduce(c)
        return c

    def symm_rs(a_, b_):
        return torch.ops.symm_mem.fused_matmul_reduce_scatter(a_, b_, "sum", 0, group_name)

    def symm_ar(a_, b_, buf):
        torch.matmul(a_, b_, out=buf)
        return torch.ops.symm_mem.one_shot_all_reduce(buf, "sum", group_name)

    plain = (lambda: (a.clone(), b))
    if op == "matmul_reduce_scatter":
        cols = {"nccl": (plain, nccl_rs)}
        cols["torch_symm_mem"] = (plain, symm_rs) if m % w == 0 else absent("skipped", f"needs W={w} to divide M={m}")
    else:
        cols = {"nccl": (plain, nccl_ar)}

        def make_symm():
            import torch.distributed._symmetric_memory as symm_mem
            buf = symm_mem.empty((m, b.shape[1]), dtype=a.dtype, device=a.device)
            symm_mem.rendezvous(buf, group_name)
            return a.clone(), b, buf
        cols["symm_one_shot"] = (make_symm, symm_ar)
    for name, (fn, why) in peer_fns.items():
        cols[name] = absent("not installed", why) if fn is None else (plain, fn)
    for backend in args.agmm_backends[op]:
        fn = getattr(at, op) if at.is_initialized() else None
        cols[f"agmm_{backend}"] = args.agmm_absent or (plain, lambda a_, b_, name=backend, f=fn: f(a_, b_, backend=name))
    return cols


def tflops(key, us):
    """Per GPU: each rank multiplies (M, K) by (K, N)."""
    m, n, k = key
    return 2.0 * m * n * k / us * 1e-6
