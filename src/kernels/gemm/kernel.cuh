/* The GEMM engine's kernel skeleton (device code only): one kernel template, instantiated per
 * tile config (gemm_configs.h, as a gemm_cfg), A source (a_source.cuh, a_peers.cuh) and epilogue
 * (epilogue.cuh) by the inst_*.cu files. It carves shared memory, sets up the ring's barriers and
 * hands the warpgroups to their roles; the roles do the rest.
 *
 * Launch: grid = min(units, SM budget) persistent CTAs (even, in clusters of 2 for the /c2
 * configs); block = 384 threads = 3 warpgroups; dynamic smem = smem_layout below: the ring
 * (STAGES x (A BM x 64 + B BN x 64) bf16 + 2 x STAGES mbarriers), the epilogue's staging, and
 * 1 KB for alignment (192-226 KB in the configs of gemm_configs.h; at most 227 KB). One CTA per SM.
 * Roles (one if/else on the warpgroup index, so setmaxnreg applies):
 *   warpgroup 0: thread 0 is the producer (producer.cuh), in 56 registers; thread 32 runs the A
 *     source's side_thread (pull: raises the rank's ready word); warps 2 and 3 run its copy_local
 *     (the fused backend's local rows of the gathered A); the others idle to the end (a cluster
 *     barrier counts them).
 *   warpgroups 1 and 2: the consumers (consumer.cuh), in 224 registers: mainloop, then epilogue,
 *     cooperative (both on one unit) or ping-pong (PP: alternate units, whole tiles each).
 * ptxas: 168 registers at entry, no spills, no local memory (docs/results, "engine split"). */
#ifndef AGMM_KERNELS_GEMM_KERNEL_CUH
#define AGMM_KERNELS_GEMM_KERNEL_CUH

#include <stddef.h>
#include <stdint.h>
#include <type_traits>

#include "kernels/gemm/a_peers.cuh"
#include "kernels/gemm/a_source.cuh"
#include "kernels/gemm/consumer.cuh"
#include "kernels/gemm/epilogue.cuh"
#include "kernels/gemm/kernels.h"
#include "kernels/gemm/producer.cuh"
#include "kernels/gemm/ring.cuh"

/* A config's shared memory: byte offsets from the 1024-aligned base, and the dynamic size to ask
 * for (the kernel carves with it; the host sizes with it through the kernel table). */
template <class Cfg, class Epi>
struct smem_layout {
    static constexpr uint32_t ring_at = 0;
    /* 1024-aligned: epi_store's pieces are 128B-swizzled boxes of C's tensor map. */
    static constexpr uint32_t epilogue = (ring_at + ring_layout<Cfg>::end + 1023u) & ~1023u;
    static constexpr uint32_t end = epilogue + Epi::smem_bytes;
    static constexpr size_t total = end + 1024; /* + what aligning the base may skip */
    static_assert(total <= EP_SMEM_LIMIT, "the ring and the epilogue's staging exceed sm_90's shared memory");
};

/* The epilogue a config gets: split-tail configs fix their split tiles up first. */
template <class Cfg>
using gemm_epilogue_of = typename std::conditional<Cfg::SK != 0, epi_split_tail<Cfg>, epi_store<Cfg>>::type;

template <class Cfg, class Src, class Epi>
__global__ void __launch_bounds__(GEMM_THREADS, 1) gemm_ws_kernel(const __grid_constant__ gemm_params p)
{
    using L = smem_layout<Cfg, Epi>;
    extern __shared__ uint8_t smem_raw[];
    /* 128B-swizzled tiles must start on 1024-byte boundaries (swizzle phase 0). The offset is
     * the same in both CTAs of a cluster, which multicast relies on. */
    const uint32_t base = (smem_u32(smem_raw) + 1023u) & ~1023u;
    const ring<Cfg> r(base + L::ring_at);
    const int wg = threadIdx.x / 128;
    __shared__ uint32_t word; /* the A source's per-CTA value, for every role */

    if (threadIdx.x == 32) /* another warp than the barriers' set-up, so its load overlaps it */
        word = Src::cta_word(p);
    if (threadIdx.x == 0) {
        r.init();
        Src::prefetch(p);
        prefetch_map(&p.core.map_b);
        if (p.core.c_tma)
            prefetch_map(&p.core.map_c);
        if (Cfg::CL == 2 && !Cfg::B_MN)
            prefetch_map(&p.core.map_b_half);
    }
    /* Barriers initialised in both CTAs before either multicasts or arrives remotely. */
    if (Cfg::CL == 2)
        cluster_sync();
    else
        __syncthreads();

    if (wg == 0) {
        asm volatile("setmaxnreg.dec.sync.aligned.u32 56;");
        if (threadIdx.x == 0)
            gemm_producer<Cfg, Src>(p, r, word);
        else if (threadIdx.x == 32)
            Src::side_thread(p, word);
        else if (threadIdx.x >= 64)
            Src::copy_local(p, threadIdx.x - 64);
    } else {
        asm volatile("setmaxnreg.inc.sync.aligned.u32 224;");
        uint8_t *staging = smem_raw + (base + L::epilogue - smem_u32(smem_raw));
        if constexpr (Cfg::PP)
            consumer_pingpong<Cfg, Epi>(p, r, wg - 1, staging);
        else
            consumer_cooperative<Cfg, Epi>(p, r, wg - 1, staging);
    }
    /* No CTA leaves while its partner may still arrive on its barriers. */
    if (Cfg::CL == 2) {
        __syncwarp();
        cluster_sync();
    }
    Src::cta_end(p, word);
}

/* One row of the kernel table (kernels.h): the kernel of this config, A source and B layout with
 * its dynamic shared memory, or {NULL, 0} where the layout cannot take the config (config.cuh:
 * row-major B comes in 64-column boxes). Instantiates nothing for a config it refuses. */
template <int BM, int BN, int ST, int WGN, int B_MN, int CL, int SK, int PP, template <class> class Src,
          template <class> class Epi = gemm_epilogue_of>
inline agmm_gemm_kernel gemm_kernel_row()
{
    /* gemm_cfg's WN, and a pair's halves of B, in row-major B's 64-column boxes */
    if constexpr (B_MN && ((PP ? BN : BN / WGN) % 64 != 0 || (CL == 2 && BN % 128 != 0))) {
        return agmm_gemm_kernel{NULL, 0};
    } else {
        using Cfg = gemm_cfg<BM, BN, ST, WGN, B_MN, CL, SK, PP>;
        return agmm_gemm_kernel{(const void *)gemm_ws_kernel<Cfg, Src<Cfg>, Epi<Cfg>>, smem_layout<Cfg, Epi<Cfg>>::total};
    }
}

#endif /* AGMM_KERNELS_GEMM_KERNEL_CUH */
