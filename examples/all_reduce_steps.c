/* A plan made once and run every step, as a model's layers would: 100 all_reduce steps, each
 * with fresh inputs written into the plan's symmetric input, each sum checked. Set-up (buffers,
 * backend choice) is paid in agmm_plan_all_reduce; a run only enqueues.
 *
 *   cc $(pkg-config --cflags agmm) all_reduce_steps.c -o all_reduce_steps $(pkg-config --libs agmm)
 *   ./all_reduce_steps */
#include "example.h"

enum { ELEMS = 4096, STEPS = 100 };

static int value(int rank, int step, int i) { return (rank * 7 + step * 3 + i) % 9 - 4; }

static agmm_status rank_main(agmm_ctx *ctx, void *arg)
{
    const int rank = agmm_ctx_rank(ctx), nranks = *(const int *)arg;
    agmm_all_reduce_desc desc = {.n = ELEMS, .dtype = AGMM_DTYPE_F32}; /* backend: auto */
    agmm_plan *plan = NULL;
    agmm_status st = agmm_plan_all_reduce(&plan, ctx, &desc);
    if (st != AGMM_SUCCESS) {
        fprintf(stderr, "rank %d: plan: %s\n", rank, agmm_last_error(ctx));
        return st;
    }
    float *host = malloc(sizeof(float) * ELEMS);
    void *out = ex_alloc(ctx, sizeof(float) * ELEMS), *stream = ex_stream(ctx);
    int wrong = 0;
    for (int step = 0; step < STEPS && st == AGMM_SUCCESS && !wrong; step++) {
        for (int i = 0; i < ELEMS; i++)
            host[i] = (float)value(rank, step, i);
        /* The input may be written again once the previous run has completed (agmm.h). */
        if (ex_copy(ctx, agmm_plan_input(plan), host, sizeof(float) * ELEMS, stream)) {
            st = AGMM_ERR_CUDA;
            break;
        }
        agmm_all_reduce_io io = {.out = out};
        st = agmm_all_reduce(plan, &io, stream);
        if (st == AGMM_SUCCESS)
            st = agmm_ctx_sync(ctx);
        if (st == AGMM_SUCCESS && ex_copy(ctx, host, out, sizeof(float) * ELEMS, stream))
            st = AGMM_ERR_CUDA;
        for (int i = 0; st == AGMM_SUCCESS && i < ELEMS; i++) {
            int want = 0;
            for (int r = 0; r < nranks; r++)
                want += value(r, step, i);
            wrong += host[i] != (float)want;
        }
    }
    if (st != AGMM_SUCCESS)
        fprintf(stderr, "rank %d: %s: %s\n", rank, agmm_status_str(st), agmm_last_error(ctx));
    else if (wrong)
        fprintf(stderr, "rank %d: %d sums are wrong\n", rank, wrong);
    else if (rank == 0)
        printf("all_reduce/%s on %d ranks: %d steps of %d floats, every sum exact\n", agmm_plan_backend(plan), nranks,
               STEPS, ELEMS);
    agmm_plan_destroy(plan);
    ex_free(ctx, out);
    ex_stream_destroy(stream);
    free(host);
    return st != AGMM_SUCCESS ? st : wrong ? AGMM_ERR_INTERNAL : AGMM_SUCCESS;
}

int main(void)
{
    agmm_world *world = NULL;
    char err[512];
    agmm_world_config cfg = {.kind = AGMM_WORLD_AUTO};
    if (agmm_world_create(&world, &cfg, err, sizeof err) != AGMM_SUCCESS) {
        fprintf(stderr, "agmm_world_create: %s\n", err);
        return 1;
    }
    int nranks = agmm_world_nranks(world);
    agmm_status st = agmm_world_run(world, rank_main, &nranks);
    agmm_world_destroy(world);
    return st == AGMM_SUCCESS ? 0 : 1;
}
