/* agmm_ext.h: the benchmark's extras. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "agmm_ext.h"
#include "api.h"
#include "tune.h"
#include "../cpu/cpu.h"
#ifdef AGMM_HAVE_CUDA
#include "../backends/gemm_lt.h"
#include "../kernels/gemm/gemm_engine.h"
#include "../world/gpu_check.h"
#include "../world/rank_gpu.h"
#endif

struct agmm_ext_gemm {
    agmm_ext_gemm_kind kind;
    const void *a, *b;
    void *c;
    int64_t rows, n, k;
    agmm_layout layout;
    agmm_cpu_gemm_ws ws;
    int gpu;
#ifdef AGMM_HAVE_CUDA
    agmm_gemm_lt *lt;
    agmm_gemm_plan *engine;
    void *workspace;
    agmm_error err;
#endif
};

static void set_why(char *why, size_t len, const char *msg)
{
    if (why && len) {
        const char *tail = strstr(msg, ": ");
        agmm_format(why, len, "%s", tail ? tail + 2 : msg);
    }
}

agmm_status agmm_ext_gemm_create(agmm_ext_gemm **out, agmm_ctx *ctx, agmm_ext_gemm_kind kind, int64_t rows, int64_t n,
                                 int64_t k, agmm_layout layout, const void *a, const void *b, void *c, char *why,
                                 size_t why_len)
{
    *out = NULL;
    agmm_ext_gemm *g = calloc(1, sizeof *g);
    if (g == NULL)
        return AGMM_ERR_NO_MEMORY;
    *g = (agmm_ext_gemm){.kind = kind, .a = a, .b = b, .c = c, .rows = rows, .n = n, .k = k, .layout = layout};
    g->gpu = (agmm_ctx_info(ctx)->caps & AGMM_CAP_GPU) != 0;
    agmm_status st = AGMM_SUCCESS;
    if (!g->gpu) {
        agmm_error err = {0};
        st = kind == AGMM_EXT_GEMM_ENGINE
                 ? AGMM_FAIL(&err, AGMM_ERR_UNSUPPORTED, "the GEMM engine runs on GPUs only")
                 : agmm_cpu_gemm_ws_init(&g->ws, k, &err);
        if (st != AGMM_SUCCESS)
            set_why(why, why_len, err.msg);
    }
#ifdef AGMM_HAVE_CUDA
    else if (kind == AGMM_EXT_GEMM_LIBRARY) {
        /* cuBLASLt: the yardstick is what frameworks run. */
        st = agmm_gemm_lt_create(&g->lt, agmm_ctx_gpu(ctx)->lt, rows, n, k, layout, 16, AGMM_GEMM_LT_WORKSPACE_BYTES,
                                 agmm_ctx_info(ctx)->ranks_on_device > 1 ? AGMM_GEMM_LT_SHARED_DEVICE : 0, &g->err);
        if (st == AGMM_SUCCESS && cudaMalloc(&g->workspace, AGMM_GEMM_LT_WORKSPACE_BYTES) != cudaSuccess)
            st = AGMM_FAIL(&g->err, AGMM_ERR_NO_MEMORY, "cuBLASLt workspace of %zu bytes",
                           (size_t)AGMM_GEMM_LT_WORKSPACE_BYTES);
        if (st != AGMM_SUCCESS)
            set_why(why, why_len, g->err.msg);
    } else {
        agmm_gemm_desc d = {.a = a, .b = b, .c = c, .b_layout = layout, .m = rows, .n = n, .k = k, .nranks = 1,
                            .rank = 0, .splits = 1, .config = -1};
        st = agmm_gemm_plan_create(&g->engine, &d, &g->err);
        if (st != AGMM_SUCCESS)
            set_why(why, why_len, g->err.msg);
    }
#endif
    if (st != AGMM_SUCCESS) {
        agmm_ext_gemm_destroy(g);
        return st;
    }
    *out = g;
    return AGMM_SUCCESS;
}

agmm_status agmm_ext_gemm_run(agmm_ext_gemm *g, void *stream)
{
    if (!g->gpu) {
        agmm_cpu_gemm_ws_forget_b(&g->ws); /* convert B every call, as the backends do */
        agmm_cpu_gemm_bf16(&g->ws, g->a, g->k, g->rows, g->b, g->layout, g->n, 0, g->n, g->c, g->n);
        return AGMM_SUCCESS;
    }
#ifdef AGMM_HAVE_CUDA
    if (g->lt)
        return agmm_gemm_lt_run(g->lt, g->a, g->b, g->c, g->workspace, (cudaStream_t)stream, &g->err);
    return agmm_gemm_run(g->engine, 0, (cudaStream_t)stream, &g->err);
#else
    return AGMM_ERR_UNSUPPORTED;
#endif
}

void agmm_ext_gemm_destroy(agmm_ext_gemm *g)
{
    if (g == NULL)
        return;
    agmm_cpu_gemm_ws_free(&g->ws);
#ifdef AGMM_HAVE_CUDA
    agmm_gemm_lt_destroy(g->lt);
    agmm_gemm_plan_destroy(g->engine);
    cudaFree(g->workspace);
#endif
    free(g);
}

static agmm_status check_backend(agmm_op op, const char *name, char *why, size_t len)
{
    if (agmm_backend_is_auto(name) || agmm_backend_find(op, name) != NULL)
        return AGMM_SUCCESS;
    if (why && len) {
        char takes[320];
        agmm_backend_takes(op, takes, sizeof takes);
        agmm_format(why, len, "backend=%s: %s", name, takes);
    }
    return AGMM_ERR_INVALID_ARG;
}

agmm_status agmm_ext_check_ag_matmul(const agmm_ag_matmul_desc *desc, int nranks, char *why, size_t why_len)
{
    agmm_error err = {0};
    agmm_status st = agmm_check_ag_matmul(desc, nranks, &err);
    if (st != AGMM_SUCCESS) {
        set_why(why, why_len, err.msg);
        return st;
    }
    return check_backend(AGMM_OP_AG_MATMUL, desc->backend, why, why_len);
}

agmm_status agmm_ext_check_fault(const char *spec, char *why, size_t why_len)
{
    agmm_error err = {0};
    agmm_fault f;
    agmm_status st = agmm_fault_parse(spec, &f, &err);
    if (st != AGMM_SUCCESS)
        set_why(why, why_len, err.msg);
    return st;
}

agmm_status agmm_ext_check_all_reduce(const agmm_all_reduce_desc *desc, char *why, size_t why_len)
{
    agmm_error err = {0};
    agmm_status st = agmm_check_all_reduce(desc, &err);
    if (st != AGMM_SUCCESS) {
        set_why(why, why_len, err.msg);
        return st;
    }
    return check_backend(AGMM_OP_ALL_REDUCE, desc->backend, why, why_len);
}

agmm_status agmm_ext_check_matmul_reduce(agmm_op op, int64_t m, int64_t n, int64_t k, agmm_layout b_layout, char *why,
                                         size_t why_len)
{
    agmm_error err = {0};
    const int64_t reserved[1] = {0};
    agmm_status st = agmm_check_matmul_reduce(agmm_op_name(op), m, n, k, b_layout, reserved, sizeof reserved, &err);
    if (st != AGMM_SUCCESS)
        set_why(why, why_len, err.msg);
    return st;
}

agmm_status agmm_ext_check_all_reduce_rmsnorm(const agmm_all_reduce_rmsnorm_desc *desc, char *why, size_t why_len)
{
    agmm_error err = {0};
    agmm_status st = agmm_op_all_reduce_rmsnorm.check(desc, 1, &err);
    if (st != AGMM_SUCCESS) {
        set_why(why, why_len, err.msg);
        return st;
    }
    return check_backend(AGMM_OP_ALL_REDUCE_RMSNORM, desc->backend, why, why_len);
}

agmm_status agmm_ext_barrier(agmm_ctx *ctx)
{
    agmm_error_clear(agmm_ctx_err(ctx)); /* agmm_last_error describes this call */
    return agmm_host_barrier(ctx);
}

agmm_status agmm_ext_exchange(agmm_ctx *ctx, const void *mine, size_t bytes, void *all)
{
    agmm_error_clear(agmm_ctx_err(ctx));
    return agmm_host_exchange(ctx, mine, bytes, all);
}

int agmm_ext_launch_rank(void) { return agmm_world_launch_rank(); }

int agmm_ext_op_count(void)
{
    int n = 0;
    while (agmm_op_type_of((agmm_op)n) != NULL)
        n++;
    return n;
}

void agmm_ext_auto_choice(const agmm_ctx *ctx, const char **how, double *tune_ms)
{
    const agmm_tune_result *r = agmm_tune_last(ctx);
    static const char *const names[] = {"static", "cached", "cached", "measured"};
    *how = r->choice ? names[r->how] : NULL;
    *tune_ms = r->tune_ms;
}
