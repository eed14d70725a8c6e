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
from collections import OrderedDict

from . import _lib
from ._lib import raise_status

# What each field of a plan's key is, in the caller's words (for the disagreement message).
_AG_MATMUL_FIELDS = ("op", "M (rows of a_shard)", "N (columns of b)", "K (columns of a_shard, rows of b)",
                     "layout of b", "backend", "splits")
_ALL_REDUCE_FIELDS = ("op", "number of elements", "dtype", "backend")
_ARN_FIELDS = ("op", "tokens (rows of x)", "hidden (the last dimension of x)", "eps", "backend")

# The library's INVALID_ARG messages start with the field they are about ("K=100 is not ...");
# these are the caller's arguments behind each field.
_AG_MATMUL_ARGS = {"M": "a_shard", "N": "b", "K": "a_shard and b (K)", "shape W": "a_shard and b",
                   "b_layout": "b", "splits": "splits", "backend": "backend", "io->input": "a_shard",
                   "io->b": "b and the outputs (a_gathered, c)"}
_ALL_REDUCE_ARGS = {"n": "the tensor (its number of elements)", "dtype": "the tensor's dtype",
                    "backend": "backend", "io->out": "the tensor", "io->input": "the tensor"}
# The row-parallel matmuls (matmul_reduce_scatter, matmul_all_reduce): one key and one set of names.
_MATMUL_REDUCE_FIELDS = ("op", "M (rows of a)", "N (columns of b)", "K (columns of a, rows of b)", "layout of b",
                         "backend")
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


def backend_names(op):
    """The library's backends of `op` ("ag_matmul", "all_reduce", "matmul_reduce_scatter",
    "matmul_all_reduce" or "all_reduce_rmsnorm"), in its order; "auto" is not one of them (it lets
    the library choose)."""
    lib, code, names = _lib.lib(), _lib.OPS[op], []
    while True:
        name = lib.agmm_backend_name(code, len(names))
        if not name:
            return names
        names.append(name.decode())


def backends_available(world_ptr, op):
    """{backend of op: "" where the world runs it, else why not} (agmm_backend_available)."""
    lib, out = _lib.lib(), {}
    for name in backend_names(op):
        why = ctypes.create_string_buffer(256)
        ok = lib.agmm_backend_available(world_ptr, _lib.OPS[op], name.encode(), why, len(why))
        out[name] = "" if ok else why.value.decode(errors="replace")
    return out


def backend_summary(op, name):
    """The library's one line on backend `name` of `op`."""
    s = _lib.lib().agmm_backend_summary(_lib.OPS[op], name.encode())
    if s is None:
        raise ValueError(f"backend={name!r}: {op} has {', '.join(backend_names(op))}")
    return s.decode()


def backend_key(op, backend):
    """Normalises a backend argument: None and "auto" are the same plan."""
    if backend is None:
        return "auto"
    if not isinstance(backend, str):
        raise TypeError(f"{op}: backend: {type(backend).__name__}; give a name ({', '.join(backend_names(op))}) "
                        "or 'auto'")
    return backend


class Plan:
    """A cached agmm_plan and what a run needs besides: its input buffer (and a view of it that
    the level made), and the io struct reused from call to call."""

    __slots__ = ("ptr", "key", "backend", "input_ptr", "input_bytes", "io", "view", "last_stream", "pinned")

    def __init__(self, ptr, key, io):
        lib = _lib.lib()
        self.ptr, self.key, self.io = ptr, key, io
        self.backend = lib.agmm_plan_backend(ptr).decode()
        self.input_ptr = lib.agmm_plan_input(ptr)
        self.input_bytes = 0
        self.view = None          # the level's array/tensor over input_ptr, made on first copy-in
        self.pinned = False       # a CUDA graph captured a run of it: never evicted
        self.last_stream = None   # torch: the stream of the last run that read the input buffer


class Context:
    """One rank. `exchange(obj) -> [obj of every rank]` is how this level talks to the other ranks
    outside the library (None where it has no channel: then disagreement is not checked here)."""

    def __init__(self, ptr, nranks, exchange=None, max_plans=16):
        if not isinstance(max_plans, int) or max_plans < 1:
            raise ValueError(f"max_plans={max_plans!r}: must be an int >= 1")
        lib = _lib.lib()
        self.ptr = ptr
        self.rank = lib.agmm_ctx_rank(ptr)
        self.device = lib.agmm_ctx_device(ptr)
        self.nranks = nranks
        self.max_plans = max_plans
        self._exchange = exchange
        self._plans = OrderedDict()
        self._symmetric = OrderedDict()      # base pointer -> bytes, in allocation order
        self.stats = {"runs": 0, "plans_created": 0, "plans_evicted": 0, "copies_in": 0, "bytes_copied_in": 0}

    # ---- errors and agreement ------------------------------------------------------------------

    def fail(self, status, what, arg=None):
        raise_status(status, _lib.text(_lib.lib().agmm_last_error(self.ptr)), what, arg)

    def agree(self, key, fields, what):
        """Raises ValueError, on every rank alike, when the ranks' keys differ: the first field
        that differs, with the ranks' values."""
        if self._exchange is None:
            return
        keys = self._exchange(key)
        for i, field in enumerate(fields):
            values = [k[i] for k in keys]
            if any(v != values[0] for v in values):
                shown = ", ".join(f"rank {r}: {v!r}" for r, v in enumerate(values))
                raise ValueError(f"{what}: the ranks disagree on {field} ({shown}); every rank of the world "
                                 "must make the same call")

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

    def all_reduce_plan(self, n, dtype, backend, capturing=None):
        key = ("all_reduce", n, dtype, backend)
        plan = self._lookup(key, capturing)
        if plan is None:
            self.agree(key, _ALL_REDUCE_FIELDS, "all_reduce")
            desc = _lib.AllReduceDesc(n=n, dtype=dtype, backend=None if backend == "auto" else backend.encode())
            plan = self._create(key, _lib.lib().agmm_plan_all_reduce, desc, _lib.AllReduceIo(),
                                "all_reduce", _ALL_REDUCE_ARGS)
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

    def run_all_reduce(self, plan, out, input_ptr, stream):
        io = plan.io
        io.out, io.input = out, input_ptr
        st = _lib.lib().agmm_all_reduce(plan.ptr, ctypes.byref(io), stream)
        if st != _lib.SUCCESS:
            self.fail(st, "all_reduce", _arg_namer(_ALL_REDUCE_ARGS))
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
        self._symmetric[out.value] = nbytes
        return out.value

    def symmetric_free(self, ptr, what):
        if ptr not in self._symmetric:
            raise ValueError(f"{what}: not memory that symm_empty returned on this rank (or already freed); "
                             "give the array/tensor symm_empty returned, not a view that starts elsewhere")
        self.agree(("symmetric_free", self._symmetric[ptr]), ("op", "bytes"), what)
        del self._symmetric[ptr]
        _lib.lib().agmm_symmetric_free(self.ptr, ptr)

    def symmetric_allocations(self):
        """Base pointers of this rank's symmetric allocations, in allocation order."""
        return list(self._symmetric)

    def is_symmetric(self, ptr, nbytes):
        """True when [ptr, ptr + nbytes) lies inside one of this rank's symmetric allocations."""
        for base, size in self._symmetric.items():
            if base <= ptr and ptr + nbytes <= base + size:
                return True
        return False

    # ---- the end ---------------------------------------------------------------------------------

    def close(self):
        """Destroys every plan (least recently used first) and frees the symmetric memory still
        allocated (in allocation order): collective, every rank does it in the same order."""
        lib = _lib.lib()
        while self._plans:
            self._destroy(self._plans.popitem(last=False)[1])
        while self._symmetric:
            lib.agmm_symmetric_free(self.ptr, self._symmetric.popitem(last=False)[0])
