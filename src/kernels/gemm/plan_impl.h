/* The GEMM engine plan's state and the internal calls between its host files (plain C; CUDA
 * builds only): plan.c (creation, operands, runs), tma_map.c (tensor-map encoding), pull_maps.c
 * (pull mode's map slots and counters). */
#ifndef AGMM_KERNELS_GEMM_PLAN_IMPL_H
#define AGMM_KERNELS_GEMM_PLAN_IMPL_H

#include <cuda.h>
#include <cudaTypedefs.h>

#include "core/error.h"
#include "kernels/gemm/gemm_engine.h"
#include "kernels/gemm/kernels.h"
#include "kernels/gemm/params.h"
#include "kernels/gemm/policy.h"

#ifdef __cplusplus
extern "C" {
#endif

struct agmm_gemm_plan {
    agmm_gemm_desc desc;       /* pointers as last set */
    gemm_params params;        /* maps of the current pointers; ready filled per run */
    gemm_a_kind source;
    PFN_cuTensorMapEncodeTiled_v12000 encode;
    const agmm_gemm_config *config;
    const agmm_gemm_kernel *kernel;
    int ctas;
    int64_t tiles;
    void *sk_ws;               /* split-tail workspace: partials, then counters (one allocation) */
    /* Pull mode (pull_maps.c): one device allocation of AGMM_GEMM_MAP_SLOTS sets of nranks maps,
     * then the closing barrier's CTA counter and the epoch word. Per slot: the shard pointers its
     * maps are made from (slot_ptr[s][0] == NULL: empty), the use that last chose it (the least
     * recently used is refilled first), whether a stream capture chose it (then a graph refers to
     * it: never refilled with other maps), whether work outside a capture has filled it, and else
     * which capture did (only that graph's replays write it). `fill`: the encoding of a slot's
     * maps. */
    void *pull_dev;
    const void *slot_ptr[AGMM_GEMM_MAP_SLOTS][AGMM_MAX_RANKS];
    uint64_t slot_used[AGMM_GEMM_MAP_SLOTS], uses;
    int slot_pinned[AGMM_GEMM_MAP_SLOTS], slot_filled[AGMM_GEMM_MAP_SLOTS];
    unsigned long long slot_capture[AGMM_GEMM_MAP_SLOTS];
    gemm_map_set fill;
    char name[128];
};

/* tma_map.c. The driver's encoder, taken through the runtime (no libcuda link). */
agmm_status agmm_gemm_tma_init(agmm_gemm_plan *pl, agmm_error *err);
/* A row-major bf16 matrix [outer][inner] as a 2-D map with a {box_inner, box_outer} box, 128B
 * swizzle (box_inner = 64 elements = 128 bytes), zero fill out of bounds. `what` names it in a
 * failure. */
agmm_status agmm_gemm_tma_matrix(const agmm_gemm_plan *pl, CUtensorMap *map, const void *ptr, uint64_t inner,
                                 uint64_t outer, uint32_t box_inner, uint32_t box_outer, const char *what,
                                 agmm_error *err);
/* `blocks` such matrices one after another as a 3-D map with a box of one block: pull mode's
 * store map, whose rows past a block's end are clipped instead of spilling into the next. */
agmm_status agmm_gemm_tma_blocks(const agmm_gemm_plan *pl, CUtensorMap *map, const void *ptr, uint64_t inner,
                                 uint64_t outer, uint64_t blocks, uint32_t box_inner, uint32_t box_outer,
                                 const char *what, agmm_error *err);

/* pull_maps.c. Pull mode's device memory (the map slots, the counter, the epoch word) and its
 * parameters, at plan creation; freed by destroy (cudaFree of pull_dev). */
agmm_status agmm_gemm_pull_create(agmm_gemm_plan *pl, agmm_error *err);

/* pull_maps_fill.cu: enqueues the fill of `slot` with the first n maps of *maps. */
cudaError_t agmm_gemm_launch_fill_maps(CUtensorMap *slot, int n, const gemm_map_set *maps, cudaStream_t stream);

#ifdef __cplusplus
}
#endif
#endif /* AGMM_KERNELS_GEMM_PLAN_IMPL_H */
