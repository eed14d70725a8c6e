/* Symmetric memory of ranks that are threads of one process (symm_impl.h, "Ownership"): each
 * rank's buffer carries a count of the ranks that may still touch it, starting at W; every rank
 * drops one on every buffer of an allocation when it frees it, and the last one out releases
 * the buffer. A rank that arrives late, after its peers gave up on a barrier and freed, still
 * finds every buffer alive. And the host-memory implementation of the CPU world on top of it. */
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "symm_impl.h"

typedef struct {
    atomic_int refs;
    void *mem;
    int device;
    void (*release)(void *mem, int device);
} share;

typedef struct {
    int nranks;
    share *of[AGMM_MAX_RANKS];
} share_set;

static void drop(share *s)
{
    /* acq_rel: every access a rank made before its drop happens before the release. */
    if (s != NULL && atomic_fetch_sub_explicit(&s->refs, 1, memory_order_acq_rel) == 1) {
        s->release(s->mem, s->device);
        free(s);
    }
}

agmm_status agmm_symm_share(agmm_ctx *ctx, agmm_symm_buf *buf, void *mem, agmm_status mine,
                            void (*release)(void *mem, int device), int device)
{
    const int nranks = agmm_ctx_info(ctx)->nranks;
    share_set *set = calloc(1, sizeof *set);
    share *me = mem != NULL ? calloc(1, sizeof *me) : NULL;
    if (mem != NULL && (set == NULL || me == NULL)) {
        mine = AGMM_FAIL(agmm_ctx_err(ctx), AGMM_ERR_NO_MEMORY, "rank %d: symmetric buffer record allocation failed",
                         agmm_ctx_info(ctx)->rank);
        release(mem, device);
        free(me);
        me = NULL;
    } else if (me != NULL) {
        atomic_init(&me->refs, nranks);
        me->mem = mem;
        me->device = device;
        me->release = release;
    }
    share *all[AGMM_MAX_RANKS];
    agmm_status st = agmm_host_exchange(ctx, &me, sizeof me, all);
    if (st != AGMM_SUCCESS) {
        /* Among threads an exchange completes for all its ranks or for none (host_threads.c: a
         * meeting is complete only with every rank counted), and a rank whose exchange failed
         * keeps nothing from it: no peer holds our buffer, so it goes. */
        if (me != NULL) {
            release(mem, device);
            free(me);
        }
        free(set);
        return st;
    }
    st = agmm_host_agree(ctx, mine);
    if (st != AGMM_SUCCESS) {
        for (int r = 0; r < nranks; r++)
            drop(all[r]);
        free(set);
        return st;
    }
    set->nranks = nranks;
    for (int r = 0; r < nranks; r++) {
        set->of[r] = all[r];
        buf->peer[r] = all[r]->mem;
    }
    buf->local = buf->peer[agmm_ctx_info(ctx)->rank];
    buf->impl = set;
    return AGMM_SUCCESS;
}

void agmm_symm_unshare(agmm_symm_buf *buf)
{
    share_set *set = buf->impl;
    if (set == NULL)
        return;
    for (int r = 0; r < set->nranks; r++)
        drop(set->of[r]);
    free(set);
    buf->impl = NULL;
}

/* ---- host memory (the CPU world's threads) ---- */

static void host_release(void *mem, int device) { free(mem); }

static agmm_status host_alloc(agmm_ctx *ctx, agmm_symm_buf *buf)
{
    /* 64-byte alignment: the CPU kernels use it for vector-friendly rows, and it keeps flags
     * of different buffers off shared cache lines. */
    size_t rounded = (buf->bytes + 63) / 64 * 64;
    void *mem = aligned_alloc(64, rounded);
    agmm_status mine = AGMM_SUCCESS;
    if (mem == NULL)
        mine = AGMM_FAIL(agmm_ctx_err(ctx), AGMM_ERR_NO_MEMORY,
                         "rank %d: host symmetric allocation of %zu bytes failed", agmm_ctx_info(ctx)->rank, buf->bytes);
    else
        memset(mem, 0, rounded);
    return agmm_symm_share(ctx, buf, mem, mine, host_release, -1);
}

static void host_free(agmm_ctx *ctx, agmm_symm_buf *buf) { agmm_symm_unshare(buf); }

const agmm_symm_impl agmm_symm_host = {"host memory", host_alloc, host_free};
