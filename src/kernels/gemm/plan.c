/* The GEMM engine's plans (gemm_engine.h): the descriptor's checks, the config (policy.h) and
 * kernel (kernels.h) a plan runs, its grid, its operands' tensor maps, and the launch. */
#ifdef AGMM_HAVE_CUDA
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/cuda_check.h"
#include "kernels/gemm/plan_impl.h"

/* The kernel table (kernels.h), by A source and B layout. */
static const agmm_gemm_kernel *const k_kernels[GEMM_A_SOURCES][2] = {
    [GEMM_A_PLAIN] = {agmm_gemm_kernels_plain_bcol, agmm_gemm_kernels_plain_brow},
    [GEMM_A_CHUNKS] = {agmm_gemm_kernels_chunks_bcol, agmm_gemm_kernels_chunks_brow},
    [GEMM_A_PEERS] = {agmm_gemm_kernels_peers_bcol, agmm_gemm_kernels_peers_brow},
};
/* Scatter mode's (plain A, the scatter epilogue), by B layout. */
static const agmm_gemm_kernel *const k_scatter[2] = {agmm_gemm_kernels_scatter_bcol, agmm_gemm_kernels_scatter_brow};

/* Rows of the A the loads read: the gathered A's, or scatter mode's whole A_r. */
static int64_t a_rows(const agmm_gemm_desc *d)
{
    return d->scatter.on ? d->m : d->nranks * d->m;
}

/* Scatter mode's own arguments (the common ones are checked by check_desc). */
static agmm_status check_scatter(const agmm_gemm_desc *d, agmm_error *err)
{
    const agmm_gemm_scatter *sc = &d->scatter;
    if (d->splits != 1 || d->pull || d->chunk_flags || d->a_local)
        return AGMM_FAIL(err, AGMM_ERR_INVALID_ARG,
                         "gemm engine: scatter mode takes splits=1 and no pull mode, chunk_flags or a_local (splits=%d "
                         "pull=%d chunk_flags=%p a_local=%p)",
                         d->splits, d->pull, (void *)d->chunk_flags, d->a_local);
    if (d->nranks > AGMM_MAX_RANKS)
        return AGMM_FAIL(err, AGMM_ERR_INVALID_ARG, "gemm engine: scatter mode: nranks=%d: at most %d ranks",
                         d->nranks, AGMM_MAX_RANKS);
    const int64_t slot_rows = sc->all ? d->m : (d->m + d->nranks - 1) / d->nranks;
    if (d->nranks > 1 && (!sc->slots || !sc->signals || sc->slot_bytes % 16 != 0 ||
                          sc->slot_bytes < (uint64_t)(slot_rows * d->n) * 2))
        return AGMM_FAIL(err, AGMM_ERR_INVALID_ARG,
                         "gemm engine: scatter mode with %d ranks needs the slots and signals tables and slot_bytes a "
                         "multiple of 16 holding %lld x n bf16 (slots=%p signals=%p slot_bytes=%llu)",
                         d->nranks, (long long)slot_rows, (void *)sc->slots, (void *)sc->signals,
                         (unsigned long long)sc->slot_bytes);
    return AGMM_SUCCESS;
}

/* Every argument the engine takes from its caller, checked before anything is allocated; each
 * message names the argument and what is allowed. */
static agmm_status check_desc(const agmm_gemm_desc *d, agmm_error *err)
{
    if (d->m < 1 || d->n < 1)
        return AGMM_FAIL(err, AGMM_ERR_INVALID_ARG,
                         "gemm engine: m=%lld, n=%lld: rows per rank and columns must be >= 1", (long long)d->m,
                         (long long)d->n);
    if (d->k < 8 || d->k % 8 != 0)
        return AGMM_FAIL(err, AGMM_ERR_INVALID_ARG,
                         "gemm engine: K=%lld is not a positive multiple of 8: rows of A must be 16-byte aligned "
                         "for TMA",
                         (long long)d->k);
    if (d->nranks < 1 || d->rank < 0 || d->rank >= d->nranks)
        return AGMM_FAIL(err, AGMM_ERR_INVALID_ARG, "gemm engine: rank=%d of nranks=%d: needs 0 <= rank < nranks",
                         d->rank, d->nranks);
    if (d->splits < 1 || d->splits > d->m)
        return AGMM_FAIL(err, AGMM_ERR_INVALID_ARG, "gemm engine: splits=%d: must be 1..m (m=%lld)", d->splits,
                         (long long)d->m);
    if (d->b_layout != AGMM_LAYOUT_COL_MAJOR && d->b_layout != AGMM_LAYOUT_ROW_MAJOR)
        return AGMM_FAIL(err, AGMM_ERR_INVALID_ARG, "gemm engine: b_layout=%d: must be column- or row-major",
                         (int)d->b_layout);
    if (d->b_layout == AGMM_LAYOUT_ROW_MAJOR && d->n % 8 != 0)
        return AGMM_FAIL(err, AGMM_ERR_UNSUPPORTED,
                         "gemm engine: N=%lld: a row-major B needs N %% 8 == 0 (16-byte rows for TMA)",
                         (long long)d->n);
    if (a_rows(d) > INT32_MAX || d->n > INT32_MAX || d->k > INT32_MAX)
        return AGMM_FAIL(err, AGMM_ERR_UNSUPPORTED,
                         "gemm engine: rows of A=%lld, n=%lld, k=%lld: dimensions past 2^31 are not supported",
                         (long long)a_rows(d), (long long)d->n, (long long)d->k);
    if (d->scatter.on) {
        agmm_status st = check_scatter(d, err);
        if (st != AGMM_SUCCESS)
            return st;
    }
    if (d->pull && (d->chunk_flags || d->nranks > AGMM_MAX_RANKS))
        return AGMM_FAIL(err, AGMM_ERR_INVALID_ARG,
                         "gemm engine: pull mode takes no chunk_flags and at most %d ranks (chunk_flags=%p, nranks=%d)",
                         AGMM_MAX_RANKS, (void *)d->chunk_flags, d->nranks);
    if (d->copy_local && !d->chunk_flags)
        return AGMM_FAIL(err, AGMM_ERR_INVALID_ARG,
                         "gemm engine: copy_local takes the chunk-flag mode (chunk_flags set; pull=%d, scatter=%d): "
                         "pull mode stores the gathered A itself, scatter mode has none, a plain GEMM copies nothing",
                         d->pull, d->scatter.on);
    if (d->pull && d->nranks > 1 && !d->signals)
        return AGMM_FAIL(err, AGMM_ERR_INVALID_ARG, "gemm engine: pull mode with %d ranks needs the signals table",
                         d->nranks);
    /* The waits: chunk flags, pull's ready words and closing barrier, or scatter mode's flags. */
    const int waits = d->chunk_flags || ((d->pull || d->scatter.on) && d->nranks > 1);
    const char *what = d->chunk_flags ? "chunk flags"
                       : d->pull      ? "pull mode's ready words and closing barrier"
                                      : "scatter mode's tile flags and free slots";
    if (waits && !d->dev_error)
        return AGMM_FAIL(err, AGMM_ERR_INVALID_ARG,
                         "gemm engine: dev_error is NULL: %s wait for peers, and an expired wait is recorded there",
                         what);
    if (waits && d->timeout_ns == 0)
        return AGMM_FAIL(err, AGMM_ERR_INVALID_ARG,
                         "gemm engine: timeout_ns=0: %s wait for peers, bounded by the world's timeout (> 0); the "
                         "engine has no default",
                         what);
    if (d->config < -1 || d->config >= agmm_gemm_num_configs())
        return AGMM_FAIL(err, AGMM_ERR_INVALID_ARG,
                         "gemm engine: config=%d: not a tile config (0..%d, or -1: the policy chooses)", d->config,
                         agmm_gemm_num_configs() - 1);
    return AGMM_SUCCESS;
}

static int misaligned(const void *p)
{
    return ((uintptr_t)p & 15u) != 0;
}

/* The launch of the plan's kernel on `ctas` CTAs (clusters of the config's size). */
static void launch_config(const agmm_gemm_plan *pl, cudaLaunchConfig_t *cfg, cudaLaunchAttribute *attr, int ctas,
                          cudaStream_t stream)
{
    memset(cfg, 0, sizeof *cfg);
    memset(attr, 0, sizeof *attr);
    cfg->gridDim = (dim3){(unsigned)ctas, 1, 1};
    cfg->blockDim = (dim3){GEMM_THREADS, 1, 1};
    cfg->dynamicSmemBytes = pl->kernel->smem_bytes;
    cfg->stream = stream;
    /* A cluster attribute only for pairs: launched with clusters of one, the engine ran 1% slower on
     * the mid and large shapes (docs/results, seventeenth session). */
    if (pl->config->cluster == 1)
        return;
    attr->id = cudaLaunchAttributeClusterDimension;
    attr->val.clusterDim.x = (unsigned)pl->config->cluster;
    attr->val.clusterDim.y = 1;
    attr->val.clusterDim.z = 1;
    cfg->attrs = attr;
    cfg->numAttrs = 1;
}

/* The loads' A (plain and chunks sources); NULL for pull, whose `a` is written. */
static gemm_a_plain *plain_of(agmm_gemm_plan *pl)
{
    if (pl->source == GEMM_A_PLAIN)
        return &pl->params.a.plain;
    return pl->source == GEMM_A_CHUNKS ? &pl->params.a.chunks.a : NULL;
}

agmm_status agmm_gemm_plan_set_ptrs(agmm_gemm_plan *pl, const void *a, const void *a_local, const void *b, void *c,
                                    agmm_error *err)
{
    agmm_status st = AGMM_SUCCESS;
    agmm_gemm_desc *d = &pl->desc;
    gemm_core *core = &pl->params.core;
    gemm_a_plain *plain = plain_of(pl);
    const uint32_t bm = (uint32_t)pl->config->bm, bn = (uint32_t)pl->config->bn;
    const void *ops[4] = {a, a_local, b, c};
    static const char *const names[4] = {"a", "a_local", "b", "c"};
    for (int i = 0; i < 4; i++)
        if (misaligned(ops[i]))
            return AGMM_FAIL(err, AGMM_ERR_INVALID_ARG,
                             "gemm engine: %s=%p is not 16-byte aligned: TMA and the engine's stores need 16-byte "
                             "aligned operands",
                             names[i], ops[i]);
    if (a && a != d->a) {
        /* Pull mode stores to the gathered A, one shard's block at a time. */
        if (plain)
            AGMM_TRY(st, agmm_gemm_tma_matrix(pl, &plain->map_a, a, (uint64_t)d->k, (uint64_t)a_rows(d), GEMM_BK, bm,
                                              "A", err));
        else
            AGMM_TRY(st, agmm_gemm_tma_blocks(pl, &pl->params.a.peers.map_store, a, (uint64_t)d->k, (uint64_t)d->m,
                                              (uint64_t)d->nranks, GEMM_BK, bm, "gathered A (store)", err));
        if (d->copy_local) /* this rank's rows of the gathered A */
            plain->copy_dst = (char *)a + (size_t)d->rank * (size_t)d->m * (size_t)d->k * 2;
        d->a = a;
    }
    if (a_local && a_local != d->a_local) {
        CUtensorMap *map = plain ? &plain->map_shard : &pl->params.a.peers.map_shard;
        AGMM_TRY(st,
                 agmm_gemm_tma_matrix(pl, map, a_local, (uint64_t)d->k, (uint64_t)d->m, GEMM_BK, bm, "A shard", err));
        if (plain)
            plain->has_shard = 1;
        else
            pl->params.a.peers.has_shard = 1;
        if (d->copy_local)
            plain->copy_src = a_local;
        d->a_local = a_local;
    }
    if (b && b != d->b) {
        if (d->b_layout == AGMM_LAYOUT_COL_MAJOR) { /* B^T: n rows of k */
            AGMM_TRY(st, agmm_gemm_tma_matrix(pl, &core->map_b, b, (uint64_t)d->k, (uint64_t)d->n, GEMM_BK, bn,
                                              "B^T", err));
            if (pl->config->cluster == 2)
                AGMM_TRY(st, agmm_gemm_tma_matrix(pl, &core->map_b_half, b, (uint64_t)d->k, (uint64_t)d->n, GEMM_BK,
                                                  bn / 2, "B^T half", err));
        } else { /* B: k rows of n, loaded in 64 x 64 boxes (128 B of n per box row) */
            AGMM_TRY(st,
                     agmm_gemm_tma_matrix(pl, &core->map_b, b, (uint64_t)d->n, (uint64_t)d->k, 64, GEMM_BK, "B", err));
        }
        d->b = b;
    }
    if (c && c != d->c) {
        /* epi_store's bulk stores: boxes of 16 rows x 64 columns; C's rows must be 16-byte aligned. */
        core->c_tma = !d->scatter.on && d->n % 8 == 0;
        if (core->c_tma)
            AGMM_TRY(st, agmm_gemm_tma_matrix(pl, &core->map_c, c, (uint64_t)d->n, (uint64_t)a_rows(d), 64, 16, "C",
                                              err));
        d->c = c;
        core->c = (uint16_t *)c;
    }
fail:
    return st;
}

void agmm_gemm_plan_set_delay(agmm_gemm_plan *pl, uint64_t delay_ns)
{
    pl->params.core.delay_ns = delay_ns;
}

/* Split-tail and stream-K configs: the plan of policy.h and its workspace (fp32 partials of every
 * piece, then 8 counters per split tile, zero). Returns the units. */
static agmm_status plan_split(agmm_gemm_plan *pl, int budget, int64_t *units, char *what, size_t len, agmm_error *err)
{
    agmm_status st = AGMM_SUCCESS;
    gemm_core *p = &pl->params.core;
    const int bm = pl->config->bm, bn = pl->config->bn;
    int64_t sk_tiles, pieces; /* pieces: workspace indexes */
    if (pl->config->sk == 2) {
        agmm_gemm_plan_stream_k(pl->tiles, budget, p->k_blocks, bm, bn, &p->stk);
        sk_tiles = p->stk.tiles;
        pieces = sk_tiles + budget; /* stream_k.h: below tiles + ctas */
        *units = sk_tiles ? p->stk.first + (int64_t)p->stk.segs * budget : pl->tiles;
        snprintf(what, len, " stk=%lld/%d", (long long)sk_tiles, budget);
    } else {
        agmm_gemm_plan_split_tail(pl->tiles, budget, p->k_blocks, &p->sk_first, &p->sk_split);
        sk_tiles = pl->tiles - p->sk_first;
        pieces = sk_tiles * p->sk_split;
        *units = p->sk_first + pieces;
        snprintf(what, len, " split=%lldx%d", (long long)sk_tiles, p->sk_split);
    }
    if (sk_tiles) {
        const size_t ws_bytes = (size_t)pieces * bm * bn * 4;
        const size_t ctr_bytes = (size_t)sk_tiles * 8 * 4;
        AGMM_CUDA_TRY(st, err, cudaMalloc(&pl->sk_ws, ws_bytes + ctr_bytes));
        AGMM_CUDA_TRY(st, err, cudaMemset((char *)pl->sk_ws + ws_bytes, 0, ctr_bytes));
        p->sk_ws = (float *)pl->sk_ws;
        p->sk_ctr = (uint32_t *)((char *)pl->sk_ws + ws_bytes);
    }
fail:
    return st;
}

/* Scatter mode: the reduce-scatter visit of the world's row split (the all-reduce keeps the plain
 * visit, the same on every rank), and the epilogue's parameters with its epoch word and closing
 * counter (device memory, zero). */
static agmm_status scatter_create(agmm_gemm_plan *pl, agmm_error *err)
{
    agmm_status st = AGMM_SUCCESS;
    const agmm_gemm_desc *d = &pl->desc;
    agmm_sched *s = &pl->params.core.sched;
    gemm_scatter *x = &pl->params.scatter;
    if (!d->scatter.all) {
        s->nranks = d->nranks;
        s->rank = d->rank;
        s->block_rows = (d->m + d->nranks - 1) / d->nranks;
        agmm_sched_init(s);
    }
    x->nranks = d->nranks;
    x->rank = d->rank;
    x->all = d->scatter.all;
    AGMM_CUDA_TRY(st, err, cudaMalloc(&pl->scatter_dev, 2 * sizeof(uint32_t)));
    AGMM_CUDA_TRY(st, err, cudaMemset(pl->scatter_dev, 0, 2 * sizeof(uint32_t)));
    x->slots = d->scatter.slots;
    x->signals = d->scatter.signals;
    x->slot_bytes = d->scatter.slot_bytes;
    x->epoch = (uint32_t *)pl->scatter_dev;
    x->close_ctr = x->epoch + 1;
    x->wait.err = d->dev_error;
    x->wait.timeout_ns = d->timeout_ns;
fail:
    return st;
}

/* Cluster pairs: an even grid, no more pairs than can be resident at once (a persistent CTA
 * that waits for a free SM would only add a tail), and whether they are coupled: with an even
 * tile count, CTAs 2i and 2i + 1 of an even grid take units 2j and 2j + 1, always as many, so
 * each can release its partner's slots and share B unit by unit (tile_sched.cuh). */
static agmm_status pair_grid(agmm_gemm_plan *pl, int budget, agmm_error *err)
{
    pl->params.core.pairs_coupled = pl->tiles % 2 == 0;
    int max_clusters = 0;
    cudaLaunchConfig_t cfg;
    cudaLaunchAttribute attr;
    launch_config(pl, &cfg, &attr, budget & ~1, 0);
    cudaError_t ce = cudaOccupancyMaxActiveClusters(&max_clusters, pl->kernel->fn, &cfg);
    if (ce != cudaSuccess || max_clusters < 1)
        return AGMM_FAIL(err, AGMM_ERR_CUDA, "gemm engine: cudaOccupancyMaxActiveClusters(%s) -> %s (%d clusters)",
                         pl->config->name, cudaGetErrorString(ce), max_clusters);
    pl->ctas = pl->desc.copy_local ? budget : (int)((pl->tiles + 1) & ~1LL); /* copy_local: every CTA copies */
    if (pl->ctas > (budget & ~1))
        pl->ctas = budget & ~1;
    if (pl->ctas > 2 * max_clusters)
        pl->ctas = 2 * max_clusters;
    return AGMM_SUCCESS;
}

agmm_gemm_device agmm_gemm_current_device(void)
{
    size_t free_bytes = 0, total_bytes = 0;
    return cudaMemGetInfo(&free_bytes, &total_bytes) == cudaSuccess ? agmm_gemm_device_kind(total_bytes)
                                                                     : AGMM_GEMM_H100;
}

agmm_status agmm_gemm_plan_create(agmm_gemm_plan **out, const agmm_gemm_desc *d, agmm_error *err)
{
    agmm_status st = AGMM_SUCCESS;
    agmm_gemm_plan *pl = NULL;
    *out = NULL;
    AGMM_TRY(st, check_desc(d, err));
    int dev = 0, sms = 0, major = 0;
    AGMM_CUDA_TRY(st, err, cudaGetDevice(&dev));
    AGMM_CUDA_TRY(st, err, cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
    AGMM_CUDA_TRY(st, err, cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev));
    if (major != 9)
        return AGMM_FAIL(err, AGMM_ERR_UNSUPPORTED, "gemm engine: needs an sm_90 GPU (this one is sm_%d)", major * 10);

    pl = calloc(1, sizeof *pl);
    if (!pl)
        return AGMM_FAIL(err, AGMM_ERR_NO_MEMORY, "gemm engine: out of host memory for a plan");
    AGMM_TRY(st, agmm_gemm_tma_init(pl, err));

    const int budget = d->max_ctas > 0 && d->max_ctas < sms ? d->max_ctas : sms;
    /* Scatter mode's GEMM is a plain one of all m rows (its visit only reorders the tiles). */
    const int sc = d->scatter.on;
    const agmm_gemm_problem pb = {.m = d->m, .n = d->n, .k = d->k, .nranks = sc ? 1 : d->nranks,
                                  .rank = sc ? 0 : d->rank, .splits = d->splits, .ctas = budget, .sms = sms,
                                  .b_row_major = d->b_layout == AGMM_LAYOUT_ROW_MAJOR,
                                  .device = agmm_gemm_current_device()};
    const int config = d->config >= 0 ? d->config : sc ? agmm_gemm_scatter_config(agmm_gemm_policy_choose(&pb))
                                                       : agmm_gemm_policy_choose(&pb);
    pl->config = agmm_gemm_config_at(config);
    const int scatter_config = agmm_gemm_scatter_config(config);
    if (sc && scatter_config != config) {
        st = AGMM_FAIL(err, AGMM_ERR_INVALID_ARG,
                       "gemm engine: config=%d (%s): scatter mode stores whole tiles of at most %d accumulators per "
                       "thread, without a split tail or stream-K (config %d, %s, is the nearest that does)",
                       config, pl->config->name, AGMM_GEMM_SCATTER_MAX_ACC, scatter_config,
                       agmm_gemm_config_name(scatter_config));
        goto fail;
    }
    if (!agmm_gemm_config_takes(pl->config, pb.b_row_major)) {
        st = AGMM_FAIL(err, AGMM_ERR_INVALID_ARG,
                       "gemm engine: config=%d (%s) takes column-major B only: each consumer's %d columns are not a "
                       "whole number of the 64-column boxes a row-major B is loaded in",
                       config, pl->config->name, agmm_gemm_consumer_cols(pl->config));
        goto fail;
    }
    if (pl->config->cluster == 2 && budget < 2) {
        st = AGMM_FAIL(err, AGMM_ERR_INVALID_ARG, "gemm engine: config %s needs at least 2 CTAs (max_ctas=%d)",
                       pl->config->name, d->max_ctas);
        goto fail;
    }
    pl->source = d->pull ? GEMM_A_PEERS : d->chunk_flags ? GEMM_A_CHUNKS : GEMM_A_PLAIN;
    const int b_mn = d->b_layout == AGMM_LAYOUT_ROW_MAJOR;
    pl->kernel = sc ? &k_scatter[b_mn][config] : &k_kernels[pl->source][b_mn][config];
    AGMM_CUDA_TRY(st, err,
                  cudaFuncSetAttribute(pl->kernel->fn, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                       (int)pl->kernel->smem_bytes));

    pl->desc = *d;
    pl->desc.a = pl->desc.a_local = pl->desc.b = NULL;
    pl->desc.c = NULL;
    if (pl->source == GEMM_A_PEERS)
        AGMM_TRY(st, agmm_gemm_pull_create(pl, err));
    if (pl->source == GEMM_A_CHUNKS) {
        gemm_a_chunks *ch = &pl->params.a.chunks;
        ch->flags = d->chunk_flags;
        ch->wait.err = d->dev_error;
        ch->wait.timeout_ns = d->timeout_ns;
    }
    gemm_core *p = &pl->params.core;
    agmm_gemm_sched_fill(&p->sched, &pb, pl->config);
    if (sc)
        AGMM_TRY(st, scatter_create(pl, err));
    pl->tiles = agmm_sched_num_tiles(&p->sched);
    /* The device decode divides by multipliers alone (core/schedule.h), which every divider of a
     * schedule of fewer than 2^31 tiles has. */
    if (pl->tiles > INT32_MAX) {
        st = AGMM_FAIL(err, AGMM_ERR_UNSUPPORTED,
                       "gemm engine: rows of A=%lld, n=%lld: %lld tiles of %dx%d; at most 2^31 - 1 tiles are supported",
                       (long long)a_rows(d), (long long)d->n, (long long)pl->tiles, pl->config->bm, pl->config->bn);
        goto fail;
    }
    p->n = d->n;
    p->c_rows = a_rows(d);
    p->k_blocks = (int)((d->k + GEMM_BK - 1) / GEMM_BK);
    p->sk_first = pl->tiles;
    p->sk_split = 1;
    int64_t units = pl->tiles;
    char split[48] = "";
    if (pl->config->sk)
        AGMM_TRY(st, plan_split(pl, budget, &units, split, sizeof split, err));
    /* copy_local: every CTA of the budget copies a share, also those without a unit (the copy
     * runs on 28 CTAs of 132 at 896^3 took longer than the GEMM: docs/results). */
    pl->ctas = (int)(units < budget && !d->copy_local ? units : budget);
    if (pl->config->cluster == 2)
        AGMM_TRY(st, pair_grid(pl, budget, err));
    if (d->copy_local) { /* the chunk-flag mode (check_desc); the pointers come with set_ptrs */
        gemm_a_plain *plain = &pl->params.a.chunks.a;
        plain->copy_vecs = d->m * d->k / 8; /* k % 8 == 0: whole 16-byte units */
        plain->copy_per_cta = (plain->copy_vecs + pl->ctas - 1) / pl->ctas;
    }
    AGMM_TRY(st, agmm_gemm_plan_set_ptrs(pl, d->a, d->a_local, d->b, d->c, err));
    snprintf(pl->name, sizeof pl->name, "%s%s ctas=%d tiles=%lld%s%s", pl->config->name, b_mn ? " B-row" : "",
             pl->ctas, (long long)pl->tiles, split,
             d->pull ? " pull" : !sc ? "" : d->scatter.all ? " scatter-all" : " scatter");
    *out = pl;
    return AGMM_SUCCESS;
fail:
    agmm_gemm_plan_destroy(pl);
    return st;
}

agmm_status agmm_gemm_run(agmm_gemm_plan *pl, uint32_t ready, cudaStream_t stream, agmm_error *err)
{
    agmm_status st = AGMM_SUCCESS;
    const agmm_gemm_desc *d = &pl->desc;
    const char *missing = !d->a ? "a" : !d->b ? "b" : !d->c ? "c" : d->copy_local && !d->a_local ? "a_local" : NULL;
    if (missing)
        return AGMM_FAIL(err, AGMM_ERR_INVALID_ARG,
                         "gemm engine: operand %s is not set: give it at plan creation or with agmm_gemm_plan_set_ptrs",
                         missing);
    if (pl->source == GEMM_A_PEERS && !pl->params.a.peers.peer_maps)
        return AGMM_FAIL(err, AGMM_ERR_INVALID_ARG,
                         "gemm engine: pull mode has no peers' shards yet: call agmm_gemm_plan_set_peers first");
    if (pl->source == GEMM_A_CHUNKS)
        pl->params.a.chunks.ready = ready;
    void *args[] = {&pl->params};
    cudaLaunchConfig_t cfg;
    cudaLaunchAttribute attr;
    launch_config(pl, &cfg, &attr, pl->ctas, stream);
    AGMM_CUDA_TRY(st, err, cudaLaunchKernelExC(&cfg, pl->kernel->fn, args));
    AGMM_CUDA_TRY(st, err, cudaGetLastError());
fail:
    return st;
}

void agmm_gemm_plan_destroy(agmm_gemm_plan *pl)
{
    if (!pl)
        return;
    cudaFree(pl->sk_ws);
    cudaFree(pl->pull_dev);
    cudaFree(pl->scatter_dev);
    free(pl);
}

const char *agmm_gemm_plan_describe(const agmm_gemm_plan *pl)
{
    return pl ? pl->name : "(null)";
}
#endif /* AGMM_HAVE_CUDA */
