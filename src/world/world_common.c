/* Worlds and rank contexts: creation of one-process worlds, the world's public queries, the
 * tagged front door of the host collectives (with the world's "unusable" record and agreement),
 * and the rank part of a context. GPU specifics are delegated to world_gpu.c, the host
 * rendezvous to host_threads.c / host_procs.c / host_nccl.c, process worlds to world_join.c. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "world_impl.h"
#include "../core/knobs.h"
#include "../core/text.h"
#include "../core/validate.h"

#ifndef AGMM_HAVE_CUDA
agmm_status agmm_world_gpu_create(agmm_world *world, const agmm_world_config *config, agmm_error *err)
{
    world->no_gpu_visible = 1;
    return AGMM_FAIL(err, AGMM_ERR_UNSUPPORTED, "no GPU visible: this agmm was built without CUDA");
}
void agmm_world_gpu_destroy(agmm_world *world) {}
agmm_status agmm_gpu_rank_create(agmm_ctx *ctx)
{
    return AGMM_FAIL(&ctx->err, AGMM_ERR_UNSUPPORTED, "this agmm was built without CUDA");
}
void agmm_gpu_rank_destroy(agmm_ctx *ctx) {}
agmm_status agmm_gpu_rank_sync(agmm_ctx *ctx) { return AGMM_SUCCESS; }
int agmm_world_gpu_count(void) { return 0; }
agmm_status agmm_world_gpu_join_device(agmm_world *world, int device, agmm_gpu_join_info *info, char *text,
                                       size_t text_len, agmm_error *err)
{
    world->no_gpu_visible = 1;
    return AGMM_FAIL(err, AGMM_ERR_UNSUPPORTED, "no GPU visible: this agmm was built without CUDA");
}
agmm_status agmm_world_gpu_join_nccl(agmm_world *world, const void *nccl_id, void *comm, int allow_nvls, char *text,
                                     size_t text_len, agmm_error *err)
{
    return AGMM_FAIL(err, AGMM_ERR_UNSUPPORTED, "this agmm was built without CUDA");
}
agmm_status agmm_world_gpu_nccl_id(void *out, size_t len, agmm_error *err)
{
    return AGMM_FAIL(err, AGMM_ERR_UNSUPPORTED, "this agmm was built without CUDA (no NCCL)");
}
void agmm_world_gpu_peer_probe(const agmm_world *world, const agmm_gpu_join_info *all, char *why, size_t why_len) {}
void *agmm_world_gpu_comm(const agmm_world *world) { return NULL; }
agmm_status agmm_host_nccl_init(agmm_world *world, agmm_error *err)
{
    return AGMM_FAIL(err, AGMM_ERR_UNSUPPORTED, "ranks on several hosts meet through NCCL: this agmm was built without CUDA");
}
#endif

static void copy_err(const agmm_error *err, char *buf, size_t len)
{
    if (buf && len)
        agmm_format(buf, len, "%s", err->msg);
}

double agmm_world_default_timeout_s(void)
{
    agmm_error ignored;
    agmm_knob_value v;
    agmm_knob_read(AGMM_KNOB_TIMEOUT_S, &v, &ignored);
    return v.number;
}

agmm_status agmm_world_check_timeout(double timeout_s, agmm_error *err)
{
    const agmm_knob *k = agmm_knob_at(AGMM_KNOB_TIMEOUT_S);
    if (timeout_s == 0 || (timeout_s >= k->min && timeout_s <= k->max))
        return AGMM_SUCCESS;
    return AGMM_FAIL(err, AGMM_ERR_INVALID_ARG, "timeout_s=%g: must be 0 (AGMM_TIMEOUT_S, unset %s s) or %g..%g seconds",
                     timeout_s, k->def, k->min, k->max);
}

agmm_status agmm_world_alloc(double timeout_s, agmm_world **out, agmm_error *err)
{
    *out = NULL;
    /* Every knob is read here first, so a bad value fails the world at once, naming it. */
    agmm_knob_value timeout, check;
    agmm_status st = agmm_knobs_check(err);
    if (st == AGMM_SUCCESS)
        st = agmm_knob_read(AGMM_KNOB_TIMEOUT_S, &timeout, err);
    if (st == AGMM_SUCCESS)
        st = agmm_knob_read(AGMM_KNOB_CHECK_RUNS, &check, err);
    if (st != AGMM_SUCCESS)
        return st;
    agmm_world *w = calloc(1, sizeof *w);
    if (w == NULL)
        return AGMM_FAIL(err, AGMM_ERR_NO_MEMORY, "world allocation failed");
    w->timeout_s = timeout_s > 0 ? timeout_s : timeout.number;
    w->log_level = agmm_log_level_from_env();
    w->check_runs = check.choice == 1;
    pthread_mutex_init(&w->broken_mu, NULL);
    *out = w;
    return AGMM_SUCCESS;
}

_Static_assert(sizeof(((agmm_world *)0)->describe) >= AGMM_ERROR_LEN + 100,
               "the CPU world's banner holds a whole error message as its reason");

static void make_cpu_world(agmm_world *w, int nranks, const char *why)
{
    w->kind = AGMM_WORLD_CPU;
    w->nranks = w->nlocal = nranks ? nranks : 4;
    for (int i = 0; i < w->nlocal; i++)
        w->device_of[i] = -1;
    w->caps = AGMM_CAP_PEER_MEMORY;
    snprintf(w->lacks_nccl, sizeof w->lacks_nccl, "the CPU world has no NCCL");
    /* The reason is an error record's message, which the banner has room for whole (asserted above);
     * agmm_format would mark a cut anyway. */
    agmm_format(w->describe, sizeof w->describe,
                "device: CPU (%s); %d ranks as threads, host memory as symmetric memory", why, w->nranks);
}

agmm_status agmm_world_create(agmm_world **out, const agmm_world_config *config, char *errbuf, size_t errbuf_len)
{
    agmm_error err = {0};
    agmm_status st = AGMM_SUCCESS;
    if (out == NULL) {
        st = AGMM_FAIL(&err, AGMM_ERR_INVALID_ARG, "world is NULL");
        copy_err(&err, errbuf, errbuf_len);
        return st;
    }
    *out = NULL;
    agmm_world_config cfg = {0};
    if (config)
        cfg = *config;
    if (cfg.kind < AGMM_WORLD_AUTO || cfg.kind > AGMM_WORLD_EMULATED)
        st = AGMM_FAIL(&err, AGMM_ERR_INVALID_ARG, "kind=%d: must be AGMM_WORLD_AUTO, _CPU, _GPU or _EMULATED",
                       (int)cfg.kind);
    else if (cfg.nranks < 0 || cfg.nranks > AGMM_MAX_RANKS)
        st = AGMM_FAIL(&err, AGMM_ERR_INVALID_ARG, "nranks=%d: must be 0 (automatic) or 1..%d", cfg.nranks,
                       AGMM_MAX_RANKS);
    else if ((st = agmm_world_check_timeout(cfg.timeout_s, &err)) == AGMM_SUCCESS)
        st = agmm_check_reserved(cfg.reserved, sizeof cfg.reserved, "world config", &err);
    if (st != AGMM_SUCCESS) {
        copy_err(&err, errbuf, errbuf_len);
        return st;
    }
    agmm_world *w = NULL;
    st = agmm_world_alloc(cfg.timeout_s, &w, &err);
    if (st != AGMM_SUCCESS) {
        copy_err(&err, errbuf, errbuf_len);
        return st;
    }

    if (cfg.kind == AGMM_WORLD_CPU) {
        make_cpu_world(w, cfg.nranks, "no GPU used");
    } else {
        st = agmm_world_gpu_create(w, &cfg, &err);
        /* AUTO takes the CPU only where no GPU is visible at all; a GPU that is there but cannot
         * be used (a driver, NCCL or version problem) is the caller's to know about. */
        if (st != AGMM_SUCCESS && cfg.kind == AGMM_WORLD_AUTO && w->no_gpu_visible) {
            /* The banner gives the reason without the file:line prefix of the record. */
            const char *why = strstr(err.msg, ": ");
            char reason[AGMM_ERROR_LEN];
            snprintf(reason, sizeof reason, "%s", why ? why + 2 : err.msg);
            agmm_error_clear(&err);
            st = AGMM_SUCCESS;
            make_cpu_world(w, cfg.nranks, reason);
        }
    }
    if (st == AGMM_SUCCESS)
        st = agmm_host_threads_init(w, &err);
    if (st != AGMM_SUCCESS) {
        copy_err(&err, errbuf, errbuf_len);
        agmm_world_destroy(w);
        return st;
    }
    *out = w;
    return AGMM_SUCCESS;
}

void agmm_world_destroy(agmm_world *w)
{
    if (w == NULL)
        return;
    if (w->gpu)
        agmm_world_gpu_destroy(w);
    if (w->host)
        w->host->fini(w);
    pthread_mutex_destroy(&w->broken_mu);
    free(w);
}

agmm_world_kind agmm_world_kind_of(const agmm_world *w) { return w->kind; }
int agmm_world_nranks(const agmm_world *w) { return w->nranks; }
int agmm_world_local_ranks(const agmm_world *w) { return w->nlocal; }
int agmm_world_first_rank(const agmm_world *w) { return w->first_rank; }
const char *agmm_world_describe(const agmm_world *w) { return w ? w->describe : "(no world)"; }
unsigned agmm_world_caps(const agmm_world *w) { return w->caps; }

const char *agmm_world_lacks(const agmm_world *w, unsigned cap)
{
    if ((w->caps & cap) == cap)
        return "";
    if ((cap & AGMM_CAP_GPU) && !(w->caps & AGMM_CAP_GPU))
        return "it runs on GPUs only";
    if ((cap & AGMM_CAP_NCCL) && !(w->caps & AGMM_CAP_NCCL))
        return w->lacks_nccl;
    return w->lacks_peer;
}

/* Every host collective numbers itself (ctx->host_seq) with its kind in the low bit. Ranks that
 * skipped or repeated one (an error path, a late rank after a timeout) would otherwise pair an
 * exchange with some other call and hand back stale data: the implementation compares tags. */
static uint32_t next_tag(agmm_ctx *ctx, int exchange)
{
    return (++ctx->host_seq << 1) | (uint32_t)exchange;
}

void agmm_world_break(agmm_world *w, const agmm_error *why)
{
    pthread_mutex_lock(&w->broken_mu);
    int first = w->broken.status == AGMM_SUCCESS;
    if (first)
        w->broken = *why;
    pthread_mutex_unlock(&w->broken_mu);
    if (first && w->host && w->host->abandon)
        w->host->abandon(w, why);
}

/* AGMM_SUCCESS while the world is usable; else the reason, recorded in the rank's error. */
static agmm_status usable(agmm_ctx *ctx)
{
    agmm_world *w = ctx->world;
    pthread_mutex_lock(&w->broken_mu);
    agmm_status st = w->broken.status;
    if (st != AGMM_SUCCESS)
        AGMM_FAIL(&ctx->err, st, "rank %d: the world is unusable since a collective step failed: %s", ctx->info.rank,
                  agmm_error_detail(w->broken.msg));
    pthread_mutex_unlock(&w->broken_mu);
    return st;
}

/* After a host collective: a failure leaves the ranks out of step, so the world is done. */
static agmm_status settle(agmm_ctx *ctx, agmm_status st)
{
    if (st != AGMM_SUCCESS)
        agmm_world_break(ctx->world, &ctx->err);
    return st;
}

agmm_status agmm_host_barrier(agmm_ctx *ctx)
{
    agmm_status st = usable(ctx);
    if (st != AGMM_SUCCESS)
        return st;
    return settle(ctx, ctx->world->host->barrier(ctx, next_tag(ctx, 0)));
}

agmm_status agmm_host_exchange(agmm_ctx *ctx, const void *mine, size_t bytes, void *all)
{
    if (bytes > AGMM_HOST_SLOT_BYTES)
        return AGMM_FAIL(&ctx->err, AGMM_ERR_INVALID_ARG, "bytes=%zu: a host exchange carries at most %d per rank",
                         bytes, AGMM_HOST_SLOT_BYTES);
    agmm_status st = usable(ctx);
    if (st != AGMM_SUCCESS)
        return st;
    return settle(ctx, ctx->world->host->exchange(ctx, next_tag(ctx, 1), mine, bytes, all));
}

agmm_status agmm_host_exchange_fds(agmm_ctx *ctx, int mine, int *all)
{
    if (ctx->world->host->exchange_fds == NULL)
        return AGMM_FAIL(&ctx->err, AGMM_ERR_UNSUPPORTED,
                         "rank %d: file descriptors pass only between processes of one host", ctx->info.rank);
    agmm_status st = usable(ctx);
    if (st != AGMM_SUCCESS)
        return st;
    return settle(ctx, ctx->world->host->exchange_fds(ctx, next_tag(ctx, 1), mine, all));
}

agmm_status agmm_ctx_busy_begin(agmm_ctx *ctx, const char *what)
{
    if (ctx == NULL)
        return AGMM_ERR_INVALID_ARG;
    /* Only the outermost spell is shown: the peers need to know that it is busy, not how deeply. */
    if (ctx->busy_depth++ == 0 && ctx->world->host->busy)
        ctx->world->host->busy(ctx, 1, what ? what : "");
    return AGMM_SUCCESS;
}

agmm_status agmm_ctx_busy_end(agmm_ctx *ctx)
{
    if (ctx == NULL)
        return AGMM_ERR_INVALID_ARG;
    if (ctx->busy_depth == 0)
        return AGMM_FAIL(&ctx->err, AGMM_ERR_INVALID_ARG,
                         "rank %d: agmm_ctx_busy_end without an agmm_ctx_busy_begin", ctx->info.rank);
    if (--ctx->busy_depth == 0 && ctx->world->host->busy)
        ctx->world->host->busy(ctx, 0, NULL);
    return AGMM_SUCCESS;
}

int agmm_world_peer_gone(const agmm_ctx *ctx, int rank, char *why, size_t len)
{
    const agmm_host_ops *host = ctx->world->host;
    return host != NULL && host->peer_gone != NULL && host->peer_gone(ctx->world, rank, why, len);
}

void agmm_world_note_gone(agmm_ctx *ctx)
{
    const agmm_host_ops *host = ctx->world->host;
    if (ctx->err.status != AGMM_ERR_TIMEOUT || host == NULL || host->peer_gone == NULL)
        return;
    char facts[AGMM_ERROR_LEN] = "";
    size_t used = 0;
    for (int p = 0; p < ctx->info.nranks; p++) {
        char why[160];
        if (host->peer_gone(ctx->world, p, why, sizeof why))
            used += agmm_format(facts + used, sizeof facts - used, "; %s", why);
    }
    size_t have = strlen(ctx->err.msg);
    if (used)
        agmm_format(ctx->err.msg + have, sizeof ctx->err.msg - have, "%s", facts);
}

agmm_status agmm_host_agree(agmm_ctx *ctx, agmm_status mine)
{
    typedef struct {
        int32_t status;
        char msg[AGMM_ERROR_LEN];
    } verdict;
    verdict me = {.status = mine}, all[AGMM_MAX_RANKS];
    if (mine != AGMM_SUCCESS)
        snprintf(me.msg, sizeof me.msg, "%s", ctx->err.msg);
    agmm_status st = agmm_host_exchange(ctx, &me, sizeof me, all);
    if (st != AGMM_SUCCESS || mine != AGMM_SUCCESS)
        return mine != AGMM_SUCCESS ? mine : st;
    for (int r = 0; r < ctx->info.nranks; r++)
        if (all[r].status != AGMM_SUCCESS)
            return AGMM_FAIL(&ctx->err, (agmm_status)all[r].status, "rank %d failed: %s", r,
                             agmm_error_detail(all[r].msg));
    return AGMM_SUCCESS;
}

agmm_status agmm_rank_create(agmm_ctx **out, agmm_world *w, int rank)
{
    if (out == NULL || w == NULL)
        return AGMM_ERR_INVALID_ARG;
    *out = NULL;
    if (rank < w->first_rank || rank >= w->first_rank + w->nlocal)
        return AGMM_ERR_INVALID_ARG;
    agmm_ctx *ctx = calloc(1, sizeof *ctx);
    if (ctx == NULL)
        return AGMM_ERR_NO_MEMORY;
    ctx->world = w;
    agmm_rank_info *ri = &ctx->info;
    ri->kind = w->kind;
    ri->rank = rank;
    ri->nranks = w->nranks;
    ri->local_rank = rank - w->first_rank;
    ri->device = w->device_of[ri->local_rank];
    ri->ranks_on_device = w->processes ? w->ranks_on_device : 0;
    for (int i = 0; i < w->nlocal && !w->processes; i++)
        ri->ranks_on_device += w->device_of[i] == ri->device;
    ri->ranks_on_host = w->processes ? w->ranks_on_host : w->nlocal;
    ri->processes = w->processes;
    ri->timeout_s = w->timeout_s;
    ri->caps = w->caps;
    ri->log_level = w->log_level;
    ri->check_runs = w->check_runs;
    agmm_status st = AGMM_SUCCESS;
    if (w->kind != AGMM_WORLD_CPU)
        st = agmm_gpu_rank_create(ctx);
    /* Every rank learns whether every other has its context, before any goes on to meet them. */
    st = agmm_host_agree(ctx, st);
    if (st != AGMM_SUCCESS) {
        agmm_log(w->log_level, AGMM_LOG_ERROR, rank, "context creation failed: %s", ctx->err.msg);
        agmm_rank_destroy(ctx);
        return st;
    }
    *out = ctx;
    return AGMM_SUCCESS;
}

void agmm_rank_destroy(agmm_ctx *ctx)
{
    if (ctx == NULL)
        return;
    /* A spell left open ends with its context: the busy mark lives in the world, which outlives
     * it, and no later context could end it (peers would wait for this rank without a bound). */
    if (ctx->busy_depth > 0 && ctx->world->host->busy)
        ctx->world->host->busy(ctx, 0, NULL);
    if (ctx->gpu)
        agmm_gpu_rank_destroy(ctx);
    free(ctx);
}

const agmm_rank_info *agmm_ctx_info(const agmm_ctx *ctx) { return &ctx->info; }
const agmm_world *agmm_ctx_world(const agmm_ctx *ctx) { return ctx->world; }
agmm_error *agmm_ctx_err(agmm_ctx *ctx) { return &ctx->err; }
agmm_error *agmm_ctx_out_of_step(agmm_ctx *ctx) { return &ctx->out_of_step; }
void *agmm_ctx_symm_state(const agmm_ctx *ctx) { return ctx->symm; }
void agmm_ctx_set_symm_state(agmm_ctx *ctx, void *state) { ctx->symm = state; }
uint32_t agmm_ctx_host_seq(const agmm_ctx *ctx) { return ctx->host_seq; }
void *agmm_ctx_api_state(const agmm_ctx *ctx) { return ctx->api; }
void agmm_ctx_set_api_state(agmm_ctx *ctx, void *state) { ctx->api = state; }

int agmm_ctx_rank(const agmm_ctx *ctx) { return ctx ? ctx->info.rank : -1; }
int agmm_ctx_device(const agmm_ctx *ctx) { return ctx ? ctx->info.device : -1; }
const char *agmm_last_error(const agmm_ctx *ctx) { return ctx ? ctx->err.msg : "(no context)"; }

agmm_status agmm_ctx_sync(agmm_ctx *ctx)
{
    if (ctx == NULL)
        return AGMM_ERR_INVALID_ARG;
    agmm_error_clear(&ctx->err);
    if (ctx->gpu == NULL)
        return AGMM_SUCCESS;
    return agmm_gpu_rank_sync(ctx);
}
