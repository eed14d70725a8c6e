/* The backend table (src/backends/table.c) and the public view of it (agmm_backend_name,
 * agmm_backend_summary, agmm_backend_available, backend names in descriptors).
 *
 * The table is checked entry by entry through the internal iterator (agmm_backend_entry) and
 * against the public listing, with counts taken both ways, so that an entry the public API does
 * not list, or one it lists twice, shows. Every check requires a non-empty table: an empty one
 * fails rather than passing vacuously. */
#include <stdlib.h>
#include <string.h>

#include "agmm.h"
#include "api/agmm_ext.h"
#include "backends/backend.h"
#include "core/error.h"
#include "cpu_tests.h"
#include "harness.h"

/* More entries than any table will have: a listing that does not end by then never ends. */
enum { TABLE_CAP = 256 };

/* The operations are 0 .. agmm_ext_op_count() - 1 (test_op_count checks that the count is exact);
 * MAX_OPS bounds the per-operation arrays below. */
#define NOPS agmm_ext_op_count()
enum { MAX_OPS = 16 };

static int op_is_known(agmm_op op) { return (int)op >= 0 && (int)op < NOPS; }

/* Lowercase identifiers only: names go into comma-separated lists and CSV headers. */
static int name_is_identifier(const char *name)
{
    for (const char *c = name; *c; c++)
        if (!((*c >= 'a' && *c <= 'z') || (*c >= '0' && *c <= '9') || *c == '_'))
            return 0;
    return 1;
}

static void impl_check(const agmm_backend_impl *impl, const agmm_backend *b, const char *cls, int *bad, char *first,
                       size_t first_len)
{
    if (impl == NULL || (impl->create && impl->run && impl->destroy))
        return;
    if ((*bad)++ == 0)
        snprintf(first, first_len, " (first: %s/%s's %s implementation: create %s, run %s, destroy %s)",
                 agmm_op_name(b->op), b->name, cls, impl->create ? "set" : "NULL", impl->run ? "set" : "NULL",
                 impl->destroy ? "set" : "NULL");
}

void test_backend_table(void)
{
    int entries = 0;
    while (entries < TABLE_CAP && agmm_backend_entry(entries) != NULL)
        entries++;
    agmm_check(entries >= 1 && entries < TABLE_CAP && agmm_backend_entry(-1) == NULL,
               "backend table: %d entries, agmm_backend_entry ends with NULL (and is NULL at -1)", entries);

    int bad_name = 0, bad_op = 0, bad_summary = 0, no_impl = 0, bad_impl = 0, dup = 0, is_auto = 0, bad_chars = 0;
    char first_name[160] = "", first_op[160] = "", first_summary[160] = "", first_noimpl[160] = "",
         first_impl[200] = "", first_dup[160] = "", first_chars[160] = "";
    for (int i = 0; i < entries; i++) {
        const agmm_backend *b = agmm_backend_entry(i);
        if (b->name == NULL || b->name[0] == '\0') {
            if (bad_name++ == 0)
                snprintf(first_name, sizeof first_name, " (first: entry %d, name %s)", i, b->name ? "\"\"" : "NULL");
            continue; /* the checks below print the name */
        }
        if (!op_is_known(b->op) || strcmp(agmm_op_name(b->op), "?") == 0)
            if (bad_op++ == 0)
                snprintf(first_op, sizeof first_op, " (first: %s, op %d)", b->name, (int)b->op);
        if (b->summary == NULL || b->summary[0] == '\0')
            if (bad_summary++ == 0)
                snprintf(first_summary, sizeof first_summary, " (first: %s/%s)", agmm_op_name(b->op), b->name);
        /* `devices` names the worlds it runs on; an implementation must be there for each, the GPU's
         * only in a build with CUDA, and none for a class it does not name. */
#ifdef AGMM_HAVE_CUDA
        const int gpu_built = 1;
#else
        const int gpu_built = 0;
#endif
        int want_cpu = (b->devices & AGMM_DEVICE_CPU) != 0, want_gpu = (b->devices & AGMM_DEVICE_GPU) != 0;
        if (b->devices == 0 || (b->devices & ~(unsigned)(AGMM_DEVICE_CPU | AGMM_DEVICE_GPU)) != 0 ||
            want_cpu != (b->cpu != NULL) || (want_gpu && gpu_built) != (b->gpu != NULL))
            if (no_impl++ == 0)
                snprintf(first_noimpl, sizeof first_noimpl, " (first: %s/%s: devices 0x%x, cpu %s, gpu %s)",
                         agmm_op_name(b->op), b->name, b->devices, b->cpu ? "set" : "NULL", b->gpu ? "set" : "NULL");
        impl_check(b->cpu, b, "cpu", &bad_impl, first_impl, sizeof first_impl);
        impl_check(b->gpu, b, "gpu", &bad_impl, first_impl, sizeof first_impl);
        if (strcmp(b->name, "auto") == 0)
            is_auto++;
        if (!name_is_identifier(b->name))
            if (bad_chars++ == 0)
                snprintf(first_chars, sizeof first_chars, " (first: \"%s\")", b->name);
        for (int j = 0; j < i; j++) {
            const agmm_backend *o = agmm_backend_entry(j);
            if (o->op == b->op && o->name != NULL && strcmp(o->name, b->name) == 0)
                if (dup++ == 0)
                    snprintf(first_dup, sizeof first_dup, " (first: %s/%s at entries %d and %d)", agmm_op_name(b->op),
                             b->name, j, i);
        }
    }
    int any = entries >= 1;
    agmm_check(any && bad_name == 0, "backend table: every entry has a non-empty name: %d of %d bad%s", bad_name,
               entries, first_name);
    agmm_check(any && bad_op == 0, "backend table: every entry's op is a public agmm_op with a name: %d of %d bad%s",
               bad_op, entries, first_op);
    agmm_check(any && bad_summary == 0, "backend table: every entry has a non-empty summary: %d of %d bad%s",
               bad_summary, entries, first_summary);
    agmm_check(any && no_impl == 0,
               "backend table: every entry names the devices it runs on and has exactly their implementations (the "
               "GPU's where the build has CUDA): %d of %d bad%s",
               no_impl, entries, first_noimpl);
    agmm_check(any && bad_impl == 0, "backend table: every implementation has create, run and destroy: %d bad%s",
               bad_impl, first_impl);
    agmm_check(any && dup == 0, "backend table: no two entries of one op share a name: %d duplicates%s", dup,
               first_dup);
    agmm_check(any && is_auto == 0, "backend table: no entry is called \"auto\" (%d are)", is_auto);
    agmm_check(any && bad_chars == 0, "backend table: names are lowercase identifiers [a-z0-9_]: %d bad%s", bad_chars,
               first_chars);

    /* The public listing of each op against the table's entries of that op, in table order; the
     * per-op counts must add up to the whole table (no entry of an op nobody lists). */
    int listed_total = 0;
    for (int oi = 0; oi < NOPS; oi++) {
        agmm_op op = (agmm_op)oi;
        int in_table = 0, listed = 0, order_bad = 0, internal_bad = 0;
        char first_bad[200] = "";
        for (int i = 0; i < entries; i++) {
            const agmm_backend *b = agmm_backend_entry(i);
            if (b->op != op)
                continue;
            const char *pub = agmm_backend_name(op, in_table);
            if (pub == NULL || b->name == NULL || strcmp(pub, b->name) != 0)
                if (order_bad++ == 0)
                    snprintf(first_bad, sizeof first_bad, " (first: position %d is %s, the table has %s)", in_table,
                             pub ? pub : "NULL", b->name ? b->name : "NULL");
            /* The internal lookups agree with the iterator: the API layer resolves through them. */
            internal_bad += agmm_backend_at(op, in_table) != b || agmm_backend_find(op, b->name) != b ||
                            agmm_backend_summary(op, b->name) != b->summary;
            in_table++;
        }
        while (listed < TABLE_CAP && agmm_backend_name(op, listed) != NULL)
            listed++;
        listed_total += listed;
        int ends = listed < TABLE_CAP && agmm_backend_name(op, listed + 1) == NULL && agmm_backend_name(op, -1) == NULL;
        agmm_check(in_table >= 1 && listed == in_table && order_bad == 0 && ends,
                   "agmm_backend_name(%s, i): %d names then NULL (and NULL at -1 and past it), the table has %d entries "
                   "of %s, same names in the same order%s",
                   agmm_op_name(op), listed, in_table, agmm_op_name(op), first_bad);
        agmm_check(in_table >= 1 && internal_bad == 0,
                   "backend table %s: agmm_backend_at, agmm_backend_find and agmm_backend_summary give each entry "
                   "back (%d disagree)",
                   agmm_op_name(op), internal_bad);
    }
    agmm_check(any && listed_total == entries,
               "backend table: the public listings of the %d operations hold %d names, the table %d entries", NOPS,
               listed_total, entries);
    int named = 0;
    for (int oi = 0; oi < NOPS; oi++)
        named += strcmp(agmm_op_name((agmm_op)oi), "?") != 0;
    agmm_check(NOPS >= 1 && NOPS <= MAX_OPS && named == NOPS && strcmp(agmm_op_name((agmm_op)NOPS), "?") == 0 &&
                   agmm_backend_name((agmm_op)NOPS, 0) == NULL,
               "operations: agmm_ext_op_count() = %d (at most %d), every one named, the next one \"?\" with no "
               "backends",
               NOPS, MAX_OPS);
    agmm_check(agmm_backend_name((agmm_op)7, 0) == NULL && agmm_backend_summary((agmm_op)7, "nccl") == NULL &&
                   agmm_backend_summary(AGMM_OP_AG_MATMUL, "nope") == NULL &&
                   agmm_backend_summary(AGMM_OP_AG_MATMUL, "auto") == NULL &&
                   agmm_backend_summary(AGMM_OP_AG_MATMUL, NULL) == NULL && strcmp(agmm_op_name((agmm_op)7), "?") == 0 &&
                   strcmp(agmm_op_name(AGMM_OP_AG_MATMUL), "ag_matmul") == 0 &&
                   strcmp(agmm_op_name(AGMM_OP_ALL_REDUCE), "all_reduce") == 0 &&
                   strcmp(agmm_op_name(AGMM_OP_ALL_REDUCE_RMSNORM), "all_reduce_rmsnorm") == 0,
               "backend queries: op 7 lists nothing and is named \"?\"; no summary for \"nope\", \"auto\" or NULL; "
               "agmm_op_name gives ag_matmul, all_reduce, all_reduce_rmsnorm");
}

/* ---- the public queries in a CPU world ---- */

/* 1 if every backend name of op appears in text. */
static int lists_every_backend(agmm_op op, const char *text)
{
    int n = 0;
    for (const char *name; (name = agmm_backend_name(op, n)) != NULL; n++)
        if (strstr(text, name) == NULL)
            return 0;
    return n > 0;
}

typedef struct {
    agmm_status nope_status[MAX_OPS];
    char nope_msg[MAX_OPS][AGMM_ERROR_LEN];
    int nope_plan_null;
    agmm_status cross_status[3];  /* ag_matmul "one_shot", all_reduce "ce", all_reduce "fused" */
    char cross_msg[3][AGMM_ERROR_LEN];
    agmm_status copied_status;
    char copied_backend[32];      /* agmm_plan_backend after the caller's string was overwritten */
} query_result;

static const struct {
    agmm_op op;
    const char *name;
} cross[3] = {{AGMM_OP_AG_MATMUL, "one_shot"}, {AGMM_OP_ALL_REDUCE, "ce"}, {AGMM_OP_ALL_REDUCE, "fused"}};

static agmm_status plan_named(agmm_plan **plan, agmm_ctx *ctx, agmm_op op, const char *backend)
{
    if (op == AGMM_OP_AG_MATMUL) {
        agmm_ag_matmul_desc d = {.m = 16, .n = 16, .k = 16, .backend = backend};
        return agmm_plan_ag_matmul(plan, ctx, &d);
    }
    if (op == AGMM_OP_MATMUL_REDUCE_SCATTER) {
        agmm_matmul_reduce_scatter_desc d = {.m = 16, .n = 16, .k = 16, .backend = backend};
        return agmm_plan_matmul_reduce_scatter(plan, ctx, &d);
    }
    if (op == AGMM_OP_MATMUL_ALL_REDUCE) {
        agmm_matmul_all_reduce_desc d = {.m = 16, .n = 16, .k = 16, .backend = backend};
        return agmm_plan_matmul_all_reduce(plan, ctx, &d);
    }
    if (op == AGMM_OP_ALL_REDUCE_RMSNORM) {
        agmm_all_reduce_rmsnorm_desc d = {.tokens = 4, .hidden = 16, .eps = 1e-6, .backend = backend};
        return agmm_plan_all_reduce_rmsnorm(plan, ctx, &d);
    }
    agmm_all_reduce_desc d = {.n = 100, .dtype = AGMM_DTYPE_BF16, .backend = backend};
    return agmm_plan_all_reduce(plan, ctx, &d);
}

static agmm_status query_rank(agmm_ctx *ctx, void *arg)
{
    query_result *res = (query_result *)arg + agmm_ctx_rank(ctx);
    static char sentinel;
    res->nope_plan_null = 1;
    for (int oi = 0; oi < NOPS; oi++) {
        agmm_plan *plan = (agmm_plan *)(void *)&sentinel; /* a refused plan must come back NULL */
        res->nope_status[oi] = plan_named(&plan, ctx, (agmm_op)oi, "nope");
        res->nope_plan_null &= plan == NULL;
        snprintf(res->nope_msg[oi], sizeof res->nope_msg[oi], "%s", agmm_last_error(ctx));
        if (plan != NULL && plan != (agmm_plan *)(void *)&sentinel)
            agmm_plan_destroy(plan);
    }
    for (int i = 0; i < 3; i++) {
        agmm_plan *plan = NULL;
        res->cross_status[i] = plan_named(&plan, ctx, cross[i].op, cross[i].name);
        snprintf(res->cross_msg[i], sizeof res->cross_msg[i], "%s", agmm_last_error(ctx));
        agmm_plan_destroy(plan);
    }
    /* The descriptor is copied: the backend string need not outlive the call. */
    char name[16];
    snprintf(name, sizeof name, "two_shot");
    agmm_plan *plan = NULL;
    res->copied_status = plan_named(&plan, ctx, AGMM_OP_ALL_REDUCE, name);
    snprintf(name, sizeof name, "XXXXXXXX");
    snprintf(res->copied_backend, sizeof res->copied_backend, "%s", agmm_plan_backend(plan));
    agmm_plan_destroy(plan);
    return AGMM_SUCCESS;
}

void test_backend_queries(void)
{
    agmm_world *world = test_cpu_world(2, 1.0);
    if (world == NULL)
        return;

    char why[AGMM_ERROR_LEN];
    int avail = agmm_backend_available(world, AGMM_OP_ALL_REDUCE, "nccl_plain", why, sizeof why);
    agmm_check(avail == 0 && strstr(why, "GPU") != NULL && strstr(why, "nccl_plain") != NULL,
               "agmm_backend_available(CPU world, all_reduce, \"nccl_plain\") = %d, the reason names it and GPUs: \"%s\"",
               avail, why);

    const agmm_op not_ops[] = {AGMM_OP_NONE, (agmm_op)NOPS, (agmm_op)9};
    for (size_t i = 0; i < sizeof not_ops / sizeof *not_ops; i++) {
        const char *names[] = {"auto", NULL, "one_shot"};
        int any = 0;
        for (int n = 0; n < 3; n++) {
            snprintf(why, sizeof why, "(unchanged)");
            any |= agmm_backend_available(n == 1 ? NULL : world, not_ops[i], names[n], why, sizeof why) != 0 ||
                   strstr(why, "is not an operation") == NULL;
        }
        agmm_check(!any, "agmm_backend_available(world, op=%d, auto / NULL / \"one_shot\") = 0, the reason saying it "
                         "is not an operation: \"%s\"",
                   (int)not_ops[i], why);
    }

    for (int oi = 0; oi < NOPS; oi++) {
        agmm_op op = (agmm_op)oi;
        snprintf(why, sizeof why, "(unchanged)");
        avail = agmm_backend_available(world, op, "nope", why, sizeof why);
        agmm_check(avail == 0 && strstr(why, "\"nope\"") != NULL && strstr(why, agmm_op_name(op)) != NULL &&
                       lists_every_backend(op, why) && agmm_backend_available(world, op, "nope", NULL, 0) == 0,
                   "agmm_backend_available(CPU world, %s, \"nope\") = %d, the reason names \"nope\", %s and every valid "
                   "backend (also 0 with why NULL): \"%s\"",
                   agmm_op_name(op), avail, agmm_op_name(op), why);
        int a_null = agmm_backend_available(world, op, NULL, why, sizeof why);
        int a_auto = agmm_backend_available(world, op, "auto", why, sizeof why);
        agmm_check(a_null == 1 && a_auto == 1, "agmm_backend_available(CPU world, %s, NULL / \"auto\") = %d / %d (want 1)",
                   agmm_op_name(op), a_null, a_auto);
    }
    const char *none = agmm_plan_backend(NULL);
    agmm_check(none != NULL && none[0] == '\0', "agmm_plan_backend(NULL) is \"\" (%s)", none ? "a string" : "NULL");

    query_result res[2];
    memset(res, 0, sizeof res);
    agmm_status st = agmm_world_run(world, query_rank, res);
    agmm_world_destroy(world);
    for (int oi = 0; oi < NOPS; oi++) {
        agmm_op op = (agmm_op)oi;
        int ok = st == AGMM_SUCCESS;
        for (int r = 0; r < 2; r++)
            ok &= res[r].nope_status[oi] == AGMM_ERR_INVALID_ARG && strstr(res[r].nope_msg[oi], "backend=nope") &&
                  lists_every_backend(op, res[r].nope_msg[oi]) && res[r].nope_plan_null;
        agmm_check(ok, "plan %s with backend \"nope\" W=2: %s, plan NULL, message names it and lists every valid backend: "
                       "\"%s\"",
                   agmm_op_name(op), agmm_status_str(res[0].nope_status[oi]), res[0].nope_msg[oi]);
    }
    for (int i = 0; i < 3; i++) {
        char needle[64];
        snprintf(needle, sizeof needle, "backend=%s", cross[i].name);
        int ok = st == AGMM_SUCCESS;
        for (int r = 0; r < 2; r++)
            ok &= res[r].cross_status[i] == AGMM_ERR_INVALID_ARG && strstr(res[r].cross_msg[i], needle) &&
                  lists_every_backend(cross[i].op, res[r].cross_msg[i]);
        agmm_check(ok, "plan %s with backend \"%s\" (another operation's) W=2: %s, message names %s: \"%s\"",
                   agmm_op_name(cross[i].op), cross[i].name, agmm_status_str(res[0].cross_status[i]), needle,
                   res[0].cross_msg[i]);
    }
    agmm_check(st == AGMM_SUCCESS && res[0].copied_status == AGMM_SUCCESS && res[1].copied_status == AGMM_SUCCESS &&
                   strcmp(res[0].copied_backend, "two_shot") == 0 && strcmp(res[1].copied_backend, "two_shot") == 0,
               "plan all_reduce with backend from a buffer overwritten after the call: %s, agmm_plan_backend \"%s\" "
               "(the descriptor is copied)",
               agmm_status_str(res[0].copied_status), res[0].copied_backend);
}

/* One limit's value, or -2 where the query failed. */
static int64_t limit_of(agmm_op op, const char *name, agmm_limit what)
{
    int64_t v = -1;
    return agmm_backend_limit(op, name, what, &v) == AGMM_SUCCESS ? v : -2;
}

/* ag_matmul's check without a world, at W = 2: 1 if it accepts the descriptor. */
static int mm_ok(int64_t m, int64_t n, int64_t k, agmm_layout layout, int splits)
{
    char why[AGMM_ERROR_LEN];
    agmm_ag_matmul_desc d = {.m = m, .n = n, .k = k, .b_layout = layout, .splits = splits};
    return agmm_ext_check_ag_matmul(&d, 2, why, sizeof why) == AGMM_SUCCESS;
}

void test_backend_limits(void)
{
    agmm_check(agmm_plan_op(NULL) == AGMM_OP_NONE && strcmp(agmm_op_name(AGMM_OP_NONE), "?") == 0,
               "agmm_plan_op(NULL) is AGMM_OP_NONE (%d), which names no operation", (int)agmm_plan_op(NULL));

    /* The operation's limits: the same for every backend and auto, and what the checks enforce. */
    const agmm_op mm = AGMM_OP_AG_MATMUL;
    const int64_t km = limit_of(mm, NULL, AGMM_LIMIT_K_MULTIPLE), nm = limit_of(mm, NULL, AGMM_LIMIT_N_MULTIPLE_ROW_B);
    const int64_t sm = limit_of(mm, NULL, AGMM_LIMIT_MAX_SPLITS);
    int same = 1;
    for (int i = 0; agmm_backend_name(mm, i) != NULL; i++) {
        const char *b = agmm_backend_name(mm, i);
        same &= limit_of(mm, b, AGMM_LIMIT_K_MULTIPLE) == km && limit_of(mm, b, AGMM_LIMIT_N_MULTIPLE_ROW_B) == nm &&
                limit_of(mm, b, AGMM_LIMIT_MAX_SPLITS) == sm && limit_of(mm, b, AGMM_LIMIT_MAX_RANKS) == AGMM_MAX_RANKS;
    }
    const agmm_layout col = AGMM_LAYOUT_COL_MAJOR, row = AGMM_LAYOUT_ROW_MAJOR;
    int enforced = km > 1 && nm > 1 && sm > 1 && mm_ok(8, 8, 3 * km, col, 0) && !mm_ok(8, 8, 3 * km - 1, col, 0) &&
                   mm_ok(8, 3 * nm, 8, row, 0) && !mm_ok(8, 3 * nm - 1, 8, row, 0) && mm_ok(8, 3 * nm - 1, 8, col, 0) &&
                   mm_ok(sm + 1, 8, 8, col, (int)sm) && !mm_ok(sm + 1, 8, 8, col, (int)sm + 1);
    agmm_check(same && enforced,
               "ag_matmul's limits, the same for every backend and auto: K a multiple of %lld, N of %lld with a "
               "row-major B, at most %lld splits, %d ranks; the descriptor check accepts each bound and refuses one past "
               "it",
               (long long)km, (long long)nm, (long long)sm, AGMM_MAX_RANKS);

    const agmm_op ar = AGMM_OP_ALL_REDUCE;
    const int64_t elems = limit_of(ar, "one_shot", AGMM_LIMIT_MAX_ELEMS);
    char why[AGMM_ERROR_LEN];
    agmm_all_reduce_desc at = {.n = elems}, past = {.n = elems + 1};
    agmm_check(elems > 0 && agmm_ext_check_all_reduce(&at, why, sizeof why) == AGMM_SUCCESS &&
                   agmm_ext_check_all_reduce(&past, why, sizeof why) == AGMM_ERR_INVALID_ARG &&
                   limit_of(ar, NULL, AGMM_LIMIT_K_MULTIPLE) == 0 && limit_of(ar, "nccl", AGMM_LIMIT_MAX_SPLITS) == 0,
               "all_reduce: at most %lld elements (checked: n at it accepted, one past refused); no K multiple or "
               "splits (0)",
               (long long)elems);

    /* A backend's own limit: pull's captured inputs; auto's is the strictest of its backends. */
    agmm_check(limit_of(mm, "pull", AGMM_LIMIT_CAPTURED_INPUTS) == 16 &&
                   limit_of(mm, "ce", AGMM_LIMIT_CAPTURED_INPUTS) == 0 &&
                   limit_of(mm, "fused", AGMM_LIMIT_CAPTURED_INPUTS) == 0 &&
                   limit_of(mm, "auto", AGMM_LIMIT_CAPTURED_INPUTS) == 16 &&
                   limit_of(ar, NULL, AGMM_LIMIT_CAPTURED_INPUTS) == 0,
               "captured inputs: pull 16, ce and fused none, ag_matmul's auto 16 (pull's), all_reduce's none");

    int64_t v = 0;
    agmm_check(agmm_backend_limit(mm, "nope", AGMM_LIMIT_K_MULTIPLE, &v) == AGMM_ERR_INVALID_ARG &&
                   agmm_backend_limit(mm, "pull", (agmm_limit)99, &v) == AGMM_ERR_INVALID_ARG &&
                   agmm_backend_limit(mm, "pull", AGMM_LIMIT_MAX_RANKS, NULL) == AGMM_ERR_INVALID_ARG &&
                   agmm_backend_limit(AGMM_OP_NONE, NULL, AGMM_LIMIT_MAX_RANKS, &v) == AGMM_ERR_INVALID_ARG,
               "agmm_backend_limit refuses an unknown backend, limit or operation and a NULL value (INVALID_ARG)");
}
