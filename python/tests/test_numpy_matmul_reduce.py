"""The row-parallel matmuls at the numpy level on the CPU world (ranks as threads): every backend on
odd shapes, exact on small integers; on uniform values every backend's bits equal (the CPU world's
backends share one GEMM and add the partials in rank order) and within 1e-2 of fp64; the row
split; errors naming the argument."""
import numpy as np
import pytest

import agmm
import agmm.numpy as anp

POISON = 0x7FC1
OPS = ("matmul_reduce_scatter", "matmul_all_reduce")


def small_ints(rng, shape, bound):
    return anp.to_bf16(rng.integers(-bound, bound + 1, size=shape).astype(np.float32))


def col_major(b):
    """The same K x N values stored as b.T of a contiguous N x K (the seed's layout)."""
    return np.ascontiguousarray(b.T).T


def exact_sum(a_list, b_list):
    return sum(anp.from_bf16(a).astype(np.float64) @ anp.from_bf16(b).astype(np.float64) for a, b in zip(a_list, b_list))


def expected(op, s, m, nranks, rank):
    if op == "matmul_all_reduce":
        return s
    first, rows = anp.reduce_scatter_rows(m, nranks, rank)
    return s[first:first + rows]


# M < W, M not divisible by W, one row; odd N with the seed's layout, N % 8 == 0 row-major; K odd
# multiples of 8. |a|, |b| <= 2 with K <= 64 (1 beyond) keep each partial <= 256: exact in bf16.
SHAPES = [(1, 8, 8, "row"), (2, 33, 16, "col"), (7, 5, 72, "col"), (130, 24, 40, "row")]


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("nranks", [1, 2, 3, 4])
def test_every_backend_odd_shapes_exact(op, nranks, seed):
    rng = np.random.default_rng(seed)
    cases = []
    for m, n, k, layout in SHAPES:
        bound = 2 if k <= 64 else 1
        a = [small_ints(rng, (m, k), bound) for _ in range(nranks)]
        b = [small_ints(rng, (k, n), bound) for _ in range(nranks)]
        cases.append((a, [col_major(x) if layout == "col" else x for x in b], exact_sum(a, b)))

    def step(rank):
        out = []
        for backend in agmm.backends(op):
            for i, (a, b, _) in enumerate(cases):
                fn = getattr(rank, op)
                m, n = a[0].shape[0], b[0].shape[1]
                rows = anp.reduce_scatter_rows(m, rank.nranks, rank.rank)[1] if op == "matmul_reduce_scatter" else m
                # Every other case writes into the caller's poisoned array, the rest allocate.
                given = np.full((rows, n), POISON, np.uint16) if i % 2 else None
                out.append((backend, i, fn(a[rank.rank], b[rank.rank], backend=backend, out=given).copy()))
        return out

    with anp.World(nranks) as world:
        results = world.run(step)
    for rank, outs in enumerate(results):
        for backend, i, got in outs:
            a, b, s = cases[i]
            want = expected(op, s, a[0].shape[0], nranks, rank)
            assert got.shape == want.shape, (backend, i, got.shape, want.shape)
            np.testing.assert_array_equal(anp.from_bf16(got).astype(np.float64),
                                          anp.from_bf16(anp.to_bf16(want)).astype(np.float64),
                                          err_msg=f"{op}/{backend} rank {rank} W={nranks} case {i}")


@pytest.mark.parametrize("op", OPS)
def test_uniform_values_every_backend_same_bits(op, seed):
    rng = np.random.default_rng(seed)
    m, n, k, w = 37, 72, 136, 3
    a = [anp.to_bf16(rng.standard_normal((m, k))) for _ in range(w)]
    b = [anp.to_bf16(rng.standard_normal((k, n))) for _ in range(w)]
    s = exact_sum(a, b)

    def step(rank):
        return [getattr(rank, op)(a[rank.rank], b[rank.rank], backend=x).copy() for x in agmm.backends(op)]

    with anp.World(w) as world:
        results = world.run(step)
    for rank, outs in enumerate(results):
        want = expected(op, s, m, w, rank)
        for backend, got in zip(agmm.backends(op), outs):
            np.testing.assert_array_equal(got, outs[0], err_msg=f"{op}/{backend} rank {rank}: bits differ from "
                                                                f"{agmm.backends(op)[0]}'s")
            err = np.linalg.norm(anp.from_bf16(got) - want) / np.linalg.norm(want)
            assert 0 < err <= 1e-2, f"{op}/{backend} rank {rank}: relative Frobenius error {err:.3e}"
        if op == "matmul_all_reduce":
            np.testing.assert_array_equal(outs[0], results[0][0], err_msg=f"rank {rank}'s S differs from rank 0's")


def test_row_split():
    assert [anp.reduce_scatter_rows(5, 4, r) for r in range(4)] == [(0, 2), (2, 2), (4, 1), (5, 0)]
    assert [anp.reduce_scatter_rows(3, 8, r)[1] for r in range(8)] == [1, 1, 1, 0, 0, 0, 0, 0]
    assert anp.reduce_scatter_rows(8192, 8, 7) == (7168, 1024)
    with pytest.raises(ValueError, match="rank=4"):
        anp.reduce_scatter_rows(8, 4, 4)


def test_row_split_arguments_are_checked_before_c():
    """ctypes would keep the low 32 bits of nranks (2**32 + 2 -> 2) and refuse a float with its own
    ArgumentError; each is an error naming the function and the argument."""
    cases = [((10, 2**32 + 2, 1), ValueError, r"reduce_scatter_rows: nranks: nranks=4294967298 does not fit"),
             ((10, 2, 2**32), ValueError, r"reduce_scatter_rows: rank: rank=4294967296 does not fit"),
             ((2**64, 2, 1), ValueError, r"reduce_scatter_rows: M: M=18446744073709551616 does not fit"),
             ((10.5, 2, 1), TypeError, r"reduce_scatter_rows: M: float; want an int"),
             ((10, True, 0), TypeError, r"reduce_scatter_rows: nranks: bool"),
             ((0, 2, 0), ValueError, r"reduce_scatter_rows: M: M=0"),
             ((2**41, 2, 0), ValueError, r"reduce_scatter_rows: M: M=2199023255552"),
             ((10, 65, 0), ValueError, r"reduce_scatter_rows: nranks: nranks=65"),
             ((10, 2, -1), ValueError, r"reduce_scatter_rows: rank: rank=-1")]
    for args, exc, match in cases:
        with pytest.raises(exc, match=match):
            anp.reduce_scatter_rows(*args)
    assert anp.reduce_scatter_rows(np.int64(10), np.int32(4), np.uint8(3)) == (9, 1)


def test_errors_name_the_argument():
    a, b = np.zeros((8, 12), np.uint16), np.zeros((12, 8), np.uint16)

    def step(rank):
        msgs = []
        for call in (lambda: rank.matmul_reduce_scatter(a, b),
                     lambda: rank.matmul_all_reduce(np.zeros((8, 16), np.float32), np.zeros((16, 8), np.float32)),
                     lambda: rank.matmul_all_reduce(np.zeros((8, 16), np.uint16), np.zeros((16, 8), np.uint16),
                                                    out=np.zeros((4, 8), np.uint16)),
                     lambda: rank.matmul_reduce_scatter(np.zeros((8, 16), np.uint16), np.zeros((16, 8), np.uint16),
                                                        backend="two_shot"),
                     lambda: rank.matmul_reduce_scatter(np.zeros((8, 16), np.uint16), np.zeros((16, 8), np.uint16),
                                                        out=np.zeros((4, 8), np.float32)),
                     lambda: rank.matmul_all_reduce(np.zeros((8, 16), np.uint16), np.zeros((16, 8), np.uint16),
                                                    out=np.zeros((8, 8), np.float32)),
                     lambda: rank.matmul_reduce_scatter(np.zeros((0, 16), np.uint16), np.zeros((16, 8), np.uint16))):
            try:
                call()
                msgs.append("no error")
            except (TypeError, ValueError) as e:
                msgs.append(f"{type(e).__name__}: {e}")
        return msgs

    with anp.World(2) as world:
        msgs = world.run(step)[0]
    assert msgs[0].startswith("ValueError: matmul_reduce_scatter: a and b (K): K=12 is not a positive multiple of 8"), msgs[0]
    assert msgs[1].startswith("TypeError: matmul_all_reduce: a: dtype float32"), msgs[1]
    assert msgs[2].startswith("ValueError: matmul_all_reduce: out: shape (4, 8); want (8, 8)"), msgs[2]
    assert "backend: backend=two_shot: matmul_reduce_scatter takes auto, nccl, ce, one_shot or fused" in msgs[3], msgs[3]
    # A wrong dtype is a TypeError, as everywhere (ag_matmul's out too).
    assert msgs[4].startswith("TypeError: matmul_reduce_scatter: out: dtype float32; want uint16"), msgs[4]
    assert msgs[5].startswith("TypeError: matmul_all_reduce: out: dtype float32; want uint16"), msgs[5]
    # M = 0 is the operation's error about a, not the row split's.
    assert msgs[6].startswith("ValueError: matmul_reduce_scatter: a: shape (0, 16); want M >= 1 rows"), msgs[6]
