"""agmm.numpy's bf16 helpers: to_bf16 rounds each float64 once to the nearest bf16 (ties to even),
checked against an exact reference computed here with integer arithmetic on the float64's bits
(no float32 in between, no ml_dtypes); from_bf16 takes bf16 bits only."""
import numpy as np
import pytest

import agmm.numpy as anp


def exact_bf16(x):
    """The bf16 bits nearest to each float64 of x, ties to even: x = sig * 2^(e - 52) is rounded to
    a multiple of bf16's spacing at |x|, 2^(max(e, -126) - 7), in integers."""
    x = np.asarray(x, np.float64).ravel()
    bits = x.view(np.uint64)
    sign = ((bits >> np.uint64(63)).astype(np.uint16) << np.uint16(15)).astype(np.uint16)
    biased = ((bits >> np.uint64(52)) & np.uint64(0x7FF)).astype(np.int64)
    frac = (bits & np.uint64((1 << 52) - 1)).astype(np.int64)
    sig = np.where(biased > 0, frac | (1 << 52), frac)          # < 2^53
    e = np.where(biased > 0, biased - 1023, -1022)
    q = np.maximum(e, -126) - 7                                   # log2 of bf16's spacing at |x|
    shift = np.minimum(q - (e - 52), 62)                         # >= 45; past 55 everything rounds to 0
    kept = sig >> shift
    rest = sig & ((np.int64(1) << shift) - 1)
    half = np.int64(1) << (shift - 1)
    kept = kept + ((rest > half) | ((rest == half) & (kept & 1 == 1)))
    with np.errstate(over="ignore"):
        value = np.ldexp(kept.astype(np.float64), q).astype(np.float32)   # a bf16 value (exact), or inf
    out = (value.view(np.uint32) >> np.uint32(16)).astype(np.uint16) | sign
    out = np.where(np.isinf(x), sign | np.uint16(0x7F80), out)
    return np.where(np.isnan(x), np.uint16(0x7FC0), out).astype(np.uint16)


def test_the_reference_itself():
    # Values whose bf16 is known by hand: 1 + 2^-8 is a tie (to even: 1.0), 1 + 3 * 2^-8 a tie
    # (to even: 1 + 2^-6), 2^-134 half the smallest subnormal (to even: 0), just above it rounds up.
    x = [1.0, 1 + 2.0**-8, 1 + 3 * 2.0**-8, 1 + 2.0**-8 + 2.0**-40, -2.5, 2.0**-134, 2.0**-134 * (1 + 2.0**-40),
         3.3895313892515355e38, 3.3961775292304770e38, np.inf, -0.0]
    want = [0x3F80, 0x3F80, 0x3F82, 0x3F81, 0xC020, 0x0000, 0x0001, 0x7F7F, 0x7F80, 0x7F80, 0x8000]
    assert [int(v) for v in exact_bf16(x)] == want


def random_cases(rng, n):
    """float64s over the whole range, in bf16's range, and at and beside every kind of tie."""
    anywhere = rng.integers(0, 2**64, size=n, dtype=np.uint64).view(np.float64)
    in_range = rng.standard_normal(n) * np.exp2(rng.integers(-140, 129, size=n).astype(np.float64))
    # Ties between a random bf16 value and the next one up, and values beside them: the ones a
    # rounding through float32 gets wrong (float32 rounds tie + 2^-30 relative onto the tie).
    base = rng.integers(0, 0x7F7F, size=n, dtype=np.uint16)
    low = anp.from_bf16(base).astype(np.float64)
    high = anp.from_bf16(base + np.uint16(1)).astype(np.float64)
    tie = (low + high) / 2
    step = (high - low) * np.array([-2.0**-30, -2.0**-45, 0.0, 2.0**-45, 2.0**-30])[rng.integers(0, 5, size=n)]
    near = (tie + step) * rng.choice([-1.0, 1.0], size=n)
    return np.concatenate([anywhere, in_range, near])


EDGES = [0.0, -0.0, 5e-324, -5e-324, 2.0**-149, 2.0**-134, -2.0**-134, 2.0**-133, 2.0**-126, 1.1754942e-38,
         3.3895313892515355e38, 3.3928545092412112e38, 3.3961775292304770e38, np.nextafter(3.3961775292304770e38, 0),
         3.4028234663852886e38, 1e300, np.inf, -np.inf, np.nan, -np.nan, 1 + 2.0**-8 + 2.0**-30, 1 - 2.0**-9 - 2.0**-31]


def test_to_bf16_rounds_float64_once_to_nearest_even(seed):
    rng = np.random.default_rng(seed)
    x = np.concatenate([random_cases(rng, 100_000), EDGES])
    got = anp.to_bf16(x)
    want = exact_bf16(x)
    bad = np.flatnonzero(got != want)
    assert bad.size == 0, [(float(x[i]).hex(), hex(got[i]), hex(want[i])) for i in bad[:10]]


def test_to_bf16_keeps_shapes_and_types():
    assert anp.to_bf16(1.5).shape == () and int(anp.to_bf16(1.5)) == 0x3FC0
    assert anp.to_bf16(np.float64(-2.5)).shape == ()
    x = np.asfortranarray(np.arange(6, dtype=np.float32).reshape(2, 3))
    bits = anp.to_bf16(x)
    assert bits.shape == (2, 3) and bits.dtype == np.uint16 and bits.flags.c_contiguous
    np.testing.assert_array_equal(anp.from_bf16(bits), x)
    assert list(anp.to_bf16([1.0, np.nan, -np.inf])) == [0x3F80, 0x7FC0, 0xFF80]


def test_from_bf16_takes_bf16_bits_only(seed):
    rng = np.random.default_rng(seed)
    bits = rng.integers(0, 0x7F80, size=(3, 5), dtype=np.uint16)
    got = anp.from_bf16(bits)
    assert got.shape == (3, 5) and got.dtype == np.float32
    np.testing.assert_array_equal(got.view(np.uint32), bits.astype(np.uint32) << 16)
    assert anp.from_bf16(bits[0, 0]).shape == ()
    for wrong, named in ((bits.astype(np.float32), "dtype float32"), (bits.astype(np.int64), "dtype int64"),
                         (bits.astype(">u2"), "dtype >u2"), (bits.tolist(), "list"), (3, "int")):
        with pytest.raises(TypeError, match=f"from_bf16: u: {named}; want bf16 bits"):
            anp.from_bf16(wrong)


def test_from_bf16_takes_ml_dtypes_bfloat16(seed):
    try:
        import ml_dtypes
    except ImportError:
        pytest.skip("SKIPPED LOUDLY: ml_dtypes is not installed (from_bf16 of ml_dtypes.bfloat16 arrays unchecked)")
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(64).astype(ml_dtypes.bfloat16)
    np.testing.assert_array_equal(anp.from_bf16(x), x.astype(np.float32))
    np.testing.assert_array_equal(anp.to_bf16(x.astype(np.float64)), x.view(np.uint16))
