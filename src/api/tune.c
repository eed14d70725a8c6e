/* `auto` (tune.h; docs/auto.md for users): the choice of a backend for a plan planned with
 * backend NULL or "auto".
 *
 * One choice, collective:
 *   1. Rank 0 decides how to choose, alone: the static rule where measuring is off (AGMM_TUNE=0,
 *      or unset in the CPU world) or only one backend can run; a choice cached in its memory or
 *      in the cache file under the plan's key; else measuring. One host exchange gives every
 *      rank rank 0's decision and its measuring knobs (AGMM_TUNE_RUNS, AGMM_TUNE_BUDGET_MS), so
 *      they all make the same collective calls next.
 *   2. Measuring: every candidate (a backend of the operation, usable in this world, with
 *      auto_order >= 0), in table order, on every rank: planned (collective), its input filled,
 *      one warm-up run, and held. Then rounds in which every held candidate runs once, the first
 *      of each round rotating, each run timed alone (events on GPUs, after an L2 flush as
 *      agmm-bench does; the wall clock in the CPU world): as many rounds as fit in
 *      AGMM_TUNE_BUDGET_MS by the warm-ups, 1 to AGMM_TUNE_RUNS. Then the plans are destroyed.
 *      The turns make the figures comparable on a GPU whose clock moves under load (time_held).
 *      After each step the ranks exchange their figure and every rank takes the maximum (a
 *      collective run is as slow as its slowest rank); a candidate that some rank cannot plan
 *      is dropped by all (after one more try alone, where others were held: memory).
 *      Every rank then holds the same numbers and picks the same fastest candidate (ties: table
 *      order), with no broadcast needed.
 *   3. Rank 0 remembers the choice in memory and writes it to the cache file.
 * The cost of a new shape: the candidates' plan creations and destructions, plus per candidate
 * one warm-up run, and rounds of one run of each for at most max(one round, AGMM_TUNE_BUDGET_MS)
 * (and AGMM_TUNE_RUNS rounds at most); rank 0 logs it at AGMM_LOG=info and agmm_tune_last has it.
 * Nothing here knows an operation: its type (api.h) sizes the measuring buffers, plans a candidate
 * and runs it, and tune_cache.c's key reads the type's description of the descriptor. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api.h"
#include "tune.h"
#include "../core/clock.h"
#include "../core/knobs.h"
#include "../core/stats.h"
#ifdef AGMM_HAVE_CUDA
#include "../kernels/fill.h"
#include "../world/gpu_check.h"
#include "../world/rank_gpu.h"
#endif

/* Internal sizes, not knobs: a key is a few hundred bytes at most (tune_cache.c). */
#define KEY_BYTES 512
/* What candidates' inputs hold while measuring. On a GPU, random bf16 in [-1, 1) (kernels/fill.h):
 * a product timed on constant bytes runs faster than on a model's data, and not by the same factor
 * for every candidate (the timed cuBLASLt pick's reason too, backends/gemm_lt.c). In the CPU world,
 * whose times are not the point, bytes of 0x3c: bf16 0x3c3c ~ 0.0115 (fp32 ~ 0.0115 too). Both
 * finite and non-zero, no overflow in any sum. */
#define FILL_BYTE 0x3c

/* ---- the rank's state: its in-memory cache and its last choice ---- */

typedef struct {
    char key[KEY_BYTES];
    const agmm_backend *choice;
} memo;

typedef struct {
    memo *memos;
    int nmemos, cap;
    char device[256];          /* the device's name, once asked */
    int nccl_version;
    agmm_tune_result last;
    char delay_backend[32];    /* the test hooks (agmm_tune_set_test_hooks) */
    double delay_us;
    char refuse_backend[32];
    int refuse_beside_only;
} tune_state;

static tune_state *state_of(agmm_ctx *ctx)
{
    tune_state *ts = agmm_ctx_api_state(ctx);
    if (ts == NULL) {
        ts = calloc(1, sizeof *ts);
        agmm_ctx_set_api_state(ctx, ts);
    }
    return ts;
}

const agmm_tune_result *agmm_tune_last(const agmm_ctx *ctx)
{
    static const agmm_tune_result none = {AGMM_TUNE_STATIC, NULL, 0, 0, 0, {NULL}, {0}};
    const tune_state *ts = agmm_ctx_api_state(ctx);
    return ts ? &ts->last : &none;
}

void agmm_tune_release(agmm_ctx *ctx)
{
    tune_state *ts = agmm_ctx_api_state(ctx);
    if (ts == NULL)
        return;
    free(ts->memos);
    free(ts);
    agmm_ctx_set_api_state(ctx, NULL);
}

agmm_status agmm_tune_set_test_hooks(agmm_ctx *ctx, const agmm_tune_test_hooks *hooks)
{
    tune_state *ts = state_of(ctx);
    if (ts == NULL)
        return AGMM_ERR_NO_MEMORY;
    snprintf(ts->delay_backend, sizeof ts->delay_backend, "%s", hooks->delay ? hooks->delay : "");
    ts->delay_us = hooks->delay_us;
    snprintf(ts->refuse_backend, sizeof ts->refuse_backend, "%s", hooks->refuse ? hooks->refuse : "");
    ts->refuse_beside_only = hooks->refuse_beside_only;
    return AGMM_SUCCESS;
}

static const agmm_backend *memo_find(const tune_state *ts, const char *key)
{
    for (int i = 0; i < ts->nmemos; i++)
        if (strcmp(ts->memos[i].key, key) == 0)
            return ts->memos[i].choice;
    return NULL;
}

static void memo_put(tune_state *ts, const char *key, const agmm_backend *choice)
{
    for (int i = 0; i < ts->nmemos; i++)
        if (strcmp(ts->memos[i].key, key) == 0) {
            ts->memos[i].choice = choice;
            return;
        }
    if (ts->nmemos == ts->cap) {
        int cap = ts->cap ? 2 * ts->cap : 16;
        memo *grown = realloc(ts->memos, (size_t)cap * sizeof *grown);
        if (grown == NULL)
            return; /* a cache that cannot grow only costs a measurement later */
        ts->memos = grown;
        ts->cap = cap;
    }
    snprintf(ts->memos[ts->nmemos].key, KEY_BYTES, "%s", key);
    ts->memos[ts->nmemos++].choice = choice;
}

/* The device's name and NCCL's version, for keys. */
static void identify(const agmm_ctx *ctx, tune_state *ts)
{
    if (ts->device[0])
        return;
    snprintf(ts->device, sizeof ts->device, "cpu");
#ifdef AGMM_HAVE_CUDA
    struct cudaDeviceProp prop;
    if ((agmm_ctx_info(ctx)->caps & AGMM_CAP_GPU) &&
        cudaGetDeviceProperties(&prop, agmm_ctx_info(ctx)->device) == cudaSuccess) {
        snprintf(ts->device, sizeof ts->device, "%s", prop.name);
        ncclGetVersion(&ts->nccl_version);
    }
#endif
}

/* ---- candidates and the static rule ---- */

/* The backends auto may choose for op in this world, in table order; returns how many. */
static int candidates(const agmm_ctx *ctx, agmm_op op, const agmm_backend **out)
{
    int n = 0;
    for (int i = 0; agmm_backend_at(op, i) != NULL && n < AGMM_TUNE_MAX_CANDIDATES; i++) {
        const agmm_backend *b = agmm_backend_at(op, i);
        if (b->auto_order >= 0 && agmm_backend_usable(b, agmm_ctx_world(ctx), NULL, 0) != NULL)
            out[n++] = b;
    }
    return n;
}

/* The static rule: the candidate with the smallest auto_order. */
static const agmm_backend *static_choice(const agmm_backend *const *cand, int n)
{
    const agmm_backend *best = cand[0];
    for (int i = 1; i < n; i++)
        if (cand[i]->auto_order < best->auto_order)
            best = cand[i];
    return best;
}

static int table_index(agmm_op op, const agmm_backend *b)
{
    for (int i = 0; agmm_backend_at(op, i) != NULL; i++)
        if (agmm_backend_at(op, i) == b)
            return i;
    return -1;
}

/* ---- measuring ---- */

/* What measuring one plan's candidates needs on this rank: a stream, timers, an L2 flush, and
 * the io buffers every candidate runs with. */
typedef struct {
    agmm_ctx *ctx;
    const agmm_op_type *type;
    const void *desc;           /* the caller's, checked */
    size_t input_bytes;         /* of the plan's input, filled before each candidate's warm-up */
    int runs_max;               /* rank 0's AGMM_TUNE_RUNS */
    double *times;              /* candidate j's runs at times[j * runs_max ...], in us */
    int gpu;
    void *stream;               /* the runs' cudaStream_t (the rank's measuring stream); NULL in the CPU world */
#ifdef AGMM_HAVE_CUDA
    cudaEvent_t events[2 * AGMM_TUNE_MAX_CANDIDATES]; /* start and stop of each run of a round */
#endif
    void *flush;
    size_t flush_bytes;
    int nbuf;
    void *buf[AGMM_SCRATCH_MAX];  /* the io's other buffers (the type's scratch); NULL for 0 bytes */
    size_t buf_bytes[AGMM_SCRATCH_MAX];
} session;

static double now_ms(void) { return 1e-6 * (double)agmm_mono_ns(); }

/* Fills `bytes` of the rank's memory as FILL_BYTE's comment says (ordered before the runs on the
 * stream); seed: which random values, the same for every candidate. */
static agmm_status fill(session *se, void *p, size_t bytes, uint64_t seed)
{
    agmm_status st = AGMM_SUCCESS;
    if (bytes == 0) /* an operation without a plan input (A_r in the io: the row-parallel matmuls) */
        return st;
    if (!se->gpu) {
        memset(p, FILL_BYTE, bytes);
        return st;
    }
#ifdef AGMM_HAVE_CUDA
    AGMM_CUDA_TRY(st, agmm_ctx_err(se->ctx),
                  agmm_fill_random_bf16(p, bytes / 2, seed, (cudaStream_t)se->stream));
    if (bytes % 2) /* no buffer of bf16 or fp32 has an odd size; finite all the same */
        AGMM_CUDA_TRY(st, agmm_ctx_err(se->ctx),
                      cudaMemsetAsync((char *)p + bytes - 1, FILL_BYTE, 1, (cudaStream_t)se->stream));
fail:
#endif
    return st;
}

static void session_close(session *se)
{
    free(se->times);
    for (int i = 0; i < se->nbuf; i++) {
        if (!se->gpu)
            free(se->buf[i]);
#ifdef AGMM_HAVE_CUDA
        else
            cudaFree(se->buf[i]);
#endif
    }
#ifdef AGMM_HAVE_CUDA
    if (se->gpu) {
        cudaFree(se->flush);
        for (int i = 0; i < 2 * AGMM_TUNE_MAX_CANDIDATES; i++)
            if (se->events[i])
                cudaEventDestroy(se->events[i]);
        cudaGetLastError();
    }
#endif
}

static agmm_status session_open(session *se)
{
    agmm_status st = AGMM_SUCCESS;
    agmm_error *err = agmm_ctx_err(se->ctx);
    const agmm_rank_info *ri = agmm_ctx_info(se->ctx);
    agmm_plan shape;
    se->input_bytes = agmm_op_shape(se->type, se->ctx, se->desc, &shape);
    se->nbuf = se->type->scratch(&shape, se->buf_bytes);
    se->gpu = (ri->caps & AGMM_CAP_GPU) != 0;
    se->times = calloc((size_t)AGMM_TUNE_MAX_CANDIDATES * (size_t)se->runs_max, sizeof *se->times);
    if (se->times == NULL)
        return AGMM_FAIL(err, AGMM_ERR_NO_MEMORY, "rank %d: auto's timings of %d runs", ri->rank, se->runs_max);
    if (!se->gpu) {
        for (int i = 0; i < se->nbuf; i++) {
            if (se->buf_bytes[i] == 0)
                continue;
            se->buf[i] = aligned_alloc(256, (se->buf_bytes[i] + 255) / 256 * 256);
            if (se->buf[i] == NULL)
                return AGMM_FAIL(err, AGMM_ERR_NO_MEMORY, "rank %d: auto's measuring buffers (%zu bytes)", ri->rank,
                                 se->buf_bytes[i]);
            memset(se->buf[i], FILL_BYTE, se->buf_bytes[i]);
        }
        return st;
    }
#ifdef AGMM_HAVE_CUDA
    int l2 = 0;
    cudaStream_t s = NULL;
    AGMM_TRY(st, agmm_gpu_measure_stream(se->ctx, &s));
    se->stream = s;
    for (int i = 0; i < 2 * AGMM_TUNE_MAX_CANDIDATES; i++)
        AGMM_CUDA_TRY(st, err, cudaEventCreate(&se->events[i]));
    /* Twice the L2: what a flush must overwrite so that no run finds its operands cached. */
    AGMM_CUDA_TRY(st, err, cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, ri->device));
    se->flush_bytes = 2 * (size_t)l2;
    AGMM_CUDA_TRY(st, err, cudaMalloc(&se->flush, se->flush_bytes));
    for (int i = 0; i < se->nbuf; i++) {
        if (se->buf_bytes[i] == 0)
            continue;
        AGMM_CUDA_TRY(st, err, cudaMalloc(&se->buf[i], se->buf_bytes[i]));
        AGMM_TRY(st, fill(se, se->buf[i], se->buf_bytes[i], 2 + (uint64_t)i));
    }
    AGMM_CUDA_TRY(st, err, cudaStreamSynchronize((cudaStream_t)se->stream));
fail:
#endif
    return st;
}

static agmm_status run_once(session *se, agmm_plan *p)
{
    return se->type->run_scratch(p, se->buf, se->stream);
}

/* One run of each of the k plans p[0..k-1], in that order, each timed alone after an L2 flush:
 * us[j] in microseconds. The GPU's runs are enqueued together and waited for once. */
static agmm_status time_round(session *se, agmm_plan *const *p, int k, double *const *us)
{
    agmm_status st = AGMM_SUCCESS;
    if (!se->gpu) {
        for (int j = 0; j < k && st == AGMM_SUCCESS; j++) {
            double t0 = now_ms();
            st = run_once(se, p[j]); /* blocking in the CPU world */
            *us[j] = 1e3 * (now_ms() - t0);
        }
        return st;
    }
#ifdef AGMM_HAVE_CUDA
    agmm_error *err = agmm_ctx_err(se->ctx);
    cudaStream_t s = (cudaStream_t)se->stream;
    for (int j = 0; j < k; j++) {
        AGMM_CUDA_TRY(st, err, cudaMemsetAsync(se->flush, j & 1, se->flush_bytes, s));
        AGMM_CUDA_TRY(st, err, cudaEventRecord(se->events[2 * j], s));
        AGMM_TRY(st, run_once(se, p[j]));
        AGMM_CUDA_TRY(st, err, cudaEventRecord(se->events[2 * j + 1], s));
    }
    AGMM_CUDA_TRY(st, err, cudaStreamSynchronize(s));
    AGMM_TRY(st, agmm_ctx_sync(se->ctx));
    for (int j = 0; j < k; j++) {
        float ms = 0;
        AGMM_CUDA_TRY(st, err, cudaEventElapsedTime(&ms, se->events[2 * j], se->events[2 * j + 1]));
        *us[j] = 1e3 * (double)ms;
    }
fail:
#endif
    return st;
}

/* Every rank's `mine`; *out = their maximum, or -1 if any rank gave a negative value (a failure
 * there). Collective. */
static agmm_status agree_max(agmm_ctx *ctx, double mine, double *out)
{
    double all[AGMM_MAX_RANKS];
    agmm_status st = agmm_host_exchange(ctx, &mine, sizeof mine, all);
    if (st != AGMM_SUCCESS)
        return st;
    *out = all[0];
    for (int r = 1; r < agmm_ctx_info(ctx)->nranks; r++)
        *out = (all[r] < 0 || *out < 0) ? -1 : fmax(*out, all[r]);
    return AGMM_SUCCESS;
}

/* The error of a run that failed on some rank: the ranks are out of step. */
static agmm_status out_of_step(session *se, const agmm_backend *b, agmm_status st)
{
    return st != AGMM_SUCCESS ? st
                              : AGMM_FAIL(agmm_ctx_err(se->ctx), AGMM_ERR_INTERNAL,
                                          "rank %d: backend=auto: a run of %s/%s failed on another rank while "
                                          "measuring it: the ranks are out of step",
                                          agmm_ctx_info(se->ctx)->rank, agmm_op_name(se->type->op), b->name);
}

/* A candidate planned, its input filled and its warm-up run done, waiting for its timed rounds. */
typedef struct {
    int index;            /* in the tune result's candidates */
    agmm_plan *plan;
    double warm_us;       /* the slowest rank's warm-up run */
} held;

/* Plans b on every rank, fills its input and runs it once (the warm-up, timed): *out the plan,
 * or NULL where some rank could not plan it (then no rank has it). beside: other candidates' plans
 * are held. A failed run is an error for every rank (the ranks are out of step). */
static agmm_status prepare(session *se, const agmm_backend *b, int beside, agmm_plan **out, double *warm_us)
{
    agmm_ctx *ctx = se->ctx;
    agmm_plan *p = NULL;
    double agreed = -1, us = -1, *usp = &us;
    const tune_state *ts = agmm_ctx_api_state(ctx);
    agmm_status st = se->type->plan_with(&p, ctx, se->desc, b->name), ast;
    /* The test hook fails the plan here, after the collective creation, as a rank's shortage of
     * memory would: every rank then destroys it below. */
    if (st == AGMM_SUCCESS && strcmp(ts->refuse_backend, b->name) == 0 && (beside || !ts->refuse_beside_only))
        st = AGMM_FAIL(agmm_ctx_err(ctx), AGMM_ERR_NO_MEMORY, "rank %d: %s refused by the test hook",
                       agmm_ctx_info(ctx)->rank, b->name);
    /* The candidates run in lockstep by construction (agree_max); a run check's exchange would only
     * add its cost to the times that auto compares and caches. */
    if (p != NULL)
        p->check_runs = 0;
    *out = NULL;
    ast = agree_max(ctx, st == AGMM_SUCCESS ? 0.0 : -1.0, &agreed);
    if (ast == AGMM_SUCCESS && agreed < 0) {
        agmm_log(agmm_ctx_info(ctx)->log_level, AGMM_LOG_DEBUG, agmm_ctx_info(ctx)->rank,
                 "auto: %s/%s not planned: a rank could not plan it (here: %s)", agmm_op_name(se->type->op),
                 b->name, st == AGMM_SUCCESS ? "planned" : agmm_last_error(ctx));
        agmm_plan_destroy(p);
        agmm_error_clear(agmm_ctx_err(ctx));
        return AGMM_SUCCESS;
    }
    if (ast == AGMM_SUCCESS) {
        st = fill(se, agmm_plan_input(p), se->input_bytes, 1);
        if (st == AGMM_SUCCESS)
            st = time_round(se, &p, 1, &usp);
        ast = agree_max(ctx, st == AGMM_SUCCESS ? us : -1.0, warm_us);
    }
    if (ast == AGMM_SUCCESS && *warm_us < 0)
        ast = out_of_step(se, b, st);
    if (ast == AGMM_SUCCESS)
        *out = p;
    else
        agmm_plan_destroy(p);
    return ast;
}

/* The timed rounds of the held candidates h[0..k-1], then their plans destroyed: in each round
 * every candidate runs once, the first of the round rotating; r->cand_us[] gets each one's
 * slowest rank's median. Rounds: as many as fit in share_ms by the warm-up times, 1 to runs_max.
 * Taking turns is the point: under a long product's load a GPU's clock moves (an H100 at its
 * 700 W cap: 1980 MHz for the first tens of milliseconds, then 1100-1425 MHz, back and forth;
 * docs/results, thirty-second session), and candidates timed one after another each met another
 * clock, up to 14% apart on the same cuBLASLt kernel. */
static agmm_status time_held(session *se, held *h, int k, double share_ms, agmm_tune_result *r)
{
    agmm_status st = AGMM_SUCCESS, ast = AGMM_SUCCESS;
    double sum = 0;
    for (int j = 0; j < k; j++)
        sum += h[j].warm_us;
    const int rounds = sum > 0 ? (int)fmin(se->runs_max, fmax(1, floor(1e3 * share_ms / sum))) : se->runs_max;
    agmm_plan *order[AGMM_TUNE_MAX_CANDIDATES];
    double *us[AGMM_TUNE_MAX_CANDIDATES];
    for (int round = 0; round < rounds && st == AGMM_SUCCESS; round++) {
        for (int q = 0; q < k; q++) {
            const int j = (q + round) % k;
            order[q] = h[j].plan;
            us[q] = &se->times[(size_t)j * (size_t)se->runs_max + (size_t)round];
        }
        st = time_round(se, order, k, us);
    }
    if (rounds > r->runs)
        r->runs = rounds;
    const tune_state *ts = agmm_ctx_api_state(se->ctx);
    for (int j = 0; j < k && ast == AGMM_SUCCESS; j++) {
        double *t = &se->times[(size_t)j * (size_t)se->runs_max];
        agmm_stats stats = {0};
        for (int i = 0; strcmp(ts->delay_backend, h[j].plan->backend->name) == 0 && i < rounds; i++)
            t[i] += ts->delay_us;
        if (st == AGMM_SUCCESS)
            agmm_stats_compute(t, rounds, &stats);
        double *agreed = &r->cand_us[h[j].index];
        ast = agree_max(se->ctx, st == AGMM_SUCCESS ? stats.median : -1.0, agreed);
        if (ast == AGMM_SUCCESS && *agreed < 0)
            ast = out_of_step(se, h[j].plan->backend, st);
    }
    for (int j = 0; j < k; j++)
        agmm_plan_destroy(h[j].plan);
    return ast;
}

/* Step 2 of the header comment: fills r (choice, candidates' times, cost), with rank 0's knobs:
 * at most runs_max timed runs of a candidate, budget_ms of them for all. Collective. The
 * candidates are planned one after another and held together, so that their timed runs take
 * turns (time_held); one that cannot be planned beside the held ones is tried again alone after
 * they have been timed and destroyed (a device short of memory for all at once), and dropped only
 * if it cannot be planned alone either. */
static agmm_status measure(agmm_ctx *ctx, agmm_op op, const void *desc, const agmm_backend *const *cand, int n,
                           int runs_max, double budget_ms, agmm_tune_result *r)
{
    double t0 = now_ms();
    session se = {.ctx = ctx, .type = agmm_op_type_of(op), .desc = desc, .runs_max = runs_max};
    agmm_status st = session_open(&se);
    double agreed = -1;
    agmm_status ast = agree_max(ctx, st == AGMM_SUCCESS ? 0.0 : -1.0, &agreed);
    if (ast == AGMM_SUCCESS && agreed < 0) {
        /* Memory for measuring is missing on some rank: every rank falls back to the rule. */
        agmm_log(agmm_ctx_info(ctx)->log_level, AGMM_LOG_WARN, agmm_ctx_info(ctx)->rank,
                 "auto: cannot measure %s (a rank lacks memory for it%s%s): using the static rule", agmm_op_name(op),
                 st == AGMM_SUCCESS ? "" : ": ", st == AGMM_SUCCESS ? "" : agmm_last_error(ctx));
        agmm_error_clear(agmm_ctx_err(ctx));
        r->how = AGMM_TUNE_STATIC;
        r->choice = static_choice(cand, n);
    }
    held h[AGMM_TUNE_MAX_CANDIDATES];
    int k = 0;
    for (int i = 0; ast == AGMM_SUCCESS && agreed >= 0 && i < n; i++) {
        r->cand[i] = cand[i];
        r->cand_us[i] = -1;
        r->ncand = i + 1;
        agmm_plan *p = NULL;
        ast = prepare(&se, cand[i], k > 0, &p, &h[k].warm_us);
        if (ast == AGMM_SUCCESS && p == NULL && k > 0) {
            ast = time_held(&se, h, k, budget_ms * k / n, r);
            k = 0;
            if (ast == AGMM_SUCCESS)
                ast = prepare(&se, cand[i], 0, &p, &h[k].warm_us);
        }
        if (p != NULL) {
            h[k].index = i;
            h[k++].plan = p;
        }
    }
    if (ast == AGMM_SUCCESS && k > 0)
        ast = time_held(&se, h, k, budget_ms * k / n, r);
    else
        for (int j = 0; j < k; j++)
            agmm_plan_destroy(h[j].plan);
    int best = -1;
    for (int i = 0; ast == AGMM_SUCCESS && i < r->ncand; i++)
        if (r->cand_us[i] >= 0 && (best < 0 || r->cand_us[i] < r->cand_us[best]))
            best = i;
    if (best >= 0)
        r->choice = cand[best];
    session_close(&se);
    r->tune_ms = now_ms() - t0;
    if (ast == AGMM_SUCCESS && r->choice == NULL)
        ast = AGMM_FAIL(agmm_ctx_err(ctx), AGMM_ERR_UNSUPPORTED,
                        "backend=auto: none of the %d backends of %s that run in this world could be planned", n,
                        agmm_op_name(op));
    return ast;
}

/* ---- the choice ---- */

/* Rank 0's decision, sent to every rank: how, the backend's index in the table of op (-1:
 * measure), and how to measure (rank 0's knobs, so that every rank makes as many runs). status:
 * rank 0 refused its environment (its error says why). */
typedef struct {
    int32_t status, how, index, runs_max;
    double budget_ms;
} decision;

/* Step 1 of the header comment, on rank 0. key: the plan's key, filled where measuring is on. */
static decision decide(agmm_ctx *ctx, tune_state *ts, agmm_op op, const void *desc, const agmm_backend *const *cand,
                       int n, char *key)
{
    const agmm_rank_info *ri = agmm_ctx_info(ctx);
    agmm_error *err = agmm_ctx_err(ctx);
    agmm_knob_value tune, runs, budget;
    decision d = {AGMM_SUCCESS, AGMM_TUNE_STATIC, table_index(op, static_choice(cand, n)), 0, 0};
    /* World creation checked these; a value set since then is refused here. */
    d.status = agmm_knob_read(AGMM_KNOB_TUNE, &tune, err);
    if (d.status == AGMM_SUCCESS)
        d.status = agmm_knob_read(AGMM_KNOB_TUNE_RUNS, &runs, err);
    if (d.status == AGMM_SUCCESS)
        d.status = agmm_knob_read(AGMM_KNOB_TUNE_BUDGET_MS, &budget, err);
    if (d.status != AGMM_SUCCESS)
        return d;
    d.runs_max = (int32_t)runs.number;
    d.budget_ms = budget.number;
    /* Unset: measure where the timings mean something (GPUs; docs/auto.md). The words are "0|1". */
    int on = tune.choice >= 0 ? tune.choice : (ri->caps & AGMM_CAP_GPU) != 0;
    if (!on || n == 1)
        return d;
    identify(ctx, ts);
    agmm_plan shape;
    agmm_op_shape(agmm_op_type_of(op), ctx, desc, &shape);
    agmm_tune_key(&shape, ts->device, ts->nccl_version, key, KEY_BYTES);
    const agmm_backend *b = memo_find(ts, key);
    if (b != NULL) {
        d.how = AGMM_TUNE_MEMORY;
        d.index = table_index(op, b);
        return d;
    }
    char path_buf[4096], name[64], why[512] = "";
    const char *path = agmm_tune_cache_path(path_buf, sizeof path_buf);
    int found = path ? agmm_tune_file_lookup(path, key, name, sizeof name, why, sizeof why) : 0;
    if (found < 0)
        agmm_log(ri->log_level, AGMM_LOG_WARN, ri->rank, "auto: ignoring the tuning cache: %s", why);
    b = found > 0 ? agmm_backend_find(op, name) : NULL;
    for (int i = 0; b != NULL && i < n; i++)
        if (cand[i] == b) {
            memo_put(ts, key, b);
            d.how = AGMM_TUNE_FILE;
            d.index = table_index(op, b);
            return d;
        }
    d.how = AGMM_TUNE_MEASURED;
    d.index = -1;
    return d;
}

/* Step 3, on rank 0: the log line, the memory and the file. */
static void remember(agmm_ctx *ctx, tune_state *ts, agmm_op op, const char *key, const agmm_tune_result *r)
{
    const agmm_rank_info *ri = agmm_ctx_info(ctx);
    char detail[512];
    int used = 0;
    for (int i = 0; i < r->ncand && used < (int)sizeof detail; i++)
        used += snprintf(detail + used, sizeof detail - (size_t)used, r->cand_us[i] >= 0 ? "%s=%.1fus " : "%s=- ",
                         r->cand[i]->name, r->cand_us[i]);
    if (used < (int)sizeof detail)
        snprintf(detail + used, sizeof detail - (size_t)used, "runs=%d tune_ms=%.1f", r->runs, r->tune_ms);
    agmm_log(ri->log_level, AGMM_LOG_INFO, ri->rank, "auto: %s -> %s (measured: %s)", key, r->choice->name, detail);
    memo_put(ts, key, r->choice);
    char path_buf[4096], why[512] = "";
    const char *path = agmm_tune_cache_path(path_buf, sizeof path_buf);
    if (path && agmm_tune_file_store(path, key, r->choice->name, detail, why, sizeof why) != 0)
        agmm_log(ri->log_level, AGMM_LOG_WARN, ri->rank, "auto: the choice is not cached on disk: %s", why);
}

agmm_status agmm_tune_choose(agmm_ctx *ctx, agmm_op op, const void *desc, const agmm_backend **out)
{
    const agmm_rank_info *ri = agmm_ctx_info(ctx);
    agmm_error *err = agmm_ctx_err(ctx);
    tune_state *ts = state_of(ctx);
    if (ts == NULL)
        return AGMM_FAIL(err, AGMM_ERR_NO_MEMORY, "rank %d: auto's state allocation failed", ri->rank);
    const agmm_backend *cand[AGMM_TUNE_MAX_CANDIDATES];
    int n = candidates(ctx, op, cand);
    if (n == 0)
        return AGMM_FAIL(err, AGMM_ERR_UNSUPPORTED, "backend=auto: no backend of %s runs in this world",
                         agmm_op_name(op));
    char key[KEY_BYTES] = "";
    decision mine = {AGMM_SUCCESS, AGMM_TUNE_STATIC, -1, 0, 0}, all[AGMM_MAX_RANKS];
    if (ri->rank == 0)
        mine = decide(ctx, ts, op, desc, cand, n, key);
    agmm_status st = agmm_host_exchange(ctx, &mine, sizeof mine, all);
    if (st != AGMM_SUCCESS)
        return st;
    if (all[0].status != AGMM_SUCCESS)
        return ri->rank == 0 ? (agmm_status)all[0].status
                             : AGMM_FAIL(err, (agmm_status)all[0].status,
                                         "backend=auto: rank 0 refused a knob of its environment (its error names it)");
    agmm_tune_result r = {.how = (agmm_tune_how)all[0].how};
    if (r.how == AGMM_TUNE_MEASURED) {
        st = measure(ctx, op, desc, cand, n, all[0].runs_max, all[0].budget_ms, &r);
        if (st != AGMM_SUCCESS)
            return st;
        if (ri->rank == 0 && r.how == AGMM_TUNE_MEASURED)
            remember(ctx, ts, op, key, &r);
    } else {
        r.choice = agmm_backend_at(op, all[0].index);
        if (r.choice == NULL || agmm_backend_usable(r.choice, agmm_ctx_world(ctx), NULL, 0) == NULL)
            return AGMM_FAIL(err, AGMM_ERR_INTERNAL, "rank %d: backend=auto: rank 0 chose backend #%d of %s, which "
                             "this rank cannot run", ri->rank, all[0].index, agmm_op_name(op));
    }
    ts->last = r;
    *out = r.choice;
    return AGMM_SUCCESS;
}
