/* The GEMM engine's kernel parameter block (internal; plain C, shared by the host plan and the
 * kernels). It travels by value as one __grid_constant__ parameter: tensor maps must live in
 * parameter (or constant/global) memory for TMA to read them, and a run already enqueued keeps
 * the maps it was launched with, whatever the host encodes afterwards.
 *
 * One common part, and one struct per A source (a_source.cuh): each source's kernel reads only
 * its own member of the union. */
#ifndef AGMM_KERNELS_GEMM_PARAMS_H
#define AGMM_KERNELS_GEMM_PARAMS_H

#include <stdint.h>

#include <cuda.h>

#include "agmm.h"
#include "core/schedule.h"
#include "kernels/dev_error.h"
#include "kernels/gemm/stream_k.h"

/* The engine's fixed shape: K blocks of 64 (one 128-byte swizzle row of bf16), 384 threads = 3
 * warpgroups (one producer, two consumers). */
#define GEMM_BK 64
#define GEMM_THREADS 384

/* Where a tile's A comes from: the only thing the engine's modes change. */
typedef enum {
    GEMM_A_PLAIN = 0,  /* the gathered A (a plain GEMM's A); local tiles from the shard if given */
    GEMM_A_CHUNKS = 1, /* as plain, each non-local tile after its chunk's flag (fused) */
    GEMM_A_PEERS = 2,  /* each rank's rows from that rank's shard after its ready word (pull) */
    GEMM_A_SOURCES = 3
} gemm_a_kind;

/* What every run needs. */
typedef struct {
    CUtensorMap map_b;      /* col-major: dims {k, n}, box {64, BN}; row-major: {n, k}, box {64, 64} */
    CUtensorMap map_b_half; /* col-major B with clusters: box {64, BN/2}, each CTA's multicast half */
    CUtensorMap map_c;      /* C for epi_store's bulk stores: dims {n, rows of C}, box {64, 16} (c_tma = 1) */
    agmm_sched sched;
    uint16_t *c;            /* bf16 out, row stride n */
    int64_t n;
    int64_t c_rows;         /* rows of C: where a bulk store may run past a tile's last row */
    int c_tma;              /* map_c is set: N % 8 == 0 (16-byte aligned rows), not scatter mode */
    int k_blocks;           /* ceil(k / 64); the K tail is zero-filled by TMA */
    uint64_t delay_ns;      /* test hook: each producer starts its loads this late (0: none) */
    int pairs_coupled;      /* clusters of 2: both CTAs of a pair walk as many units (an even tile count), so
                             * each unit may share B (tile_sched.cuh; plan.c, pair_grid) */
    /* Split-tail (SK) configs only: tiles from sk_first on are cut into sk_split K pieces, reduced
     * through sk_ws (fp32 partials) and sk_ctr (arrival counters, zero between runs). */
    int64_t sk_first;
    int sk_split;
    /* Stream-K (sk = 2) configs only: the plan of stream_k.h (stk.tiles = 0: whole tiles); the
     * same workspace and counters as the split tail's. */
    agmm_stream_k stk;
    float *sk_ws;
    uint32_t *sk_ctr;
} gemm_core;

/* A bounded wait's bound, and where it records its expiry. */
typedef struct {
    agmm_dev_error *err;
    uint64_t timeout_ns;
} gemm_wait;

typedef struct {
    CUtensorMap map_a;      /* the gathered A: dims {k, nranks*m}, box {64, BM}, 128B swizzle */
    CUtensorMap map_shard;  /* this rank's shard, read by its own (local) tiles: dims {k, m}, same box */
    int has_shard;          /* 0: local tiles read map_a too */
    /* copy_local (gemm_engine.h): the shard, its rows of the gathered A, its size in 16-byte units
     * (0: no copy) and each CTA's share of them (the last CTAs' may be short or empty) */
    const void *copy_src;
    void *copy_dst;
    int64_t copy_vecs, copy_per_cta;
} gemm_a_plain;

typedef struct {
    gemm_a_plain a;         /* the loads, as plain */
    uint32_t *flags;        /* nranks*splits chunk flags, then the producers' count */
    uint32_t ready;         /* the value a chunk flag must reach */
    gemm_wait wait;
} gemm_a_chunks;

typedef struct {
    CUtensorMap map_store;  /* the gathered A, written: dims {k, m, nranks}, box {64, BM, 1} */
    CUtensorMap map_shard;  /* this rank's shard, as in plain */
    int has_shard;
    const CUtensorMap *peer_maps; /* [r]: rank r's shard, dims {k, m}, box {64, BM} (a map slot) */
    uint32_t *const *signals;     /* [r]: rank r's signal words (AGMM_PULL_READY, AGMM_PULL_DONE + q) */
    uint32_t *close_ctr;          /* the closing barrier's CTA counter (zero between runs) */
    uint32_t *epoch;              /* runs completed */
    gemm_wait wait;
} gemm_a_peers;

/* The scatter epilogue's (epi_scatter.cuh: the fused matmul_reduce_scatter and matmul_all_reduce);
 * the reduce-scatter's row split is the schedule's (core.sched.block_rows). */
typedef struct {
    int nranks, rank;
    int all;                    /* every rank owns every row (all-reduce) */
    void *const *slots;         /* [q]: rank q's W slots (slot p: rank p's partial of q's rows) */
    uint32_t *const *signals;   /* [q]: rank q's tile flags [tile * W + src], then done words [tiles * W + owner] */
    uint64_t slot_bytes;
    uint32_t *epoch;            /* runs completed (the plan's device memory) */
    uint32_t *close_ctr;        /* consumer warps done in this run (zero between runs) */
    gemm_wait wait;
} gemm_scatter;

typedef struct {
    gemm_core core;
    union {
        gemm_a_plain plain;
        gemm_a_chunks chunks;
        gemm_a_peers peers;
    } a;
    gemm_scatter scatter;       /* the scatter epilogue only */
} gemm_params;

/* Pull mode: one map slot's contents, the parameter of the kernel that fills the slot
 * (pull_maps_fill.cu): 8 KB at AGMM_MAX_RANKS, within the 32 KB of parameters sm_70 and later
 * accept. A parameter, not a copy from host memory, so that a fill captured in a CUDA graph
 * replays these bytes whatever the host has encoded since. */
typedef struct {
    CUtensorMap map[AGMM_MAX_RANKS];
} gemm_map_set;

#endif /* AGMM_KERNELS_GEMM_PARAMS_H */
