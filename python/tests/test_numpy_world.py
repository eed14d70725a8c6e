"""The numpy level on the CPU world (ranks as threads): every backend on odd shapes, exact; in place
and symmetric inputs; outputs poisoned first; errors as exceptions naming the argument; the plan
cache's bound; bounded waits."""
import re
import time

import numpy as np
import pytest

import agmm
import agmm.numpy as anp

POISON = 0x7FC1                  # a bf16 NaN that no result can equal


def small_ints(rng, shape, bound=1):
    """bf16 bits of integers in [-bound, bound]: every product and sum below stays exact."""
    return anp.to_bf16(rng.integers(-bound, bound + 1, size=shape).astype(np.float32))


def reference(shards, b):
    """(gathered A, A @ B) in float64 from bf16 bits."""
    a = np.concatenate(shards)
    return a, anp.from_bf16(a).astype(np.float64) @ anp.from_bf16(b).astype(np.float64)


def b_in_layout(b, layout):
    """The same K x N values, stored row-major or as the seed's b.T of a contiguous N x K."""
    return np.ascontiguousarray(b) if layout == "row" else np.ascontiguousarray(b.T).T


# M = 1, 7, 129 rows per rank; a row-major B needs N % 8 == 0, a column-major one does not.
SHAPES = [(m, n, k, layout) for m in (1, 7, 129) for k in (8, 72)
          for n, layout in ((8, "row"), (264, "row"), (3, "col"), (8, "col"))]


@pytest.mark.parametrize("nranks", [1, 2, 3, 4])
@pytest.mark.parametrize("backend", agmm.backends("ag_matmul"))
def test_ag_matmul_every_backend_odd_shapes_exact(backend, nranks, seed):
    rng = np.random.default_rng(seed)
    cases = []
    for m, n, k, layout in SHAPES:
        shards = [small_ints(rng, (m, k)) for _ in range(nranks)]
        b = small_ints(rng, (k, n))
        cases.append((shards, b_in_layout(b, layout), reference(shards, b)))

    def step(rank):
        out = []
        for i, (shards, b, _) in enumerate(cases):
            rows = nranks * shards[0].shape[0]
            poisoned = (np.full((rows, shards[0].shape[1]), POISON, np.uint16),
                        np.full((rows, b.shape[1]), POISON, np.uint16))
            # Every other case writes into the caller's (poisoned) arrays, the rest allocate.
            a_gathered, c = rank.ag_matmul(shards[rank.rank], b, backend=backend, out=poisoned if i % 2 else None)
            out.append((a_gathered.copy(), c.copy()))
        return out, rank.plans()

    with anp.World(nranks) as world:
        results = world.run(step)
    for rank, (outs, plans) in enumerate(results):
        assert all(b == backend for _, b in plans), plans
        for (shards, b, (a_ref, c_ref)), (a_gathered, c) in zip(cases, outs):
            what = f"rank {rank} W={nranks} M={shards[0].shape[0]} N={b.shape[1]} K={b.shape[0]}"
            np.testing.assert_array_equal(a_gathered, a_ref, err_msg=what)
            np.testing.assert_array_equal(anp.from_bf16(c).astype(np.float64), c_ref, err_msg=what)


@pytest.mark.parametrize("backend", agmm.backends("ag_matmul"))
def test_ag_matmul_random_values_against_fp64(backend, seed):
    rng = np.random.default_rng(seed)
    m, n, k, w = 96, 136, 264, 3
    shards = [anp.to_bf16(rng.standard_normal((m, k))) for _ in range(w)]
    b = anp.to_bf16(rng.standard_normal((k, n)))
    _, c_ref = reference(shards, b)
    with anp.World(w) as world:
        cs = world.run(lambda rank: rank.ag_matmul(shards[rank.rank], b_in_layout(b, "col"), backend=backend)[1])
    for c in cs:
        err = np.linalg.norm(anp.from_bf16(c) - c_ref) / np.linalg.norm(c_ref)
        assert err <= 1e-2, f"{backend}: relative Frobenius error {err:.3e}"
        assert err > 0, "bf16 output rounding leaves some error: an exact match means C was not computed in bf16"


@pytest.mark.parametrize("backend", agmm.backends("ag_matmul"))
def test_symmetric_shard_is_read_in_place(backend, seed):
    """A shard written into symm_empty memory is passed as io.input: no copy into the plan."""
    rng = np.random.default_rng(seed)
    m, n, k, w = 7, 16, 24, 3
    shards = [small_ints(rng, (m, k)) for _ in range(w)]
    b = small_ints(rng, (k, n))
    a_ref, c_ref = reference(shards, b)

    def step(rank):
        s = rank.symm_empty((m, k), np.uint16)
        assert not s.any(), "symmetric memory comes zeroed"
        s[:] = shards[rank.rank]
        before = rank.stats["bytes_copied_in"]
        a1, c1 = rank.ag_matmul(s, b, backend=backend)
        in_place = rank.stats["bytes_copied_in"] - before
        plain = shards[rank.rank].copy()
        a2, c2 = rank.ag_matmul(plain, b, backend=backend)
        copied = rank.stats["bytes_copied_in"] - before - in_place
        return a1, c1, a2, c2, in_place, copied

    with anp.World(w) as world:
        for a1, c1, a2, c2, in_place, copied in world.run(step):
            assert in_place == 0
            assert copied == m * k * 2
            for a, c in ((a1, c1), (a2, c2)):
                np.testing.assert_array_equal(a, a_ref)
                np.testing.assert_array_equal(anp.from_bf16(c), c_ref)


@pytest.mark.parametrize("backend", agmm.backends("all_reduce"))
@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
def test_all_reduce_every_backend_in_place_exact(backend, dtype, seed):
    rng = np.random.default_rng(seed)
    w = 3
    sizes = (1, 7, 4093, 16387)
    vectors = {n: [rng.integers(-2, 3, size=n).astype(np.float32) for _ in range(w)] for n in sizes}
    encode = (lambda v: v.copy()) if dtype == "fp32" else anp.to_bf16
    decode = (lambda v: v) if dtype == "fp32" else anp.from_bf16

    def step(rank):
        out = {}
        for n in sizes:
            x = encode(vectors[n][rank.rank])
            returned = rank.all_reduce_(x, backend=backend)
            assert returned is x
            s = rank.symm_empty(n, x.dtype)
            s[:] = encode(vectors[n][rank.rank])
            before = rank.stats["copies_in"]
            rank.all_reduce_(s, backend=backend)
            assert rank.stats["copies_in"] == before, "a symmetric vector is reduced where it lies"
            out[n] = (decode(x).copy(), decode(s).copy())
            rank.symm_free(s)
        return out

    with anp.World(w) as world:
        why = world.backends("all_reduce")[backend]
        if why:
            # A backend this world cannot run says so, as agmm.Unsupported with the library's reason.
            with pytest.raises(agmm.Unsupported, match=f"skipped: all_reduce/{backend} .*CPU world"):
                world.run(step)
            return
        for rank, out in enumerate(world.run(step)):
            for n in sizes:
                want = np.sum(vectors[n], axis=0)
                for got in out[n]:
                    np.testing.assert_array_equal(got, want, err_msg=f"rank {rank} n={n} {backend} {dtype}")


def test_plan_cache_is_bounded_least_recently_used_first(seed):
    rng = np.random.default_rng(seed)
    k, n = 8, 8
    ms = (1, 2, 3, 4, 5)
    b = small_ints(rng, (k, n))
    shards = {m: [small_ints(rng, (m, k)) for _ in range(2)] for m in ms}

    def step(rank):
        def run(m):
            a, c = rank.ag_matmul(shards[m][rank.rank], b, backend="ce")
            np.testing.assert_array_equal(anp.from_bf16(c), reference(shards[m], b)[1])
        for m in (1, 2, 3):
            run(m)
        run(1)                  # 1 is now the most recently used: 2 goes first
        run(4)
        run(5)
        kept = [key[1] for key, _ in rank.plans()]
        stats = rank.stats
        run(2)                  # evicted earlier: planned again, still right
        return kept, stats, rank.stats

    with anp.World(2, max_plans=3) as world:
        for kept, stats, later in world.run(step):
            assert kept == [1, 4, 5]
            assert stats["plans_created"] == 5 and stats["plans_evicted"] == 2
            assert later["plans_created"] == 6 and later["plans_evicted"] == 3


# ---- errors: exceptions naming the argument, on every rank alike ------------------------------------

def raises_on_every_rank(nranks, fn, exc, match):
    """Every rank raises `exc` matching `match` (none of them a consequence of a peer's error)."""
    def catching(rank):
        try:
            fn(rank)
        except Exception as e:      # returned, to be checked rank by rank below
            return e
        return None

    with anp.World(nranks, timeout_s=2) as world:
        errors = world.run(catching)
    for rank, e in enumerate(errors):
        assert isinstance(e, exc), f"rank {rank}: {e!r}, want {exc.__name__}"
        assert re.search(match, str(e)), f"rank {rank}: {str(e)!r} does not match {match!r}"


def test_wrong_dtype_names_the_argument():
    a = np.zeros((4, 8), np.float32)
    b = np.zeros((8, 8), np.uint16)
    raises_on_every_rank(2, lambda r: r.ag_matmul(a, b), TypeError, "a_shard: dtype float32")
    raises_on_every_rank(2, lambda r: r.ag_matmul(b[:4], a.astype(np.float16).T.copy()), TypeError, "b: dtype")
    raises_on_every_rank(2, lambda r: r.all_reduce_(np.zeros(4, np.int32)), TypeError, "x: dtype int32")
    raises_on_every_rank(2, lambda r: r.ag_matmul([[0]], b), TypeError, "a_shard: list")


def test_bad_shapes_and_layouts_name_the_argument():
    a = np.zeros((4, 8), np.uint16)
    raises_on_every_rank(2, lambda r: r.ag_matmul(a, np.zeros((16, 8), np.uint16)), ValueError,
                         r"b: shape \(16, 8\); want \(K, N\) with K = 8")
    raises_on_every_rank(2, lambda r: r.ag_matmul(np.zeros((4, 16), np.uint16)[:, ::2], np.zeros((8, 8), np.uint16)),
                         ValueError, "a_shard: not contiguous")
    strided_b = np.zeros((8, 16), np.uint16)[:, ::2]
    raises_on_every_rank(2, lambda r: r.ag_matmul(a, strided_b), ValueError, "b: strides .* neither")
    # The library's own checks, with the caller's argument named in front.
    raises_on_every_rank(2, lambda r: r.ag_matmul(np.zeros((4, 12), np.uint16), np.zeros((12, 8), np.uint16)),
                         ValueError, r"a_shard and b \(K\): K=12 is not a multiple of 8")
    raises_on_every_rank(2, lambda r: r.ag_matmul(a, np.zeros((8, 12), np.uint16)), ValueError,
                         "b: N=12 is not a multiple of 8")
    raises_on_every_rank(2, lambda r: r.ag_matmul(a, np.zeros((8, 8), np.uint16), splits=9), ValueError,
                         "splits: splits=9")
    out = (np.zeros((8, 8), np.uint16), np.zeros((8, 9), np.uint16))
    raises_on_every_rank(2, lambda r: r.ag_matmul(a, np.zeros((8, 8), np.uint16), out=out), ValueError,
                         r"out\[1\] \(c\): shape \(8, 9\); want \(8, 8\)")


def test_unknown_backend_lists_the_choices():
    a, b = np.zeros((4, 8), np.uint16), np.zeros((8, 8), np.uint16)
    raises_on_every_rank(2, lambda r: r.ag_matmul(a, b, backend="nope"), ValueError,
                         "ag_matmul: backend: backend=nope: ag_matmul takes auto, " +
                         ".*".join(agmm.backends("ag_matmul")))
    raises_on_every_rank(2, lambda r: r.ag_matmul(a, b, backend=3), TypeError, "backend: int")
    with pytest.raises(ValueError, match="backend='nope'"):
        agmm.backend_summary("ag_matmul", "nope")


def test_ranks_that_disagree_get_a_value_error_naming_the_field():
    b = np.zeros((8, 8), np.uint16)
    raises_on_every_rank(3, lambda r: r.ag_matmul(np.zeros((4 + (r.rank == 2), 8), np.uint16), b), ValueError,
                         r"disagree on M \(rows of a_shard\) \(rank 0: 4, rank 1: 4, rank 2: 5\)")
    raises_on_every_rank(2, lambda r: r.all_reduce_(np.zeros(5 + r.rank, np.float32)), ValueError,
                         "disagree on number of elements")
    raises_on_every_rank(2, lambda r: r.ag_matmul(np.zeros((4, 8), np.uint16), b,
                                                  backend=("ce", "fused")[r.rank]), ValueError, "disagree on backend")


def test_world_config_errors():
    with pytest.raises(ValueError, match="World: nranks: nranks=65: must be 0 .automatic. or 1..64"):
        anp.World(65)
    with pytest.raises(TypeError, match="World: nranks: float"):
        anp.World(2.0)


def test_symm_free_checks_what_it_frees():
    def step(rank):
        s = rank.symm_empty((4, 4), np.float32)
        with pytest.raises(ValueError, match="symm_free: not memory that symm_empty returned"):
            rank.symm_free(s[1:])
        rank.symm_free(s)
        with pytest.raises(ValueError, match="already freed"):
            rank.symm_free(s)
        with pytest.raises(ValueError, match="symm_empty: shape"):
            rank.symm_empty((0, 4), np.float32)
        return True
    with anp.World(2) as world:
        assert world.run(step) == [True, True]


def test_an_exception_on_one_rank_is_raised_with_its_rank():
    class Boom(Exception):
        pass

    def step(rank):
        if rank.rank == 1:
            raise Boom("rank 1 gave up")
        rank.all_reduce_(np.zeros(8, np.float32))     # its peer never comes: bounded by the timeout
    t0 = time.monotonic()
    with anp.World(2, timeout_s=1) as world:
        with pytest.raises(Boom, match="rank 1 gave up"):
            world.run(step)
    assert time.monotonic() - t0 < 10


def test_a_peer_that_never_runs_is_a_timeout_not_a_hang():
    """Both ranks plan alike; rank 1 then never runs. Rank 0's run waits for it inside the library
    and fails with agmm.Timeout within the world's timeout (rank 1 stays away until then)."""
    timeout_s = 1.0

    def step(rank):
        a, b = np.zeros((4, 8), np.uint16), np.zeros((8, 8), np.uint16)
        rank.ag_matmul(a, b, backend="ce")
        if rank.rank == 1:
            time.sleep(3 * timeout_s)
            return None
        t0 = time.monotonic()
        with pytest.raises(agmm.Timeout) as info:
            rank.ag_matmul(a, b, backend="ce")
        return time.monotonic() - t0, info.value.status_name

    with anp.World(2, timeout_s=timeout_s) as world:
        waited, status = world.run(step)[0]
    assert status and waited < timeout_s + 1.5, (waited, status)


def test_bf16_helpers_round_to_nearest_even():
    x = np.array([1.0, 1.00390625, 1.01171875, -2.5, np.inf, np.nan], np.float32)
    bits = anp.to_bf16(x)
    # 1 + 2^-8 is a tie: rounds to even (1.0); 1 + 3*2^-8 is a tie: rounds up to 1 + 2^-6.
    assert list(bits[:5]) == [0x3F80, 0x3F80, 0x3F82, 0xC020, 0x7F80]
    assert np.isnan(anp.from_bf16(bits)[5])
    np.testing.assert_array_equal(anp.from_bf16(bits[:4]), [1.0, 1.0, 1.015625, -2.5])
