"""What a review of the numpy level found, each now an exception naming the function and the
argument, never a crash, a hang or a silent wrong answer: symmetric inputs at different offsets on
different ranks; ranks and worlds used after their end, or by two runs at once; arguments that
ctypes would truncate or refuse with its own error; messages that named the wrong thing."""
import os
import re
import signal
import subprocess
import sys
import textwrap
import threading
import warnings

import numpy as np
import pytest

import agmm
import agmm.numpy as anp
from agmm import _lib

POISON = 0x7FC1                  # a bf16 NaN that no result can equal


def small_ints(rng, shape, bound=2):
    """bf16 bits of integers in [-bound, bound] (random, never all zero): sums of products stay exact."""
    return anp.to_bf16(rng.integers(-bound, bound + 1, size=shape).astype(np.float32))


def f64(bits):
    return anp.from_bf16(bits).astype(np.float64)


def errors_of(world, step):
    """Runs step on every rank; returns what each raised (None where it returned)."""
    def catching(rank):
        try:
            step(rank)
        except Exception as e:      # returned (without the frames, and their arrays) to be checked rank by rank
            return e.with_traceback(None)
        return None
    return world.run(catching)


# ---- symmetric inputs: the same offset of the same allocation on every rank (include/agmm.h) ---------

def test_symmetric_inputs_at_different_offsets_are_refused_on_every_rank(seed):
    rng = np.random.default_rng(seed)
    w, m, k, n = 3, 4, 16, 8
    shards = [small_ints(rng, (m, k)) for _ in range(w)]
    b = small_ints(rng, (k, n))
    vectors = [rng.integers(-8, 9, size=2 * 64).astype(np.float32) for _ in range(w)]
    xs = [small_ints(rng, (2, 64)) for _ in range(w)]
    gamma = small_ints(rng, 64)

    def step(rank):
        r = rank.rank
        buf = rank.symm_empty((3 * m, k), np.uint16)
        vec = rank.symm_empty(3 * 2 * 64, np.float32)
        xbuf = rank.symm_empty((3 * 2, 64), np.uint16)
        said = []
        # Ranks 0 and 2 at offset 0, rank 1 one block further: every rank refuses.
        for name, call in (
                ("a_shard", lambda at: rank.ag_matmul(at(buf, m, shards[r]), b)),
                ("x", lambda at: rank.all_reduce_(at(vec, 2 * 64, vectors[r]))),
                ("x", lambda at: rank.all_reduce_rmsnorm(at(xbuf, 2, xs[r]), gamma))):
            def at(array, rows, data, block=r % 2):
                view = array[block * rows:(block + 1) * rows]
                view[:] = data
                return view
            with pytest.raises(ValueError) as info:
                call(at)
            said.append((name, str(info.value)))
        # One rank in symmetric memory, the others not: refused as well.
        plain = shards[r].copy()
        with pytest.raises(ValueError, match="a_shard: the ranks' inputs lie at different places"):
            rank.ag_matmul(buf[:m] if r == 0 else plain, b)
        # The same non-zero offset everywhere is right, and read in place.
        buf[m:2 * m] = shards[r]
        before = rank.stats["copies_in"]
        out = (np.full((w * m, k), POISON, np.uint16), np.full((w * m, n), POISON, np.uint16))
        a_gathered, c = rank.ag_matmul(buf[m:2 * m], b, out=out)
        return said, a_gathered.copy(), c.copy(), rank.stats["copies_in"] - before

    with anp.World(w, timeout_s=5) as world:
        results = world.run(step)
    a_ref = np.concatenate(shards)
    for said, a_gathered, c, copies in results:
        for name, text in said:
            assert re.search(rf"^(ag_matmul|all_reduce_|all_reduce_rmsnorm): {name}: the ranks' inputs lie at "
                             r"different places \(rank 0: allocation #\d \+ 0 bytes, rank 1: allocation #\d \+ \d+ "
                             r"bytes, rank 2: allocation #\d \+ 0 bytes\); an input read in place must be at the same "
                             "offset of the same symm_empty allocation on every rank", text), text
        np.testing.assert_array_equal(a_gathered, a_ref)
        np.testing.assert_array_equal(f64(c), f64(a_ref) @ f64(b))
        assert copies == 0


# ---- ranks and worlds after their end; one run at a time ------------------------------------------------

RANK_CALLS = {
    "ag_matmul": lambda rank, rng: rank.ag_matmul(small_ints(rng, (4, 8)), small_ints(rng, (8, 8))),
    "all_reduce_": lambda rank, rng: rank.all_reduce_(rng.standard_normal(8).astype(np.float32)),
    "matmul_reduce_scatter": lambda rank, rng: rank.matmul_reduce_scatter(small_ints(rng, (4, 8)),
                                                                          small_ints(rng, (8, 8))),
    "matmul_all_reduce": lambda rank, rng: rank.matmul_all_reduce(small_ints(rng, (4, 8)), small_ints(rng, (8, 8))),
    "all_reduce_rmsnorm": lambda rank, rng: rank.all_reduce_rmsnorm(small_ints(rng, (2, 8)), small_ints(rng, 8)),
    "symm_empty": lambda rank, rng: rank.symm_empty(8, np.float32),
    "symm_free": lambda rank, rng: rank.symm_free(np.ones(8, np.float32)),
    "sync": lambda rank, rng: rank.sync(),
    "plans": lambda rank, rng: rank.plans(),
}


def test_a_rank_used_after_its_run_is_an_error_not_a_use_after_free(seed):
    rng = np.random.default_rng(seed)
    with anp.World(2, timeout_s=1) as world:
        ranks = world.run(lambda rank: (rank.all_reduce_(rng.standard_normal(8).astype(np.float32)), rank)[1])
        for when in ("after its run", "after the world's close"):
            for name, call in RANK_CALLS.items():
                with pytest.raises(ValueError, match=f"^{name}: this rank was used after its World.run returned"):
                    call(ranks[0], rng)
            assert ranks[1].rank == 1 and ranks[1].stats["runs"] == 1     # what it was stays readable
            world.close()


def test_a_closed_process_rank_is_an_error(seed):
    rng = np.random.default_rng(seed)
    me = anp.join(rank=0, nranks=1, unique_id=anp.unique_id("cpu"), timeout_s=2)
    x = rng.standard_normal(8).astype(np.float32)
    want = x.copy()
    np.testing.assert_array_equal(me.all_reduce_(x), want)            # W = 1: the sum is x
    me.close()
    me.close()                                                        # a second close does nothing
    for name, call in dict(RANK_CALLS, backends=lambda rank, rng: rank.backends("all_reduce")).items():
        with pytest.raises(ValueError, match=fr"^{name}: this rank is closed \(ProcessRank.close"):
            call(me, rng)


def test_one_run_at_a_time_on_a_world(seed):
    rng = np.random.default_rng(seed)
    vectors = [rng.standard_normal(16).astype(np.float32) for _ in range(2)]
    inside, release = threading.Event(), threading.Event()
    outcome = {}

    def held(rank):
        inside.set()
        release.wait(10)
        return rank.rank

    with anp.World(2, timeout_s=5) as world:
        other = threading.Thread(target=lambda: outcome.setdefault("other", world.run(held)))
        other.start()
        assert inside.wait(10)
        try:
            with pytest.raises(RuntimeError, match="World.run: World.run is already running on this world"):
                world.run(lambda rank: None)
            with pytest.raises(RuntimeError, match="World.close: World.run is running on this world"):
                world.close()
        finally:
            release.set()
            other.join(10)
        assert outcome["other"] == [0, 1]
        # From inside a rank's function: the same error, raised by the outer run.
        with pytest.raises(RuntimeError, match="already running on this world"):
            world.run(lambda rank: world.run(lambda inner: None))
        # The world is unharmed.
        sums = world.run(lambda rank: rank.all_reduce_(vectors[rank.rank].copy()))
        for s in sums:
            np.testing.assert_array_equal(s, vectors[0] + vectors[1])


def test_backends_of_a_closed_world_and_of_no_operation():
    world = anp.World(2)
    with pytest.raises(ValueError, match="World.backends: op='bogus': want one of ag_matmul, all_reduce, "):
        world.backends("bogus")
    world.close()
    with pytest.raises(ValueError, match="World.backends: the world is closed"):
        world.backends("all_reduce")
    with pytest.raises(ValueError, match="backends: op='bogus': want one of ag_matmul, all_reduce, "
                                         "matmul_reduce_scatter, matmul_all_reduce, all_reduce_rmsnorm"):
        agmm.backends("bogus")
    with pytest.raises(TypeError, match="backends: op: int"):
        agmm.backends(1)
    with pytest.raises(ValueError, match="backend_summary: op='bogus'"):
        agmm.backend_summary("bogus", "nccl")


def test_symm_empty_arrays_that_outlive_their_rank_are_warned_about(seed):
    rng = np.random.default_rng(seed)
    with anp.World(2) as world:
        with pytest.warns(RuntimeWarning, match="World.run: 2 array.s. from symm_empty outlive their rank"):
            kept = world.run(lambda rank: rank.symm_empty(8, np.float32))
        del kept                                   # over freed memory: never read
        with warnings.catch_warnings():
            warnings.simplefilter("error")         # dropped, or freed, arrays are no misuse
            world.run(lambda rank: float(rank.symm_empty(8, np.float32).sum()))
            world.run(lambda rank: rank.symm_free(rank.symm_empty(8, np.float32)))
            x = rng.standard_normal(8).astype(np.float32)
            world.run(lambda rank: rank.all_reduce_(x.copy()))


# ---- arguments passed to C: ranges of the C types, bool, numpy integers ---------------------------------

def test_world_and_join_check_their_arguments_before_anything_is_made():
    uid = anp.unique_id("cpu")
    bad = [
        (dict(nranks=2**32 + 2), ValueError, "World: nranks: nranks=4294967298 does not fit the library's int"),
        (dict(nranks=True), TypeError, "World: nranks: bool"),
        (dict(nranks=2.0), TypeError, "World: nranks: float"),
        (dict(timeout_s=float("inf")), ValueError, "World: timeout_s: timeout_s=inf: want 0"),
        (dict(timeout_s=float("nan")), ValueError, "World: timeout_s: timeout_s=nan"),
        (dict(timeout_s=1e10), ValueError, "World: timeout_s: timeout_s=10000000000.0"),
        (dict(timeout_s=-1), ValueError, "World: timeout_s: timeout_s=-1"),
        (dict(timeout_s=True), TypeError, "World: timeout_s: bool"),
        (dict(timeout_s="3"), TypeError, "World: timeout_s: str"),
        (dict(timeout_s=None), TypeError, "World: timeout_s: NoneType"),
        (dict(max_plans=0), ValueError, "World: max_plans: max_plans=0: want 1..65536"),
        (dict(max_plans=-3), ValueError, "World: max_plans: max_plans=-3"),
        (dict(max_plans=2**40), ValueError, "World: max_plans: max_plans=1099511627776"),
        (dict(max_plans=2.5), TypeError, "World: max_plans: float"),
    ]
    for kwargs, exc, match in bad:
        with pytest.raises(exc, match=re.escape(match)):
            anp.World(**dict(dict(nranks=2), **kwargs))
        # join: a valid one-rank world would be joined if the argument were not checked first.
        if "nranks" not in kwargs:
            with pytest.raises(exc, match=re.escape(match.replace("World", "join"))):
                anp.join(rank=0, nranks=1, unique_id=uid, **kwargs)
    for kwargs, exc, match in ((dict(rank=2**32), ValueError, "join: rank: rank=4294967296 does not fit"),
                               (dict(nranks=2**32 + 1), ValueError, "join: nranks: nranks=4294967297 does not fit"),
                               (dict(rank=False), TypeError, "join: rank: bool"),
                               (dict(unique_id="ab" * 128), TypeError, "join: unique_id: str")):
        with pytest.raises(exc, match=re.escape(match)):
            anp.join(**dict(dict(rank=0, nranks=1, unique_id=uid), **kwargs))
    with anp.World(np.int64(3), timeout_s=np.float32(2.5), max_plans=np.int16(4)) as world:
        assert (world.nranks, world.timeout_s, world.max_plans) == (3, 2.5, 4)
    with anp.World(0) as world:                  # 0: the library's default, 4 ranks in the CPU world
        assert world.nranks == 4


def test_int_arguments_of_the_operations(seed):
    rng = np.random.default_rng(seed)
    a, b = small_ints(rng, (4, 8)), small_ints(rng, (8, 8))
    cases = [(dict(splits=2**32), ValueError, "ag_matmul: splits: splits=4294967296 does not fit the library's int"),
             (dict(splits=2**32 + 2, backend="ce"), ValueError, "ag_matmul: splits: splits=4294967298"),
             (dict(splits=True), TypeError, "ag_matmul: splits: bool"),
             (dict(splits=1.0), TypeError, "ag_matmul: splits: float")]

    def step(rank):
        for kwargs, exc, match in cases:
            with pytest.raises(exc, match=re.escape(match)):
                rank.ag_matmul(a, b, **kwargs)
        with pytest.raises(TypeError, match=re.escape("symm_empty: shape: bool")):
            rank.symm_empty((True, 4), np.float32)
        with pytest.raises(TypeError, match=re.escape("symm_empty: shape: float")):
            rank.symm_empty((2.0,), np.float32)
        with pytest.raises(ValueError, match=re.escape("symm_empty: shape: (-1,); want non-negative sizes")):
            rank.symm_empty(-1, np.float32)
        # Sizes past what can be addressed: refused before the collective allocation.
        for shape, dtype in (((2**62,), np.float32), ((2**31, 2**31), np.float32), ((2**32, 2**32), np.uint8)):
            with pytest.raises(ValueError, match=re.escape(f"symm_empty: shape: {shape} of {np.dtype(dtype)} is "
                                                           "18446744073709551616 bytes; an array holds at most")):
                rank.symm_empty(shape, dtype)
        for dtype, named in ((object, "object"), ("U4", "<U4"), ([("a", "i4")], "[('a', '<i4')]")):
            with pytest.raises(TypeError, match=re.escape(f"symm_empty: dtype: {named}; want a numeric dtype")):
                rank.symm_empty(4, dtype)
        with pytest.raises(TypeError, match="symm_empty: dtype: 'bogus' is not a numpy dtype"):
            rank.symm_empty(4, "bogus")
        s = rank.symm_empty((np.int64(2), np.uint8(4)), np.float32)     # numpy's integers are sizes too
        assert s.shape == (2, 4) and not s.any()
        rank.symm_free(s)
        out = (np.full((8, 8), POISON, np.uint16), np.full((8, 8), POISON, np.uint16))
        return rank.ag_matmul(a, b, splits=np.int64(2), backend="ce", out=out)[1].copy()

    with anp.World(2) as world:
        for c in world.run(step):
            np.testing.assert_array_equal(f64(c), f64(np.concatenate([a, a])) @ f64(b))


def test_ag_matmul_outputs_may_not_overlap(seed):
    rng = np.random.default_rng(seed)
    a, b = small_ints(rng, (4, 8)), small_ints(rng, (8, 8))

    def step(rank):
        buf = np.full((24, 8), POISON, np.uint16)
        shard = buf[:4]
        shard[:] = a
        cases = [((buf[8:16], buf[8:16]), "out[1] (c): overlaps out[0] (a_gathered)"),
                 ((b, buf[16:]), "out[0] (a_gathered): overlaps b"),
                 ((buf[8:16], b), "out[1] (c): overlaps b"),
                 ((buf[:8], buf[16:]), "out[0] (a_gathered): overlaps a_shard"),
                 ((buf[8:16], buf[:8]), "out[1] (c): overlaps a_shard")]
        for out, match in cases:
            with pytest.raises(ValueError, match=re.escape(f"ag_matmul: {match}; the outputs must not overlap")):
                rank.ag_matmul(shard, b, out=out)
        return rank.ag_matmul(shard, b, out=(buf[8:16], buf[16:]))[1].copy()     # side by side: fine

    with anp.World(2) as world:
        for c in world.run(step):
            np.testing.assert_array_equal(f64(c), f64(np.concatenate([a, a])) @ f64(b))


def test_eps_is_checked_before_the_ranks_compare_it(seed):
    rng = np.random.default_rng(seed)
    x, gamma = small_ints(rng, (2, 8)), small_ints(rng, 8)
    cases = [(float("nan"), ValueError, "all_reduce_rmsnorm: eps: eps=nan: must be > 0 and finite"),
             (float("inf"), ValueError, "all_reduce_rmsnorm: eps: eps=inf"),
             (1e-50, ValueError, "all_reduce_rmsnorm: eps: eps=1e-50"),     # 0 as fp32
             (1e39, ValueError, "all_reduce_rmsnorm: eps: eps=1e+39"),       # inf as fp32
             (-1.0, ValueError, "all_reduce_rmsnorm: eps: eps=-1"),
             (None, TypeError, "all_reduce_rmsnorm: eps: NoneType; want a float > 0"),
             ("1e-6", TypeError, "all_reduce_rmsnorm: eps: str"),
             (True, TypeError, "all_reduce_rmsnorm: eps: bool")]

    def step(rank):
        for eps, exc, match in cases:
            with pytest.raises(exc, match=re.escape(match)):
                rank.all_reduce_rmsnorm(x, gamma, eps=eps)
        return rank.all_reduce_rmsnorm(x, gamma, eps=np.float32(1e-5))[1].copy()

    with anp.World(2) as world:
        for residual_out in world.run(step):
            np.testing.assert_array_equal(f64(residual_out), 2 * f64(x))


# ---- messages -------------------------------------------------------------------------------------------

def test_disagreements_name_layouts_and_dtypes_and_one_name_per_operation(seed):
    rng = np.random.default_rng(seed)
    a, b = small_ints(rng, (4, 8)), small_ints(rng, (8, 8))
    with anp.World(2, timeout_s=2) as world:
        said = errors_of(world, lambda rank: rank.ag_matmul(a, b if rank.rank else np.ascontiguousarray(b.T).T))
        assert all("ag_matmul: the ranks disagree on layout of b (rank 0: column-major (b.T of a contiguous (N, K)), "
                   "rank 1: row-major (a contiguous (K, N)))" in str(e) for e in said), said
        said = errors_of(world, lambda rank: rank.all_reduce_(rng.standard_normal(8).astype(np.float32) if rank.rank
                                                              else small_ints(rng, 8)))
        assert all("all_reduce_: the ranks disagree on dtype (rank 0: bf16, rank 1: float32)" in str(e)
                   for e in said), said
        said = errors_of(world, lambda rank: rank.all_reduce_(np.empty(0, np.float32)))
        assert all(str(e).startswith("all_reduce_: x (its number of elements): n=0") for e in said), said
        said = errors_of(world, lambda rank: rank.matmul_reduce_scatter(a, b, backend=("ce", "fused")[rank.rank]))
        assert all(str(e).startswith("matmul_reduce_scatter: the ranks disagree on backend") for e in said), said

        # Rank 0 reuses its plan with its input moved into symmetric memory (the ranks compare
        # where it lies), rank 1 makes a new plan (the ranks compare plans): different steps.
        def different_calls(rank):
            x = rank.symm_empty(8, np.float32)
            x[:] = rng.standard_normal(8)
            rank.all_reduce_(x.copy())
            rank.all_reduce_(x if rank.rank == 0 else np.ones(16, np.float32))
        said = errors_of(world, different_calls)
        assert all(str(e).startswith("all_reduce_: the ranks are at different calls (rank 0: where all_reduce_'s x "
                                     "lies, rank 1: all_reduce); every rank") for e in said), said


def test_a_timeout_raised_by_the_package_has_status_name_and_detail(seed):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(8).astype(np.float32)

    def step(rank):
        if rank.rank == 1:
            return None                       # never comes to the ranks' check
        with pytest.raises(agmm.Timeout) as info:
            rank.all_reduce_(x.copy())
        return info.value

    with anp.World(2, timeout_s=0.5) as world:
        e = world.run(step)[0]
    assert str(e).startswith("all_reduce_: rank 0: the ranks' check that they make the same call failed: not every "
                             "rank reached it within 0.5 s"), str(e)
    assert e.status == _lib.TIMEOUT and e.status_name == _lib.status_str(_lib.TIMEOUT) and e.status_name
    assert e.detail and e.detail in str(e)


def test_world_errors_name_the_argument_or_none():
    namer = anp._world_arg_namer({"rank": "rank", "nranks": "nranks", "id": "unique_id"})
    assert namer("torchrun (RANK=0, WORLD_SIZE=1): nothing names this job, so ...") is None
    assert namer("rank=0, nranks=2: nothing names this job") is None
    assert namer("nranks=-1: must be 1..64") == "nranks"
    assert namer("id: not an id from agmm_unique_id_create") == "unique_id"
    assert namer("WORLD_SIZE=x (set by torchrun?): must be a world size") is None
    # The launcher's variables and nothing naming the job: the library's message, whole.
    launcher = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "AGMM_JOB_ID",
                "NCCL_COMM_ID", "MPICH", "OMPI_", "PMI_", "PMIX_", "MPI_", "SLURM_", "TORCHELASTIC_")
    env = {k: v for k, v in os.environ.items() if not k.startswith(launcher)}
    env.update(RANK="0", WORLD_SIZE="1", PYTHONPATH=os.path.dirname(os.path.dirname(agmm.__file__)))
    code = "import agmm.numpy as anp\ntry:\n    anp.join(timeout_s=2)\nexcept ValueError as e:\n    print(e)\n"
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)
    assert out.stdout.startswith("join: torchrun (RANK=0, WORLD_SIZE=1): "), out.stdout + out.stderr


def test_an_error_building_a_rank_is_raised_by_run(monkeypatch, capfd):
    """rank_main runs as a ctypes callback: what it raises must come back through World.run, not
    end as ctypes' "Exception ignored on calling ctypes callback function"."""
    def broken(*args, **kwargs):
        raise MemoryError("no room for this rank")
    monkeypatch.setattr(anp, "Context", broken)
    with anp.World(2) as world:
        with pytest.raises(MemoryError, match="no room for this rank"):
            world.run(lambda rank: None)
    assert "Exception ignored" not in capfd.readouterr().err


def test_ctrl_c_during_run_keeps_what_the_ranks_raised():
    """SIGINT while the main thread waits in agmm_world_run: KeyboardInterrupt comes once every rank
    has returned (here rank 0 times out waiting for rank 1), with rank 0's Timeout as its context."""
    code = textwrap.dedent("""
        import signal, sys
        signal.signal(signal.SIGINT, signal.default_int_handler)
        import numpy as np, agmm.numpy as anp
        world = anp.World(2, timeout_s=2)
        def step(rank):
            rank.all_reduce_(np.ones(8, np.float32) + rank.rank)
            if rank.rank == 0:
                print("waiting", flush=True)
                rank.all_reduce_(np.ones(8, np.float32))     # rank 1 never comes
        try:
            world.run(step)
        except KeyboardInterrupt as e:
            print("interrupted; context:", type(e.__context__).__name__, e.__context__, flush=True)
    """)
    env = dict(os.environ, PYTHONPATH=os.path.dirname(os.path.dirname(agmm.__file__)))
    p = subprocess.Popen([sys.executable, "-c", code], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                         text=True)
    try:
        assert p.stdout.readline().strip() == "waiting"
        p.send_signal(signal.SIGINT)
        out = p.communicate(timeout=60)[0]
    finally:
        p.kill()
    assert "interrupted; context: Timeout all_reduce_: timed out waiting for a peer" in out, out


def test_python_m_agmm_uses_the_right_article():
    from agmm.__main__ import _a
    assert [f"{_a(kind)} {kind} world" for kind in ("cpu", "gpu", "emulated", "auto")] == \
        ["a cpu world", "a gpu world", "an emulated world", "an auto world"]
