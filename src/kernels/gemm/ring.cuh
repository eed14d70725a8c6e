/* The GEMM engine's shared-memory ring (device code only): STAGES slots, each an A tile (BM x 64)
 * and a B tile (BN x 64) of bf16, 128B-swizzled, with two mbarriers; and the (stage, phase)
 * position both roles walk it with.
 *
 *   full[s]  count 1. Writer: the producer's arrive.expect_tx (A + whole B bytes) plus TMA's
 *            complete_tx (ours, and the partner's multicast half). Waiter: the consumers of the
 *            unit that K block belongs to (parity = pass over the ring & 1): both (cooperative)
 *            or its one owner (ping-pong).
 *   empty[s] count 16 (cooperative) or 8 (ping-pong). Writer: lane 0 of each consumer warp that
 *            read the slot, twice per use, after wgmma.wait_group shows that warp's reads of
 *            slot s are done: once here and once at the partner CTA in coupled pairs (its
 *            producer may multicast into our slot), else twice here; 8 warps per use cooperative, the
 *            owner's 4 ping-pong. Waiter: the producer (CTA scope: wait_free), with the parity of the
 *            previous pass, so the first pass falls through.
 *   order    ping-pong only, count 1; phase i completes when the consumer of the CTA's unit i
 *            has issued that unit's last MMAs (writer: its thread 0). Waiter: the other
 *            consumer, before the first full wait of unit i + 1. It keeps the parity waits
 *            exact: a ping-pong consumer skips the other's K blocks without waiting on them, and
 *            a parity wait on full[s] is only right if the barrier is at most one phase behind
 *            (had the load of the slot's previous pass not landed yet, its pending phase has the
 *            other parity and the wait would pass at once, on stale data). Once the other
 *            consumer has passed every full wait of unit i, every earlier load has landed, so
 *            unit i + 1's waits are exact (consumer.cuh, consumer_pingpong).
 *   Never reset: phases alternate for the kernel's lifetime; both roles of both CTAs of a pair
 *   walk the same units, K blocks and share decisions (tile_sched.cuh), so their (slot, parity)
 *   sequences match. That is why the position below is the one piece of bookkeeping the roles
 *   share: written once, advanced once per K block by each (a ping-pong consumer advances past
 *   the other's K blocks in one step, skip). */
#ifndef AGMM_KERNELS_GEMM_RING_CUH
#define AGMM_KERNELS_GEMM_RING_CUH

#include <stdint.h>

#include "kernels/gemm/config.cuh"
#include "kernels/hopper_ptx.cuh"

/* The ring's bytes, from its 1024-aligned base (128B-swizzled tiles must start on 1024-byte
 * boundaries: swizzle phase 0). */
template <class Cfg>
struct ring_layout {
    static constexpr uint32_t a_bytes = Cfg::BM * GEMM_BK * 2; /* one slot of A */
    static constexpr uint32_t b_bytes = Cfg::BN * GEMM_BK * 2; /* one slot of B */
    static constexpr uint32_t a_ring = 0;
    static constexpr uint32_t b_ring = a_ring + Cfg::STAGES * a_bytes;
    static constexpr uint32_t bars = b_ring + Cfg::STAGES * b_bytes; /* full[STAGES], empty[STAGES], order */
    static constexpr uint32_t end = bars + 16 * Cfg::STAGES + (Cfg::PP ? 8 : 0);
};

/* Where a role is in the ring: the slot of its next K block and the parity of that slot's pass. */
template <class Cfg>
struct ring_pos {
    int stage = 0;
    uint32_t phase = 0;
    __device__ __forceinline__ void advance()
    {
        if (++stage == Cfg::STAGES) {
            stage = 0;
            phase ^= 1;
        }
    }
    /* Where n advance()s lead: past the other ping-pong consumer's K blocks. */
    __device__ __forceinline__ void skip(int n)
    {
        const int s = stage + n;
        phase ^= (uint32_t)(s / Cfg::STAGES) & 1;
        stage = s % Cfg::STAGES;
    }
};

template <class Cfg>
struct ring {
    using L = ring_layout<Cfg>;
    uint32_t sa, sb, bars; /* shared-window addresses of the A slots, the B slots, the barriers */

    __device__ __forceinline__ explicit ring(uint32_t base)
        : sa(base + L::a_ring), sb(base + L::b_ring), bars(base + L::bars)
    {
    }

    __device__ __forceinline__ uint32_t full(int s) const { return bars + 8 * s; }
    __device__ __forceinline__ uint32_t empty(int s) const { return bars + 8 * (Cfg::STAGES + s); }
    __device__ __forceinline__ uint32_t order() const { return bars + 16 * Cfg::STAGES; }
    __device__ __forceinline__ uint32_t a_slot(int s) const { return sa + s * L::a_bytes; }
    __device__ __forceinline__ uint32_t b_slot(int s) const { return sb + s * L::b_bytes; }

    /* One thread, before the CTA's (or cluster's) first barrier. mbarrier.init is a generic-proxy
     * write that TMA's complete_tx (async proxy) and the partner CTA's remote arrivals update:
     * the fence makes it visible cluster-wide. */
    __device__ __forceinline__ void init() const
    {
        for (int s = 0; s < Cfg::STAGES; s++) {
            mbar_init(full(s), 1);
            mbar_init(empty(s), Cfg::PP ? 4 * 2 : 8 * 2); /* the consumer warps of a use, 2 arrivals each */
        }
        if (Cfg::PP)
            mbar_init(order(), 1);
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    }

    /* Producer: the slot is free once our consumers, and in coupled pairs the partner's too, are
     * done with its previous contents (our multicast may be about to write the partner's copy). A
     * CTA-scope wait suffices even then: every arrival comes after wgmma.wait_group showed the
     * arriving warp's reads of the slot complete, and the refill is a write issued after we see
     * the phase, so there is no data to acquire. A cluster-scope acquire compiles to an L1
     * invalidate (CCTL.IVALL) on every K block. */
    __device__ __forceinline__ void wait_free(const ring_pos<Cfg> &pos) const
    {
        mbar_wait(empty(pos.stage), pos.phase ^ 1);
    }

    /* Producer: every byte landing in this CTA's slot, ours and the partner's multicast alike. */
    __device__ __forceinline__ void expect_loads(int s) const
    {
        mbar_arrive_expect_tx(full(s), L::a_bytes + L::b_bytes);
    }

    /* Consumer: TMA has landed A and B of this K block. */
    __device__ __forceinline__ void wait_full(const ring_pos<Cfg> &pos) const { mbar_wait(full(pos.stage), pos.phase); }

    /* Ping-pong consumer (its thread 0): every MMA of the CTA's unit i is issued (header comment). */
    __device__ __forceinline__ void pass_order() const { mbar_arrive(order()); }

    /* Ping-pong consumer, before its unit i + 1: the other's unit i is issued (parity i & 1). */
    __device__ __forceinline__ void wait_order(uint32_t parity) const { mbar_wait(order(), parity); }

    /* Consumer warp (lane 0) gives slot s back: two arrivals per use. In coupled pairs, one goes
     * to each CTA's barrier, shared or not (tile_sched.cuh: the partner's producer may multicast
     * into our slot s at its next use); otherwise both to our own. */
    __device__ __forceinline__ void release(int s, int coupled, uint32_t partner) const
    {
        mbar_arrive(empty(s));
        if (Cfg::CL == 2 && coupled)
            mbar_arrive_remote(empty(s), partner);
        else
            mbar_arrive(empty(s));
    }
};

#endif /* AGMM_KERNELS_GEMM_RING_CUH */
