/* The GEMM engine's producer (device code only): thread 0 of warpgroup 0, in 56 registers,
 * walks the CTA's units (tile_sched.cuh) and, per 64-wide K block, waits for a free ring slot and
 * issues the TMA loads of A (BM x 64, from wherever the A source says: a_source.cuh) and B
 * (b_loader.cuh) into it. Everything mode-specific is a call into the source's producer state. */
#ifndef AGMM_KERNELS_GEMM_PRODUCER_CUH
#define AGMM_KERNELS_GEMM_PRODUCER_CUH

#include <stdint.h>

#include "kernels/gemm/b_loader.cuh"
#include "kernels/gemm/ring.cuh"
#include "kernels/gemm/tile_sched.cuh"

/* The test hook (agmm_gemm_plan_set_delay): the producer starts `delay_ns` late. */
static __device__ __noinline__ void producer_delay(uint64_t delay_ns)
{
    const uint64_t t0 = agmm_globaltimer_ns();
    while (agmm_globaltimer_ns() - t0 < delay_ns)
        __nanosleep(1000);
}

/* word: the source's per-CTA value (a_source.cuh). */
template <class Cfg, class Src>
__device__ __forceinline__ void gemm_producer(const gemm_params &p, const ring<Cfg> &r, uint32_t word)
{
    const tile_walk<Cfg> walk(p.core);
    const int crank = (int)(blockIdx.x & (Cfg::CL - 1));
    typename Src::slot_note notes[Cfg::STAGES];
    typename Src::producer src(p, word, notes);
    ring_pos<Cfg> pos;
    src.start();
    if (p.core.delay_ns)
        producer_delay(p.core.delay_ns);
    for (int64_t u = blockIdx.x; u < walk.nunits; u += gridDim.x) {
        const tile_job j = walk.job(u);
        if constexpr (Cfg::SK == 2) {
            if (j.kb0 == j.kb1) /* an empty stream-K unit (tile_sched.cuh): the consumers skip it too */
                continue;
        }
        const a_tile a = src.tile(j);
        for (int kb = j.kb0; kb < j.kb1; kb++) {
            r.wait_free(pos);
            src.before_refill(r, pos.stage);
            r.expect_loads(pos.stage);
            /* The operand that CTAs of one GPC share goes last: the L2 request coalescer merges
             * only requests from one GPC that arrive together, and CTAs waiting for one merged
             * load leave their waits together, which keeps them in step. Without a cluster that
             * is B (consecutive CTAs fill a GPC down a column of tiles); pairs go round-robin
             * over the GPCs, so pairs k and k + 8, which share A, often sit in one (docs/results,
             * twenty-third session: B first in the pairs, +11-30% merged, 0.5% faster; B first
             * everywhere, the single tiles 1-4% slower). */
            if (Cfg::CL == 2)
                load_b<Cfg>(p.core, j, kb, r.b_slot(pos.stage), r.full(pos.stage), crank);
            tma_load_2d(r.a_slot(pos.stage), a.map, kb * GEMM_BK, a.row, r.full(pos.stage));
            src.after_load(pos, kb, j);
            if (Cfg::CL != 2)
                load_b<Cfg>(p.core, j, kb, r.b_slot(pos.stage), r.full(pos.stage), crank);
            pos.advance();
        }
    }
    src.finish(r);
}

#endif /* AGMM_KERNELS_GEMM_PRODUCER_CUH */
