"""agmm.torch on a GPU, under torchrun (`torchrun --nproc-per-node 1 -m pytest python/tests`; the
GPU machine runs it through bench/torch_run.sh): every backend against torch's own ops, symmetric
and copied inputs, errors naming the argument, a tensor-parallel MLP block under torch.compile
against eager, CUDA-graph capture, and (in child processes) the emulated process world.
Skipped, loudly, without torch, a GPU or torchrun."""
import os
import socket
import subprocess
import sys
import threading

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

WORKER = os.path.join(os.path.dirname(__file__), "torch_worker.py")


@pytest.fixture(scope="module", autouse=True)
def world():
    torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
    if not dist.is_initialized():
        dist.init_process_group("nccl")
    try:
        at.init()
    except agmm.Unsupported as e:
        pytest.skip(f"SKIPPED LOUDLY: agmm.torch.init: {e}")
    print(f"\nagmm.torch: {at.describe()}; library {agmm.library_path()}")
    yield
    at.finalize()


def small_ints(shape, gen):
    return torch.randint(-1, 2, shape, generator=gen, device="cuda").to(torch.bfloat16)


def gathered(shard):
    out = shard.new_empty((at.world_size() * shard.shape[0],) + tuple(shard.shape[1:]))
    dist.all_gather_into_tensor(out, shard.contiguous())
    return out


def poisoned(shape):
    return torch.full(shape, float("nan"), dtype=torch.bfloat16, device="cuda")


def check_each(op, fn):
    """fn(backend) for every backend of op this world runs; the others must say why not."""
    ran = 0
    for backend, why in at.available(op).items():
        if why:
            with pytest.raises(agmm.Unsupported, match="skipped"):
                fn(backend)
            continue
        fn(backend)
        ran += 1
    assert ran > 0, f"no {op} backend runs here: {at.available(op)}"


# (M, N, K, B layout): odd rows, N not a multiple of 8 with the seed's layout, and seed-sized ones.
EXACT_SHAPES = [(1, 8, 8, "row"), (7, 264, 72, "row"), (129, 3, 8, "col"), (33, 40, 64, "col")]
LARGE_SHAPES = [(256, 512, 384, "col"), (640, 1024, 768, "col"), (384, 256, 1024, "row")]


def make_b(k, n, layout, gen, exact):
    if exact:
        w = small_ints((n, k) if layout == "col" else (k, n), gen)
    else:
        w = torch.randn((n, k) if layout == "col" else (k, n), generator=gen, device="cuda").to(torch.bfloat16)
    return w.T if layout == "col" else w


def test_ag_matmul_every_backend(seed):
    gen = torch.Generator(device="cuda").manual_seed(seed + at.rank())

    def run(backend):
        for i, (m, n, k, layout) in enumerate(EXACT_SHAPES + LARGE_SHAPES):
            exact = i < len(EXACT_SHAPES)
            a = small_ints((m, k), gen) if exact else torch.randn((m, k), generator=gen, device="cuda").to(torch.bfloat16)
            b = make_b(k, n, layout, gen, exact)
            rows = at.world_size() * m
            out = (poisoned((rows, k)), poisoned((rows, n))) if i % 2 else None
            a_gathered, c = at.ag_matmul(a, b, backend=backend, out=out)
            a_ref = gathered(a)
            what = f"{backend} M={m} N={n} K={k} {layout}"
            assert torch.equal(a_gathered, a_ref), what
            c_ref = a_ref.double() @ b.double()
            if exact:
                assert torch.equal(c.double(), c_ref), what
            else:
                err = ((c.double() - c_ref).norm() / c_ref.norm()).item()
                assert err <= 1e-2, f"{what}: relative Frobenius error {err:.2e}"
    check_each("ag_matmul", run)


def test_symmetric_shard_is_not_copied(seed):
    gen = torch.Generator(device="cuda").manual_seed(seed)
    m, n, k = 128, 256, 512
    b = make_b(k, n, "col", gen, exact=True)
    shard = at.symm_empty((m, k), torch.bfloat16)
    assert shard.is_cuda and shard.is_contiguous() and not shard.any()
    shard.copy_(small_ints((m, k), gen))
    before = at.stats()["bytes_copied_in"]
    a1, c1 = at.ag_matmul(shard, b)
    assert at.stats()["bytes_copied_in"] == before, "a symmetric shard is read in place"
    a2, c2 = at.ag_matmul(shard.clone(), b)
    assert at.stats()["bytes_copied_in"] == before + m * k * 2
    assert torch.equal(a1, a2) and torch.equal(c1, c2)
    assert torch.equal(c1.double(), gathered(shard).double() @ b.double())
    at.symm_free(shard)


def test_all_reduce_every_backend(seed):
    gen = torch.Generator(device="cuda").manual_seed(seed + at.rank())

    def run(backend):
        for dtype in (torch.bfloat16, torch.float32):
            for n in (1, 4093, 16387, 1 << 20):
                x = torch.randint(-2, 3, (n,), generator=gen, device="cuda").to(dtype)
                want = x.clone()
                dist.all_reduce(want)
                plain = x.clone()
                assert at.all_reduce_(plain, backend=backend) is plain
                s = at.symm_empty((n,), dtype)
                s.copy_(x)
                before = at.stats()["copies_in"]
                at.all_reduce_(s, backend=backend)
                assert at.stats()["copies_in"] == before
                for got in (plain, s):
                    assert torch.equal(got, want), f"{backend} {dtype} n={n}"
                at.symm_free(s)
    check_each("all_reduce", run)


def test_errors_name_the_argument():
    a = torch.zeros((16, 64), dtype=torch.bfloat16, device="cuda")
    b = torch.zeros((64, 32), dtype=torch.bfloat16, device="cuda")
    cases = [
        (lambda: at.ag_matmul(a.float(), b), TypeError, "a_shard: dtype torch.float32"),
        (lambda: at.ag_matmul(a, b.half()), TypeError, "b: dtype torch.float16"),
        (lambda: at.ag_matmul(a.cpu(), b), ValueError, "a_shard: on cpu"),
        (lambda: at.ag_matmul(a[:, ::2], b[::2]), ValueError, "a_shard: not contiguous"),
        (lambda: at.ag_matmul(a, b[:32]), ValueError, r"b: shape \(32, 32\); its rows must equal"),
        (lambda: at.ag_matmul(a, torch.zeros((64, 64), dtype=torch.bfloat16, device="cuda")[:, ::2]), ValueError,
         "b: strides"),
        (lambda: at.ag_matmul(a[:, :60].contiguous(), b[:60]), ValueError, "a_shard and b .K.: K=60"),
        (lambda: at.ag_matmul(a, b, backend="nope"), ValueError, "backend: backend=nope"),
        (lambda: at.ag_matmul(a, b, backend=None), TypeError, "backend: NoneType"),
        (lambda: at.ag_matmul(a, b, out=(a[:1], poisoned((at.world_size() * 16, 32)))), ValueError,
         r"out \(a_gathered\): shape \(1, 64\)"),
        (lambda: at.ag_matmul([1], b), TypeError, "a_shard: list"),
        (lambda: at.all_reduce_(torch.zeros(8, dtype=torch.int32, device="cuda")), TypeError, "t: dtype torch.int32"),
        (lambda: at.all_reduce_(torch.zeros((8, 8), device="cuda")[:, 0]), ValueError, "t: not contiguous"),
        (lambda: at.symm_empty((0, 3)), ValueError, "symm_empty: shape"),
    ]
    for fn, exc, match in cases:
        with pytest.raises(exc, match=match):
            fn()
    at.ag_matmul(a, b)          # nothing above left the rank out of step


def test_another_thread_is_refused():
    a = torch.zeros((16, 64), dtype=torch.bfloat16, device="cuda")
    b = torch.zeros((64, 32), dtype=torch.bfloat16, device="cuda")
    caught = []

    def other():
        torch.cuda.set_device(a.device)
        try:
            at.ag_matmul(a, b)
        except RuntimeError as e:
            caught.append(str(e))
    t = threading.Thread(target=other)
    t.start()
    t.join()
    assert caught and "another thread" in caught[0]


class TensorParallelMLP(torch.nn.Module):
    """Column-parallel up projection through ag_matmul (the sequence-parallel input gathered),
    row-parallel down projection whose partial sums all_reduce_ adds."""

    def __init__(self, hidden, ffn, gen):
        super().__init__()
        w = at.world_size()
        self.w_up = torch.randn((ffn // w, hidden), generator=gen, device="cuda").div(hidden ** 0.5).to(torch.bfloat16)
        self.w_down = torch.randn((hidden, ffn // w), generator=gen, device="cuda").div(ffn ** 0.5).to(torch.bfloat16)

    def forward(self, x_shard):
        _, h = at.ag_matmul(x_shard, self.w_up.T)
        y = torch.nn.functional.gelu(h) @ self.w_down.T
        return at.all_reduce_(y)


def test_compiled_tensor_parallel_block_matches_eager(seed):
    gen = torch.Generator(device="cuda").manual_seed(seed)
    block = TensorParallelMLP(512, 2048, gen)
    x = torch.randn((64, 512), generator=torch.Generator(device="cuda").manual_seed(seed + at.rank()),
                    device="cuda").to(torch.bfloat16)
    eager = block(x)
    compiled = torch.compile(block, fullgraph=True)(x)
    # The same computation from torch's own collectives, as the yardstick of both.
    h = gathered(x) @ block.w_up.T
    ref = torch.nn.functional.gelu(h) @ block.w_down.T
    dist.all_reduce(ref)
    torch.testing.assert_close(compiled, eager, atol=2e-2, rtol=2e-2)
    torch.testing.assert_close(eager, ref, atol=2e-2, rtol=2e-2)
    assert compiled.abs().sum() > 0


def test_graph_capture_replays_with_fresh_inputs(seed):
    gen = torch.Generator(device="cuda").manual_seed(seed)
    a = small_ints((64, 64), gen)
    b = make_b(64, 32, "col", gen, exact=True)
    t = small_ints((1000,), gen).float()
    graph = torch.cuda.CUDAGraph()
    # No plan yet: a capture cannot make one, and says so (the capture is abandoned).
    with pytest.raises(RuntimeError, match="cannot be made while a CUDA graph is being captured"):
        with torch.cuda.graph(graph):
            at.ag_matmul(a, b)
    graph = torch.cuda.CUDAGraph()
    at.ag_matmul(a, b)                     # the warm-up makes the plans
    at.all_reduce_(t.clone())
    with torch.cuda.graph(graph):
        _, c = at.ag_matmul(a, b)
        at.all_reduce_(t)
    for step in range(5):                  # every replay follows the inputs written just before it
        a.copy_(small_ints(a.shape, gen))
        fresh = small_ints(t.shape, gen).float()
        t.copy_(fresh)
        graph.replay()
        torch.cuda.synchronize()
        assert torch.equal(c.double(), gathered(a).double() @ b.double()), f"replay {step}"
        # The same generator seed on every rank: every rank's vector is `fresh`.
        assert torch.equal(t, fresh * at.world_size()), f"replay {step}"


# ---- all_reduce_rmsnorm ----------------------------------------------------------------------------

def rmsnorm_want(x, gamma, bias, residual, eps):
    """(r', y in float64) from torch's own all-reduce: with small-integer x, bias and residual every
    sum is exact in any order, so r' is exact; y is the float64 norm of that bf16 r'."""
    s = x.float().contiguous()
    dist.all_reduce(s)
    for t in (bias, residual):
        if t is not None:
            s = s + t.float()
    r = s.to(torch.bfloat16)
    q = r.double()
    y = q * torch.rsqrt(q.square().mean(-1, keepdim=True) + torch.tensor(eps, dtype=torch.float32).double())
    return r, y * gamma.double()


def assert_rmsnorm(y, r, want_r, want_y, what):
    assert torch.equal(r, want_r), f"{what}: residual_out"
    err = (y.double() - want_y).abs()
    assert bool((err <= want_y.abs() * 2.0 ** -8 * (1 + 2.0 ** -10)).all()), \
        f"{what}: y more than one bf16 rounding from float64 (worst {err.max().item():.3g})"


RMSNORM_SHAPES = [((1, 4096), True, True), ((7, 8192), True, False), ((3, 5, 264), False, True), ((128, 4096), True, True)]


def test_all_reduce_rmsnorm_every_backend(seed):
    gen = torch.Generator(device="cuda").manual_seed(seed + at.rank())
    shared = torch.Generator(device="cuda").manual_seed(seed)          # gamma, bias, residual: replicated

    def run(backend):
        for i, (shape, has_bias, has_res) in enumerate(RMSNORM_SHAPES):
            h = shape[-1]
            x = torch.randint(-4, 5, shape, generator=gen, device="cuda").to(torch.bfloat16)
            gamma = torch.randn((h,), generator=shared, device="cuda").to(torch.bfloat16)
            bias = torch.randint(-4, 5, (h,), generator=shared, device="cuda").to(torch.bfloat16) if has_bias else None
            residual = torch.randint(-4, 5, shape, generator=shared, device="cuda").to(torch.bfloat16) if has_res \
                else None
            want_r, want_y = rmsnorm_want(x, gamma, bias, residual, 1e-6)
            what = f"{backend} {shape} bias={has_bias} residual={has_res}"
            y, r = at.all_reduce_rmsnorm(x, gamma, bias=bias, residual=residual, backend=backend)
            assert y.shape == x.shape and r.shape == x.shape
            assert_rmsnorm(y, r, want_r, want_y, what)
            # torch's own RMSNorm of the same r' agrees within bf16 rounding.
            ref = torch.nn.functional.rms_norm(r.float(), (h,), gamma.float(), 1e-6)
            torch.testing.assert_close(y.float(), ref, atol=2e-2, rtol=2e-2)
            if i == 0:      # x where it lies, in symmetric memory: not copied
                s = at.symm_empty(shape, torch.bfloat16)
                s.copy_(x)
                before = at.stats()["copies_in"]
                y2, r2 = at.all_reduce_rmsnorm(s, gamma, bias=bias, residual=residual, backend=backend)
                assert at.stats()["copies_in"] == before
                assert torch.equal(y2, y) and torch.equal(r2, r), what
                at.symm_free(s)
    check_each("all_reduce_rmsnorm", run)


def test_all_reduce_rmsnorm_errors():
    x = torch.zeros((4, 64), dtype=torch.bfloat16, device="cuda")
    g = torch.ones((64,), dtype=torch.bfloat16, device="cuda")
    cases = [
        (lambda: at.all_reduce_rmsnorm(x.float(), g), TypeError, "x: dtype torch.float32"),
        (lambda: at.all_reduce_rmsnorm(x, g[:63]), ValueError, r"gamma: shape \(63,\)"),
        (lambda: at.all_reduce_rmsnorm(x, g, residual=x[:2]), ValueError, "residual: shape"),
        (lambda: at.all_reduce_rmsnorm(x[:, 1:63], g[:62]), ValueError, "x: not contiguous"),
        (lambda: at.all_reduce_rmsnorm(torch.zeros((4, 100), dtype=torch.bfloat16, device="cuda"),
                                       torch.ones((100,), dtype=torch.bfloat16, device="cuda")), ValueError,
         "hidden=100 is not a multiple of 8"),
        (lambda: at.all_reduce_rmsnorm(x, g, eps=0.0), ValueError, "eps=0"),
        (lambda: at.all_reduce_rmsnorm(x, g, eps="1e-6"), TypeError, "eps: str"),
        (lambda: at.all_reduce_rmsnorm(torch.zeros((4 * 64 + 4,), dtype=torch.bfloat16, device="cuda")[4:].view(4, 64),
                                       g), ValueError, "x: its data starts at .* not 16-byte aligned"),
        (lambda: at.all_reduce_rmsnorm(x, g, backend="ce"), ValueError, "backend=ce"),
    ]
    for fn, exc, match in cases:
        with pytest.raises(exc, match=match):
            fn()
    at.all_reduce_rmsnorm(x, g)            # nothing above left the rank out of step


def test_all_reduce_rmsnorm_compiled_and_captured(seed):
    gen = torch.Generator(device="cuda").manual_seed(seed + at.rank())
    shared = torch.Generator(device="cuda").manual_seed(seed)
    t, h = 16, 4096
    gamma = torch.randn((h,), generator=shared, device="cuda").to(torch.bfloat16)
    residual = torch.randint(-4, 5, (t, h), generator=shared, device="cuda").to(torch.bfloat16)
    x = torch.randint(-4, 5, (t, h), generator=gen, device="cuda").to(torch.bfloat16)

    def layer_end(x_, residual_):
        y_, r_ = at.all_reduce_rmsnorm(x_, gamma, residual=residual_)
        return y_ * 2, r_

    eager = layer_end(x, residual)
    compiled = torch.compile(layer_end, fullgraph=True)(x, residual)
    assert torch.equal(compiled[0], eager[0]) and torch.equal(compiled[1], eager[1])
    # Captured, then replayed after fresh inputs each time.
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        y, r = at.all_reduce_rmsnorm(x, gamma, residual=residual)
    for step in range(5):
        x.copy_(torch.randint(-4, 5, (t, h), generator=gen, device="cuda").to(torch.bfloat16))
        residual.copy_(torch.randint(-4, 5, (t, h), generator=shared, device="cuda").to(torch.bfloat16))
        graph.replay()
        torch.cuda.synchronize()
        want_r, want_y = rmsnorm_want(x, gamma, None, residual, 1e-6)
        assert_rmsnorm(y, r, want_r, want_y, f"replay {step}")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.parametrize("nranks", [2, 3])
def test_emulated_process_world(nranks, seed):
    """nranks processes on this one GPU (a gloo job, since NCCL refuses two ranks on one GPU):
    agmm.torch.init makes an emulated process world; torch_worker.py checks every backend."""
    if at.rank() != 0:
        pytest.skip("SKIPPED LOUDLY: the emulated world is started from rank 0 only")
    env = dict(os.environ, AGMM_TEST_SEED=str(seed),
               PYTHONPATH=os.pathsep.join(p for p in (os.path.dirname(os.path.dirname(agmm.__file__)),
                                                      os.environ.get("PYTHONPATH")) if p))
    for var in list(env):            # this test runs under torchrun: the child job is a fresh one
        if var in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK", "GROUP_WORLD_SIZE",
                   "ROLE_RANK", "ROLE_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT") or var.startswith("TORCHELASTIC_"):
            del env[var]
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", str(nranks), "--master-addr",
           "127.0.0.1", "--master-port", str(free_port()), WORKER]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=240)
    out = proc.stdout + proc.stderr
    if "UNSUPPORTED:" in out:
        pytest.skip("SKIPPED LOUDLY: " + out[out.index("UNSUPPORTED:"):].splitlines()[0])
    assert proc.returncode == 0 and out.count("OK rank") == nranks, out[-6000:]
