/* The GEMM kernel lab: the engine (src/kernels/gemm/gemm_engine.h) against the fastest cuBLASLt we
 * can get, on the same inputs, in one run.
 *
 * The yardstick (bench/lab_cublas.c): cuBLASLt's heuristic is asked for up to 16 algorithms (64 MiB workspace: at
 * least PyTorch's on Hopper, whose cuBLAS workspace is 32 MiB on sm_90 and whose cuBLASLt
 * workspace is at most that), each one is run and checked against the first, and each correct
 * one is timed; "top1" is the heuristic's first choice. Beside them, in the same rounds,
 * cublasGemmEx (cuBLAS's own pick, torch.matmul's route: same workspace, fp32 compute, default
 * algorithm): timed separately, torch.matmul ran up to 13% faster than cuBLASLt's best on large
 * shapes, but most of that was the GPU's state, not the kernel: after a sweep of this lab's ~30
 * variants per shape the clock sits lower than in a script that times one call per shape (H100,
 * 2026-12-05: 8192 x 4096 x 4096, cuBLASLt best 399 us in the sweep, 355-361 in a short run,
 * torch.matmul 346-351). "best" (the ratios, the summary) is the fastest correct one of the
 * cuBLASLt algorithms and cublasGemmEx.
 *
 * Per shape: one untimed run of every variant on poisoned outputs (engine configs and cuBLASLt
 * algorithms alike compared with cuBLASLt's first algorithm on the device: relative Frobenius
 * error, NaN count), warm-ups, then --reps rounds in which every variant is timed once (each round
 * in its own shuffled order), each call alone between CUDA events after a 256 MB L2 flush
 * (cudaMemsetAsync), medians reported.
 *
 * Shapes: by default the seed's gathered GEMMs (W*M) x N x K with N = K = M, M in [--min, --max]
 * step --step, for each W in --w (default 1,2,4,8), then the model shapes (8192 gathered rows, TP8
 * slices: LLaMA-70B (N,K) = (3584,8192), (8192,3584); LLaMA-8B (1792,4096), (4096,1792);
 * Qwen-72B (3696,8192), (8192,3696)). Or --shapes-file F with lines "label W M N K" (rows =
 * W*M; '#' starts a comment); --list-shapes prints the default list in that format.
 * --mode runs every engine variant as a backend runs it at W = 1 (each shape's A is the one rank's
 * shard, every tile local): plain (the GEMM alone, default); chunks (fused's chunk-flag kernel, A
 * from the shard, no tile waits); copy (that kernel copying the shard into a gathered A while it
 * computes, as fused runs: copy_local); pull (pull's kernel, storing its A tiles from the ring
 * into the gathered A). copy and pull are also checked for the gathered A, bit for bit. One mode
 * per run, so two runs side by side (bench/lab_ab.sh with A_ARGS/B_ARGS) tell what a backend's
 * kernel costs over the plain GEMM, each against the cuBLAS of its own run.
 * --configs -1,0,3 (or "all": the policy and every config) times several engine variants per
 * shape against the one cuBLASLt measurement; CSV: one row per shape and engine variant.
 * --lt-clusters adds to the yardstick each heuristic algorithm with its cluster shape forced to
 * 1x1, 2x1, 1x2 and 2x2 (where cuBLASLt accepts it): the heuristic offers only AUTO clusters, and
 * torch.matmul beat the best of them by up to 20% on some shapes (docs/results, 2026-12-04).
 * --max-ctas N gives every engine plan an SM budget of N CTAs (0: every SM): whether a config's
 * rate per CTA rises when fewer SMs share the L2 says whether the L2's total bandwidth or
 * something of each SM's own (its intake, its pipeline's latency) bounds it. --engine-only times
 * the engine's variants alone (cuBLASLt still checks them; its columns print nan), so that what
 * is sampled during the run (the SM clock, the power) is the engine's. --clock reads the SM clock
 * right after each timed call (sm_clock_kernel, after the call's end event: outside its time) and
 * reports its median per variant (CSV columns sm_mhz, and lt_best_mhz for cuBLASLt's fastest;
 * nan without --clock or where untimed). It is not the clock the call ran at: one warp spinning on
 * an otherwise idle GPU reads higher. H100, 2026-12-05: 2071 MHz after the engine's calls at 33
 * CTAs, above the card's 1980 maximum, where ncu measured the calls themselves at 1812 MHz
 * (sm__cycles_elapsed over their duration; nvidia-smi sampled 1980). Use it to compare variants'
 * readings within one run; for cycles, use ncu's sm__cycles_active (bench/wgmma_rate.cu).
 *
 *   gemm-lab [--w 1,2,4,8] [--min 256] [--max 4096] [--step 128] [--no-models] [--shapes-file F]
 *            [--list-shapes] [--configs -1] [--algos 16] [--lt-clusters] [--ws-mib 64] [--max-ctas 0] [--engine-only] [--clock]
 *            [--reps 20] [--warmup 3] [--layout col|row] [--no-flush] [--mode plain] [--csv file]
 */
#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lab_check.h"
#include "lab_cublas.h"
#include "core/numeric.h"
#include "kernels/gemm/gemm_engine.h"

/* sums[0] += (x-y)^2, sums[1] += y^2, sums[2] += NaNs in x. */
__global__ void compare_kernel(const __nv_bfloat16 *x, const __nv_bfloat16 *y, size_t n, double *sums)
{
    double d2 = 0, y2 = 0, nans = 0;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        float a = __bfloat162float(x[i]), b = __bfloat162float(y[i]);
        if (isnan(a))
            nans += 1;
        else
            d2 += (double)(a - b) * (a - b);
        y2 += (double)b * b;
    }
    for (int o = 16; o > 0; o >>= 1) {
        d2 += __shfl_down_sync(0xffffffffu, d2, o);
        y2 += __shfl_down_sync(0xffffffffu, y2, o);
        nans += __shfl_down_sync(0xffffffffu, nans, o);
    }
    if ((threadIdx.x & 31) == 0) {
        atomicAdd(&sums[0], d2);
        atomicAdd(&sums[1], y2);
        atomicAdd(&sums[2], nans);
    }
}

__global__ void fill_kernel(__nv_bfloat16 *x, size_t n, uint64_t seed, uint16_t poison)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        if (poison) {
            x[i] = __ushort_as_bfloat16(poison);
            continue;
        }
        uint64_t z = seed + (i + 1) * 0x9e3779b97f4a7c15ull; /* splitmix64 of the index */
        z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
        z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
        z ^= z >> 31;
        float v = (float)((double)(z >> 11) * (2.0 / 9007199254740992.0) - 1.0);
        x[i] = __float2bfloat16(v == 0.0f ? 0.5f : v);
    }
}

#define MAX_VARIANTS 48

typedef struct {
    char label[24];
    int w;
    int64_t m, n, k; /* rows = w * m */
} shape;

typedef struct {
    shape *shapes;
    int nshapes;
    int configs[MAX_VARIANTS], nconfigs;
    int algos, reps, warmup, flush, list, lt_clusters;
    int max_ctas;               /* the engine's SM budget (0: every SM) */
    int engine_only;            /* time the engine's variants only */
    int clock;                  /* measure the SM clock after each timed call */
    int mode;                   /* lab_mode: how the engine variants run (header comment) */
    size_t ws_bytes;
    agmm_layout layout;
    const char *csv;
} options;

typedef enum { MODE_PLAIN, MODE_CHUNKS, MODE_COPY, MODE_PULL, MODES } lab_mode;
static const char *const mode_names[MODES] = {"plain", "chunks", "copy", "pull"};

typedef struct {
    lab_cublas cb; /* the yardstick's handles, workspace and operands */
    void *flush;
    size_t flush_bytes;
    cudaEvent_t e0, e1;
    double *d_sums;
    float *d_mhz; /* --clock: [variant][rep] */
    void *d_a, *d_b, *d_c, *d_ref;
    /* --mode chunks, copy, pull: the gathered A the kernel writes (copy, pull) or never reads
     * (chunks: every tile local), the chunk flags with the engine's count (zero; no tile waits, so
     * they stay zero), and the wait-error record the chunk-flag mode requires (host-mapped). */
    void *d_gath;
    uint32_t *d_flags;
    agmm_dev_error *h_err, *d_err;
} lab;

static int cmp_float(const void *a, const void *b)
{
    float x = *(const float *)a, y = *(const float *)b;
    return (x > y) - (x < y);
}

/* Relative Frobenius error of x against y (rows*n elements); *nans: NaNs in x. */
static double compare(lab *L, const void *x, const void *y, size_t elems, double *nans)
{
    LAB_CHECK(cudaMemset(L->d_sums, 0, 3 * sizeof(double)));
    compare_kernel<<<1024, 256>>>((const __nv_bfloat16 *)x, (const __nv_bfloat16 *)y, elems, L->d_sums);
    LAB_CHECK(cudaGetLastError());
    double sums[3];
    LAB_CHECK(cudaMemcpy(sums, L->d_sums, sizeof sums, cudaMemcpyDeviceToHost));
    *nans = sums[2];
    return sqrt(sums[0] / (sums[1] > 0 ? sums[1] : 1));
}

static void poison(void *c, size_t elems)
{
    fill_kernel<<<1024, 256>>>((__nv_bfloat16 *)c, elems, 0, AGMM_POISON_BF16);
    LAB_CHECK(cudaGetLastError());
}

/* The SM clock in MHz, from clock64 against the globaltimer over 20 us of one warp's spin, both
 * ends taken at a tick of the globaltimer so that its resolution does not count. Launched right
 * after a timed call; it reads above the call's own clock (header comment). */
__global__ void sm_clock_kernel(float *mhz)
{
    uint64_t t0, t1, first;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(first));
    do
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
    while (t0 == first);
    const long long c0 = clock64();
    do
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t1));
    while (t1 - t0 < 20000);
    const long long c1 = clock64();
    if (threadIdx.x == 0)
        *mhz = (float)(c1 - c0) * 1e3f / (float)(t1 - t0);
}

/* One timed variant of a shape: an engine config (plan != NULL), cublasGemmEx (blas) or cuBLASLt
 * algorithm `algo`. */
typedef struct {
    agmm_gemm_plan *plan;
    int config; /* as requested: -1 is the policy */
    int blas;
    int algo;
    int ok;
    double rel, nans, us;
    float *t;
    float mhz; /* --clock: the median SM clock of its timed calls; nan without */
} variant;

typedef struct {
    char group[32];
    int config;
    double sum_log;
    double worst;
    int count, fails;
} group_stat;

static group_stat g_stats[256];
static int g_nstats;

static void stat_add(const shape *s, int config, double ratio)
{
    char group[32];
    if (!strcmp(s->label, "seed"))
        snprintf(group, sizeof group, "seed W=%d", s->w);
    else
        snprintf(group, sizeof group, "models");
    group_stat *g = NULL;
    for (int i = 0; i < g_nstats && !g; i++)
        if (!strcmp(g_stats[i].group, group) && g_stats[i].config == config)
            g = &g_stats[i];
    if (!g) {
        if (g_nstats == (int)(sizeof g_stats / sizeof g_stats[0]))
            return;
        g = &g_stats[g_nstats++];
        memset(g, 0, sizeof *g);
        snprintf(g->group, sizeof g->group, "%s", group);
        g->config = config;
    }
    if (ratio < 0) {
        g->fails++;
        return;
    }
    g->sum_log += log(ratio);
    g->worst = ratio > g->worst ? ratio : g->worst;
    g->count++;
}

static void time_variant(lab *L, const options *o, const lt_set *P, variant *v, int index, int rep)
{
    if (o->flush)
        LAB_CHECK(cudaMemsetAsync(L->flush, rep & 0xff, L->flush_bytes, 0));
    LAB_CHECK(cudaEventRecord(L->e0, 0));
    if (v->plan) {
        agmm_error err = {};
        if (agmm_gemm_run(v->plan, 0, 0, &err) != AGMM_SUCCESS) {
            fprintf(stderr, "engine run failed: %s\n", err.msg);
            exit(1);
        }
    } else if (v->blas) {
        CHECK_LT(blas_run(&L->cb, P, L->d_c));
    } else {
        CHECK_LT(lt_run(&L->cb, P, v->algo, L->d_c));
    }
    LAB_CHECK(cudaEventRecord(L->e1, 0));
    if (o->clock)
        sm_clock_kernel<<<1, 32>>>(L->d_mhz + (size_t)index * o->reps + rep);
    LAB_CHECK(cudaEventSynchronize(L->e1));
    float ms;
    LAB_CHECK(cudaEventElapsedTime(&ms, L->e0, L->e1));
    v->t[rep] = ms * 1000.0f;
}

/* "  N MHz" for a measured clock, "" for nan. */
static const char *mhz_note(float mhz)
{
    static char buf[32];
    if (mhz != mhz)
        return "";
    snprintf(buf, sizeof buf, "  %.0f MHz", mhz);
    return buf;
}

/* One shape: every engine variant and every cuBLASLt algorithm checked, then timed round-robin.
 * Returns the number of engine variants that failed the check. */
static int run_shape(lab *L, const options *o, FILE *csv, const shape *s)
{
    const int64_t rows = (int64_t)s->w * s->m, n = s->n, k = s->k;
    const size_t c_elems = (size_t)(rows * n);
    lt_set P;
    lt_set_make(&L->cb, &P, rows, n, k, o->layout == AGMM_LAYOUT_COL_MAJOR, o->algos, o->lt_clusters);

    variant v[MAX_VARIANTS + MAX_LT + 1];
    int nv = 0, fails = 0;
    memset(v, 0, sizeof v);
    /* cuBLASLt's first algorithm is the reference for everything else. */
    poison(L->d_ref, c_elems);
    CHECK_LT(lt_run(&L->cb, &P, 0, L->d_ref));
    for (int i = 0; i < o->nconfigs; i++) {
        agmm_gemm_desc d;
        memset(&d, 0, sizeof d);
        d.a = L->d_a;
        d.b = L->d_b;
        d.c = L->d_c;
        d.b_layout = o->layout;
        d.m = rows;
        d.n = n;
        d.k = k;
        d.nranks = 1;
        d.splits = 1;
        d.config = o->configs[i];
        d.max_ctas = o->max_ctas;
        if (o->mode != MODE_PLAIN) { /* the one rank's shard is A: every tile is local */
            d.a = L->d_gath;
            d.a_local = L->d_a;
        }
        if (o->mode == MODE_CHUNKS || o->mode == MODE_COPY) {
            d.chunk_flags = L->d_flags;
            d.dev_error = L->d_err;
            d.timeout_ns = 1000000000ull;
            d.copy_local = o->mode == MODE_COPY;
        }
        d.pull = o->mode == MODE_PULL;
        agmm_error err = {};
        variant *x = &v[nv];
        if (agmm_gemm_plan_create(&x->plan, &d, &err) != AGMM_SUCCESS) {
            fprintf(stderr, "plan %s %lldx%lldx%lld config %d: %s\n", s->label, (long long)rows, (long long)n,
                    (long long)k, d.config, err.msg);
            fails += o->max_ctas == 0; /* under a budget, a config that needs more CTAs is skipped */
            continue;
        }
        x->config = d.config;
        if (d.pull && agmm_gemm_plan_set_peers(x->plan, &d.a_local, 0, &err) != AGMM_SUCCESS) {
            fprintf(stderr, "pull mode: %s\n", err.msg);
            exit(1);
        }
        poison(L->d_c, c_elems);
        const int writes_a = o->mode == MODE_COPY || o->mode == MODE_PULL;
        if (writes_a)
            poison(L->d_gath, (size_t)(rows * k));
        if (agmm_gemm_run(x->plan, 0, 0, &err) != AGMM_SUCCESS) {
            fprintf(stderr, "engine run failed: %s\n", err.msg);
            exit(1);
        }
        x->rel = compare(L, L->d_c, L->d_ref, c_elems, &x->nans);
        x->ok = x->nans == 0 && x->rel <= 1e-2;
        if (writes_a) { /* the gathered A must be the shard, bit for bit */
            double gath_nans;
            const double gath_rel = compare(L, L->d_gath, L->d_a, (size_t)(rows * k), &gath_nans);
            if (gath_rel != 0 || gath_nans != 0) {
                printf("#   %s: the gathered A differs from the shard (rel %.1e, %g NaN)\n",
                       agmm_gemm_plan_describe(x->plan), gath_rel, gath_nans);
                x->ok = 0;
            }
        }
        if (L->h_err && L->h_err->code) {
            printf("#   %s: a wait recorded an error (code %d)\n", agmm_gemm_plan_describe(x->plan),
                   (int)L->h_err->code);
            x->ok = 0;
            memset(L->h_err, 0, sizeof *L->h_err); /* the next variant's record starts clean */
        }
        nv++;
    }
    const int n_engine = nv;
    for (int i = 0; i < P.count; i++) {
        variant *x = &v[nv];
        x->algo = i;
        if (P.h[i].state != CUBLAS_STATUS_SUCCESS)
            continue;
        poison(L->d_c, c_elems);
        if (lt_run(&L->cb, &P, i, L->d_c) != CUBLAS_STATUS_SUCCESS)
            continue; /* an algorithm that refuses this call is not a candidate */
        x->rel = i == 0 ? 0 : compare(L, L->d_c, L->d_ref, c_elems, &x->nans);
        x->ok = x->nans == 0 && x->rel <= 1e-2;
        nv++;
    }
    const int n_lt_end = nv;
    variant *blas = &v[nv];
    blas->blas = 1;
    poison(L->d_c, c_elems);
    if (blas_run(&L->cb, &P, L->d_c) == CUBLAS_STATUS_SUCCESS) {
        blas->rel = compare(L, L->d_c, L->d_ref, c_elems, &blas->nans);
        blas->ok = blas->nans == 0 && blas->rel <= 1e-2;
        nv++;
    } else {
        blas = NULL;
    }
    LAB_CHECK(cudaDeviceSynchronize());

    /* --engine-only: cuBLASLt still checks, but is not timed (its times print as nan). */
    const int timed = o->engine_only ? n_engine : nv;
    for (int i = 0; i < timed; i++) {
        v[i].t = (float *)malloc(o->reps * sizeof(float));
        for (int w = 0; w < o->warmup; w++)
            time_variant(L, o, &P, &v[i], i, 0);
    }
    /* Rounds over the variants, so clock and thermal drift hit them all alike, each round in its
     * own order (a fixed-seed shuffle), so that no variant always follows the same one: a kernel
     * timed right after itself ran ~5% faster on the shapes under 30 us (H100, 2026-12-06: the
     * policy 1.055x the same kernel forced by index when timed just before it, 0.949x just after;
     * most likely its code still in the SMs' instruction caches, which the L2 flush does not
     * touch; docs/results, eighteenth session). */
    int order[MAX_VARIANTS + MAX_LT + 1];
    uint64_t seed = 0x9e3779b97f4a7c15ull;
    for (int r = 0; r < o->reps; r++) {
        for (int j = 0; j < timed; j++)
            order[j] = j;
        for (int j = timed - 1; j > 0; j--) {
            seed = seed * 6364136223846793005ull + 1442695040888963407ull;
            const int x = (int)((seed >> 33) % (uint64_t)(j + 1)), t = order[j];
            order[j] = order[x];
            order[x] = t;
        }
        for (int j = 0; j < timed; j++)
            time_variant(L, o, &P, &v[order[j]], order[j], r);
    }
    LAB_CHECK(cudaDeviceSynchronize());
    float *mhz = (float *)malloc((size_t)o->reps * sizeof(float));
    for (int i = 0; i < nv; i++) {
        v[i].mhz = NAN;
        if (!o->clock || i >= timed)
            continue;
        LAB_CHECK(cudaMemcpy(mhz, L->d_mhz + (size_t)i * o->reps, (size_t)o->reps * sizeof(float),
                              cudaMemcpyDeviceToHost));
        qsort(mhz, o->reps, sizeof(float), cmp_float);
        v[i].mhz = mhz[o->reps / 2];
    }
    free(mhz);
    int best = -1, n_ok = 0;
    for (int i = 0; i < nv; i++) {
        if (i < timed) {
            qsort(v[i].t, o->reps, sizeof(float), cmp_float);
            v[i].us = v[i].t[o->reps / 2];
        } else {
            v[i].us = NAN;
        }
        if (i >= n_engine && i < n_lt_end && v[i].ok) {
            n_ok++;
            if (best < 0 || v[i].us < v[best].us)
                best = i;
        }
    }
    const variant *top1 = n_engine < nv && v[n_engine].algo == 0 ? &v[n_engine] : NULL;
    if (best < 0 || !top1) {
        fprintf(stderr, "no working cuBLASLt algorithm for %lldx%lldx%lld\n", (long long)rows, (long long)n,
                (long long)k);
        exit(1);
    }
    char best_name[96];
    lt_algo_name(&P, v[best].algo, best_name, sizeof best_name);
    if (blas && !blas->ok) {
        printf("#   cublasGemmEx disagrees with cuBLASLt algorithm 0 (rel %.1e, %g NaN): not counted\n", blas->rel,
               blas->nans);
        blas = NULL;
    }
    const double blas_us = blas && blas->us == blas->us ? blas->us : NAN;
    const double yard = blas_us < v[best].us ? blas_us : v[best].us; /* the fastest cuBLAS */
    const double flop = 2.0 * rows * n * k;
    for (int i = 0; i < n_engine; i++) {
        const variant *x = &v[i];
        const double ratio = x->us / yard;
        printf("%-8s %2d %5lld %6lld %5lld %5lld  %-38s %9.1f %9.1f %9.1f %9.1f %2d  %6.3f %6.3f  %6.1f %6.1f  %.1e %s%s\n",
               s->label, s->w, (long long)s->m, (long long)rows, (long long)n, (long long)k,
               agmm_gemm_plan_describe(x->plan), x->us, top1->us, v[best].us, blas_us, v[best].algo, ratio,
               x->us / top1->us, flop / x->us * 1e-6, flop / yard * 1e-6, x->rel, x->ok ? "ok" : "FAIL",
               mhz_note(x->mhz));
        if (csv)
            fprintf(csv,
                    "%s,%d,%lld,%lld,%lld,%lld,%d,%s,%.2f,%.2f,%.2f,%d,%s,%d,%d,%.4f,%.4f,%.1f,%.1f,%.3e,%lld,%.0f,%.0f,"
                    "%.2f,%.0f,%s\n",
                    s->label, s->w, (long long)s->m, (long long)rows, (long long)n, (long long)k, x->config,
                    agmm_gemm_plan_describe(x->plan), x->us, top1->us, v[best].us, v[best].algo, best_name, n_ok,
                    P.count, ratio, x->us / top1->us, flop / x->us * 1e-6, flop / yard * 1e-6, x->rel,
                    (long long)x->nans, x->mhz, v[best].mhz, blas_us, blas ? blas->mhz : NAN, mode_names[o->mode]);
        stat_add(s, x->config, x->ok ? ratio : -1.0);
        fails += !x->ok;
    }
    for (int i = n_engine; i < nv; i++)
        if (!v[i].ok)
            printf("#   cuBLASLt algorithm %d disagrees with algorithm 0 (rel %.1e, %g NaN): not counted\n", v[i].algo,
                   v[i].rel, v[i].nans);
    fflush(stdout);
    if (csv)
        fflush(csv);
    for (int i = 0; i < nv; i++) {
        free(v[i].t);
        agmm_gemm_plan_destroy(v[i].plan);
    }
    lt_set_free(&P);
    return fails;
}

/* ---- shapes and options --------------------------------------------------------------------- */

static void add_shape(options *o, int *cap, const char *label, int w, int64_t m, int64_t n, int64_t k)
{
    if (o->nshapes == *cap) {
        *cap = *cap ? 2 * *cap : 256;
        o->shapes = (shape *)realloc(o->shapes, *cap * sizeof(shape));
        if (!o->shapes) {
            fprintf(stderr, "out of memory\n");
            exit(1);
        }
    }
    shape *s = &o->shapes[o->nshapes++];
    snprintf(s->label, sizeof s->label, "%s", label);
    s->w = w;
    s->m = m;
    s->n = n;
    s->k = k;
}

/* The model shapes: 8192 gathered rows, the TP8 slices of each model's MLP. */
static void add_model_shapes(options *o, int *cap)
{
    static const struct {
        const char *label;
        int64_t n, k;
    } models[] = {
        {"llama70b", 3584, 8192}, {"llama70b", 8192, 3584}, /* hidden 8192, intermediate 28672 / 8 */
        {"llama8b", 1792, 4096},  {"llama8b", 4096, 1792},  /* hidden 4096, intermediate 14336 / 8 */
        {"qwen72b", 3696, 8192},  {"qwen72b", 8192, 3696},  /* hidden 8192, intermediate 29568 / 8 */
    };
    for (size_t i = 0; i < sizeof models / sizeof models[0]; i++)
        add_shape(o, cap, models[i].label, 1, 8192, models[i].n, models[i].k);
}

static void read_shapes(options *o, int *cap, const char *path)
{
    FILE *f = fopen(path, "r");
    if (!f) {
        fprintf(stderr, "cannot open %s\n", path);
        exit(2);
    }
    char line[256];
    int lineno = 0;
    while (fgets(line, sizeof line, f)) {
        lineno++;
        char *hash = strchr(line, '#');
        if (hash)
            *hash = 0;
        for (char *c = line; *c; c++)
            if (*c == ',')
                *c = ' ';
        char label[24];
        int w;
        long long m, n, k;
        int got = sscanf(line, "%23s %d %lld %lld %lld", label, &w, &m, &n, &k);
        if (got <= 0)
            continue;
        if (got != 5 || w < 1 || m < 1 || n < 1 || k < 8 || k % 8) {
            fprintf(stderr, "%s:%d: want \"label W M N K\" (K a multiple of 8)\n", path, lineno);
            exit(2);
        }
        add_shape(o, cap, label, w, m, n, k);
    }
    fclose(f);
}

static void usage(void)
{
    fprintf(stderr, "usage: gemm-lab [--w 1,2,4,8] [--min M] [--max M] [--step S] [--no-models] [--shapes-file F] "
                    "[--list-shapes] [--configs -1,0,.. | all] [--algos N] [--lt-clusters] [--ws-mib N] [--max-ctas N] "
                    "[--engine-only] [--clock] [--reps N] [--warmup N] [--layout col|row] [--no-flush] [--mode plain|chunks|copy|pull] [--csv F]\n");
    exit(2);
}

static int parse_list(const char *v, int *out, int max)
{
    int count = 0;
    for (const char *s = v; *s && count < max;) {
        char *end;
        out[count++] = (int)strtol(s, &end, 10);
        if (end == s)
            usage();
        s = *end == ',' ? end + 1 : end;
    }
    return count;
}

static void parse(int argc, char **argv, options *o)
{
    memset(o, 0, sizeof *o);
    int ws[8] = {1, 2, 4, 8}, nw = 4, models = 1, cap = 0;
    int64_t min_m = 256, max_m = 4096, step = 128;
    const char *file = NULL;
    int all_configs = 0;
    o->configs[0] = -1, o->nconfigs = 1;
    o->algos = MAX_ALGOS, o->reps = 20, o->warmup = 3, o->flush = 1;
    o->ws_bytes = (size_t)64 << 20;
    o->layout = AGMM_LAYOUT_COL_MAJOR;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : "";
        const int has_value = i + 1 < argc;
        if (!strcmp(a, "--no-flush"))
            o->flush = 0;
        else if (!strcmp(a, "--no-models"))
            models = 0;
        else if (!strcmp(a, "--list-shapes"))
            o->list = 1;
        else if (!strcmp(a, "--lt-clusters"))
            o->lt_clusters = 1;
        else if (!strcmp(a, "--engine-only"))
            o->engine_only = 1;
        else if (!strcmp(a, "--clock"))
            o->clock = 1;
        else if (!has_value)
            usage();
        else if (!strcmp(a, "--w"))
            nw = parse_list(v, ws, 8), i++;
        else if (!strcmp(a, "--min"))
            min_m = atoll(v), i++;
        else if (!strcmp(a, "--max"))
            max_m = atoll(v), i++;
        else if (!strcmp(a, "--step"))
            step = atoll(v), i++;
        else if (!strcmp(a, "--shapes-file"))
            file = v, i++;
        else if (!strcmp(a, "--configs")) {
            all_configs = !strcmp(v, "all");
            if (all_configs) {
                o->nconfigs = 0;
                for (int c = -1; c < agmm_gemm_num_configs() && o->nconfigs < MAX_VARIANTS; c++)
                    o->configs[o->nconfigs++] = c;
            } else {
                o->nconfigs = parse_list(v, o->configs, MAX_VARIANTS);
            }
            i++;
        } else if (!strcmp(a, "--algos"))
            o->algos = atoi(v), i++;
        else if (!strcmp(a, "--ws-mib"))
            o->ws_bytes = (size_t)atoll(v) << 20, i++;
        else if (!strcmp(a, "--max-ctas"))
            o->max_ctas = atoi(v), i++;
        else if (!strcmp(a, "--reps"))
            o->reps = atoi(v), i++;
        else if (!strcmp(a, "--warmup"))
            o->warmup = atoi(v), i++;
        else if (!strcmp(a, "--layout"))
            o->layout = !strcmp(v, "row") ? AGMM_LAYOUT_ROW_MAJOR : AGMM_LAYOUT_COL_MAJOR, i++;
        else if (!strcmp(a, "--csv"))
            o->csv = v, i++;
        else if (!strcmp(a, "--mode")) {
            for (o->mode = 0; o->mode < MODES && strcmp(v, mode_names[o->mode]); o->mode++)
                ;
            if (o->mode == MODES) {
                fprintf(stderr, "--mode %s: want plain, chunks, copy or pull\n", v);
                exit(2);
            }
            i++;
        } else
            usage();
    }
    if (o->reps < 1)
        o->reps = 1;
    if (o->max_ctas < 0) {
        fprintf(stderr, "--max-ctas %d: want 0 (every SM) or a number of CTAs\n", o->max_ctas);
        exit(2);
    }
    if (o->algos < 1 || o->algos > MAX_ALGOS)
        o->algos = MAX_ALGOS;
    for (int i = 0; i < o->nconfigs; i++)
        if (o->configs[i] < -1 || o->configs[i] >= agmm_gemm_num_configs()) {
            fprintf(stderr, "config %d out of range (-1 .. %d)\n", o->configs[i], agmm_gemm_num_configs() - 1);
            exit(2);
        }
    /* "all" means every config the layout takes (a named one the plan refuses counts as failed). */
    if (all_configs) {
        int kept = 0;
        for (int i = 0; i < o->nconfigs; i++)
            if (o->configs[i] < 0 || agmm_gemm_config_takes(agmm_gemm_config_at(o->configs[i]),
                                                            o->layout == AGMM_LAYOUT_ROW_MAJOR))
                o->configs[kept++] = o->configs[i];
        o->nconfigs = kept;
    }
    if (file) {
        read_shapes(o, &cap, file);
    } else {
        for (int i = 0; i < nw; i++)
            for (int64_t m = min_m; m <= max_m && step > 0; m += step)
                add_shape(o, &cap, "seed", ws[i], m, m, m);
        if (models)
            add_model_shapes(o, &cap);
    }
    if (o->nshapes == 0) {
        fprintf(stderr, "no shapes\n");
        exit(2);
    }
}

int main(int argc, char **argv)
{
    options o;
    parse(argc, argv, &o);
    if (o.list) {
        printf("# label W M N K   (gathered rows = W*M)\n");
        for (int i = 0; i < o.nshapes; i++)
            printf("%s %d %lld %lld %lld\n", o.shapes[i].label, o.shapes[i].w, (long long)o.shapes[i].m,
                   (long long)o.shapes[i].n, (long long)o.shapes[i].k);
        return 0;
    }
    lab L;
    memset(&L, 0, sizeof L);
    L.flush_bytes = 256u << 20;
    void *ws;
    LAB_CHECK(cudaMalloc(&ws, o.ws_bytes));
    LAB_CHECK(cudaMalloc(&L.flush, L.flush_bytes));
    LAB_CHECK(cudaMalloc((void **)&L.d_sums, 3 * sizeof(double)));
    if (o.clock)
        LAB_CHECK(cudaMalloc((void **)&L.d_mhz, (size_t)(MAX_VARIANTS + MAX_LT + 1) * o.reps * sizeof(float)));
    LAB_CHECK(cudaEventCreate(&L.e0));
    LAB_CHECK(cudaEventCreate(&L.e1));

    size_t a_elems = 0, b_elems = 0, c_elems = 0;
    for (int i = 0; i < o.nshapes; i++) {
        const shape *s = &o.shapes[i];
        const size_t rows = (size_t)s->w * (size_t)s->m;
        a_elems = rows * s->k > a_elems ? rows * s->k : a_elems;
        b_elems = (size_t)(s->k * s->n) > b_elems ? (size_t)(s->k * s->n) : b_elems;
        c_elems = rows * s->n > c_elems ? rows * s->n : c_elems;
    }
    LAB_CHECK(cudaMalloc(&L.d_a, a_elems * 2));
    LAB_CHECK(cudaMalloc(&L.d_b, b_elems * 2));
    LAB_CHECK(cudaMalloc(&L.d_c, c_elems * 2));
    LAB_CHECK(cudaMalloc(&L.d_ref, c_elems * 2));
    if (o.mode != MODE_PLAIN) {
        LAB_CHECK(cudaMalloc(&L.d_gath, a_elems * 2));
        LAB_CHECK(cudaMalloc((void **)&L.d_flags, 2 * sizeof(uint32_t)));
        LAB_CHECK(cudaMemset(L.d_flags, 0, 2 * sizeof(uint32_t)));
        LAB_CHECK(cudaHostAlloc((void **)&L.h_err, sizeof *L.h_err, cudaHostAllocMapped));
        memset(L.h_err, 0, sizeof *L.h_err);
        LAB_CHECK(cudaHostGetDevicePointer((void **)&L.d_err, L.h_err, 0));
    }
    lab_cublas_init(&L.cb, ws, o.ws_bytes, L.d_a, L.d_b);
    fill_kernel<<<4096, 256>>>((__nv_bfloat16 *)L.d_a, a_elems, 0x1234, 0);
    fill_kernel<<<4096, 256>>>((__nv_bfloat16 *)L.d_b, b_elems, 0x9876, 0);
    LAB_CHECK(cudaDeviceSynchronize());

    cudaDeviceProp prop;
    LAB_CHECK(cudaGetDeviceProperties(&prop, 0));
    int ver = 0;
    cudaRuntimeGetVersion(&ver);
    printf("# gemm-lab on %s (%d SMs), CUDA runtime %d, cuBLASLt %zu; B %s-major; %s; median of %d after %d "
           "warm-ups; cuBLASLt: up to %d heuristic algorithms, and cublasGemmEx, %zu MiB workspace\n",
           prop.name, prop.multiProcessorCount, ver, cublasLtGetVersion(),
           o.layout == AGMM_LAYOUT_COL_MAJOR ? "column" : "row", o.flush ? "L2 flushed (256 MB) before each call" : "no flush",
           o.reps, o.warmup, o.algos, o.ws_bytes >> 20);
    /* Whose tables the engine's policy takes on this device (policy.h's device kinds), and how many
     * configs this build has: what tells two builds' labs apart in their logs. */
    printf("# engine policy: the %s tables (%.1f GiB of device memory); %d tile configs\n",
           agmm_gemm_device_name(agmm_gemm_current_device()), (double)prop.totalGlobalMem / (1 << 30),
           agmm_gemm_num_configs());
    if (o.mode != MODE_PLAIN)
        printf("# engine variants in mode %s: the one rank's shard is A, every tile local (header comment)\n",
               mode_names[o.mode]);
    if (o.max_ctas > 0 || o.engine_only)
        printf("# engine: at most %d CTAs (--max-ctas)%s\n", o.max_ctas > 0 ? o.max_ctas : prop.multiProcessorCount,
               o.engine_only ? "; cuBLASLt checks but is not timed (--engine-only)" : "");
    printf("%-8s %2s %5s %6s %5s %5s  %-38s %9s %9s %9s %9s %2s  %6s %6s  %6s %6s  %7s\n", "shape", "W", "M", "rows",
           "N", "K", "engine (config)", "eng_us", "lt1_us", "lt_best", "blas_us", "#", "/best", "/lt1", "TF_eng",
           "TF_bst", "rel_err");
    FILE *csv = o.csv ? fopen(o.csv, "w") : NULL;
    if (o.csv && !csv) {
        fprintf(stderr, "cannot write %s\n", o.csv);
        return 2;
    }
    if (csv)
        fprintf(csv, "shape,W,M,rows,N,K,config_req,config,engine_us,lt_top1_us,lt_best_us,lt_best_algo,"
                     "lt_best_name,lt_algos_ok,lt_algos,engine_over_best,engine_over_top1,engine_tflops,best_tflops,"
                     "rel_err,nans,sm_mhz,lt_best_mhz,blas_us,blas_mhz,mode\n");

    int fails = 0;
    for (int i = 0; i < o.nshapes; i++)
        fails += run_shape(&L, &o, csv, &o.shapes[i]);
    for (int i = 0; i < g_nstats; i++) {
        const group_stat *g = &g_stats[i];
        printf("# %-10s config %2d: %3d shapes, geomean engine/cuBLAS-best %.3f, worst %.3f%s\n", g->group, g->config,
               g->count, g->count ? exp(g->sum_log / g->count) : 0.0, g->worst, g->fails ? ", SOME FAILED" : "");
    }
    if (csv)
        fclose(csv);
    printf("# %s\n", fails ? "SOME ENGINE VARIANTS FAILED the correctness check"
                           : "every engine variant matches cuBLASLt (rel <= 1e-2, no NaN)");
    free(o.shapes);
    return fails ? 1 : 0;
}
