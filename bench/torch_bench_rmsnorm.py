"""torch_bench.py's all_reduce_rmsnorm columns (issue 22): the all-reduce that ends a tensor-parallel
layer, then bias, residual and RMSNorm. Rows are T x H (--tokens x --hidden), bf16, x different per
rank; bias, residual and gamma the same on every rank.

Columns, all computing y = RMSNorm(sum_r x_r + bias + residual) * gamma:
  torch          the baseline: dist.all_reduce(x), + bias + residual, torch.nn.functional.rms_norm
                 (returns y and the new residual; its golden y checks every other column)
  kraken_oneshot / kraken_twoshot   kraken.fused's {one,two}_shot_all_reduce_bias_rms_norm, when
                 kraken imports: their "bias" is full-shape, so it is given bias + residual (made
                 before timing): the same reads as ours but no residual written out
  helion_oneshot / helion_twoshot   Helion's examples/distributed/allreduce_bias_rmsnorm.py, when
                 it imports: it takes no residual, so rank 0's x holds x_0 + residual (made before
                 timing): the same sum, without the residual's read or write
  agmm_<backend> agmm.torch.all_reduce_rmsnorm, x in symm_empty memory (--agmm-input copy: a plain
                 tensor copied in), returning y and the new residual
--no-residual drops the residual everywhere (then Helion's and kraken's inputs are the plain ones).
Every column's first y is checked against torch's within a relative Frobenius error of 1e-2."""
import torch
import torch.distributed as dist

import agmm.torch as at

TOKENS = [1, 8, 32, 128, 512, 2048]
HIDDEN = [4096, 8192]


def add_options(ap):
    ap.add_argument("--tokens", default=",".join(map(str, TOKENS)), help="all_reduce_rmsnorm rows T, e.g. 1,8,128")
    ap.add_argument("--hidden", default=",".join(map(str, HIDDEN)), help="all_reduce_rmsnorm columns H (every T "
                    "with every H)")
    ap.add_argument("--eps", type=float, default=1e-6, help="all_reduce_rmsnorm's epsilon")
    ap.add_argument("--no-residual", action="store_true", help="all_reduce_rmsnorm without a residual")


def keys(args):
    return [(int(t), int(h)) for t in args.tokens.split(",") for h in args.hidden.split(",")]


def peers(import_first):
    return {
        "kraken_oneshot": import_first([("kraken.fused", "one_shot_all_reduce_bias_rms_norm"),
                                        ("kraken.all_reduce_fusion", "one_shot_all_reduce_bias_rms_norm")]),
        "kraken_twoshot": import_first([("kraken.fused", "two_shot_all_reduce_bias_rms_norm"),
                                        ("kraken.all_reduce_fusion", "two_shot_all_reduce_bias_rms_norm")]),
        "helion_oneshot": import_first([("examples.distributed.allreduce_bias_rmsnorm",
                                         "helion_one_shot_allreduce_bias_rmsnorm")]),
        "helion_twoshot": import_first([("examples.distributed.allreduce_bias_rmsnorm",
                                         "helion_two_shot_allreduce_bias_rmsnorm")]),
    }


def columns(key, args, group_name, peer_fns, absent, agmm_input, rank_seed):
    """{column: (make inputs, call)}; inputs are made fresh per column, collectively."""
    import torch.distributed._symmetric_memory as symm_mem
    t, h = key
    eps = args.eps
    gen = torch.Generator(device="cuda").manual_seed(rank_seed)
    shared = torch.Generator(device="cuda").manual_seed(4242)          # the same on every rank
    x = torch.randn((t, h), generator=gen, device="cuda").to(torch.bfloat16)
    gamma = torch.randn((h,), generator=shared, device="cuda").to(torch.bfloat16)
    bias = torch.randn((h,), generator=shared, device="cuda").to(torch.bfloat16)
    residual = None if args.no_residual else torch.randn((t, h), generator=shared, device="cuda").to(torch.bfloat16)

    def torch_base(x_):
        dist.all_reduce(x_)
        r = x_ + bias if residual is None else x_ + bias + residual
        return torch.nn.functional.rms_norm(r, (h,), gamma, eps), r

    def symm_buffer():
        buf = symm_mem.empty((t, h), dtype=torch.bfloat16, device="cuda")
        symm_mem.rendezvous(buf, group_name)
        return buf

    cols = {"torch": (lambda: (x.clone(),), torch_base)}
    # kraken's bias is full-shape: it carries the residual too.
    full_bias = bias.expand(t, h).contiguous() if residual is None else (bias + residual).contiguous()
    for name in ("kraken_oneshot", "kraken_twoshot"):
        fn, why = peer_fns[name]
        if fn is None:
            cols[name] = absent("not installed", why)
            continue

        def kraken(buf, x_, fn=fn):
            y = torch.empty_like(x_)
            fn(buf, x_, full_bias, gamma, y, eps)
            return y
        cols[name] = (lambda: (symm_buffer(), x.clone()), kraken)
    # Helion's takes no residual: rank 0's x carries it (the sum is the same).
    x_helion = x if residual is None or dist.get_rank() != 0 else (x.float() + residual.float()).to(torch.bfloat16)
    for name in ("helion_oneshot", "helion_twoshot"):
        fn, why = peer_fns[name]
        if fn is None:
            cols[name] = absent("not installed", why)
            continue
        cols[name] = (lambda: (symm_buffer(), x_helion.clone()),
                      lambda buf, x_, fn=fn: fn(buf, x_, bias, gamma, eps))
    for backend in args.agmm_backends["all_reduce_rmsnorm"]:
        cols[f"agmm_{backend}"] = args.agmm_absent or (
            lambda: (agmm_input(x, args),),
            lambda x_, name=backend: at.all_reduce_rmsnorm(x_, gamma, bias=bias, residual=residual, eps=eps,
                                                           backend=name))
    return cols


def first_y(result):
    """A column's y: the first of a pair, or the tensor itself."""
    return result[0] if isinstance(result, tuple) else result
