/* The GEMM engine's config policy (plain C, no CUDA: `make CUDA=0` builds it and `make test`
 * tests it): the table of tile configs (gemm_configs.h's list), the choice of one for a problem
 * (the measured table near a measured shape, else the cost model), the schedule a config gives,
 * and the split-tail plan. Pure functions of their arguments. */
#ifndef AGMM_KERNELS_GEMM_POLICY_H
#define AGMM_KERNELS_GEMM_POLICY_H

#include <stdint.h>

#include "core/schedule.h"
#include "kernels/gemm/stream_k.h"

#ifdef __cplusplus
extern "C" {
#endif

/* One row of gemm_configs.h (which documents the fields). */
typedef struct {
    int bm, bn, stages, wgn, cluster, sk, pp;
    const char *name;
} agmm_gemm_config;

/* The device kinds the policy's tables were measured on (gemm_configs.h): Hopper with HBM3 (H100
 * SXM, 80 GB) and with HBM3e (H200, 141 GB). Same SMs, other memory and clocks: a config's rank
 * among the others moves between them. */
typedef enum { AGMM_GEMM_H100 = 0, AGMM_GEMM_H200 = 1, AGMM_GEMM_DEVICE_KINDS } agmm_gemm_device;

/* What the policy decides from: the engine's schedule (core/schedule.h) and the grid it may have. */
typedef struct {
    int64_t m;  /* rows per rank */
    int64_t n, k;
    int nranks, rank, splits;
    int ctas;   /* the SM budget: CTAs the persistent grid may take */
    int sms;    /* the device's SMs */
    int b_row_major; /* B is row-major (K x N): only configs that take it (agmm_gemm_config_takes) */
    agmm_gemm_device device; /* whose tables (agmm_gemm_device_kind) */
} agmm_gemm_problem;

/* The kind whose tables a device with `mem_bytes` of memory takes: H200 from 100 GiB up (the HBM3e
 * parts: H200, GH200 144 GB), else H100 (H100 SXM and PCIe, H100 NVL, GH200 96 GB). */
agmm_gemm_device agmm_gemm_device_kind(uint64_t mem_bytes);
/* "H100", "H200" (the suffix of the kind's tables in gemm_configs.h); "?" past the kinds. */
const char *agmm_gemm_device_name(agmm_gemm_device device);

/* The configs, in gemm_configs.h's order (their index is agmm_gemm_desc.config). */
int agmm_gemm_num_configs(void);
/* Config `config`, or NULL out of range. */
const agmm_gemm_config *agmm_gemm_config_at(int config);
/* "128x256x64/s4"; "?" out of range. */
const char *agmm_gemm_config_name(int config);
/* The index of the config called `name`, or -1. */
int agmm_gemm_config_find(const char *name);
/* 1 where config c runs with B in that layout: row-major B comes in 64-column boxes, so a config
 * whose consumers' width is not a multiple of 64 (192 x 192's 96), or a B-multicast pair whose
 * halves are not (128 x 144's 72 columns), takes column-major B only (config.cuh). */
int agmm_gemm_config_takes(const agmm_gemm_config *c, int b_row_major);
/* The columns of c's tile each consumer warpgroup computes (config.cuh's WN). */
int agmm_gemm_consumer_cols(const agmm_gemm_config *c);

/* The schedule of pb's problem in tiles of config c (group_m: the policy's L2 grouping). */
void agmm_gemm_sched_fill(agmm_sched *s, const agmm_gemm_problem *pb, const agmm_gemm_config *c);

/* A config's cost model coefficients on one device kind (gemm_configs.h's AGMM_GEMM_FITTED_*): a
 * run of it costs waves x (a_ps x BM x BN x K + b_us) + c_us. */
typedef struct {
    const char *name;
    double a_ps; /* picoseconds per multiply-add of a wave's tile */
    double b_us; /* a wave's fixed cost, microseconds */
    double c_us; /* the run's, microseconds */
} agmm_gemm_fit;

/* The cost model's config: of the configs with coefficients on pb's device kind, the one of least
 * cost (of equal costs the earlier), skipping cluster configs below 2 CTAs and configs that do not
 * take pb's B layout. */
int agmm_gemm_policy_model(const agmm_gemm_problem *pb);
/* Config `config`'s coefficients on `device`, or NULL where its table has no row for it. */
const agmm_gemm_fit *agmm_gemm_config_fit(agmm_gemm_device device, int config);
/* The measured table's config (gemm_configs.h, pb's device kind): that of the nearest measured
 * shape within AGMM_GEMM_MEASURED_RADIUS, when the plan has the whole GPU as when it was measured
 * (or all but the one SM that fused leaves free) and the config takes pb's B layout; -1 when none
 * applies. */
int agmm_gemm_policy_measured(const agmm_gemm_problem *pb);
/* The policy: measured, else the model. */
int agmm_gemm_policy_choose(const agmm_gemm_problem *pb);

/* The config scatter mode runs for `config` (the scatter epilogue stores whole tiles, and holds more
 * state than epi_store): itself; for a split-tail or stream-K config its whole-tile twin; for a tile
 * of more than AGMM_GEMM_SCATTER_MAX_ACC accumulators per consumer thread, the widest whole-tile
 * config of the same rows, consumers and cluster that has at most that many. */
int agmm_gemm_scatter_config(int config);
/* Tiles of an m x n output in config's tiles (the scatter mode's flags are per tile). */
int64_t agmm_gemm_grid_tiles(int config, int64_t m, int64_t n);

/* Split-tail configs: which tiles of the last waves to cut into how many K pieces. On return,
 * tiles [*first, tiles) are cut into *split pieces each; *first = tiles and *split = 1: none. */
void agmm_gemm_plan_split_tail(int64_t tiles, int ctas, int k_blocks, int64_t *first, int *split);

/* Stream-K configs (stream_k.h): which last tiles to deal as one sequence of K blocks to all
 * `ctas` CTAs of the grid (the last round's r = tiles % ctas, or r + ctas), when the model says
 * that beats whole tiles; bm, bn: the tile, which sets the cost of the fix-up's fp32 partials.
 * On return s->tiles = 0 where it does not (s->first = tiles). */
void agmm_gemm_plan_stream_k(int64_t tiles, int ctas, int k_blocks, int bm, int bn, agmm_stream_k *s);

#define AGMM_GEMM_MEASURED_RADIUS 0.1 /* summed |log2| distance of rows, n and k */
#define AGMM_GEMM_SPLIT_MAX 16        /* most K pieces a split tile is cut into */
/* The scatter epilogue's accumulators per thread (ptxas: 192, 256 x 192's, spilled 612 bytes; 144,
 * 192 x 192's, none). */
#define AGMM_GEMM_SCATTER_MAX_ACC 144

#ifdef __cplusplus
}
#endif
#endif /* AGMM_KERNELS_GEMM_POLICY_H */
