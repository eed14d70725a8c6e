/* The GEMM engine's shared-memory ring (device code only): STAGES slots, each an A tile (BM x 64)
 * and a B tile (BN x 64) of bf16, 128B-swizzled, with two mbarriers; and the (stage, phase)
 * position both roles walk it with.
 *
 *   full[s]  count 1. Writer: the producer's arrive.expect_tx (A + whole B bytes) plus TMA's
 *            complete_tx (ours, and the partner's multicast half). Waiter: both consumers
 *            (parity = pass over the ring & 1).
 *   empty[s] count 16. Writer: lane 0 of each of the 8 consumer warps, twice per use, after
 *            wgmma.wait_group shows that warp's reads of slot s are done: once here and once
 *            at the partner CTA when B was shared (its producer wrote into our slot), else
 *            twice here. Waiter: the producer (acquire.cluster), with the parity of the
 *            previous pass, so the first pass falls through.
 *   Never reset: phases alternate for the kernel's lifetime; both roles of both CTAs of a pair
 *   walk the same units, K blocks and share decisions (tile_sched.cuh), so their (slot, parity)
 *   sequences match. That is why the position below is the one piece of bookkeeping the roles
 *   share: written once, advanced once per K block by each. */
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
    static constexpr uint32_t bars = b_ring + Cfg::STAGES * b_bytes; /* full[STAGES], then empty[STAGES] */
    static constexpr uint32_t end = bars + 16 * Cfg::STAGES;
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
    __device__ __forceinline__ uint32_t a_slot(int s) const { return sa + s * L::a_bytes; }
    __device__ __forceinline__ uint32_t b_slot(int s) const { return sb + s * L::b_bytes; }

    /* One thread, before the CTA's (or cluster's) first barrier. mbarrier.init is a generic-proxy
     * write that TMA's complete_tx (async proxy) and the partner CTA's remote arrivals update:
     * the fence makes it visible cluster-wide. */
    __device__ __forceinline__ void init() const
    {
        for (int s = 0; s < Cfg::STAGES; s++) {
            mbar_init(full(s), 1);
            mbar_init(empty(s), 8 * 2); /* 8 consumer warps, 2 arrivals each per use */
        }
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    }

    /* Producer: the slot is free once our consumers, and with a shared B the partner's too, are
     * done with its previous contents (our multicast is about to write the partner's copy). */
    __device__ __forceinline__ void wait_free(const ring_pos<Cfg> &pos) const
    {
        mbar_wait_cluster(empty(pos.stage), pos.phase ^ 1);
    }

    /* Producer: every byte landing in this CTA's slot, ours and the partner's multicast alike. */
    __device__ __forceinline__ void expect_loads(int s) const
    {
        mbar_arrive_expect_tx(full(s), L::a_bytes + L::b_bytes);
    }

    /* Consumer: TMA has landed A and B of this K block. */
    __device__ __forceinline__ void wait_full(const ring_pos<Cfg> &pos) const { mbar_wait(full(pos.stage), pos.phase); }

    /* Consumer warp (lane 0) gives slot s back: two arrivals per use. With a shared B, one goes
     * to each CTA's barrier (both producers wrote into our slot s); otherwise both to our own. */
    __device__ __forceinline__ void release(int s, int share, uint32_t partner) const
    {
        mbar_arrive(empty(s));
        if (Cfg::CL == 2 && share)
            mbar_arrive_remote(empty(s), partner);
        else
            mbar_arrive(empty(s));
    }
};

#endif /* AGMM_KERNELS_GEMM_RING_CUH */
