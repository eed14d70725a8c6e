/* Text for messages: formatting into a fixed buffer that never cuts a message silently, byte
 * counts for people, and lists of ranks. */
#ifndef AGMM_CORE_TEXT_H
#define AGMM_CORE_TEXT_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

/* What ends a message that did not fit its buffer: "…(truncated)" (UTF-8). */
#define AGMM_TRUNCATED "\xe2\x80\xa6(truncated)"

/* vsnprintf into buf (len bytes; nothing is written where len is 0). A message longer than buf ends, where it was cut, with
 * AGMM_TRUNCATED instead of stopping mid-word unannounced (never inside a UTF-8 character).
 * Returns the length written. */
size_t agmm_vformat(char *buf, size_t len, const char *fmt, va_list ap);
size_t agmm_format(char *buf, size_t len, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;

/* "512 B", "2.0 KiB", "15.3 GiB": a byte count for messages. By value, so that
 * printf("%s", agmm_bytes(n).s) needs no buffer of its own. */
typedef struct {
    char s[24];
} agmm_bytes_text;
agmm_bytes_text agmm_bytes(uint64_t bytes);

/* The ranks of `mask` (bit r: rank r) as "rank 2", "ranks 1 and 4", "ranks 0, 3 and 5-9". */
size_t agmm_format_ranks(char *buf, size_t len, uint64_t mask);

#endif
