/* The run check (AGMM_CHECK_RUNS=1, agmm_run_agree in api.h): before a run enqueues anything, the
 * ranks compare what each is about to run, in one host exchange.
 *
 * What it catches is what nothing else can: ranks that run different plans at the same step, or
 * the same plan with io.input in different buffers or at different offsets. Each plan has its own
 * buffers and flags, so without the check such ranks either wait for each other until the
 * timeout, or, where two plans' runs happen to pair up (the nccl backends, a slow rank that later
 * runs the plan its peers ran), read each other's data at the wrong place and return wrong
 * results without an error. A rank whose own checks refused the call is an error on every rank
 * too ("run check: rank R refused its call: ..."), not a timeout at the peers' next meeting.
 *
 * It costs one host exchange per run (microseconds in one process, more across processes, and
 * across hosts a wait for the rank's previous run: host_nccl.c), so it is off unless asked for,
 * when the world is made. A run captured into a CUDA graph is checked as it is captured; replays
 * repeat what the capture checked. */
#include <stdlib.h>
#include <string.h>

#include "api.h"
#include "../core/text.h"

/* One rank's run: RUN_BYTES, a size no other host exchange uses, so that a rank in a run check
 * and a rank in another collective call (a plan's creation, a symmetric allocation) are told
 * apart by the host layer ("the ranks are out of step"), not read as each other's data. */
#define RUN_BYTES (AGMM_HOST_SLOT_BYTES - 8)
typedef struct {
    int32_t status;             /* this rank's verdict on its call so far */
    int32_t buffer;             /* io.input's buffer among the caller's (agmm_symm_user_index); 0: the
                                   plan's own input, or none */
    uint32_t plan, run;         /* the plan's number (agmm_plan.number), this run's (its epoch) */
    uint64_t in_serial;         /* the input's symmetric allocation (agmm_symm_buf.serial); 0: none */
    uint64_t in_offset;         /* io.input's offset in it */
    char what[112];             /* "ag_matmul/fused M=64 N=32 K=16 b_layout=col splits=1" */
    char why[RUN_BYTES - 144];  /* the detail of a refusal */
} run_digest;

_Static_assert(sizeof(run_digest) == RUN_BYTES, "a run digest fills RUN_BYTES");

static void fill(const agmm_plan *p, agmm_status mine, run_digest *d)
{
    memset(d, 0, sizeof *d);
    d->status = (int32_t)mine;
    if (mine != AGMM_SUCCESS)
        agmm_format(d->why, sizeof d->why, "%s", agmm_error_detail(agmm_ctx_err(p->ctx)->msg));
    d->plan = p->number;
    d->run = p->epoch + 1;
    d->in_serial = p->in ? p->in->serial : 0;
    d->in_offset = p->in_offset;
    d->buffer = p->in != NULL && p->in != p->input ? agmm_symm_user_index(p->ctx, p->in) : 0;
    size_t used = agmm_format(d->what, sizeof d->what, "%s/%s ", agmm_op_name(p->op), p->backend->name);
    agmm_op_type_of(p->op)->describe(p, d->what + used, sizeof d->what - used);
}

static int same_run(const void *x, const void *y)
{
    const run_digest *a = x, *b = y;
    return a->plan == b->plan && a->run == b->run && a->in_serial == b->in_serial && a->in_offset == b->in_offset;
}

/* "ag_matmul/ce M=64 N=32 K=16 b_layout=col splits=1, run 3 of the plan made at step 12, io.input
 * at byte 1088 of agmm_symmetric_alloc buffer 2". A plan is named by the rank's count of
 * collective calls when it was made, a buffer by its place among the caller's live ones: the same
 * on every rank for one plan or buffer. */
static void say(const run_digest *d, char *buf, size_t len)
{
    char in[80];
    if (d->buffer > 0)
        agmm_format(in, sizeof in, ", io.input at byte %llu of agmm_symmetric_alloc buffer %d",
                    (unsigned long long)d->in_offset, d->buffer);
    else
        in[0] = '\0';
    agmm_format(buf, len, "%s, run %u of the plan made at step %u%s", d->what, d->run, d->plan, in);
}

agmm_status agmm_run_agree(agmm_plan *p, agmm_status mine)
{
    agmm_ctx *ctx = p->ctx;
    agmm_error *err = agmm_ctx_err(ctx);
    const int nranks = agmm_ctx_info(ctx)->nranks;
    run_digest me, *all = calloc((size_t)nranks, sizeof *all);
    if (all == NULL)
        return AGMM_FAIL(err, AGMM_ERR_NO_MEMORY, "run digests of %d ranks: allocation failed", nranks);
    fill(p, mine, &me);
    agmm_status st = agmm_host_exchange(ctx, &me, sizeof me, all);
    /* A rank that refused keeps its own status and error, whatever the exchange gave; the others
     * take the first refusing rank's. */
    if (mine != AGMM_SUCCESS) {
        free(all);
        return mine;
    }
    for (int r = 0; st == AGMM_SUCCESS && r < nranks; r++)
        if (all[r].status != AGMM_SUCCESS)
            st = AGMM_FAIL(err, (agmm_status)all[r].status, "run check: rank %d refused its call: %s", r,
                           all[r].why);
    int first;
    char who[112];
    if (st == AGMM_SUCCESS && agmm_ranks_differing(all, sizeof *all, nranks, same_run, &first, who, sizeof who)) {
        char ours[240], theirs[240];
        say(&all[0], ours, sizeof ours);
        say(&all[first], theirs, sizeof theirs);
        st = AGMM_FAIL(err, AGMM_ERR_INVALID_ARG,
                       "run check: rank 0 runs %s; rank %d runs %s (%s from rank 0): the ranks must run the same "
                       "plans in the same order, io.input at the same place",
                       ours, first, theirs, who);
    }
    free(all);
    return st;
}
