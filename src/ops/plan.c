/* The public plan API: validation, backend resolution, the symmetric input buffer, epochs, and
 * dispatch to the backend's create/run/destroy. */
#include <stdlib.h>

#include "backend.h"
#include "../core/validate.h"
#ifdef AGMM_HAVE_CUDA
#include "../world/ctx_gpu.h"
#endif

/* AUTO: the first of these the world can run. All ranks resolve alike (same world, same list).
 * The order is what was measured (docs/results): ce was fastest on 30 of the 31 seed shapes at
 * W = 1 on an H200 and on every emulated W = 8 shape. Per-shape choices wait for measurements
 * across real NVLink. */
static const agmm_backend ag_matmul_preference[] = {AGMM_BACKEND_CE, AGMM_BACKEND_FUSED, AGMM_BACKEND_NCCL};
static const agmm_backend all_reduce_preference[] = {AGMM_BACKEND_ONE_SHOT, AGMM_BACKEND_TWO_SHOT,
                                                     AGMM_BACKEND_NCCL};

static int usable(const agmm_ctx *ctx, const agmm_backend_ops *b)
{
    return b != NULL && (!b->nccl || ctx->nccl_comm != NULL);
}

static agmm_status resolve(agmm_ctx *ctx, agmm_op op, agmm_backend want, const agmm_backend_ops **out)
{
    int cpu = ctx->world->kind == AGMM_WORLD_CPU;
    if (want == AGMM_BACKEND_AUTO) {
        const agmm_backend *pref = op == AGMM_OP_AG_MATMUL ? ag_matmul_preference : all_reduce_preference;
        size_t npref = op == AGMM_OP_AG_MATMUL ? sizeof ag_matmul_preference / sizeof *pref
                                               : sizeof all_reduce_preference / sizeof *pref;
        for (size_t i = 0; i < npref; i++) {
            const agmm_backend_ops *b = agmm_backend_find(op, pref[i], cpu);
            if (usable(ctx, b)) {
                *out = b;
                return AGMM_SUCCESS;
            }
        }
        return AGMM_FAIL(&ctx->err, AGMM_ERR_UNSUPPORTED, "backend=auto: no backend of this build runs in this world");
    }
    const agmm_backend_ops *b = agmm_backend_find(op, want, cpu);
    if (b == NULL)
        return AGMM_FAIL(&ctx->err, AGMM_ERR_UNSUPPORTED, "backend=%s is not available for %s in the %s world",
                         agmm_backend_name(want), op == AGMM_OP_AG_MATMUL ? "ag_matmul" : "all_reduce",
                         cpu ? "CPU" : "GPU");
    if (!usable(ctx, b))
        return AGMM_FAIL(&ctx->err, AGMM_ERR_UNSUPPORTED, "skipped: ranks share a GPU (backend=%s needs NCCL)",
                         agmm_backend_name(want));
    *out = b;
    return AGMM_SUCCESS;
}

static agmm_status plan_create(agmm_plan **out, agmm_ctx *ctx, agmm_op op, const agmm_backend_ops *ops,
                               size_t input_bytes)
{
    agmm_plan *p = calloc(1, sizeof *p);
    if (p == NULL)
        return AGMM_FAIL(&ctx->err, AGMM_ERR_NO_MEMORY, "plan allocation failed");
    p->ctx = ctx;
    p->op = op;
    p->ops = ops;
    *out = p;
    return agmm_symm_alloc(ctx, input_bytes, &p->input);
}

agmm_status agmm_plan_ag_matmul(agmm_plan **out, agmm_ctx *ctx, const agmm_ag_matmul_desc *desc)
{
    if (ctx == NULL)
        return AGMM_ERR_INVALID_ARG;
    agmm_error_clear(&ctx->err);
    if (out == NULL) /* agmm.h: an INVALID_ARG names its argument in agmm_last_error */
        return AGMM_FAIL(&ctx->err, AGMM_ERR_INVALID_ARG, "plan is NULL");
    *out = NULL;
    agmm_status st = agmm_check_ag_matmul(desc, ctx->world->nranks, &ctx->err);
    if (st != AGMM_SUCCESS)
        return st;
    const agmm_backend_ops *ops = NULL;
    st = resolve(ctx, AGMM_OP_AG_MATMUL, desc->backend, &ops);
    if (st != AGMM_SUCCESS)
        return st;
    agmm_plan *p = NULL;
    st = plan_create(&p, ctx, AGMM_OP_AG_MATMUL, ops, (size_t)(desc->m * desc->k) * 2);
    if (st == AGMM_SUCCESS) {
        p->mm = *desc;
        p->mm.backend = ops->id;
        if (p->mm.splits == 0)
            p->mm.splits = 1;
        st = ops->create(p);
    }
    if (st != AGMM_SUCCESS) {
        agmm_plan_destroy(p);
        return st;
    }
    *out = p;
    return AGMM_SUCCESS;
}

agmm_status agmm_plan_all_reduce(agmm_plan **out, agmm_ctx *ctx, const agmm_all_reduce_desc *desc)
{
    if (ctx == NULL)
        return AGMM_ERR_INVALID_ARG;
    agmm_error_clear(&ctx->err);
    if (out == NULL) /* agmm.h: an INVALID_ARG names its argument in agmm_last_error */
        return AGMM_FAIL(&ctx->err, AGMM_ERR_INVALID_ARG, "plan is NULL");
    *out = NULL;
    agmm_status st = agmm_check_all_reduce(desc, &ctx->err);
    if (st != AGMM_SUCCESS)
        return st;
    const agmm_backend_ops *ops = NULL;
    st = resolve(ctx, AGMM_OP_ALL_REDUCE, desc->backend, &ops);
    if (st != AGMM_SUCCESS)
        return st;
    agmm_plan *p = NULL;
    st = plan_create(&p, ctx, AGMM_OP_ALL_REDUCE, ops, (size_t)desc->n * agmm_dtype_bytes(desc->dtype));
    if (st == AGMM_SUCCESS) {
        p->ar = *desc;
        p->ar.backend = ops->id;
        st = ops->create(p);
    }
    if (st != AGMM_SUCCESS) {
        agmm_plan_destroy(p);
        return st;
    }
    *out = p;
    return AGMM_SUCCESS;
}

void agmm_plan_destroy(agmm_plan *p)
{
    if (p == NULL)
        return;
    if (p->impl)
        p->ops->destroy(p);
    agmm_symm_free(p->ctx, p->input);
    free(p);
}

agmm_backend agmm_plan_backend(const agmm_plan *p) { return p ? p->ops->id : AGMM_BACKEND_AUTO; }
void *agmm_plan_input(agmm_plan *p) { return p && p->input ? p->input->local : NULL; }

agmm_status agmm_plan_run(agmm_plan *p, const agmm_io *io, void *stream)
{
    if (p == NULL)
        return AGMM_ERR_INVALID_ARG;
    agmm_ctx *ctx = p->ctx;
    agmm_error_clear(&ctx->err); /* agmm_last_error describes this call, not an older one */
    if (io == NULL)
        return AGMM_FAIL(&ctx->err, AGMM_ERR_INVALID_ARG, "io is NULL");
    if (p->op == AGMM_OP_AG_MATMUL && (io->b == NULL || io->a_gathered == NULL || io->c == NULL))
        return AGMM_FAIL(&ctx->err, AGMM_ERR_INVALID_ARG,
                         "ag_matmul needs io->b, io->a_gathered and io->c (b=%p a_gathered=%p c=%p)", io->b,
                         io->a_gathered, io->c);
    if (p->op == AGMM_OP_ALL_REDUCE && io->out == NULL)
        return AGMM_FAIL(&ctx->err, AGMM_ERR_INVALID_ARG, "all_reduce needs io->out (it may equal agmm_plan_input)");
    if (p->op == AGMM_OP_ALL_REDUCE) {
        size_t esize = agmm_dtype_bytes(p->ar.dtype);
        uintptr_t out = (uintptr_t)io->out, in = (uintptr_t)p->input->local, bytes = (uintptr_t)p->ar.n * esize;
        if (out % esize != 0)
            return AGMM_FAIL(&ctx->err, AGMM_ERR_INVALID_ARG, "io->out=%p is not aligned to its %zu-byte elements",
                             io->out, esize);
        if (out != in && out < in + bytes && in < out + bytes)
            return AGMM_FAIL(&ctx->err, AGMM_ERR_INVALID_ARG,
                             "io->out=%p overlaps the plan's input %p without equalling it (in place needs out == input)",
                             io->out, p->input->local);
    }
    if (ctx->out_of_step.status != AGMM_SUCCESS)
        return AGMM_FAIL(&ctx->err, ctx->out_of_step.status,
                         "rank %d is out of step with its peers since an earlier run failed (%s): destroy its plans "
                         "and context", ctx->rank, ctx->out_of_step.msg);
    agmm_status st = AGMM_SUCCESS;
#ifdef AGMM_HAVE_CUDA
    if (ctx->gpu) {
        /* A wait that expired in an earlier run leaves the ranks out of step: report it, run nothing. */
        st = agmm_ctx_gpu_check_dev_error(ctx);
        if (st == AGMM_SUCCESS)
            st = agmm_ctx_gpu_check_stream(ctx, (cudaStream_t)stream);
        /* Every GPU GEMM (cuBLASLt's plans, the engine's TMA maps) was set up for 16-byte
         * aligned operands. */
        if (st == AGMM_SUCCESS && p->op == AGMM_OP_AG_MATMUL &&
            ((uintptr_t)io->b | (uintptr_t)io->a_gathered | (uintptr_t)io->c) % 16 != 0)
            st = AGMM_FAIL(&ctx->err, AGMM_ERR_INVALID_ARG,
                           "io->b=%p, io->a_gathered=%p and io->c=%p must be 16-byte aligned", io->b, io->a_gathered,
                           io->c);
        if (st != AGMM_SUCCESS)
            return st;
    }
#endif
    /* Every check that can refuse a call is above: from here on the ranks' epochs and barrier
     * counts move together, and a failure leaves this rank out of step for good (a later barrier
     * could otherwise pass on a peer's older arrival). */
    p->epoch++;
    st = p->ops->run(p, io, stream);
    if (st != AGMM_SUCCESS)
        ctx->out_of_step = ctx->err;
    return st;
}
