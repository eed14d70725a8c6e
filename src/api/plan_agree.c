/* What the ranks settle at plan creation before anyone allocates (api.h, agmm_plan_agree): that
 * they plan the same thing, and that every rank has the memory for it. One host exchange carries
 * both, so each rank reaches the same verdict from the same numbers and gives the same error:
 * ranks that disagree on a shape or a backend, or one rank short of memory, can no longer leave
 * the others waiting in a collective allocation until the timeout, or running a different plan. */
#include <stdlib.h>
#include <string.h>

#include "api.h"
#include "../core/text.h"

/* One rank's entry: one host exchange slot (AGMM_HOST_SLOT_BYTES, in every world: threads,
 * processes' control segment, NCCL across hosts). */
typedef struct {
    char what[112];             /* "ag_matmul/ce M=64 N=32 K=16 b_layout=col splits=1" */
    uint64_t symmetric_bytes;   /* per rank, the plan's input included */
    uint64_t workspace_bytes;
    uint64_t staging_bytes;
    uint64_t avail_bytes;       /* what the rank's pool has left */
    int32_t sharers, gpu;       /* ranks drawing on that pool; 1: a GPU's memory */
    int32_t check_runs;         /* AGMM_CHECK_RUNS=1 when the world was made (rank 0's counts) */
    char source[72];            /* what bounds avail_bytes */
} digest;

_Static_assert(sizeof(digest) <= AGMM_HOST_SLOT_BYTES, "a plan digest must fit one host exchange slot");

static void fill(const agmm_plan *p, uint64_t input_bytes, digest *d)
{
    memset(d, 0, sizeof *d);
    size_t used = agmm_format(d->what, sizeof d->what, "%s/%s ", agmm_op_name(p->op), p->backend->name);
    agmm_op_type_of(p->op)->describe(p, d->what + used, sizeof d->what - used);
    agmm_mem_need need = {.symmetric_bytes = input_bytes};
    if (p->impl->mem_need)
        p->impl->mem_need(p, &need);
    d->symmetric_bytes = need.symmetric_bytes;
    d->workspace_bytes = need.workspace_bytes;
    d->staging_bytes = need.staging_bytes;
    agmm_mem_pool pool;
    agmm_mem_pool_of(p->ctx, 1, &pool);
    d->avail_bytes = pool.avail_bytes;
    d->sharers = pool.sharers;
    d->gpu = pool.gpu;
    memcpy(d->source, pool.source, sizeof d->source);
    d->check_runs = agmm_ctx_info(p->ctx)->check_runs;
}

static uint64_t need_of(const digest *d) { return d->symmetric_bytes + d->workspace_bytes + d->staging_bytes; }

uint64_t agmm_ranks_differing(const void *all, size_t stride, int nranks, int (*same)(const void *, const void *),
                              int *first, char *who, size_t who_len)
{
    uint64_t differ = 0;
    *first = -1;
    for (int r = 1; r < nranks; r++)
        if (!same(all, (const char *)all + (size_t)r * stride)) {
            differ |= (uint64_t)1 << r;
            if (*first < 0)
                *first = r;
        }
    if (differ) {
        size_t used = agmm_format_ranks(who, who_len, differ);
        agmm_format(who + used, who_len - used, " %s", differ & (differ - 1) ? "differ" : "differs");
    }
    return differ;
}

/* Slots compared by their descriptions (the text that starts each: `what`). */
static int same_what(const void *a, const void *b) { return strcmp(a, b) == 0; }

/* Every rank runs this on the same table, so every rank returns the same status and message. */
static agmm_status judge(agmm_ctx *ctx, const digest *all, int nranks)
{
    agmm_error *err = agmm_ctx_err(ctx);
    int first;
    char who[112];
    if (agmm_ranks_differing(all[0].what, sizeof *all, nranks, same_what, &first, who, sizeof who))
        return AGMM_FAIL(err, AGMM_ERR_INVALID_ARG,
                         "the ranks disagree on the plan: rank 0 has %s, rank %d has %s (%s from rank 0): every "
                         "rank must pass the same descriptor and get the same backend",
                         all[0].what, first, all[first].what, who);
    for (int r = 0; r < nranks; r++) {
        agmm_mem_pool pool = {.avail_bytes = all[r].avail_bytes, .sharers = all[r].sharers, .gpu = all[r].gpu};
        memcpy(pool.source, all[r].source, sizeof pool.source);
        if (agmm_mem_fits(need_of(&all[r]), &pool))
            continue;
        char parts[160], text[AGMM_ERROR_LEN];
        agmm_format(parts, sizeof parts, "symmetric %s, workspace %s, staging %s",
                    agmm_bytes(all[r].symmetric_bytes).s, agmm_bytes(all[r].workspace_bytes).s,
                    agmm_bytes(all[r].staging_bytes).s);
        agmm_mem_shortfall_text(text, sizeof text, need_of(&all[r]), parts, &pool);
        return AGMM_FAIL(err, AGMM_ERR_NO_MEMORY, "rank %d: %s %s", r, all[r].what, text);
    }
    return AGMM_SUCCESS;
}

agmm_status agmm_plan_agree(agmm_plan *p, uint64_t input_bytes)
{
    const int nranks = agmm_ctx_info(p->ctx)->nranks;
    digest mine;
    fill(p, input_bytes, &mine);
    digest *all = calloc((size_t)nranks, sizeof *all);
    if (all == NULL)
        return AGMM_FAIL(agmm_ctx_err(p->ctx), AGMM_ERR_NO_MEMORY, "plan digests of %d ranks: allocation failed",
                         nranks);
    agmm_status st = agmm_host_exchange(p->ctx, &mine, sizeof mine, all);
    if (st == AGMM_SUCCESS)
        st = judge(p->ctx, all, nranks);
    /* Right after this plan's exchange: the same number on every rank, and no other plan's. */
    p->number = agmm_ctx_host_seq(p->ctx);
    p->check_runs = all[0].check_runs;
    free(all);
    return st;
}

/* One rank's request (plan_agree_request): a whole host exchange slot, the most detail a failure
 * can carry to the peers. */
typedef struct {
    int32_t status;             /* its verdict so far */
    char what[112];             /* "ag_matmul/auto M=64 N=32 K=16 b_layout=col splits=1" */
    char why[AGMM_HOST_SLOT_BYTES - 116];  /* the detail of a failure */
} request;

_Static_assert(sizeof(request) == AGMM_HOST_SLOT_BYTES, "a plan request fills one host exchange slot");

agmm_status agmm_plan_agree_request(agmm_ctx *ctx, agmm_op op, const void *desc, const char *backend,
                                    agmm_status mine)
{
    agmm_error *err = agmm_ctx_err(ctx);
    const int nranks = agmm_ctx_info(ctx)->nranks;
    request me;
    memset(&me, 0, sizeof me);
    me.status = (int32_t)mine;
    if (mine != AGMM_SUCCESS) {
        agmm_format(me.why, sizeof me.why, "%s", agmm_error_detail(err->msg));
    } else {
        /* The operation describes an installed descriptor: a plan on the stack, nothing allocated. */
        agmm_plan shape;
        const agmm_op_type *type = agmm_op_type_of(op);
        agmm_op_shape(type, ctx, desc, &shape);
        size_t used = agmm_format(me.what, sizeof me.what, "%s/%s ", agmm_op_name(op), backend);
        type->describe(&shape, me.what + used, sizeof me.what - used);
    }
    request *all = calloc((size_t)nranks, sizeof *all);
    if (all == NULL)
        return AGMM_FAIL(err, AGMM_ERR_NO_MEMORY, "plan requests of %d ranks: allocation failed", nranks);
    agmm_status st = agmm_host_exchange(ctx, &me, sizeof me, all);
    /* A rank that failed keeps its own error; the others take the first failing rank's. */
    if (st == AGMM_SUCCESS && mine != AGMM_SUCCESS)
        st = mine;
    for (int r = 0; st == AGMM_SUCCESS && r < nranks; r++)
        if (all[r].status != AGMM_SUCCESS) {
            agmm_error_clear(err);
            st = AGMM_FAIL(err, (agmm_status)all[r].status, "rank %d: %s", r, all[r].why);
        }
    int first;
    char who[112];
    if (st == AGMM_SUCCESS && agmm_ranks_differing(all[0].what, sizeof *all, nranks, same_what, &first, who, sizeof who))
        st = AGMM_FAIL(err, AGMM_ERR_INVALID_ARG,
                       "the ranks asked for different plans: rank 0 %s, rank %d %s (%s from rank 0): every rank "
                       "must pass the same descriptor and name the same backend (auto chooses for all ranks "
                       "together)",
                       all[0].what, first, all[first].what, who);
    free(all);
    return st;
}
