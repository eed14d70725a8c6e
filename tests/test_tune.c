/* `auto` (src/api/tune.c) in the CPU world, where measuring is off unless AGMM_TUNE=1 asks:
 *   the cache file   store and lookup, replacing a key, a corrupt or over-long file ignored and
 *                    replaced, a missing file, missing directories made, 8 threads storing at
 *                    once without losing a line, the default paths
 *   measuring        every rank chooses the same backend, the one whose slowest rank's median is
 *                    smallest, over every candidate; then the same plan is served from rank 0's
 *                    memory, in a new world from the file, and a new key (other splits) is
 *                    measured again; all_reduce likewise
 *   agreement        one rank sees one backend as 1 s slower (the test hook): every rank's
 *                    figures carry that rank's numbers and no rank picks it
 *   groups           one rank cannot plan a backend beside the other candidates (the test
 *                    hook): it is measured alone, after them; one it cannot plan at all is left
 *                    out by every rank
 *   off              AGMM_TUNE=0 takes the static rule (ce, one_shot) even with a cached choice,
 *                    and touches no file
 *   op types         every operation's type has all that auto needs: its key ends in the
 *                    operation's description (and says auto=2: measured in turns), its scratch
 *                    buffers have the io's sizes
 * Every test sets AGMM_TUNE and AGMM_TUNE_CACHE itself (a private directory) and unsets them. */
#include <ftw.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "agmm.h"
#include "api/api.h"
#include "api/tune.h"
#include "cpu_tests.h"
#include "harness.h"

#define MAX_W 4

/* A private directory for cache files (removed with its files at exit), and the path of `name` in
 * it. */
static char tmp_dir[64];

static int remove_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)remove(path); /* best effort: what cannot go stays */
    return 0;
}

static void remove_tmp_dir(void) { nftw(tmp_dir, remove_entry, 8, FTW_DEPTH | FTW_PHYS); }

static const char *tmp_path(const char *name, char *buf, size_t len)
{
    if (tmp_dir[0] == '\0') {
        snprintf(tmp_dir, sizeof tmp_dir, "/tmp/agmm-tune-XXXXXX");
        if (mkdtemp(tmp_dir) == NULL)
            tmp_dir[0] = '\0';
        else
            atexit(remove_tmp_dir);
    }
    snprintf(buf, len, "%s/%s", tmp_dir, name);
    return buf;
}

/* Lines of the file that are not comments, or -1 if it cannot be opened. */
static int data_lines(const char *path)
{
    FILE *f = fopen(path, "r");
    if (f == NULL)
        return -1;
    char line[2048];
    int n = 0;
    while (fgets(line, sizeof line, f))
        n += line[0] != '#';
    fclose(f);
    return n;
}

static void write_file(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    if (f) {
        fputs(text, f);
        fclose(f);
    }
}

/* ---- the file ---- */

typedef struct {
    const char *path;
    int thread, failed;
} store_job;

static void *store_many(void *arg)
{
    store_job *j = arg;
    for (int i = 0; i < 20; i++) {
        char key[64], why[256];
        snprintf(key, sizeof key, "thread=%d entry=%d", j->thread, i);
        j->failed += agmm_tune_file_store(j->path, key, "ce", "concurrent", why, sizeof why) != 0;
    }
    return NULL;
}

void test_tune_cache_file(void)
{
    char path[128], why[256] = "", got[64] = "";
    tmp_path("dir/sub/tune.txt", path, sizeof path);
    int r0 = agmm_tune_file_lookup(path, "k1", got, sizeof got, why, sizeof why);
    int s1 = agmm_tune_file_store(path, "k1", "ce", "ce=1.0us", why, sizeof why);
    int s2 = agmm_tune_file_store(path, "k2", "fused", "", why, sizeof why);
    int s3 = agmm_tune_file_store(path, "k3 with blanks", "pull", "x", why, sizeof why);
    int s4 = agmm_tune_file_store(path, "k1", "nccl", "again", why, sizeof why);
    char g1[64] = "", g2[64] = "", g3[64] = "";
    int l1 = agmm_tune_file_lookup(path, "k1", g1, sizeof g1, why, sizeof why);
    int l2 = agmm_tune_file_lookup(path, "k2", g2, sizeof g2, why, sizeof why);
    int l3 = agmm_tune_file_lookup(path, "k3 with blanks", g3, sizeof g3, why, sizeof why);
    int l4 = agmm_tune_file_lookup(path, "k4", got, sizeof got, why, sizeof why);
    agmm_check(r0 == 0 && s1 == 0 && s2 == 0 && s3 == 0 && s4 == 0 && l1 == 1 && strcmp(g1, "nccl") == 0 && l2 == 1 &&
                   strcmp(g2, "fused") == 0 && l3 == 1 && strcmp(g3, "pull") == 0 && l4 == 0 && data_lines(path) == 3,
               "tune cache: a missing file is a miss (%d); 4 stores into missing directories (%d %d %d %d); k1 replaced "
               "-> %s, k2 -> %s, k3 -> %s, k4 a miss (%d); %d lines (want 3)%s%s",
               r0, s1, s2, s3, s4, g1, g2, g3, l4, data_lines(path), why[0] ? ": " : "", why);

    static const char *const corrupt[] = {
        "garbage\n",                                  /* no header */
        "# agmm tune cache v1\nkey without a tab\n",  /* no backend */
        "# agmm tune cache v1\nk\tNot-A-Name\n",      /* not a backend's name */
        "# agmm tune cache v2\nk\tce\n",              /* another version */
    };
    for (size_t i = 0; i < sizeof corrupt / sizeof *corrupt; i++) {
        write_file(path, corrupt[i]);
        why[0] = '\0';
        int l = agmm_tune_file_lookup(path, "k", got, sizeof got, why, sizeof why);
        int s = agmm_tune_file_store(path, "k5", "ce", "", why, sizeof why);
        int again = agmm_tune_file_lookup(path, "k5", got, sizeof got, why, sizeof why);
        agmm_check(l == -1 && strstr(why, path) != NULL && s == 0 && again == 1 && data_lines(path) == 1,
                   "tune cache: corrupt file #%zu is refused (%d, naming it: \"%s\") and replaced by the next store "
                   "(%d lines, want 1)",
                   i, l, why, data_lines(path));
    }
    char big[1500];
    memset(big, 'x', sizeof big - 1);
    big[sizeof big - 1] = '\0';
    FILE *f = fopen(path, "w");
    if (f) {
        fprintf(f, "# agmm tune cache v1\n%s\tce\n", big);
        fclose(f);
    }
    int lb = agmm_tune_file_lookup(path, "k", got, sizeof got, why, sizeof why);
    int sb = agmm_tune_file_store(path, big, "ce", "", why, sizeof why);
    agmm_check(lb == -1 && sb == -1, "tune cache: a line over 1024 bytes makes the file unreadable (%d) and is never "
               "written (%d)", lb, sb);

    /* 8 writers at once, 20 keys each: every line is there in the end. */
    char cpath[128];
    tmp_path("concurrent.txt", cpath, sizeof cpath);
    pthread_t tid[8];
    store_job jobs[8];
    for (int t = 0; t < 8; t++) {
        jobs[t] = (store_job){cpath, t, 0};
        pthread_create(&tid[t], NULL, store_many, &jobs[t]);
    }
    int failed = 0;
    for (int t = 0; t < 8; t++) {
        pthread_join(tid[t], NULL);
        failed += jobs[t].failed;
    }
    int found = 0;
    for (int t = 0; t < 8; t++)
        for (int i = 0; i < 20; i++) {
            char key[64];
            snprintf(key, sizeof key, "thread=%d entry=%d", t, i);
            found += agmm_tune_file_lookup(cpath, key, got, sizeof got, why, sizeof why) == 1;
        }
    agmm_check(failed == 0 && found == 160 && data_lines(cpath) == 160,
               "tune cache: 8 threads storing 20 keys each at once: %d failures, %d of 160 found, %d lines", failed,
               found, data_lines(cpath));

    char buf[256];
    setenv("AGMM_TUNE_CACHE", "", 1);
    const char *none = agmm_tune_cache_path(buf, sizeof buf);
    unsetenv("AGMM_TUNE_CACHE");
    setenv("XDG_CACHE_HOME", "/x/cache", 1);
    const char *xdg = agmm_tune_cache_path(buf, sizeof buf);
    int xdg_ok = xdg && strcmp(xdg, "/x/cache/agmm/tune.txt") == 0;
    unsetenv("XDG_CACHE_HOME");
    setenv("AGMM_TUNE_CACHE", "/y/t.txt", 1);
    const char *env = agmm_tune_cache_path(buf, sizeof buf);
    int env_ok = env && strcmp(env, "/y/t.txt") == 0;
    unsetenv("AGMM_TUNE_CACHE");
    agmm_check(none == NULL && xdg_ok && env_ok,
               "tune cache path: AGMM_TUNE_CACHE=\"\" -> none, XDG_CACHE_HOME=/x/cache -> /x/cache/agmm/tune.txt, "
               "AGMM_TUNE_CACHE=/y/t.txt -> itself");
}

/* ---- choosing in worlds ---- */

typedef struct {
    agmm_op op;
    int splits;
    const char *delay_backend; /* rank delay_rank sees it 1 s slower (NULL: none) */
    int delay_rank;
    const char *refuse_backend; /* rank refuse_rank cannot plan it (NULL: none) ... */
    int refuse_rank, refuse_beside_only; /* ... beside other candidates only, or at all */
    int plans;                 /* plans made in a row, the same descriptor */
    agmm_status status[MAX_W];
    char msg[MAX_W][AGMM_ERROR_LEN];
    agmm_tune_result last[MAX_W][2]; /* per rank, of the first two plans */
    const char *backend[MAX_W][2];
} choose_job;

static agmm_status choose_rank(agmm_ctx *ctx, void *arg)
{
    choose_job *j = arg;
    int rank = agmm_ctx_rank(ctx);
    agmm_tune_test_hooks hooks = {0};
    if (j->delay_backend && rank == j->delay_rank)
        hooks.delay = j->delay_backend, hooks.delay_us = 1e6;
    if (j->refuse_backend && rank == j->refuse_rank)
        hooks.refuse = j->refuse_backend, hooks.refuse_beside_only = j->refuse_beside_only;
    agmm_tune_set_test_hooks(ctx, &hooks);
    for (int i = 0; i < j->plans; i++) {
        agmm_plan *p = NULL;
        agmm_status st;
        if (j->op == AGMM_OP_AG_MATMUL) {
            agmm_ag_matmul_desc d = {.m = 37, .n = 72, .k = 24, .splits = j->splits};
            st = agmm_plan_ag_matmul(&p, ctx, &d);
        } else {
            agmm_all_reduce_desc d = {.n = 4093, .dtype = AGMM_DTYPE_F32, .backend = "auto"};
            st = agmm_plan_all_reduce(&p, ctx, &d);
        }
        if (st != AGMM_SUCCESS) {
            j->status[rank] = st;
            snprintf(j->msg[rank], sizeof j->msg[rank], "plan %d: %s", i, agmm_last_error(ctx));
            return AGMM_SUCCESS;
        }
        if (i < 2) {
            j->last[rank][i] = *agmm_tune_last(ctx);
            j->backend[rank][i] = agmm_plan_backend(p);
        }
        agmm_plan_destroy(p);
    }
    return AGMM_SUCCESS;
}

static int run_choose(choose_job *j, int W)
{
    agmm_world *w = test_cpu_world(W, 0);
    if (w == NULL)
        return 0;
    agmm_world_run(w, choose_rank, j);
    agmm_world_destroy(w);
    for (int r = 0; r < W; r++)
        if (j->status[r] != AGMM_SUCCESS)
            return agmm_check(0, "auto in a CPU world of %d: rank %d: %s", W, r, j->msg[r]);
    return 1;
}

/* The ranks of j made the same choice i, measured over every candidate with each figure >= 0,
 * and it is the one with the smallest figure. */
static int measured_alike(const choose_job *j, int W, int i, int ncand, char *what, size_t len)
{
    const agmm_tune_result *r0 = &j->last[0][i];
    int best = -1, ok = r0->how == AGMM_TUNE_MEASURED && r0->ncand == ncand && r0->runs >= 1 && r0->runs <= 20;
    for (int c = 0; c < r0->ncand; c++) {
        ok &= r0->cand_us[c] >= 0;
        if (best < 0 || r0->cand_us[c] < r0->cand_us[best])
            best = c;
    }
    ok &= best >= 0 && r0->choice == r0->cand[best] && strcmp(j->backend[0][i], r0->choice->name) == 0;
    for (int r = 1; r < W; r++)
        ok &= j->last[r][i].how == r0->how && j->last[r][i].choice == r0->choice &&
              memcmp(j->last[r][i].cand_us, r0->cand_us, sizeof r0->cand_us) == 0;
    int used = snprintf(what, len, "how %d, %d candidates, %d runs:", (int)r0->how, r0->ncand, r0->runs);
    for (int c = 0; c < r0->ncand && used < (int)len; c++)
        used += snprintf(what + used, len - (size_t)used, " %s %.0f us", r0->cand[c]->name, r0->cand_us[c]);
    if (used < (int)len)
        snprintf(what + used, len - (size_t)used, " -> %s", r0->choice ? r0->choice->name : "(none)");
    return ok;
}

void test_tune_measured(void)
{
    char path[128], what[512];
    tmp_path("measured.txt", path, sizeof path);
    unlink(path);
    setenv("AGMM_TUNE", "1", 1);
    setenv("AGMM_TUNE_CACHE", path, 1);
    const int W = 3;
    choose_job j = {.op = AGMM_OP_AG_MATMUL, .splits = 2, .plans = 2};
    if (run_choose(&j, W)) {
        int ok = measured_alike(&j, W, 0, 4, what, sizeof what);
        agmm_check(ok, "auto ag_matmul W=3 M=37 N=72 K=24 splits=2, AGMM_TUNE=1: every rank measured nccl, ce, fused, "
                   "pull alike and took the fastest: %s", what);
        int memory = 1;
        for (int r = 0; r < W; r++)
            memory &= j.last[r][1].how == AGMM_TUNE_MEMORY && j.last[r][1].choice == j.last[0][0].choice;
        agmm_check(memory && data_lines(path) == 1,
                   "auto: the same plan again is served from rank 0's memory on every rank (how %d), and the file "
                   "holds the choice (%d lines)", (int)j.last[1][1].how, data_lines(path));
    }
    choose_job again = {.op = AGMM_OP_AG_MATMUL, .splits = 2, .plans = 1};
    if (run_choose(&again, W))
        agmm_check(again.last[0][0].how == AGMM_TUNE_FILE && again.last[2][0].how == AGMM_TUNE_FILE &&
                       again.last[0][0].choice == j.last[0][0].choice && again.last[0][0].tune_ms == 0,
                   "auto: in a new world the same plan comes from the file (how %d), no measuring, the same choice",
                   (int)again.last[0][0].how);
    choose_job other = {.op = AGMM_OP_AG_MATMUL, .splits = 3, .plans = 1};
    if (run_choose(&other, W))
        agmm_check(other.last[0][0].how == AGMM_TUNE_MEASURED && data_lines(path) == 2,
                   "auto: other splits are another key: measured (how %d), a second line (%d)",
                   (int)other.last[0][0].how, data_lines(path));
    choose_job ar = {.op = AGMM_OP_ALL_REDUCE, .plans = 1};
    if (run_choose(&ar, W))
        agmm_check(measured_alike(&ar, W, 0, 3, what, sizeof what),
                   "auto all_reduce W=3 n=4093 fp32: every rank measured nccl, one_shot, two_shot alike and took the "
                   "fastest: %s", what);

    write_file(path, "not a cache\n");
    choose_job corrupt = {.op = AGMM_OP_AG_MATMUL, .splits = 2, .plans = 1};
    if (run_choose(&corrupt, W))
        agmm_check(corrupt.last[0][0].how == AGMM_TUNE_MEASURED && data_lines(path) == 1,
                   "auto: a corrupt cache file is ignored (measured again, how %d) and replaced (%d lines)",
                   (int)corrupt.last[0][0].how, data_lines(path));
    unsetenv("AGMM_TUNE");
    unsetenv("AGMM_TUNE_CACHE");
}

void test_tune_agreement(void)
{
    char path[128], what[512];
    setenv("AGMM_TUNE", "1", 1);
    setenv("AGMM_TUNE_CACHE", tmp_path("agreement.txt", path, sizeof path), 1);
    static const char *const names[] = {"nccl", "ce", "fused", "pull"};
    for (int slow = 0; slow < 4; slow++) {
        choose_job j = {.op = AGMM_OP_AG_MATMUL, .splits = 1, .plans = 1, .delay_rank = 2, .delay_backend = names[slow]};
        unlink(path);
        if (!run_choose(&j, 3))
            continue;
        int ok = measured_alike(&j, 3, 0, 4, what, sizeof what) && strcmp(j.backend[0][0], names[slow]) != 0;
        for (int rank = 0; rank < 3; rank++)
            for (int c = 0; c < j.last[rank][0].ncand; c++)
                if (strcmp(j.last[rank][0].cand[c]->name, names[slow]) == 0)
                    ok &= j.last[rank][0].cand_us[c] >= 1e6;
        agmm_check(ok, "auto W=3: rank 2 sees %s 1 s slower: every rank's figure for it is rank 2's (>= 1e6 us) and "
                   "nobody takes it: %s", names[slow], what);
    }
    unlink(path);
    unsetenv("AGMM_TUNE");
    unsetenv("AGMM_TUNE_CACHE");
}

/* The candidates are held together while they take turns; one that a rank cannot plan beside
 * them is measured alone after them, and one that it cannot plan at all is left out by all. */
void test_tune_groups(void)
{
    char path[128], what[512];
    setenv("AGMM_TUNE", "1", 1);
    setenv("AGMM_TUNE_CACHE", tmp_path("groups.txt", path, sizeof path), 1);
    static const char *const names[] = {"nccl", "ce", "fused", "pull"};
    for (int x = 0; x < 4; x++) {
        /* The first candidate is planned with none beside it: the others join it. */
        choose_job j = {.op = AGMM_OP_AG_MATMUL, .splits = 1, .plans = 1, .refuse_rank = 1,
                        .refuse_backend = names[x], .refuse_beside_only = 1};
        unlink(path);
        if (x > 0 && run_choose(&j, 3))
            agmm_check(measured_alike(&j, 3, 0, 4, what, sizeof what),
                       "auto W=3: rank 1 cannot plan %s beside other candidates: it is measured alone, every "
                       "candidate has a figure and every rank took the fastest: %s", names[x], what);
        choose_job never = {.op = AGMM_OP_AG_MATMUL, .splits = 1, .plans = 1, .refuse_rank = 1,
                            .refuse_backend = names[x], .refuse_beside_only = 0};
        unlink(path);
        if (!run_choose(&never, 3))
            continue;
        int ok = 1, c_x = -1;
        for (int rank = 0; rank < 3; rank++) {
            const agmm_tune_result *r = &never.last[rank][0];
            ok &= r->how == AGMM_TUNE_MEASURED && r->ncand == 4 && r->choice != NULL &&
                  strcmp(r->choice->name, names[x]) != 0 && strcmp(never.backend[rank][0], r->choice->name) == 0;
            for (int c = 0; c < r->ncand; c++) {
                ok &= (strcmp(r->cand[c]->name, names[x]) == 0) == (r->cand_us[c] < 0);
                if (strcmp(r->cand[c]->name, names[x]) == 0)
                    c_x = c;
            }
        }
        agmm_check(ok && c_x == x, "auto W=3: rank 1 cannot plan %s at all: every rank leaves it out (figure < 0), "
                   "measures the other three and takes one of them (%s)",
                   names[x], never.last[0][0].choice ? never.last[0][0].choice->name : "(none)");
    }
    unlink(path);
    unsetenv("AGMM_TUNE");
    unsetenv("AGMM_TUNE_CACHE");
}

/* Replaces the backend of the file's one data line with `backend`. */
static void edit_choice(const char *path, const char *backend)
{
    char text[4096] = "", line[1024];
    FILE *f = fopen(path, "r");
    if (f == NULL)
        return;
    while (fgets(line, sizeof line, f)) {
        char *tab = strchr(line, '\t');
        if (line[0] != '#' && tab) {
            /* The rest of the line is copied out first: it would overlap its own destination. */
            char rest[1024];
            const char *r = strchr(tab + 1, '\t');
            snprintf(rest, sizeof rest, "%s", r ? r : "\n");
            snprintf(tab + 1, sizeof line - (size_t)(tab + 1 - line), "%s%s", backend, rest);
        }
        strncat(text, line, sizeof text - strlen(text) - 1);
    }
    fclose(f);
    write_file(path, text);
}

void test_tune_off(void)
{
    char path[128];
    tmp_path("off.txt", path, sizeof path);
    unlink(path);
    setenv("AGMM_TUNE_CACHE", path, 1);
    setenv("AGMM_TUNE", "1", 1);
    const int W = 2;
    choose_job first = {.op = AGMM_OP_AG_MATMUL, .splits = 1, .plans = 1};
    run_choose(&first, W);
    /* The cached choice made pull by hand: AGMM_TUNE=1 must take it from the file. */
    edit_choice(path, "pull");
    choose_job cached = {.op = AGMM_OP_AG_MATMUL, .splits = 1, .plans = 1};
    if (run_choose(&cached, W))
        agmm_check(cached.last[0][0].how == AGMM_TUNE_FILE && strcmp(cached.backend[0][0], "pull") == 0 &&
                       strcmp(cached.backend[1][0], "pull") == 0,
                   "auto, AGMM_TUNE=1: a choice edited into the file (pull) is what every rank gets: %s, how %d",
                   cached.backend[1][0], (int)cached.last[0][0].how);
    static const char *const modes[] = {"0", NULL};
    for (int m = 0; m < 2; m++) {
        if (modes[m])
            setenv("AGMM_TUNE", modes[m], 1);
        else
            unsetenv("AGMM_TUNE");
        choose_job mm = {.op = AGMM_OP_AG_MATMUL, .splits = 1, .plans = 1};
        choose_job ar = {.op = AGMM_OP_ALL_REDUCE, .plans = 1};
        if (run_choose(&mm, W) && run_choose(&ar, W))
            agmm_check(mm.last[0][0].how == AGMM_TUNE_STATIC && strcmp(mm.backend[0][0], "ce") == 0 &&
                           strcmp(mm.backend[1][0], "ce") == 0 && ar.last[1][0].how == AGMM_TUNE_STATIC &&
                           strcmp(ar.backend[0][0], "one_shot") == 0 && mm.last[0][0].tune_ms == 0 &&
                           data_lines(path) == 1,
                       "auto with AGMM_TUNE %s in the CPU world: the static rule although the file says pull: "
                       "ag_matmul -> %s, all_reduce -> %s, nothing measured or written (%d line)",
                       modes[m] ? "=0" : "unset", mm.backend[0][0], ar.backend[0][0], data_lines(path));
    }
    unlink(path);
    unsetenv("AGMM_TUNE");
    unsetenv("AGMM_TUNE_CACHE");
}

/* ---- what auto reads from every operation's type ---- */

/* A descriptor of every operation, with the end of its key and its scratch sizes at W = 2: the
 * type of a new operation fails this test until it has a line here. */
typedef struct {
    agmm_op op;
    const void *desc;
    const char *key_tail;
    int nbuf;
    size_t bytes[AGMM_SCRATCH_MAX];
} op_sample;

static const agmm_ag_matmul_desc sample_mm = {.m = 37, .n = 72, .k = 24};
static const agmm_all_reduce_desc sample_ar = {.n = 4093, .dtype = AGMM_DTYPE_F32};
static const agmm_matmul_reduce_scatter_desc sample_rs = {.m = 37, .n = 72, .k = 24};
static const agmm_matmul_all_reduce_desc sample_mar = {.m = 5, .n = 72, .k = 24, .b_layout = AGMM_LAYOUT_ROW_MAJOR};
static const agmm_all_reduce_rmsnorm_desc sample_arn = {.tokens = 7, .hidden = 264, .eps = 1e-5};
static const op_sample samples[] = {
    {AGMM_OP_AG_MATMUL, &sample_mm, " op=ag_matmul M=37 N=72 K=24 b_layout=col splits=1", 3,
     {24 * 72 * 2, 2 * 37 * 24 * 2, 2 * 37 * 72 * 2}},
    {AGMM_OP_ALL_REDUCE, &sample_ar, " op=all_reduce n=4093 dtype=fp32", 1, {4093 * 4}},
    /* Rank 0 of 2 gets ceil(37/2) = 19 rows of S. */
    {AGMM_OP_MATMUL_REDUCE_SCATTER, &sample_rs, " op=matmul_reduce_scatter M=37 N=72 K=24 b_layout=col", 3,
     {37 * 24 * 2, 24 * 72 * 2, 19 * 72 * 2}},
    {AGMM_OP_MATMUL_ALL_REDUCE, &sample_mar, " op=matmul_all_reduce M=5 N=72 K=24 b_layout=row", 3,
     {5 * 24 * 2, 24 * 72 * 2, 5 * 72 * 2}},
    {AGMM_OP_ALL_REDUCE_RMSNORM, &sample_arn, " op=all_reduce_rmsnorm tokens=7 hidden=264 eps=9.99999975e-06", 5,
     {7 * 264 * 2, 7 * 264 * 2, 264 * 2, 264 * 2, 7 * 264 * 2}},
};

typedef struct {
    int checked, failed;
    char msg[1024];
} op_types_job;

static agmm_status op_types_rank(agmm_ctx *ctx, void *arg)
{
    op_types_job *j = arg;
    if (agmm_ctx_rank(ctx) != 0)
        return AGMM_SUCCESS;
    for (int op = 0; agmm_op_type_of((agmm_op)op) != NULL && !j->failed; op++) {
        const agmm_op_type *t = agmm_op_type_of((agmm_op)op);
        const op_sample *sm = NULL;
        for (size_t i = 0; i < sizeof samples / sizeof *samples; i++)
            if ((int)samples[i].op == op)
                sm = &samples[i];
        if (sm == NULL || t->op != (agmm_op)op || !t->check || !t->backend_of || !t->install || !t->input_of ||
            !t->check_io || !t->describe || !t->scratch || !t->plan_with || !t->run_scratch) {
            j->failed = 1;
            snprintf(j->msg, sizeof j->msg, "%s: %s", agmm_op_name((agmm_op)op),
                     sm ? "its type lacks a hook or names another op" : "no sample descriptor in tests/test_tune.c");
            break;
        }
        agmm_plan shape;
        size_t bytes[AGMM_SCRATCH_MAX] = {0};
        char key[512];
        agmm_op_shape(t, ctx, sm->desc, &shape);
        int nbuf = t->scratch(&shape, bytes);
        agmm_tune_key(&shape, "Some GPU", 22809, key, sizeof key);
        size_t kl = strlen(key), tl = strlen(sm->key_tail);
        int ok = nbuf == sm->nbuf && memcmp(bytes, sm->bytes, sizeof bytes) == 0 && kl > tl &&
                 strcmp(key + kl - tl, sm->key_tail) == 0 && strchr(key, '\t') == NULL &&
                 strstr(key, "device=Some_GPU world=cpu W=2 ") != NULL &&
                 strstr(key, " auto=2 nccl=22809 ") != NULL; /* how auto measures: in turns */
        j->failed = !ok;
        j->checked++;
        snprintf(j->msg, sizeof j->msg, "%s: key \"%.400s\", %d scratch buffers (%zu %zu %zu bytes)",
                 agmm_op_name((agmm_op)op), key, nbuf, bytes[0], bytes[1], bytes[2]);
    }
    return AGMM_SUCCESS;
}

void test_tune_op_types(void)
{
    op_types_job j = {0};
    agmm_world *w = test_cpu_world(2, 0);
    if (w == NULL)
        return;
    agmm_world_run(w, op_types_rank, &j);
    agmm_world_destroy(w);
    agmm_check(!j.failed && j.checked == (int)(sizeof samples / sizeof *samples),
               "op types: every operation (%d of %d samples) has auto's hooks, a key ending in its description and "
               "its io's scratch sizes (W=2); last: %s",
               j.checked, (int)(sizeof samples / sizeof *samples), j.msg);
}
