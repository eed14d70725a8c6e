/* The GEMM engine's consumers (device code only): warpgroups 1 and 2, in 224 registers each.
 *
 * Mainloop (consumer_mainloop): consumer cw computes its part of the unit's BM x BN tile (the
 * config's CW_ROWS, CW_COLS: cooperative rows [cw*BM/2, (cw+1)*BM/2) (WGN = 1) or columns
 * [cw*BN/2, (cw+1)*BN/2) (WGN = 2); ping-pong the whole tile), as MB blocks of 64 rows, one wgmma
 * m64nWNk16 each per K step of 16, fp32 accumulators in registers (scale-d = 0 on the unit's first
 * step instead of zeroing). One K block of MMAs stays in flight (wait_group 1): the slot of the
 * block before goes back to the producer(s) once its MMAs are done.
 *
 * Schedules, both built from that mainloop and the epilogue (epilogue.cuh); the config's PP picks:
 *   consumer_cooperative  both consumers work on the same unit at the same time, then both store
 *                         their parts: the tensor cores idle during every unit's epilogue.
 *   consumer_pingpong     each consumer owns whole units: consumer c takes the CTA's units with
 *                         local index i = c, c + 2, ... (unit blockIdx.x + i*gridDim.x), so one
 *                         stores unit i while the other runs unit i + 1's mainloop.
 * Cooperative consumers compute the record of their next unit while a unit's first K block's MMAs
 * run: a unit's decode costs a warp ~0.5-1 us (docs/results, 2026-12-04, the engine's stamps), no
 * longer between units. */
#ifndef AGMM_KERNELS_GEMM_CONSUMER_CUH
#define AGMM_KERNELS_GEMM_CONSUMER_CUH

#include <stdint.h>

#include "kernels/gemm/ring.cuh"
#include "kernels/gemm/tile_sched.cuh"
#include "kernels/hopper_ptx.cuh"

/* One unit's mainloop: ends holding the unit's accumulators (fenced: safe to read), every slot it
 * used released (coupled: in the partner CTA too, ring.cuh; the same for every unit of a launch).
 * at_first_block() runs once, right after the first K block's MMAs are issued; issued() once,
 * when every MMA of the unit is issued and the last K block's are still running. */
template <class Cfg, class F, class G>
__device__ __forceinline__ void consumer_mainloop(const ring<Cfg> &r, ring_pos<Cfg> &pos, const tile_job &cur, int cw,
                                                  int lane, uint32_t partner, int coupled,
                                                  float (&acc)[Cfg::MB][Cfg::WN / 2], F &&at_first_block,
                                                  G &&issued)
{
    constexpr int MB = Cfg::MB, WN = Cfg::WN, B_MN = Cfg::B_MN;
    const int row_off = cw * Cfg::CW_ROWS, col_off = cw * Cfg::CW_COLS;
    int prev = -1;
    for (int kb = cur.kb0; kb < cur.kb1; kb++) {
        r.wait_full(pos);
        wgmma_fence();
        const uint32_t a0 = r.a_slot(pos.stage) + row_off * 128;
        const uint32_t b0 = r.b_slot(pos.stage) + (B_MN ? col_off / 64 * 8192 : col_off * 128);
#pragma unroll
        for (int kk = 0; kk < GEMM_BK / 16; kk++) {
            const uint64_t db = B_MN ? sw128_desc(b0 + kk * 16 * 128, 8192, 1024) : sw128_desc(b0 + kk * 32, 16, 1024);
#pragma unroll
            for (int mb = 0; mb < MB; mb++)
                wgmma_tile<WN, B_MN>(acc[mb], sw128_desc(a0 + mb * 64 * 128 + kk * 32, 16, 1024), db,
                                     (uint32_t)((kb - cur.kb0) | kk) != 0);
        }
        wgmma_commit();
        if (kb == cur.kb0)
            at_first_block();
        /* Keep this K block's MMAs in flight; the previous block's are done after wait_group 1,
         * so its slot can go back to the producer(s). */
        if (prev >= 0) {
            wgmma_wait<1>();
            if (lane == 0)
                r.release(prev, coupled, partner);
        }
        prev = pos.stage;
        pos.advance();
    }
    issued();
    wgmma_wait<0>();
#pragma unroll
    for (int mb = 0; mb < MB; mb++)
        acc_fence(acc[mb]);
    if (lane == 0)
        r.release(prev, coupled, partner);
}

/* Consumer cw (0 or 1) of the cooperative schedule; ep: this warp's epilogue staging. */
template <class Cfg, class Epi>
__device__ __forceinline__ void consumer_cooperative(const gemm_params &p, const ring<Cfg> &r, int cw, uint8_t *ep)
{
    const tile_walk<Cfg> walk(p.core);
    const int tid = threadIdx.x % 128, warp = tid / 32, lane = tid % 32;
    const uint32_t partner = (blockIdx.x & (Cfg::CL - 1)) ^ 1;
    const int coupled = Cfg::CL == 2 && p.core.pairs_coupled;
    Epi epi(p, ep, cw, warp, lane);
    float acc[Cfg::MB][Cfg::WN / 2];
    ring_pos<Cfg> pos;
    int64_t u = blockIdx.x;
    tile_job cur = walk.job_or_none(u), next;
    while (u < walk.nunits) {
        const int64_t next_u = u + gridDim.x;
        if constexpr (Cfg::SK == 2) {
            if (cur.kb0 == cur.kb1) { /* an empty stream-K unit: the producer loads nothing for it */
                cur = walk.job_or_none(next_u);
                u = next_u;
                continue;
            }
        }
        consumer_mainloop<Cfg>(r, pos, cur, cw, lane, partner, coupled, acc,
                               [&] { next = walk.job_or_none(next_u); }, [] {});
        epi.store(cur, acc);
        cur = next;
        u = next_u;
    }
    epi.finish();
}

/* Consumer cw (0 or 1) of the ping-pong schedule; ep: this warp's epilogue staging (its own: the
 * two consumers store at different times, never into each other's rows). Both walk the one ring
 * in the producer's order: the unit before each of ours is the other consumer's, whose K blocks we
 * step past (ring_pos::skip) without waiting on them. The order barrier (ring.cuh) is not a
 * choice but what makes that skip safe: our first full wait of unit i must find every earlier
 * load landed, which the other consumer's passing its waits of unit i - 1 proves; without it a
 * consumer whose first unit starts more than STAGES blocks into the ring would take the slot's
 * previous contents for this pass's. It also hands the tensor cores to one consumer at a time,
 * as CUTLASS's ping-pong does with its ordered barrier, at no cost: the other consumer's MMAs are
 * issued while this one's last K block still runs, so the tensor pipe's queue does not drain; and
 * the producer loads in unit order anyway, so unit i + 1 could not start much earlier.
 * A unit's record is computed before the order wait, under the other consumer's mainloop (no
 * look-ahead: nothing but the accumulators and the record is live in the mainloop, a whole tile's
 * Cfg::NACC fp32 per thread in the consumers' 224 registers). */
template <class Cfg, class Epi>
__device__ __forceinline__ void consumer_pingpong(const gemm_params &p, const ring<Cfg> &r, int cw, uint8_t *ep)
{
    const tile_walk<Cfg> walk(p.core);
    const int tid = threadIdx.x % 128, warp = tid / 32, lane = tid % 32;
    Epi epi(p, ep, cw, warp, lane);
    float acc[Cfg::MB][Cfg::WN / 2];
    ring_pos<Cfg> pos;
    for (int64_t u = blockIdx.x + cw * (int64_t)gridDim.x; u < walk.nunits; u += 2 * (int64_t)gridDim.x) {
        const tile_job cur = walk.job(u);
        if (u > blockIdx.x) {
            /* The unit before is the other consumer's: past its K blocks, once it has issued them.
             * The consumers alternate, so the order phases we wait for are those of the other's
             * units, every other phase: always parity cw ^ 1. */
            pos.skip(walk.k_blocks(u - gridDim.x));
            r.wait_order(cw ^ 1);
        }
        consumer_mainloop<Cfg>(r, pos, cur, cw, lane, 0, 0, acc, [] {}, [&] {
            if (tid == 0)
                r.pass_order();
        });
        epi.store(cur, acc);
    }
    epi.finish();
}

#endif /* AGMM_KERNELS_GEMM_CONSUMER_CUH */
