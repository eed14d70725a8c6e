/* agmm-proctest: one rank of a world of processes (agmm_world_join), started N times by
 * tests/process_test.sh (torchrun's variables set by hand, or mpirun) and on the GPU machine by
 * bench/process_run.sh (emulated ranks: processes sharing one GPU). It runs every backend the
 * world offers on odd shapes (M = 1, 7, 129; N = 8, 264; K = 8, 72; both layouts of B; one and
 * three chunks), all_reduce on odd sizes, the row-parallel matmuls on odd shapes
 * (proc_matmul_reduce.c), each twice with fresh small-integer inputs and poisoned outputs, and
 * compares with the fp64 reference bit for bit, and all_reduce_rmsnorm on T not divisible by W,
 * with and without bias and residual (arn_check.h); then a run reading its
 * input from caller-owned symmetric memory, and the run check (AGMM_CHECK_RUNS=1) of a rank whose
 * io.input is elsewhere; with --expect-span, that a world whose ranks claim
 * different hosts offers only the backends that need no peer memory, and that `auto` takes
 * nccl. Each rank prints its own PASS/FAIL lines, prefixed with its rank, and the summary.
 * With --rank, --nranks and --id-file the world is joined explicitly, as a framework would: rank 0
 * makes an agmm_unique_id and writes it to the file (the caller's own channel), the others read it.
 * With --borrow (a GPU world of one rank) the world borrows an NCCL communicator the test made,
 * which must still work after the world is gone. With --fault-case, one rank of a fault case
 * instead (fault_process.c).
 *
 *   agmm-proctest [--world cpu|gpu|emulated|auto] [--timeout S] [--expect-span]
 *                 [--rank R --nranks N --id-file FILE [--borrow]]
 *   agmm-proctest --fault-case POINT,ACTION,F,OP [--timeout S] [--check PREFIX N] */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "agmm.h"
#include "api/agmm_ext.h"
#include "core/hostmem.h"
#include "core/numeric.h"
#include "core/text.h"
#include "arn_check.h"
#include "cpu/reference.h"
#include "cpu_tests.h"
#include "fault_scenario.h"
#include "harness.h"
#ifdef AGMM_HAVE_CUDA
#include <cuda_runtime_api.h>
#include "world/gpu_headers.h"
#endif

typedef struct {
    agmm_world *world;
    agmm_ctx *ctx;
    int rank, nranks, gpu;
    void *stream;            /* cudaStream_t on GPUs */
} proc;

static proc P;

/* ---- memory on the rank's device: host memory in the CPU world ---- */

static void *dev_alloc(size_t bytes)
{
#ifdef AGMM_HAVE_CUDA
    if (P.gpu) {
        void *p = NULL;
        return cudaMalloc(&p, bytes) == cudaSuccess ? p : NULL;
    }
#endif
    return malloc(bytes);
}

static void dev_free(void *p)
{
#ifdef AGMM_HAVE_CUDA
    if (P.gpu) {
        cudaFree(p);
        return;
    }
#endif
    free(p);
}

/* Copies on the rank's stream, ordered before (or after) its runs; 0 on success. */
static int dev_copy(void *dst, const void *src, size_t bytes)
{
#ifdef AGMM_HAVE_CUDA
    if (P.gpu)
        return cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, (cudaStream_t)P.stream) != cudaSuccess ||
               cudaStreamSynchronize((cudaStream_t)P.stream) != cudaSuccess;
#endif
    memcpy(dst, src, bytes);
    return 0;
}

/* ---- ag_matmul ---- */

static const int64_t Ms[] = {1, 7, 129}, Ns[] = {8, 264}, Ks[] = {8, 72};

typedef struct {
    int64_t m, n, k, rows;
    uint16_t *a_all, *b, *ag, *c, *ref;   /* host */
    void *d_b, *d_ag, *d_c;               /* device */
} mm_bufs;

static int mm_alloc(mm_bufs *x, int64_t m, int64_t n, int64_t k)
{
    *x = (mm_bufs){.m = m, .n = n, .k = k, .rows = P.nranks * m};
    size_t a = (size_t)(x->rows * k) * 2, b = (size_t)(k * n) * 2, c = (size_t)(x->rows * n) * 2;
    x->a_all = malloc(a), x->ag = malloc(a), x->b = malloc(b), x->c = malloc(c), x->ref = malloc(c);
    x->d_b = dev_alloc(b), x->d_ag = dev_alloc(a), x->d_c = dev_alloc(c);
    return x->a_all && x->ag && x->b && x->c && x->ref && x->d_b && x->d_ag && x->d_c;
}

static void mm_free(mm_bufs *x)
{
    free(x->a_all), free(x->ag), free(x->b), free(x->c), free(x->ref);
    dev_free(x->d_b), dev_free(x->d_ag), dev_free(x->d_c);
}

/* One run with fresh inputs (seeded by `seed` and `run`): `input` is where this rank's shard goes
 * (the plan's buffer or caller-owned symmetric memory; io_input is what the io names). Returns a
 * description of the first difference, or NULL when C and the gathered A are exact. */
static const char *mm_run(agmm_plan *plan, mm_bufs *x, agmm_layout layout, uint64_t seed, int run, void *input,
                          const void *io_input, char *why, size_t len)
{
    const int64_t shard = x->m * x->k;
    for (int r = 0; r < P.nranks; r++)
        test_fill_bf16(x->a_all + r * shard, shard, test_seed_of(seed, r, run, 'A'), 2);
    test_fill_bf16(x->b, x->k * x->n, test_seed_of(seed, P.rank, run, 'B'), 2);
    if (agmm_ref_gemm_bf16(x->a_all, x->b, layout, x->rows, x->n, x->k, NULL, x->ref) != AGMM_SUCCESS)
        return "reference: out of memory";
    test_poison_bf16(x->ag, x->rows * x->k);
    test_poison_bf16(x->c, x->rows * x->n);
    if (dev_copy(input, x->a_all + P.rank * shard, (size_t)shard * 2) ||
        dev_copy(x->d_b, x->b, (size_t)(x->k * x->n) * 2) || dev_copy(x->d_ag, x->ag, (size_t)(x->rows * x->k) * 2) ||
        dev_copy(x->d_c, x->c, (size_t)(x->rows * x->n) * 2))
        return "upload failed";
    agmm_ag_matmul_io io = {.b = x->d_b, .a_gathered = x->d_ag, .c = x->d_c, .input = io_input};
    if (agmm_ag_matmul(plan, &io, P.stream) != AGMM_SUCCESS || agmm_ctx_sync(P.ctx) != AGMM_SUCCESS) {
        snprintf(why, len, "run %d: %s", run, agmm_last_error(P.ctx));
        return why;
    }
    if (dev_copy(x->ag, x->d_ag, (size_t)(x->rows * x->k) * 2) || dev_copy(x->c, x->d_c, (size_t)(x->rows * x->n) * 2))
        return "download failed";
    int64_t bad_a = agmm_ref_first_mismatch(x->ag, x->a_all, x->rows * x->k, 2);
    int64_t bad_c = agmm_ref_first_mismatch(x->c, x->ref, x->rows * x->n, 2);
    if (bad_a < 0 && bad_c < 0)
        return NULL;
    snprintf(why, len, "run %d: %s differs first at element %lld", run, bad_a >= 0 ? "gathered A" : "C",
             (long long)(bad_a >= 0 ? bad_a : bad_c));
    return why;
}

static void test_ag_matmul_shapes(const char *backend)
{
    for (size_t im = 0; im < 3; im++)
        for (size_t in = 0; in < 2; in++)
            for (size_t ik = 0; ik < 2; ik++) {
                int64_t m = Ms[im], n = Ns[in], k = Ks[ik];
                mm_bufs x;
                const char *bad = mm_alloc(&x, m, n, k) ? NULL : "allocation failed";
                char why[640] = "";
                int cases = 0;
                for (int layout = 0; layout < 2 && !bad; layout++)
                    for (int splits = 1; splits <= 3 && !bad; splits += 2) {
                        if (splits > m)
                            continue;
                        agmm_ag_matmul_desc d = {.m = m, .n = n, .k = k, .b_layout = (agmm_layout)layout,
                                                 .splits = splits, .backend = backend};
                        agmm_plan *plan = NULL;
                        if (agmm_plan_ag_matmul(&plan, P.ctx, &d) != AGMM_SUCCESS) {
                            snprintf(why, sizeof why, "plan: %s", agmm_last_error(P.ctx));
                            bad = why;
                            break;
                        }
                        uint64_t seed = (uint64_t)(im * 100 + in * 10 + ik) * 8 + (uint64_t)(layout * 4 + splits);
                        for (int run = 0; run < 2 && !bad; run++)
                            bad = mm_run(plan, &x, (agmm_layout)layout, seed, run, agmm_plan_input(plan), NULL, why,
                                         sizeof why);
                        agmm_plan_destroy(plan);
                        cases++;
                    }
                agmm_check(bad == NULL,
                           "rank %d: ag_matmul/%s W=%d M=%lld N=%lld K=%lld (%d layout/splits cases, 2 runs each): C and "
                           "gathered A exact%s%s",
                           P.rank, backend, P.nranks, (long long)m, (long long)n, (long long)k, cases, bad ? ": " : "",
                           bad ? bad : "");
                mm_free(&x);
            }
}

/* A run reading its shard from caller-owned symmetric memory, at an offset. */
static void proc_symmetric_input(const char *backend)
{
    const int64_t m = 7, n = 264, k = 72, shard_bytes = m * k * 2;
    mm_bufs x;
    void *sym = NULL;
    char why[640] = "";
    const char *bad = mm_alloc(&x, m, n, k) ? NULL : "allocation failed";
    agmm_ag_matmul_desc d = {.m = m, .n = n, .k = k, .backend = backend};
    agmm_plan *plan = NULL;
    if (!bad && agmm_symmetric_alloc(P.ctx, 2 * (size_t)shard_bytes + 256, &sym) != AGMM_SUCCESS)
        snprintf(why, sizeof why, "agmm_symmetric_alloc: %s", agmm_last_error(P.ctx)), bad = why;
    if (!bad && agmm_plan_ag_matmul(&plan, P.ctx, &d) != AGMM_SUCCESS)
        snprintf(why, sizeof why, "plan: %s", agmm_last_error(P.ctx)), bad = why;
    /* Offset 256: inside the buffer, 16-byte aligned, the same on every rank. */
    void *input = sym ? (char *)sym + 256 : NULL;
    for (int run = 0; run < 2 && !bad; run++)
        bad = mm_run(plan, &x, AGMM_LAYOUT_COL_MAJOR, 900, run, input, input, why, sizeof why);
    agmm_check(bad == NULL, "rank %d: ag_matmul/%s W=%d M=7 N=264 K=72 reading io.input in agmm_symmetric_alloc memory: "
               "exact%s%s", P.rank, backend, P.nranks, bad ? ": " : "", bad ? bad : "");
    agmm_plan_destroy(plan);
    agmm_symmetric_free(P.ctx, sym);
    mm_free(&x);
}

/* ---- all_reduce ---- */

static void test_all_reduce_sizes(const char *backend)
{
    static const int64_t sizes[] = {1, 7, 129, 4093};
    for (size_t i = 0; i < sizeof sizes / sizeof *sizes; i++)
        for (int dt = 0; dt < 2; dt++) {
            const int64_t n = sizes[i];
            const agmm_dtype dtype = dt ? AGMM_DTYPE_F32 : AGMM_DTYPE_BF16;
            const size_t esz = dt ? 4 : 2;
            agmm_all_reduce_desc d = {.n = n, .dtype = dtype, .backend = backend};
            agmm_plan *plan = NULL;
            char why[640] = "";
            const char *bad = NULL;
            void *ins[AGMM_MAX_RANKS] = {0}, *out = malloc((size_t)n * esz), *d_out = dev_alloc((size_t)n * esz);
            double *want = malloc((size_t)n * sizeof *want);
            for (int r = 0; r < P.nranks; r++)
                ins[r] = malloc((size_t)n * esz);
            if (!out || !d_out || !want || !ins[P.nranks - 1])
                bad = "allocation failed";
            else if (agmm_plan_all_reduce(&plan, P.ctx, &d) != AGMM_SUCCESS)
                snprintf(why, sizeof why, "plan: %s", agmm_last_error(P.ctx)), bad = why;
            for (int run = 0; run < 2 && !bad; run++) {
                for (int r = 0; r < P.nranks; r++) {
                    uint64_t seed = test_seed_of(500 + (uint64_t)(i * 2 + dt), r, run, 'V');
                    for (int64_t e = 0; e < n; e++) {
                        float v = (float)agmm_rng_small_int(&seed, 2);
                        if (dt)
                            ((float *)ins[r])[e] = v;
                        else
                            ((uint16_t *)ins[r])[e] = agmm_f32_to_bf16(v);
                    }
                }
                agmm_ref_all_reduce((const void *const *)ins, P.nranks, n, dtype, want);
                test_poison_bf16(out, (int64_t)((size_t)n * esz / 2));
                agmm_all_reduce_io io = {.out = d_out};
                if (dev_copy(agmm_plan_input(plan), ins[P.rank], (size_t)n * esz) ||
                    dev_copy(d_out, out, (size_t)n * esz))
                    bad = "upload failed";
                else if (agmm_all_reduce(plan, &io, P.stream) != AGMM_SUCCESS || agmm_ctx_sync(P.ctx) != AGMM_SUCCESS)
                    snprintf(why, sizeof why, "run %d: %s", run, agmm_last_error(P.ctx)), bad = why;
                else if (dev_copy(out, d_out, (size_t)n * esz))
                    bad = "download failed";
                else if (agmm_ref_max_abs_error(out, dtype, want, n) != 0)
                    snprintf(why, sizeof why, "run %d: the sum differs (max abs error %g)", run,
                             agmm_ref_max_abs_error(out, dtype, want, n)), bad = why;
            }
            agmm_check(bad == NULL, "rank %d: all_reduce/%s W=%d n=%lld %s (2 runs): exact%s%s", P.rank, backend,
                       P.nranks, (long long)n, dt ? "fp32" : "bf16", bad ? ": " : "", bad ? bad : "");
            agmm_plan_destroy(plan);
            for (int r = 0; r < P.nranks; r++)
                free(ins[r]);
            free(out), free(want);
            dev_free(d_out);
        }
}

/* ---- all_reduce_rmsnorm ---- */

static int arn_copy(void *dst, const void *src, size_t bytes, void *stream) { return dev_copy(dst, src, bytes); }

/* T not divisible by W, T < W, with and without bias and residual, in place, io.input (the
 * checks: arn_check.h). */
static void test_arn_shapes(const char *backend)
{
    /* The rank's own stream: ranks sharing a GPU may not run on the legacy default stream. */
    const arn_dev dev = {dev_alloc, dev_free, arn_copy, P.stream};
    const arn_case cases[] = {
        {1, 8, 1e-5, 1, 1, 0, 0, 1},
        {2 * P.nranks + 1, 264, 1e-5, 1, 1, 0, 0, 1},
        {P.nranks - 1 > 0 ? P.nranks - 1 : 1, 72, 1e-6, 0, 0, 0, 0, 1},
        {7, 1032, 1e-6, 1, 1, 1, 1, 0},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        arn_result res;
        char name[128];
        arn_check_run(P.ctx, backend, &cases[i], &dev, 2, 900 + i, &res);
        agmm_check(res.runs == 2, "rank %d: all_reduce_rmsnorm/%s W=%d %s (2 runs): right (rel err r' %.1e, y %.1e)%s%s",
                   P.rank, backend, P.nranks, arn_case_name(&cases[i], name, sizeof name), res.r_err, res.y_err,
                   res.msg[0] ? ": " : "", res.msg);
    }
}

/* ---- what the ranks settle at plan time, across processes ---- */

/* A descriptor wrong on rank 1 only: every process fails alike, the others with rank 1's own
 * detail (a plan request fills a whole host exchange slot: src/api/plan_agree.c), and the ranks
 * stay in step (a correct plan right after runs). */
static void test_plan_disagreement(void)
{
    agmm_ag_matmul_desc d = {.m = 7, .n = 8, .k = P.rank == 1 ? 100 : 8, .backend = "nccl"};
    agmm_plan *plan = NULL;
    agmm_status st = agmm_plan_ag_matmul(&plan, P.ctx, &d);
    char msg[AGMM_ERROR_LEN];
    snprintf(msg, sizeof msg, "%s", agmm_last_error(P.ctx));
    agmm_plan_destroy(plan);
    agmm_all_reduce_desc ok = {.n = 7, .dtype = AGMM_DTYPE_F32, .backend = "nccl"};
    plan = NULL;
    agmm_status after = agmm_plan_all_reduce(&plan, P.ctx, &ok);
    agmm_plan_destroy(plan);
    agmm_check(st == AGMM_ERR_INVALID_ARG && strstr(msg, "K=100 is not a multiple of 8") &&
                   (P.rank == 1 || strstr(msg, "rank 1: ")) && after == AGMM_SUCCESS,
               "rank %d of %d processes: a descriptor wrong on rank 1 only fails every rank with its detail (%s: "
               "\"%s\"), and a plan right after is made (%s)",
               P.rank, P.nranks, agmm_status_str(st), msg, agmm_status_str(after));
}

/* AGMM_CHECK_RUNS=1 across processes (set at launch: the world reads it when it is made, and then
 * every run of this program is checked): rank 1 reads io.input at another offset of the agreed
 * buffer, and every rank fails naming it (the digests cross the processes' host exchange); the run
 * right after, on the agreed offset, sums exactly. Without the variable, a note and nothing else. */
static void test_run_check_procs(const char *backend)
{
    const char *on = getenv("AGMM_CHECK_RUNS");
    if (on == NULL || strcmp(on, "1") != 0) {
        printf("rank %d: the run check's case needs AGMM_CHECK_RUNS=1 at launch (tests/process_test.sh sets it for "
               "3 processes)\n", P.rank);
        return;
    }
    enum { n = 67, off = 512 };
    float in[n], out[n];
    for (int i = 0; i < n; i++)
        in[i] = (float)(P.rank * 100 + i);
    void *sym = NULL, *d_out = dev_alloc(sizeof out);
    agmm_plan *plan = NULL;
    agmm_all_reduce_desc d = {.n = n, .dtype = AGMM_DTYPE_F32, .backend = backend};
    agmm_status st = d_out ? agmm_symmetric_alloc(P.ctx, off + sizeof in, &sym) : AGMM_ERR_NO_MEMORY;
    if (st == AGMM_SUCCESS)
        st = agmm_plan_all_reduce(&plan, P.ctx, &d);
    if (st == AGMM_SUCCESS && dev_copy((char *)sym + off, in, sizeof in))
        st = AGMM_ERR_INTERNAL;
    char msg[AGMM_ERROR_LEN] = "";
    agmm_status wrong = AGMM_ERR_INTERNAL, right = AGMM_ERR_INTERNAL;
    int exact = 0;
    if (st == AGMM_SUCCESS) {
        agmm_all_reduce_io io = {.out = d_out, .input = (char *)sym + (P.rank == 1 ? 0 : off)};
        wrong = agmm_all_reduce(plan, &io, P.stream);
        snprintf(msg, sizeof msg, "%s", agmm_last_error(P.ctx));
        io.input = (char *)sym + off;
        right = agmm_all_reduce(plan, &io, P.stream);
        if (right == AGMM_SUCCESS)
            right = agmm_ctx_sync(P.ctx);
        exact = right == AGMM_SUCCESS && dev_copy(out, d_out, sizeof out) == 0;
        for (int i = 0; exact && i < n; i++)
            exact = out[i] == (float)(100 * P.nranks * (P.nranks - 1) / 2 + P.nranks * i);
    }
    agmm_check(wrong == AGMM_ERR_INVALID_ARG && strstr(msg, "rank 1 runs all_reduce/") && strstr(msg, "at byte 0 of") &&
                   exact,
               "rank %d of %d processes: all_reduce/%s with AGMM_CHECK_RUNS=1, rank 1's io.input at offset 0 and the "
               "others' at %d: every rank refuses naming rank 1 (%s: \"%s\"), and the run after sums exactly (%s)",
               P.rank, P.nranks, backend, off, agmm_status_str(wrong), msg, agmm_status_str(right));
    agmm_plan_destroy(plan);
    agmm_symmetric_free(P.ctx, sym);
    dev_free(d_out);
}

/* The processes of a job on one host share its memory: a plan whose need fits the host's
 * available memory once but not once per process is refused on every rank, before anything is
 * allocated. Its size is 55% of rank 0's reading of what is available; each rank first asks
 * agmm_ext_check_memory about it, and the plan is made only where every rank was told it does
 * not fit (a broken count would otherwise allocate it, once per process). */
static void test_host_memory_shared(void)
{
    agmm_host_memory m;
    agmm_host_memory_available(&m);
    uint64_t avail[AGMM_MAX_RANKS];
    if (!agmm_check(agmm_ext_exchange(P.ctx, &m.bytes, sizeof m.bytes, avail) == AGMM_SUCCESS,
                    "rank %d: host memory readings exchanged: %s", P.rank, agmm_last_error(P.ctx)))
        return;
    if (avail[0] == UINT64_MAX) { /* every rank sees rank 0's reading: all skip alike */
        agmm_skip("rank %d: host memory shared by processes: rank 0 cannot read what is available (%s)", P.rank,
                  m.source);
        return;
    }
    const int64_t k = 8, m_rows = (int64_t)(avail[0] / 100 * 55 / (uint64_t)(2 * k));
    const uint64_t need = (uint64_t)(m_rows * k * 2);
    char why[512] = "";
    int32_t refused = agmm_ext_check_memory(P.ctx, 0, need, why, sizeof why) == AGMM_ERR_NO_MEMORY, all[AGMM_MAX_RANKS];
    int every = agmm_ext_exchange(P.ctx, &refused, sizeof refused, all) == AGMM_SUCCESS;
    for (int r = 0; r < P.nranks; r++)
        every &= all[r];
    char shared[48];
    snprintf(shared, sizeof shared, "x %d ranks sharing it", P.nranks);
    agmm_check(every && strstr(why, shared),
               "rank %d of %d processes: %s of host memory per rank (55%% of %s available) does not fit %d processes "
               "on one host (agmm_ext_check_memory on every rank): \"%s\"",
               P.rank, P.nranks, agmm_bytes(need).s, agmm_bytes(avail[0]).s, P.nranks, why);
    if (!every)
        return;
    agmm_ag_matmul_desc d = {.m = m_rows, .n = 8, .k = k, .backend = "nccl"};
    agmm_plan *plan = NULL;
    agmm_status st = agmm_plan_ag_matmul(&plan, P.ctx, &d);
    const char *msg = agmm_last_error(P.ctx);
    agmm_check(st == AGMM_ERR_NO_MEMORY && strstr(msg, shared) && strstr(msg, "is available"),
               "rank %d of %d processes: ag_matmul/nccl M=%lld K=%lld (%s per rank) is refused on every rank: %s "
               "\"%s\"",
               P.rank, P.nranks, (long long)m_rows, (long long)k, agmm_bytes(need).s, agmm_status_str(st), msg);
    agmm_plan_destroy(plan);
}

/* ---- a world whose ranks claim different hosts ---- */

static void test_span(void)
{
    static const struct {
        agmm_op op;
        const char *backend;
    } symmetric[] = {{AGMM_OP_AG_MATMUL, "ce"},
                     {AGMM_OP_AG_MATMUL, "fused"},
                     {AGMM_OP_ALL_REDUCE, "one_shot"},
                     {AGMM_OP_ALL_REDUCE, "two_shot"},
                     {AGMM_OP_ALL_REDUCE_RMSNORM, "one_shot"},
                     {AGMM_OP_ALL_REDUCE_RMSNORM, "two_shot"}};
    for (size_t i = 0; i < sizeof symmetric / sizeof *symmetric; i++) {
        char why[512] = "";
        int avail = agmm_backend_available(P.world, symmetric[i].op, symmetric[i].backend, why, sizeof why);
        agmm_check(!avail && strstr(why, "ranks span nodes") != NULL,
                   "rank %d: ranks on different hosts: %s/%s is not available: \"%s\"", P.rank,
                   agmm_op_name(symmetric[i].op), symmetric[i].backend, why);
    }
    agmm_plan *plan = NULL;
    agmm_ag_matmul_desc mm = {.m = 8, .n = 8, .k = 8};
    agmm_status st = agmm_plan_ag_matmul(&plan, P.ctx, &mm);
    agmm_check(st == AGMM_SUCCESS && strcmp(agmm_plan_backend(plan), "nccl") == 0,
               "rank %d: ranks on different hosts: ag_matmul auto takes %s (%s)", P.rank, agmm_plan_backend(plan),
               agmm_status_str(st));
    agmm_plan_destroy(plan);
    plan = NULL;
    agmm_all_reduce_desc ar = {.n = 8, .dtype = AGMM_DTYPE_F32};
    st = agmm_plan_all_reduce(&plan, P.ctx, &ar);
    agmm_check(st == AGMM_SUCCESS && strcmp(agmm_plan_backend(plan), "nccl") == 0,
               "rank %d: ranks on different hosts: all_reduce auto takes %s (%s)", P.rank, agmm_plan_backend(plan),
               agmm_status_str(st));
    agmm_plan_destroy(plan);
}

#ifdef AGMM_HAVE_CUDA
/* A communicator of one rank for the world to borrow, or NULL after a FAIL line. */
static void *lend_comm(void)
{
    ncclComm_t comm = NULL;
    int dev = 0;
    int ok = agmm_check(ncclCommInitAll(&comm, 1, &dev) == ncclSuccess, "a communicator of one rank to lend");
    return ok ? comm : NULL;
}

/* After the world is gone, the lent communicator is still the caller's and still works. */
static void check_lent_comm(void *vcomm)
{
    ncclComm_t comm = vcomm;
    float *x = NULL;
    cudaStream_t s = NULL;
    int count = 0;
    int ok = ncclCommCount(comm, &count) == ncclSuccess && count == 1 && cudaMalloc((void **)&x, 4096) == cudaSuccess &&
             cudaStreamCreate(&s) == cudaSuccess &&
             ncclAllReduce(x, x, 1024, ncclFloat32, ncclSum, comm, s) == ncclSuccess &&
             cudaStreamSynchronize(s) == cudaSuccess;
    agmm_check(ok, "the borrowed communicator still works after agmm_world_destroy (an ncclAllReduce on it)");
    cudaFree(x);
    if (s)
        cudaStreamDestroy(s);
    ncclCommDestroy(comm);
}
#endif

static int usage(const char *what)
{
    fprintf(stderr, "agmm-proctest: %s\nusage: agmm-proctest [--world cpu|gpu|emulated|auto] [--timeout S] "
                    "[--expect-span] [--rank R --nranks N --id-file FILE]\n", what);
    return 2;
}

/* The id through a file: rank 0 makes and writes it (whole, by a rename), the others wait for it
 * (up to 20 s). 0 on success. */
static int share_id(agmm_world_kind kind, int rank, const char *path, agmm_unique_id *id)
{
    if (rank == 0) {
        char tmp[512];
        snprintf(tmp, sizeof tmp, "%s.tmp", path);
        FILE *f = fopen(tmp, "wb");
        int ok = agmm_unique_id_create(kind, id) == AGMM_SUCCESS && f && fwrite(id, sizeof *id, 1, f) == 1;
        if (f)
            ok &= fclose(f) == 0;
        return ok && rename(tmp, path) == 0 ? 0 : -1;
    }
    for (int i = 0; i < 2000; i++) {
        FILE *f = fopen(path, "rb");
        if (f) {
            size_t got = fread(id, sizeof *id, 1, f);
            fclose(f);
            return got == 1 ? 0 : -1;
        }
        struct timespec t = {0, 10000000};
        nanosleep(&t, NULL);
    }
    return -1;
}

int main(int argc, char **argv)
{
    if (argc > 1 && !strcmp(argv[1], "--fault-case"))
        return fault_process_main(argc, argv);
    agmm_join_config jc = {.kind = AGMM_WORLD_CPU, .rank = -1, .nranks = -1, .device = -1, .timeout_s = 10};
    int expect_span = 0;
    const char *id_file = NULL;
    for (int i = 1; i < argc; i++) {
        const char *v = i + 1 < argc ? argv[i + 1] : "";
        if (!strcmp(argv[i], "--expect-span"))
            expect_span = 1;
        else if (!strcmp(argv[i], "--rank") && *v)
            jc.rank = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--nranks") && *v)
            jc.nranks = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--id-file") && *v)
            id_file = argv[++i];
#ifdef AGMM_HAVE_CUDA
        else if (!strcmp(argv[i], "--borrow")) {
            if ((jc.nccl_comm = lend_comm()) == NULL)
                return agmm_test_summary();
        }
#endif
        else if (!strcmp(argv[i], "--timeout") && atof(v) > 0)
            jc.timeout_s = atof(argv[++i]);
        else if (!strcmp(argv[i], "--world") && !strcmp(v, "cpu"))
            jc.kind = AGMM_WORLD_CPU, i++;
        else if (!strcmp(argv[i], "--world") && !strcmp(v, "gpu"))
            jc.kind = AGMM_WORLD_GPU, i++;
        else if (!strcmp(argv[i], "--world") && !strcmp(v, "emulated"))
            jc.kind = AGMM_WORLD_EMULATED, i++;
        else if (!strcmp(argv[i], "--world") && !strcmp(v, "auto"))
            jc.kind = AGMM_WORLD_AUTO, i++;
        else
            return usage(argv[i]);
    }
    agmm_unique_id id;
    if (id_file != NULL) {
        if (!agmm_check(share_id(jc.kind, jc.rank, id_file, &id) == 0, "rank %d: the unique id through %s", jc.rank,
                        id_file))
            return agmm_test_summary();
        jc.id = &id;
    }
    char err[768] = "";
    agmm_status st = agmm_world_join(&P.world, &jc, err, sizeof err);
    if (!agmm_check(st == AGMM_SUCCESS, "joined a process world: %s%s%s", agmm_status_str(st), err[0] ? ": " : "", err))
        return agmm_test_summary();
    P.rank = agmm_world_first_rank(P.world);
    P.nranks = agmm_world_nranks(P.world);
    P.gpu = agmm_world_kind_of(P.world) != AGMM_WORLD_CPU;
    printf("rank %d: %s\n", P.rank, agmm_world_describe(P.world));
    st = agmm_ctx_create(&P.ctx, P.world, P.rank);
    if (agmm_check(st == AGMM_SUCCESS, "rank %d: context of a %d-process world: %s", P.rank, P.nranks,
                   agmm_status_str(st))) {
#ifdef AGMM_HAVE_CUDA
        cudaStream_t s = NULL;
        if (P.gpu && cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) != cudaSuccess)
            agmm_check(0, "rank %d: cudaStreamCreateWithFlags", P.rank);
        P.stream = s;
#endif
        if (expect_span)
            test_span();
        if (!P.gpu) {
            test_plan_disagreement();
            if (!expect_span) /* ranks claiming other hosts do not share this one's memory */
                test_host_memory_shared();
        }
        for (agmm_op op = 0; (int)op < agmm_ext_op_count(); op++)
            for (int b = 0; agmm_backend_name(op, b) != NULL; b++) {
                const char *name = agmm_backend_name(op, b);
                char why[512];
                if (!agmm_backend_available(P.world, op, name, why, sizeof why)) {
                    printf("rank %d: %s/%s: %s\n", P.rank, agmm_op_name(op), name, why);
                    continue;
                }
                if (op == AGMM_OP_AG_MATMUL) {
                    test_ag_matmul_shapes(name);
                    proc_symmetric_input(name);
                } else if (op == AGMM_OP_ALL_REDUCE) {
                    test_all_reduce_sizes(name);
                    if (b == 0)
                        test_run_check_procs(name);
                } else if (op == AGMM_OP_ALL_REDUCE_RMSNORM) {
                    test_arn_shapes(name);
                } else if (op == AGMM_OP_MATMUL_REDUCE_SCATTER || op == AGMM_OP_MATMUL_ALL_REDUCE) {
                    proc_matmul_reduce(P.ctx, P.nranks, P.gpu, P.stream, op, name);
                } else {
                    agmm_check(0, "rank %d: %s/%s: no process test for this operation in test_process.c", P.rank,
                               agmm_op_name(op), name);
                }
            }
#ifdef AGMM_HAVE_CUDA
        if (s)
            cudaStreamDestroy(s);
#endif
        agmm_ctx_destroy(P.ctx);
    }
    agmm_world_destroy(P.world);
#ifdef AGMM_HAVE_CUDA
    if (jc.nccl_comm)
        check_lent_comm(jc.nccl_comm);
#endif
    return agmm_test_summary();
}
