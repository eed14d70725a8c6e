/* matmul_reduce_scatter and matmul_all_reduce in the step harness (step_op.h): A_r and B_r in
 * {-1, 0, 1} per rank, no plan input ("staged" steps read A_r from their own device buffer,
 * "symmetric" ones from a slot of the symmetric buffer). A rank's rows of sum_r A_r * B_r are the
 * integer sums rounded once to bf16 (each partial, |.| <= K, is exact), compared bit for bit. */
#include "core/numeric.h"
#include "step_op.h"

/* The rows of S a rank's output holds: its block (reduce-scatter) or all (all-reduce). */
static int64_t out_rows(const step_case *sc, int rank, int nranks, int64_t *row0)
{
    *row0 = 0;
    if (sc->op == AGMM_OP_MATMUL_REDUCE_SCATTER)
        return agmm_matmul_reduce_scatter_rows(sc->m, nranks, rank, row0);
    return sc->m;
}

static void name(const step_case *sc, char *buf, size_t len)
{
    snprintf(buf, len, "%s/%s M=%lld N=%lld K=%lld", agmm_op_name(sc->op), sc->backend, (long long)sc->m,
             (long long)sc->n, (long long)sc->k);
}

static void sizes(step_rank *sr, size_t *ref_bytes)
{
    const step_case *sc = sr->sc;
    int64_t row0;
    sr->in_bytes = (size_t)(sc->m * sc->k) * 2;
    sr->b_bytes = (size_t)(sc->k * sc->n) * 2;
    sr->out_bytes = (size_t)(out_rows(sc, sr->rank, sr->nranks, &row0) * sc->n) * 2;
    *ref_bytes = (size_t)sr->nranks * (size_t)(sc->m * sc->k + sc->k * sc->n);
}

static int plan_rs(step_rank *sr, size_t *ref_bytes)
{
    const step_case *sc = sr->sc;
    agmm_matmul_reduce_scatter_desc d = {.m = sc->m, .n = sc->n, .k = sc->k, .backend = sc->backend};
    sizes(sr, ref_bytes);
    return step_planned(sr, agmm_plan_matmul_reduce_scatter(&sr->plan, sr->ctx, &d));
}

static int plan_ar(step_rank *sr, size_t *ref_bytes)
{
    const step_case *sc = sr->sc;
    agmm_matmul_all_reduce_desc d = {.m = sc->m, .n = sc->n, .k = sc->k, .backend = sc->backend};
    sizes(sr, ref_bytes);
    return step_planned(sr, agmm_plan_matmul_all_reduce(&sr->plan, sr->ctx, &d));
}

static agmm_status run_rs(step_rank *sr, int slot, char *in, const void *io_input, const char *b, char *out,
                          cudaStream_t s)
{
    (void)slot, (void)io_input;
    agmm_matmul_reduce_scatter_io io = {.a = in, .b = b, .out = sr->out_bytes ? out : NULL};
    return agmm_matmul_reduce_scatter(sr->plan, &io, s);
}

static agmm_status run_ar(step_rank *sr, int slot, char *in, const void *io_input, const char *b, char *out,
                          cudaStream_t s)
{
    (void)slot, (void)io_input;
    agmm_matmul_all_reduce_io io = {.a = in, .b = b, .c = out};
    return agmm_matmul_all_reduce(sr->plan, &io, s);
}

static int check(step_rank *sr, int slot, const char *out, const char *what)
{
    const step_case *sc = sr->sc;
    const int W = sr->nranks;
    const int64_t na = sc->m * sc->k, nb = sc->k * sc->n;
    int8_t *a = sr->ref, *b = sr->ref + W * na;
    const uint16_t *got = (const uint16_t *)out;
    for (int p = 0; p < W; p++) {
        step_gen_small(a + p * na, (size_t)na, step_input_state(sr->seed, slot, p, 'A'), 1);
        step_gen_small(b + p * nb, (size_t)nb, step_input_state(sr->seed, slot, p, 'B'), 1);
    }
    int64_t row0, rows = out_rows(sc, sr->rank, W, &row0);
    for (int64_t i = row0; i < row0 + rows; i++)
        for (int64_t j = 0; j < sc->n; j++) {
            int acc = 0;
            for (int p = 0; p < W; p++)
                for (int64_t kk = 0; kk < sc->k; kk++)
                    acc += a[p * na + i * sc->k + kk] * b[p * nb + j * sc->k + kk];
            const uint16_t want = agmm_f32_to_bf16((float)acc), g = got[(i - row0) * sc->n + j];
            if (g != want)
                return gpu_rank_fail(sr->res, sr->rank, "%s: S[%lld][%lld] = %g, want %g", what, (long long)i,
                                     (long long)j, agmm_bf16_to_f32(g), agmm_bf16_to_f32(want));
        }
    return 1;
}

const step_op step_matmul_reduce_scatter = {AGMM_OP_MATMUL_REDUCE_SCATTER, 0, name, plan_rs, step_fill_ab, run_rs,
                                            check};
const step_op step_matmul_all_reduce = {AGMM_OP_MATMUL_ALL_REDUCE, 0, name, plan_ar, step_fill_ab, run_ar, check};
