/* One process drives every rank of a world: one thread per visible GPU, or 4 threads on the CPU
 * where there is none. Each rank holds its shard A_r (M x K) and B (K x N); one ag_matmul gives
 * every rank the gathered A and C = A * B, checked here against a plain product.
 *
 *   cc $(pkg-config --cflags agmm) ag_matmul_threads.c -o ag_matmul_threads $(pkg-config --libs agmm)
 *   ./ag_matmul_threads */
#include "example.h"

enum { M = 64, N = 48, K = 32 };

/* Small integers: every product and sum below is exact in bf16 and fp32. */
static int a_value(int rank, int i, int k) { return (rank + i + 2 * k) % 5 - 2; }
static int b_value(int k, int n) { return (k + 3 * n) % 3 - 1; }

static agmm_status rank_main(agmm_ctx *ctx, void *arg)
{
    const int rank = agmm_ctx_rank(ctx), nranks = *(const int *)arg, rows = nranks * M;
    agmm_ag_matmul_desc desc = {.m = M, .n = N, .k = K, .b_layout = AGMM_LAYOUT_ROW_MAJOR}; /* backend: auto */
    agmm_plan *plan = NULL;
    agmm_status st = agmm_plan_ag_matmul(&plan, ctx, &desc); /* collective: every rank plans alike */
    if (st != AGMM_SUCCESS) {
        fprintf(stderr, "rank %d: plan: %s\n", rank, agmm_last_error(ctx));
        return st;
    }
    uint16_t *a = malloc(sizeof(uint16_t) * M * K), *b = malloc(sizeof(uint16_t) * K * N);
    uint16_t *c = malloc(sizeof(uint16_t) * (size_t)rows * N);
    void *d_b = ex_alloc(ctx, sizeof(uint16_t) * K * N), *d_ag = ex_alloc(ctx, sizeof(uint16_t) * (size_t)rows * K);
    void *d_c = ex_alloc(ctx, sizeof(uint16_t) * (size_t)rows * N), *stream = ex_stream(ctx);
    for (int i = 0; i < M; i++)
        for (int k = 0; k < K; k++)
            a[i * K + k] = ex_bf16(a_value(rank, i, k));
    for (int k = 0; k < K; k++)
        for (int n = 0; n < N; n++)
            b[k * N + n] = ex_bf16(b_value(k, n));
    /* The shard goes into the plan's symmetric input; B and the outputs are ordinary memory. */
    if (ex_copy(ctx, agmm_plan_input(plan), a, sizeof(uint16_t) * M * K, stream) ||
        ex_copy(ctx, d_b, b, sizeof(uint16_t) * K * N, stream))
        st = AGMM_ERR_CUDA;
    agmm_ag_matmul_io io = {.b = d_b, .a_gathered = d_ag, .c = d_c};
    if (st == AGMM_SUCCESS)
        st = agmm_ag_matmul(plan, &io, stream); /* enqueues; */
    if (st == AGMM_SUCCESS)
        st = agmm_ctx_sync(ctx); /* waits for this rank's part */
    if (st == AGMM_SUCCESS && ex_copy(ctx, c, d_c, sizeof(uint16_t) * (size_t)rows * N, stream))
        st = AGMM_ERR_CUDA;
    int wrong = 0;
    for (int i = 0; st == AGMM_SUCCESS && i < rows; i++)
        for (int n = 0; n < N; n++) {
            int want = 0;
            for (int k = 0; k < K; k++)
                want += a_value(i / M, i % M, k) * b_value(k, n);
            wrong += ex_int(c[i * N + n]) != want;
        }
    if (st != AGMM_SUCCESS)
        fprintf(stderr, "rank %d: %s: %s\n", rank, agmm_status_str(st), agmm_last_error(ctx));
    else if (wrong)
        fprintf(stderr, "rank %d: %d elements of C are wrong\n", rank, wrong);
    else if (rank == 0)
        printf("ag_matmul/%s on %d ranks: C (%d x %d) exact\n", agmm_plan_backend(plan), nranks, rows, N);
    agmm_plan_destroy(plan);
    ex_free(ctx, d_b), ex_free(ctx, d_ag), ex_free(ctx, d_c);
    ex_stream_destroy(stream);
    free(a), free(b), free(c);
    return st != AGMM_SUCCESS ? st : wrong ? AGMM_ERR_INTERNAL : AGMM_SUCCESS;
}

int main(void)
{
    agmm_world *world = NULL;
    char err[512];
    agmm_world_config cfg = {.kind = AGMM_WORLD_AUTO}; /* GPUs if any, else 4 CPU threads */
    if (agmm_world_create(&world, &cfg, err, sizeof err) != AGMM_SUCCESS) {
        fprintf(stderr, "agmm_world_create: %s\n", err);
        return 1;
    }
    printf("%s\n", agmm_world_describe(world));
    int nranks = agmm_world_nranks(world);
    agmm_status st = agmm_world_run(world, rank_main, &nranks); /* a thread and a context per rank */
    agmm_world_destroy(world);
    return st == AGMM_SUCCESS ? 0 : 1;
}
