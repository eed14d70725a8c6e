/* Error records and the macros that fill them. A failing call records "file:line: detail" once,
 * where the failure starts, and returns its status up the stack; the public API copies the
 * detail into agmm_last_error(ctx). Nothing here prints unless asked to log. */
#ifndef AGMM_CORE_ERROR_H
#define AGMM_CORE_ERROR_H

#include <stdarg.h>
#include <stddef.h>
#include "agmm.h"

#define AGMM_ERROR_LEN 512

typedef struct {
    agmm_status status;
    char msg[AGMM_ERROR_LEN];
} agmm_error;

/* Records status and a printf-style detail prefixed with file:line; returns status. Keeps the
 * first error: a later failure during clean-up does not overwrite the cause. */
agmm_status agmm_error_set(agmm_error *err, agmm_status status, const char *file, int line,
                           const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 5, 6)))
#endif
    ;
void agmm_error_clear(agmm_error *err);
/* A record's message without its "file:line: " prefix: what a banner or a peer's message quotes. */
const char *agmm_error_detail(const char *msg);

/* Records a failure and returns it from the enclosing function. */
#define AGMM_FAIL(err, status, ...) agmm_error_set((err), (status), __FILE__, __LINE__, __VA_ARGS__)

/* Evaluates an agmm_status expression; on failure jumps to the function's `fail` label with
 * `st` holding it (the callee has already recorded the detail). */
#define AGMM_TRY(st, expr)                 \
    do {                                   \
        (st) = (expr);                     \
        if ((st) != AGMM_SUCCESS)          \
            goto fail;                     \
    } while (0)

/* Log levels, in the order of the AGMM_LOG knob's words (agmm_log_level_from_env, core/knobs.h). */
enum { AGMM_LOG_ERROR = 0, AGMM_LOG_WARN, AGMM_LOG_INFO, AGMM_LOG_DEBUG };
/* Writes "[agmm rank R] message" to stderr when level <= threshold. */
void agmm_log(int threshold, int level, int rank, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 4, 5)))
#endif
    ;

#endif /* AGMM_CORE_ERROR_H */
