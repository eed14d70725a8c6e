/* Every knob of the library, declared once: each environment variable it reads, with its default,
 * what it allows and one line for users. The library reads a knob only through agmm_knob_read, so
 * a bad value is always an error naming the variable and what it allows; world creation checks
 * them all first (agmm_knobs_check), so a typo fails at once rather than at the first plan.
 * agmm-bench prints this table (--help, and --list-knobs for the README's copy, which
 * tests/cli_test.sh compares with it).
 *
 * Constants that are not here are internal on purpose, each with its reason beside it: sizes of
 * buffers and messages, the CPU world's waiting policy (src/cpu/flags.c), the GEMM engine's and
 * the all-reduce kernels' compile-time tiles, floors under NCCL's own start-up. */
#ifndef AGMM_CORE_KNOBS_H
#define AGMM_CORE_KNOBS_H

#include <stddef.h>

#include "agmm.h"
#include "error.h"

typedef enum {
    AGMM_KNOB_CHOICE,   /* one of the words of `allowed` ("error|warn|info|debug") */
    AGMM_KNOB_NUMBER,   /* a decimal number in [min, max] */
    AGMM_KNOB_INTEGER,  /* a whole number in [min, max] */
    AGMM_KNOB_TEXT      /* any text; `allowed` says what it means */
} agmm_knob_kind;

/* X(ID, kind, default, allowed, min, max, doc), one line per knob, its variable AGMM_<ID>.
 * default: the value that applies while the variable is unset, as it is written ("5", "warn");
 * for a CHOICE whose default is a rule rather than one of its words, and for TEXT, the rule in
 * words. An empty value is unset, except for TEXT knobs, whose callers give "" its meaning. */
#define AGMM_KNOBS(X)                                                                                                  \
    X(LOG, AGMM_KNOB_CHOICE, "warn", "error|warn|info|debug", 0, 0,                                                   \
      "how much the library writes to stderr, each line prefixed with the rank")                                      \
    X(TIMEOUT_S, AGMM_KNOB_NUMBER, "5", "seconds", 0.001, 86400,                                                      \
      "bound on every wait for a peer where the world's config leaves timeout_s 0")                                   \
    X(TUNE, AGMM_KNOB_CHOICE, "1 with GPUs, 0 in the CPU world", "0|1", 0, 0,                                         \
      "whether auto measures the backends of a new shape (1; a cached choice first) or takes the static rule (0, "    \
      "no cache); rank 0's value counts")                                                                              \
    X(TUNE_CACHE, AGMM_KNOB_TEXT, "$XDG_CACHE_HOME/agmm/tune.txt, else ~/.cache/agmm/tune.txt", "a file; empty: none", \
      0, 0, "where auto keeps its choices (docs/auto.md)")                                                             \
    X(TUNE_BUDGET_MS, AGMM_KNOB_NUMBER, "100", "milliseconds", 1, 60000,                                              \
      "auto's timed runs of a new shape, shared by its candidates (each gets at least one run); rank 0's value "      \
      "counts")                                                                                                        \
    X(TUNE_RUNS, AGMM_KNOB_INTEGER, "20", "runs", 1, 1000,                                                             \
      "the most timed runs of each candidate auto measures; rank 0's value counts")                                    \
    X(LT_TUNE, AGMM_KNOB_CHOICE, "1", "0|1", 0, 0,                                                                  \
      "whether a plan's cuBLASLt GEMMs time cuBLASLt's first 8 algorithms on a GPU of their own and keep the "        \
      "fastest (1; once per shape and process) or take its heuristic's first (0: the same algorithm every run)")     \
    X(CHECK_RUNS, AGMM_KNOB_CHOICE, "0", "0|1", 0, 0,                                                               \
      "1: before every run the ranks compare which plan they run, its run count and where its input is, in one "     \
      "host exchange per run, and all fail naming the rank that differs (for debugging; rank 0's value when the "    \
      "world is made counts; a capture is checked as it is captured; across hosts the exchange goes through NCCL "   \
      "and waits for the rank's previous run, so capture with it unset there)")                                      \
    X(FAULT, AGMM_KNOB_TEXT, "none", "rank=R,at=POINT,action=ACTION[,ms=N]", 0, 0,                                    \
      "injects a fault into one rank, for tests (README, \"Fault injection\")")                                       \
    X(JOB_ID, AGMM_KNOB_TEXT, "the launcher's job", "text of at most 243 bytes", 0, 0,                               \
      "names a job of processes: equal in its processes, different between jobs on a host (docs/processes.md)")      \
    X(HOSTNAME, AGMM_KNOB_TEXT, "gethostname()", "a name", 0, 0,                                                      \
      "this process's host as a process world compares them (tests make one host look like several)")                \
    X(NCCL_BLOCKING, AGMM_KNOB_CHOICE, "1", "0|1", 0, 0,                                                               \
      "0 makes agmm's NCCL communicators nonblocking (docs/processes.md says why they are not by default)")

typedef enum {
#define AGMM_KNOB_ID(id, ...) AGMM_KNOB_##id,
    AGMM_KNOBS(AGMM_KNOB_ID)
#undef AGMM_KNOB_ID
    AGMM_KNOB_COUNT
} agmm_knob_id;

typedef struct {
    const char *var;        /* "AGMM_LOG" */
    agmm_knob_kind kind;
    const char *def;
    const char *allowed;
    double min, max;        /* NUMBER and INTEGER */
    const char *doc;
} agmm_knob;

/* The knob `id` (< AGMM_KNOB_COUNT), for listings. */
const agmm_knob *agmm_knob_at(agmm_knob_id id);

/* One reading of a knob. */
typedef struct {
    const char *text;  /* the variable's value; NULL: unset (or empty, but for TEXT knobs) */
    double number;     /* NUMBER, INTEGER: the value, else the default */
    int choice;        /* CHOICE: the index in `allowed` of the value, else of the default; -1: unset
                          and the default is a rule (the caller's) */
} agmm_knob_value;

/* Reads knob `id` from the environment. AGMM_ERR_INVALID_ARG for a value it does not allow,
 * naming the variable, the value and what is allowed ("AGMM_LOG=verbose: must be one of error,
 * warn, info, debug (unset: warn)"); *out then holds the default. Local. A TEXT knob is never
 * refused here: its reader judges it (AGMM_FAULT's grammar, core/fault.c). */
agmm_status agmm_knob_read(agmm_knob_id id, agmm_knob_value *out, agmm_error *err);

/* Reads every knob: the first bad one's error. Local. */
agmm_status agmm_knobs_check(agmm_error *err);

/* The log level (AGMM_LOG_*, core/error.h) AGMM_LOG asks for; its default where the value is bad
 * (world creation refuses that first). */
int agmm_log_level_from_env(void);

/* What k allows, as --help, the README and errors say it: "one of error, warn, info, debug", "a
 * number in 0.001..86400 (seconds)", or a TEXT knob's description. */
size_t agmm_knob_allowed(const agmm_knob *k, char *buf, size_t len);

#endif
