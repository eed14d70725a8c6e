"""agmm.numpy's all_reduce_rmsnorm on the CPU world (ranks as threads): every backend, T not
divisible by W, with and without bias and residual, the residual updated in place, x in symmetric
memory; r' exact and y within one bf16 rounding of float64; one_shot and two_shot bit for bit
alike on every rank; errors naming the argument."""
import numpy as np
import pytest

import agmm
import agmm.numpy as anp

POISON = 0x7FC1


def small_ints(rng, shape, bound):
    return anp.to_bf16(rng.integers(-bound, bound + 1, size=shape).astype(np.float32))


def reference(xs, gamma, bias, residual, eps):
    """(r' as bf16 bits, y in float64): the sum in float64 (exact here), rounded once, normalised."""
    r = np.sum([anp.from_bf16(x).astype(np.float64) for x in xs], axis=0)
    if bias is not None:
        r += anp.from_bf16(bias)
    if residual is not None:
        r += anp.from_bf16(residual)
    r16 = anp.to_bf16(r.astype(np.float32))           # exact sums: one rounding, none here
    q = anp.from_bf16(r16).astype(np.float64)
    rstd = 1.0 / np.sqrt((q * q).mean(axis=-1, keepdims=True) + np.float32(eps))
    return r16, q * rstd * anp.from_bf16(gamma)


# (T, H, bias, residual, in place): T = 1, < W, not divisible by W (W = 3).
CASES = [(1, 264, True, True, False), (2, 8, False, True, False), (7, 1032, True, False, False),
         (4, 264, False, False, False), (5, 72, True, True, True)]


@pytest.mark.parametrize("backend", agmm.backends("all_reduce_rmsnorm"))
def test_every_backend_exact(backend, seed):
    rng = np.random.default_rng(seed)
    w, eps = 3, 1e-5
    data = []
    for t, h, has_bias, has_res, in_place in CASES:
        xs = [small_ints(rng, (t, h), 4) for _ in range(w)]
        gamma = small_ints(rng, (h,), 2)
        bias = small_ints(rng, (h,), 4) if has_bias else None
        residual = small_ints(rng, (t, h), 4) if has_res else None
        data.append((xs, gamma, bias, residual, in_place))

    def step(rank):
        out = []
        for i, (xs, gamma, bias, residual, in_place) in enumerate(data):
            res = None if residual is None else residual.copy()
            y = np.full(xs[0].shape, POISON, np.uint16)
            r = res if in_place else np.full(xs[0].shape, POISON, np.uint16)
            x = xs[rank.rank]
            if i % 2:   # every other case reads x where it lies, in symmetric memory
                x = rank.symm_empty(x.shape, np.uint16)
                x[:] = xs[rank.rank]
            got_y, got_r = rank.all_reduce_rmsnorm(x, gamma, bias=bias, residual=res, eps=eps, backend=backend,
                                                   out=(y, r))
            assert got_y is y and got_r is r
            out.append((y.copy(), r.copy()))
            if i % 2:
                rank.symm_free(x)
        return out

    with anp.World(w) as world:
        results = world.run(step)
    for i, (xs, gamma, bias, residual, _) in enumerate(data):
        r16, y64 = reference(xs, gamma, bias, residual, eps)
        for rank, out in enumerate(results):
            y, r = out[i]
            np.testing.assert_array_equal(r, r16, err_msg=f"r' rank {rank} case {i} {backend}")
            got = anp.from_bf16(y).astype(np.float64)
            assert np.all(np.abs(got - y64) <= np.abs(y64) * 2.0 ** -8 * (1 + 2.0 ** -10)), \
                f"y more than one bf16 rounding from float64: rank {rank} case {i} {backend}"
            np.testing.assert_array_equal(y, results[0][i][0], err_msg=f"ranks differ: case {i} {backend}")


def test_fused_backends_bitwise_alike_on_uniform_data(seed):
    rng = np.random.default_rng(seed)
    w, t, h = 4, 9, 2056
    xs = [anp.to_bf16(rng.standard_normal((t, h)).astype(np.float32)) for _ in range(w)]
    gamma = anp.to_bf16(rng.standard_normal(h).astype(np.float32))
    bias = anp.to_bf16(rng.standard_normal(h).astype(np.float32))
    residual = anp.to_bf16(rng.standard_normal((t, h)).astype(np.float32))

    def step(rank):
        return {b: tuple(a.copy() for a in rank.all_reduce_rmsnorm(xs[rank.rank], gamma, bias=bias,
                                                                     residual=residual, backend=b))
                for b in ("one_shot", "two_shot", "nccl")}

    with anp.World(w) as world:
        results = world.run(step)
    r16, y64 = reference(xs, gamma, bias, residual, 1e-6)
    for rank, out in enumerate(results):
        for part in (0, 1):
            np.testing.assert_array_equal(out["one_shot"][part], out["two_shot"][part])
            np.testing.assert_array_equal(out["one_shot"][part], results[0]["one_shot"][part])
        y = anp.from_bf16(out["nccl"][0]).astype(np.float64)
        assert np.linalg.norm(y - y64) <= 1e-2 * np.linalg.norm(y64), "nccl's y within 1e-2 of float64"


def test_errors_name_the_argument():
    def step(rank):
        x = anp.to_bf16(np.ones((2, 100), np.float32))
        with pytest.raises(ValueError, match=r"x \(its last dimension\).*hidden=100 is not a multiple of 8"):
            rank.all_reduce_rmsnorm(x, anp.to_bf16(np.ones(100, np.float32)), backend="one_shot")
        x = anp.to_bf16(np.ones((2, 64), np.float32))
        with pytest.raises(ValueError, match=r"gamma: shape \(63,\)"):
            rank.all_reduce_rmsnorm(x, anp.to_bf16(np.ones(63, np.float32)))
        with pytest.raises(ValueError, match=r"eps.*eps=0: must be > 0"):
            rank.all_reduce_rmsnorm(x, anp.to_bf16(np.ones(64, np.float32)), eps=0.0, backend="nccl")
        with pytest.raises(TypeError, match="x: dtype float32"):
            rank.all_reduce_rmsnorm(np.ones((2, 64), np.float32), anp.to_bf16(np.ones(64, np.float32)))
        with pytest.raises(ValueError, match="backend=ce"):
            rank.all_reduce_rmsnorm(x, anp.to_bf16(np.ones(64, np.float32)), backend="ce")
        return True

    with anp.World(2) as world:
        assert world.run(step) == [True, True]
