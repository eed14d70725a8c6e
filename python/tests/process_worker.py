"""One rank of a CPU world whose ranks are processes, started by test_process_world.py with
torchrun's variables (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT). Runs every usable
backend on odd shapes and checks the results exactly; prints OK, or UNSUPPORTED and exits 77 when
this libagmm cannot join a process world."""
import os
import sys

import numpy as np

import agmm
import agmm.numpy as anp

UNSUPPORTED_EXIT = 77


def small_ints(rng, shape):
    return anp.to_bf16(rng.integers(-1, 2, size=shape).astype(np.float32))


def main():
    seed = int(os.environ["AGMM_TEST_SEED"])
    uid = os.environ.get("AGMM_TEST_UNIQUE_ID")
    try:
        if uid:
            me = anp.join(rank=int(os.environ["RANK"]), nranks=int(os.environ["WORLD_SIZE"]),
                          unique_id=bytes.fromhex(uid), timeout_s=10)
        else:
            me = anp.join(timeout_s=10)
    except agmm.Unsupported as e:
        print(f"UNSUPPORTED: {e}")
        return UNSUPPORTED_EXIT
    with me:
        w, r = me.nranks, me.rank
        assert (r, w) == (int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])), (r, w)
        rng = np.random.default_rng(seed)         # the same data on every rank: each checks all of it
        checked = 0
        for backend, why in me.backends("ag_matmul").items():
            if why:
                continue
            for m, n, k, col in ((1, 8, 8, False), (7, 264, 72, False), (129, 3, 8, True)):
                shards = [small_ints(rng, (m, k)) for _ in range(w)]
                b = small_ints(rng, (k, n))
                a_gathered, c = me.ag_matmul(shards[r], np.ascontiguousarray(b.T).T if col else b, backend=backend)
                want = anp.from_bf16(np.concatenate(shards)).astype(np.float64) @ anp.from_bf16(b)
                np.testing.assert_array_equal(a_gathered, np.concatenate(shards), err_msg=backend)
                np.testing.assert_array_equal(anp.from_bf16(c), want, err_msg=backend)
                checked += 1
        for backend, why in me.backends("all_reduce").items():
            if why:
                continue
            for n in (1, 4093, 16387):
                vectors = [rng.integers(-2, 3, size=n).astype(np.float32) for _ in range(w)]
                s = me.symm_empty(n, np.float32)
                s[:] = vectors[r]
                x = vectors[r].copy()
                me.all_reduce_(s, backend=backend)
                me.all_reduce_(x, backend=backend)
                for got in (s, x):
                    np.testing.assert_array_equal(got, np.sum(vectors, axis=0), err_msg=backend)
                me.symm_free(s)
                checked += 1
        # The processes compare their calls through the library: a symmetric input at another
        # offset on each rank (read in place, it would be a silent wrong sum) is refused on every
        # rank, and so is a different size; the ranks stay in step after both.
        vectors = [rng.standard_normal(8).astype(np.float32) for _ in range(w)]
        s = me.symm_empty(8 * w, np.float32)
        s[8 * r:8 * r + 8] = vectors[r]
        for call, said in ((lambda: me.all_reduce_(s[8 * r:8 * r + 8]), "x: the ranks' inputs lie at different places"),
                           (lambda: me.all_reduce_(np.ones(9 + r, np.float32)), "disagree on number of elements")):
            try:
                call()
                raise AssertionError(f"not refused: {said}")
            except ValueError as e:
                assert said in str(e), str(e)
        s[:8] = vectors[r]
        me.all_reduce_(s[:8])
        np.testing.assert_allclose(s[:8], np.sum(vectors, axis=0), rtol=1e-6)
        me.symm_free(s)
        checked += 1
    try:
        me.all_reduce_(np.ones(8, np.float32))
        raise AssertionError("a closed rank ran an all_reduce_")
    except ValueError as e:
        assert "this rank is closed" in str(e), str(e)
    print(f"OK rank {r} of {w}: {checked} cases")
    return 0


if __name__ == "__main__":
    sys.exit(main())
