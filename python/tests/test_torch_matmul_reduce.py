"""agmm.torch's row-parallel matmuls on a GPU, under torchrun (`torchrun --nproc-per-node 1 -m pytest
python/tests`; bench/torch_run.sh on the GPU machine): every backend against torch's own sum (the
partials all-reduced in float64), exact on small integers; every rank the same S; a tensor-parallel
MLP block (ag_matmul -> GELU -> matmul_reduce_scatter) under torch.compile against eager and plain
torch; CUDA-graph capture replayed with fresh inputs; errors naming the argument. Skipped, loudly,
without torch, a GPU or torchrun."""
import os

import pytest

import agmm

torch = pytest.importorskip("torch", reason="SKIPPED LOUDLY: torch is not installed (the torch tests run on the GPU "
                                            "machine: bench/torch_run.sh)")
if not torch.cuda.is_available():
    pytest.skip("SKIPPED LOUDLY: torch sees no CUDA device; agmm.torch needs one", allow_module_level=True)
if "WORLD_SIZE" not in os.environ:
    pytest.skip("SKIPPED LOUDLY: not started by torchrun: run `torchrun --nproc-per-node 1 -m pytest python/tests`",
                allow_module_level=True)

import torch.distributed as dist   # noqa: E402

import agmm.torch as at            # noqa: E402

OPS = ("matmul_reduce_scatter", "matmul_all_reduce")
# (M, N, K, B layout): one row, M not divisible by W, odd N with the seed's layout; |partial| <= 256.
EXACT_SHAPES = [(1, 8, 8, "row"), (7, 33, 72, "col"), (130, 24, 64, "row"), (37, 200, 32, "col")]
LARGE_SHAPES = [(256, 512, 384, "col"), (1024, 1024, 512, "row")]


@pytest.fixture(scope="module", autouse=True)
def world():
    torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
    if not dist.is_initialized():
        dist.init_process_group("nccl")
    try:
        at.init()
    except agmm.Unsupported as e:
        pytest.skip(f"SKIPPED LOUDLY: agmm.torch.init: {e}")
    yield
    at.finalize()


def operands(m, n, k, layout, gen, exact):
    """a (M, K) and b (K, N) bf16; small integers in [-bound, bound] with |partial| <= 256."""
    if exact:
        bound = 2 if k <= 64 else 1
        a = torch.randint(-bound, bound + 1, (m, k), generator=gen, device="cuda").to(torch.bfloat16)
        w = torch.randint(-bound, bound + 1, (n, k) if layout == "col" else (k, n), generator=gen, device="cuda")
    else:
        a = torch.randn((m, k), generator=gen, device="cuda").to(torch.bfloat16)
        w = torch.randn((n, k) if layout == "col" else (k, n), generator=gen, device="cuda")
    w = w.to(torch.bfloat16)
    return a, (w.T if layout == "col" else w)


def torch_sum(a, b):
    """S = sum over ranks of a @ b, in float64 through torch.distributed."""
    s = a.double() @ b.double()
    dist.all_reduce(s)
    return s


def my_rows(op, s):
    if op == "matmul_all_reduce":
        return s
    first, rows = at.reduce_scatter_rows(s.shape[0])
    return s[first:first + rows]


@pytest.mark.parametrize("op", OPS)
def test_every_backend(op, seed):
    gen = torch.Generator(device="cuda").manual_seed(seed + at.rank())
    fn = getattr(at, op)
    ran = 0
    for backend, why in at.available(op).items():
        if why:
            with pytest.raises(agmm.Unsupported, match="skipped"):
                fn(*operands(8, 8, 8, "row", gen, True), backend=backend)
            continue
        ran += 1
        for i, (m, n, k, layout) in enumerate(EXACT_SHAPES + LARGE_SHAPES):
            exact = i < len(EXACT_SHAPES)
            a, b = operands(m, n, k, layout, gen, exact)
            got = fn(a, b, backend=backend)
            want = my_rows(op, torch_sum(a, b))
            what = f"{op}/{backend} M={m} N={n} K={k} {layout}"
            assert got.shape == want.shape and got.dtype == torch.bfloat16, what
            if exact:
                assert torch.equal(got.double(), want.to(torch.bfloat16).double()), what
            else:
                err = ((got.double() - want).norm() / want.norm()).item()
                assert err <= 1e-2, f"{what}: relative Frobenius error {err:.2e}"
                again = fn(a, b, backend=backend)
                assert torch.equal(again, got), f"{what}: a second run gave other bits"
            if op == "matmul_all_reduce":
                every = [torch.empty_like(got) for _ in range(at.world_size())]
                dist.all_gather(every, got)
                assert all(torch.equal(x, every[0]) for x in every), f"{what}: ranks' S differ"
    assert ran > 0, f"no {op} backend runs here: {at.available(op)}"


class TensorParallelMLP(torch.nn.Module):
    """The whole tensor-parallel MLP of a sequence-parallel block: the input's rows gathered into
    the column-parallel up projection (ag_matmul), GELU, the row-parallel down projection whose
    partial sums are reduce-scattered back to each rank's rows (matmul_reduce_scatter)."""

    def __init__(self, hidden, ffn, gen):
        super().__init__()
        w = at.world_size()
        self.w_up = torch.randn((ffn // w, hidden), generator=gen, device="cuda").div(hidden ** 0.5).to(torch.bfloat16)
        self.w_down = torch.randn((hidden, ffn // w), generator=gen, device="cuda").div(ffn ** 0.5).to(torch.bfloat16)

    def forward(self, x_shard):
        _, h = at.ag_matmul(x_shard, self.w_up.T)
        return at.matmul_reduce_scatter(torch.nn.functional.gelu(h), self.w_down.T)


def test_compiled_mlp_block_matches_eager_and_torch(seed):
    gen = torch.Generator(device="cuda").manual_seed(seed)     # the same weights' seed on every rank
    block = TensorParallelMLP(512, 2048, gen)
    x = torch.randn((64, 512), generator=torch.Generator(device="cuda").manual_seed(seed + at.rank()),
                    device="cuda").to(torch.bfloat16)
    eager = block(x)
    compiled = torch.compile(block, fullgraph=True)(x)
    x_all = x.new_empty((at.world_size() * 64, 512))
    dist.all_gather_into_tensor(x_all, x)
    ref = torch.nn.functional.gelu(x_all @ block.w_up.T) @ block.w_down.T
    dist.all_reduce(ref)
    first, rows = at.reduce_scatter_rows(ref.shape[0])
    torch.testing.assert_close(compiled, eager, atol=2e-2, rtol=2e-2)
    torch.testing.assert_close(eager, ref[first:first + rows], atol=2e-2, rtol=2e-2)
    assert compiled.abs().sum() > 0


@pytest.mark.parametrize("op", OPS)
def test_graph_capture_replays_with_fresh_inputs(op, seed):
    gen = torch.Generator(device="cuda").manual_seed(seed + at.rank())
    fn = getattr(at, op)
    a, b = operands(40, 72, 64, "col", gen, True)
    fn(a, b)                               # the warm-up makes the plan
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = fn(a, b)
    for step in range(5):                  # every replay follows the inputs written just before it
        fresh_a, fresh_b = operands(40, 72, 64, "col", gen, True)
        a.copy_(fresh_a)
        b.copy_(fresh_b)
        graph.replay()
        torch.cuda.synchronize()
        want = my_rows(op, torch_sum(a, b))
        assert torch.equal(out.double(), want.to(torch.bfloat16).double()), f"{op} replay {step}"


def test_errors_name_the_argument():
    a = torch.zeros((16, 64), dtype=torch.bfloat16, device="cuda")
    b = torch.zeros((64, 32), dtype=torch.bfloat16, device="cuda")
    cases = [
        (lambda: at.matmul_reduce_scatter(a.float(), b), TypeError, "matmul_reduce_scatter: a: dtype torch.float32"),
        (lambda: at.matmul_all_reduce(a, b[:32]), ValueError, r"b: shape \(32, 32\); its rows must equal a's"),
        (lambda: at.matmul_all_reduce(a[:, ::2], b[::2]), ValueError, "a: not contiguous"),
        (lambda: at.matmul_reduce_scatter(a[:, :60].contiguous(), b[:60]), ValueError, "a and b .K.: K=60"),
        (lambda: at.matmul_reduce_scatter(a, b, backend="two_shot"), ValueError, "backend: backend=two_shot"),
        (lambda: at.matmul_all_reduce(a, b, backend=None), TypeError, "backend: NoneType"),
    ]
    for fn, exc, match in cases:
        with pytest.raises(exc, match=match):
            fn()
    at.matmul_reduce_scatter(a, b)         # nothing above left the rank out of step
