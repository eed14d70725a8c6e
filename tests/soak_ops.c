/* The soak's case of each operation of the library (soak.h): random shapes, inputs of small
 * integers (so every result is exact in bf16 and fp32 and is compared bit for bit), one run
 * through the public API, and the exact result. Every rank derives every rank's inputs from the
 * step's seed, so each checks its own outputs alone. An operation the library gains needs a case
 * here: the soak refuses to start without one (soak_op_find). */
#include <stdio.h>
#include <string.h>

#include "api/agmm_ext.h"
#include "arn_check.h"
#include "soak.h"

static int64_t draw_in(uint64_t *rng, int64_t lo, int64_t hi)
{
    return lo + (int64_t)(agmm_rng_next(rng) % (uint64_t)(hi - lo + 1));
}

/* Value i's stream of input `what` of `rank` in the step of `seed`. */
static uint64_t stream_of(uint64_t seed, int rank, int what)
{
    uint64_t s = seed ^ ((uint64_t)rank << 24) ^ ((uint64_t)what << 56);
    return agmm_rng_next(&s);
}

static void small_bf16(uint16_t *x, int64_t count, uint64_t state, int span)
{
    for (int64_t i = 0; i < count; i++)
        x[i] = agmm_f32_to_bf16((float)agmm_rng_small_int(&state, span));
}

/* ---- ag_matmul: dim = {m, n, k, splits}, variant bit 0: B row-major ---- */

enum { MM_MAX_M = 48, MM_MAX_N = 130, MM_MAX_K = 96 };

static void mm_draw(uint64_t *rng, int nranks, soak_shape *s)
{
    memset(s, 0, sizeof *s);
    const int64_t m = agmm_rng_next(rng) % 8 == 0 ? 1 : draw_in(rng, 1, MM_MAX_M);
    const int64_t k = 8 * draw_in(rng, 1, MM_MAX_K / 8);
    s->variant = (unsigned)(agmm_rng_next(rng) & 1);
    /* A row-major B needs 16-byte rows (n a multiple of 8); column-major takes any n. */
    const int64_t n = s->variant ? 8 * draw_in(rng, 1, MM_MAX_N / 8) : draw_in(rng, 1, MM_MAX_N);
    s->dim[0] = m, s->dim[1] = n, s->dim[2] = k;
    s->dim[3] = draw_in(rng, 0, m < 4 ? m : 4);
}

static void mm_largest(soak_shape *s)
{
    memset(s, 0, sizeof *s);
    s->dim[0] = MM_MAX_M, s->dim[1] = MM_MAX_N, s->dim[2] = MM_MAX_K, s->dim[3] = 4;
}

static void mm_describe(const soak_shape *s, char *buf, size_t len)
{
    snprintf(buf, len, "M=%lld N=%lld K=%lld b_layout=%s splits=%lld", (long long)s->dim[0], (long long)s->dim[1],
             (long long)s->dim[2], s->variant ? "row" : "col", (long long)s->dim[3]);
}

static size_t mm_sizes(const soak_shape *s, int nranks, size_t bytes[], soak_role role[], int *nbufs)
{
    const size_t m = (size_t)s->dim[0], n = (size_t)s->dim[1], k = (size_t)s->dim[2], w = (size_t)nranks;
    bytes[0] = k * n * 2, role[0] = SOAK_OPERAND;      /* B */
    bytes[1] = w * m * k * 2, role[1] = SOAK_OUTPUT;   /* the gathered A */
    bytes[2] = w * m * n * 2, role[2] = SOAK_OUTPUT;   /* C */
    *nbufs = 3;
    return m * k * 2;
}

static agmm_status mm_plan(agmm_plan **plan, agmm_ctx *ctx, const soak_shape *s, const char *backend)
{
    agmm_ag_matmul_desc d = {.m = s->dim[0], .n = s->dim[1], .k = s->dim[2], .splits = (int)s->dim[3],
                             .b_layout = s->variant ? AGMM_LAYOUT_ROW_MAJOR : AGMM_LAYOUT_COL_MAJOR,
                             .backend = backend};
    return agmm_plan_ag_matmul(plan, ctx, &d);
}

static void mm_fill(const soak_shape *s, int nranks, int rank, uint64_t seed, void *input, void *const host[])
{
    small_bf16(input, s->dim[0] * s->dim[2], stream_of(seed, rank, 'A'), 1);
    small_bf16(host[0], s->dim[2] * s->dim[1], stream_of(seed, rank, 'B'), 1);
}

static agmm_status mm_run(agmm_plan *plan, const soak_shape *s, void *in, int sym, void *const buf[], soak_dev *d)
{
    agmm_ag_matmul_io io = {.b = buf[0], .a_gathered = buf[1], .c = buf[2], .input = sym ? in : NULL};
    return agmm_ag_matmul(plan, &io, d->stream);
}

static int mm_check(const soak_shape *s, int nranks, int rank, uint64_t seed, const char *backend, int gpu,
                    void *const host[], char *why, size_t len)
{
    const int64_t m = s->dim[0], n = s->dim[1], k = s->dim[2], rows = nranks * m;
    const uint16_t *ag = host[1], *c = host[2];
    uint16_t shard[MM_MAX_M * MM_MAX_K], b[MM_MAX_K * MM_MAX_N];
    /* Every rank's shard in place in the gathered A, bit for bit. */
    for (int p = 0; p < nranks; p++) {
        small_bf16(shard, m * k, stream_of(seed, p, 'A'), 1);
        for (int64_t i = 0; i < m * k; i++)
            if (ag[p * m * k + i] != shard[i]) {
                snprintf(why, len, "gathered A[%lld][%lld] = %g, want %g (rank %d's shard)",
                         (long long)(p * m + i / k), (long long)(i % k), agmm_bf16_to_f32(ag[p * m * k + i]),
                         agmm_bf16_to_f32(shard[i]), p);
                return 0;
            }
    }
    /* C = A * B with this rank's B, exact: |sums| <= K <= 96. */
    small_bf16(b, k * n, stream_of(seed, rank, 'B'), 1);
    for (int64_t i = 0; i < rows; i++)
        for (int64_t j = 0; j < n; j++) {
            float acc = 0;
            for (int64_t kk = 0; kk < k; kk++)
                acc += agmm_bf16_to_f32(ag[i * k + kk]) * agmm_bf16_to_f32(s->variant ? b[kk * n + j] : b[j * k + kk]);
            if (agmm_bf16_to_f32(c[i * n + j]) != acc) {
                snprintf(why, len, "C[%lld][%lld] = %g, want %g", (long long)i, (long long)j,
                         agmm_bf16_to_f32(c[i * n + j]), acc);
                return 0;
            }
        }
    return 1;
}

/* ---- all_reduce: dim[0] = n, variant bit 0: fp32 (else bf16), bit 1: in place ---- */

enum { AR_MAX_N = 20000 };

static void ar_draw(uint64_t *rng, int nranks, soak_shape *s)
{
    memset(s, 0, sizeof *s);
    s->dim[0] = agmm_rng_next(rng) % 4 == 0 ? draw_in(rng, 1, 64) : draw_in(rng, 65, AR_MAX_N);
    s->variant = (unsigned)(agmm_rng_next(rng) & 3);
}

static void ar_largest(soak_shape *s)
{
    memset(s, 0, sizeof *s);
    s->dim[0] = AR_MAX_N, s->variant = 1;
}

static void ar_describe(const soak_shape *s, char *buf, size_t len)
{
    snprintf(buf, len, "n=%lld %s %s", (long long)s->dim[0], s->variant & 1 ? "fp32" : "bf16",
             s->variant & 2 ? "in place" : "out of place");
}

static size_t ar_esize(const soak_shape *s) { return s->variant & 1 ? 4 : 2; }

static size_t ar_sizes(const soak_shape *s, int nranks, size_t bytes[], soak_role role[], int *nbufs)
{
    bytes[0] = (size_t)s->dim[0] * ar_esize(s), role[0] = SOAK_OUTPUT;
    *nbufs = 1;
    return bytes[0];
}

static agmm_status ar_plan(agmm_plan **plan, agmm_ctx *ctx, const soak_shape *s, const char *backend)
{
    agmm_all_reduce_desc d = {.n = s->dim[0], .dtype = s->variant & 1 ? AGMM_DTYPE_F32 : AGMM_DTYPE_BF16,
                              .backend = backend};
    return agmm_plan_all_reduce(plan, ctx, &d);
}

/* Element i of rank `rank`'s vector: -4..4. */
static void ar_values(const soak_shape *s, int rank, uint64_t seed, void *out)
{
    uint64_t st = stream_of(seed, rank, 'V');
    for (int64_t i = 0; i < s->dim[0]; i++) {
        const float v = (float)agmm_rng_small_int(&st, 4);
        if (s->variant & 1)
            ((float *)out)[i] = v;
        else
            ((uint16_t *)out)[i] = agmm_f32_to_bf16(v);
    }
}

static void ar_fill(const soak_shape *s, int nranks, int rank, uint64_t seed, void *input, void *const host[])
{
    ar_values(s, rank, seed, input);
}

static agmm_status ar_run(agmm_plan *plan, const soak_shape *s, void *in, int sym, void *const buf[], soak_dev *d)
{
    const int in_place = (s->variant & 2) != 0;
    agmm_all_reduce_io io = {.out = in_place ? in : buf[0], .input = sym ? in : NULL};
    agmm_status st = agmm_all_reduce(plan, &io, d->stream);
    /* The sum is in the input: keep it before the driver poisons the input. */
    if (st == AGMM_SUCCESS && in_place && soak_dev_copy(d, buf[0], in, (size_t)s->dim[0] * ar_esize(s)) != 0)
        st = AGMM_ERR_CUDA;
    return st;
}

static int ar_check(const soak_shape *s, int nranks, int rank, uint64_t seed, const char *backend, int gpu,
                    void *const host[], char *why, size_t len)
{
    union {
        float f[AR_MAX_N];
        uint16_t h[AR_MAX_N];
    } x;
    float sum[AR_MAX_N];
    memset(sum, 0, sizeof sum);
    for (int p = 0; p < nranks; p++) {
        ar_values(s, p, seed, &x);
        for (int64_t i = 0; i < s->dim[0]; i++)
            sum[i] += s->variant & 1 ? x.f[i] : agmm_bf16_to_f32(x.h[i]);
    }
    for (int64_t i = 0; i < s->dim[0]; i++) {
        const float got =
            s->variant & 1 ? ((const float *)host[0])[i] : agmm_bf16_to_f32(((const uint16_t *)host[0])[i]);
        if (got != sum[i]) {
            snprintf(why, len, "element %lld = %g, want %g", (long long)i, got, sum[i]);
            return 0;
        }
    }
    return 1;
}

/* ---- the row-parallel matmuls (matmul_reduce_scatter, matmul_all_reduce): dim = {m, n, k},
 * variant bit 0: B row-major. A_r and B_r are each rank's own operands; S = sum of A_r * B_r,
 * summed in rank order (agmm.h). Values in {-1, 0, 1} and K <= 256 / W keep every partial sum an
 * integer of at most 256, exact in bf16 whatever the order (nccl adds in its own). ---- */

enum { RP_MAX_M = 48, RP_MAX_N = 130, RP_MAX_K = 96 };

static int64_t rp_max_k(int nranks)
{
    int64_t k = (256 / nranks) / 8 * 8;
    return k < 8 ? 8 : k > RP_MAX_K ? RP_MAX_K : k;
}

static void rp_draw(uint64_t *rng, int nranks, soak_shape *s)
{
    memset(s, 0, sizeof *s);
    s->dim[0] = agmm_rng_next(rng) % 8 == 0 ? 1 : draw_in(rng, 1, RP_MAX_M);
    s->dim[2] = 8 * draw_in(rng, 1, rp_max_k(nranks) / 8);
    s->variant = (unsigned)(agmm_rng_next(rng) & 1);
    s->dim[1] = s->variant ? 8 * draw_in(rng, 1, RP_MAX_N / 8) : draw_in(rng, 1, RP_MAX_N);
}

static void rp_largest(soak_shape *s)
{
    memset(s, 0, sizeof *s);
    s->dim[0] = RP_MAX_M, s->dim[1] = RP_MAX_N, s->dim[2] = RP_MAX_K;
}

static void rp_describe(const soak_shape *s, char *buf, size_t len)
{
    snprintf(buf, len, "M=%lld N=%lld K=%lld b_layout=%s", (long long)s->dim[0], (long long)s->dim[1],
             (long long)s->dim[2], s->variant ? "row" : "col");
}

/* The output's rows on `rank` (all of S for matmul_all_reduce: scatter = 0). */
static int64_t rp_rows(const soak_shape *s, int nranks, int rank, int scatter, int64_t *row0)
{
    *row0 = 0;
    return scatter ? agmm_matmul_reduce_scatter_rows(s->dim[0], nranks, rank, row0) : s->dim[0];
}

/* A_r, B_r (operands) and the output: the most rows any rank gets. No symmetric input. */
static size_t rp_sizes_of(const soak_shape *s, int nranks, int scatter, size_t bytes[], soak_role role[], int *nbufs)
{
    const size_t m = (size_t)s->dim[0], n = (size_t)s->dim[1], k = (size_t)s->dim[2];
    const size_t rows = scatter ? (m + (size_t)nranks - 1) / (size_t)nranks : m;
    bytes[0] = m * k * 2, role[0] = SOAK_OPERAND;
    bytes[1] = k * n * 2, role[1] = SOAK_OPERAND;
    bytes[2] = rows * n * 2, role[2] = SOAK_OUTPUT;
    *nbufs = 3;
    return 0;
}

static size_t rs_sizes(const soak_shape *s, int nranks, size_t bytes[], soak_role role[], int *nbufs)
{
    return rp_sizes_of(s, nranks, 1, bytes, role, nbufs);
}

static size_t ar2_sizes(const soak_shape *s, int nranks, size_t bytes[], soak_role role[], int *nbufs)
{
    return rp_sizes_of(s, nranks, 0, bytes, role, nbufs);
}

static agmm_status rs_plan(agmm_plan **plan, agmm_ctx *ctx, const soak_shape *s, const char *backend)
{
    agmm_matmul_reduce_scatter_desc d = {.m = s->dim[0], .n = s->dim[1], .k = s->dim[2], .backend = backend,
                                         .b_layout = s->variant ? AGMM_LAYOUT_ROW_MAJOR : AGMM_LAYOUT_COL_MAJOR};
    return agmm_plan_matmul_reduce_scatter(plan, ctx, &d);
}

static agmm_status ar2_plan(agmm_plan **plan, agmm_ctx *ctx, const soak_shape *s, const char *backend)
{
    agmm_matmul_all_reduce_desc d = {.m = s->dim[0], .n = s->dim[1], .k = s->dim[2], .backend = backend,
                                     .b_layout = s->variant ? AGMM_LAYOUT_ROW_MAJOR : AGMM_LAYOUT_COL_MAJOR};
    return agmm_plan_matmul_all_reduce(plan, ctx, &d);
}

static void rp_fill(const soak_shape *s, int nranks, int rank, uint64_t seed, void *input, void *const host[])
{
    small_bf16(host[0], s->dim[0] * s->dim[2], stream_of(seed, rank, 'A'), 1);
    small_bf16(host[1], s->dim[2] * s->dim[1], stream_of(seed, rank, 'B'), 1);
}

static agmm_status rs_run(agmm_plan *plan, const soak_shape *s, void *in, int sym, void *const buf[], soak_dev *d)
{
    agmm_matmul_reduce_scatter_io io = {.a = buf[0], .b = buf[1], .out = buf[2]};
    return agmm_matmul_reduce_scatter(plan, &io, d->stream);
}

static agmm_status ar2_run(agmm_plan *plan, const soak_shape *s, void *in, int sym, void *const buf[], soak_dev *d)
{
    agmm_matmul_all_reduce_io io = {.a = buf[0], .b = buf[1], .c = buf[2]};
    return agmm_matmul_all_reduce(plan, &io, d->stream);
}

/* This rank's rows of S against the sum of every rank's partial, in rank order. */
static int rp_check_of(const soak_shape *s, int nranks, int rank, uint64_t seed, void *const host[], int scatter,
                       char *why, size_t len)
{
    const int64_t n = s->dim[1], k = s->dim[2];
    int64_t row0;
    const int64_t rows = rp_rows(s, nranks, rank, scatter, &row0);
    const uint16_t *out = host[2];
    uint16_t a[RP_MAX_M * RP_MAX_K], b[RP_MAX_K * RP_MAX_N];
    float sum[RP_MAX_M * RP_MAX_N];
    memset(sum, 0, sizeof sum);
    for (int p = 0; p < nranks; p++) {
        small_bf16(a, s->dim[0] * k, stream_of(seed, p, 'A'), 1);
        small_bf16(b, k * n, stream_of(seed, p, 'B'), 1);
        for (int64_t i = 0; i < rows; i++)
            for (int64_t j = 0; j < n; j++) {
                float acc = 0;
                for (int64_t kk = 0; kk < k; kk++)
                    acc += agmm_bf16_to_f32(a[(row0 + i) * k + kk]) *
                           agmm_bf16_to_f32(s->variant ? b[kk * n + j] : b[j * k + kk]);
                sum[i * n + j] += acc;
            }
    }
    for (int64_t i = 0; i < rows * n; i++)
        if (agmm_bf16_to_f32(out[i]) != sum[i]) {
            snprintf(why, len, "S[%lld][%lld] = %g, want %g", (long long)(row0 + i / n), (long long)(i % n),
                     agmm_bf16_to_f32(out[i]), sum[i]);
            return 0;
        }
    return 1;
}

static int rs_check(const soak_shape *s, int nranks, int rank, uint64_t seed, const char *backend, int gpu,
                    void *const host[], char *why, size_t len)
{
    return rp_check_of(s, nranks, rank, seed, host, 1, why, len);
}

static int ar2_check(const soak_shape *s, int nranks, int rank, uint64_t seed, const char *backend, int gpu,
                     void *const host[], char *why, size_t len)
{
    return rp_check_of(s, nranks, rank, seed, host, 0, why, len);
}

/* ---- all_reduce_rmsnorm: dim = {T, H}, variant bit 0: bias, bit 1: residual, bit 2: the residual
 * updated in place (with bit 1). Data and checks are tests/arn_check.c's: small integers (every
 * sum exact), r' and y bit for bit against the backend's own fp32 order (or the fp64 reference
 * where NCCL adds in its own order), the same on every rank. Buffers: gamma, bias, residual
 * (operands), y, r' (outputs; an in-place r' is copied out of the residual on the stream). ---- */

enum { ARN_MAX_T = 32, ARN_MAX_H = 256 };

static void arn_draw(uint64_t *rng, int nranks, soak_shape *s)
{
    memset(s, 0, sizeof *s);
    s->dim[0] = draw_in(rng, 1, ARN_MAX_T);
    s->dim[1] = 8 * draw_in(rng, 1, ARN_MAX_H / 8);
    s->variant = (unsigned)(agmm_rng_next(rng) & 7);
    if (!(s->variant & 2))
        s->variant &= ~4u;
}

static void arn_largest(soak_shape *s)
{
    memset(s, 0, sizeof *s);
    s->dim[0] = ARN_MAX_T, s->dim[1] = ARN_MAX_H, s->variant = 7;
}

static arn_case arn_case_of(const soak_shape *s)
{
    return (arn_case){.tokens = s->dim[0], .hidden = s->dim[1], .eps = 1e-6, .bias = (s->variant & 1) != 0,
                      .residual = (s->variant & 2) != 0, .in_place = (s->variant & 4) != 0, .exact = 1};
}

static void arn_describe(const soak_shape *s, char *buf, size_t len)
{
    const arn_case c = arn_case_of(s);
    arn_case_name(&c, buf, len);
}

static size_t arn_sizes(const soak_shape *s, int nranks, size_t bytes[], soak_role role[], int *nbufs)
{
    const size_t rows = (size_t)(s->dim[0] * s->dim[1]) * 2, h = (size_t)s->dim[1] * 2;
    bytes[0] = h, role[0] = SOAK_OPERAND;     /* gamma */
    bytes[1] = h, role[1] = SOAK_OPERAND;     /* bias */
    bytes[2] = rows, role[2] = SOAK_OPERAND;  /* residual */
    bytes[3] = rows, role[3] = SOAK_OUTPUT;   /* y */
    bytes[4] = rows, role[4] = SOAK_OUTPUT;   /* r' */
    *nbufs = 5;
    return rows;
}

static agmm_status arn_plan(agmm_plan **plan, agmm_ctx *ctx, const soak_shape *s, const char *backend)
{
    agmm_all_reduce_rmsnorm_desc d = {.tokens = s->dim[0], .hidden = s->dim[1], .eps = 1e-6, .backend = backend};
    return agmm_plan_all_reduce_rmsnorm(plan, ctx, &d);
}

/* Every rank's data of the step (arn_check.c), into d; 0 or -1 (out of host memory). */
static int arn_data_of(const soak_shape *s, int nranks, int rank, uint64_t seed, arn_expect expect, arn_data *d)
{
    const arn_case c = arn_case_of(s);
    if (arn_data_init(d, &c, nranks, rank, expect) != 0) {
        arn_data_fini(d);
        return -1;
    }
    arn_data_fill(d, seed);
    return 0;
}

static void arn_fill(const soak_shape *s, int nranks, int rank, uint64_t seed, void *input, void *const host[])
{
    const size_t rows = (size_t)(s->dim[0] * s->dim[1]) * 2, h = (size_t)s->dim[1] * 2;
    arn_data d;
    if (arn_data_of(s, nranks, rank, seed, ARN_EXPECT_FUSED, &d) != 0) {
        memset(input, 0xff, rows); /* the check fails on it, saying so */
        return;
    }
    memcpy(input, arn_data_mine(&d), rows);
    memcpy(host[0], d.gamma, h);
    if (d.bias)
        memcpy(host[1], d.bias, h);
    if (d.residual)
        memcpy(host[2], d.residual, rows);
    arn_data_fini(&d);
}

static agmm_status arn_run(agmm_plan *plan, const soak_shape *s, void *in, int sym, void *const buf[], soak_dev *d)
{
    const arn_case c = arn_case_of(s);
    agmm_all_reduce_rmsnorm_io io = {.y = buf[3], .residual_out = c.in_place ? buf[2] : buf[4], .gamma = buf[0],
                                     .bias = c.bias ? buf[1] : NULL, .residual = c.residual ? buf[2] : NULL,
                                     .input = sym ? in : NULL};
    agmm_status st = agmm_all_reduce_rmsnorm(plan, &io, d->stream);
    /* r' in place is in the residual, which the driver poisons right after: keep it first. */
    if (st == AGMM_SUCCESS && c.in_place && soak_dev_copy(d, buf[4], buf[2], (size_t)(c.tokens * c.hidden) * 2) != 0)
        st = AGMM_ERR_CUDA;
    return st;
}

static int arn_check_step(const soak_shape *s, int nranks, int rank, uint64_t seed, const char *backend, int gpu,
                          void *const host[], char *why, size_t len)
{
    arn_data d;
    if (arn_data_of(s, nranks, rank, seed, arn_expect_for(backend, gpu, nranks), &d) != 0) {
        snprintf(why, len, "out of host memory for the check");
        return 0;
    }
    const size_t rows = (size_t)(s->dim[0] * s->dim[1]) * 2;
    memcpy(d.y_got, host[3], rows);
    memcpy(d.r_got, host[4], rows);
    double r_err, y_err;
    const int ok = arn_data_check(&d, &r_err, &y_err, why, len) == NULL;
    arn_data_fini(&d);
    return ok;
}

static const soak_op cases[] = {
    {"ag_matmul", mm_draw, mm_largest, mm_describe, mm_sizes, mm_plan, mm_fill, mm_run, mm_check},
    {"all_reduce", ar_draw, ar_largest, ar_describe, ar_sizes, ar_plan, ar_fill, ar_run, ar_check},
    {"matmul_reduce_scatter", rp_draw, rp_largest, rp_describe, rs_sizes, rs_plan, rp_fill, rs_run, rs_check},
    {"matmul_all_reduce", rp_draw, rp_largest, rp_describe, ar2_sizes, ar2_plan, rp_fill, ar2_run, ar2_check},
    {"all_reduce_rmsnorm", arn_draw, arn_largest, arn_describe, arn_sizes, arn_plan, arn_fill, arn_run,
     arn_check_step},
};

const soak_op *soak_op_find(const char *name)
{
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        if (strcmp(cases[i].op_name, name) == 0)
            return &cases[i];
    return NULL;
}
