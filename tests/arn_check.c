/* all_reduce_rmsnorm test data and checks (arn_check.h). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/agmm_ext.h"
#include "arn_check.h"
#include "core/numeric.h"
#include "core/rmsnorm.h"
#include "cpu/reference.h"
#include "world/world.h"

#define TOL 1e-2

arn_expect arn_expect_for(const char *backend, int gpu, int nranks)
{
    if (strcmp(backend, "nccl") != 0)
        return ARN_EXPECT_FUSED;
    /* NCCL adds two bf16 values the one way there is; from three on, in its own order. */
    return !gpu || nranks <= 2 ? ARN_EXPECT_ROUNDED_SUM : ARN_EXPECT_REFERENCE;
}

const char *arn_case_name(const arn_case *c, char *buf, size_t len)
{
    snprintf(buf, len, "T=%lld H=%lld%s%s%s%s%s", (long long)c->tokens, (long long)c->hidden, c->bias ? " bias" : "",
             c->residual ? " residual" : "", c->in_place ? " in place" : "",
             c->symmetric_input ? " io.input" : "", c->exact ? " small-int" : " uniform");
    return buf;
}

int arn_data_init(arn_data *d, const arn_case *c, int nranks, int rank, arn_expect expect)
{
    memset(d, 0, sizeof *d);
    d->c = *c;
    d->nranks = nranks;
    d->rank = rank;
    d->expect = expect;
    const size_t rows = (size_t)(c->tokens * c->hidden), h = (size_t)c->hidden;
    d->x = malloc((size_t)nranks * rows * 2);
    d->gamma = malloc(h * 2);
    d->bias = c->bias ? malloc(h * 2) : NULL;
    d->residual = c->residual ? malloc(rows * 2) : NULL;
    d->r_ref16 = malloc(rows * 2);
    d->r_ref = malloc(rows * sizeof(double));
    d->y_ref = malloc(rows * sizeof(double));
    d->r_emul = malloc(rows * 2);
    d->y_emul = malloc(rows * 2);
    d->r_got = malloc(rows * 2);
    d->y_got = malloc(rows * 2);
    d->acc = malloc(h * sizeof(float));
    const int ok = d->x && d->gamma && (d->bias || !c->bias) && (d->residual || !c->residual) && d->r_ref16 &&
                   d->r_ref && d->y_ref && d->r_emul && d->y_emul && d->r_got && d->y_got && d->acc;
    return ok ? 0 : -1;
}

void arn_data_fini(arn_data *d)
{
    free(d->x), free(d->gamma), free(d->bias), free(d->residual), free(d->r_ref16), free(d->r_ref);
    free(d->y_ref), free(d->r_emul), free(d->y_emul), free(d->r_got), free(d->y_got), free(d->acc);
    memset(d, 0, sizeof *d);
}

const uint16_t *arn_data_mine(const arn_data *d) { return d->x + (size_t)d->rank * (size_t)(d->c.tokens * d->c.hidden); }

/* Small integers in -range..range (exact sums), or uniform in [-1, 1) scaled by `scale`. */
static void gen(uint16_t *x, size_t count, uint64_t seed, int exact, int range, float scale)
{
    for (size_t i = 0; i < count; i++)
        x[i] = agmm_f32_to_bf16(exact ? (float)agmm_rng_small_int(&seed, range) : scale * agmm_rng_uniform(&seed));
}

void arn_data_fill(arn_data *d, uint64_t seed)
{
    const arn_case *c = &d->c;
    const int64_t t_all = c->tokens, h = c->hidden;
    const size_t rows = (size_t)(t_all * h);
    uint64_t s = seed;
    for (int r = 0; r < d->nranks; r++)
        gen(d->x + (size_t)r * rows, rows, agmm_rng_next(&s), c->exact, 4, 1.0f);
    gen(d->gamma, (size_t)h, agmm_rng_next(&s), c->exact, 2, 2.0f);
    if (d->bias)
        gen(d->bias, (size_t)h, agmm_rng_next(&s), c->exact, 4, 0.5f);
    if (d->residual)
        gen(d->residual, rows, agmm_rng_next(&s), c->exact, 4, 4.0f);
    const uint16_t *xs[AGMM_MAX_RANKS];
    for (int r = 0; r < d->nranks; r++)
        xs[r] = d->x + (size_t)r * rows;
    agmm_ref_all_reduce_rmsnorm(xs, d->nranks, d->bias, d->residual, d->gamma, t_all, h, c->eps, d->r_ref,
                                d->r_ref16, d->y_ref);
    if (d->expect == ARN_EXPECT_REFERENCE)
        return;
    for (int64_t t = 0; t < t_all; t++) {
        for (int r = 0; r < d->nranks; r++)
            for (int64_t i = 0; i < h; i++) {
                const float f = agmm_bf16_to_f32(xs[r][t * h + i]);
                d->acc[i] = r == 0 ? f : d->acc[i] + f;
            }
        if (d->expect == ARN_EXPECT_ROUNDED_SUM)
            for (int64_t i = 0; i < h; i++)
                d->acc[i] = agmm_bf16_to_f32(agmm_f32_to_bf16(d->acc[i]));
        agmm_rmsnorm_row(d->acc, d->bias, d->residual ? d->residual + t * h : NULL, d->gamma, h, (float)c->eps,
                         d->r_emul + t * h, d->y_emul + t * h);
    }
}

/* The first element of `count` where got and want differ bit for bit, as text; 0 if none. */
static int first_diff(const uint16_t *got, const uint16_t *want, int64_t count, int64_t h, const char *what,
                      char *why, size_t len)
{
    const int64_t i = agmm_ref_first_mismatch(got, want, count, 2);
    if (i < 0)
        return 0;
    snprintf(why, len, "%s differs at row %lld column %lld: got %g (0x%04x), want %g (0x%04x)", what,
             (long long)(i / h), (long long)(i % h), (double)agmm_bf16_to_f32(got[i]), got[i],
             (double)agmm_bf16_to_f32(want[i]), want[i]);
    return 1;
}

const char *arn_data_check(const arn_data *d, double *r_err, double *y_err, char *why, size_t len)
{
    const int64_t count = d->c.tokens * d->c.hidden, h = d->c.hidden;
    *r_err = agmm_ref_rel_frobenius(d->r_got, AGMM_DTYPE_BF16, d->r_ref, count);
    *y_err = agmm_ref_rel_frobenius(d->y_got, AGMM_DTYPE_BF16, d->y_ref, count);
    if (isnan(*r_err) || isnan(*y_err)) {
        snprintf(why, len, "NaN in %s (a poisoned element never written?)", isnan(*r_err) ? "residual_out" : "y");
        return why;
    }
    if (d->c.exact) {
        if (first_diff(d->r_got, d->r_ref16, count, h, "residual_out vs the exact sum", why, len))
            return why;
        for (int64_t i = 0; i < count; i++) {
            const double got = agmm_bf16_to_f32(d->y_got[i]), want = d->y_ref[i];
            if (fabs(got - want) > ldexp(fabs(want), -8) * (1.0 + 1.0 / 1024)) {
                snprintf(why, len, "y at row %lld column %lld: got %.8g, fp64 reference %.8g: more than one bf16 "
                         "rounding apart", (long long)(i / h), (long long)(i % h), got, want);
                return why;
            }
        }
    } else if (!(*r_err <= TOL) || !(*y_err <= TOL)) {
        snprintf(why, len, "relative Frobenius error r' %.2e, y %.2e (tolerance %.0e)", *r_err, *y_err, TOL);
        return why;
    }
    if (d->expect != ARN_EXPECT_REFERENCE) {
        const char *order = d->expect == ARN_EXPECT_FUSED ? "the fp32 rank-order sum's epilogue"
                                                          : "the bf16-rounded sum's epilogue";
        char what[96];
        snprintf(what, sizeof what, "residual_out vs %s", order);
        if (first_diff(d->r_got, d->r_emul, count, h, what, why, len))
            return why;
        snprintf(what, sizeof what, "y vs %s", order);
        if (first_diff(d->y_got, d->y_emul, count, h, what, why, len))
            return why;
    }
    return NULL;
}

uint64_t arn_data_hash(const arn_data *d)
{
    const size_t bytes = (size_t)(d->c.tokens * d->c.hidden) * 2;
    uint64_t hsh = 0xcbf29ce484222325ull;
    for (int o = 0; o < 2; o++) {
        const unsigned char *p = (const unsigned char *)(o ? d->r_got : d->y_got);
        for (size_t i = 0; i < bytes; i++)
            hsh = (hsh ^ p[i]) * 0x100000001b3ull;
    }
    return hsh;
}

static void *host_alloc(size_t bytes) { return malloc(bytes); }
static void host_release(void *p) { free(p); }
static int host_copy(void *dst, const void *src, size_t bytes, void *stream)
{
    memcpy(dst, src, bytes);
    return 0;
}

const arn_dev arn_dev_host = {host_alloc, host_release, host_copy, NULL};

static void fail(arn_result *res, agmm_status st, const char *what, const char *detail)
{
    if (res->msg[0])
        return;
    res->status = st;
    snprintf(res->msg, sizeof res->msg, "%s%s%s", what, detail[0] ? ": " : "", detail);
}

/* Every rank's `ok`, the same verdict on every rank: 1 only if all are 1. Collective (it is also
 * the ranks' meeting between steps). */
static int agree(agmm_ctx *ctx, int ok, arn_result *res)
{
    int32_t mine = ok, all[AGMM_MAX_RANKS];
    if (agmm_ext_exchange(ctx, &mine, sizeof mine, all) != AGMM_SUCCESS) {
        fail(res, AGMM_ERR_TIMEOUT, "the ranks' meeting failed", agmm_last_error(ctx));
        return 0;
    }
    for (int r = 0; r < agmm_ctx_info(ctx)->nranks; r++)
        ok &= all[r] != 0;
    if (!ok)
        fail(res, AGMM_ERR_INTERNAL, "a peer failed first", "");
    return ok;
}

void arn_check_run(agmm_ctx *ctx, const char *backend, const arn_case *c, const arn_dev *dev, int runs,
                   uint64_t seed, arn_result *res)
{
    memset(res, 0, sizeof *res);
    const int rank = agmm_ctx_rank(ctx), nranks = agmm_ctx_info(ctx)->nranks;
    const size_t rows = (size_t)(c->tokens * c->hidden) * 2, row = (size_t)c->hidden * 2;
    arn_data d;
    int ok = arn_data_init(&d, c, nranks, rank, arn_expect_for(backend, agmm_ctx_device(ctx) >= 0, nranks)) == 0;
    if (!ok)
        fail(res, AGMM_ERR_NO_MEMORY, "host allocation failed", "");
    /* Collective calls first, whatever failed: the plan, and the caller's symmetric memory. */
    agmm_all_reduce_rmsnorm_desc desc = {.tokens = c->tokens, .hidden = c->hidden, .eps = c->eps, .backend = backend};
    agmm_plan *plan = NULL;
    agmm_status st = agmm_plan_all_reduce_rmsnorm(&plan, ctx, &desc);
    if (st != AGMM_SUCCESS)
        fail(res, st, "plan", agmm_last_error(ctx));
    else /* "auto": what the backend it chose must match */
        d.expect = arn_expect_for(agmm_plan_backend(plan), agmm_ctx_device(ctx) >= 0, nranks);
    void *sym = NULL;
    if (c->symmetric_input && agmm_symmetric_alloc(ctx, rows + 16, &sym) != AGMM_SUCCESS)
        fail(res, AGMM_ERR_NO_MEMORY, "agmm_symmetric_alloc", agmm_last_error(ctx));
    /* x at a 16-byte offset inside the caller's buffer: the same on every rank. */
    void *x_dev = sym ? (char *)sym + 16 : plan ? agmm_plan_input(plan) : NULL;
    void *y = dev->alloc(rows), *residual = c->residual ? dev->alloc(rows) : NULL;
    void *r_out = c->in_place ? residual : dev->alloc(rows), *gamma = dev->alloc(row);
    void *bias = c->bias ? dev->alloc(row) : NULL;
    unsigned char *poison = malloc(rows);
    if (!y || (c->residual && !residual) || !r_out || !gamma || (c->bias && !bias) || !poison)
        fail(res, AGMM_ERR_NO_MEMORY, "device allocation failed", "");
    if (poison)
        memset(poison, 0xff, rows); /* NaN in bf16 */
    ok = agree(ctx, ok && res->msg[0] == '\0' && x_dev != NULL, res);
    char why[320];
    for (int run = 0; run < runs && run < ARN_MAX_RUNS && ok; run++) {
        arn_data_fill(&d, seed + (uint64_t)run * 7919u);
        if (dev->copy(x_dev, arn_data_mine(&d), rows, dev->stream) || dev->copy(gamma, d.gamma, row, dev->stream) ||
            (bias && dev->copy(bias, d.bias, row, dev->stream)) ||
            (residual && dev->copy(residual, d.residual, rows, dev->stream)) || dev->copy(y, poison, rows, dev->stream) ||
            (!c->in_place && dev->copy(r_out, poison, rows, dev->stream)))
            fail(res, AGMM_ERR_CUDA, "upload failed", ""), ok = 0;
        /* Every rank's inputs are in place before anyone runs. */
        if (!agree(ctx, ok, res))
            break;
        agmm_all_reduce_rmsnorm_io io = {.y = y, .residual_out = r_out, .gamma = gamma, .bias = bias,
                                         .residual = residual, .input = sym ? x_dev : NULL};
        snprintf(why, sizeof why, "run %d", run);
        st = agmm_all_reduce_rmsnorm(plan, &io, dev->stream);
        if (st == AGMM_SUCCESS)
            st = agmm_ctx_sync(ctx);
        if (st != AGMM_SUCCESS)
            fail(res, st, why, agmm_last_error(ctx)), ok = 0;
        else if (dev->copy(d.y_got, y, rows, dev->stream) || dev->copy(d.r_got, r_out, rows, dev->stream))
            fail(res, AGMM_ERR_CUDA, why, "download failed"), ok = 0;
        double r_err = 0, y_err = 0;
        char detail[300];
        const char *bad = ok ? arn_data_check(&d, &r_err, &y_err, detail, sizeof detail) : NULL;
        if (bad)
            fail(res, AGMM_ERR_INTERNAL, why, bad), ok = 0;
        if (ok) {
            res->r_err = fmax(res->r_err, r_err);
            res->y_err = fmax(res->y_err, y_err);
            res->hash[run] = arn_data_hash(&d);
            res->runs++;
        }
        /* Nobody uploads the next inputs while a peer may still be running on these. */
        ok = agree(ctx, ok, res);
    }
    dev->release(y);
    dev->release(residual);
    if (!c->in_place)
        dev->release(r_out);
    dev->release(gamma);
    dev->release(bias);
    free(poison);
    agmm_symmetric_free(ctx, sym);
    agmm_plan_destroy(plan);
    arn_data_fini(&d);
}
