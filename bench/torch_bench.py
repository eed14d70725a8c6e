#!/usr/bin/env python3
"""The seed's distributed benchmark (pytorch/helion PR #400 and #393) in one torchrun job, with
agmm's backends as columns beside PyTorch's, Helion's and kraken's, all timed one way.

    torchrun --nproc-per-node W bench/torch_bench.py
        [--op all|ag_matmul|all_reduce|matmul_reduce_scatter|matmul_all_reduce|all_reduce_rmsnorm] [--out DIR]

ag_matmul columns: nccl (all_gather_into_tensor + torch.matmul: the baseline), torch_symm_mem
(torch.ops.symm_mem.fused_all_gather_matmul on a rendezvoused shard), helion and kraken (when their
modules import: --peers-path points at their source trees; "not installed" otherwise), and
agmm_<backend> for each backend of libagmm (agmm.torch.ag_matmul, shard in symm_empty memory; with
--agmm-input copy, a plain tensor that the op copies in). all_reduce columns: nccl (dist.all_reduce),
symm_one_shot / symm_two_shot (torch.ops.symm_mem one_shot_all_reduce / two_shot_all_reduce_),
helion_oneshot / kraken_oneshot when importable, agmm_<backend>. all_reduce_rmsnorm (rows T x H):
torch (dist.all_reduce + bias + residual + torch's rms_norm: the baseline), kraken's and Helion's
fused kernels when they import, agmm_<backend> (bench/torch_bench_rmsnorm.py says how each gets the
same work). NVLink multicast is never used:
no multimem column, TORCH_SYMM_MEM_DISABLE_MULTICAST=1 and NCCL_NVLS_ENABLE=0 are required.
The row-parallel matmuls' columns are bench/torch_bench_mr.py's (their default shapes: the cubes,
then the 70B shapes 8192,8192,3584 and 8192,8192,1024, matmul_all_reduce first the decode shapes
M=1,8,32,128 N=8192 K=3584; their M is the rows of S, their TFLOP/s per GPU 2MNK / time).

Shapes: M = N = K from 256 to 4096 step 128 (the seed's 31; M is rows per rank), or --shapes
START:STOP:STEP / --shape M,N,K (repeatable). Sizes: the seed's 4093 ... 2^20 bf16 elements.

Timing, the seed's way but for the turns: per column, --warmup calls (50); then the columns of a
shape take turns in --turns rounds (5): in each, every column in turn (the first rotating) gets a
barrier, a 2e7-cycle sleep so the host queues ahead, then --iters/--turns calls (100 in all), each
with the 256 MB L2 flush (a buffer zeroed) before it and CUDA events around it, on rank 0's current
stream; the mean is the table's number (the seed's return_mode), the median is reported too. The
seed times each column's calls in one go, one column after the other; under a long product's load
the GPU's clock moves (an H100 at its power cap: 1980 MHz for the first calls, then 1100-1425 MHz,
back and forth; docs/results, thirty-second session), so the columns timed later met another clock.
--turns 1 is the seed's order. Unlike the seed, A is filled (randn; the seed left it uninitialised)
and no profiler runs on rank 0. Inputs are made per column and kept while the shape's columns take
turns, outputs allocated inside each call, as in the seed.

Checks: every column's first call (untimed, fresh inputs) against nccl's result: the gathered A
bit for bit, C (or the reduced vector) within a relative Frobenius error of 1e-2. A wrong cell is
marked "wrong" and the exit status is 1. Rank 0 prints the tables, the mean one with Best Backend
and each agmm backend's speed-up over the best non-agmm column; --out writes CSV (bench/plot.py
reads it) and JSON, and --plot draws them through bench/plot.py.
"""
import argparse
import csv
import datetime
import importlib
import json
import math
import os
import statistics
import subprocess
import sys
import time
import warnings

# NVLink multicast can take a shared host's GPUs down: never on, whatever the caller's environment.
for _var, _value in (("TORCH_SYMM_MEM_DISABLE_MULTICAST", "1"), ("NCCL_NVLS_ENABLE", "0"), ("NVSHMEM_DISABLE_NVLS", "1")):
    if os.environ.setdefault(_var, _value) != _value:
        sys.exit(f"torch_bench.py: {_var}={os.environ[_var]}: must be {_value} (no NVLink multicast here)")

import torch                                               # noqa: E402
import torch.distributed as dist                           # noqa: E402

import agmm                                                # noqa: E402
import agmm.torch as at                                    # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch_bench_mr as mr                                # noqa: E402
import torch_bench_rmsnorm as arn                          # noqa: E402

ALL_OPS = ("ag_matmul", "all_reduce") + mr.OPS + ("all_reduce_rmsnorm",)

SEED_SIZES = [4093, 4096, 5000, 8192, 8193, 16384, 16380, 16387] + [1 << p for p in range(15, 21)]
FLUSH_BYTES = 256 << 20
CHECK_REL_ERR = 1e-2


# ---- options -------------------------------------------------------------------------------------

def parse_range(text):
    """"256:4096:128" (inclusive) or "256,512"."""
    if ":" in text:
        start, stop, step = (int(x) for x in text.split(":"))
        return list(range(start, stop + 1, step))
    return [int(x) for x in text.split(",")]


def parse_size(text):
    return 1 << int(text[2:]) if text.startswith("2^") else int(text)


def options():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--op", choices=("all",) + ALL_OPS, default="all")
    ap.add_argument("--shapes", default="256:4096:128", help="M = N = K values, START:STOP:STEP or a,b,c")
    ap.add_argument("--shape", action="append", default=[], help="M,N,K (repeatable; replaces --shapes)")
    ap.add_argument("--sizes", default=",".join(map(str, SEED_SIZES)), help="all_reduce elements, e.g. 4093,2^20")
    ap.add_argument("--dtype", default="bfloat16", choices=("bfloat16", "float32"), help="all_reduce dtype")
    arn.add_options(ap)
    ap.add_argument("--warmup", type=int, default=50)
    ap.add_argument("--iters", type=int, default=100)
    ap.add_argument("--turns", type=int, default=5,
                    help="rounds in which a shape's columns take turns, iters/turns calls each (1: the seed's order)")
    ap.add_argument("--no-flush", action="store_true", help="skip the L2 flush before each call")
    ap.add_argument("--backends", help="agmm backends to run (default: all the library has)")
    ap.add_argument("--agmm-input", choices=("symm", "copy"), default="symm",
                    help="agmm's shard in symm_empty memory (default) or a plain tensor the op copies in")
    ap.add_argument("--peers-path", action="append", default=[],
                    help="a source tree to import helion's examples or kraken from (repeatable)")
    ap.add_argument("--out", help="folder for torch_<op>.csv and .json")
    ap.add_argument("--plot", action="store_true", help="also draw <out>/torch_<op>.png with bench/plot.py")
    args = ap.parse_args()
    args.given_shapes = bool(args.shape) or args.shapes != "256:4096:128"
    args.shapes = ([tuple(int(x) for x in s.split(",")) for s in args.shape] or
                   [(m, m, m) for m in parse_range(args.shapes)])
    args.sizes = [parse_size(s) for s in args.sizes.split(",")]
    if args.plot and not args.out:
        ap.error("--plot needs --out")
    if not 1 <= args.turns <= args.iters:
        ap.error(f"--turns {args.turns}: must be 1..--iters ({args.iters})")
    return args


# ---- timing and checking ---------------------------------------------------------------------------

class Timer:
    """The seed's benchmark_distributed, in turns: per column a warm-up; then per round and column a
    barrier, a sleep, and per call an L2 flush and CUDA events around the call; times of this
    rank's current stream.

    The sleep is what keeps host time out of the events: while the GPU sleeps the host enqueues
    every call of the block, so each call's kernels are queued before its start event runs. The
    seed's fixed 2e7 cycles (~12 ms) cover 100 calls only if each takes under ~120 us of host time,
    and a column whose Python path is slower would be timed with the host's gaps inside its events.
    So the sleep is the seed's or, where that is too short, 1.5 x the block's enqueue time measured
    on the warm-up (the longest of all ranks', so they stay in step); a block that still outlasts it
    is reported in the cell's note."""

    SEED_CYCLES = int(2e7)
    MAX_CYCLES = int(4e9)

    def __init__(self, args):
        self.warmup, self.iters, self.turns = args.warmup, args.iters, args.turns
        self.flush = None if args.no_flush else torch.empty(FLUSH_BYTES // 4, dtype=torch.int32, device="cuda")
        self.ms_per_cycle = None

    def _sleep_ms_per_cycle(self):
        """torch.cuda._sleep's GPU milliseconds per cycle, measured once (the clock is as found)."""
        if self.ms_per_cycle is None:
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            torch.cuda._sleep(int(1e6))
            start.record()
            torch.cuda._sleep(int(1e7))
            end.record()
            torch.cuda.synchronize()
            self.ms_per_cycle = max(start.elapsed_time(end), 1e-3) / 1e7
        return self.ms_per_cycle

    def _enqueue(self, fn, events):
        for start, end in events:
            if self.flush is not None:
                self.flush.zero_()
            start.record()
            fn()
            end.record()

    def warm(self, fn):
        """The warm-up calls, then the host's time per timed call (ms): a few calls enqueued as the
        timed blocks do."""
        for _ in range(self.warmup):
            fn()
        probe = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
                 for _ in range(min(10, self.iters))]
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        self._enqueue(fn, probe)
        host_ms = (time.perf_counter() - t0) * 1e3 / len(probe)
        torch.cuda.synchronize()
        return host_ms

    def block(self, fn, calls, host_ms):
        """One column's turn: the sleep, then `calls` timed calls; (their events, a host-bound note)."""
        ms_per_cycle = self._sleep_ms_per_cycle()
        want = min(max(self.SEED_CYCLES, int(1.5 * calls * host_ms / ms_per_cycle)), self.MAX_CYCLES)
        cycles = torch.tensor([want], dtype=torch.int64, device="cuda")
        dist.all_reduce(cycles, op=dist.ReduceOp.MAX)
        cycles = int(cycles.item())
        dist.barrier()
        torch.cuda.synchronize()
        events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
                  for _ in range(calls)]
        torch.cuda._sleep(cycles)
        t0 = time.perf_counter()
        self._enqueue(fn, events)
        enqueue_ms = (time.perf_counter() - t0) * 1e3
        torch.cuda.synchronize()
        sleep_ms = cycles * ms_per_cycle
        note = (f"host-bound: {calls} calls took {enqueue_ms:.1f} ms to enqueue, the sleep {sleep_ms:.1f} ms"
                if enqueue_ms > sleep_ms else "")
        return events, note

    def calls_of(self, turn):
        """How many timed calls a column makes in round `turn` (iters in all)."""
        return self.iters // self.turns + (1 if turn < self.iters % self.turns else 0)

    @staticmethod
    def summary(events, notes):
        times = [start.elapsed_time(end) * 1e3 for start, end in events]
        return {"mean_us": statistics.fmean(times), "median_us": statistics.median(times),
                "min_us": min(times), "max_us": max(times), "host_note": next((n for n in notes if n), "")}


def rel_err(got, want):
    want = want.double()
    norm = want.norm().item()
    diff = (got.double() - want).norm().item()
    return diff / norm if norm > 0 else diff


def check(result, golden, op):
    """(ok, err, exact_a, note) of a column's first result against the baseline's (all_reduce_rmsnorm:
    y alone; some columns return no residual)."""
    if op == "all_reduce_rmsnorm":
        result, golden = arn.first_y(result), arn.first_y(golden)
    if op == "ag_matmul":
        (a, c), (a_ref, c_ref) = result, golden
        if tuple(a.shape) != tuple(a_ref.shape) or tuple(c.shape) != tuple(c_ref.shape):
            return False, math.nan, 0, f"shapes {tuple(a.shape)}, {tuple(c.shape)}"
        exact_a = int(torch.equal(a, a_ref))
        err = rel_err(c, c_ref)
        ok = exact_a and err <= CHECK_REL_ERR
        return ok, err, exact_a, "" if ok else f"gathered A {'exact' if exact_a else 'differs'}, C err {err:.2e}"
    err = rel_err(result, golden)
    return err <= CHECK_REL_ERR, err, 1, "" if err <= CHECK_REL_ERR else f"err {err:.2e}"


# ---- the peers: helion and kraken, when importable ---------------------------------------------------

def import_first(candidates):
    """(function, "") of the first module:attribute that imports, else (None, why not)."""
    why = []
    for module, attr in candidates:
        try:
            return getattr(importlib.import_module(module), attr), ""
        except Exception as e:         # a peer that fails to import is a column that says why
            why.append(f"{module}.{attr}: {type(e).__name__}: {e}")
    return None, "; ".join(why)


def peers(op):
    if op == "all_reduce_rmsnorm":
        return arn.peers(import_first)
    if op == "ag_matmul":
        return {"helion": import_first([("examples.all_gather_matmul", "helion_all_gather_matmul"),
                                        ("examples.distributed.all_gather_matmul", "helion_all_gather_matmul")]),
                "kraken": import_first([("kraken.all_gather", "all_gather_matmul"),
                                        ("kraken.fused", "all_gather_matmul")])}
    return {"helion_oneshot": import_first([("examples.all_reduce", "helion_one_shot_all_reduce"),
                                            ("examples.distributed.all_reduce", "helion_one_shot_all_reduce")]),
            "kraken_oneshot": import_first([("kraken.all_reduce", "one_shot_all_reduce"),
                                            ("kraken.comm", "one_shot_all_reduce")])}


# ---- columns -----------------------------------------------------------------------------------------

class Absent:
    """A column that cannot run here: its cells say `state` ("not installed", "skipped") and why."""

    def __init__(self, state, why):
        self.state, self.why = state, why


def symmetric_copy(x, group_name):
    """A rendezvoused torch symmetric-memory copy of x (collective)."""
    import torch.distributed._symmetric_memory as symm_mem
    t = symm_mem.empty(tuple(x.shape), dtype=x.dtype, device=x.device)
    symm_mem.rendezvous(t, group_name)
    t.copy_(x)
    return t


def agmm_input(x, args):
    if args.agmm_input == "copy":
        return x.clone()
    t = at.symm_empty(tuple(x.shape), x.dtype)
    t.copy_(x)
    args.symm_tensors.append(t)         # freed (collectively) once the shape is done
    return t


def ag_matmul_columns(a, b, args, group_name, peer_fns):
    """{column: (make inputs, call)}; every input is made fresh for its column, collectively."""
    w = dist.get_world_size()

    def nccl(a_, b_):
        a_gathered = a_.new_empty((w * a_.shape[0], a_.shape[1]))
        dist.all_gather_into_tensor(a_gathered, a_)
        return a_gathered, torch.matmul(a_gathered, b_)

    def symm(a_, b_):
        a_gathered, cs = torch.ops.symm_mem.fused_all_gather_matmul(a_, [b_], gather_dim=0, group_name=group_name)
        return a_gathered, cs[0]

    cols = {"nccl": (lambda: (a.clone(), b), nccl),
            "torch_symm_mem": (lambda: (symmetric_copy(a, group_name), b), symm)}
    for name, (fn, why) in peer_fns.items():
        cols[name] = Absent("not installed", why) if fn is None else (lambda: (symmetric_copy(a, group_name), b), fn)
    for backend in args.agmm_backends["ag_matmul"]:
        cols[f"agmm_{backend}"] = args.agmm_absent or (lambda: (agmm_input(a, args), b),
                                                       lambda a_, b_, name=backend: at.ag_matmul(a_, b_, backend=name))
    return cols


def all_reduce_columns(x, args, group_name, peer_fns):
    def nccl(t):
        dist.all_reduce(t)
        return t

    def two_shot(t):
        torch.ops.symm_mem.two_shot_all_reduce_(t, "sum", group_name)
        return t

    cols = {"nccl": (lambda: (x.clone(),), nccl),
            "symm_one_shot": (lambda: (symmetric_copy(x, group_name),),
                              lambda t: torch.ops.symm_mem.one_shot_all_reduce(t, "sum", group_name)),
            "symm_two_shot": (lambda: (symmetric_copy(x, group_name),), two_shot)}
    for name, (fn, why) in peer_fns.items():
        cols[name] = Absent("not installed", why) if fn is None else (lambda: (symmetric_copy(x, group_name),), fn)
    for backend in args.agmm_backends["all_reduce"]:
        cols[f"agmm_{backend}"] = args.agmm_absent or (lambda: (agmm_input(x, args),),
                                                       lambda t, name=backend: at.all_reduce_(t, backend=name))
    return cols


def baseline(op):
    """The column every other is checked against and sped up over."""
    return "torch" if op == "all_reduce_rmsnorm" else "nccl"


def measure(columns, op, timer):
    """{column: row fields}. A column's inputs come fresh; the baseline's first result is the golden one.
    Every column is made, checked and warmed up, then the columns take turns (Timer)."""
    out, golden, ready = {}, None, {}
    for name, col in columns.items():
        if isinstance(col, Absent):
            out[name] = {"state": col.state, "note": col.why}
            continue
        make, call = col
        try:
            inputs = make()
            first = call(*inputs)
            if name == baseline(op):
                # A copy: in-place columns go on reducing their input while they are timed.
                golden = tuple(t.clone() for t in first) if isinstance(first, tuple) else first.clone()
                ok, err, exact_a, note = True, 0.0, 1, ""
            else:
                ok, err, exact_a, note = check(first, golden, op)
            first = None
            out[name] = {"state": "ok" if ok else "wrong", "err": err, "exact_a": exact_a, "note": note}
            fn = (lambda c=call, i=inputs: c(*i))
            ready[name] = (fn, timer.warm(fn), [], [])
        except agmm.Unsupported as e:
            out[name] = {"state": "skipped", "note": str(e)}
        except Exception as e:          # a column that fails is a cell that says why, as in the seed
            out[name] = failed(e)
    names = list(ready)
    for turn in range(timer.turns):
        for j in range(len(names)):
            name = names[(j + turn) % len(names)]
            if name not in ready:
                continue
            fn, host_ms, events, notes = ready[name]
            try:
                ev, note = timer.block(fn, timer.calls_of(turn), host_ms)
                events += ev
                notes.append(note)
            except Exception as e:
                out[name] = failed(e)
                del ready[name]
    for name, (_, _, events, notes) in ready.items():
        timing = timer.summary(events, notes)
        host_note = timing.pop("host_note")
        out[name].update(timing)
        out[name]["note"] = "; ".join(x for x in (out[name]["note"], host_note) if x)
    return out


def failed(e):
    return {"state": "failed", "note": f"{type(e).__name__}: {e}".splitlines()[0][:300]}


# ---- reporting -----------------------------------------------------------------------------------------

CSV_FIELDS = ["op", "world", "nranks", "m", "n", "k", "dtype", "backend", "state", "mean_us", "median_us", "min_us",
              "max_us", "tflops", "algbw_gbps", "busbw_gbps", "speedup_vs_nccl", "speedup_vs_best_torch", "err",
              "exact_a", "best", "note"]


def finish_rows(op, key, cells, w, dtype):
    """Adds rates, speed-ups and Best Backend to one shape's (or size's) cells; returns CSV rows."""
    timed = {name: c["mean_us"] for name, c in cells.items() if c["state"] == "ok"}
    best = min(timed, key=timed.get) if timed else ""
    torch_cols = {name: t for name, t in timed.items() if not name.startswith("agmm_")}
    best_torch = min(torch_cols.values()) if torch_cols else math.nan
    rows = []
    for name, c in cells.items():
        r = {f: "" for f in CSV_FIELDS}
        r.update(op=op, world="gpu", nranks=w, dtype=dtype, backend=name, state=c["state"], note=c.get("note", ""),
                 best=int(name == best))
        if op == "all_reduce_rmsnorm":
            r.update(m=key[0], n=key[1], k=0)
        elif op != "all_reduce":
            r.update(m=key[0], n=key[1], k=key[2])
        else:
            r.update(m=0, n=key, k=0)
        if c["state"] in ("ok", "wrong"):
            for f in ("mean_us", "median_us", "min_us", "max_us"):
                r[f] = f"{c[f]:.3f}"
            r["err"], r["exact_a"] = f"{c['err']:.3e}", c["exact_a"]
            t = c["mean_us"]
            if op == "ag_matmul":
                r["tflops"] = f"{2.0 * w * key[0] * key[1] * key[2] / t * 1e-6:.3f}"
            elif op in mr.OPS:
                r["tflops"] = f"{mr.tflops(key, t):.3f}"
            else:   # all_reduce_rmsnorm: the all-reduced x, T x H bf16
                elems = key[0] * key[1] if op == "all_reduce_rmsnorm" else key
                algbw = elems * (2 if dtype == "bfloat16" else 4) / t * 1e-3
                r["algbw_gbps"], r["busbw_gbps"] = f"{algbw:.3f}", f"{algbw * 2 * (w - 1) / w:.3f}"
            if baseline(op) in timed:
                r["speedup_vs_nccl"] = f"{timed[baseline(op)] / t:.4f}"
            if name.startswith("agmm_") and not math.isnan(best_torch):
                r["speedup_vs_best_torch"] = f"{best_torch / t:.4f}"
        rows.append(r)
    return rows, best


def cell(row, metric):
    if row["state"] == "ok":
        return f"{float(row[metric]):.1f}"
    return {"not installed": "not installed", "skipped": "skipped"}.get(row["state"], row["state"])


def print_table(op, w, rows_by_key, bests, metric, title):
    names = list(next(iter(rows_by_key.values())).keys())
    agmm_names = [n for n in names if n.startswith("agmm_")]
    head = ([{"all_reduce": "elements", "all_reduce_rmsnorm": "T x H"}.get(op, "shape")] + names + ["Best Backend"] +
            [f"{n[5:]}/best torch" for n in agmm_names] + ["best agmm÷torch"])
    widths = [max(len(h), 13) for h in head]
    widths[0] = 20
    print(f"\n{title}")
    print("  ".join(h.rjust(wd) for h, wd in zip(head, widths)))
    for key, rows in rows_by_key.items():
        label = (str(key) if op == "all_reduce" else f"{key[0]} x {key[1]}" if op == "all_reduce_rmsnorm" else
                 f"({key[0]}, {key[1]}, {key[2]})")
        t = {n: float(r[metric]) for n, r in rows.items() if r["state"] == "ok"}
        torch_best = min((v for n, v in t.items() if not n.startswith("agmm_")), default=math.nan)
        agmm_best = min((v for n, v in t.items() if n.startswith("agmm_")), default=math.nan)
        line = [label] + [cell(rows[n], metric) for n in names] + [bests[key] or "-"]
        line += [f"{torch_best / t[n]:.3f}x" if n in t and not math.isnan(torch_best) else "-" for n in agmm_names]
        ratio = agmm_best / torch_best
        line.append("-" if math.isnan(ratio) else f"{ratio:.3f}")
        print("  ".join(v.rjust(wd) for v, wd in zip(line, widths)))
    notes = {}
    for rows in rows_by_key.values():
        for n, r in rows.items():
            if r["state"] != "ok" and r["note"]:
                notes.setdefault(n, f"{r['state']}: {r['note']}")
    for n, text in notes.items():
        print(f"  {n}: {text}")


def write_outputs(op, rows, meta, args):
    os.makedirs(args.out, exist_ok=True)
    path = os.path.join(args.out, f"torch_{op}.csv")
    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, CSV_FIELDS)
        writer.writeheader()
        writer.writerows(rows)
    with open(os.path.join(args.out, f"torch_{op}.json"), "w") as f:
        json.dump({"meta": meta, "rows": rows}, f, indent=1)
    if args.plot:
        plot = os.path.join(os.path.dirname(os.path.abspath(__file__)), "plot.py")
        png = os.path.join(args.out, f"torch_{op}.png")
        done = subprocess.run([sys.executable, plot, path, "-o", png], capture_output=True, text=True)
        print(done.stdout.strip() or f"plot.py: {done.stderr.strip().splitlines()[-1:]}")


# ---- main --------------------------------------------------------------------------------------------

def run_op(op, args, timer, group_name, meta):
    rank, w = dist.get_rank(), dist.get_world_size()
    peer_fns = peers(op)
    rows_all, rows_by_key, bests = [], {}, {}
    keys = {"ag_matmul": args.shapes, "all_reduce_rmsnorm": arn.keys(args)}.get(op, args.sizes)
    if op in mr.OPS:
        keys = args.shapes if args.given_shapes else mr.default_shapes(op, args.shapes)
        peer_fns = mr.peers(op, import_first)
    dtype = args.dtype if op == "all_reduce" else "bfloat16"
    for key in keys:
        gen = torch.Generator(device="cuda").manual_seed(42 + rank)     # the seed's per-rank seeds
        if op in mr.OPS:
            a, b = mr.operands(key, gen)
            columns = mr.columns(op, a, b, args, group_name, peer_fns, Absent)
        elif op == "ag_matmul":
            m, n, k = key
            a = torch.randn((m, k), generator=gen, device="cuda").to(torch.bfloat16)
            b = torch.randn((k, n), generator=gen, device="cuda").to(torch.bfloat16).T.contiguous().T
            columns = ag_matmul_columns(a, b, args, group_name, peer_fns)
        elif op == "all_reduce_rmsnorm":
            columns = arn.columns(key, args, group_name, peer_fns, Absent, agmm_input, 42 + rank)
        else:
            x = torch.randn((key,), generator=gen, device="cuda").to(getattr(torch, dtype))
            columns = all_reduce_columns(x, args, group_name, peer_fns)
        cells = measure(columns, op, timer)
        for t in args.symm_tensors:
            at.symm_free(t)
        args.symm_tensors.clear()
        rows, best = finish_rows(op, key, cells, w, dtype)
        rows_all += rows
        rows_by_key[key] = {r["backend"]: r for r in rows}
        bests[key] = best
        if rank == 0:
            done = ", ".join(f"{r['backend']} {cell(r, 'mean_us')}" for r in rows)
            print(f"[{op} {key}] {done}", flush=True)
    if rank == 0:
        if args.out:
            write_outputs(op, rows_all, meta, args)
        unit = f"us, mean of {args.iters} after {args.warmup} warm-ups, the columns taking {args.turns} turns"
        for metric, what in (("median_us", "median"), ("mean_us", "mean")):
            print_table(op, w, rows_by_key, bests, metric,
                        f"Benchmarking results for {op} on {w}x devices. (time_us: {what}; {unit}; "
                        f"x = speed-up over the best non-agmm column; Best Backend by mean)")
    return any(r["state"] == "wrong" for r in rows_all)


def main():
    args = options()
    sys.path[:0] = [os.path.abspath(p) for p in args.peers_path]
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    torch.cuda.set_device(local_rank)
    dist.init_process_group("nccl", device_id=torch.device("cuda", local_rank))
    group_name = dist.group.WORLD.group_name
    import torch.distributed._symmetric_memory as symm_mem
    if hasattr(symm_mem, "enable_symm_mem_for_group"):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")      # deprecated (unneeded) in newer torch
            symm_mem.enable_symm_mem_for_group(group_name)
    args.agmm_absent, args.symm_tensors = None, []
    try:
        at.init()
    except agmm.Unsupported as e:      # e.g. a process world this libagmm cannot make yet
        args.agmm_absent = Absent("skipped", str(e))
    args.agmm_backends = {op: [b for b in (args.backends.split(",") if args.backends else agmm.backends(op))
                               if b in agmm.backends(op)] for op in ALL_OPS}
    props = torch.cuda.get_device_properties(local_rank)
    meta = {"date": datetime.datetime.now().isoformat(timespec="seconds"), "torch": torch.__version__,
            "cuda": torch.version.cuda, "device": props.name, "world_size": dist.get_world_size(),
            "agmm_library": agmm.library_path()[0],
            "agmm_world": args.agmm_absent.why if args.agmm_absent else at.describe(), "warmup": args.warmup,
            "iters": args.iters, "turns": args.turns, "l2_flush_bytes": 0 if args.no_flush else FLUSH_BYTES,
            "agmm_input": args.agmm_input, "argv": sys.argv[1:]}
    if dist.get_rank() == 0:
        print(f"# torch {torch.__version__} (CUDA {torch.version.cuda}), {dist.get_world_size()} x {props.name}; "
              f"agmm {'.'.join(map(str, agmm.version()))} from {agmm.library_path()[0]}: {meta['agmm_world']}",
              flush=True)
    timer = Timer(args)
    wrong = False
    for op in (ALL_OPS if args.op == "all" else (args.op,)):
        wrong |= run_op(op, args, timer, group_name, meta)
    if wrong and dist.get_rank() == 0:
        print("torch_bench.py: a column's result differs from nccl's (state 'wrong' above): exit status 1")
    at.finalize()
    dist.destroy_process_group()
    return 1 if wrong else 0


if __name__ == "__main__":
    sys.exit(main())
