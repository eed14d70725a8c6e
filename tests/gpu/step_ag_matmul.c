/* ag_matmul in the step harness (step_op.h): A and B in {-1, 0, 1}; the gathered A checked against
 * every rank's shard, C against the integer product, both bit for bit. */
#include <stdlib.h>

#include "core/numeric.h"
#include "step_op.h"

static void name(const step_case *sc, char *buf, size_t len)
{
    snprintf(buf, len, "ag_matmul/%s M=%lld N=%lld K=%lld splits=%d", sc->backend, (long long)sc->m,
             (long long)sc->n, (long long)sc->k, sc->splits);
}

static int plan(step_rank *sr, size_t *ref_bytes)
{
    const step_case *sc = sr->sc;
    const int W = sr->nranks;
    agmm_ag_matmul_desc d = {.m = sc->m, .n = sc->n, .k = sc->k, .splits = sc->splits, .backend = sc->backend};
    sr->in_bytes = (size_t)(sc->m * sc->k) * 2;
    sr->b_bytes = (size_t)(sc->k * sc->n) * 2;
    sr->ag_bytes = (size_t)W * sr->in_bytes;
    sr->out_bytes = (size_t)((int64_t)W * sc->m * sc->n) * 2;
    *ref_bytes = (size_t)(W * sc->m * sc->k) + (size_t)(sc->k * sc->n);
    return step_planned(sr, agmm_plan_ag_matmul(&sr->plan, sr->ctx, &d));
}

static agmm_status run(step_rank *sr, int slot, char *in, const void *io_input, const char *b, char *out,
                       cudaStream_t s)
{
    (void)in;
    agmm_ag_matmul_io io = {.b = b,
                            .a_gathered = sr->d_ag + (size_t)slot * step_round_up(sr->ag_bytes),
                            .c = out,
                            .input = io_input};
    return agmm_ag_matmul(sr->plan, &io, s);
}

/* What a wrong shard in the gathered A holds instead, for the failure message: the poison (never
 * copied), zeros (copied before its rank first wrote it), that rank's input of another step
 * (copied too early or too late: the barriers let the ranks out of step), or none of these. */
static const char *shard_holds(const step_rank *sr, const uint16_t *got, int p, char *buf, size_t len)
{
    const size_t count = (size_t)(sr->sc->m * sr->sc->k);
    int poison = 1, zero = 1;
    for (size_t i = 0; i < count; i++) {
        poison &= got[i] == 0xffff;
        zero &= got[i] == 0;
    }
    if (poison || zero)
        return poison ? "all of its rows hold the poison (never copied)" : "all of its rows are zero";
    int8_t *x = malloc(count);
    int match = -1;
    for (int j = 0; x != NULL && j < sr->slots && match < 0; j++) {
        step_gen_small(x, count, step_input_state(sr->seed, j, p, 'A'), 1);
        size_t i = 0;
        while (i < count && agmm_bf16_to_f32(got[i]) == (float)x[i])
            i++;
        if (i == count)
            match = j;
    }
    free(x);
    if (match < 0)
        return "its rows are none of that rank's inputs of this replay, nor zero, nor the poison";
    snprintf(buf, len, "its rows are that rank's input of step %d", match);
    return buf;
}

static int check(step_rank *sr, int slot, const char *out, const char *what)
{
    const step_case *sc = sr->sc;
    const int W = sr->nranks;
    const int64_t rows = W * sc->m, shard = sc->m * sc->k;
    int8_t *a = sr->ref, *b = sr->ref + rows * sc->k;
    const uint16_t *ag = (const uint16_t *)(sr->h_ag + (size_t)slot * step_round_up(sr->ag_bytes));
    const uint16_t *c = (const uint16_t *)out;
    for (int p = 0; p < W; p++)
        step_gen_small(a + p * shard, (size_t)shard, step_input_state(sr->seed, slot, p, 'A'), 1);
    step_gen_small(b, (size_t)(sc->k * sc->n), step_input_state(sr->seed, slot, sr->rank, 'B'), 1);
    for (int64_t i = 0; i < rows * sc->k; i++)
        if (agmm_bf16_to_f32(ag[i]) != (float)a[i]) {
            const int p = (int)(i / shard);
            char holds[96];
            return gpu_rank_fail(sr->res, sr->rank, "%s: gathered A[%lld][%lld] = %g, want %d (rank %d's shard; %s)",
                                 what, (long long)(i / sc->k), (long long)(i % sc->k), agmm_bf16_to_f32(ag[i]), a[i],
                                 p, shard_holds(sr, ag + p * shard, p, holds, sizeof holds));
        }
    for (int64_t i = 0; i < rows; i++)
        for (int64_t j = 0; j < sc->n; j++) {
            int acc = 0;
            for (int64_t kk = 0; kk < sc->k; kk++)
                acc += a[i * sc->k + kk] * b[j * sc->k + kk]; /* B column-major: B^T is n x k */
            float got = agmm_bf16_to_f32(c[i * sc->n + j]);
            if (got != (float)acc)
                return gpu_rank_fail(sr->res, sr->rank, "%s: C[%lld][%lld] = %g, want %d", what, (long long)i,
                                     (long long)j, got, acc);
        }
    return 1;
}

const step_op step_ag_matmul = {AGMM_OP_AG_MATMUL, 1, name, plan, step_fill_ab, run, check};
