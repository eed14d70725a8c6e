/* all_reduce in the step harness (step_op.h): elements in -4..4 per rank, so every sum is exact in
 * bf16 and fp32 and is compared bit for bit. In place, the output is the input the run reads. */
#include <cuda_runtime_api.h>

#include "core/numeric.h"
#include "step_op.h"

static void name(const step_case *sc, char *buf, size_t len)
{
    snprintf(buf, len, "all_reduce/%s n=%lld %s %s", sc->backend, (long long)sc->count,
             sc->dtype == AGMM_DTYPE_F32 ? "fp32" : "bf16", sc->in_place ? "in place" : "out of place");
}

static int plan(step_rank *sr, size_t *ref_bytes)
{
    const step_case *sc = sr->sc;
    agmm_all_reduce_desc d = {.n = sc->count, .dtype = sc->dtype, .backend = sc->backend};
    sr->in_bytes = sr->out_bytes = (size_t)sc->count * (sc->dtype == AGMM_DTYPE_F32 ? 4 : 2);
    *ref_bytes = (size_t)sr->nranks * (size_t)sc->count;
    return step_planned(sr, agmm_plan_all_reduce(&sr->plan, sr->ctx, &d));
}

static void fill(step_rank *sr, int slot, char *in, char *b)
{
    (void)b;
    step_gen_small(sr->ref, (size_t)sr->sc->count, step_input_state(sr->seed, slot, sr->rank, 'V'), 4);
    step_to_dtype(sr->ref, (size_t)sr->sc->count, sr->sc->dtype, in);
}

static agmm_status run(step_rank *sr, int slot, char *in, const void *io_input, const char *b, char *out,
                       cudaStream_t s)
{
    (void)b;
    const step_case *sc = sr->sc;
    agmm_all_reduce_io io = {.out = sc->in_place ? in : out, .input = io_input};
    agmm_status st = agmm_all_reduce(sr->plan, &io, s);
    /* In place on the plan's buffer: the next step overwrites it, so keep the sum now. */
    if (st == AGMM_SUCCESS && sc->in_place && sr->input == STEP_STAGED &&
        cudaMemcpyAsync(out, in, sr->out_bytes, cudaMemcpyDeviceToDevice, s) != cudaSuccess)
        return gpu_rank_fail(sr->res, sr->rank, "step %d: result copy failed", slot), AGMM_ERR_CUDA;
    return st;
}

static int check(step_rank *sr, int slot, const char *out, const char *what)
{
    const step_case *sc = sr->sc;
    const int64_t n = sc->count;
    int8_t *x = sr->ref;
    for (int p = 0; p < sr->nranks; p++)
        step_gen_small(x + p * n, (size_t)n, step_input_state(sr->seed, slot, p, 'V'), 4);
    for (int64_t i = 0; i < n; i++) {
        int sum = 0;
        for (int p = 0; p < sr->nranks; p++)
            sum += x[p * n + i];
        float got = sc->dtype == AGMM_DTYPE_F32 ? ((const float *)out)[i]
                                                : agmm_bf16_to_f32(((const uint16_t *)out)[i]);
        if (got != (float)sum)
            return gpu_rank_fail(sr->res, sr->rank, "%s: element %lld = %g, want %d", what, (long long)i, got, sum);
    }
    return 1;
}

const step_op step_all_reduce = {AGMM_OP_ALL_REDUCE, 1, name, plan, fill, run, check};
