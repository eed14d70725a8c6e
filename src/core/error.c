/* Status strings, error records and the stderr logger. */
#include "error.h"
#include "text.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char *agmm_status_str(agmm_status status)
{
    switch (status) {
    case AGMM_SUCCESS: return "success";
    case AGMM_ERR_INVALID_ARG: return "invalid argument";
    case AGMM_ERR_UNSUPPORTED: return "unsupported";
    case AGMM_ERR_NO_MEMORY: return "out of memory";
    case AGMM_ERR_CUDA: return "CUDA error";
    case AGMM_ERR_NCCL: return "NCCL error";
    case AGMM_ERR_CUBLAS: return "cuBLAS error";
    case AGMM_ERR_TIMEOUT: return "timed out waiting for a peer";
    case AGMM_ERR_VERSION: return "version mismatch";
    case AGMM_ERR_INTERNAL: return "internal error";
    }
    return "unknown status";
}

int agmm_version(void) { return AGMM_VERSION; }

const char *agmm_op_name(agmm_op op)
{
    switch (op) {
    case AGMM_OP_AG_MATMUL: return "ag_matmul";
    case AGMM_OP_ALL_REDUCE: return "all_reduce";
    case AGMM_OP_MATMUL_REDUCE_SCATTER: return "matmul_reduce_scatter";
    case AGMM_OP_MATMUL_ALL_REDUCE: return "matmul_all_reduce";
    case AGMM_OP_ALL_REDUCE_RMSNORM: return "all_reduce_rmsnorm";
    case AGMM_OP_NONE: break;
    }
    return "?";
}

agmm_status agmm_error_set(agmm_error *err, agmm_status status, const char *file, int line,
                           const char *fmt, ...)
{
    if (err == NULL || err->status != AGMM_SUCCESS)
        return status;
    const char *base = strrchr(file, '/');
    int used = snprintf(err->msg, sizeof err->msg, "%s:%d: ", base ? base + 1 : file, line);
    if (used < 0 || (size_t)used >= sizeof err->msg)
        used = 0;
    va_list ap;
    va_start(ap, fmt);
    agmm_vformat(err->msg + used, sizeof err->msg - (size_t)used, fmt, ap); /* a cut message says so */
    va_end(ap);
    err->status = status;
    return status;
}

void agmm_error_clear(agmm_error *err)
{
    err->status = AGMM_SUCCESS;
    err->msg[0] = '\0';
}

const char *agmm_error_detail(const char *msg)
{
    /* agmm_error_set writes "<file>:<line>: " first. */
    const char *colon = strchr(msg, ':');
    if (colon == NULL || colon == msg || strchr(msg, ' ') < colon)
        return msg;
    const char *p = colon + 1;
    while (*p >= '0' && *p <= '9')
        p++;
    return p > colon + 1 && p[0] == ':' && p[1] == ' ' ? p + 2 : msg;
}

void agmm_log(int threshold, int level, int rank, const char *fmt, ...)
{
    if (level > threshold)
        return;
    /* Straight to stderr, however long: no buffer to cut it. The lock keeps the line whole when
     * rank threads log at once. */
    va_list ap;
    va_start(ap, fmt);
    flockfile(stderr);
    fprintf(stderr, "[agmm rank %d] ", rank);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    funlockfile(stderr);
    va_end(ap);
}
