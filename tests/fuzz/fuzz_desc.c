/* libFuzzer target: the library's checks of what callers pass in, without a GPU: operation
 * descriptors (agmm_ext_check_ag_matmul / _all_reduce / _all_reduce_rmsnorm with backend names,
 * _matmul_reduce), world configs (agmm_world_create: the CPU world, or a refusal), fault specs
 * (AGMM_FAULT's grammar) and the message formatter that must never cut silently. The first byte
 * picks which; the rest fills the struct's bytes, then a string. Built and run by tests/fuzz/run.sh. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "agmm.h"
#include "api/agmm_ext.h"
#include "core/fault.h"

typedef struct {
    const uint8_t *p;
    size_t left;
} reader;

/* Fills `bytes` from the input (zeros once it is used up). */
static void take(reader *r, void *out, size_t bytes)
{
    size_t n = bytes < r->left ? bytes : r->left;
    memset(out, 0, bytes);
    memcpy(out, r->p, n);
    r->p += n, r->left -= n;
}

/* The rest of the input as a NUL-terminated string (the caller frees it). */
static char *rest(reader *r)
{
    char *s = malloc(r->left + 1);
    if (s == NULL)
        abort();
    memcpy(s, r->p, r->left);
    s[r->left] = '\0';
    return s;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size == 0)
        return 0;
    reader r = {data + 1, size - 1};
    char why[AGMM_ERROR_LEN];
    switch (data[0] % 7) {
    case 0: { /* ag_matmul descriptor for a world of nranks */
        int32_t nranks;
        take(&r, &nranks, sizeof nranks);
        agmm_ag_matmul_desc d;
        take(&r, &d, sizeof d);
        char *name = rest(&r);
        d.backend = name[0] ? name : NULL;
        if (nranks >= 1 && nranks <= AGMM_MAX_RANKS)
            agmm_ext_check_ag_matmul(&d, nranks, why, sizeof why);
        free(name);
        break;
    }
    case 1: {
        agmm_all_reduce_desc d;
        take(&r, &d, sizeof d);
        char *name = rest(&r);
        d.backend = name[0] ? name : NULL;
        agmm_ext_check_all_reduce(&d, why, sizeof why);
        free(name);
        break;
    }
    case 6: { /* an all_reduce_rmsnorm descriptor */
        agmm_all_reduce_rmsnorm_desc d;
        take(&r, &d, sizeof d);
        char *name = rest(&r);
        d.backend = name[0] ? name : NULL;
        agmm_ext_check_all_reduce_rmsnorm(&d, why, sizeof why);
        free(name);
        break;
    }
    case 2: { /* a world config: GPU kinds are refused in a build without CUDA */
        agmm_world_config cfg;
        take(&r, &cfg, sizeof cfg);
        agmm_world *w = NULL;
        if (agmm_world_create(&w, &cfg, why, sizeof why) == AGMM_SUCCESS)
            agmm_world_destroy(w);
        else if (w != NULL)
            abort();
        break;
    }
    case 3: { /* a fault spec */
        char *spec = rest(&r);
        agmm_error err = {0};
        agmm_fault f;
        agmm_status st = agmm_fault_parse(spec, &f, &err);
        if ((st == AGMM_SUCCESS) != (err.msg[0] == '\0') || (st != AGMM_SUCCESS && f.action != AGMM_FAULT_NONE))
            abort();
        free(spec);
        break;
    }
    case 5: { /* a row-parallel matmul's shape (the next byte picks the operation) */
        uint8_t which;
        take(&r, &which, 1);
        agmm_matmul_reduce_scatter_desc d;
        take(&r, &d, sizeof d);
        agmm_op op = which & 1 ? AGMM_OP_MATMUL_ALL_REDUCE : AGMM_OP_MATMUL_REDUCE_SCATTER;
        agmm_ext_check_matmul_reduce(op, d.m, d.n, d.k, d.b_layout, why, sizeof why);
        break;
    }
    default: { /* the formatter: any text into any buffer ends inside it, marked where cut */
        uint8_t len;
        take(&r, &len, 1);
        char *text = rest(&r);
        char buf[256];
        size_t cap = (size_t)len + 1, n = agmm_format(buf, cap, "%s", text);
        if (n >= cap || strlen(buf) != n || (strlen(text) >= cap && n > 0 && strstr(buf, AGMM_TRUNCATED) == NULL))
            abort();
        free(text);
        break;
    }
    }
    return 0;
}
