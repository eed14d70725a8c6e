/* The table of backends: one line per backend, the single list the library, agmm-bench, the docs
 * and the tests take backends from. Order within an operation is the order they are listed in
 * (agmm_backend_name, the benchmark's columns). A new backend is its own file plus one line here. */
#include <string.h>

#include "backend.h"

extern const agmm_backend agmm_backend_ag_matmul_nccl;
extern const agmm_backend agmm_backend_ag_matmul_ce;
extern const agmm_backend agmm_backend_ag_matmul_fused;
extern const agmm_backend agmm_backend_ag_matmul_pull;
extern const agmm_backend agmm_backend_all_reduce_nccl;
extern const agmm_backend agmm_backend_all_reduce_nccl_plain;
extern const agmm_backend agmm_backend_all_reduce_one_shot;
extern const agmm_backend agmm_backend_all_reduce_two_shot;
extern const agmm_backend agmm_backend_matmul_reduce_scatter_nccl;
extern const agmm_backend agmm_backend_matmul_reduce_scatter_ce;
extern const agmm_backend agmm_backend_matmul_reduce_scatter_one_shot;
extern const agmm_backend agmm_backend_matmul_all_reduce_nccl;
extern const agmm_backend agmm_backend_matmul_all_reduce_one_shot;
extern const agmm_backend agmm_backend_matmul_all_reduce_two_shot;
extern const agmm_backend agmm_backend_all_reduce_rmsnorm_nccl;
extern const agmm_backend agmm_backend_all_reduce_rmsnorm_one_shot;
extern const agmm_backend agmm_backend_all_reduce_rmsnorm_two_shot;

static const agmm_backend *const table[] = {
    &agmm_backend_ag_matmul_nccl,
    &agmm_backend_ag_matmul_ce,
    &agmm_backend_ag_matmul_fused,
    &agmm_backend_ag_matmul_pull,
    &agmm_backend_all_reduce_nccl,
    &agmm_backend_all_reduce_nccl_plain,
    &agmm_backend_all_reduce_one_shot,
    &agmm_backend_all_reduce_two_shot,
    &agmm_backend_matmul_reduce_scatter_nccl,
    &agmm_backend_matmul_reduce_scatter_ce,
    &agmm_backend_matmul_reduce_scatter_one_shot,
    &agmm_backend_matmul_all_reduce_nccl,
    &agmm_backend_matmul_all_reduce_one_shot,
    &agmm_backend_matmul_all_reduce_two_shot,
    &agmm_backend_all_reduce_rmsnorm_nccl,
    &agmm_backend_all_reduce_rmsnorm_one_shot,
    &agmm_backend_all_reduce_rmsnorm_two_shot,
};

#define TABLE_SIZE ((int)(sizeof table / sizeof table[0]))

const agmm_backend *agmm_backend_entry(int index)
{
    return index >= 0 && index < TABLE_SIZE ? table[index] : NULL;
}

const agmm_backend *agmm_backend_at(agmm_op op, int index)
{
    for (int i = 0; i < TABLE_SIZE && index >= 0; i++)
        if (table[i]->op == op && index-- == 0)
            return table[i];
    return NULL;
}

const agmm_backend *agmm_backend_find(agmm_op op, const char *name)
{
    for (int i = 0; name != NULL && i < TABLE_SIZE; i++)
        if (table[i]->op == op && strcmp(table[i]->name, name) == 0)
            return table[i];
    return NULL;
}
