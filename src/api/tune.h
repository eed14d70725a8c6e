/* `auto`: how a plan whose backend is NULL or "auto" gets its backend (internal to src/api; the
 * tests and agmm-bench read the last choice). docs/auto.md is the user's description.
 *
 * Rank 0 decides how to decide and tells every rank (one host exchange), so that every rank
 * makes the same collective calls: the static rule (the table's auto_order), a choice cached in
 * rank 0's memory or in the cache file, or measuring, where every rank plans every candidate
 * in table order, times them taking turns, and all take the candidate whose slowest rank was
 * fastest.
 * tune.c decides and measures; tune_cache.c keeps the keys, the in-memory table and the file. */
#ifndef AGMM_API_TUNE_H
#define AGMM_API_TUNE_H

#include <stddef.h>

#include "../backends/backend.h"

/* How the last choice was made. */
typedef enum {
    AGMM_TUNE_STATIC = 0, /* the static rule: measuring off, or a single candidate */
    AGMM_TUNE_MEMORY,     /* rank 0's in-memory cache */
    AGMM_TUNE_FILE,       /* the cache file */
    AGMM_TUNE_MEASURED    /* measured just now */
} agmm_tune_how;

#define AGMM_TUNE_MAX_CANDIDATES 8

typedef struct {
    agmm_tune_how how;
    const agmm_backend *choice;
    double tune_ms;        /* wall time this rank spent measuring (candidates' plans and runs); 0 if not */
    int runs;              /* timed runs per candidate (rounds; the most any group had) */
    int ncand;             /* candidates measured (how == AGMM_TUNE_MEASURED) */
    const agmm_backend *cand[AGMM_TUNE_MAX_CANDIDATES];
    double cand_us[AGMM_TUNE_MAX_CANDIDATES]; /* the slowest rank's median, < 0: it could not be planned */
} agmm_tune_result;

/* Chooses the backend of a plan of `op` with the validated descriptor `desc` (its backend NULL or
 * "auto"). Collective: every rank calls it with the same descriptor; while measuring it plans and
 * runs every candidate. AGMM_ERR_UNSUPPORTED when no backend of op runs in this world; the errors
 * of a candidate's run (the ranks are then out of step). */
agmm_status agmm_tune_choose(agmm_ctx *ctx, agmm_op op, const void *desc, const agmm_backend **out);

/* The last choice made on this rank (how == STATIC and choice NULL before any). Never NULL. */
const agmm_tune_result *agmm_tune_last(const agmm_ctx *ctx);

/* Frees this rank's tuning state (its in-memory cache). Local; with the context. */
void agmm_tune_release(agmm_ctx *ctx);

/* Test hooks, so that a test can make one rank see one backend as slow or unplannable. From now
 * on, while auto measures, this rank
 *   adds delay_us to every timed run of the backend named `delay` (the measurement only; the runs
 *   are unchanged), and
 *   fails to plan the backend named `refuse` as a candidate (AGMM_ERR_NO_MEMORY, as a device
 *   short of memory would): only while other candidates' plans are held (refuse_beside_only),
 *   or always.
 * A NULL name: none. Local. AGMM_ERR_NO_MEMORY. */
typedef struct {
    const char *delay;
    double delay_us;
    const char *refuse;
    int refuse_beside_only;
} agmm_tune_test_hooks;

agmm_status agmm_tune_set_test_hooks(agmm_ctx *ctx, const agmm_tune_test_hooks *hooks);

/* ---- tune_cache.c ---- */

/* The key of a plan: everything its best backend may depend on (agmm's and NCCL's versions, the
 * device, the world's kind and size, ranks per device, the operation and its descriptor but the
 * backend, as the operation describes it), as one line of text without tabs. shape: the plan's
 * installed descriptor (agmm_op_shape, api.h). */
void agmm_tune_key(const agmm_plan *shape, const char *device, int nccl_version, char *key, size_t len);

/* Where the cache file is: $AGMM_TUNE_CACHE (empty: no file), else $XDG_CACHE_HOME/agmm/tune.txt,
 * else $HOME/.cache/agmm/tune.txt. NULL when there is none. */
const char *agmm_tune_cache_path(char *buf, size_t len);

/* Looks `key` up in the file: 1 (the backend's name in `backend`), 0 (no such line, or no file),
 * -1 when the file is not a cache file this version can read (why says where). */
int agmm_tune_file_lookup(const char *path, const char *key, char *backend, size_t len, char *why, size_t why_len);

/* Puts `key` -> `backend` (and a free-text `detail`) in the file, replacing a line of that key.
 * Safe against concurrent writers, in this process or others: an exclusive lock on
 * "<path>.lock" (waited for at most 2 s) around reading the file and renaming a complete new one
 * over it, so readers, which take no lock, see the old file or the new one. A file that cannot
 * be read as a cache is replaced. Creates missing directories. 0, or -1 with why. */
int agmm_tune_file_store(const char *path, const char *key, const char *backend, const char *detail, char *why,
                         size_t why_len);

#endif
