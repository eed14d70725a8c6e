/* One rank per process, as torchrun, mpirun or srun start them: the process joins the world its
 * launcher describes (RANK/WORLD_SIZE, OMPI_COMM_WORLD_*, PMI_*, SLURM_*), runs one ag_matmul and
 * checks the gathered A: every rank's shard, in rank order.
 *
 *   cc $(pkg-config --cflags agmm) ag_matmul_process.c -o ag_matmul_process $(pkg-config --libs agmm)
 *   torchrun --no-python --nproc-per-node 4 ./ag_matmul_process
 *   mpirun -n 4 ./ag_matmul_process
 *   AGMM_WORLD=cpu ... : the CPU world (processes sharing host memory), no GPU needed */
#include "example.h"

enum { M = 8, N = 16, K = 24 };

static int a_value(int rank, int i, int k) { return (3 * rank + i + k) % 7 - 3; }

int main(void)
{
    const char *kind = getenv("AGMM_WORLD");
    agmm_join_config cfg = {.kind = kind && !strcmp(kind, "cpu") ? AGMM_WORLD_CPU : AGMM_WORLD_AUTO,
                            .rank = -1, .nranks = -1, .device = -1}; /* -1: from the launcher */
    agmm_world *world = NULL;
    char err[768];
    if (agmm_world_join(&world, &cfg, err, sizeof err) != AGMM_SUCCESS) {
        fprintf(stderr, "agmm_world_join: %s\n", err);
        return 1;
    }
    const int rank = agmm_world_first_rank(world), nranks = agmm_world_nranks(world), rows = nranks * M;
    agmm_ctx *ctx = NULL;
    agmm_status st = agmm_ctx_create(&ctx, world, rank);
    agmm_plan *plan = NULL;
    agmm_ag_matmul_desc desc = {.m = M, .n = N, .k = K};
    if (st == AGMM_SUCCESS)
        st = agmm_plan_ag_matmul(&plan, ctx, &desc);
    uint16_t *a = malloc(sizeof(uint16_t) * (size_t)rows * K), *b = calloc((size_t)K * N, sizeof(uint16_t));
    void *d_b = NULL, *d_ag = NULL, *d_c = NULL, *stream = NULL;
    if (st == AGMM_SUCCESS) {
        d_b = ex_alloc(ctx, sizeof(uint16_t) * K * N);
        d_ag = ex_alloc(ctx, sizeof(uint16_t) * (size_t)rows * K);
        d_c = ex_alloc(ctx, sizeof(uint16_t) * (size_t)rows * N);
        stream = ex_stream(ctx);
        for (int i = 0; i < M * K; i++)
            a[i] = ex_bf16(a_value(rank, i / K, i % K));
        if (ex_copy(ctx, agmm_plan_input(plan), a, sizeof(uint16_t) * M * K, stream) ||
            ex_copy(ctx, d_b, b, sizeof(uint16_t) * K * N, stream))
            st = AGMM_ERR_CUDA;
    }
    agmm_ag_matmul_io io = {.b = d_b, .a_gathered = d_ag, .c = d_c};
    if (st == AGMM_SUCCESS)
        st = agmm_ag_matmul(plan, &io, stream);
    if (st == AGMM_SUCCESS)
        st = agmm_ctx_sync(ctx);
    if (st == AGMM_SUCCESS && ex_copy(ctx, a, d_ag, sizeof(uint16_t) * (size_t)rows * K, stream))
        st = AGMM_ERR_CUDA;
    int wrong = 0;
    for (int i = 0; st == AGMM_SUCCESS && i < rows * K; i++)
        wrong += ex_int(a[i]) != a_value(i / (M * K), (i / K) % M, i % K);
    if (st != AGMM_SUCCESS)
        fprintf(stderr, "rank %d: %s: %s\n", rank, agmm_status_str(st), ctx ? agmm_last_error(ctx) : "");
    else if (wrong)
        fprintf(stderr, "rank %d: %d elements of the gathered A are wrong\n", rank, wrong);
    else
        printf("rank %d of %d: gathered A exact (%s; %s)\n", rank, nranks, agmm_plan_backend(plan),
               agmm_world_describe(world));
    agmm_plan_destroy(plan);
    if (ctx)
        ex_free(ctx, d_b), ex_free(ctx, d_ag), ex_free(ctx, d_c);
    ex_stream_destroy(stream);
    agmm_ctx_destroy(ctx);
    agmm_world_destroy(world);
    free(a), free(b);
    return st == AGMM_SUCCESS && !wrong ? 0 : 1;
}
