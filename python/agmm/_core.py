"""One rank's agmm_ctx as the numpy and torch levels share it: plans cached per (operation, shape,
dtype, layout, backend) with a bound, the caller's symmetric memory, the agreement check that
every rank plans the same thing, and runs with their errors raised as exceptions.

Collective discipline (include/agmm.h): plans are created and destroyed, and symmetric memory is
allocated and freed, by every rank in the same order. The cache keeps that true: a miss plans on
every rank at the same call, and eviction (least recently used first) and close() destroy in an
order that depends only on the sequence of calls, which the ranks share.
"""
from __future__ import annotations

import ctypes
import numbers
from collections import OrderedDict

from . import _lib
from ._lib import raise_status

MAX_PLANS = 65536                    # the bound a plan cache may be given
FLT_MAX, FLT_TRUE_MIN = 3.4028234663852886e38, 1.401298464324817e-45

# What each field of a plan's key is, in the caller's words (for the disagreement message); a pair
# (field, names) shows the key's value by its name.
_LAYOUTS = {_lib.LAYOUT_COL_MAJOR: "column-major (b.T of a contiguous (N, K))",
            _lib.LAYOUT_ROW_MAJOR: "row-major (a contiguous (K, N))"}
_DTYPES = {_lib.DTYPE_BF16: "bf16", _lib.DTYPE_F32: "float32"}
_AG_MATMUL_FIELDS = ("op", "M (rows of a_shard)", "N (columns of b)", "K (columns of a_shard, rows of b)",
                     ("layout of b", _LAYOUTS), "backend", "splits")
_ALL_REDUCE_FIELDS = ("op", "number of elements", ("dtype", _DTYPES), "backend")
_ARN_FIELDS = ("op", "tokens (rows of x)", "hidden (the last dimension of x)", "eps", "backend")

# The library's INVALID_ARG messages start with the field they are about ("K=100 is not ...");
# these are the caller's arguments behind each field.
_AG_MATMUL_ARGS = {"M": "a_shard", "N": "b", "K": "a_shard and b (K)", "shape W": "a_shard and b",
                   "b_layout": "b", "splits": "splits", "backend": "backend", "io->input": "a_shard",
                   "io->b": "b and the outputs (a_gathered, c)"}


def _all_reduce_args(tensor):
    """all_reduce's fields in the caller's words; tensor: the caller's name of its argument."""
    return {"n": f"{tensor} (its number of elements)", "dtype": f"{tensor}'s dtype", "backend": "backend",
            "io->out": tensor, "io->input": tensor}


# The row-parallel matmuls (matmul_reduce_scatter, matmul_all_reduce): one key and one set of names.
_MATMUL_REDUCE_FIELDS = ("op", "M (rows of a)", "N (columns of b)", "K (columns of a, rows of b)",
                         ("layout of b", _LAYOUTS), "backend")
_MATMUL_REDUCE_ARGS = {"M": "a", "N": "b", "K": "a and b (K)", "shape M": "a and b", "b_layout": "b",
                       "backend": "backend", "io->a": "a, b and the output (16-byte aligned, not overlapping)",
                       "io->out": "the output", "io->c": "the output"}
_ARN_ARGS = {"tokens": "x (its rows)", "hidden": "x (its last dimension)", "eps": "eps", "backend": "backend",
             "io->input": "x", "io->y": "out (y)", "io->residual_out": "out (residual_out)", "io->gamma": "gamma",
             "io->bias": "bias", "io->residual": "residual"}


def _arg_namer(table):
    def name(text):
        # The row-parallel matmuls' messages start with the operation: "matmul_all_reduce: K=12 ...".
        if text.startswith("matmul_") and ": " in text:
            text = text.split(": ", 1)[1]
        head = text.split("=", 1)[0].split(" is ", 1)[0]
        return table.get(head)
    return name


def op_code(what, op):
    """The library's code of operation `op`; raises naming the operations otherwise."""
    if not isinstance(op, str):
        raise TypeError(f"{what}: op: {type(op).__name__}; want one of {', '.join(_lib.OPS)}")
    if op not in _lib.OPS:
        raise ValueError(f"{what}: op={op!r}: want one of {', '.join(_lib.OPS)}")
    return _lib.OPS[op]


def backend_names(op):
    """The library's backends of `op` ("ag_matmul", "all_reduce", "matmul_reduce_scatter",
    "matmul_all_reduce" or "all_reduce_rmsnorm"), in its order; "auto" is not one of them (it lets
    the library choose)."""
    code = op_code("backends", op)
    lib, names = _lib.lib(), []
    while True:
        name = lib.agmm_backend_name(code, len(names))
        if not name:
            return names
        names.append(name.decode())


def backends_available(world_ptr, op, what="backends"):
    """{backend of op: "" where the world runs it, else why not} (agmm_backend_available). what:
    the caller's name, for the error an unknown op is."""
    lib, out = _lib.lib(), {}
    code = op_code(what, op)
    for name in backend_names(op):
        why = ctypes.create_string_buffer(256)
        ok = lib.agmm_backend_available(world_ptr, code, name.encode(), why, len(why))
        out[name] = "" if ok else why.value.decode(errors="replace")
    return out


def backend_summary(op, name):
    """The library's one line on backend `name` of `op`."""
    code = op_code("backend_summary", op)
    if not isinstance(name, str):
        raise TypeError(f"backend_summary: name: {type(name).__name__}; want one of {', '.join(backend_names(op))}")
    s = _lib.lib().agmm_backend_summary(code, name.encode())
    if s is None:
        raise ValueError(f"backend_summary: backend={name!r}: {op} has {', '.join(backend_names(op))}")
    return s.decode()


def backend_key(op, backend):
    """Normalises a backend argument: None and "auto" are the same plan."""
    if backend is None:
        return "auto"
    if not isinstance(backend, str):
        raise TypeError(f"{op}: backend: {type(backend).__name__}; give a name ({', '.join(backend_names(op))}) "
                        "or 'auto'")
    return backend


def max_plans_arg(what, value):
    """The bound of a rank's plan cache, checked where the world is made (before anything collective)."""
    value = _lib.int_arg(what, "max_plans", value)
    if not 1 <= value <= MAX_PLANS:
        raise ValueError(f"{what}: max_plans: max_plans={value}: want 1..{MAX_PLANS} (the plans each rank keeps)")
    return value


_EPS_FP32_ZERO = 2.0 ** -150                     # FLT_TRUE_MIN / 2
_EPS_FP32_INF = 2.0 ** 128 - 2.0 ** 103          # FLT_MAX + its ulp / 2


def eps_arg(what, eps):
    """eps as the library takes it (src/core/validate.c): > 0 and finite, and still so as the fp32
    the norm runs in. Checked before the ranks compare it: a NaN differs even from itself."""
    if isinstance(eps, bool) or not isinstance(eps, numbers.Real):
        raise TypeError(f"{what}: eps: {type(eps).__name__}; want a float > 0")
    value = float(eps)
    # The library's (float) cast rounds to nearest, ties to even: to 0 at or below half the
    # smallest subnormal, to infinity at or above FLT_MAX plus half its ulp. Plain comparisons,
    # not ctypes, so that torch.compile traces this (NaN fails both).
    if not _EPS_FP32_ZERO < value < _EPS_FP32_INF:
        raise ValueError(f"{what}: eps: eps={value:g}: must be > 0 and finite, and stay so as fp32 "
                         f"({FLT_TRUE_MIN:g} to {FLT_MAX:g}): the norm runs in fp32")
    return value


# Plan.input_place before the ranks have compared where a run's input is.
_NOT_COMPARED = "not compared yet"


class Plan:
    """A cached agmm_plan and what a run needs besides: its input buffer (and a view of it that
    the level made), and the io struct reused from call to call."""

    __slots__ = ("ptr", "key", "backend", "input_ptr", "input_bytes", "io", "view", "last_stream", "pinned",
                 "input_place")

    def __init__(self, ptr, key, io):
        lib = _lib.lib()
        self.ptr, self.key, self.io = ptr, key, io
        self.backend = lib.agmm_plan_backend(ptr).decode()
        self.input_ptr = lib.agmm_plan_input(ptr)
        self.input_bytes = 0
        self.view = None          # the level's array/tensor over input_ptr, made on first copy-in
        self.pinned = False       # a CUDA graph captured a run of it: never evicted
        self.last_stream = None   # torch: the stream of the last run that read the input buffer
        self.input_place = _NOT_COMPARED   # where the ranks last agreed the input lies (Context.input_in_place)


class Context:
    """One rank. `exchange(obj) -> [obj of every rank]` is how this level talks to the other ranks
    (None where it has no channel: then disagreement is not checked here). After close() the
    library's context is gone: `ptr` is None and live() raises."""

    def __init__(self, ptr, nranks, exchange=None, max_plans=16):
        """max_plans: checked by the caller (max_plans_arg), before the world was made."""
        lib = _lib.lib()
        self.ptr = ptr
        self.closed_why = ""
        self.rank = lib.agmm_ctx_rank(ptr)
        self.device = lib.agmm_ctx_device(ptr)
        self.nranks = nranks
        self.max_plans = max_plans
        self._exchange = exchange
        self._plans = OrderedDict()
        self._symmetric = OrderedDict()      # base pointer -> (number, bytes), in allocation order
        self._allocations = 0                # symmetric allocations made: the next one's number
        self.stats = {"runs": 0, "plans_created": 0, "plans_evicted": 0, "copies_in": 0, "bytes_copied_in": 0}

    # ---- errors and agreement ------------------------------------------------------------------

    def live(self, what):
        """Raises ValueError once the rank is closed (its library context freed)."""
        if self.ptr is None:
            raise ValueError(f"{what}: {self.closed_why}")

    def fail(self, status, what, arg=None):
        raise_status(status, _lib.text(_lib.lib().agmm_last_error(self.ptr)), what, arg)

    def _exchange_all(self, key, what, step=1):
        """Every rank's key: a tuple whose first `step` items name the step (an operation's plan,
        memory, where a plan's input lies). Ranks at different steps (one hit the plan cache and
        compares its input's place while another plans) raise ValueError, every one alike (they
        compare what they received: the same on every rank)."""
        try:
            keys = self._exchange(key)
        except _lib.Timeout as e:
            raise _lib.Timeout(f"{what}: {e}", e.status, e.status_name, e.detail) from None
        for i in range(step):
            if any(k[i] != keys[0][i] for k in keys):
                shown = ", ".join(f"rank {r}: {k[i]}" for r, k in enumerate(keys))
                raise ValueError(f"{what}: the ranks are at different calls ({shown}); every rank of the world must "
                                 "make the same calls in the same order")
        return keys

    def agree(self, key, fields, what):
        """Raises ValueError, on every rank alike, when the ranks' keys differ: the first field
        that differs, with the ranks' values."""
        if self._exchange is None:
            return
        keys = self._exchange_all(key, what)
        for i, field in enumerate(fields):
            field, names = field if isinstance(field, tuple) else (field, {})
            values = [k[i] for k in keys]
            if any(v != values[0] for v in values):
                shown = ", ".join(f"rank {r}: {names[v] if v in names else repr(v)}" for r, v in enumerate(values))
                raise ValueError(f"{what}: the ranks disagree on {field} ({shown}); every rank of the world "
                                 "must make the same call")

    def input_in_place(self, plan, ptr, what, arg):
        """Whether a run of plan reads its input where it lies (ptr, in one of this rank's
        symmetric allocations), else from the plan's own buffer, where the caller copies it.
        include/agmm.h wants an input read in place at the same offset of the same allocation on
        every rank: the ranks compare where theirs lies at a plan's first run and whenever it
        moves, and raise ValueError on every rank when the places differ. A rank whose input moves
        while the others' stay put is alone at the comparison: its exchange ends in a timeout (or
        meets another call and says so), bounded either way; comparing at every run would cost a
        host exchange per call."""
        place = self._symmetric_place(ptr, plan.input_bytes)
        if place != plan.input_place:
            if self._exchange is not None:
                keys = self._exchange_all((f"where {what}'s {arg} lies", plan.key, place), what, step=2)
                places = [k[2] for k in keys]
                if any(p != places[0] for p in places):
                    shown = ", ".join(f"rank {r}: " + ("not in symmetric memory (copied)" if p is None else
                                                         f"allocation #{p[0]} + {p[1]} bytes")
                                      for r, p in enumerate(places))
                    raise ValueError(f"{what}: {arg}: the ranks' inputs lie at different places ({shown}); an input "
                                     "read in place must be at the same offset of the same symm_empty allocation on "
                                     "every rank (include/agmm.h): use one offset on every rank, or pass copies")
            plan.input_place = place
        return place is not None

    # ---- plans ---------------------------------------------------------------------------------

    def ag_matmul_plan(self, m, n, k, layout, backend, splits, capturing=None):
        """The cached plan, or a new one. capturing: None, or the message to raise where a plan
        would have to be made during a CUDA-graph capture (the plan found is then pinned)."""
        key = ("ag_matmul", m, n, k, layout, backend, splits)
        plan = self._lookup(key, capturing)
        if plan is None:
            self.agree(key, _AG_MATMUL_FIELDS, "ag_matmul")
            desc = _lib.AgMatmulDesc(m=m, n=n, k=k, b_layout=layout, splits=splits,
                                     backend=None if backend == "auto" else backend.encode())
            plan = self._create(key, _lib.lib().agmm_plan_ag_matmul, desc, _lib.AgMatmulIo(),
                                "ag_matmul", _AG_MATMUL_ARGS)
            plan.input_bytes = m * k * 2
        return plan

    def all_reduce_plan(self, n, dtype, backend, capturing=None, what="all_reduce", tensor="the tensor"):
        """what, tensor: the caller's names of the operation and its argument (numpy's all_reduce_, x)."""
        key = ("all_reduce", n, dtype, backend)
        plan = self._lookup(key, capturing)
        if plan is None:
            self.agree(key, _ALL_REDUCE_FIELDS, what)
            desc = _lib.AllReduceDesc(n=n, dtype=dtype, backend=None if backend == "auto" else backend.encode())
            plan = self._create(key, _lib.lib().agmm_plan_all_reduce, desc, _lib.AllReduceIo(),
                                what, _all_reduce_args(tensor))
            plan.input_bytes = n * (4 if dtype == _lib.DTYPE_F32 else 2)
        return plan

    def matmul_reduce_plan(self, op, m, n, k, layout, backend, capturing=None):
        """A row-parallel matmul's plan (op "matmul_reduce_scatter" or "matmul_all_reduce"): no
        plan input (A comes with each run)."""
        key = (op, m, n, k, layout, backend)
        plan = self._lookup(key, capturing)
        if plan is None:
            self.agree(key, _MATMUL_REDUCE_FIELDS, op)
            desc = _lib.MatmulReduceDesc(m=m, n=n, k=k, b_layout=layout,
                                         backend=None if backend == "auto" else backend.encode())
            lib = _lib.lib()
            fn = lib.agmm_plan_matmul_all_reduce if op == "matmul_all_reduce" else lib.agmm_plan_matmul_reduce_scatter
            plan = self._create(key, fn, desc, _lib.MatmulReduceIo(), op, _MATMUL_REDUCE_ARGS)
        return plan

    def reduce_scatter_rows(self, m):
        """(first row, rows) of S this rank gets from matmul_reduce_scatter."""
        return _lib.reduce_scatter_rows(m, self.nranks, self.rank)

    def all_reduce_rmsnorm_plan(self, tokens, hidden, eps, backend, capturing=None):
        key = ("all_reduce_rmsnorm", tokens, hidden, float(eps), backend)
        plan = self._lookup(key, capturing)
        if plan is None:
            self.agree(key, _ARN_FIELDS, "all_reduce_rmsnorm")
            desc = _lib.AllReduceRmsnormDesc(tokens=tokens, hidden=hidden, eps=eps,
                                             backend=None if backend == "auto" else backend.encode())
            plan = self._create(key, _lib.lib().agmm_plan_all_reduce_rmsnorm, desc, _lib.AllReduceRmsnormIo(),
                                "all_reduce_rmsnorm", _ARN_ARGS)
            plan.input_bytes = tokens * hidden * 2
        return plan

    def _lookup(self, key, capturing=None):
        plan = self._plans.get(key)
        if plan is None and capturing is not None:
            raise RuntimeError(capturing)
        if plan is not None:
            self._plans.move_to_end(key)
            # A captured graph replays this plan: it must outlive the cache's bound.
            plan.pinned = plan.pinned or capturing is not None
        return plan

    def _create(self, key, plan_fn, desc, io, what, args):
        # Room first: destroying after creating would hold one plan more than the bound.
        while len(self._plans) >= self.max_plans:
            old_key = next((k for k, p in self._plans.items() if not p.pinned), None)
            if old_key is None:
                break  # every plan is captured in a graph: the cache grows past its bound
            old = self._plans.pop(old_key)
            self._destroy(old)
            self.stats["plans_evicted"] += 1
        out = ctypes.c_void_p()
        st = plan_fn(ctypes.byref(out), self.ptr, ctypes.byref(desc))
        if st != _lib.SUCCESS:
            self.fail(st, what, _arg_namer(args))
        plan = Plan(out.value, key, io)
        self._plans[key] = plan
        self.stats["plans_created"] += 1
        return plan

    def _destroy(self, plan):
        plan.view = None
        plan.last_stream = None
        _lib.lib().agmm_plan_destroy(plan.ptr)

    def plans(self):
        """[(key, resolved backend)] from least to most recently used."""
        return [(key, p.backend) for key, p in self._plans.items()]

    # ---- runs ------------------------------------------------------------------------------------

    def run_ag_matmul(self, plan, b, a_gathered, c, input_ptr, stream):
        io = plan.io
        io.b, io.a_gathered, io.c, io.input = b, a_gathered, c, input_ptr
        st = _lib.lib().agmm_ag_matmul(plan.ptr, ctypes.byref(io), stream)
        if st != _lib.SUCCESS:
            self.fail(st, "ag_matmul", _arg_namer(_AG_MATMUL_ARGS))
        self.stats["runs"] += 1

    def run_all_reduce(self, plan, out, input_ptr, stream, what="all_reduce", tensor="the tensor"):
        io = plan.io
        io.out, io.input = out, input_ptr
        st = _lib.lib().agmm_all_reduce(plan.ptr, ctypes.byref(io), stream)
        if st != _lib.SUCCESS:
            self.fail(st, what, _arg_namer(_all_reduce_args(tensor)))
        self.stats["runs"] += 1

    def run_matmul_reduce(self, plan, a, b, out, stream):
        """One run of a row-parallel matmul plan: out is this rank's rows of S (NULL where it gets
        none) or all of S."""
        io, op = plan.io, plan.key[0]
        io.a, io.b, io.out = a, b, out
        lib = _lib.lib()
        fn = lib.agmm_matmul_all_reduce if op == "matmul_all_reduce" else lib.agmm_matmul_reduce_scatter
        st = fn(plan.ptr, ctypes.byref(io), stream)
        if st != _lib.SUCCESS:
            self.fail(st, op, _arg_namer(_MATMUL_REDUCE_ARGS))
        self.stats["runs"] += 1

    def run_all_reduce_rmsnorm(self, plan, y, residual_out, gamma, bias, residual, input_ptr, stream):
        """bias and residual: addresses, or None for none."""
        io = plan.io
        io.y, io.residual_out, io.gamma, io.bias, io.residual, io.input = (y, residual_out, gamma, bias, residual,
                                                                           input_ptr)
        st = _lib.lib().agmm_all_reduce_rmsnorm(plan.ptr, ctypes.byref(io), stream)
        if st != _lib.SUCCESS:
            self.fail(st, "all_reduce_rmsnorm", _arg_namer(_ARN_ARGS))
        self.stats["runs"] += 1

    def count_copy_in(self, nbytes):
        self.stats["copies_in"] += 1
        self.stats["bytes_copied_in"] += nbytes

    def sync(self):
        st = _lib.lib().agmm_ctx_sync(self.ptr)
        if st != _lib.SUCCESS:
            self.fail(st, "sync")

    # ---- the caller's symmetric memory ----------------------------------------------------------

    def symmetric_alloc(self, nbytes, what):
        self.agree(("symmetric_alloc", nbytes), ("op", "bytes"), what)
        out = ctypes.c_void_p()
        st = _lib.lib().agmm_symmetric_alloc(self.ptr, nbytes, ctypes.byref(out))
        if st != _lib.SUCCESS:
            self.fail(st, what, "shape")
        # Allocations are collective, so the n-th is the same allocation on every rank.
        self._symmetric[out.value] = (self._allocations, nbytes)
        self._allocations += 1
        return out.value

    def symmetric_free(self, ptr, what):
        if ptr not in self._symmetric:
            raise ValueError(f"{what}: not memory that symm_empty returned on this rank (or already freed); "
                             "give the array/tensor symm_empty returned, not a view that starts elsewhere")
        self.agree(("symmetric_free", self._symmetric[ptr][1]), ("op", "bytes"), what)
        del self._symmetric[ptr]
        _lib.lib().agmm_symmetric_free(self.ptr, ptr)

    def symmetric_allocations(self):
        """Base pointers of this rank's symmetric allocations, in allocation order."""
        return list(self._symmetric)

    def _symmetric_place(self, ptr, nbytes):
        """(allocation number, byte offset) when [ptr, ptr + nbytes) lies inside one of this rank's
        symmetric allocations, else None."""
        for base, (number, size) in self._symmetric.items():
            if base <= ptr and ptr + nbytes <= base + size:
                return number, ptr - base
        return None

    # ---- the end ---------------------------------------------------------------------------------

    def close(self, why):
        """Destroys every plan (least recently used first) and frees the symmetric memory still
        allocated (in allocation order): collective, every rank does it in the same order. The
        library's context is the owner's to destroy (take `ptr` first); any later use of this
        rank raises ValueError(why)."""
        if self.ptr is None:
            return
        lib = _lib.lib()
        while self._plans:
            self._destroy(self._plans.popitem(last=False)[1])
        while self._symmetric:
            lib.agmm_symmetric_free(self.ptr, self._symmetric.popitem(last=False)[0])
        self.ptr, self.closed_why = None, why
