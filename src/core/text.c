/* Message text (text.h). */
#include "text.h"

#include <stdio.h>
#include <string.h>

size_t agmm_vformat(char *buf, size_t len, const char *fmt, va_list ap)
{
    if (len == 0)
        return 0;
    int need = vsnprintf(buf, len, fmt, ap);
    if (need < 0) {
        buf[0] = '\0';
        return 0;
    }
    if ((size_t)need < len)
        return (size_t)need;
    /* Cut: put the marker where the message was cut, on a whole UTF-8 character. */
    const size_t mark = sizeof AGMM_TRUNCATED - 1;
    if (len <= mark) {
        buf[0] = '\0';
        return 0;
    }
    size_t at = len - 1 - mark;
    while (at > 0 && ((unsigned char)buf[at] & 0xc0) == 0x80)
        at--;
    memcpy(buf + at, AGMM_TRUNCATED, mark + 1);
    return at + mark;
}

size_t agmm_format(char *buf, size_t len, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    size_t n = agmm_vformat(buf, len, fmt, ap);
    va_end(ap);
    return n;
}

agmm_bytes_text agmm_bytes(uint64_t bytes)
{
    static const char *const unit[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
    agmm_bytes_text t;
    double v = (double)bytes;
    int u = 0;
    while (v >= 1024.0 && u < 6)
        v /= 1024.0, u++;
    if (u == 0)
        snprintf(t.s, sizeof t.s, "%llu B", (unsigned long long)bytes);
    else
        snprintf(t.s, sizeof t.s, "%.1f %s", v, unit[u]);
    return t;
}

size_t agmm_format_ranks(char *buf, size_t len, uint64_t mask)
{
    /* Items: single ranks, or runs of three or more as "lo-hi". */
    int lo[64], hi[64], items = 0, ranks = 0;
    for (int r = 0; r < 64; r++) {
        if (!((mask >> r) & 1))
            continue;
        int last = r;
        while (last + 1 < 64 && ((mask >> (last + 1)) & 1))
            last++;
        ranks += last - r + 1;
        if (last - r >= 2) {
            lo[items] = r, hi[items++] = last;
        } else {
            for (int q = r; q <= last; q++)
                lo[items] = hi[items] = q, items++;
        }
        r = last;
    }
    /* Whole in a buffer that holds any list (64 ranks), then into buf, marked if it is cut. */
    char all[8 * 64 + 16];
    size_t used = (size_t)snprintf(all, sizeof all, "%s", ranks == 1 ? "rank " : "ranks ");
    for (int i = 0; i < items; i++) {
        const char *sep = i == 0 ? "" : i == items - 1 ? " and " : ", ";
        if (lo[i] == hi[i])
            used += (size_t)snprintf(all + used, sizeof all - used, "%s%d", sep, lo[i]);
        else
            used += (size_t)snprintf(all + used, sizeof all - used, "%s%d-%d", sep, lo[i], hi[i]);
    }
    return agmm_format(buf, len, "%s", all);
}
