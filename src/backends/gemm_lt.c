/* The cuBLASLt wrapper of gemm_lt.h. */
#ifdef AGMM_HAVE_CUDA
#include "gemm_lt.h"

#include <pthread.h>
#include <stdlib.h>

#include "../core/knobs.h"
#include "../kernels/fill.h"
#include "../world/gpu_check.h"

/* The timed choice (gemm_lt.h): how many of the heuristic's algorithms are timed (on the H200 it
 * offers 8 for every seed and model shape, and the fastest of them was the fastest of 16 asked
 * for), the rounds in which each runs once, and the gain that replaces the heuristic's first:
 * near-ties keep it, so that the choice does not flip between processes on noise. */
#define TIMED_CANDIDATES 8
#define TIMED_ROUNDS 3
#define TIMED_MIN_GAIN 0.01
/* Scratch operands for timing at most a quarter of the device's free memory. */
#define TIMED_FREE_SHARE 4
/* Choices remembered per process: a plan's GEMMs of one shape are timed once. */
#define MEMO_MAX 256

struct agmm_gemm_lt {
    cublasLtHandle_t lt;
    cublasLtMatmulDesc_t desc;
    cublasLtMatrixLayout_t lay_b, lay_a, lay_c;
    cublasLtMatmulAlgo_t algo;
    size_t workspace_bytes;
    int64_t rows, n, k;
    agmm_layout layout;
    unsigned align;
};

unsigned agmm_gemm_lt_align(uint64_t bytes)
{
    unsigned a = 16;
    while (a > 1 && bytes % a != 0)
        a /= 2;
    return a;
}

/* CTAs per cluster of an algorithm's cluster shape (cublasLt.h's CUBLASLT_CLUSTER_SHAPE_*): 1 or
 * 2 for the shapes named here, 0 for any other (AUTO included: unknown, so not known small). */
static int cluster_ctas(const cublasLtMatmulAlgo_t *algo)
{
    uint16_t id = 0;
    size_t written = 0;
    if (cublasLtMatmulAlgoConfigGetAttribute(algo, CUBLASLT_ALGO_CONFIG_CLUSTER_SHAPE_ID, &id, sizeof id, &written) !=
            CUBLAS_STATUS_SUCCESS ||
        written != sizeof id)
        return 0;
    switch (id) {
    case CUBLASLT_CLUSTER_SHAPE_1x1x1: return 1;
    case CUBLASLT_CLUSTER_SHAPE_2x1x1:
    case CUBLASLT_CLUSTER_SHAPE_1x2x1: return 2;
    default: return 0;
    }
}

/* The algorithm to run: the heuristic's first result; with shared_device (gemm_lt.h says why) the
 * first whose clusters are known to be at most 2 CTAs, else the first with its cluster shape
 * forced to 1x1x1 where cuBLASLt accepts that, else the first as it is. 0, or -1 when the
 * heuristic found nothing. */
static int pick_algo(const agmm_gemm_lt *g, const cublasLtMatmulHeuristicResult_t *res, int found,
                     int shared_device, cublasLtMatmulAlgo_t *algo)
{
    int first = -1;
    for (int i = 0; i < found && first < 0; i++)
        if (res[i].state == CUBLAS_STATUS_SUCCESS)
            first = i;
    if (first < 0)
        return -1;
    *algo = res[first].algo;
    if (!shared_device)
        return 0;
    for (int i = first; i < found; i++)
        if (res[i].state == CUBLAS_STATUS_SUCCESS && cluster_ctas(&res[i].algo) > 0) {
            *algo = res[i].algo;
            return 0;
        }
    cublasLtMatmulAlgo_t one = res[first].algo;
    const uint16_t id = CUBLASLT_CLUSTER_SHAPE_1x1x1;
    cublasLtMatmulHeuristicResult_t check;
    if (cublasLtMatmulAlgoConfigSetAttribute(&one, CUBLASLT_ALGO_CONFIG_CLUSTER_SHAPE_ID, &id, sizeof id) ==
            CUBLAS_STATUS_SUCCESS &&
        cublasLtMatmulAlgoCheck(g->lt, g->desc, g->lay_b, g->lay_a, g->lay_c, g->lay_c, &one, &check) ==
            CUBLAS_STATUS_SUCCESS &&
        check.workspaceSize <= g->workspace_bytes)
        *algo = one;
    return 0;
}

/* ---- the timed choice ---- */

typedef struct {
    int device;
    int64_t rows, n, k;
    agmm_layout layout;
    unsigned align;
    size_t workspace_bytes;
    cublasLtMatmulAlgo_t algo;
} memo;

static pthread_mutex_t memo_mu = PTHREAD_MUTEX_INITIALIZER;
static memo memos[MEMO_MAX];
static int nmemos;

static int memo_same(const memo *m, const memo *key)
{
    return m->device == key->device && m->rows == key->rows && m->n == key->n && m->k == key->k &&
           m->layout == key->layout && m->align == key->align && m->workspace_bytes == key->workspace_bytes;
}

/* 1 and key->algo set where this process already chose for key's GEMM. */
static int memo_find(memo *key)
{
    int found = 0;
    pthread_mutex_lock(&memo_mu);
    for (int i = 0; i < nmemos && !found; i++)
        if (memo_same(&memos[i], key)) {
            key->algo = memos[i].algo;
            found = 1;
        }
    pthread_mutex_unlock(&memo_mu);
    return found;
}

static void memo_add(const memo *m)
{
    pthread_mutex_lock(&memo_mu);
    int i = 0;
    while (i < nmemos && !memo_same(&memos[i], m))
        i++;
    if (i < MEMO_MAX) {
        memos[i] = *m;
        if (i == nmemos)
            nmemos++;
    }
    pthread_mutex_unlock(&memo_mu);
}

/* Median of n (<= TIMED_ROUNDS) in place. */
static float median(float *v, int n)
{
    for (int i = 1; i < n; i++)
        for (int j = i; j > 0 && v[j] < v[j - 1]; j--) {
            float t = v[j];
            v[j] = v[j - 1];
            v[j - 1] = t;
        }
    return v[n / 2];
}

/* One product of g's shape with cuBLASLt's `algo`, enqueued on s: the one call site of cublasLtMatmul. */
static cublasStatus_t lt_matmul(const agmm_gemm_lt *g, const cublasLtMatmulAlgo_t *algo, const void *a, const void *b,
                                void *c, void *workspace, cudaStream_t s)
{
    const float one = 1.0f, zero = 0.0f;
    return cublasLtMatmul(g->lt, g->desc, &one, b, g->lay_b, a, g->lay_a, &zero, c, g->lay_c, c, g->lay_c, algo,
                          workspace, g->workspace_bytes, s);
}

/* Where a timed run finds the L2: `bytes` of scratch that a memset before each run overwrites, so
 * that no run finds its operands cached (twice the L2, as agmm-bench and tune.c flush; a pick timed
 * on warm operands lost to torch.matmul's kernel in agmm-bench: gemm_lt.h). */
typedef struct {
    void *p;
    size_t bytes;
} l2_flush;

/* One run of candidate `algo` on the scratch operands after an L2 flush, timed between two events:
 * microseconds, or a negative number where the library refused it. */
static float time_once(const agmm_gemm_lt *g, const cublasLtMatmulAlgo_t *algo, const char *a, const char *b, char *c,
                       void *workspace, const l2_flush *fl, cudaStream_t s, cudaEvent_t ev[2])
{
    float ms = 0;
    if (cudaMemsetAsync(fl->p, 1, fl->bytes, s) != cudaSuccess || cudaEventRecord(ev[0], s) != cudaSuccess ||
        lt_matmul(g, algo, a, b, c, workspace, s) != CUBLAS_STATUS_SUCCESS || cudaEventRecord(ev[1], s) != cudaSuccess ||
        cudaEventSynchronize(ev[1]) != cudaSuccess || cudaEventElapsedTime(&ms, ev[0], ev[1]) != cudaSuccess)
        return -1;
    return ms * 1000.0f;
}

/* Among the heuristic's successful results, the fastest on this device, timed on random scratch
 * operands (fill.h says why not constant ones) with the L2 flushed. Returns the index, or `first`
 * where timing cannot run (scratch over its share of free memory, any CUDA failure: timing is an
 * optimisation, never a reason to fail a plan; the failure's error is cleared). */
static int timed_pick(const agmm_gemm_lt *g, const cublasLtMatmulHeuristicResult_t *res, int found, int first)
{
    /* Each operand at a 256-byte boundary, A and C then offset to the planned alignment so that no
     * candidate is timed on pointers better aligned than its runs will get. */
    const size_t off = g->align < 16 ? g->align : 0;
    const size_t a_bytes = (size_t)(g->rows * g->k) * 2, b_bytes = (size_t)(g->k * g->n) * 2;
    const size_t c_bytes = (size_t)(g->rows * g->n) * 2;
    const size_t b_at = (off + a_bytes + 255) / 256 * 256, c_at = b_at + (b_bytes + 255) / 256 * 256;
    const size_t w_at = (c_at + off + c_bytes + 255) / 256 * 256;
    const size_t f_at = (w_at + g->workspace_bytes + 255) / 256 * 256;
    int dev = 0, l2 = 0;
    size_t free_b = 0, total_b = 0;
    if (cudaGetDevice(&dev) != cudaSuccess || cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, dev) != cudaSuccess ||
        cudaMemGetInfo(&free_b, &total_b) != cudaSuccess) {
        (void)cudaGetLastError();
        return first;
    }
    const size_t flush_bytes = 2 * (size_t)l2, total = f_at + flush_bytes;
    if (total > free_b / TIMED_FREE_SHARE) {
        (void)cudaGetLastError();
        return first;
    }
    int pick = first;
    char *scratch = NULL;
    /* The legacy default stream, not a stream of our own: on the H200, creating and destroying one
     * here made ag_matmul's ce and fused at W = 1 1.5-2 us slower in every later run, with
     * CUDA_DEVICE_MAX_CONNECTIONS 8 or 32 (docs/results, 2026-12-04). Why is not shown: streams made
     * and destroyed never put a copy on a kernel's queue in bench/stream_queues.cu, but made and
     * destroyed per case they stalled emulated worlds, where kept they did not (docs/architecture.md,
     * emulated worlds). Plan creation waits for the device anyway. */
    cudaStream_t s = 0;
    cudaEvent_t ev[2] = {NULL, NULL};
    if (cudaMalloc((void **)&scratch, total) != cudaSuccess ||
        cudaEventCreate(&ev[0]) != cudaSuccess || cudaEventCreate(&ev[1]) != cudaSuccess)
        goto done;
    char *a = scratch + off, *b = scratch + b_at, *c = scratch + c_at + off, *ws = scratch + w_at;
    const l2_flush fl = {scratch + f_at, flush_bytes};
    if (agmm_fill_random_bf16(a, (size_t)(g->rows * g->k), 0x5eed, s) != cudaSuccess ||
        agmm_fill_random_bf16(b, (size_t)(g->k * g->n), 0xb0b, s) != cudaSuccess)
        goto done;
    /* The candidates: the heuristic's first, then the others it found that fit the workspace. Each
     * runs once untimed (its kernel loaded), then once per round, the first of the round rotating:
     * taking turns, they meet the same clocks, where a GPU's clock moves under a long product's
     * load (an H100 at its power cap: 1980 MHz for the first calls, then 1100-1425 MHz back and
     * forth; docs/results, thirty-second session) and each timed after the other met another. */
    int cand[TIMED_CANDIDATES], n = 0;
    cand[n++] = first;
    for (int i = first + 1; i < found && n < TIMED_CANDIDATES; i++)
        if (res[i].state == CUBLAS_STATUS_SUCCESS && res[i].workspaceSize <= g->workspace_bytes)
            cand[n++] = i;
    float us[TIMED_CANDIDATES][TIMED_ROUNDS];
    for (int j = 0; j < n; j++)
        if (time_once(g, &res[cand[j]].algo, a, b, c, ws, &fl, s, ev) < 0) {
            if (j == 0)
                goto done;
            cand[j] = -1; /* refused: never picked */
        }
    for (int r = 0; r < TIMED_ROUNDS; r++)
        for (int q = 0; q < n; q++) {
            const int j = (q + r) % n;
            if (cand[j] >= 0 && (us[j][r] = time_once(g, &res[cand[j]].algo, a, b, c, ws, &fl, s, ev)) < 0) {
                if (j == 0)
                    goto done;
                cand[j] = -1;
            }
        }
    const float first_us = median(us[0], TIMED_ROUNDS);
    float best_us = first_us;
    for (int j = 1; j < n; j++) {
        if (cand[j] < 0)
            continue;
        const float t = median(us[j], TIMED_ROUNDS);
        if (t < best_us && t < first_us * (1.0f - (float)TIMED_MIN_GAIN)) {
            best_us = t;
            pick = cand[j];
        }
    }
done:
    cudaStreamSynchronize(s);
    (void)cudaGetLastError();
    if (ev[0])
        cudaEventDestroy(ev[0]);
    if (ev[1])
        cudaEventDestroy(ev[1]);
    cudaFree(scratch);
    (void)cudaGetLastError();
    return pick;
}

/* AGMM_LT_TUNE: 1 unless set to 0 (a bad value was refused at world creation). */
static int timing_wanted(void)
{
    agmm_knob_value v;
    agmm_error ignored = {0};
    agmm_knob_read(AGMM_KNOB_LT_TUNE, &v, &ignored);
    return v.choice != 0;
}

/* g->algo: the memo's choice for g's GEMM, else the heuristic's (pick_algo) or, on a device of
 * its own with AGMM_LT_TUNE on, the fastest of its first TIMED_CANDIDATES (timed_pick). */
static agmm_status choose_algo(agmm_gemm_lt *g, cublasLtMatmulPreference_t pref, int shared_device, agmm_error *err)
{
    agmm_status st = AGMM_SUCCESS;
    memo key = {.rows = g->rows, .n = g->n, .k = g->k, .layout = g->layout, .align = g->align,
                .workspace_bytes = g->workspace_bytes};
    const int timed = !shared_device && timing_wanted() && cudaGetDevice(&key.device) == cudaSuccess;
    if (timed && memo_find(&key)) {
        g->algo = key.algo;
        return AGMM_SUCCESS;
    }
    cublasLtMatmulHeuristicResult_t res[TIMED_CANDIDATES];
    int found = 0;
    AGMM_LT_TRY(st, err,
                cublasLtMatmulAlgoGetHeuristic(g->lt, g->desc, g->lay_b, g->lay_a, g->lay_c, g->lay_c, pref,
                                               shared_device || timed ? TIMED_CANDIDATES : 1, res, &found));
    if (pick_algo(g, res, found, shared_device, &g->algo) < 0)
        return AGMM_FAIL(err, AGMM_ERR_CUBLAS,
                         "cuBLASLt has no bf16 algorithm for C(%lld x %lld) = A(%lld x %lld) * B (%s, %u-byte "
                         "aligned A/C pointers)",
                         (long long)g->rows, (long long)g->n, (long long)g->rows, (long long)g->k,
                         g->layout == AGMM_LAYOUT_COL_MAJOR ? "column-major" : "row-major", g->align);
    if (timed) { /* pick_algo found a success, so the loop ends */
        int first = 0;
        while (res[first].state != CUBLAS_STATUS_SUCCESS)
            first++;
        g->algo = res[timed_pick(g, res, found, first)].algo;
        key.algo = g->algo;
        memo_add(&key);
    }
fail:
    return st;
}

agmm_status agmm_gemm_lt_create(agmm_gemm_lt **out, cublasLtHandle_t lt, int64_t rows, int64_t n, int64_t k,
                                agmm_layout b_layout, unsigned align_bytes, size_t workspace_bytes, unsigned flags,
                                agmm_error *err)
{
    agmm_status st = AGMM_SUCCESS;
    cublasLtMatmulPreference_t pref = NULL;
    *out = NULL;
    agmm_gemm_lt *g = calloc(1, sizeof *g);
    if (g == NULL)
        return AGMM_FAIL(err, AGMM_ERR_NO_MEMORY, "GEMM plan allocation failed");
    g->lt = lt;
    g->workspace_bytes = workspace_bytes;
    g->rows = rows;
    g->n = n;
    g->k = k;
    g->layout = b_layout;
    g->align = align_bytes;
    cublasOperation_t op_b = b_layout == AGMM_LAYOUT_COL_MAJOR ? CUBLAS_OP_T : CUBLAS_OP_N;
    cublasOperation_t op_a = CUBLAS_OP_N;
    AGMM_LT_TRY(st, err, cublasLtMatmulDescCreate(&g->desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    AGMM_LT_TRY(st, err, cublasLtMatmulDescSetAttribute(g->desc, CUBLASLT_MATMUL_DESC_TRANSA, &op_b, sizeof op_b));
    AGMM_LT_TRY(st, err, cublasLtMatmulDescSetAttribute(g->desc, CUBLASLT_MATMUL_DESC_TRANSB, &op_a, sizeof op_a));
    if (b_layout == AGMM_LAYOUT_COL_MAJOR)
        AGMM_LT_TRY(st, err, cublasLtMatrixLayoutCreate(&g->lay_b, CUDA_R_16BF, (uint64_t)k, (uint64_t)n, k));
    else
        AGMM_LT_TRY(st, err, cublasLtMatrixLayoutCreate(&g->lay_b, CUDA_R_16BF, (uint64_t)n, (uint64_t)k, n));
    AGMM_LT_TRY(st, err, cublasLtMatrixLayoutCreate(&g->lay_a, CUDA_R_16BF, (uint64_t)k, (uint64_t)rows, k));
    AGMM_LT_TRY(st, err, cublasLtMatrixLayoutCreate(&g->lay_c, CUDA_R_16BF, (uint64_t)n, (uint64_t)rows, n));

    AGMM_LT_TRY(st, err, cublasLtMatmulPreferenceCreate(&pref));
    AGMM_LT_TRY(st, err, cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                              &workspace_bytes, sizeof workspace_bytes));
    /* cuBLASLt assumes 256-byte aligned pointers unless told: chunk pointers into C and A are less. */
    uint32_t align_b = 16, align_ac = align_bytes;
    AGMM_LT_TRY(st, err, cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES,
                                                              &align_b, sizeof align_b));
    AGMM_LT_TRY(st, err, cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
                                                              &align_ac, sizeof align_ac));
    AGMM_LT_TRY(st, err, cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES,
                                                              &align_ac, sizeof align_ac));
    AGMM_LT_TRY(st, err, cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES,
                                                              &align_ac, sizeof align_ac));
    AGMM_TRY(st, choose_algo(g, pref, (flags & AGMM_GEMM_LT_SHARED_DEVICE) != 0, err));
    cublasLtMatmulPreferenceDestroy(pref);
    *out = g;
    return AGMM_SUCCESS;
fail:
    if (pref)
        cublasLtMatmulPreferenceDestroy(pref);
    agmm_gemm_lt_destroy(g);
    return st;
}

agmm_status agmm_gemm_lt_run(const agmm_gemm_lt *g, const void *a, const void *b, void *c, void *workspace,
                             cudaStream_t stream, agmm_error *err)
{
    agmm_status st = AGMM_SUCCESS;
    AGMM_LT_TRY(st, err, lt_matmul(g, &g->algo, a, b, c, workspace, stream));
fail:
    return st;
}

agmm_status agmm_gemm_lt_warm(const agmm_gemm_lt *g, const void *a, const void *b, void *c, void *workspace,
                              cudaStream_t stream, agmm_error *err)
{
    agmm_status st = agmm_gemm_lt_run(g, a, b, c, workspace, stream, err);
    if (st != AGMM_SUCCESS)
        return st;
    AGMM_CUDA_TRY(st, err, cudaStreamSynchronize(stream));
fail:
    return st;
}

void agmm_gemm_lt_destroy(agmm_gemm_lt *g)
{
    if (g == NULL)
        return;
    if (g->lay_c)
        cublasLtMatrixLayoutDestroy(g->lay_c);
    if (g->lay_a)
        cublasLtMatrixLayoutDestroy(g->lay_a);
    if (g->lay_b)
        cublasLtMatrixLayoutDestroy(g->lay_b);
    if (g->desc)
        cublasLtMatmulDescDestroy(g->desc);
    free(g);
}
#endif /* AGMM_HAVE_CUDA */
