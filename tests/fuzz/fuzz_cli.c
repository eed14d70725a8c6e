/* libFuzzer target: agmm-bench's command line (bench_parse, tools/agmm_bench.c). The input is the
 * arguments, separated by NUL bytes. Whatever they are, the parser must return 0, 1 or 2 and
 * leave the options consistent; the sanitizers (address, undefined) catch the rest. Built and run
 * by tests/fuzz/run.sh. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"

enum { MAX_ARGS = 64 };

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    /* A private, NUL-terminated copy: argv strings must not run past the input. */
    char *text = malloc(size + 1);
    if (text == NULL)
        return 0;
    memcpy(text, data, size);
    text[size] = '\0';
    char *argv[MAX_ARGS + 2] = {"agmm-bench"};
    int argc = 1;
    for (size_t at = 0; at <= size && argc <= MAX_ARGS; at += strlen(text + at) + 1)
        argv[argc++] = text + at;
    argv[argc] = NULL;
    /* Each input on its own: a --fault of an earlier input must not stay in the environment. */
    unsetenv("AGMM_FAULT");
    static bench_options opt;
    int rc = bench_parse(argc, argv, &opt);
    if (rc < 0 || rc > 2)
        abort();
    if (rc == 0 && (opt.nrows < 0 || opt.nrows > BENCH_MAX_ROWS || opt.nbackends < 0 ||
                    opt.nbackends > BENCH_MAX_BACKENDS))
        abort();
    free(text);
    return 0;
}
