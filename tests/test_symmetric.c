/* Caller-owned symmetric memory (agmm_symmetric_alloc) as a run's input (io.input), in the CPU
 * world: every backend of both operations reads the input in place at an offset inside the
 * caller's buffer, with the plan's own input buffer poisoned so a run that read it instead shows;
 * and the misuses (a pointer outside symmetric memory, misaligned, too close to the end, a free of
 * a pointer that is no buffer's start) are refused with a message naming the argument. */
#include <stdlib.h>
#include <string.h>

#include "agmm.h"
#include "core/numeric.h"
#include "cpu/reference.h"
#include "cpu_tests.h"
#include "harness.h"
#include "world/world.h"

#define W 3
#define M 5
#define N 24
#define K 16
#define AR_N 1001
#define OFFSET 4096 /* where the input sits in the caller's buffer: the same on every rank */

typedef struct {
    int mm_bad[W][8], ar_bad[W][8];  /* per rank and backend index (each rank writes its own) */
    int mm_ran[W][8], ar_ran[W][8];
    const char *mm_name[8], *ar_name[8];
    int nmm, nar;
    agmm_status misuse[4];
    char misuse_msg[4][512];
    agmm_status free_bad;
    char free_msg[512];
} sym_result;

static agmm_status sym_rank(agmm_ctx *ctx, void *arg)
{
    sym_result *res = arg;
    int rank = agmm_ctx_rank(ctx);
    const size_t shard = (size_t)M * K, rows = (size_t)W * M;
    uint16_t *all = malloc(rows * K * 2), *b = malloc((size_t)K * N * 2), *ag = malloc(rows * K * 2);
    uint16_t *c = malloc(rows * N * 2), *ref16 = malloc(rows * N * 2);
    float *ar_out = malloc(AR_N * 4), *ar_in[W];
    double *ref = malloc(rows * N * 8), *ar_ref = malloc(AR_N * 8);
    for (int r = 0; r < W; r++)
        ar_in[r] = malloc(AR_N * 4);
    for (int r = 0; r < W; r++)
        test_fill_bf16(all + r * shard, (int64_t)shard, test_seed_of(11, r, 0, 1), 2);
    test_fill_bf16(b, K * N, test_seed_of(11, 0, 0, 2), 2);
    agmm_ref_gemm_bf16(all, b, AGMM_LAYOUT_COL_MAJOR, (int64_t)rows, N, K, ref, ref16);
    for (int r = 0; r < W; r++) {
        uint64_t s = test_seed_of(12, r, 0, 3);
        for (int i = 0; i < AR_N; i++)
            ar_in[r][i] = (float)agmm_rng_small_int(&s, 100);
    }
    agmm_ref_all_reduce((const void *const *)ar_in, W, AR_N, AGMM_DTYPE_F32, ar_ref);

    int nmm = 0, nar = 0;
    void *sym = NULL;
    agmm_status st = agmm_symmetric_alloc(ctx, OFFSET + AR_N * 4 + 64, &sym);
    if (st != AGMM_SUCCESS)
        return st;

    /* ag_matmul: every backend, the shard at OFFSET in the caller's buffer. */
    for (int bi = 0; agmm_backend_name(AGMM_OP_AG_MATMUL, bi) != NULL; bi++) {
        const char *name = agmm_backend_name(AGMM_OP_AG_MATMUL, bi);
        if (!agmm_backend_available(agmm_ctx_world(ctx), AGMM_OP_AG_MATMUL, name, NULL, 0))
            continue;
        int i = nmm++;
        agmm_plan *plan = NULL;
        agmm_ag_matmul_desc d = {.m = M, .n = N, .k = K, .backend = name};
        if (agmm_plan_ag_matmul(&plan, ctx, &d) != AGMM_SUCCESS)
            return AGMM_ERR_INTERNAL;
        test_poison_bf16(agmm_plan_input(plan), (int64_t)shard); /* a run reading it would show */
        memcpy((char *)sym + OFFSET, all + rank * shard, shard * 2);
        test_poison_bf16(ag, (int64_t)(rows * K));
        test_poison_bf16(c, (int64_t)(rows * N));
        agmm_ag_matmul_io io = {.b = b, .a_gathered = ag, .c = c, .input = (char *)sym + OFFSET};
        st = agmm_ag_matmul(plan, &io, NULL);
        if (rank == 0) {
            res->mm_name[i] = name;
            res->nmm = nmm;
        }
        res->mm_ran[rank][i] = st == AGMM_SUCCESS;
        res->mm_bad[rank][i] = st != AGMM_SUCCESS || agmm_ref_first_mismatch(ag, all, (int64_t)(rows * K), 2) >= 0 ||
                          agmm_ref_first_mismatch(c, ref16, (int64_t)(rows * N), 2) >= 0;
        /* Misuse, on the last backend only (each call is refused before anything collective). */
        if (agmm_backend_name(AGMM_OP_AG_MATMUL, bi + 1) == NULL && rank == 0) {
            const void *bad[4] = {all, (char *)sym + OFFSET + 2, (char *)sym + OFFSET + AR_N * 4 + 64 - 16, NULL};
            for (int m = 0; m < 3; m++) {
                agmm_ag_matmul_io bio = io;
                bio.input = bad[m];
                res->misuse[m] = agmm_ag_matmul(plan, &bio, NULL);
                snprintf(res->misuse_msg[m], sizeof res->misuse_msg[m], "%s", agmm_last_error(ctx));
            }
        }
        agmm_plan_destroy(plan);
    }

    /* all_reduce: every backend, in place in the caller's buffer. */
    for (int bi = 0; agmm_backend_name(AGMM_OP_ALL_REDUCE, bi) != NULL; bi++) {
        const char *name = agmm_backend_name(AGMM_OP_ALL_REDUCE, bi);
        if (!agmm_backend_available(agmm_ctx_world(ctx), AGMM_OP_ALL_REDUCE, name, NULL, 0))
            continue;
        int i = nar++;
        agmm_plan *plan = NULL;
        agmm_all_reduce_desc d = {.n = AR_N, .dtype = AGMM_DTYPE_F32, .backend = name};
        if (agmm_plan_all_reduce(&plan, ctx, &d) != AGMM_SUCCESS)
            return AGMM_ERR_INTERNAL;
        memset(agmm_plan_input(plan), 0xff, AR_N * 4); /* NaN: a run reading it would show */
        float *x = (float *)((char *)sym + OFFSET);
        memcpy(x, ar_in[rank], AR_N * 4);
        agmm_all_reduce_io io = {.out = x, .input = x};
        st = agmm_all_reduce(plan, &io, NULL);
        if (rank == 0) {
            res->ar_name[i] = name;
            res->nar = nar;
        }
        int bad = st != AGMM_SUCCESS;
        for (int e = 0; e < AR_N && !bad; e++)
            bad = x[e] != (float)ar_ref[e];
        res->ar_ran[rank][i] = st == AGMM_SUCCESS;
        res->ar_bad[rank][i] = bad;
        agmm_plan_destroy(plan);
    }
    if (rank == 0) {
        agmm_symmetric_free(ctx, (char *)sym + 16); /* not a buffer's start: refused, nothing freed */
        res->free_bad = strstr(agmm_last_error(ctx), "not the start of a buffer") ? AGMM_ERR_INVALID_ARG : AGMM_SUCCESS;
        snprintf(res->free_msg, sizeof res->free_msg, "%s", agmm_last_error(ctx));
    }
    agmm_symmetric_free(ctx, sym);
    free(all), free(b), free(ag), free(c), free(ref16), free(ref), free(ar_out), free(ar_ref);
    for (int r = 0; r < W; r++)
        free(ar_in[r]);
    return AGMM_SUCCESS;
}

void test_symmetric_input(void)
{
    sym_result *res = calloc(1, sizeof *res);
    agmm_world *world = test_cpu_world(W, 0);
    agmm_status st = world ? agmm_world_run(world, sym_rank, res) : AGMM_ERR_INTERNAL;
    agmm_check(st == AGMM_SUCCESS && res->nmm >= 3 && res->nar >= 3,
               "symmetric input: W=%d world ran %d ag_matmul and %d all_reduce backends (%s)", W, res->nmm, res->nar,
               agmm_status_str(st));
    for (int i = 0; i < res->nmm; i++) {
        int ran = 0, bad = 0;
        for (int r = 0; r < W; r++)
            ran += res->mm_ran[r][i], bad += res->mm_bad[r][i];
        agmm_check(ran == W && bad == 0,
                   "symmetric input: ag_matmul/%s W=%d M=%d N=%d K=%d reads A_r at offset %d of the caller's buffer "
                   "(plan's own input poisoned): gathered A and C exact on %d of %d ranks",
                   res->mm_name[i], W, M, N, K, OFFSET, ran - bad, W);
    }
    for (int i = 0; i < res->nar; i++) {
        int ran = 0, bad = 0;
        for (int r = 0; r < W; r++)
            ran += res->ar_ran[r][i], bad += res->ar_bad[r][i];
        agmm_check(ran == W && bad == 0,
                   "symmetric input: all_reduce/%s fp32 n=%d in place at offset %d of the caller's buffer: exact on %d "
                   "of %d ranks",
                   res->ar_name[i], AR_N, OFFSET, ran - bad, W);
    }
    static const char *const what[3] = {"a pointer outside symmetric memory", "a pointer 2 bytes off alignment",
                                        "a pointer too close to the buffer's end"};
    static const char *const want[3] = {"not", "16-byte aligned", "not"};
    for (int m = 0; m < 3; m++)
        agmm_check(res->misuse[m] == AGMM_ERR_INVALID_ARG && strstr(res->misuse_msg[m], "io->input") &&
                       strstr(res->misuse_msg[m], want[m]),
                   "symmetric input: io.input = %s is refused: %s \"%s\"", what[m], agmm_status_str(res->misuse[m]),
                   res->misuse_msg[m]);
    agmm_check(res->free_bad == AGMM_ERR_INVALID_ARG, "symmetric input: freeing a pointer that starts no buffer is "
                                                      "refused, naming it: \"%s\"",
               res->free_msg);
    agmm_world_destroy(world);
    free(res);
}

/* agmm_symmetric_alloc is collective over one size: ranks asking for different sizes (or one for
 * none) fail alike, naming the sizes, and get no buffer; the same sizes after that still work. */
typedef struct {
    agmm_status differ, zero, same;
    char differ_msg[512];
    int got_none, same_zeroed;
} size_result;

static agmm_status size_rank(agmm_ctx *ctx, void *arg)
{
    size_result *res = (size_result *)arg + agmm_ctx_rank(ctx);
    const int rank = agmm_ctx_rank(ctx);
    void *p = (void *)&res; /* must come back NULL */
    res->differ = agmm_symmetric_alloc(ctx, rank == 1 ? 1 << 20 : 64, &p);
    snprintf(res->differ_msg, sizeof res->differ_msg, "%s", agmm_last_error(ctx));
    res->got_none = p == NULL;
    res->zero = agmm_symmetric_alloc(ctx, rank == 2 ? 0 : 64, &p);
    res->got_none &= p == NULL;
    res->same = agmm_symmetric_alloc(ctx, 4096, &p);
    res->same_zeroed = p != NULL;
    for (int i = 0; p && i < 4096; i++)
        res->same_zeroed &= ((unsigned char *)p)[i] == 0;
    agmm_symmetric_free(ctx, p);
    return AGMM_SUCCESS;
}

void test_symmetric_sizes(void)
{
    size_result res[W] = {0};
    agmm_world *world = test_cpu_world(W, 0);
    agmm_status st = world ? agmm_world_run(world, size_rank, res) : AGMM_ERR_INTERNAL;
    int ok = st == AGMM_SUCCESS;
    for (int r = 0; r < W; r++)
        ok &= res[r].differ == AGMM_ERR_INVALID_ARG && strstr(res[r].differ_msg, "rank 1 asks for 1048576 bytes") &&
              res[r].zero == AGMM_ERR_INVALID_ARG && res[r].got_none && res[r].same == AGMM_SUCCESS &&
              res[r].same_zeroed;
    agmm_check(ok,
               "symmetric sizes W=%d: rank 1 asking for 1 MiB where the others ask for 64 bytes -> %s on every rank "
               "(\"%s\"), rank 2 asking for none -> %s, no buffer handed out; then 4096 bytes on every rank -> %s, "
               "zeroed",
               W, agmm_status_str(res[0].differ), res[0].differ_msg, agmm_status_str(res[0].zero),
               agmm_status_str(res[0].same));
    agmm_world_destroy(world);
}
