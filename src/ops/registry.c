/* The backends this build has, and how AUTO is resolved. A new backend is a new file under
 * src/ops (GPU) or src/cpu (CPU world) plus one line here. */
#include "backend.h"

#include <string.h>

/* CPU world (src/cpu). */
extern const agmm_backend_ops agmm_cpu_ag_matmul_nccl_ops;
extern const agmm_backend_ops agmm_cpu_ag_matmul_ce_ops;
extern const agmm_backend_ops agmm_cpu_ag_matmul_fused_ops;
extern const agmm_backend_ops agmm_cpu_all_reduce_nccl_ops;
extern const agmm_backend_ops agmm_cpu_all_reduce_one_shot_ops;
extern const agmm_backend_ops agmm_cpu_all_reduce_two_shot_ops;

#ifdef AGMM_HAVE_CUDA
/* GPUs (src/ops). */
extern const agmm_backend_ops agmm_gpu_ag_matmul_nccl_ops;
extern const agmm_backend_ops agmm_gpu_ag_matmul_ce_ops;
extern const agmm_backend_ops agmm_gpu_ag_matmul_fused_ops;
extern const agmm_backend_ops agmm_gpu_all_reduce_nccl_ops;
extern const agmm_backend_ops agmm_gpu_all_reduce_nccl_plain_ops;
extern const agmm_backend_ops agmm_gpu_all_reduce_one_shot_ops;
extern const agmm_backend_ops agmm_gpu_all_reduce_two_shot_ops;
#endif

static const agmm_backend_ops *const all_backends[] = {
    &agmm_cpu_ag_matmul_nccl_ops,
    &agmm_cpu_ag_matmul_ce_ops,
    &agmm_cpu_ag_matmul_fused_ops,
    &agmm_cpu_all_reduce_nccl_ops,
    &agmm_cpu_all_reduce_one_shot_ops,
    &agmm_cpu_all_reduce_two_shot_ops,
#ifdef AGMM_HAVE_CUDA
    &agmm_gpu_ag_matmul_nccl_ops,
    &agmm_gpu_ag_matmul_ce_ops,
    &agmm_gpu_ag_matmul_fused_ops,
    &agmm_gpu_all_reduce_nccl_ops,
    &agmm_gpu_all_reduce_nccl_plain_ops,
    &agmm_gpu_all_reduce_one_shot_ops,
    &agmm_gpu_all_reduce_two_shot_ops,
#endif
};

const agmm_backend_ops *agmm_backend_find(agmm_op op, agmm_backend id, int cpu_world)
{
    for (size_t i = 0; i < sizeof all_backends / sizeof all_backends[0]; i++) {
        const agmm_backend_ops *b = all_backends[i];
        if (b->op == op && b->id == id && b->cpu == cpu_world)
            return b;
    }
    return NULL;
}

int agmm_backend_available(const agmm_world *world, agmm_backend backend, int all_reduce)
{
    if (backend == AGMM_BACKEND_AUTO)
        return 1;
    return agmm_backend_find(all_reduce ? AGMM_OP_ALL_REDUCE : AGMM_OP_AG_MATMUL, backend,
                             world->kind == AGMM_WORLD_CPU) != NULL;
}

static const char *const backend_names[AGMM_BACKEND_COUNT] = {
    [AGMM_BACKEND_AUTO] = "auto",         [AGMM_BACKEND_NCCL] = "nccl",
    [AGMM_BACKEND_CE] = "ce",             [AGMM_BACKEND_FUSED] = "fused",
    [AGMM_BACKEND_ONE_SHOT] = "one_shot", [AGMM_BACKEND_TWO_SHOT] = "two_shot",
    [AGMM_BACKEND_NCCL_PLAIN] = "nccl_plain",
};

const char *agmm_backend_name(agmm_backend backend)
{
    if ((int)backend < 0 || backend >= AGMM_BACKEND_COUNT)
        return "?";
    return backend_names[backend];
}

agmm_status agmm_backend_parse(const char *name, agmm_backend *backend)
{
    for (int i = 0; i < AGMM_BACKEND_COUNT; i++) {
        if (name && strcmp(name, backend_names[i]) == 0) {
            *backend = (agmm_backend)i;
            return AGMM_SUCCESS;
        }
    }
    return AGMM_ERR_INVALID_ARG;
}
