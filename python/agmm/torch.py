"""agmm's operations as torch ops, inside a torch.distributed job (one process per rank).

    import torch, torch.distributed as dist, agmm.torch
    dist.init_process_group("nccl"); torch.cuda.set_device(local_rank)
    agmm.torch.init()                                   # a process world over the default group
    a_gathered, c = agmm.torch.ag_matmul(a_shard, b)    # b: (K, N), e.g. w.T of a contiguous (N, K) w
    agmm.torch.all_reduce_(t)
    y = agmm.torch.matmul_reduce_scatter(h, w2.T)    # this rank's rows of sum_r h_r @ w2_r.T
    y, residual = agmm.torch.all_reduce_rmsnorm(x, gamma, residual=residual)   # the end of a TP layer
    agmm.torch.finalize()

The ops are torch.library custom ops (agmm::ag_matmul, agmm::ag_matmul_out, agmm::all_reduce_,
agmm::matmul_reduce_scatter, agmm::matmul_all_reduce, agmm::all_reduce_rmsnorm)
with fake implementations, so torch.compile traces them; they run on torch's current stream and
never synchronise the host. Plans are cached per (shape, dtype, layout, backend), at most
`max_plans` per process (least recently used destroyed first), and freed by finalize().

Input copies: a shard (or all-reduce tensor) in memory from symm_empty is read in place by every
rank. Any other tensor is first copied into the plan's own symmetric buffer on the current stream:
one device-to-device copy of M*K*2 bytes (ag_matmul) or t.nbytes (all_reduce_), read and written
once in device memory (about 2 x bytes / 4 TB/s on an H200, plus a launch); stats() counts them.

CUDA graphs: runs can be captured (libagmm keeps per-step state on the device), so the ops work
inside torch.cuda.graph and torch.compile's mode="reduce-overhead". A plan cannot be made during
a capture (it allocates and meets the peers): call each op once outside the capture first, as
any warm-up does; a plan a graph has captured is never evicted from the cache.

Environment, at import: NCCL_NVLS_ENABLE=0 and CUDA_DEVICE_MAX_CONNECTIONS=32 where unset (what
libagmm sets at world creation, include/agmm.h; set here because torch may start NCCL and CUDA
first).
"""
import os
import socket
import sys
import threading
import warnings
from datetime import timedelta

os.environ.setdefault("NCCL_NVLS_ENABLE", "0")
os.environ.setdefault("CUDA_DEVICE_MAX_CONNECTIONS", "32")

import torch                                  # noqa: E402  (after the environment above)
import torch.distributed as dist              # noqa: E402

from . import _dlpack, _lib                   # noqa: E402
from ._core import Context, backend_key, backend_names, backends_available, eps_arg, max_plans_arg   # noqa: E402

__all__ = ["init", "finalize", "is_initialized", "ag_matmul", "all_reduce_", "matmul_reduce_scatter",
           "matmul_all_reduce", "reduce_scatter_rows", "all_reduce_rmsnorm", "symm_empty", "symm_free", "stats",
           "plans", "backends", "available", "world_size", "rank", "describe"]

_CAPTURE_MESSAGE = ("agmm.torch.{op}: no plan for this call yet, and a plan cannot be made while a CUDA "
                    "graph is being captured (it allocates memory and meets the peers): call the op once "
                    "outside the capture first (a warm-up), then capture")


class _State:
    """What init made: the world, this rank's context, the group and the bounded side channel."""

    def __init__(self):
        self.world = None
        self.ctx = None
        self.exchange_group = None
        self.nranks = 0
        self.rank = 0
        self.kind = ""
        self.device = None
        self.thread = threading.get_ident()
        self.side_stream = None       # emulated worlds: the NULL stream is refused there
        self.describe = ""


_state = None


def _current():
    if _state is None:
        raise RuntimeError("agmm.torch: not initialised: call agmm.torch.init() after "
                           "torch.distributed.init_process_group")
    return _state


def is_initialized():
    return _state is not None


def world_size():
    return _current().nranks


def rank():
    return _current().rank


def describe():
    """The library's banner for this world (devices, NCCL, emulation)."""
    return _current().describe


def backends(op="ag_matmul"):
    """The library's backends of op ("ag_matmul", "all_reduce", "matmul_reduce_scatter",
    "matmul_all_reduce" or "all_reduce_rmsnorm"); "auto" chooses among them."""
    return backend_names(op)


def available(op="ag_matmul"):
    """{backend of op: "" where this world runs it, else why not}."""
    return backends_available(_current().world, op)


def stats():
    """Runs, plans created/evicted, and copies into plan inputs (count and bytes) on this rank."""
    return dict(_current().ctx.stats)


def plans():
    """This rank's cached plans, least recently used first: [(key, backend that runs)]."""
    return _current().ctx.plans()


# ---- init and finalize -------------------------------------------------------------------------

def _exchange_through(group, nranks):
    def exchange(obj):
        out = [None] * nranks
        try:
            dist.all_gather_object(out, obj, group=group)
        except RuntimeError as e:      # gloo's timeout, or a peer that left
            raise _lib.Timeout(f"agmm.torch: the ranks' check that they make the same call failed: {e}",
                               _lib.TIMEOUT) from e
        return out
    return exchange


def init(group=None, *, kind="auto", timeout_s=0.0, max_plans=32):
    """Joins an agmm process world over a torch.distributed group (default: the whole job):
    rank = the group rank, nranks = its size, device = torch.cuda.current_device(). The unique id
    is made on the group's rank 0 and broadcast to the group's ranks (over a gloo group of the
    same ranks, whose waits the timeout bounds). A group of one process on device 0 needs no
    bootstrap: its one-rank world is made in the process. kind: "gpu" (one GPU per rank),
    "emulated" (ranks share GPUs: agmm's own symmetric memory, no NCCL backends), or "auto" (which
    of the two the ranks' devices say). timeout_s bounds every wait for a peer (0: the library's
    default, AGMM_TIMEOUT_S or 5 s); it also bounds the check, when a plan is made, that every rank
    asked for the same one. Collective."""
    global _state
    if _state is not None:
        raise RuntimeError("agmm.torch.init: already initialised; call agmm.torch.finalize() first")
    if not (dist.is_available() and dist.is_initialized()):
        raise RuntimeError("agmm.torch.init: torch.distributed is not initialised: call "
                           "torch.distributed.init_process_group first")
    if not torch.cuda.is_available():
        raise _lib.Unsupported("agmm.torch.init: no CUDA device visible to torch; agmm.numpy drives the CPU "
                               "world without one", _lib.UNSUPPORTED)
    if kind not in ("auto", "gpu", "emulated"):
        raise ValueError(f"agmm.torch.init: kind={kind!r}: want 'auto', 'gpu' or 'emulated'")
    timeout_s = _lib.timeout_arg("agmm.torch.init", timeout_s)
    max_plans = max_plans_arg("agmm.torch.init", max_plans)
    group = group or dist.group.WORLD
    my_rank, nranks = dist.get_rank(group), dist.get_world_size(group)
    if my_rank < 0:
        raise ValueError("agmm.torch.init: group: this process is not a member of it")
    lib = _lib.lib()
    device = torch.device("cuda", torch.cuda.current_device())
    st = _State()
    st.rank, st.nranks, st.device = my_rank, nranks, device
    wait_s = timeout_s if timeout_s > 0 else lib.agmm_world_default_timeout_s()
    # A gloo side group bounds every exchange of ours by the world's timeout (an NCCL group's
    # collectives wait for its own, much longer, timeout).
    st.exchange_group = dist.new_group(dist.get_process_group_ranks(group), backend="gloo",
                                       timeout=timedelta(seconds=max(wait_s, 1.0)), use_local_synchronization=True)
    try:
        exchange = _exchange_through(st.exchange_group, nranks)
        where = (socket.gethostname(), str(torch.cuda.get_device_properties(device).uuid))
        shared = len(set(exchange(where))) < nranks
        if kind == "auto":
            kind = "emulated" if shared else "gpu"
        elif kind == "gpu" and shared:
            raise ValueError("agmm.torch.init: kind='gpu', but ranks of the group share a GPU (NCCL needs one "
                             "per rank); use kind='emulated' or 'auto'")
        st.kind = kind
        if nranks == 1 and device.index == 0:
            st.world = _world_of_one(kind, timeout_s)
        else:
            st.world = _join(st, group, kind, timeout_s)
        ctx = _lib.ctypes.c_void_p()
        status = lib.agmm_ctx_create(_ref(ctx), st.world, lib.agmm_world_first_rank(st.world))
        if status != _lib.SUCCESS:
            _lib.raise_status(status, "agmm_ctx_create failed (AGMM_LOG=debug says why)", "agmm.torch.init")
        st.ctx = Context(ctx.value, nranks, exchange, max_plans)
        st.describe = lib.agmm_world_describe(st.world).decode()
        if kind == "emulated":
            st.side_stream = torch.cuda.Stream(device)
    except BaseException:
        if st.world is not None:
            lib.agmm_world_destroy(st.world)
        dist.destroy_process_group(st.exchange_group)
        raise
    _state = st


def _world_of_one(kind, timeout_s):
    """A group of one process needs no bootstrap: a one-rank world made in this process
    (agmm_world_create; its rank 0 is device 0, which init checked is torch's current device)."""
    cfg = _lib.WorldConfig(kind=_lib.WORLD_KINDS[kind], nranks=1, timeout_s=timeout_s)
    world, err = _lib.ctypes.c_void_p(), _lib.ctypes.create_string_buffer(512)
    status = _lib.lib().agmm_world_create(_ref(world), _ref(cfg), err, len(err))
    if status != _lib.SUCCESS:
        _lib.raise_status(status, err.value.decode(errors="replace"), "agmm.torch.init (agmm_world_create)")
    return world.value


def _join(st, group, kind, timeout_s):
    """A process world: the unique id made on the group's rank 0 and broadcast through the group,
    then agmm_world_join with the group's rank and size and torch's current device."""
    lib, code = _lib.lib(), _lib.WORLD_KINDS[kind]
    uid = _lib.UniqueId()
    made = (_lib.SUCCESS, b"")
    if st.rank == 0:
        made = (lib.agmm_unique_id_create(code, _ref(uid)), bytes(uid.bytes))
    box = [made]
    dist.broadcast_object_list(box, src=dist.get_global_rank(group, 0), group=st.exchange_group)
    status, raw = box[0]
    if status != _lib.SUCCESS:
        _lib.raise_status(status, f"agmm_unique_id_create({kind}) failed on rank 0", "agmm.torch.init")
    uid.bytes[:] = raw
    cfg = _lib.JoinConfig(kind=code, rank=st.rank, nranks=st.nranks, device=st.device.index,
                          id=_lib.ctypes.pointer(uid), timeout_s=timeout_s)
    world, err = _lib.ctypes.c_void_p(), _lib.ctypes.create_string_buffer(512)
    status = lib.agmm_world_join(_ref(world), _ref(cfg), err, len(err))
    if status != _lib.SUCCESS:
        _lib.raise_status(status, err.value.decode(errors="replace"), "agmm.torch.init (agmm_world_join)")
    return world.value


def finalize():
    """Waits for this rank's work, destroys every cached plan, frees symmetric memory still
    allocated (tensors from symm_empty must not be used afterwards), and leaves the world.
    Collective. A no-op when not initialised."""
    global _state
    st = _state
    if st is None:
        return
    _state = None
    torch.cuda.synchronize(st.device)
    alive = [p for p in st.ctx.symmetric_allocations() if _dlpack.live(p)]
    if alive:
        warnings.warn(f"agmm.torch.finalize: {len(alive)} allocation(s) from symm_empty still have live tensors; "
                      "their memory is freed now, and those tensors must not be used again", stacklevel=2)
    lib, ctx_ptr = _lib.lib(), st.ctx.ptr
    try:
        st.ctx.close("agmm.torch.finalize() ended this rank")
    finally:
        lib.agmm_ctx_destroy(ctx_ptr)
        lib.agmm_world_destroy(st.world)
        dist.destroy_process_group(st.exchange_group)


def _ref(x):
    return _lib.ctypes.byref(x)


# ---- checks shared by the real and the fake implementations -------------------------------------

def _need_tensor(op, name, t):
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"agmm.torch.{op}: {name}: {type(t).__name__}; want a torch.Tensor")


def _need_device(op, name, t, st):
    if t.device != st.device:
        raise ValueError(f"agmm.torch.{op}: {name}: on {t.device}; agmm.torch.init joined {st.device} "
                         "(torch.cuda.current_device() at init)")


def _check_ag_matmul(st, a_shard, b, op="ag_matmul", a_name="a_shard"):
    """(m, n, k, layout) of a valid call; raises naming the argument otherwise. The row-parallel
    matmuls check their (a, b) the same way."""
    for name, t in ((a_name, a_shard), ("b", b)):
        if t.dtype != torch.bfloat16:
            raise TypeError(f"agmm.torch.{op}: {name}: dtype {t.dtype}; want torch.bfloat16")
        if t.dim() != 2:
            raise ValueError(f"agmm.torch.{op}: {name}: {t.dim()}-d tensor of shape {tuple(t.shape)}; want a matrix")
        _need_device(op, name, t, st)
    if not a_shard.is_contiguous():
        raise ValueError(f"agmm.torch.{op}: {a_name}: not contiguous (shape {tuple(a_shard.shape)}, strides "
                         f"{a_shard.stride()}); pass {a_name}.contiguous()")
    m, k = a_shard.shape
    if b.shape[0] != k:
        raise ValueError(f"agmm.torch.{op}: b: shape {tuple(b.shape)}; its rows must equal {a_name}'s columns (K={k})")
    n = b.shape[1]
    if b.t().is_contiguous():               # the seed's layout (first: a single column is both)
        layout = _lib.LAYOUT_COL_MAJOR
    elif b.is_contiguous():
        layout = _lib.LAYOUT_ROW_MAJOR
    else:
        raise ValueError(f"agmm.torch.{op}: b: strides {b.stride()} for shape {tuple(b.shape)}: want a contiguous "
                         "(K, N) tensor or w.T of a contiguous (N, K) w")
    return m, n, k, layout


def _check_out(st, a_gathered, c, rows, k, n):
    for name, t, shape in (("a_gathered", a_gathered, (rows, k)), ("c", c, (rows, n))):
        if t.dtype != torch.bfloat16:
            raise TypeError(f"agmm.torch.ag_matmul: out ({name}): dtype {t.dtype}; want torch.bfloat16")
        if tuple(t.shape) != shape:
            raise ValueError(f"agmm.torch.ag_matmul: out ({name}): shape {tuple(t.shape)}; want {shape}")
        if not t.is_contiguous():
            raise ValueError(f"agmm.torch.ag_matmul: out ({name}): not contiguous")
        _need_device("ag_matmul", f"out ({name})", t, st)


def _all_reduce_dtype(st, t):
    if t.dtype == torch.bfloat16:
        dtype = _lib.DTYPE_BF16
    elif t.dtype == torch.float32:
        dtype = _lib.DTYPE_F32
    else:
        raise TypeError(f"agmm.torch.all_reduce_: t: dtype {t.dtype}; want torch.bfloat16 or torch.float32")
    _need_device("all_reduce_", "t", t, st)
    if not t.is_contiguous():
        raise ValueError(f"agmm.torch.all_reduce_: t: not contiguous (strides {t.stride()}); reduce a contiguous "
                         "tensor")
    return dtype


def _check_rmsnorm(st, x, gamma, bias, residual, real):
    """(tokens, hidden) of a valid all_reduce_rmsnorm call; raises naming the argument otherwise.
    real: the tensors hold data (not torch.compile's fake ones), so their addresses are checked."""
    op = "all_reduce_rmsnorm"
    for name, t in (("x", x), ("gamma", gamma), ("bias", bias), ("residual", residual)):
        if t is None:
            continue
        if t.dtype != torch.bfloat16:
            raise TypeError(f"agmm.torch.{op}: {name}: dtype {t.dtype}; want torch.bfloat16")
        _need_device(op, name, t, st)
        if not t.is_contiguous():
            raise ValueError(f"agmm.torch.{op}: {name}: not contiguous (shape {tuple(t.shape)}, strides "
                             f"{t.stride()}); pass {name}.contiguous()")
        # The kernels move 16-byte vectors; a view starting inside a row would be misaligned.
        if real and t.data_ptr() % 16:
            raise ValueError(f"agmm.torch.{op}: {name}: its data starts at {t.data_ptr():#x}, not 16-byte aligned "
                             f"(a view at an offset?); pass {name}.clone()")
    if x.dim() < 1 or x.numel() == 0:
        raise ValueError(f"agmm.torch.{op}: x: shape {tuple(x.shape)}; want (..., H) with rows")
    h = x.shape[-1]
    if tuple(gamma.shape) != (h,):
        raise ValueError(f"agmm.torch.{op}: gamma: shape {tuple(gamma.shape)}; want ({h},), x's last dimension")
    if bias is not None and tuple(bias.shape) != (h,):
        raise ValueError(f"agmm.torch.{op}: bias: shape {tuple(bias.shape)}; want ({h},), x's last dimension")
    if residual is not None and residual.shape != x.shape:
        raise ValueError(f"agmm.torch.{op}: residual: shape {tuple(residual.shape)}; want x's {tuple(x.shape)}")
    return x.numel() // h, h


# ---- running ------------------------------------------------------------------------------------

def _enter_run(st, op):
    """The stream to run on: torch's current one, or in an emulated world the side stream
    ordered after it when the current stream is the legacy NULL stream (refused there)."""
    if threading.get_ident() != st.thread:
        raise RuntimeError(f"agmm.torch.{op}: called from another thread than init's: a rank's context enqueues "
                           "from the thread that created it (include/agmm.h, agmm_ctx_create)")
    current = torch.cuda.current_stream(st.device)
    if st.side_stream is not None and current.cuda_stream == 0:
        st.side_stream.wait_stream(current)
        return current, st.side_stream
    return current, current


def _capturing(op):
    """None outside a capture; else the message for a plan that would have to be made in it."""
    return _CAPTURE_MESSAGE.format(op=op) if torch.cuda.is_current_stream_capturing() else None


def _copy_in(st, plan, source, shape, dtype, stream):
    """Copies a non-symmetric input into the plan's buffer on `stream`. The buffer is read by the
    plan's previous run: if that ran on another stream, wait for it first."""
    if plan.view is None:
        plan.view = _dlpack.tensor(torch, plan.input_ptr, shape, dtype, st.device)
    # In a capture, torch.cuda.graph has already ordered the capture stream after the eager work,
    # and a wait on a stream outside the capture is not allowed there.
    if plan.last_stream is not None and plan.last_stream != stream and not torch.cuda.is_current_stream_capturing():
        stream.wait_stream(plan.last_stream)
    with torch.cuda.stream(stream):
        plan.view.copy_(source.view(shape))
    st.ctx.count_copy_in(plan.input_bytes)


def _run_ag_matmul(a_shard, b, a_gathered, c, backend, splits):
    st = _current()
    m, n, k, layout = _check_ag_matmul(st, a_shard, b)
    current, stream = _enter_run(st, "ag_matmul")
    ctx = st.ctx
    plan = ctx.ag_matmul_plan(m, n, k, layout, backend_key("ag_matmul", backend), splits,
                              capturing=_capturing("ag_matmul"))
    source = a_shard.data_ptr()
    if not ctx.input_in_place(plan, source, "ag_matmul", "a_shard"):
        _copy_in(st, plan, a_shard, (m, k), torch.bfloat16, stream)
        source = None
    ctx.run_ag_matmul(plan, b.data_ptr(), a_gathered.data_ptr(), c.data_ptr(), source, stream.cuda_stream)
    plan.last_stream = stream
    if stream is not current:
        current.wait_stream(stream)


def _run_all_reduce(t, backend):
    st = _current()
    dtype = _all_reduce_dtype(st, t)
    current, stream = _enter_run(st, "all_reduce_")
    ctx = st.ctx
    plan = ctx.all_reduce_plan(t.numel(), dtype, backend_key("all_reduce_", backend), capturing=_capturing("all_reduce_"))
    address = t.data_ptr()
    source = address
    if not ctx.input_in_place(plan, address, "all_reduce_", "t"):
        _copy_in(st, plan, t, (t.numel(),), t.dtype, stream)
        source = None
    ctx.run_all_reduce(plan, address, source, stream.cuda_stream)
    plan.last_stream = stream
    if stream is not current:
        current.wait_stream(stream)


def _mr_rows(op, m):
    """The rows of S this rank's output of op holds."""
    return _current().ctx.reduce_scatter_rows(m)[1] if op == "matmul_reduce_scatter" else m


def _run_matmul_reduce(op, a, b, backend):
    """The row-parallel matmuls: A comes with the run (no plan input, nothing copied)."""
    st = _current()
    m, n, k, layout = _check_ag_matmul(st, a, b, op, "a")
    current, stream = _enter_run(st, op)
    ctx = st.ctx
    plan = ctx.matmul_reduce_plan(op, m, n, k, layout, backend_key(op, backend), capturing=_capturing(op))
    rows = _mr_rows(op, m)
    out = a.new_empty((rows, n))
    if stream is not current:
        stream.wait_stream(current)   # a, b and out were made on the current stream
    ctx.run_matmul_reduce(plan, a.data_ptr(), b.data_ptr(), out.data_ptr() if rows else None, stream.cuda_stream)
    if stream is not current:
        current.wait_stream(stream)
        for t in (a, b, out):
            t.record_stream(stream)
    return out


def _run_all_reduce_rmsnorm(x, gamma, bias, residual, eps, backend, y, residual_out):
    st = _current()
    tokens, hidden = _check_rmsnorm(st, x, gamma, bias, residual, real=True)
    current, stream = _enter_run(st, "all_reduce_rmsnorm")
    ctx = st.ctx
    plan = ctx.all_reduce_rmsnorm_plan(tokens, hidden, eps, backend_key("all_reduce_rmsnorm", backend),
                                       capturing=_capturing("all_reduce_rmsnorm"))
    source = x.data_ptr()
    if not ctx.input_in_place(plan, source, "all_reduce_rmsnorm", "x"):
        _copy_in(st, plan, x, (tokens * hidden,), torch.bfloat16, stream)
        source = None
    ctx.run_all_reduce_rmsnorm(plan, y.data_ptr(), residual_out.data_ptr(), gamma.data_ptr(),
                               None if bias is None else bias.data_ptr(),
                               None if residual is None else residual.data_ptr(), source, stream.cuda_stream)
    plan.last_stream = stream
    if stream is not current:
        current.wait_stream(stream)


# ---- the custom ops ------------------------------------------------------------------------------

@torch.library.custom_op("agmm::ag_matmul", mutates_args=(),
                         schema="(Tensor a_shard, Tensor b, str backend, int splits) -> (Tensor, Tensor)")
def _ag_matmul_op(a_shard, b, backend, splits):
    rows = world_size() * a_shard.shape[0]
    a_gathered = a_shard.new_empty((rows, a_shard.shape[1]))
    c = a_shard.new_empty((rows, b.shape[1]))
    _run_ag_matmul(a_shard, b, a_gathered, c, backend, splits)
    return a_gathered, c


@_ag_matmul_op.register_fake
def _ag_matmul_fake(a_shard, b, backend, splits):
    m, n, k, _ = _check_ag_matmul(_current(), a_shard, b)
    rows = world_size() * m
    return a_shard.new_empty((rows, k)), a_shard.new_empty((rows, n))


@torch.library.custom_op("agmm::ag_matmul_out", mutates_args=("a_gathered", "c"),
                         schema="(Tensor a_shard, Tensor b, Tensor(a!) a_gathered, Tensor(b!) c, str backend, "
                                "int splits) -> ()")
def _ag_matmul_out_op(a_shard, b, a_gathered, c, backend, splits):
    st = _current()
    m, n, k, _ = _check_ag_matmul(st, a_shard, b)
    _check_out(st, a_gathered, c, st.nranks * m, k, n)
    _run_ag_matmul(a_shard, b, a_gathered, c, backend, splits)


@_ag_matmul_out_op.register_fake
def _ag_matmul_out_fake(a_shard, b, a_gathered, c, backend, splits):
    st = _current()
    m, n, k, _ = _check_ag_matmul(st, a_shard, b)
    _check_out(st, a_gathered, c, st.nranks * m, k, n)


@torch.library.custom_op("agmm::all_reduce_", mutates_args=("t",), schema="(Tensor(a!) t, str backend) -> ()")
def _all_reduce_op(t, backend):
    _run_all_reduce(t, backend)


@_all_reduce_op.register_fake
def _all_reduce_fake(t, backend):
    _all_reduce_dtype(_current(), t)


@torch.library.custom_op("agmm::matmul_reduce_scatter", mutates_args=(),
                         schema="(Tensor a, Tensor b, str backend) -> Tensor")
def _matmul_reduce_scatter_op(a, b, backend):
    return _run_matmul_reduce("matmul_reduce_scatter", a, b, backend)


@_matmul_reduce_scatter_op.register_fake
def _matmul_reduce_scatter_fake(a, b, backend):
    m, n, _, _ = _check_ag_matmul(_current(), a, b, "matmul_reduce_scatter", "a")
    return a.new_empty((_mr_rows("matmul_reduce_scatter", m), n))


@torch.library.custom_op("agmm::matmul_all_reduce", mutates_args=(), schema="(Tensor a, Tensor b, str backend) -> Tensor")
def _matmul_all_reduce_op(a, b, backend):
    return _run_matmul_reduce("matmul_all_reduce", a, b, backend)


@_matmul_all_reduce_op.register_fake
def _matmul_all_reduce_fake(a, b, backend):
    m, n, _, _ = _check_ag_matmul(_current(), a, b, "matmul_all_reduce", "a")
    return a.new_empty((m, n))


@torch.library.custom_op("agmm::all_reduce_rmsnorm", mutates_args=(),
                         schema="(Tensor x, Tensor gamma, Tensor? bias, Tensor? residual, float eps, str backend) "
                                "-> (Tensor, Tensor)")
def _all_reduce_rmsnorm_op(x, gamma, bias, residual, eps, backend):
    y, residual_out = torch.empty_like(x), torch.empty_like(x)
    _run_all_reduce_rmsnorm(x, gamma, bias, residual, eps, backend, y, residual_out)
    return y, residual_out


@_all_reduce_rmsnorm_op.register_fake
def _all_reduce_rmsnorm_fake(x, gamma, bias, residual, eps, backend):
    _check_rmsnorm(_current(), x, gamma, bias, residual, real=False)
    return torch.empty_like(x), torch.empty_like(x)


# ---- the public functions -------------------------------------------------------------------------

def _need_backend(op, backend):
    if not isinstance(backend, str):
        names = backend_names(op if op != "all_reduce_" else "all_reduce")
        raise TypeError(f"agmm.torch.{op}: backend: {type(backend).__name__}; want 'auto' or one of {', '.join(names)}")


def ag_matmul(a_shard, b, *, backend="auto", splits=0, out=None):
    """(a_gathered, c): the concatenation of every rank's a_shard ((W*M, K)) and a_gathered @ b
    ((W*M, N)). a_shard: (M, K) bf16, contiguous, on init's device. b: (K, N) bf16, either w.T of a
    contiguous (N, K) w (the seed's layout) or contiguous. out: an optional pair (a_gathered, c)
    to write instead of allocating. backend: "auto" or one of backends("ag_matmul"); splits:
    chunks per rank for the chunked backends (0: 1). Collective; enqueued on the current stream."""
    _need_tensor("ag_matmul", "a_shard", a_shard)
    _need_tensor("ag_matmul", "b", b)
    _need_backend("ag_matmul", backend)
    splits = _lib.int_arg("agmm.torch.ag_matmul", "splits", splits)
    if out is None:
        return torch.ops.agmm.ag_matmul(a_shard, b, backend, splits)
    if not isinstance(out, (tuple, list)) or len(out) != 2:
        raise TypeError("agmm.torch.ag_matmul: out: want a pair (a_gathered, c)")
    _need_tensor("ag_matmul", "out (a_gathered)", out[0])
    _need_tensor("ag_matmul", "out (c)", out[1])
    torch.ops.agmm.ag_matmul_out(a_shard, b, out[0], out[1], backend, splits)
    return out[0], out[1]


def all_reduce_(t, *, backend="auto"):
    """t = the sum over ranks of t, in place; returns t. t: bf16 or fp32, contiguous, on init's
    device. backend: "auto" or one of backends("all_reduce"). Collective; on the current stream."""
    _need_tensor("all_reduce_", "t", t)
    _need_backend("all_reduce_", backend)
    torch.ops.agmm.all_reduce_(t, backend)
    return t


def matmul_reduce_scatter(a, b, *, backend="auto"):
    """This rank's block of rows of S = the sum over ranks of a @ b (each rank its own a and b):
    the row-parallel GEMM of a tensor-parallel layer, its partial sums reduce-scattered. Returns a
    (rows, N) bf16 tensor, rows = reduce_scatter_rows(M)[1]: blocks of ceil(M/W) rows in rank order
    (the last ranks short, or empty when M < W). a: (M, K) bf16, contiguous (K: this rank's slice
    of the reduced dimension); b: (K, N) bf16, w.T of a contiguous (N, K) w or contiguous; both on
    init's device and 16-byte aligned. The partials are added in fp32 in rank order, so every run
    gives the same bits (the nccl backend: NCCL's order). backend: "auto" or one of
    backends("matmul_reduce_scatter"). Collective; enqueued on the current stream."""
    _need_tensor("matmul_reduce_scatter", "a", a)
    _need_tensor("matmul_reduce_scatter", "b", b)
    _need_backend("matmul_reduce_scatter", backend)
    return torch.ops.agmm.matmul_reduce_scatter(a, b, backend)


def matmul_all_reduce(a, b, *, backend="auto"):
    """All of S = the sum over ranks of a @ b, (M, N) bf16, the same bits on every rank (decode's
    row-parallel layer). Arguments as matmul_reduce_scatter; backend: "auto" or one of
    backends("matmul_all_reduce"). Collective; enqueued on the current stream."""
    _need_tensor("matmul_all_reduce", "a", a)
    _need_tensor("matmul_all_reduce", "b", b)
    _need_backend("matmul_all_reduce", backend)
    return torch.ops.agmm.matmul_all_reduce(a, b, backend)


def reduce_scatter_rows(m):
    """(first row, rows) of S that this rank gets from matmul_reduce_scatter of an M-row S."""
    return _current().ctx.reduce_scatter_rows(m)


def all_reduce_rmsnorm(x, gamma, *, bias=None, residual=None, eps=1e-6, backend="auto"):
    """(y, residual_out), the end of a tensor-parallel layer: residual_out = the sum over ranks of
    x, + bias + residual (the new residual), y = RMSNorm(residual_out) * gamma with eps, in fp32
    and rounded as include/agmm.h says (the norm of the bf16 residual_out). x: (..., H) bf16,
    contiguous, on init's device (T = x.numel() / H rows; H a multiple of 8); gamma and bias: (H,);
    residual: x's shape; gamma, bias and residual hold the same values on every rank. An x in
    symm_empty memory is read in place, any other copied in first (x.nbytes). backend: "auto" or
    one of backends("all_reduce_rmsnorm"). Collective; enqueued on the current stream."""
    what = "all_reduce_rmsnorm"
    _need_tensor(what, "x", x)
    _need_tensor(what, "gamma", gamma)
    for name, t in (("bias", bias), ("residual", residual)):
        if t is not None:
            _need_tensor(what, name, t)
    _need_backend(what, backend)
    eps = eps_arg(f"agmm.torch.{what}", eps)
    return torch.ops.agmm.all_reduce_rmsnorm(x, gamma, bias, residual, eps, backend)


def symm_empty(shape, dtype=torch.bfloat16):
    """A contiguous tensor on init's device in agmm's symmetric memory (zero-filled at
    allocation): an ag_matmul shard or all_reduce_ tensor here is read in place by every rank, with
    no copy. Collective: every rank asks for the same shape, in the same order. The memory lives
    until symm_free(tensor) or finalize(), whichever comes first; the tensor (and its views) must
    not be used after that."""
    st = _current()
    what = "agmm.torch.symm_empty"
    shape = tuple(shape) if isinstance(shape, (tuple, list)) else (shape,)
    shape = tuple(_lib.int_arg(what, "shape", d, _lib.C_INT64) for d in shape)
    if any(d < 0 for d in shape):
        raise ValueError(f"{what}: shape: {shape}; want non-negative sizes")
    if not isinstance(dtype, torch.dtype):
        raise TypeError(f"{what}: dtype: {dtype!r}; want a torch.dtype")
    numel = 1
    for d in shape:
        numel *= d
    nbytes = numel * torch.empty((), dtype=dtype).element_size()     # Python ints: exact, checked below
    if nbytes == 0:
        raise ValueError(f"{what}: shape: {shape} holds no bytes")
    if nbytes > sys.maxsize:
        raise ValueError(f"{what}: shape: {shape} of {dtype} is {nbytes} bytes; a tensor holds at most {sys.maxsize}")
    ptr = st.ctx.symmetric_alloc(nbytes, "agmm.torch.symm_empty")
    return _dlpack.tensor(torch, ptr, shape, dtype, st.device)


def symm_free(t):
    """Frees the memory of a tensor symm_empty returned, after this rank's queued work on its
    device has finished. Collective. Every tensor over that memory is invalid afterwards."""
    st = _current()
    _need_tensor("symm_free", "t", t)
    torch.cuda.synchronize(st.device)
    st.ctx.symmetric_free(t.data_ptr(), "agmm.torch.symm_free")
