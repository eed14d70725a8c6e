/* GPU tests of the ag_matmul backends (every one of the library's table that a world offers:
 * `nccl`, `ce`, `fused`, `pull`, ...), and the all_reduce `nccl` backends.
 *
 * Each ag_matmul case runs two calls on every rank with fresh inputs (A, then -A) and outputs
 * poisoned with NaN before each: the gathered A must equal the shards bit for bit; C is compared
 * with the fp64 reference by relative Frobenius error (<= 1e-2: bf16 output rounding alone gives
 * ~2e-3) and the second call's C must be exactly minus the first's (negation is exact in every
 * rounding step, so this checks the second epoch with no second reference). Shapes include odd
 * M and N, splits that do not divide M, and both B layouts. At W = 1 (real NCCL) ce and nccl
 * must also agree exactly, and every backend runs once more on the legacy default stream.
 * Emulated worlds of 2 to 8 ranks share one GPU (nccl is skipped there, loudly, as the library
 * reports). */
#include <math.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime_api.h>

#include "api/agmm_ext.h"
#include "core/numeric.h"
#include "core/stats.h"
#include "backends/backend.h"
#include "cpu/reference.h"
#include "gpu_tests.h"
#include "../harness.h"

#define TOL 1e-2

typedef struct {
    int64_t m, n, k;
    agmm_layout layout;
    int splits;
} mm_shape;

typedef struct {
    mm_shape sh;
    const char *backend;
    int nranks;
    int legacy;                /* W = 1: run on the legacy default stream (PyTorch's current one) */
    const uint16_t *a[2];      /* W*m*k, the shards in rank order: call 0 uses a[0], call 1 a[1] = -a[0] */
    const uint16_t *b;         /* k x n in sh.layout, the same on every rank */
    uint16_t *ag[2][AGMM_MAX_RANKS];
    uint16_t *c[2][AGMM_MAX_RANKS];
    gpu_rank_results res;
} mm_job;

static void fill_bf16(uint16_t *x, size_t count, uint64_t seed)
{
    uint64_t st = seed;
    for (size_t i = 0; i < count; i++) {
        float v = agmm_rng_uniform(&st);
        x[i] = agmm_f32_to_bf16(v == 0.0f ? 0.5f : v);
    }
}

static agmm_status mm_rank(agmm_ctx *ctx, void *arg)
{
    mm_job *j = arg;
    gpu_rank_results *res = &j->res;
    int rank = agmm_ctx_rank(ctx);
    const mm_shape *sh = &j->sh;
    size_t shard = (size_t)(sh->m * sh->k), ag = (size_t)j->nranks * shard;
    size_t c = (size_t)((int64_t)j->nranks * sh->m * sh->n), b = (size_t)(sh->k * sh->n);
    agmm_plan *plan = NULL;
    cudaStream_t s = NULL;
    void *d_b = NULL, *d_ag = NULL, *d_c = NULL;
    uint16_t *h_shard = NULL, *h_ag = NULL, *h_c = NULL;
    j->res.ok[rank] = 1;
    agmm_ag_matmul_desc d = {.m = sh->m, .n = sh->n, .k = sh->k, .b_layout = sh->layout, .splits = sh->splits,
                             .backend = j->backend};
    /* Where ranks share a GPU, a call that synchronises the device (cudaMalloc, cudaMallocHost) or
     * takes the driver's pageable-copy path while a peer's run waits in a barrier for this rank
     * stalls both until the barrier's timeout. So: everything allocated and B uploaded before
     * planning (which ends with the ranks meeting), and only pinned buffers and memsets between
     * runs. */
    if (!j->legacy)
        RANK_STREAM(res, rank, s, 0);
    RANK_CUDA(res, rank, cudaMalloc(&d_b, b * 2));
    RANK_CUDA(res, rank, cudaMalloc(&d_ag, ag * 2));
    RANK_CUDA(res, rank, cudaMalloc(&d_c, c * 2));
    RANK_CUDA(res, rank, cudaMallocHost((void **)&h_shard, 2 * shard * 2));
    RANK_CUDA(res, rank, cudaMallocHost((void **)&h_ag, ag * 2));
    RANK_CUDA(res, rank, cudaMallocHost((void **)&h_c, c * 2));
    for (int it = 0; it < 2; it++)
        memcpy(h_shard + (size_t)it * shard, j->a[it] + (size_t)rank * shard, shard * 2);
    RANK_CUDA(res, rank, cudaMemcpyAsync(d_b, j->b, b * 2, cudaMemcpyHostToDevice, s));
    RANK_CUDA(res, rank, cudaStreamSynchronize(s));
    RANK_AGMM(res, ctx, agmm_plan_ag_matmul(&plan, ctx, &d));
    agmm_ag_matmul_io io = {.b = d_b, .a_gathered = d_ag, .c = d_c};
    for (int it = 0; it < 2; it++) {
        RANK_CUDA(res, rank, cudaMemcpyAsync(agmm_plan_input(plan), h_shard + (size_t)it * shard, shard * 2,
                                             cudaMemcpyHostToDevice, s));
        /* Poison: 0xffff is a bf16 NaN, so an element never written fails the error check. */
        RANK_CUDA(res, rank, cudaMemsetAsync(d_ag, 0xff, ag * 2, s));
        RANK_CUDA(res, rank, cudaMemsetAsync(d_c, 0xff, c * 2, s));
        RANK_AGMM(res, ctx, agmm_ag_matmul(plan, &io, s));
        RANK_CUDA(res, rank, cudaMemcpyAsync(h_ag, d_ag, ag * 2, cudaMemcpyDeviceToHost, s));
        RANK_CUDA(res, rank, cudaMemcpyAsync(h_c, d_c, c * 2, cudaMemcpyDeviceToHost, s));
        RANK_CUDA(res, rank, cudaStreamSynchronize(s));
        RANK_AGMM(res, ctx, agmm_ctx_sync(ctx));
        memcpy(j->ag[it][rank], h_ag, ag * 2);
        memcpy(j->c[it][rank], h_c, c * 2);
    }
done:
    cudaStreamSynchronize(s);
    agmm_plan_destroy(plan); /* collective (the ranks meet first): after a failure too */
    cudaFree(d_b);
    cudaFree(d_ag);
    cudaFree(d_c);
    cudaFreeHost(h_shard);
    cudaFreeHost(h_ag);
    cudaFreeHost(h_c);
    return AGMM_SUCCESS;
}

/* Inputs of one shape: shards A (and -A), B, and the fp64 reference C. */
typedef struct {
    uint16_t *a, *a_neg, *b;
    double *c_ref;
} mm_inputs;

static void inputs_free(mm_inputs *in)
{
    free(in->a);
    free(in->a_neg);
    free(in->b);
    free(in->c_ref);
    memset(in, 0, sizeof *in);
}

static int inputs_make(mm_inputs *in, int nranks, const mm_shape *sh, uint64_t seed)
{
    size_t ag = (size_t)nranks * (size_t)(sh->m * sh->k), c = (size_t)nranks * (size_t)(sh->m * sh->n);
    size_t b = (size_t)(sh->k * sh->n);
    memset(in, 0, sizeof *in);
    in->a = malloc(ag * 2);
    in->a_neg = malloc(ag * 2);
    in->b = malloc(b * 2);
    in->c_ref = malloc(c * sizeof(double));
    if (!in->a || !in->a_neg || !in->b || !in->c_ref) {
        inputs_free(in);
        return 0;
    }
    fill_bf16(in->a, ag, seed);
    fill_bf16(in->b, b, seed ^ 0x5bd1e995u);
    for (size_t i = 0; i < ag; i++) {
        in->a_neg[i] = in->a[i] ^ 0x8000u;
    }
    if (agmm_ref_gemm_bf16(in->a, in->b, sh->layout, (int64_t)nranks * sh->m, sh->n, sh->k, in->c_ref, NULL) !=
        AGMM_SUCCESS) {
        inputs_free(in);
        return 0;
    }
    return 1;
}

/* Runs one backend on one shape in world w and checks every rank; returns rank 0's C of call 0
 * (caller frees) when keep_c, else NULL. legacy: on the legacy default stream (W = 1 only). */
static uint16_t *mm_case_on(agmm_world *w, const char *backend, const mm_shape *sh, const mm_inputs *in, int keep_c,
                            int legacy)
{
    int nranks = agmm_world_nranks(w);
    size_t ag = (size_t)nranks * (size_t)(sh->m * sh->k), c = (size_t)nranks * (size_t)(sh->m * sh->n);
    mm_job *j = calloc(1, sizeof *j);
    uint16_t *kept = NULL;
    char what[256];
    snprintf(what, sizeof what, "ag_matmul/%s W=%d M=%lld N=%lld K=%lld B=%s splits=%d%s", backend,
             nranks, (long long)sh->m, (long long)sh->n, (long long)sh->k,
             sh->layout == AGMM_LAYOUT_COL_MAJOR ? "col" : "row", sh->splits, legacy ? " legacy stream" : "");
    if (j == NULL) {
        agmm_check(0, "%s: out of host memory", what);
        return NULL;
    }
    j->sh = *sh;
    j->backend = backend;
    j->nranks = nranks;
    j->legacy = legacy;
    j->a[0] = in->a;
    j->a[1] = in->a_neg;
    j->b = in->b;
    int alloc_ok = 1;
    for (int it = 0; it < 2; it++)
        for (int r = 0; r < nranks; r++) {
            j->ag[it][r] = malloc(ag * 2);
            j->c[it][r] = malloc(c * 2);
            alloc_ok &= j->ag[it][r] != NULL && j->c[it][r] != NULL;
        }
    if (!alloc_ok) {
        agmm_check(0, "%s: out of host memory", what);
        goto out;
    }
    agmm_status st = agmm_world_run(w, mm_rank, j);
    if (st != AGMM_SUCCESS) {
        agmm_check(0, "%s: agmm_world_run -> %s", what, agmm_status_str(st));
        goto out;
    }
    double max_rel = 0;
    for (int r = 0; r < nranks && j->res.ok[r]; r++) {
        int64_t bad = agmm_ref_first_mismatch(j->ag[0][r], in->a, (int64_t)ag, 2);
        if (bad >= 0) {
            gpu_rank_fail(&j->res, r, "gathered A differs at element %lld: 0x%04x, want 0x%04x", (long long)bad,
                          j->ag[0][r][bad], in->a[bad]);
            break;
        }
        bad = agmm_ref_first_mismatch(j->ag[1][r], in->a_neg, (int64_t)ag, 2);
        if (bad >= 0) {
            gpu_rank_fail(&j->res, r, "call 2: gathered A differs at element %lld", (long long)bad);
            break;
        }
        double rel = agmm_ref_rel_frobenius(j->c[0][r], AGMM_DTYPE_BF16, in->c_ref, (int64_t)c);
        if (!(rel <= TOL)) {
            gpu_rank_fail(&j->res, r, "C rel Frobenius error %.3g > %.0e (NaN: an unwritten element)", rel, TOL);
            break;
        }
        if (rel > max_rel)
            max_rel = rel;
        for (size_t i = 0; i < c; i++)
            if (agmm_bf16_to_f32(j->c[1][r][i]) != -agmm_bf16_to_f32(j->c[0][r][i])) {
                gpu_rank_fail(&j->res, r, "call 2 (A negated): C[%zu] = %g, want %g", i,
                              agmm_bf16_to_f32(j->c[1][r][i]), -agmm_bf16_to_f32(j->c[0][r][i]));
                break;
            }
    }
    int all = 1;
    for (int r = 0; r < nranks; r++)
        all &= j->res.ok[r];
    if (all) {
        agmm_check(1, "%s max_rel=%.2e, gathered A exact, call 2 exact", what, max_rel);
    } else {
        for (int r = 0; r < nranks; r++)
            if (!j->res.ok[r]) {
                agmm_check(0, "%s rank %d: %s", what, r, j->res.msg[r]);
                break;
            }
    }
    if (keep_c && all) {
        kept = j->c[0][0];
        j->c[0][0] = NULL;
    }
out:
    for (int it = 0; it < 2; it++)
        for (int r = 0; r < nranks; r++) {
            free(j->ag[it][r]);
            free(j->c[it][r]);
        }
    free(j);
    return kept;
}

static uint16_t *mm_case(agmm_world *w, const char *backend, const mm_shape *sh, const mm_inputs *in, int keep_c)
{
    return mm_case_on(w, backend, sh, in, keep_c, 0);
}

/* Every ag_matmul backend of the library's table that world w offers, on one shape; the C of
 * `nccl` and `ce` in *c_nccl, *c_ce where those are not NULL (caller frees). */
static void mm_every_backend(agmm_world *w, const mm_shape *sh, const mm_inputs *in, uint16_t **c_nccl,
                             uint16_t **c_ce)
{
    for (int i = 0; agmm_backend_name(AGMM_OP_AG_MATMUL, i) != NULL; i++) {
        const char *name = agmm_backend_name(AGMM_OP_AG_MATMUL, i);
        if (!agmm_backend_available(w, AGMM_OP_AG_MATMUL, name, NULL, 0))
            continue;
        uint16_t **keep = c_nccl && strcmp(name, "nccl") == 0 ? c_nccl : c_ce && strcmp(name, "ce") == 0 ? c_ce : NULL;
        uint16_t *c = mm_case(w, name, sh, in, keep != NULL);
        if (keep)
            *keep = c;
    }
}

void test_ag_matmul_w1(void)
{
    static const mm_shape shapes[] = {
        {1, 1, 8, AGMM_LAYOUT_COL_MAJOR, 1},       {67, 129, 64, AGMM_LAYOUT_COL_MAJOR, 3},
        {255, 383, 136, AGMM_LAYOUT_COL_MAJOR, 2}, {130, 96, 264, AGMM_LAYOUT_ROW_MAJOR, 1},
        {256, 256, 256, AGMM_LAYOUT_COL_MAJOR, 1}, {384, 384, 384, AGMM_LAYOUT_ROW_MAJOR, 2},
        {640, 768, 512, AGMM_LAYOUT_COL_MAJOR, 4},
    };
    agmm_world *w = gpu_test_world(AGMM_WORLD_GPU, 1, 0);
    if (w == NULL)
        return;
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
        mm_inputs in;
        if (!inputs_make(&in, 1, &shapes[i], 1000 + i)) {
            agmm_check(0, "ag_matmul W=1: out of host memory");
            continue;
        }
        /* Each against the reference inside mm_case; nccl and ce (both cuBLASLt) also alike. */
        uint16_t *c_nccl = NULL, *c_ce = NULL;
        mm_every_backend(w, &shapes[i], &in, &c_nccl, &c_ce);
        if (c_nccl && c_ce) {
            int64_t count = shapes[i].m * shapes[i].n;
            int64_t bad = agmm_ref_first_mismatch(c_ce, c_nccl, count, 2);
            agmm_check(bad < 0, "ag_matmul W=1 M=%lld N=%lld K=%lld: ce and nccl C identical%s",
                       (long long)shapes[i].m, (long long)shapes[i].n, (long long)shapes[i].k,
                       bad < 0 ? "" : " (they differ)");
        }
        free(c_nccl);
        free(c_ce);
        /* On the legacy default stream too, where ce copies the shard after its GEMM on that one
         * stream (ag_matmul_ce.c) and the other backends run as they do elsewhere. */
        for (int b = 0; agmm_backend_name(AGMM_OP_AG_MATMUL, b) != NULL; b++)
            if (agmm_backend_available(w, AGMM_OP_AG_MATMUL, agmm_backend_name(AGMM_OP_AG_MATMUL, b), NULL, 0))
                mm_case_on(w, agmm_backend_name(AGMM_OP_AG_MATMUL, b), &shapes[i], &in, 0, 1);
        inputs_free(&in);
    }
    agmm_world_destroy(w);
}

void test_ag_matmul_ce_emulated(void)
{
    static const mm_shape shapes[] = {
        {256, 256, 256, AGMM_LAYOUT_COL_MAJOR, 1}, {384, 384, 384, AGMM_LAYOUT_COL_MAJOR, 2},
        {67, 129, 64, AGMM_LAYOUT_COL_MAJOR, 3},   {255, 383, 136, AGMM_LAYOUT_COL_MAJOR, 4},
        {130, 96, 264, AGMM_LAYOUT_ROW_MAJOR, 2},  {1, 24, 8, AGMM_LAYOUT_COL_MAJOR, 1},
    };
    const int sizes[] = {2, 3, 4, 5, 6, 7, 8};
    for (int wi = 0; wi < 7; wi++) {
        agmm_world *w = gpu_test_world(AGMM_WORLD_EMULATED, sizes[wi], 0);
        if (w == NULL)
            continue;
        for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
            mm_inputs in;
            if (!inputs_make(&in, sizes[wi], &shapes[i], 2000 + 16 * wi + i)) {
                agmm_check(0, "ag_matmul emulated: out of host memory");
                continue;
            }
            mm_every_backend(w, &shapes[i], &in, NULL, NULL);
            inputs_free(&in);
        }
        agmm_world_destroy(w);
    }
}

/* Every visible GPU as one rank each (NCCL windows, NVLink peer memory): skipped loudly below 2. */
void test_ag_matmul_gpu_world(void)
{
    static const mm_shape shapes[] = {
        {256, 256, 256, AGMM_LAYOUT_COL_MAJOR, 1}, {67, 129, 64, AGMM_LAYOUT_COL_MAJOR, 3},
        {255, 383, 136, AGMM_LAYOUT_COL_MAJOR, 2}, {130, 96, 264, AGMM_LAYOUT_ROW_MAJOR, 2},
    };
    int ndev = 0;
    if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev < 2) {
        agmm_skip("ag_matmul GPU world: %d GPU(s) visible, this case needs 2 or more", ndev);
        return;
    }
    agmm_world *w = gpu_test_world(AGMM_WORLD_GPU, ndev, 0);
    if (w == NULL)
        return;
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
        mm_inputs in;
        if (!inputs_make(&in, ndev, &shapes[i], 3000 + i)) {
            agmm_check(0, "ag_matmul GPU world: out of host memory");
            continue;
        }
        mm_every_backend(w, &shapes[i], &in, NULL, NULL);
        inputs_free(&in);
    }
    agmm_world_destroy(w);
}

typedef struct {
    gpu_rank_results res;
} skip_args;

/* The message of a backend refused where ranks share a GPU: "skipped: <op>/<name> needs NCCL, but
 * ranks share a GPU ...". */
static int skipped_shared(const char *msg)
{
    return strstr(msg, "skipped:") != NULL && strstr(msg, "ranks share a GPU") != NULL;
}

static agmm_status skip_rank(agmm_ctx *ctx, void *arg)
{
    skip_args *a = arg;
    int rank = agmm_ctx_rank(ctx);
    a->res.ok[rank] = 1;
    agmm_plan *p = NULL;
    agmm_ag_matmul_desc d = {.m = 256, .n = 256, .k = 256, .b_layout = AGMM_LAYOUT_COL_MAJOR, .backend = "nccl"};
    agmm_status st = agmm_plan_ag_matmul(&p, ctx, &d);
    if (st != AGMM_ERR_UNSUPPORTED || p != NULL || !skipped_shared(agmm_last_error(ctx)))
        return gpu_rank_fail(&a->res, rank, "ag_matmul nccl: %s '%s'", agmm_status_str(st), agmm_last_error(ctx)),
               AGMM_SUCCESS;
    const char *const ar[] = {"nccl", "nccl_plain"};
    for (int i = 0; i < 2; i++) {
        agmm_all_reduce_desc ad = {.n = 4093, .dtype = AGMM_DTYPE_BF16, .backend = ar[i]};
        st = agmm_plan_all_reduce(&p, ctx, &ad);
        if (st != AGMM_ERR_UNSUPPORTED || !skipped_shared(agmm_last_error(ctx)))
            return gpu_rank_fail(&a->res, rank, "all_reduce %s: %s '%s'", ar[i],
                                 agmm_status_str(st), agmm_last_error(ctx)),
                   AGMM_SUCCESS;
    }
    return AGMM_SUCCESS;
}

void test_ag_matmul_nccl_skipped(void)
{
    agmm_world *w = gpu_test_world(AGMM_WORLD_EMULATED, 2, 0);
    if (w == NULL)
        return;
    skip_args a;
    memset(&a, 0, sizeof a);
    agmm_status st = agmm_world_run(w, skip_rank, &a);
    agmm_check(st == AGMM_SUCCESS, "nccl skipped: agmm_world_run -> %s", agmm_status_str(st));
    gpu_report_ranks(&a.res, 2, "emulated W=2: nccl backends report 'skipped: ... ranks share a GPU'");
    /* The same answer before planning: every backend of the table is available in an emulated
     * world except those that need NCCL, and those say why. */
    for (agmm_op op = 0; (int)op < agmm_ext_op_count(); op++)
        for (int i = 0; agmm_backend_name(op, i) != NULL; i++) {
            const char *name = agmm_backend_name(op, i);
            const agmm_backend *b = agmm_backend_find(op, name);
            int needs_nccl = b != NULL && b->gpu != NULL && (b->gpu->needs & AGMM_CAP_NCCL);
            char why[512] = "";
            int avail = agmm_backend_available(w, op, name, why, sizeof why);
            agmm_check(b != NULL && b->gpu != NULL && avail == !needs_nccl && (avail || skipped_shared(why)),
                       "emulated W=2: agmm_backend_available(%s, %s) = %d (want %d: %s)%s%s", agmm_op_name(op), name,
                       avail, !needs_nccl, needs_nccl ? "needs NCCL" : "has a GPU implementation without NCCL",
                       why[0] ? ": " : "", why);
        }
    agmm_world_destroy(w);
}

typedef struct {
    gpu_rank_results res;
    atomic_int rank0_done;
} ce_timeout_args;

/* Both ranks plan; rank 0 runs, rank 1 never does. */
static agmm_status ce_timeout_rank(agmm_ctx *ctx, void *arg)
{
    ce_timeout_args *a = arg;
    int rank = agmm_ctx_rank(ctx);
    agmm_plan *plan = NULL;
    cudaStream_t s = NULL;
    void *d_b = NULL, *d_ag = NULL, *d_c = NULL;
    gpu_rank_results *res = &a->res;
    a->res.ok[rank] = 1;
    agmm_ag_matmul_desc d = {.m = 128, .n = 128, .k = 128, .b_layout = AGMM_LAYOUT_COL_MAJOR, .splits = 2, .backend = "ce"};
    RANK_AGMM(res, ctx, agmm_plan_ag_matmul(&plan, ctx, &d));
    if (rank != 0) {
        gpu_wait_flag(&a->rank0_done, 30.0);
        goto done;
    }
    RANK_STREAM(res, rank, s, 0);
    RANK_CUDA(res, rank, cudaMalloc(&d_b, 128 * 128 * 2));
    RANK_CUDA(res, rank, cudaMalloc(&d_ag, 2 * 128 * 128 * 2));
    RANK_CUDA(res, rank, cudaMalloc(&d_c, 2 * 128 * 128 * 2));
    agmm_ag_matmul_io io = {.b = d_b, .a_gathered = d_ag, .c = d_c};
    RANK_AGMM(res, ctx, agmm_ag_matmul(plan, &io, s));
    agmm_status st = agmm_ctx_sync(ctx);
    if (st != AGMM_ERR_TIMEOUT || !strstr(agmm_last_error(ctx), "waiting for rank 1")) {
        gpu_rank_fail(&a->res, rank, "agmm_ctx_sync -> %s '%s' (want a timeout naming rank 1)", agmm_status_str(st),
                      agmm_last_error(ctx));
        goto done;
    }
    printf("  rank 0 reported: %s\n", agmm_last_error(ctx));
    st = agmm_ag_matmul(plan, &io, s);
    if (st != AGMM_ERR_TIMEOUT)
        gpu_rank_fail(&a->res, rank, "a run after the timeout -> %s (want AGMM_ERR_TIMEOUT: ranks are out of step)",
                      agmm_status_str(st));
done:
    if (rank == 0)
        atomic_store(&a->rank0_done, 1);
    if (s)
        cudaStreamSynchronize(s);
    agmm_plan_destroy(plan);
    cudaFree(d_b);
    cudaFree(d_ag);
    cudaFree(d_c);
    return AGMM_SUCCESS;
}

void test_ag_matmul_ce_timeout(void)
{
    agmm_world *w = gpu_test_world(AGMM_WORLD_EMULATED, 2, 0.25);
    if (w == NULL)
        return;
    ce_timeout_args a;
    memset(&a, 0, sizeof a);
    agmm_status st = agmm_world_run(w, ce_timeout_rank, &a);
    agmm_check(st == AGMM_SUCCESS, "ce timeout: agmm_world_run -> %s", agmm_status_str(st));
    gpu_report_ranks(&a.res, 2, "ag_matmul/ce W=2 with a rank that never runs ends in AGMM_ERR_TIMEOUT");
    agmm_world_destroy(w);
}

/* all_reduce nccl / nccl_plain at W = 1: the sum over one rank is the input, exactly. */
static agmm_status ar_rank(agmm_ctx *ctx, void *arg)
{
    gpu_rank_results *res = arg;
    int rank = agmm_ctx_rank(ctx);
    cudaStream_t s = NULL;
    res->ok[rank] = 1;
    const int64_t sizes[] = {1, 4093, 8193, 16387, 1 << 20};
    const agmm_dtype dtypes[] = {AGMM_DTYPE_BF16, AGMM_DTYPE_F32};
    const char *const backends[] = {"nccl", "nccl_plain"};
    void *h_in = malloc((1 << 20) * 4), *h_out = malloc((1 << 20) * 4), *d_out = NULL;
    agmm_plan *p = NULL;
    RANK_STREAM(res, rank, s, 0);
    RANK_CUDA(res, rank, cudaMalloc(&d_out, (1 << 20) * 4));
    for (int bi = 0; bi < 2; bi++)
        for (int di = 0; di < 2; di++)
            for (int si = 0; si < 5; si++)
                for (int in_place = 0; in_place < 2; in_place++) {
                    int64_t n = sizes[si];
                    size_t bytes = (size_t)n * (dtypes[di] == AGMM_DTYPE_F32 ? 4 : 2);
                    agmm_all_reduce_desc d = {.n = n, .dtype = dtypes[di], .backend = backends[bi]};
                    RANK_AGMM(res, ctx, agmm_plan_all_reduce(&p, ctx, &d));
                    uint64_t seed = 77 + (uint64_t)(bi * 100 + di * 10 + si);
                    for (int64_t i = 0; i < n; i++) {
                        float v = agmm_rng_uniform(&seed);
                        if (dtypes[di] == AGMM_DTYPE_F32)
                            ((float *)h_in)[i] = v;
                        else
                            ((uint16_t *)h_in)[i] = agmm_f32_to_bf16(v);
                    }
                    void *out = in_place ? agmm_plan_input(p) : d_out;
                    RANK_CUDA(res, rank, cudaMemcpyAsync(agmm_plan_input(p), h_in, bytes, cudaMemcpyHostToDevice, s));
                    if (!in_place)
                        RANK_CUDA(res, rank, cudaMemsetAsync(d_out, 0xff, bytes, s));
                    agmm_all_reduce_io io = {.out = out};
                    RANK_AGMM(res, ctx, agmm_all_reduce(p, &io, s));
                    RANK_CUDA(res, rank, cudaMemcpyAsync(h_out, out, bytes, cudaMemcpyDeviceToHost, s));
                    RANK_CUDA(res, rank, cudaStreamSynchronize(s));
                    RANK_AGMM(res, ctx, agmm_ctx_sync(ctx));
                    agmm_plan_destroy(p);
                    p = NULL;
                    int64_t bad = agmm_ref_first_mismatch(h_out, h_in, n, dtypes[di] == AGMM_DTYPE_F32 ? 4 : 2);
                    if (bad >= 0) {
                        gpu_rank_fail(res, rank, "all_reduce/%s %s n=%lld %s: element %lld differs",
                                      backends[bi], dtypes[di] == AGMM_DTYPE_F32 ? "fp32" : "bf16",
                                      (long long)n, in_place ? "in place" : "out of place", (long long)bad);
                        goto done;
                    }
                }
done:
    agmm_plan_destroy(p);
    free(h_in);
    free(h_out);
    cudaFree(d_out);
    if (s)
        cudaStreamSynchronize(s);
    return AGMM_SUCCESS;
}

void test_all_reduce_nccl_w1(void)
{
    agmm_world *w = gpu_test_world(AGMM_WORLD_GPU, 1, 0);
    if (w == NULL)
        return;
    gpu_rank_results res;
    memset(&res, 0, sizeof res);
    agmm_status st = agmm_world_run(w, ar_rank, &res);
    agmm_check(st == AGMM_SUCCESS, "all_reduce nccl W=1: agmm_world_run -> %s", agmm_status_str(st));
    gpu_report_ranks(&res, 1,
                     "all_reduce/nccl and nccl_plain W=1, bf16+fp32, n=1,4093,8193,16387,2^20, in and out of place");
    agmm_world_destroy(w);
}
