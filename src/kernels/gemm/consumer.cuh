/* The GEMM engine's consumers (device code only): warpgroups 1 and 2, in 224 registers each.
 *
 * Mainloop (consumer_mainloop): consumer cw computes its part of the unit's BM x BN tile, rows
 * [cw*BM/2, (cw+1)*BM/2) (WGN = 1) or columns [cw*BN/2, (cw+1)*BN/2) (WGN = 2), as MB blocks of 64
 * rows, one wgmma m64nWNk16 each per K step of 16, fp32 accumulators in registers (scale-d = 0 on
 * the unit's first step instead of zeroing). One K block of MMAs stays in flight (wait_group 1):
 * the slot of the block before goes back to the producer(s) once its MMAs are done.
 *
 * Schedule (consumer_cooperative): both consumers work on the same unit at the same time, then
 * both store their parts (the epilogue, epilogue.cuh). While the first K block's MMAs run, the
 * consumers compute the next unit's record: the schedule's 64-bit divisions cost ~1 us of a warp's
 * time, no longer between units. Another schedule (ping-pong: each consumer a whole tile of its
 * own, alternate units, one's epilogue under the other's mainloop) would be a sibling of
 * consumer_cooperative built from the same mainloop and epilogue (docs/gemm_engine.md). */
#ifndef AGMM_KERNELS_GEMM_CONSUMER_CUH
#define AGMM_KERNELS_GEMM_CONSUMER_CUH

#include <stdint.h>

#include "kernels/gemm/ring.cuh"
#include "kernels/gemm/tile_sched.cuh"
#include "kernels/hopper_ptx.cuh"

/* One unit's mainloop: ends holding the unit's accumulators (fenced: safe to read), every slot it
 * used released. at_first_block() runs once, right after the first K block's MMAs are issued. */
template <class Cfg, class F>
__device__ __forceinline__ void consumer_mainloop(const ring<Cfg> &r, ring_pos<Cfg> &pos, const tile_job &cur, int cw,
                                                  int lane, uint32_t partner,
                                                  float (&acc)[Cfg::MB][Cfg::WN / 2], F &&at_first_block)
{
    constexpr int MB = Cfg::MB, WN = Cfg::WN, B_MN = Cfg::B_MN;
    const int row_off = Cfg::WGN == 1 ? cw * Cfg::WM : 0, col_off = Cfg::WGN == 2 ? cw * WN : 0;
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
                r.release(prev, cur.share, partner);
        }
        prev = pos.stage;
        pos.advance();
    }
    wgmma_wait<0>();
#pragma unroll
    for (int mb = 0; mb < MB; mb++)
        acc_fence(acc[mb]);
    if (lane == 0)
        r.release(prev, cur.share, partner);
}

/* Consumer cw (0 or 1) of the cooperative schedule; ep: this warp's epilogue staging. */
template <class Cfg, class Epi>
__device__ __forceinline__ void consumer_cooperative(const gemm_params &p, const ring<Cfg> &r, int cw, uint8_t *ep)
{
    const tile_walk<Cfg> walk(p.core);
    const int tid = threadIdx.x % 128, warp = tid / 32, lane = tid % 32;
    const uint32_t partner = (blockIdx.x & (Cfg::CL - 1)) ^ 1;
    Epi epi(p, ep, cw, warp, lane);
    float acc[Cfg::MB][Cfg::WN / 2];
    ring_pos<Cfg> pos;
    int64_t u = blockIdx.x;
    tile_job cur = walk.job_or_none(u), next;
    while (u < walk.nunits) {
        const int64_t next_u = u + gridDim.x;
        consumer_mainloop<Cfg>(r, pos, cur, cw, lane, partner, acc, [&] { next = walk.job_or_none(next_u); });
        epi.store(cur, acc);
        cur = next;
        u = next_u;
    }
    epi.finish();
}

#endif /* AGMM_KERNELS_GEMM_CONSUMER_CUH */
