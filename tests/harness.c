/* The test harness (harness.h). */
#include "harness.h"

#include <dirent.h>
#include <stdarg.h>
#include <string.h>

agmm_test_counts agmm_tests;

int agmm_check(int ok, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fputs(ok ? "PASS " : "FAIL ", stdout);
    vprintf(fmt, ap);
    fputc('\n', stdout);
    va_end(ap);
    fflush(stdout);
    if (ok)
        agmm_tests.passed++;
    else
        agmm_tests.failed++;
    return ok;
}

void agmm_skip(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fputs("SKIP ", stdout);
    vprintf(fmt, ap);
    fputc('\n', stdout);
    va_end(ap);
    va_start(ap, fmt);
    fputs("SKIP ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    fflush(stdout);
    agmm_tests.skipped++;
}

int agmm_test_summary(void)
{
    printf("%d passed, %d failed, %d skipped\n", agmm_tests.passed, agmm_tests.failed, agmm_tests.skipped);
    return agmm_tests.failed ? 1 : 0;
}

int agmm_test_main(const agmm_test_case *cases, int ncases, const char *filter)
{
    for (int i = 0; i < ncases; i++) {
        if (filter && !strstr(cases[i].name, filter))
            continue;
        printf("== %s\n", cases[i].name);
        fflush(stdout);
        cases[i].fn();
    }
    return agmm_test_summary();
}

int agmm_proc_usage_now(agmm_proc_usage *u)
{
    memset(u, 0, sizeof *u);
    FILE *f = fopen("/proc/self/status", "r");
    if (f == NULL)
        return -1;
    char line[256];
    while (fgets(line, sizeof line, f)) {
        sscanf(line, "VmRSS: %ld", &u->rss_kb);
        sscanf(line, "VmSize: %ld", &u->vm_kb);
    }
    fclose(f);
    f = fopen("/proc/self/maps", "r");
    if (f == NULL)
        return -1;
    for (int c; (c = fgetc(f)) != EOF;)
        u->maps += c == '\n';
    fclose(f);
    DIR *d = opendir("/proc/self/fd");
    if (d == NULL)
        return -1;
    for (struct dirent *e; (e = readdir(d)) != NULL;)
        u->fds += e->d_name[0] != '.';
    closedir(d);
    u->fds--; /* the directory stream's own descriptor */
    return 0;
}
