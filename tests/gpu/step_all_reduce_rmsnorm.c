/* all_reduce_rmsnorm in the step harness (step_op.h), with bias and residual: tests/arn_check.h's
 * small-integer inputs and checks (r' and y bit for bit against the kernels' fp32 order, y within
 * one bf16 rounding of the fp64 reference). A slot of B holds gamma, bias and residual; a slot of
 * the output y, then r'. */
#include <string.h>

#include "step_op.h"

/* The arn_check case of a step: T = m tokens, H = n, bias, residual, small integers. */
static arn_case case_of(const step_case *sc)
{
    return (arn_case){.tokens = sc->m, .hidden = sc->n, .eps = 1e-5, .bias = 1, .residual = 1, .exact = 1};
}

static void name(const step_case *sc, char *buf, size_t len)
{
    snprintf(buf, len, "all_reduce_rmsnorm/%s T=%lld H=%lld bias residual", sc->backend, (long long)sc->m,
             (long long)sc->n);
}

static int plan(step_rank *sr, size_t *ref_bytes)
{
    const step_case *sc = sr->sc;
    const arn_case c = case_of(sc);
    agmm_all_reduce_rmsnorm_desc d = {.tokens = c.tokens, .hidden = c.hidden, .eps = c.eps, .backend = sc->backend};
    sr->in_bytes = (size_t)(sc->m * sc->n) * 2;
    sr->b_bytes = (size_t)(2 * sc->n + sc->m * sc->n) * 2; /* gamma, bias, residual */
    sr->out_bytes = 2 * sr->in_bytes;                     /* y, r' */
    *ref_bytes = 1;                                       /* sr->arn holds every rank's inputs */
    if (!step_planned(sr, agmm_plan_all_reduce_rmsnorm(&sr->plan, sr->ctx, &d)))
        return 0;
    if (arn_data_init(&sr->arn, &c, sr->nranks, sr->rank, arn_expect_for(sc->backend, 1, sr->nranks)) != 0)
        return gpu_rank_fail(sr->res, sr->rank, "all_reduce_rmsnorm check data: out of host memory");
    return 1;
}

static void fill(step_rank *sr, int slot, char *in, char *b)
{
    const size_t h = (size_t)sr->sc->n * 2;
    arn_data_fill(&sr->arn, step_input_state(sr->seed, slot, 0, 'N'));
    memcpy(in, arn_data_mine(&sr->arn), sr->in_bytes);
    memcpy(b, sr->arn.gamma, h);
    memcpy(b + h, sr->arn.bias, h);
    memcpy(b + 2 * h, sr->arn.residual, sr->in_bytes);
}

static agmm_status run(step_rank *sr, int slot, char *in, const void *io_input, const char *b, char *out,
                       cudaStream_t s)
{
    (void)slot, (void)in;
    const size_t h = (size_t)sr->sc->n * 2;
    agmm_all_reduce_rmsnorm_io io = {.y = out,
                                     .residual_out = out + sr->in_bytes,
                                     .gamma = b,
                                     .bias = b + h,
                                     .residual = b + 2 * h,
                                     .input = io_input};
    return agmm_all_reduce_rmsnorm(sr->plan, &io, s);
}

static int check(step_rank *sr, int slot, const char *out, const char *what)
{
    arn_data_fill(&sr->arn, step_input_state(sr->seed, slot, 0, 'N'));
    memcpy(sr->arn.y_got, out, sr->in_bytes);
    memcpy(sr->arn.r_got, out + sr->in_bytes, sr->in_bytes);
    double r_err, y_err;
    char why[320];
    const char *bad = arn_data_check(&sr->arn, &r_err, &y_err, why, sizeof why);
    if (bad)
        return gpu_rank_fail(sr->res, sr->rank, "%s: %s", what, bad);
    return 1;
}

const step_op step_all_reduce_rmsnorm = {AGMM_OP_ALL_REDUCE_RMSNORM, 1, name, plan, fill, run, check};
