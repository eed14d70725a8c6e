/* A minimal test harness: each test file defines cases with AGMM_TEST and registers them in
 * tests/main lists; every check prints a PASS/FAIL line saying what it checked, and the run
 * ends with the "N passed, N failed[, N skipped]" line that CI reads. */
#ifndef AGMM_TESTS_HARNESS_H
#define AGMM_TESTS_HARNESS_H

#include <stdio.h>

typedef struct {
    int passed, failed, skipped;
} agmm_test_counts;

/* One global tally per test binary (tests are not part of the library). */
extern agmm_test_counts agmm_tests;

/* Records one check: prints "PASS <what>" or "FAIL <what>" and counts it. Returns ok. */
int agmm_check(int ok, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Records a skipped group: prints "SKIP <why>" to stdout and stderr. */
void agmm_skip(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* Prints the closing line; returns the process exit code (0 when nothing failed). */
int agmm_test_summary(void);

typedef void (*agmm_test_fn)(void);
typedef struct {
    const char *name;
    agmm_test_fn fn;
} agmm_test_case;

/* Runs the cases whose name contains `filter` (NULL: all) and returns the exit code. */
int agmm_test_main(const agmm_test_case *cases, int ncases, const char *filter);

/* What the process holds, read from /proc/self (the leak tests compare two of these). */
typedef struct {
    long rss_kb;    /* VmRSS: resident memory */
    long vm_kb;     /* VmSize: mapped address space */
    long maps;      /* mappings (lines of /proc/self/maps) */
    long fds;       /* open file descriptors (entries of /proc/self/fd) */
} agmm_proc_usage;
/* 0 on success, -1 where /proc cannot be read. */
int agmm_proc_usage_now(agmm_proc_usage *u);

#endif
