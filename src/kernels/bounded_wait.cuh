/* The bounded wait of every kernel that waits for another rank (device code only): the GEMM
 * engine's chunk flags, ready words and closing barrier, the signal kernels' pad barrier and flag
 * wait, and the all-reduce barriers. One spin loop, written once; the sites differ only in how
 * they poll (compile-time) and in what they record when the bound passes.
 *
 * Contract. Waits until *word reaches `target` as a wrapping 32-bit difference (word - target >= 0:
 * epochs and flags only grow while anyone waits for them, and may wrap). On success the word has
 * been read with a system-scope acquire, so what its writer stored before its release is visible
 * to this thread. Every CHECK polls it looks at two things, in this order:
 *   - err->code: a wait of this rank has already expired (this run, or an earlier run still queued
 *     before this one): the ranks are out of step and the host reports that first record, so this
 *     wait gives up at once (AGMM_SPIN_GAVE_UP) instead of waiting out another full bound;
 *   - the deadline (now + timeout_ns, from %globaltimer at the first miss): AGMM_SPIN_EXPIRED. The
 *     caller then records it with agmm_dev_error_record, naming what it waited for.
 * A wait that gives up or expires returns without the acquire: the caller must not read the data
 * the word guards.
 *
 * Polling, per site:
 *   SLEEP_NS  nanosleep between polls (0: none). The GEMM's producer sleeps 64 ns: its SM's
 *             consumers may still be computing, and a tight loop would take their issue slots.
 *   CHECK     polls between looks at err->code and the clock (a power of two). Every site
 *             checks every 64: err->code is host-mapped memory, slow to read from the GPU.
 *   RELAXED   1: poll with relaxed loads and acquire once at the end (the all-reduce barrier: a
 *             relaxed load is cheaper on the polling path); 0: every poll is an acquire. */
#ifndef AGMM_KERNELS_BOUNDED_WAIT_CUH
#define AGMM_KERNELS_BOUNDED_WAIT_CUH

#include <stdint.h>

#include "kernels/dev_error.h"

enum { AGMM_SPIN_MET = 0, AGMM_SPIN_GAVE_UP = 1, AGMM_SPIN_EXPIRED = 2 };

__device__ __forceinline__ uint32_t agmm_ld_relaxed_sys(const uint32_t *p)
{
    uint32_t v;
    asm volatile("ld.relaxed.sys.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
    return v;
}

/* Wrapping "seen >= target". */
__device__ __forceinline__ bool agmm_reached(uint32_t seen, uint32_t target)
{
    return (int32_t)(seen - target) >= 0;
}

/* The wait (header comment). Returns AGMM_SPIN_*; *seen is the last value read. */
template <uint32_t SLEEP_NS, uint32_t CHECK, int RELAXED>
__device__ __forceinline__ int agmm_spin_until(const uint32_t *word, uint32_t target, uint64_t timeout_ns,
                                               const agmm_dev_error *err, uint32_t *seen)
{
    static_assert((CHECK & (CHECK - 1)) == 0, "CHECK is a power of two");
    uint32_t v = RELAXED ? agmm_ld_relaxed_sys(word) : agmm_ld_acquire_sys(word);
    if (!agmm_reached(v, target)) {
        const uint64_t deadline = agmm_globaltimer_ns() + timeout_ns;
        for (uint32_t spins = 1;; spins++) {
            if (SLEEP_NS)
                __nanosleep(SLEEP_NS);
            v = RELAXED ? agmm_ld_relaxed_sys(word) : agmm_ld_acquire_sys(word);
            if (agmm_reached(v, target))
                break;
            if ((spins & (CHECK - 1)) != 0)
                continue;
            if (*(volatile const uint32_t *)&err->code != AGMM_DEV_OK) {
                *seen = v;
                return AGMM_SPIN_GAVE_UP;
            }
            if (agmm_globaltimer_ns() > deadline) {
                *seen = v;
                return AGMM_SPIN_EXPIRED;
            }
        }
    }
    /* The acquire: the word only grows while waited for, so this load sees >= target again. */
    if (RELAXED)
        (void)agmm_ld_acquire_sys(word);
    *seen = v;
    return AGMM_SPIN_MET;
}

#endif /* AGMM_KERNELS_BOUNDED_WAIT_CUH */
