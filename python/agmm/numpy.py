"""The numpy level: agmm's CPU world (ranks are threads, or processes from a launcher; memory is
host memory) driven with numpy arrays. This is how the binding is tested without torch or a GPU,
and a way to try the operations on any machine.

    import numpy as np, agmm.numpy as anp

    b = anp.to_bf16(np.random.default_rng(0).standard_normal((64, 24)))   # (K, N), the same on every rank

    def step(rank):                      # runs once per rank, each on its own thread
        mine = np.random.default_rng(1 + rank.rank)
        a = anp.to_bf16(mine.standard_normal((8, 64)))       # this rank's rows of A
        a_gathered, c = rank.ag_matmul(a, b)                 # every rank's rows, and a_gathered @ b
        h = anp.to_bf16(mine.standard_normal((8, 32)))       # the row-parallel half: this rank's slice
        w = anp.to_bf16(mine.standard_normal((32, 24)))      # of the reduced dimension K
        s_rows = rank.matmul_reduce_scatter(h, w)            # its rows of the sum over ranks of h @ w
        return anp.from_bf16(c)

    with anp.World(4) as world:
        results = world.run(step)        # [result of rank 0, 1, 2, 3]

numpy has no bfloat16: bf16 arrays are uint16 arrays holding the bits (to_bf16/from_bf16 convert),
or ml_dtypes.bfloat16 arrays where that package is installed.
"""
from __future__ import annotations

import ast
import ctypes
import gc
import math
import re
import sys
import threading
import warnings
import weakref

import numpy as np

from . import _lib
from ._core import Context, backend_key, backends_available, eps_arg, max_plans_arg

__all__ = ["World", "Rank", "join", "unique_id", "reduce_scatter_rows", "to_bf16", "from_bf16"]


def to_bf16(x):
    """Numbers (an array, or anything numpy.asarray takes) -> a C-contiguous uint16 array of bf16
    bits of x's shape: each value's float64 rounded once to the nearest bf16, ties to even. NaN
    becomes 0x7FC0, +-inf stays +-inf, values beyond bf16's range become +-inf."""
    f = np.asarray(x, dtype=np.float64, order="C")
    with np.errstate(over="ignore", invalid="ignore"):
        f32 = f.astype(np.float32)              # to nearest even: overflow to inf is expected
    # Rounding float64 -> float32 to odd, then float32 -> bf16 to nearest even, rounds once:
    # float32 keeps 16 bits more than bf16 at every exponent, so an odd last bit only says
    # "inexact" and never makes a tie (Boldo and Melquiond, "When double rounding is odd").
    # numpy rounded to nearest even; where that was inexact and left the last bit even, take the
    # odd neighbour on x's side instead: one step toward zero if it rounded away from zero.
    u = f32.view(np.uint32)
    back = f32.astype(np.float64)
    to_odd = (back != f) & ((u & 1) == 0) & ~np.isnan(f)
    u = np.where(to_odd, np.where(np.abs(back) > np.abs(f), u - 1, u + 1), u).astype(np.uint32)
    bits = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)
    return np.where(np.isnan(f), np.uint16(0x7FC0), bits).astype(np.uint16)


def from_bf16(u):
    """bf16 bits (a uint16 array, or an ml_dtypes.bfloat16 array) -> float32 array of u's shape,
    exactly. Anything else is a TypeError: its bytes are not bf16 bits."""
    if not isinstance(u, (np.ndarray, np.generic)) or not _is_bf16(u.dtype):
        what = f"dtype {u.dtype}" if isinstance(u, (np.ndarray, np.generic)) else type(u).__name__
        raise TypeError(f"from_bf16: u: {what}; want bf16 bits: a uint16 array (to_bf16 makes them) or an "
                        "ml_dtypes.bfloat16 array")
    u = np.asarray(u, order="C")
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


def _check_out(what, out, shapes, dtype, inputs):
    """ag_matmul's out: a pair of writable contiguous arrays of the shapes and dtype, sharing no
    memory with each other nor with the inputs ((name, array) pairs) the run reads."""
    if not isinstance(out, (tuple, list)) or len(out) != 2:
        raise TypeError(f"{what}: out: give a pair (a_gathered, c), not {type(out).__name__}")
    named = (("out[0] (a_gathered)", out[0]), ("out[1] (c)", out[1]))
    for (name, x), shape in zip(named, shapes):
        _need_array(what, name, x)
        if x.dtype != dtype:
            raise TypeError(f"{what}: {name}: dtype {x.dtype}; want {dtype}, a_shard's")
        if x.shape != shape:
            raise ValueError(f"{what}: {name}: shape {x.shape}; want {shape}")
        _need_c_contiguous(what, name, x)
        if not x.flags.writeable:
            raise ValueError(f"{what}: {name}: read-only array")
    for i, (name, x) in enumerate(named):
        for other_name, other in named[:i] + inputs:
            if np.shares_memory(x, other):
                raise ValueError(f"{what}: {name}: overlaps {other_name}; the outputs must not overlap each other, "
                                 "a_shard or b")


def _host_view(ptr, nbytes):
    """A writable uint8 array over host memory the library owns (no copy, no ownership)."""
    return np.ctypeslib.as_array((ctypes.c_ubyte * nbytes).from_address(ptr))


def _warn_outliving(what, owners, stacklevel):
    """numpy arrays cannot be invalidated: the next best is to say so when their memory has gone.
    owners: weak references to the owners of symm_empty's arrays when the rank closed."""
    alive = [owner for owner in owners if owner() is not None]
    if alive:
        gc.collect()        # a caught exception's traceback keeps its frame's arrays until collected
        alive = [owner for owner in alive if owner() is not None]
    if alive:
        warnings.warn(f"{what}: {len(alive)} array(s) from symm_empty outlive their rank: its symmetric memory is "
                      "freed now, and reading or writing them reads freed memory (garbage, or a crash): copy what "
                      "you need out of symmetric memory before the rank ends", RuntimeWarning, stacklevel=stacklevel + 1)


class Rank:
    """One rank of a CPU world: the operations on numpy arrays. Made by World.run (one per rank
    thread) or by join (one per process). Every call is collective: each rank makes it, in the same
    order, with the same shapes. Once the rank has ended (its World.run returned, or close()) every
    method raises ValueError."""

    def __init__(self, ctx):
        self._ctx = ctx
        self._owners = {}          # symm_empty's memory -> a weak reference to its arrays' owner

    rank = property(lambda self: self._ctx.rank, doc="this rank's index, 0 .. nranks-1")
    nranks = property(lambda self: self._ctx.nranks, doc="W, the ranks of the world")
    stats = property(lambda self: dict(self._ctx.stats),
                     doc="runs, plans created/evicted, and copies into plan inputs (count, bytes)")

    def _open(self, what):
        """The rank's context; ValueError once the rank has ended (its context is freed)."""
        self._ctx.live(what)
        return self._ctx

    def _close(self, why):
        """Ends the rank (collective: frees its plans and symmetric memory); returns weak
        references to the owners of the arrays symm_empty made (for _warn_outliving)."""
        owners = list(self._owners.values())
        self._owners.clear()
        self._ctx.close(why)
        return owners

    def plans(self):
        """The cached plans, least recently used first: [(key, backend that runs)]."""
        return self._open("plans").plans()

    def ag_matmul(self, a_shard, b, *, backend="auto", splits=0, out=None):
        """(a_gathered, c) = (concatenation of every rank's a_shard, a_gathered @ b).

        a_shard: (M, K) bf16, C-contiguous. b: (K, N) bf16, C-contiguous or b.T C-contiguous (the
        seed's layout). out: an optional pair of arrays to write, ((W*M, K), (W*M, N)), overlapping
        neither each other nor a_shard or b. An a_shard that lies in symm_empty memory is read in
        place by every rank (at the same offset of the same allocation on every rank); any other is
        first copied into the plan's input buffer (M*K*2 bytes, counted in stats)."""
        what = "ag_matmul"
        ctx = self._open(what)
        _need_array(what, "a_shard", a_shard)
        _need_array(what, "b", b)
        _need_bf16(what, "a_shard", a_shard)
        if a_shard.ndim != 2:
            raise ValueError(f"{what}: a_shard: shape {a_shard.shape}; want a matrix (M, K)")
        _need_c_contiguous(what, "a_shard", a_shard)
        if b.dtype != a_shard.dtype:
            raise TypeError(f"{what}: b: dtype {b.dtype}; want {a_shard.dtype}, a_shard's")
        splits = _lib.int_arg(what, "splits", splits)
        m, k = a_shard.shape
        layout = _b_layout(what, b, k)
        n = b.shape[1]
        rows = self.nranks * m
        if out is None:
            out = (np.empty((rows, k), a_shard.dtype), np.empty((rows, n), a_shard.dtype))
        else:
            _check_out(what, out, ((rows, k), (rows, n)), a_shard.dtype, (("a_shard", a_shard), ("b", b)))
        plan = ctx.ag_matmul_plan(m, n, k, layout, backend_key(what, backend), splits)
        source = _address(a_shard)
        if not ctx.input_in_place(plan, source, what, "a_shard"):
            if plan.view is None:
                plan.view = _host_view(plan.input_ptr, plan.input_bytes)
            plan.view[:] = a_shard.reshape(-1).view(np.uint8)
            ctx.count_copy_in(plan.input_bytes)
            source = None
        ctx.run_ag_matmul(plan, _address(b), _address(out[0]), _address(out[1]), source, None)
        return out[0], out[1]

    def all_reduce_(self, x, *, backend="auto"):
        """x += every other rank's x, in place (sum over ranks); returns x. x: contiguous, float32
        or bf16. An x in symm_empty memory is reduced in place with no copy (at the same offset of
        the same allocation on every rank); any other is copied into the plan's input buffer first
        (x.nbytes, counted in stats)."""
        what = "all_reduce_"
        ctx = self._open(what)
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
        plan = ctx.all_reduce_plan(x.size, dtype, backend_key(what, backend), what=what, tensor="x")
        address = _address(x)
        source = address
        if not ctx.input_in_place(plan, address, what, "x"):
            if plan.view is None:
                plan.view = _host_view(plan.input_ptr, plan.input_bytes)
            plan.view[:] = x.reshape(-1, order="A").view(np.uint8)
            ctx.count_copy_in(plan.input_bytes)
            source = None
        ctx.run_all_reduce(plan, address, source, None, what, "x")
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
        ctx = self._open(what)
        _need_array(what, "a", a)
        _need_array(what, "b", b)
        _need_bf16(what, "a", a)
        if a.ndim != 2:
            raise ValueError(f"{what}: a: shape {a.shape}; want a matrix (M, K)")
        _need_c_contiguous(what, "a", a)
        if b.dtype != a.dtype:
            raise TypeError(f"{what}: b: dtype {b.dtype}; want {a.dtype}, a's")
        m, k = a.shape
        if m < 1:     # before the rows of S are asked for: the library's split wants M >= 1
            raise ValueError(f"{what}: a: shape {a.shape}; want M >= 1 rows")
        layout = _b_layout(what, b, k)
        n = b.shape[1]
        rows = ctx.reduce_scatter_rows(m)[1] if what == "matmul_reduce_scatter" else m
        if out is None:
            out = np.empty((rows, n), a.dtype)
        else:
            _need_array(what, "out", out)
            if out.dtype != a.dtype:
                raise TypeError(f"{what}: out: dtype {out.dtype}; want {a.dtype}, a's")
            if out.shape != (rows, n):
                raise ValueError(f"{what}: out: shape {out.shape}; want {(rows, n)}")
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
        x's shape, bf16; gamma, bias and residual hold the same values on every rank. eps: > 0 and
        finite as fp32. out: an optional pair (y, residual_out) of x's shape to write;
        residual_out may be residual (the residual updated in place). An x in symm_empty memory is
        read in place (at the same offset of the same allocation on every rank); any other is first
        copied into the plan's input buffer (x.nbytes, counted in stats)."""
        what = "all_reduce_rmsnorm"
        ctx = self._open(what)
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
        eps = eps_arg(what, eps)
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
        plan = ctx.all_reduce_rmsnorm_plan(x.size // h, h, eps, backend_key(what, backend))
        source = _address(x)
        if not ctx.input_in_place(plan, source, what, "x"):
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
        vector written here is read in place by ag_matmul / all_reduce_ / all_reduce_rmsnorm.
        shape: an int or a sequence of ints (numpy's too); dtype: a numeric numpy dtype (or
        ml_dtypes.bfloat16). Collective (every rank asks for the same size). Valid until
        symm_free(array) or the end of the rank: the array must not be used after that (the
        memory is freed; the rank's end warns about arrays still referenced)."""
        what = "symm_empty"
        ctx = self._open(what)
        dims = tuple(shape) if isinstance(shape, (tuple, list)) else (shape,)
        dims = tuple(_lib.int_arg(what, "shape", d, _lib.C_INT64) for d in dims)
        if any(d < 0 for d in dims):
            raise ValueError(f"{what}: shape: {dims}; want non-negative sizes")
        try:
            dtype = np.dtype(dtype)
        except (TypeError, ValueError) as e:
            raise TypeError(f"{what}: dtype: {dtype!r} is not a numpy dtype ({e})") from None
        if dtype.kind not in "biufc" and not _is_bf16(dtype):
            raise TypeError(f"{what}: dtype: {dtype}; want a numeric dtype (bool, integers, floats, complex) or "
                            "ml_dtypes.bfloat16")
        # Python ints: a product numpy would wrap stays exact here, and is checked before allocating.
        nbytes = math.prod(dims) * dtype.itemsize
        if nbytes == 0:
            raise ValueError(f"{what}: shape: {dims} holds no bytes")
        if nbytes > sys.maxsize:
            raise ValueError(f"{what}: shape: {dims} of {dtype} is {nbytes} bytes; an array holds at most "
                             f"{sys.maxsize} (2^63 - 1)")
        ptr = ctx.symmetric_alloc(nbytes, what)
        owner = (ctypes.c_ubyte * nbytes).from_address(ptr)     # every array over the memory holds it
        self._owners[ptr] = weakref.ref(owner)
        return np.ctypeslib.as_array(owner).view(dtype).reshape(dims)

    def symm_free(self, array):
        """Frees what symm_empty returned (collective). Every array over that memory is invalid
        afterwards."""
        ctx = self._open("symm_free")
        _need_array("symm_free", "array", array)
        ctx.symmetric_free(_address(array), "symm_free")
        self._owners.pop(_address(array), None)

    def sync(self):
        self._open("sync").sync()


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


def _compact(obj):
    """obj with its strings cut to 40 characters: what _LibraryExchange sends then fits its row
    (no backend's name is that long, so two cut names that agree are refused by the library)."""
    if isinstance(obj, str):
        return obj[:40]
    if isinstance(obj, tuple):
        return tuple(_compact(v) for v in obj)
    return obj


class _LibraryExchange:
    """How the processes of a process world compare their calls (_ThreadExchange's work, through
    the library, the only channel they share): an fp32 all_reduce of a W x ROW buffer into whose
    row each rank writes the repr of its object, one byte per element, zeros elsewhere; the sum
    is every rank's bytes, exactly. A collective like the operations: every rank calls it at the
    same point of the same call, and a peer that never comes is an agmm.Timeout within the
    world's timeout. Objects are tuples of ints, floats, strings and None (repr and back)."""

    ROW = 1024

    def __init__(self, ctx_ptr, nranks, rank):
        lib = _lib.lib()
        self._ctx_ptr, self._rank = ctx_ptr, rank
        self._sum = np.zeros((nranks, self.ROW), np.float32)
        plan = ctypes.c_void_p()
        desc = _lib.AllReduceDesc(n=self._sum.size, dtype=_lib.DTYPE_F32)
        st = lib.agmm_plan_all_reduce(ctypes.byref(plan), ctx_ptr, ctypes.byref(desc))
        if st != _lib.SUCCESS:
            _lib.raise_status(st, _lib.text(lib.agmm_last_error(ctx_ptr)),
                              "join (the ranks' channel for comparing calls)")
        self._plan = plan.value
        self._rows = _host_view(lib.agmm_plan_input(self._plan), self._sum.nbytes).view(np.float32).reshape(
            self._sum.shape)

    def __call__(self, obj):
        text = repr(_compact(obj)).encode()
        self._rows[:] = 0
        self._rows[self._rank, :len(text)] = np.frombuffer(text, np.uint8)
        io = _lib.AllReduceIo(out=_address(self._sum))
        st = _lib.lib().agmm_all_reduce(self._plan, ctypes.byref(io), None)
        if st != _lib.SUCCESS:
            _lib.raise_status(st, _lib.text(_lib.lib().agmm_last_error(self._ctx_ptr)),
                              "the ranks' check that they make the same call")
        return [ast.literal_eval(bytes(row.astype(np.uint8)).rstrip(b"\0").decode()) for row in self._sum]

    def close(self):
        """Destroys the channel's plan (collective: after the rank's own plans and memory)."""
        _lib.lib().agmm_plan_destroy(self._plan)


def _world_arg_namer(names):
    """The caller's argument a world error of the library is about: its message starts with
    "field=value: " or "field: " (a message about the environment, "torchrun (RANK=0, ...": ...",
    names none)."""
    def name(text):
        m = re.match(r"(\w+)(?:=[^\s,:]*)?: ", text)
        return names.get(m.group(1)) if m else None
    return name


class World:
    """A CPU world of `nranks` threads in this process (agmm_world_create with kind CPU): 1..64,
    or 0 for the library's default (4 in the CPU world). timeout_s bounds every wait for a peer
    (0: the library's default, AGMM_TIMEOUT_S or 5 s; at most 86400); max_plans (1..65536)
    bounds each rank's plan cache. close() (or the end of a `with`) destroys it. One run at a
    time: World.run while another is running on the same world is a RuntimeError."""

    def __init__(self, nranks=4, *, timeout_s=0.0, max_plans=16):
        what = "World"
        self._ptr = None
        self._running = threading.Lock()          # held by World.run
        nranks = _lib.int_arg(what, "nranks", nranks)
        timeout_s = _lib.timeout_arg(what, timeout_s)
        self.max_plans = max_plans_arg(what, max_plans)
        lib = _lib.lib()
        cfg = _lib.WorldConfig(kind=_lib.WORLD_KINDS["cpu"], nranks=nranks, timeout_s=timeout_s)
        ptr, err = ctypes.c_void_p(), ctypes.create_string_buffer(512)
        st = lib.agmm_world_create(ctypes.byref(ptr), ctypes.byref(cfg), err, len(err))
        if st != _lib.SUCCESS:
            _lib.raise_status(st, err.value.decode(errors="replace"), what,
                              _world_arg_namer({"nranks": "nranks", "timeout_s": "timeout_s"}))
        self._ptr = ptr.value
        self.nranks = lib.agmm_world_nranks(self._ptr)
        self.timeout_s = timeout_s if timeout_s > 0 else lib.agmm_world_default_timeout_s()
        self.describe = lib.agmm_world_describe(self._ptr).decode()

    def backends(self, op):
        """{backend of op: "" where this world runs it, else why not} (agmm_backend_available)."""
        if self._ptr is None:
            raise ValueError("World.backends: the world is closed")
        return backends_available(self._ptr, op, "World.backends")

    def run(self, fn, *args, **kwargs):
        """Calls fn(rank, *args, **kwargs) once per rank, each on its own thread, and returns
        their results by rank. An exception on any rank is raised here (the first by rank that is
        not a consequence of another's: a peer's timeout is), after every rank has returned; the
        ranks' plans and symmetric memory are freed when fn returns, and a Rank used after that
        raises ValueError. One run at a time per world: a second (from another thread, or from
        inside fn) raises RuntimeError. Ctrl-C is raised once every rank has returned
        (docs/python.md)."""
        # The library's world runs one set of rank threads at a time: a second run would
        # interleave two sets of collective calls on the same ranks.
        if not self._running.acquire(blocking=False):
            raise RuntimeError("World.run: World.run is already running on this world (in another thread, or fn "
                               "called it); wait for it to return, or make another World")
        try:
            return self._run(fn, args, kwargs)
        finally:
            self._running.release()

    def _run(self, fn, args, kwargs):
        if self._ptr is None:
            raise ValueError("World.run: the world is closed")
        lib, n = _lib.lib(), self.nranks
        results, errors, owners = [None] * n, [None] * n, [[] for _ in range(n)]
        exchange = _ThreadExchange(n, self.timeout_s)

        def rank_main(ctx_ptr, _arg):
            # Called from C on the rank's thread: nothing may raise out of here (ctypes would only
            # print it); a failure is reported, and unblocks the peers waiting in the exchange.
            r = lib.agmm_ctx_rank(ctx_ptr)
            try:
                rank = Rank(Context(ctx_ptr, n, lambda obj: exchange(r, obj), self.max_plans))
                try:
                    results[r] = fn(rank, *args, **kwargs)
                finally:
                    owners[r] = rank._close("this rank was used after its World.run returned: a Rank is valid "
                                               "only inside the function World.run calls")
                return _lib.SUCCESS
            except BaseException as e:
                errors[r] = e
                owners[r] = []        # arrays the traceback's frames hold: not a misuse
                exchange.abort()
                return _lib.INTERNAL

        callback = _lib.RANK_FN(rank_main)
        try:
            st = lib.agmm_world_run(self._ptr, callback, None)
        except KeyboardInterrupt as interrupt:
            # Python runs signal handlers on the main thread only, which waited in the library
            # until every rank had returned: Ctrl-C surfaces now. What a rank raised rides along.
            interrupt.__context__ = _first_failure(errors)
            raise
        finally:
            _warn_outliving("World.run", [owner for mine in owners for owner in mine], stacklevel=3)
        primary = _first_failure(errors)
        if primary is not None:
            raise primary
        if st != _lib.SUCCESS:
            _lib.raise_status(st, "a rank's context could not be created or its thread started "
                              "(AGMM_LOG=debug says why)", "World.run")
        return results

    def close(self):
        """Destroys the world. Not while World.run is running on it (RuntimeError)."""
        if not self._running.acquire(blocking=False):
            raise RuntimeError("World.close: World.run is running on this world; close it after run returns")
        try:
            if self._ptr is not None:
                _lib.lib().agmm_world_destroy(self._ptr)
                self._ptr = None
        finally:
            self._running.release()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        if getattr(self, "_ptr", None) is not None:
            self.close()


def _first_failure(errors):
    """The exception World.run raises for its ranks' errors (by rank), or None: the first that is
    not a Timeout (a peer's failure makes the others time out), with the rank and the others noted."""
    failed = [(r, e) for r, e in enumerate(errors) if e is not None]
    if not failed:
        return None
    causes = [f for f in failed if not isinstance(f[1], _lib.Timeout)] or failed
    r, primary = causes[0]
    if hasattr(primary, "add_note"):
        primary.add_note(f"(raised on rank {r} of {len(errors)})")
        for other_rank, other in failed:
            if other is not primary:
                primary.add_note(f"rank {other_rank}: {type(other).__name__}: {other}")
    return primary


class ProcessRank(Rank):
    """This process's rank of a CPU world whose ranks are processes (join). close() (or the end of
    a `with`) is collective: it frees the rank's plans and memory and leaves the world; the rank
    raises ValueError when used after that."""

    def __init__(self, ctx, world_ptr, exchange):
        super().__init__(ctx)
        self._world = world_ptr
        self._exchange = exchange

    def backends(self, op):
        """{backend of op: "" where this world runs it, else why not} (agmm_backend_available)."""
        self._open("backends")
        return backends_available(self._world, op, "backends")

    def close(self):
        if self._world is None:
            return
        lib, ctx_ptr = _lib.lib(), self._ctx.ptr
        owners = self._close("this rank is closed (ProcessRank.close, or the end of its with block)")
        if self._exchange is not None:
            self._exchange.close()
        lib.agmm_ctx_destroy(ctx_ptr)
        lib.agmm_world_destroy(self._world)
        self._world = None
        _warn_outliving("ProcessRank.close", owners, stacklevel=2)

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
    if not isinstance(kind, str) or kind not in _lib.WORLD_KINDS:
        raise ValueError(f"unique_id: kind={kind!r}: want one of {', '.join(_lib.WORLD_KINDS)}")
    uid = _lib.UniqueId()
    st = _lib.lib().agmm_unique_id_create(_lib.WORLD_KINDS[kind], ctypes.byref(uid))
    if st != _lib.SUCCESS:
        _lib.raise_status(st, "agmm_unique_id_create failed", "unique_id", "kind")
    return bytes(uid.bytes)


def join(*, rank=-1, nranks=-1, unique_id=None, timeout_s=0.0, max_plans=16):
    """Joins a CPU world whose ranks are processes, as one rank; returns its ProcessRank.
    rank/nranks -1 (default): from the launcher's environment (torchrun's RANK and WORLD_SIZE,
    Open MPI's, MPICH's, Slurm's); unique_id None: the library bootstraps from the environment.
    timeout_s and max_plans as for World. Collective over the processes. The ranks compare their
    calls as a World's do, through the library (an all_reduce before each plan is made)."""
    what = "join"
    rank = _lib.int_arg(what, "rank", rank)
    nranks = _lib.int_arg(what, "nranks", nranks)
    timeout_s = _lib.timeout_arg(what, timeout_s)
    max_plans = max_plans_arg(what, max_plans)
    lib = _lib.lib()
    cfg = _lib.JoinConfig(kind=_lib.WORLD_KINDS["cpu"], rank=rank, nranks=nranks, device=-1,
                          timeout_s=timeout_s)
    if unique_id is not None:
        if not isinstance(unique_id, (bytes, bytearray)):
            raise TypeError(f"{what}: unique_id: {type(unique_id).__name__}; want the bytes unique_id() made")
        if len(unique_id) != _lib.UNIQUE_ID_BYTES:
            raise ValueError(f"{what}: unique_id: {len(unique_id)} bytes; want the {_lib.UNIQUE_ID_BYTES} bytes "
                             "unique_id() made")
        uid = _lib.UniqueId()
        ctypes.memmove(uid.bytes, bytes(unique_id), _lib.UNIQUE_ID_BYTES)
        cfg.id = ctypes.pointer(uid)
    world, err = ctypes.c_void_p(), ctypes.create_string_buffer(512)
    st = lib.agmm_world_join(ctypes.byref(world), ctypes.byref(cfg), err, len(err))
    if st != _lib.SUCCESS:
        _lib.raise_status(st, err.value.decode(errors="replace"), what,
                          _world_arg_namer({"rank": "rank", "nranks": "nranks", "timeout_s": "timeout_s",
                                            "id": "unique_id"}))
    ctx = ctypes.c_void_p()
    st = lib.agmm_ctx_create(ctypes.byref(ctx), world, lib.agmm_world_first_rank(world))
    if st != _lib.SUCCESS:
        lib.agmm_world_destroy(world)
        _lib.raise_status(st, "agmm_ctx_create failed (AGMM_LOG=debug says why)", what)
    w = lib.agmm_world_nranks(world)
    try:
        exchange = _LibraryExchange(ctx.value, w, lib.agmm_ctx_rank(ctx)) if w > 1 else None
    except BaseException:
        lib.agmm_ctx_destroy(ctx)
        lib.agmm_world_destroy(world)
        raise
    return ProcessRank(Context(ctx.value, w, exchange, max_plans), world.value, exchange)
