/* agmm-bench's command line: the usage text, the markdown tables the README quotes (--list-backends,
 * --list-knobs) and the parsing and checking of every option into bench_options (bench.h). A bad
 * option is an error naming it and what is allowed. */
#include <errno.h>
#include <float.h>
#include <libgen.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "bench.h"

static const char *const usage_head =
    "usage: agmm-bench [options]\n"
    "\n"
    "Runs every backend of an operation over a sweep, checks each result, times it and prints the\n"
    "seed's table (one column per backend, Best Backend) and the extra figures.\n"
    "\n"
    "  --op OP             ag_matmul (default), all_reduce, matmul_reduce_scatter,\n"
    "                      matmul_all_reduce or all_reduce_rmsnorm\n"
    "  --shape M,N,K       a matmul shape (the one option that repeats); ag_matmul: M = rows\n"
    "                      per rank; the row-parallel matmuls: M = rows of S (before the\n"
    "                      scatter), K = each rank's slice of the reduced dimension\n"
    "  --shapes A:B:S      cube shapes M=N=K from A to B step S (default on GPUs: 256:4096:128,\n"
    "                      the seed's 31 shapes, and for the row-parallel matmuls the model\n"
    "                      shapes 8192,8192,3584 and 8192,8192,1024, matmul_all_reduce first the\n"
    "                      decode shapes M=1,8,32,128 N=8192 K=3584; on the CPU: 64:256:64)\n"
    "  --sizes LIST        all_reduce elements per rank, comma-separated; 2^E allowed\n"
    "                      (default: the seed's 4093,4096,5000,8192,8193,16384,16380,16387,\n"
    "                      2^15..2^20, and 2^22, 2^24, 2^27 on GPUs)\n"
    "  --tokens LIST       all_reduce_rmsnorm rows T, comma-separated (default on GPUs:\n"
    "                      1,8,32,128,512,2048; on the CPU: 1,7,33); every T with every H\n"
    "  --hidden LIST       all_reduce_rmsnorm columns H, multiples of 8 (default on GPUs: 4096,8192;\n"
    "                      on the CPU: 264,1032); rows have bias and residual\n"
    "  --eps E             all_reduce_rmsnorm's epsilon (default 1e-6)\n"
    "  --backends LIST     comma-separated backend names, auto too (default: every backend of the\n"
    "                      op that runs in the world); the backends are listed below\n"
    "  --list-backends     print the backends as a markdown table and exit\n"
    "  --list-knobs        print the library's environment variables as a markdown table and exit\n"
    "  --world KIND        auto (default: GPUs if any, else the CPU), gpu, emulated, cpu\n"
    "  --ranks N           ranks (default: one per GPU; 4 on the CPU); with --world emulated,\n"
    "                      N ranks share the visible GPUs\n"
    "  --warmup N          untimed calls before timing (default 50 on GPUs, 2 on the CPU)\n"
    "  --iters N           timed calls (default 100 on GPUs, 5 on the CPU)\n"
    "  --turns N           rounds in which a row's backends and plain GEMMs take turns, each\n"
    "                      getting iters/N calls a round, the first rotating (default 5, at\n"
    "                      most --iters): each meets the same clocks\n"
    "  --alone             hold one backend at a time: each is planned, checked, timed and\n"
    "                      released before the next (what a row too big to hold them all gets)\n"
    "  --no-flush          do not flush the L2 cache before each timed call\n"
    "  --check             check correctness only, time nothing\n"
    "  --graph             also capture one run in a CUDA graph, check a replay against the run\n"
    "                      and time replays as extra figures (graph_us; GPU worlds only)\n"
    "  --splits S          ag_matmul's chunks per rank, for ce, fused and pull (default 1)\n"
    "  --b-layout L        the matmuls' B: col (default: B^T contiguous, the seed's layout) or row\n"
    "  --dtype T           all_reduce's element type: bf16 (default) or fp32\n"
    "  --timeout SEC       bound on every wait for a peer, 0.001..86400 (default: AGMM_TIMEOUT_S,\n"
    "                      below)\n"
    "  --csv FILE          write every figure as CSV\n"
    "  --json FILE         write every figure as JSON\n"
    "  --fault SPEC        inject a fault: rank=R,at=POINT,action=ACTION[,ms=N] (the README's\n"
    "                      AGMM_FAULT; POINT join, create, plan or run; ACTION delay, hang or\n"
    "                      exit)\n"
    "  --help              this text\n"
    "\n"
    "Every option but --shape is given at most once. An option of other operations than --op's\n"
    "(--sizes with ag_matmul, --eps with all_reduce, even at its default value) is an error.\n"
    "Each row's buffers are checked against the memory available before the row runs, and the\n"
    "output files before the sweep.\n"
    "Exit status: 0 every cell correct or skipped, 1 a wrong result or an error, 2 bad arguments.\n"
    "\n"
    "Under a launcher (torchrun --no-python, mpirun, srun, or RANK/WORLD_SIZE/MASTER_ADDR/MASTER_PORT\n"
    "set by hand) every process is one rank of one world (--world picks its kind; --ranks, if given,\n"
    "must equal the world size): rank 0 prints the table, the others only their errors, and every\n"
    "rank exits with the same status (docs/processes.md).\n";

/* The options, the backends of every operation of the library (agmm_ext_op_count), the knobs. */
void bench_usage(FILE *f)
{
    fputs(usage_head, f);
    fputs("\nBackends (the library's table):\n", f);
    for (agmm_op op = 0; (int)op < agmm_ext_op_count(); op++)
        for (int i = 0; agmm_backend_name(op, i) != NULL; i++)
            fprintf(f, "  %-21s %-11s %s\n", i == 0 ? agmm_op_name(op) : "", agmm_backend_name(op, i),
                    agmm_backend_summary(op, agmm_backend_name(op, i)));
    fputs("\nEnvironment (the library's knobs, src/core/knobs.h; a value not allowed is an error naming it):\n", f);
    for (int i = 0; i < AGMM_KNOB_COUNT; i++) {
        const agmm_knob *k = agmm_knob_at((agmm_knob_id)i);
        char allowed[256];
        agmm_knob_allowed(k, allowed, sizeof allowed);
        fprintf(f, "  %-20s %s; unset: %s\n  %-20s %s\n", k->var, allowed, k->def, "", k->doc);
    }
}

/* The knob table as markdown: the README's list is this output (tests/cli_test.sh checks). */
static void list_knobs(FILE *f)
{
    fputs("| variable | allowed | unset | what it does |\n|---|---|---|---|\n", f);
    for (int i = 0; i < AGMM_KNOB_COUNT; i++) {
        const agmm_knob *k = agmm_knob_at((agmm_knob_id)i);
        char allowed[256];
        agmm_knob_allowed(k, allowed, sizeof allowed);
        fprintf(f, "| `%s` | %s | %s | %s |\n", k->var, allowed, k->def, k->doc);
    }
}

/* The backend table as markdown: the README's table is this output (tests/cli_test.sh checks). */
static void list_backends(FILE *f)
{
    fputs("| op | backend | what it does |\n|---|---|---|\n", f);
    for (agmm_op op = 0; (int)op < agmm_ext_op_count(); op++)
        for (int i = 0; agmm_backend_name(op, i) != NULL; i++)
            fprintf(f, "| %s | `%s` | %s |\n", agmm_op_name(op), agmm_backend_name(op, i),
                    agmm_backend_summary(op, agmm_backend_name(op, i)));
}

char bench_who[40] = "agmm-bench";

/* *op = the library's operation called `name` (agmm_op_name): 0, else -1. */
static int op_named(const char *name, agmm_op *op)
{
    for (agmm_op o = 0; (int)o < agmm_ext_op_count(); o++)
        if (strcmp(name, agmm_op_name(o)) == 0) {
            *op = o;
            return 0;
        }
    return -1;
}

/* "ag_matmul, all_reduce ... or all_reduce_rmsnorm": the operations of the library in `ops` (bit
 * op set). */
static void op_list(char *out, size_t len, unsigned ops)
{
    int left = 0;
    for (agmm_op o = 0; (int)o < agmm_ext_op_count(); o++)
        left += (ops >> o) & 1;
    size_t used = 0;
    out[0] = '\0';
    for (agmm_op o = 0; (int)o < agmm_ext_op_count() && used < len; o++)
        if ((ops >> o) & 1) {
            left--;
            used += (size_t)snprintf(out + used, len - used, "%s%s", agmm_op_name(o),
                                     left > 1 ? ", " : left == 1 ? " or " : "");
        }
}

static int bad(const char *opt, const char *val, const char *allowed)
{
    if (val)
        fprintf(stderr, "%s: %s %s: %s (see --help)\n", bench_who, opt, val, allowed);
    else
        fprintf(stderr, "%s: %s: %s (see --help)\n", bench_who, opt, allowed);
    return 2;
}

#define MAX_OPTIONS 64

/* Whether `a` is an option, and whether it takes a value: the help text is the table of options
 * ("  --op OP  ..." takes one, "  --check  ..." does not), so an option exists once it is
 * documented. Returns its place in the table (-h is --help's short form), or -1. */
static int known_option(const char *a, int *takes_value)
{
    *takes_value = 0;
    if (strcmp(a, "-h") == 0)
        a = "--help";
    size_t len = strlen(a);
    if (len < 3 || strncmp(a, "--", 2) != 0)
        return -1;
    int index = 0;
    for (const char *p = strstr(usage_head, "\n  --"); p; p = strstr(p + 1, "\n  --"), index++) {
        if (strncmp(p + 3, a, len) == 0 && (p[3 + len] == ' ' || p[3 + len] == '\n')) {
            *takes_value = p[3 + len] == ' ' && p[4 + len] != ' ';
            return index < MAX_OPTIONS ? index : -1;
        }
    }
    return -1;
}

#define OPS_MATMUL (1u << AGMM_OP_AG_MATMUL | 1u << AGMM_OP_MATMUL_REDUCE_SCATTER | 1u << AGMM_OP_MATMUL_ALL_REDUCE)

/* The options of some operations only (bit op set): given with another --op, even at their default
 * value, they are an error. The others apply to every operation. */
static const struct {
    const char *name;
    unsigned ops;
} op_options[] = {
    {"--shape", OPS_MATMUL},
    {"--shapes", OPS_MATMUL},
    {"--b-layout", OPS_MATMUL},
    {"--splits", 1u << AGMM_OP_AG_MATMUL},  /* the other matmuls' descriptors have no splits */
    {"--sizes", 1u << AGMM_OP_ALL_REDUCE},
    {"--dtype", 1u << AGMM_OP_ALL_REDUCE},  /* the others are bf16 */
    {"--tokens", 1u << AGMM_OP_ALL_REDUCE_RMSNORM},
    {"--hidden", 1u << AGMM_OP_ALL_REDUCE_RMSNORM},
    {"--eps", 1u << AGMM_OP_ALL_REDUCE_RMSNORM},
};

/* 0 if every option given (seen, by place in the table of options) applies to op, else 2 after
 * naming the first that does not. */
static int check_op_options(agmm_op op, const int seen[MAX_OPTIONS])
{
    for (size_t i = 0; i < sizeof op_options / sizeof *op_options; i++) {
        int takes, at = known_option(op_options[i].name, &takes);
        if (at < 0 || !seen[at] || (op_options[i].ops >> op) & 1)
            continue;
        char ops[256], why[384];
        op_list(ops, sizeof ops, op_options[i].ops);
        agmm_format(why, sizeof why, "applies to --op %s, not %s", ops, agmm_op_name(op));
        return bad(op_options[i].name, NULL, why);
    }
    return 0;
}

/* An output file must be writable before the sweep, not found unwritable after it; 0 if it is. */
static int check_output(const char *opt, const char *path)
{
    struct stat sb;
    if (*path == '\0')
        return bad(opt, NULL, "needs a file name, not an empty string");
    if (stat(path, &sb) == 0) {
        if (S_ISDIR(sb.st_mode))
            return bad(opt, path, "is a directory, not a file");
        if (access(path, W_OK) != 0)
            return bad(opt, path, "the file exists and cannot be written");
        return 0;
    }
    if (errno != ENOENT)
        return bad(opt, path, strerror(errno));
    char copy[PATH_MAX];
    if (agmm_format(copy, sizeof copy, "%s", path) >= sizeof copy - 1)
        return bad(opt, path, "the path is too long");
    const char *dir = dirname(copy);
    char why[PATH_MAX + 64];
    if (stat(dir, &sb) != 0 || !S_ISDIR(sb.st_mode)) {
        agmm_format(why, sizeof why, "its folder %s does not exist", dir);
        return bad(opt, path, why);
    }
    if (access(dir, W_OK | X_OK) != 0) {
        agmm_format(why, sizeof why, "its folder %s is not writable", dir);
        return bad(opt, path, why);
    }
    return 0;
}

/* Parses a whole decimal integer or 2^E into [lo, hi]; 0 on success. */
static int parse_i64(const char *s, int64_t lo, int64_t hi, int64_t *out)
{
    if (s == NULL || *s == '\0')
        return -1;
    char *end;
    errno = 0;
    long long v;
    if (s[0] == '2' && s[1] == '^') {
        long e = strtol(s + 2, &end, 10);
        if (end == s + 2 || *end || errno || e < 0 || e > 62) /* "2^" alone is not 2^0 */
            return -1;
        v = 1LL << e;
    } else {
        v = strtoll(s, &end, 10);
        if (*end || errno)
            return -1;
    }
    if (v < lo || v > hi)
        return -1;
    *out = v;
    return 0;
}

static int parse_int(const char *s, int lo, int hi, int *out)
{
    int64_t v;
    if (parse_i64(s, lo, hi, &v))
        return -1;
    *out = (int)v;
    return 0;
}

/* Splits "a<sep>b<sep>c" into at most max fields of at most 31 chars; returns the count, or -1
 * with why (too many, an empty one, one too long) in why[96]. */
static int split(const char *s, char sep, char fields[][32], int max, char why[96])
{
    int n = 0;
    const char *p = s;
    for (;;) {
        const char *q = strchr(p, sep);
        size_t len = q ? (size_t)(q - p) : strlen(p);
        if (n == max || len == 0 || len > 31) {
            if (n == max)
                agmm_format(why, 96, "too many items (at most %d)", max);
            else if (len == 0)
                agmm_format(why, 96, "an empty item");
            else
                agmm_format(why, 96, "item '%.16s...' is longer than 31 characters", p);
            return -1;
        }
        memcpy(fields[n], p, len);
        fields[n][len] = '\0';
        n++;
        if (q == NULL)
            return n;
        p = q + 1;
    }
}

/* Checks a shape with the library's own rules, once the layout and splits are known (they may
 * come after --shape on the command line). W is not known yet: W * M is checked by the plan. */
int bench_check_shape(const bench_options *o, const int64_t shape[3], const char *opt, const char *val)
{
    agmm_ag_matmul_desc d = {.m = shape[0], .n = shape[1], .k = shape[2], .b_layout = o->b_layout,
                             .splits = o->splits};
    char why[512];
    agmm_status st = o->op == AGMM_OP_AG_MATMUL
                         ? agmm_ext_check_ag_matmul(&d, 1, why, sizeof why)
                         : agmm_ext_check_matmul_reduce(o->op, shape[0], shape[1], shape[2], o->b_layout, why, sizeof why);
    if (st != AGMM_SUCCESS)
        return bad(opt, val, why);
    return 0;
}

static int add_shape(bench_options *o, int64_t m, int64_t n, int64_t k, const char *opt, const char *val)
{
    if (o->nrows == BENCH_MAX_ROWS)
        return bad(opt, val, "too many rows (at most 256)");
    o->shapes[o->nrows][0] = m;
    o->shapes[o->nrows][1] = n;
    o->shapes[o->nrows][2] = k;
    return bench_check_shape(o, o->shapes[o->nrows++], opt, val);
}

/* A backend must belong to the op (the library's table says) and be listed once: the report
 * keys its columns, CSV rows and JSON members by the backend's name. Names are replaced by the
 * library's own strings, which outlive argv. */
static int check_backends(bench_options *o, char names[][32])
{
    for (int b = 0; b < o->nbackends; b++) {
        const char *name = names[b];
        if (strcmp(name, "auto") == 0) {
            o->backends[b] = "auto";
        } else if (agmm_backend_summary(o->op, name) == NULL) {
            char why[512];
            agmm_backend_available(NULL, o->op, name, why, sizeof why);
            return bad("--backends", name, why);
        } else {
            for (int i = 0; agmm_backend_name(o->op, i) != NULL; i++)
                if (strcmp(agmm_backend_name(o->op, i), name) == 0)
                    o->backends[b] = agmm_backend_name(o->op, i);
        }
        for (int c = 0; c < b; c++)
            if (strcmp(o->backends[c], o->backends[b]) == 0)
                return bad("--backends", name, "is listed twice");
    }
    return 0;
}

/* all_reduce_rmsnorm's rows: every T of `tokens` with every H of `hidden` (NULL: the world's
 * default, filled in apply_defaults), each checked with the library's rules (eps is checked
 * before: check_eps). 0, or 2 after printing the problem. */
static int parse_arn_rows(bench_options *o, const char *tokens, const char *hidden)
{
    if (!tokens && !hidden)
        return 0;
    if (!tokens || !hidden)
        return bad(tokens ? "--tokens" : "--hidden", NULL, "--tokens and --hidden go together (every T with every H)");
    char t[BENCH_MAX_ROWS][32], h[BENCH_MAX_ROWS][32], why[512];
    int nt = split(tokens, ',', t, BENCH_MAX_ROWS, why);
    if (nt < 0)
        return bad("--tokens", tokens, why);
    int nh = split(hidden, ',', h, BENCH_MAX_ROWS, why);
    if (nh < 0)
        return bad("--hidden", hidden, why);
    if (nt * nh > BENCH_MAX_ROWS)
        return bad("--tokens/--hidden", NULL, "too many rows (at most 256 T x H pairs)");
    for (int i = 0; i < nt; i++)
        for (int k = 0; k < nh; k++) {
            agmm_all_reduce_rmsnorm_desc d = {.eps = o->eps};
            if (parse_i64(t[i], 1, (int64_t)1 << 40, &d.tokens))
                return bad("--tokens", t[i], "must be an integer (or 2^E) in 1..2^40");
            if (parse_i64(h[k], 1, (int64_t)1 << 40, &d.hidden))
                return bad("--hidden", h[k], "must be an integer (or 2^E) in 1..2^40");
            if (agmm_ext_check_all_reduce_rmsnorm(&d, why, sizeof why) != AGMM_SUCCESS)
                return bad(d.hidden % 8 || d.hidden < 8 ? "--hidden" : "--tokens/--hidden", NULL, why);
            o->shapes[o->nrows][0] = d.tokens;
            o->shapes[o->nrows][1] = d.hidden;
            o->shapes[o->nrows++][2] = 0;
        }
    return 0;
}

/* all_reduce_rmsnorm's eps by the library's rule, whatever the rows (the default sweep's too): 0, or
 * 2 after naming --eps. */
static int check_eps(double eps, const char *arg)
{
    agmm_all_reduce_rmsnorm_desc d = {.tokens = 1, .hidden = 8, .eps = eps};
    char why[AGMM_ERROR_LEN];
    if (agmm_ext_check_all_reduce_rmsnorm(&d, why, sizeof why) == AGMM_SUCCESS)
        return 0;
    return bad("--eps", arg, why);
}

int bench_parse(int argc, char **argv, bench_options *o)
{
    memset(o, 0, sizeof *o);
    o->warmup = o->iters = -1;
    o->flush = 1;
    o->b_layout = AGMM_LAYOUT_COL_MAJOR;
    o->dtype = AGMM_DTYPE_BF16;
    o->eps = 1e-6;
    const char *shapes = NULL, *sizes = NULL, *tokens = NULL, *hidden = NULL, *eps_arg = NULL;
    int seen[MAX_OPTIONS] = {0}; /* times each option was given, by place in the table of options */
    const char *shape_args[BENCH_MAX_ROWS];
    char backend_names[BENCH_MAX_BACKENDS][32], why[AGMM_ERROR_LEN];
    int nshape_flags = 0;
    const agmm_knob *timeout_knob = agmm_knob_at(AGMM_KNOB_TIMEOUT_S);
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        int takes = 1, wants_value = 0, at = known_option(a, &wants_value);
        if (at < 0)
            return bad(a, NULL, "unknown option");
        if (wants_value && v == NULL)
            return bad(a, NULL, "needs a value");
        /* A value is never an option: "--csv --check" would write a file named --check. Numbers
         * start with one dash at most. */
        if (wants_value && strncmp(v, "--", 2) == 0) {
            int ignored;
            const int is_option = known_option(v, &ignored) >= 0;
            agmm_format(why, sizeof why, "needs a value, got %s%s%s", is_option ? "the option " : "", v,
                        is_option ? "" : " (values never start with --)");
            return bad(a, NULL, why);
        }
        if (seen[at]++ && strcmp(a, "--shape") != 0)
            return bad(a, NULL, "is given twice (every option but --shape is given once)");
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            bench_usage(stdout);
            return 1;
        } else if (!strcmp(a, "--list-backends")) {
            list_backends(stdout);
            return 1;
        } else if (!strcmp(a, "--list-knobs")) {
            list_knobs(stdout);
            return 1;
        } else if (!strcmp(a, "--no-flush")) {
            o->flush = 0, takes = 0;
        } else if (!strcmp(a, "--check")) {
            o->check_only = 1, takes = 0;
        } else if (!strcmp(a, "--graph")) {
            o->graph = 1, takes = 0;
        } else if (!strcmp(a, "--op")) {
            if (op_named(v, &o->op) != 0) {
                char names[256], allowed[272];
                op_list(names, sizeof names, (1u << agmm_ext_op_count()) - 1);
                agmm_format(allowed, sizeof allowed, "must be %s", names);
                return bad(a, v, allowed);
            }
        } else if (!strcmp(a, "--shape")) {
            char f[3][32];
            if (nshape_flags == BENCH_MAX_ROWS)
                return bad(a, v, "too many rows (at most 256)");
            int n = split(v, ',', f, 3, why);
            if (n < 0)
                return bad(a, v, why);
            if (n != 3 || parse_i64(f[0], 1, INT64_MAX, &o->shapes[nshape_flags][0]) ||
                parse_i64(f[1], 1, INT64_MAX, &o->shapes[nshape_flags][1]) ||
                parse_i64(f[2], 1, INT64_MAX, &o->shapes[nshape_flags][2]))
                return bad(a, v, "must be M,N,K with three integers >= 1");
            shape_args[nshape_flags++] = v;
        } else if (!strcmp(a, "--shapes")) {
            shapes = v;
        } else if (!strcmp(a, "--sizes")) {
            sizes = v;
        } else if (!strcmp(a, "--tokens")) {
            tokens = v;
        } else if (!strcmp(a, "--hidden")) {
            hidden = v;
        } else if (!strcmp(a, "--eps")) {
            char *end;
            errno = 0;
            o->eps = strtod(v, &end);
            /* Out of a double's range (ERANGE) is left to check_eps: the library's rule says why. */
            if (*end || signbit(o->eps) || !(o->eps > 0 || errno == ERANGE))
                return bad(a, v, "must be a number > 0");
            eps_arg = v;
        } else if (!strcmp(a, "--backends")) {
            int n = split(v, ',', backend_names, BENCH_MAX_BACKENDS, why);
            if (n < 0)
                return bad(a, v, why);
            o->nbackends = n;
        } else if (!strcmp(a, "--world")) {
            if (!strcmp(v, "auto")) o->world = AGMM_WORLD_AUTO;
            else if (!strcmp(v, "gpu")) o->world = AGMM_WORLD_GPU;
            else if (!strcmp(v, "emulated")) o->world = AGMM_WORLD_EMULATED;
            else if (!strcmp(v, "cpu")) o->world = AGMM_WORLD_CPU;
            else return bad(a, v, "must be auto, gpu, emulated or cpu");
        } else if (!strcmp(a, "--ranks")) {
            if (parse_int(v, 1, AGMM_MAX_RANKS, &o->nranks)) return bad(a, v, "must be an integer in 1..64");
        } else if (!strcmp(a, "--warmup")) {
            if (parse_int(v, 0, 1000000, &o->warmup)) return bad(a, v, "must be an integer in 0..1000000");
        } else if (!strcmp(a, "--iters")) {
            if (parse_int(v, 1, 100000, &o->iters)) return bad(a, v, "must be an integer in 1..100000");
        } else if (!strcmp(a, "--turns")) {
            if (parse_int(v, 1, 100000, &o->turns)) return bad(a, v, "must be an integer in 1..100000");
        } else if (!strcmp(a, "--alone")) {
            o->alone = 1, takes = 0;
        } else if (!strcmp(a, "--splits")) {
            if (parse_int(v, 1, 1024, &o->splits)) return bad(a, v, "must be an integer in 1..1024");
        } else if (!strcmp(a, "--b-layout")) {
            if (!strcmp(v, "col")) o->b_layout = AGMM_LAYOUT_COL_MAJOR;
            else if (!strcmp(v, "row")) o->b_layout = AGMM_LAYOUT_ROW_MAJOR;
            else return bad(a, v, "must be col or row");
        } else if (!strcmp(a, "--dtype")) {
            if (!strcmp(v, "bf16")) o->dtype = AGMM_DTYPE_BF16;
            else if (!strcmp(v, "fp32")) o->dtype = AGMM_DTYPE_F32;
            else return bad(a, v, "must be bf16 or fp32");
        } else if (!strcmp(a, "--timeout")) {
            /* The library's range for a world's timeout (AGMM_TIMEOUT_S's); its 0, the default, is
             * leaving --timeout out. */
            char *end;
            errno = 0;
            o->timeout_s = strtod(v, &end);
            if (*end || errno || !(o->timeout_s >= timeout_knob->min && o->timeout_s <= timeout_knob->max)) {
                agmm_format(why, sizeof why, "must be seconds in %g..%g", timeout_knob->min, timeout_knob->max);
                return bad(a, v, why);
            }
        } else if (!strcmp(a, "--csv")) {
            o->csv_path = v;
        } else if (!strcmp(a, "--json")) {
            o->json_path = v;
        } else if (!strcmp(a, "--fault")) {
            if (*v == '\0')
                return bad(a, NULL, "needs a spec rank=R,at=POINT,action=ACTION[,ms=N], not an empty string");
            o->fault = v;
        } else {
            return bad(a, NULL, "unknown option");
        }
        i += takes;
    }
    if (check_op_options(o->op, seen) || (eps_arg && check_eps(o->eps, eps_arg)))
        return 2;
    if (check_backends(o, backend_names))
        return 2;
    if (o->turns > 0 && o->iters > 0 && o->turns > o->iters) {
        agmm_format(why, sizeof why, "must be at most --iters (%d): every round times each figure at least once",
                    o->iters);
        char val[16];
        snprintf(val, sizeof val, "%d", o->turns);
        return bad("--turns", val, why);
    }
    o->nrows = nshape_flags;
    for (int i = 0; i < nshape_flags; i++)
        if (bench_check_shape(o, o->shapes[i], "--shape", shape_args[i]))
            return 2;
    if (shapes) {
        char f[3][32];
        int64_t lo, hi, step;
        int n = split(shapes, ':', f, 3, why);
        if (n < 0)
            return bad("--shapes", shapes, why);
        if (n != 3 || parse_i64(f[0], 1, 1 << 20, &lo) || parse_i64(f[1], lo, 1 << 20, &hi) ||
            parse_i64(f[2], 1, 1 << 20, &step))
            return bad("--shapes", shapes, "must be FROM:TO:STEP with 1 <= FROM <= TO and STEP >= 1");
        for (int64_t s = lo; s <= hi; s += step)
            if (add_shape(o, s, s, s, "--shapes", shapes))
                return 2;
    }
    if (sizes) {
        char f[BENCH_MAX_ROWS][32];
        int n = split(sizes, ',', f, BENCH_MAX_ROWS, why);
        if (n < 0)
            return bad("--sizes", sizes, why);
        for (int i = 0; i < n; i++)
            if (parse_i64(f[i], 1, (int64_t)1 << 40, &o->sizes[i]))
                return bad("--sizes", f[i], "must be an integer (or 2^E) in 1..2^40");
        o->nrows = n;
    }
    if (o->op == AGMM_OP_ALL_REDUCE_RMSNORM && parse_arn_rows(o, tokens, hidden))
        return 2;
    if ((o->csv_path && check_output("--csv", o->csv_path)) || (o->json_path && check_output("--json", o->json_path)))
        return 2;
    /* The library's knobs are checked here, so a bad one is exit 2 before any device starts. */
    agmm_error knob_err = {AGMM_SUCCESS, ""};
    agmm_knob_value fault;
    if (agmm_knobs_check(&knob_err) != AGMM_SUCCESS)
        return bad("environment", NULL, agmm_error_detail(knob_err.msg));
    /* A fault spec, from --fault or the environment, is checked here (exit 2 with the grammar);
     * --fault reaches the library as AGMM_FAULT. */
    agmm_knob_read(AGMM_KNOB_FAULT, &fault, &knob_err);
    const char *spec = o->fault ? o->fault : fault.text;
    if (spec && agmm_ext_check_fault(spec, why, sizeof why) != AGMM_SUCCESS)
        return bad(o->fault ? "--fault" : "AGMM_FAULT", spec, why);
    if (o->fault && setenv("AGMM_FAULT", o->fault, 1) != 0)
        return bad("--fault", o->fault, strerror(errno));
    return 0;
}
