/* Messages are never cut silently (src/core/text.c, error.c): a record too long for its buffer ends
 * with "…(truncated)" where it was cut, never inside a UTF-8 character; the stderr logger has no
 * length limit at all; rank lists and byte counts read as words. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/error.h"
#include "core/text.h"
#include "cpu_tests.h"
#include "harness.h"

static int ends_with(const char *s, const char *tail)
{
    size_t n = strlen(s), t = strlen(tail);
    return n >= t && strcmp(s + n - t, tail) == 0;
}

/* 1 if s is valid UTF-8 (the marker's ellipsis included). */
static int valid_utf8(const char *s)
{
    for (const unsigned char *p = (const unsigned char *)s; *p;) {
        int len = *p < 0x80 ? 1 : (*p & 0xe0) == 0xc0 ? 2 : (*p & 0xf0) == 0xe0 ? 3 : (*p & 0xf8) == 0xf0 ? 4 : 0;
        if (len == 0)
            return 0;
        for (int i = 1; i < len; i++)
            if ((p[i] & 0xc0) != 0x80)
                return 0;
        p += len;
    }
    return 1;
}

void test_messages_truncation(void)
{
    /* An error record: a detail three times its size. */
    char longer[3 * AGMM_ERROR_LEN];
    memset(longer, 'x', sizeof longer - 1);
    longer[sizeof longer - 1] = '\0';
    agmm_error err = {0};
    agmm_error_set(&err, AGMM_ERR_INVALID_ARG, "dir/file.c", 7, "%s", longer);
    agmm_check(strlen(err.msg) < AGMM_ERROR_LEN && ends_with(err.msg, AGMM_TRUNCATED) && strncmp(err.msg, "file.c:7: xxx", 13) == 0,
               "an error record of %zu characters is cut to %zu, ending with \"" AGMM_TRUNCATED "\"", sizeof longer - 1,
               strlen(err.msg));
    agmm_error fits = {0};
    agmm_error_set(&fits, AGMM_ERR_INVALID_ARG, "f.c", 1, "%s", "short");
    agmm_check(strcmp(fits.msg, "f.c:1: short") == 0, "a record that fits is left alone: \"%s\"", fits.msg);

    /* Cut in the middle of multi-byte characters, at every length too short for the text: the
     * marker lands on a character boundary. */
    const char *text = "\xc3\x97\xc3\x97\xe2\x80\xa6\xe2\x80\xa6\xc3\x97\xc3\x97\xc3\x97\xc3\x97\xc3\x97\xc3\x97"
                       "\xc3\x97\xc3\x97\xc3\x97\xc3\x97\xc3\x97\xc3\x97\xc3\x97\xc3\x97\xc3\x97";
    int whole = 1, marked = 1;
    for (size_t len = sizeof AGMM_TRUNCATED; len <= strlen(text); len++) {
        char buf[64];
        agmm_format(buf, len, "%s", text);
        whole &= valid_utf8(buf) && strlen(buf) < len;
        marked &= ends_with(buf, AGMM_TRUNCATED);
    }
    agmm_check(whole && marked, "text of 2- and 3-byte characters cut at every length: valid UTF-8, marked");
    char tiny[4];
    agmm_format(tiny, sizeof tiny, "%s", "too long");
    agmm_check(tiny[0] == '\0', "a buffer too small for the marker gets an empty string, not a cut one");
}

void test_messages_log_whole(void)
{
    /* The logger writes any length: 5000 characters come out in one line. */
    enum { LEN = 5000 };
    char *text = malloc(LEN + 1);
    memset(text, 'y', LEN);
    memcpy(text + LEN - 3, "END", 3);
    text[LEN] = '\0';
    FILE *captured = tmpfile();
    fflush(stderr);
    int saved = dup(2);
    dup2(fileno(captured), 2);
    agmm_log(AGMM_LOG_WARN, AGMM_LOG_ERROR, 3, "%s", text);
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    rewind(captured);
    char *line = malloc(2 * LEN);
    int ok = fgets(line, 2 * LEN, captured) != NULL;
    fclose(captured);
    size_t got = ok ? strlen(line) : 0;
    ok = ok && strncmp(line, "[agmm rank 3] yyy", 17) == 0 && got == strlen("[agmm rank 3] ") + LEN + 1 &&
         strncmp(line + got - 4, "END\n", 4) == 0;
    agmm_check(ok, "agmm_log writes a %d-character message whole (%zu characters with its prefix and newline)", LEN,
               got);
    free(line);
    free(text);
}

void test_messages_words(void)
{
    static const struct {
        uint64_t mask;
        const char *text;
    } ranks[] = {
        {1ull << 2, "rank 2"},
        {(1ull << 1) | (1ull << 4), "ranks 1 and 4"},
        {(1ull << 0) | (1ull << 3) | (0x1full << 5), "ranks 0, 3 and 5-9"},
        {(1ull << 1) | (1ull << 2), "ranks 1 and 2"},
        {~0ull, "ranks 0-63"},
        {(1ull << 63) | 1ull, "ranks 0 and 63"},
    };
    for (size_t i = 0; i < sizeof ranks / sizeof *ranks; i++) {
        char buf[64];
        agmm_format_ranks(buf, sizeof buf, ranks[i].mask);
        agmm_check(strcmp(buf, ranks[i].text) == 0, "rank list %#llx reads \"%s\" (got \"%s\")",
                   (unsigned long long)ranks[i].mask, ranks[i].text, buf);
    }
    char many[24];
    agmm_format_ranks(many, sizeof many, 0x5555555555555555ull);
    agmm_check(ends_with(many, AGMM_TRUNCATED), "a rank list longer than its buffer is marked: \"%s\"", many);
    static const struct {
        uint64_t bytes;
        const char *text;
    } sizes[] = {{0, "0 B"}, {1023, "1023 B"}, {1024, "1.0 KiB"}, {1536, "1.5 KiB"},
                 {(uint64_t)15 << 30, "15.0 GiB"}, {(uint64_t)1 << 40, "1.0 TiB"}, {UINT64_MAX, "16.0 EiB"}};
    for (size_t i = 0; i < sizeof sizes / sizeof *sizes; i++)
        agmm_check(strcmp(agmm_bytes(sizes[i].bytes).s, sizes[i].text) == 0, "%llu bytes read \"%s\" (got \"%s\")",
                   (unsigned long long)sizes[i].bytes, sizes[i].text, agmm_bytes(sizes[i].bytes).s);
}
