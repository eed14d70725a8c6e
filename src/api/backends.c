/* The public view of the backend table: names, summaries, availability in a world. */
#include <stdio.h>
#include <string.h>

#include "api.h"
#include "../core/text.h"
#include "../core/validate.h"

const char *agmm_backend_name(agmm_op op, int index)
{
    const agmm_backend *b = agmm_backend_at(op, index);
    return b ? b->name : NULL;
}

const char *agmm_backend_summary(agmm_op op, const char *name)
{
    const agmm_backend *b = agmm_backend_find(op, name);
    return b ? b->summary : NULL;
}

void agmm_backend_list(agmm_op op, char *buf, size_t len)
{
    size_t used = 0;
    buf[0] = '\0';
    for (int i = 0; agmm_backend_at(op, i) != NULL && used < len; i++) {
        const char *sep = i == 0 ? "" : agmm_backend_at(op, i + 1) == NULL ? " or " : ", ";
        used += (size_t)snprintf(buf + used, len - used, "%s%s", sep, agmm_backend_at(op, i)->name);
    }
}

const agmm_backend_impl *agmm_backend_usable(const agmm_backend *b, const agmm_world *world, char *why,
                                             size_t why_len)
{
    unsigned caps = agmm_world_caps(world);
    const agmm_backend_impl *impl = agmm_backend_impl_for(b, caps);
    if (impl == NULL) {
        if (why)
            agmm_format(why, why_len, "skipped: %s/%s %s", agmm_op_name(b->op), b->name,
                     !(caps & AGMM_CAP_GPU)                ? "runs on GPUs only, not in the CPU world"
                     : (b->devices & AGMM_DEVICE_GPU) != 0 ? "runs on GPUs, but this agmm was built without CUDA"
                                                           : "runs in the CPU world only");
        return NULL;
    }
    unsigned missing = impl->needs & ~caps;
    if (missing) {
        if (why)
            agmm_format(why, why_len, "skipped: %s/%s needs %s, but %s", agmm_op_name(b->op), b->name,
                     (missing & AGMM_CAP_NCCL) ? "NCCL" : "peer memory between the ranks",
                     agmm_world_lacks(world, missing));
        return NULL;
    }
    return impl;
}

int agmm_backend_is_auto(const char *name) { return name == NULL || strcmp(name, "auto") == 0; }

void agmm_backend_takes(agmm_op op, char *buf, size_t len)
{
    char list[256];
    agmm_backend_list(op, list, sizeof list);
    agmm_format(buf, len, "%s takes auto, %s", agmm_op_name(op), list);
}

agmm_status agmm_backend_limit(agmm_op op, const char *name, agmm_limit what, int64_t *value)
{
    const agmm_op_type *type = agmm_op_type_of(op);
    if (value == NULL || type == NULL || what < AGMM_LIMIT_MAX_RANKS || what > AGMM_LIMIT_CAPTURED_INPUTS)
        return AGMM_ERR_INVALID_ARG;
    const agmm_backend *only = agmm_backend_is_auto(name) ? NULL : agmm_backend_find(op, name);
    if (!agmm_backend_is_auto(name) && only == NULL)
        return AGMM_ERR_INVALID_ARG;
    switch (what) {
    case AGMM_LIMIT_MAX_RANKS: *value = AGMM_MAX_RANKS; return AGMM_SUCCESS;
    case AGMM_LIMIT_MAX_ELEMS: *value = AGMM_MAX_ELEMS; return AGMM_SUCCESS;
    case AGMM_LIMIT_CAPTURED_INPUTS: break;
    default: *value = type->limit ? type->limit(what) : 0; return AGMM_SUCCESS;
    }
    /* A backend's own limit; for auto the strictest, which holds whichever backend it takes. */
    *value = 0;
    for (int i = 0; agmm_backend_at(op, i) != NULL; i++) {
        const agmm_backend *b = agmm_backend_at(op, i);
        if ((only == NULL || b == only) && b->captured_inputs > 0 && (*value == 0 || b->captured_inputs < *value))
            *value = b->captured_inputs;
    }
    return AGMM_SUCCESS;
}

int agmm_backend_available(const agmm_world *world, agmm_op op, const char *name, char *why, size_t why_len)
{
    if (why && why_len)
        why[0] = '\0';
    if (agmm_op_type_of(op) == NULL) {
        if (why)
            agmm_format(why, why_len, "op=%d is not an operation (AGMM_OP_AG_MATMUL .. AGMM_OP_ALL_REDUCE_RMSNORM)",
                        (int)op);
        return 0;
    }
    if (agmm_backend_is_auto(name))
        return 1;
    const agmm_backend *b = agmm_backend_find(op, name);
    if (b == NULL) {
        if (why) {
            char takes[320];
            agmm_backend_takes(op, takes, sizeof takes);
            agmm_format(why, why_len, "unknown backend \"%s\": %s", name, takes);
        }
        return 0;
    }
    return world == NULL || agmm_backend_usable(b, world, why, why_len) != NULL;
}
