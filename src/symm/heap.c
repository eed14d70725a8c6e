/* The symmetric heap's front door: attaching a heap to a context (which implementation serves
 * it), the dispatch to that implementation, and the caller's buffers. */
#include <stdlib.h>
#include <string.h>

#include "symm_impl.h"

#ifndef AGMM_HAVE_CUDA
agmm_status agmm_symm_gpu_choose(agmm_ctx *ctx, agmm_symm_state *state)
{
    return AGMM_FAIL(agmm_ctx_err(ctx), AGMM_ERR_UNSUPPORTED, "this agmm was built without CUDA");
}
void agmm_symm_gpu_release(agmm_ctx *ctx, agmm_symm_state *state) {}
#endif

agmm_status agmm_symm_attach(agmm_ctx *ctx)
{
    agmm_symm_state *state = calloc(1, sizeof *state);
    if (state == NULL)
        return AGMM_FAIL(agmm_ctx_err(ctx), AGMM_ERR_NO_MEMORY, "rank %d: symmetric heap state allocation failed",
                         agmm_ctx_info(ctx)->rank);
    agmm_ctx_set_symm_state(ctx, state);
    agmm_status st = AGMM_SUCCESS;
    const agmm_rank_info *ri = agmm_ctx_info(ctx);
    if (ri->caps & AGMM_CAP_GPU)
        st = agmm_symm_gpu_choose(ctx, state);
    else
        state->impl = ri->processes ? &agmm_symm_memfd : &agmm_symm_host;
    if (st == AGMM_SUCCESS)
        st = agmm_symm_alloc(ctx, AGMM_MAX_RANKS * sizeof(uint32_t), &state->pad);
    if (st != AGMM_SUCCESS) {
        agmm_symm_detach(ctx);
        return st;
    }
    return AGMM_SUCCESS;
}

void agmm_symm_detach(agmm_ctx *ctx)
{
    agmm_symm_state *state = agmm_symm_state_of(ctx);
    if (state == NULL)
        return;
    for (int i = 0; i < state->nuser; i++)
        agmm_symm_free(ctx, state->user[i]);
    free(state->user);
    agmm_symm_free(ctx, state->pad);
    agmm_symm_gpu_release(ctx, state);
    free(state);
    agmm_ctx_set_symm_state(ctx, NULL);
}

agmm_status agmm_symm_user_alloc(agmm_ctx *ctx, size_t bytes, agmm_symm_buf **out)
{
    agmm_symm_state *state = agmm_symm_state_of(ctx);
    if (state->nuser == state->user_cap) {
        int cap = state->user_cap ? 2 * state->user_cap : 8;
        agmm_symm_buf **grown = realloc(state->user, (size_t)cap * sizeof *grown);
        if (grown == NULL)
            return AGMM_FAIL(agmm_ctx_err(ctx), AGMM_ERR_NO_MEMORY, "rank %d: symmetric buffer list allocation failed",
                             agmm_ctx_info(ctx)->rank);
        state->user = grown;
        state->user_cap = cap;
    }
    agmm_status st = agmm_symm_alloc(ctx, bytes, out);
    if (st == AGMM_SUCCESS)
        state->user[state->nuser++] = *out;
    return st;
}

const agmm_symm_buf *agmm_symm_user_find(const agmm_ctx *ctx, const void *ptr, size_t bytes)
{
    const agmm_symm_state *state = agmm_symm_state_of(ctx);
    uintptr_t p = (uintptr_t)ptr;
    for (int i = 0; i < state->nuser; i++) {
        uintptr_t base = (uintptr_t)state->user[i]->local;
        if (p >= base && p - base <= state->user[i]->bytes && bytes <= state->user[i]->bytes - (p - base))
            return state->user[i];
    }
    return NULL;
}

int agmm_symm_user_index(const agmm_ctx *ctx, const agmm_symm_buf *buf)
{
    const agmm_symm_state *state = agmm_symm_state_of(ctx);
    for (int i = 0; i < state->nuser; i++)
        if (state->user[i] == buf)
            return i + 1;
    return 0;
}

agmm_status agmm_symm_user_free(agmm_ctx *ctx, void *ptr)
{
    agmm_symm_state *state = agmm_symm_state_of(ctx);
    for (int i = 0; i < state->nuser; i++) {
        if (state->user[i]->local != ptr)
            continue;
        agmm_symm_buf *buf = state->user[i];
        memmove(state->user + i, state->user + i + 1, (size_t)(state->nuser - i - 1) * sizeof *state->user);
        state->nuser--;
        agmm_symm_free(ctx, buf);
        return AGMM_SUCCESS;
    }
    return AGMM_FAIL(agmm_ctx_err(ctx), AGMM_ERR_INVALID_ARG,
                     "ptr=%p: not the start of a buffer from agmm_symmetric_alloc on rank %d (or freed already)", ptr,
                     agmm_ctx_info(ctx)->rank);
}

const char *agmm_symm_kind(const agmm_ctx *ctx)
{
    const agmm_symm_state *state = agmm_symm_state_of(ctx);
    return state == NULL || state->impl == NULL ? "none" : state->impl->name;
}

agmm_status agmm_symm_alloc(agmm_ctx *ctx, size_t bytes, agmm_symm_buf **out)
{
    *out = NULL;
    if (bytes == 0)
        return AGMM_FAIL(agmm_ctx_err(ctx), AGMM_ERR_INVALID_ARG, "symmetric allocation of 0 bytes");
    agmm_symm_buf *buf = calloc(1, sizeof *buf);
    if (buf == NULL)
        return AGMM_FAIL(agmm_ctx_err(ctx), AGMM_ERR_NO_MEMORY, "symmetric buffer record allocation failed");
    buf->bytes = bytes;
    agmm_symm_state *state = agmm_symm_state_of(ctx);
    agmm_status st = state->impl->alloc(ctx, buf);
    if (st != AGMM_SUCCESS) {
        free(buf);
        return st;
    }
    buf->serial = ++state->allocs;
    *out = buf;
    return AGMM_SUCCESS;
}

void agmm_symm_free(agmm_ctx *ctx, agmm_symm_buf *buf)
{
    if (buf == NULL)
        return;
    agmm_symm_state_of(ctx)->impl->free(ctx, buf);
    free(buf);
}
