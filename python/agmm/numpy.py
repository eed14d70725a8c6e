"""The numpy level: agmm's CPU world (ranks are threads, or processes from a launcher; memory is
host memory) driven with numpy arrays. This is how the binding is tested without torch or a GPU,
and a way to try the operations on any machine.

    import agmm.numpy as anp

    def step(rank):                      # runs once per rank, each on its own thread
        a = anp.to_bf16(rng.standard_normal((M, K)))
        a_gathered, c = rank.ag_matmul(a, b)
        s_rows = rank.matmul_reduce_scatter(a_local, b_local)   # the row-parallel half
        return anp.from_bf16(c)

    with anp.World(4) as world:
        results = world.run(step)        # [result of rank 0, 1, 2, 3]

numpy has no bfloat16: bf16 arrays are uint16 arrays holding the bits (to_bf16/from_bf16 convert),
or ml_dtypes.bfloat16 arrays where that package is installed.
"""
from __future__ import annotations

import ctypes
import threading

import numpy as np

from . import _lib
from ._core import Context, backend_key, backends_available

__all__ = ["World", "Rank", "join", "unique_id", "reduce_scatter_rows", "to_bf16", "from_bf16"]


def to_bf16(x):
    """float array -> uint16 array of bf16 bits, rounded to nearest even (NaN stays NaN)."""
    f = np.ascontiguousarray(x, dtype=np.float32)
    u = f.view(np.uint32).astype(np.uint64)
    out = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)
    out[np.isnan(f)] = 0x7FC0
    return out


def from_bf16(u):
    """bf16 bits (uint16, or ml_dtypes.bfloat16) -> float32 array, exactly."""
    u = np.ascontiguousarray(u)
    return (u.view(np.uint16).astype(np.uint32) << 16).view(np.float32)


def _is_bf16(dtype):
    return dtype == np.uint16 or (dtype.itemsize == 2 and dtype.name == "bfloat16")


def _address(x):
    return x.__array_interface__["data"][0]


def _need_array(what, name, x):
    if not isinstance(x, np.ndarray):
        raise TypeError(f"{what}: {name}: {type(x).__name__}; give a numpy array")


def _need_bf16(what, name, x):
    if not _is_bf16(x.dtype):
        raise TypeError(f"{what}: {name}: dtype {x.dtype}; {what} takes bf16: a uint16 array of bf16 bits "
                        "(agmm.numpy.to_bf16) or ml_dtypes.bfloat16")


def _need_c_contiguous(what, name, x):
    if not x.flags.c_contiguous:
        raise ValueError(f"{what}: {name}: not contiguous (shape {x.shape}, strides {x.strides}); "
                         f"pass numpy.ascontiguousarray({name})")


def _b_layout(what, b, k):
    """The layout a K x N B has in memory: b.T contiguous (the seed's) or b contiguous."""
    if b.ndim != 2 or b.shape[0] != k:
        raise ValueError(f"{what}: b: shape {b.shape}; want (K, N) with K = {k}, a_shard's columns")
    if b.flags.f_contiguous:        # also true for a contiguous single column: column-major has no N rule
        return _lib.LAYOUT_COL_MAJOR
    if b.flags.c_contiguous:
        return _lib.LAYOUT_ROW_MAJOR
    raise ValueError(f"{what}: b: strides {b.strides} for shape {b.shape} are neither a contiguous K x N matrix "
                     "nor b.T of a contiguous N x K one")


def _check_out(what, out, shapes, dtype):
    if not isinstance(out, (tuple, list)) or len(out) != 2:
        raise TypeError(f"{what}: out: give a pair (a_gathered, c), not {type(out).__name__}")
    for name, x, shape in zip(("out[0] (a_gathered)", "out[1] (c)"), out, shapes):
        _need_array(what, name, x)
        if x.dtype != dtype:
            raise TypeError(f"{what}: {name}: dtype {x.dtype}; want {dtype}, a_shard's")
        if x.shape != shape:
            raise ValueError(f"{what}: {name}: shape {x.shape}; want {shape}")
        _need_c_contiguous(what, name, x)
        if not x.flags.writeable:
            raise ValueError(f"{what}: {name}: read-only array")


def _host_view(ptr, nbytes):
    """A writable uint8 array over host memory the library owns (no copy, no ownership)."""
    return np.ctypeslib.as_array((ctypes.c_ubyte * nbytes).from_address(ptr))


class Rank:
    """One rank of a CPU world: the operations on numpy arrays. Made by World.run (one per rank
    thread) or by join (one per process). Every call is collective: each rank makes it, in the same
    order, with the same shapes."""

    def __init__(self, ctx):
        self._ctx = ctx

    rank = property(lambda self: self._ctx.rank, doc="this rank's index, 0 .. nranks-1")
    nranks = property(lambda self: self._ctx.nranks, doc="W, the ranks of the world")
    stats = property(lambda self: dict(self._ctx.stats),
                     doc="runs, plans created/evicted, and copies into plan inputs (count, bytes)")

    def plans(self):
        """The cached plans, least recently used first: [(key, backend that runs)]."""
        return self._ctx.plans()

    def ag_matmul(self, a_shard, b, *, backend="auto", splits=0, out=None):
        """(a_gathered, c) = (concatenation of every rank's a_shard, a_gathered @ b).

        a_shard: (M, K) bf16, C-contiguous. b: (K, N) bf16, C-contiguous or b.T C-contiguous (the
        seed's layout). out: an optional pair of arrays to write, ((W*M, K), (W*M, N)). An a_shard
        that lies in symm_empty memory is read in place by every rank; any other is first copied
        into the plan's input buffer (M*K*2 bytes, counted in stats)."""
        what = "ag_matmul"
        _need_array(what, "a_shard", a_shard)
        _need_array(what, "b", b)
        _need_bf16(what, "a_shard", a_shard)
        if a_shard.ndim != 2:
            raise ValueError(f"{what}: a_shard: shape {a_shard.shape}; want a matrix (M, K)")
        _need_c_contiguous(what, "a_shard", a_shard)
        if b.dtype != a_shard.dtype:
            raise TypeError(f"{what}: b: dtype {b.dtype}; want {a_shard.dtype}, a_shard's")
        if not isinstance(splits, int):
            raise TypeError(f"{what}: splits: {type(splits).__name__}; want an int")
        m, k = a_shard.shape
        layout = _b_layout(what, b, k)
        n = b.shape[1]
        rows = self.nranks * m
        if out is None:
            out = (np.empty((rows, k), a_shard.dtype), np.empty((rows, n), a_shard.dtype))
        else:
            _check_out(what, out, ((rows, k), (rows, n)), a_shard.dtype)
        ctx = self._ctx
        plan = ctx.ag_matmul_plan(m, n, k, layout, backend_key(what, backend), splits)
        source = _address(a_shard)
        if not ctx.is_symmetric(source, plan.input_bytes):
            if plan.view is None:
                plan.view = _host_view(plan.input_ptr, plan.input_bytes)
            plan.view[:] = a_shard.reshape(-1).view(np.uint8)
            ctx.count_copy_in(plan.input_bytes)
            source = None
        ctx.run_ag_matmul(plan, _address(b), _address(out[0]), _address(out[1]), source, None)
        return out[0], out[1]

    def all_reduce_(self, x, *, backend="auto"):
        """x += every other rank's x, in place (sum over ranks); returns x. x: contiguous, float32
        or bf16. An x in symm_empty memory is reduced in place with no copy; any other is copied
        into the plan's input buffer first (x.nbytes, counted in stats)."""
        what = "all_reduce_"
        _need_array(what, "x", x)
        if x.dtype == np.float32:
            dtype = _lib.DTYPE_F32
        elif _is_bf16(x.dtype):
            dtype = _lib.DTYPE_BF16
        else:
            raise TypeError(f"{what}: x: dtype {x.dtype}; want float32 or bf16 (uint16 bits, or ml_dtypes.bfloat16)")
        if not (x.flags.c_contiguous or x.flags.f_contiguous):
            raise ValueError(f"{what}: x: not contiguous (strides {x.strides}); reduce a contiguous copy")
        if not x.flags.writeable:
            raise ValueError(f"{what}: x: read-only array")
        ctx = self._ctx
        plan = ctx.all_reduce_plan(x.size, dtype, backend_key(what, backend))
        address = _address(x)
        source = address
        if not ctx.is_symmetric(address, plan.input_bytes):
            if plan.view is None:
                plan.view = _host_view(plan.input_ptr, plan.input_bytes)
            plan.view[:] = x.reshape(-1, order="A").view(np.uint8)
            ctx.count_copy_in(plan.input_bytes)
            source = None
        ctx.run_all_reduce(plan, address, source, None)
        return x

    def matmul_reduce_scatter(self, a, b, *, backend="auto", out=None):
        """This rank's block of rows of S = the sum over ranks of a @ b (each rank passing its own a
        and b): rows reduce_scatter_rows(M, nranks, rank) of S, as an (rows, N) bf16 array (rows may
        be 0 when M < nranks). a: (M, K) bf16, C-contiguous; b: (K, N) bf16, C-contiguous or b.T
        C-contiguous. The partials are added in fp32 in rank order (bit for bit the same on every
        backend of the CPU world). out: an optional (rows, N) array to write."""
        return self._matmul_reduce("matmul_reduce_scatter", a, b, backend, out)

    def matmul_all_reduce(self, a, b, *, backend="auto", out=None):
        """All of S = the sum over ranks of a @ b, (M, N) bf16, the same bits on every rank; as
        matmul_reduce_scatter otherwise."""
        return self._matmul_reduce("matmul_all_reduce", a, b, backend, out)

    def _matmul_reduce(self, what, a, b, backend, out):
        _need_array(what, "a", a)
        _need_array(what, "b", b)
        _need_bf16(what, "a", a)
        if a.ndim != 2:
            raise ValueError(f"{what}: a: shape {a.shape}; want a matrix (M, K)")
        _need_c_contiguous(what, "a", a)
        if b.dtype != a.dtype:
            raise TypeError(f"{what}: b: dtype {b.dtype}; want {a.dtype}, a's")
        m, k = a.shape
        layout = _b_layout(what, b, k)
        n = b.shape[1]
        ctx = self._ctx
        rows = ctx.reduce_scatter_rows(m)[1] if what == "matmul_reduce_scatter" else m
        if out is None:
            out = np.empty((rows, n), a.dtype)
        else:
            _need_array(what, "out", out)
            if out.dtype != a.dtype or out.shape != (rows, n):
                raise ValueError(f"{what}: out: {out.dtype} array of shape {out.shape}; want {a.dtype} ({rows}, {n})")
            _need_c_contiguous(what, "out", out)
            if not out.flags.writeable:
                raise ValueError(f"{what}: out: read-only array")
        plan = ctx.matmul_reduce_plan(what, m, n, k, layout, backend_key(what, backend))
        ctx.run_matmul_reduce(plan, _address(a), _address(b), _address(out) if rows else None, None)
        return out

    def all_reduce_rmsnorm(self, x, gamma, *, bias=None, residual=None, eps=1e-6, backend="auto", out=None):
        """(y, residual_out): residual_out = the sum over ranks of x, + bias + residual (the new
        residual), y = RMSNorm(residual_out) * gamma (include/agmm.h has the fp32 order).

        x: (..., H) bf16, C-contiguous: T = x.size / H rows. gamma and bias: (H,) bf16; residual:
        x's shape, bf16; gamma, bias and residual hold the same values on every rank. out: an
        optional pair (y, residual_out) of x's shape to write; residual_out may be residual (the
        residual updated in place). An x in symm_empty memory is read in place; any other is first
        copied into the plan's input buffer (x.nbytes, counted in stats)."""
        what = "all_reduce_rmsnorm"
        _need_array(what, "x", x)
        _need_bf16(what, "x", x)
        _need_c_contiguous(what, "x", x)
        if x.ndim < 1 or x.shape[-1] == 0:
            raise ValueError(f"{what}: x: shape {x.shape}; want (..., H) with H >= 8 a multiple of 8")
        h = x.shape[-1]
        for name, t, shape in (("gamma", gamma, (h,)), ("bias", bias, (h,)), ("residual", residual, x.shape)):
            if t is None and name != "gamma":
                continue
            _need_array(what, name, t)
            _need_bf16(what, name, t)
            if t.shape != shape:
                raise ValueError(f"{what}: {name}: shape {t.shape}; want {shape}")
            _need_c_contiguous(what, name, t)
        if out is None:
            out = (np.empty_like(x), np.empty_like(x))
        elif not isinstance(out, (tuple, list)) or len(out) != 2:
            raise TypeError(f"{what}: out: give a pair (y, residual_out), not {type(out).__name__}")
        for name, t in zip(("out[0] (y)", "out[1] (residual_out)"), out):
            _need_array(what, name, t)
            _need_bf16(what, name, t)
            if t.shape != x.shape:
                raise ValueError(f"{what}: {name}: shape {t.shape}; want x's {x.shape}")
            _need_c_contiguous(what, name, t)
            if not t.flags.writeable:
                raise ValueError(f"{what}: {name}: read-only array")
        ctx = self._ctx
        plan = ctx.all_reduce_rmsnorm_plan(x.size // h, h, eps, backend_key(what, backend))
        source = _address(x)
        if not ctx.is_symmetric(source, plan.input_bytes):
            if plan.view is None:
                plan.view = _host_view(plan.input_ptr, plan.input_bytes)
            plan.view[:] = x.reshape(-1).view(np.uint8)
            ctx.count_copy_in(plan.input_bytes)
            source = None
        ctx.run_all_reduce_rmsnorm(plan, _address(out[0]), _address(out[1]), _address(gamma),
                                   None if bias is None else _address(bias),
                                   None if residual is None else _address(residual), source, None)
        return out[0], out[1]

    def symm_empty(self, shape, dtype):
        """An uninitialised array in agmm's symmetric memory (zeroed by the library): a shard or
        vector written here is read in place by ag_matmul / all_reduce_. Collective (every rank
        asks for the same size). Valid until symm_free(array) or the end of the rank."""
        what = "symm_empty"
        shape = (shape,) if isinstance(shape, int) else tuple(shape)
        if not all(isinstance(d, int) and d >= 0 for d in shape):
            raise ValueError(f"{what}: shape: {shape}; want non-negative ints")
        dtype = np.dtype(dtype)
        nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
        if nbytes == 0:
            raise ValueError(f"{what}: shape: {shape} holds no bytes")
        ptr = self._ctx.symmetric_alloc(nbytes, what)
        return _host_view(ptr, nbytes).view(dtype).reshape(shape)

    def symm_free(self, array):
        """Frees what symm_empty returned (collective). Every array over that memory is invalid
        afterwards."""
        _need_array("symm_free", "array", array)
        self._ctx.symmetric_free(_address(array), "symm_free")

    def sync(self):
        self._ctx.sync()


class _ThreadExchange:
    """How the rank threads of one World.run compare their plans before making them: every rank
    posts an object and gets every rank's, within the world's timeout. abort() (a rank failed)
    releases the ranks waiting for a round that can no longer complete; a round that did complete
    still returns normally."""

    def __init__(self, nranks, timeout_s):
        self._n, self._timeout_s = nranks, timeout_s
        self._cond = threading.Condition()
        self._round = 0
        self._posted = {}
        self._done = None          # (round, objects by rank) of the last complete round
        self._aborted = False

    def __call__(self, rank, obj):
        with self._cond:
            mine = self._round
            self._posted[rank] = obj
            if len(self._posted) == self._n:
                self._done = (mine, [self._posted[r] for r in range(self._n)])
                self._posted = {}
                self._round += 1
                self._cond.notify_all()
            else:
                self._cond.wait_for(lambda: self._round != mine or self._aborted, self._timeout_s)
            if self._round == mine:
                why = "a peer rank failed" if self._aborted else f"not every rank reached it within {self._timeout_s:g} s"
                raise _lib.Timeout(f"rank {rank}: the ranks' check that they make the same call failed: {why}",
                                   _lib.TIMEOUT)
            # Nobody starts round mine + 2 before this rank has posted to mine + 1: _done is mine's.
            return self._done[1]

    def abort(self):
        with self._cond:
            self._aborted = True
            self._cond.notify_all()


class World:
    """A CPU world of `nranks` threads in this process (agmm_world_create with kind CPU).
    timeout_s bounds every wait for a peer (0: the library's default, AGMM_TIMEOUT_S or 5 s);
    max_plans bounds each rank's plan cache. close() (or the end of a `with`) destroys it."""

    def __init__(self, nranks=4, *, timeout_s=0.0, max_plans=16):
        if not isinstance(nranks, int):
            raise TypeError(f"World: nranks: {type(nranks).__name__}; want an int")
        lib = _lib.lib()
        cfg = _lib.WorldConfig(kind=_lib.WORLD_KINDS["cpu"], nranks=nranks, timeout_s=timeout_s)
        ptr, err = ctypes.c_void_p(), ctypes.create_string_buffer(512)
        st = lib.agmm_world_create(ctypes.byref(ptr), ctypes.byref(cfg), err, len(err))
        if st != _lib.SUCCESS:
            _lib.raise_status(st, err.value.decode(errors="replace"), "World",
                              lambda text: text.split("=", 1)[0] if "=" in text else None)
        self._ptr = ptr.value
        self.nranks = lib.agmm_world_nranks(self._ptr)
        self.timeout_s = timeout_s if timeout_s > 0 else lib.agmm_world_default_timeout_s()
        self.max_plans = max_plans
        self.describe = lib.agmm_world_describe(self._ptr).decode()

    def backends(self, op):
        """{backend of op: "" where this world runs it, else why not} (agmm_backend_available)."""
        return backends_available(self._ptr, op)

    def run(self, fn, *args, **kwargs):
        """Calls fn(rank, *args, **kwargs) once per rank, each on its own thread, and returns
        their results by rank. An exception on any rank is raised here (the first by rank that is
        not a consequence of another's: a peer's timeout is), after every rank has returned; the
        ranks' plans and symmetric memory are freed when fn returns."""
        if self._ptr is None:
            raise ValueError("World.run: the world is closed")
        n = self.nranks
        results, errors = [None] * n, [None] * n
        exchange = _ThreadExchange(n, self.timeout_s)

        def rank_main(ctx_ptr, _arg):
            ctx = Context(ctx_ptr, n, None, self.max_plans)
            r = ctx.rank
            ctx._exchange = lambda obj: exchange(r, obj)
            try:
                try:
                    results[r] = fn(Rank(ctx), *args, **kwargs)
                finally:
                    ctx.close()
                return _lib.SUCCESS
            except BaseException as e:     # a callback must not raise into C: report and unblock peers
                errors[r] = e
                exchange.abort()
                return _lib.INTERNAL

        callback = _lib.RANK_FN(rank_main)
        st = _lib.lib().agmm_world_run(self._ptr, callback, None)
        failed = [(r, e) for r, e in enumerate(errors) if e is not None]
        if failed:
            causes = [f for f in failed if not isinstance(f[1], _lib.Timeout)] or failed
            r, primary = causes[0]
            if hasattr(primary, "add_note"):
                primary.add_note(f"(raised on rank {r} of {n})")
                for other_rank, other in failed:
                    if other is not primary:
                        primary.add_note(f"rank {other_rank}: {type(other).__name__}: {other}")
            raise primary
        if st != _lib.SUCCESS:
            _lib.raise_status(st, "a rank's context could not be created or its thread started "
                              "(AGMM_LOG=debug says why)", "World.run")
        return results

    def close(self):
        if self._ptr is not None:
            _lib.lib().agmm_world_destroy(self._ptr)
            self._ptr = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        if getattr(self, "_ptr", None) is not None:
            self.close()


class ProcessRank(Rank):
    """This process's rank of a CPU world whose ranks are processes (join). close() (or the end of
    a `with`) is collective: it frees the rank's plans and memory and leaves the world."""

    def __init__(self, ctx, world_ptr):
        super().__init__(ctx)
        self._world = world_ptr

    def backends(self, op):
        """{backend of op: "" where this world runs it, else why not} (agmm_backend_available)."""
        return backends_available(self._world, op)

    def close(self):
        if self._world is not None:
            lib = _lib.lib()
            self._ctx.close()
            lib.agmm_ctx_destroy(self._ctx.ptr)
            lib.agmm_world_destroy(self._world)
            self._world = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def reduce_scatter_rows(m, nranks, rank):
    """(first row, rows) of S that `rank` of `nranks` gets from matmul_reduce_scatter: blocks of
    ceil(M / nranks) rows in rank order, the last ranks short or empty (include/agmm.h)."""
    return _lib.reduce_scatter_rows(m, nranks, rank)


def unique_id(kind="cpu"):
    """A fresh id (bytes) for a world of processes; make it on one process and send it to the
    others over your own channel, then join(unique_id=...)."""
    uid = _lib.UniqueId()
    if kind not in _lib.WORLD_KINDS:
        raise ValueError(f"unique_id: kind={kind!r}: want one of {', '.join(_lib.WORLD_KINDS)}")
    st = _lib.lib().agmm_unique_id_create(_lib.WORLD_KINDS[kind], ctypes.byref(uid))
    if st != _lib.SUCCESS:
        _lib.raise_status(st, "agmm_unique_id_create failed", "unique_id", "kind")
    return bytes(uid.bytes)


def join(*, rank=-1, nranks=-1, unique_id=None, timeout_s=0.0, max_plans=16):
    """Joins a CPU world whose ranks are processes, as one rank; returns its ProcessRank.
    rank/nranks -1 (default): from the launcher's environment (torchrun's RANK and WORLD_SIZE,
    Open MPI's, MPICH's, Slurm's); unique_id None: the library bootstraps from the environment.
    Collective over the processes. No Python-side check that the ranks plan alike here (the
    processes share no channel but the library's)."""
    lib = _lib.lib()
    cfg = _lib.JoinConfig(kind=_lib.WORLD_KINDS["cpu"], rank=rank, nranks=nranks, device=-1,
                          timeout_s=timeout_s)
    if unique_id is not None:
        if not isinstance(unique_id, (bytes, bytearray)) or len(unique_id) != _lib.UNIQUE_ID_BYTES:
            raise ValueError(f"join: unique_id: want the {_lib.UNIQUE_ID_BYTES} bytes unique_id() made")
        uid = _lib.UniqueId()
        ctypes.memmove(uid.bytes, bytes(unique_id), _lib.UNIQUE_ID_BYTES)
        cfg.id = ctypes.pointer(uid)
    world, err = ctypes.c_void_p(), ctypes.create_string_buffer(512)
    st = lib.agmm_world_join(ctypes.byref(world), ctypes.byref(cfg), err, len(err))
    if st != _lib.SUCCESS:
        _lib.raise_status(st, err.value.decode(errors="replace"), "join",
                          lambda text: text.split("=", 1)[0] if "=" in text else None)
    ctx = ctypes.c_void_p()
    st = lib.agmm_ctx_create(ctypes.byref(ctx), world, lib.agmm_world_first_rank(world))
    if st != _lib.SUCCESS:
        lib.agmm_world_destroy(world)
        _lib.raise_status(st, "agmm_ctx_create failed (AGMM_LOG=debug says why)", "join")
    return ProcessRank(Context(ctx.value, lib.agmm_world_nranks(world), None, max_plans), world.value)
