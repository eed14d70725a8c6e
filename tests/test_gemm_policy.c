/* The GEMM engine's config policy (src/kernels/gemm/policy.h), without a GPU:
 *   table     every config is one the kernels can be: whole 64 x 64 blocks per consumer, multicast
 *             pairs only on 128-row tiles, ping-pong only as config.cuh allows it (no cluster or
 *             split tail, a whole tile of at most 176 accumulators per thread, named /pp), names
 *             unique and found by name; out of range refused; the whole-tile twin of each config
 *             (scatter mode's) and the tile count of a grid
 *   measured  every name of each device kind's measured table is a config; each measured shape
 *             picks its own config, a shape near one picks it, a far one or a partial GPU picks
 *             none; a device's kind from its memory
 *   model     the cost model's picks on shapes whose answer is worked out by hand from the H200's
 *             fitted table (small GEMMs get small tiles, large ones 128 x 256), never a config
 *             without coefficients; the fitted tables' rows name configs and rank larger K dearer
 *   split     the split-tail plan over thousands of (tiles, CTAs, K blocks): only the last round's
 *             tiles (r or r + CTAs of them) are cut, into 2..16 pieces that partition K and that
 *             the model says are faster; the two splits the GPU test relies on
 *   stream_k  the stream-K plan and the kernels' decode of its units (stream_k.h) over thousands of
 *             plans: every K block of the dealt tiles in exactly one unit, within its CTA's range,
 *             pieces in K order with distinct workspace slots; hand-worked plans */
#include <math.h>
#include <string.h>

#include "cpu_tests.h"
#include "harness.h"
#include "kernels/gemm/gemm_configs.h"
#include "kernels/gemm/policy.h"

#define SMS 132 /* an H100's and an H200's */

/* A problem on an H200 (the hand-worked cases below are its tables'). */
static agmm_gemm_problem problem(int nranks, int64_t m, int64_t n, int64_t k, int ctas)
{
    agmm_gemm_problem pb = {.m = m, .n = n, .k = k, .nranks = nranks, .rank = 0, .splits = 1, .ctas = ctas,
                            .sms = SMS, .device = AGMM_GEMM_H200};
    return pb;
}

void test_gemm_policy_table(void)
{
    const int n = agmm_gemm_num_configs();
    int bad = 0;
    char first[160] = "";
    for (int c = 0; c < n; c++) {
        const agmm_gemm_config *tc = agmm_gemm_config_at(c);
        /* A consumer's part: half the tile (cooperative) or all of it (ping-pong). */
        const int wm = tc->pp ? tc->bm : tc->wgn == 1 ? tc->bm / 2 : tc->bm, wn = tc->pp ? tc->bn : tc->bn / tc->wgn;
        /* A consumer width that is not a multiple of 64 (config.cuh): 16-column multiples, column-major
         * B only; a B-multicast pair takes row-major B only in whole 128-column tiles (each CTA its half
         * in 64-column boxes). */
        const int odd = wn % 64 != 0;
        const int ok = (tc->wgn == 1 || tc->wgn == 2) && wm % 64 == 0 && wn % 16 == 0 &&
                       agmm_gemm_config_takes(tc, 0) &&
                       agmm_gemm_config_takes(tc, 1) == (!odd && (tc->cluster == 1 || tc->bn % 128 == 0)) &&
                       tc->stages >= 2 &&
                       (tc->cluster == 1 || (tc->cluster == 2 && tc->bm == 128 && tc->wgn == 1 && !tc->sk)) &&
                       (tc->pp == 0 || (tc->pp == 1 && tc->wgn == 1 && tc->cluster == 1 && !tc->sk &&
                                        wm * wn / 128 <= 176 && strstr(tc->name, "/pp"))) &&
                       agmm_gemm_config_find(tc->name) == c && !strcmp(agmm_gemm_config_name(c), tc->name);
        if (!ok && bad++ == 0)
            snprintf(first, sizeof first, " (first: config %d %s)", c, tc->name);
    }
    agmm_check(n >= 1 && bad == 0,
               "gemm policy: %d configs, each with whole 64-row blocks of 16-column multiples per consumer (not 64: "
               "column-major B only), multicast only on 128-row tiles (with row-major B only on "
               "128-column multiples), ping-pong (/pp) only without cluster or split tail and with at most 176 "
               "accumulators per thread, a unique name found by agmm_gemm_config_find%s",
               n, first);
    agmm_check(!agmm_gemm_config_at(-1) && !agmm_gemm_config_at(n) && !strcmp(agmm_gemm_config_name(n), "?") &&
                   agmm_gemm_config_find("no such config") == -1 && agmm_gemm_config_find(NULL) == -1,
               "gemm policy: config -1 and %d are out of range, an unknown name is -1", n);
    /* Scatter mode's config: a split-tail or stream-K config maps to its tile and ring without the
     * split; a tile of more than AGMM_GEMM_SCATTER_MAX_ACC accumulators per thread (256 x 192) to a
     * narrower whole-tile config of the same rows and consumers; any other to itself. The grid counts
     * a config's tiles. */
    int wrong = 0, sk = 0, narrowed = 0;
    for (int c = 0; c < n; c++) {
        const agmm_gemm_config *tc = agmm_gemm_config_at(c), *w = agmm_gemm_config_at(agmm_gemm_scatter_config(c));
        const int wm = tc->pp ? tc->bm : tc->wgn == 1 ? tc->bm / 2 : tc->bm, wn = tc->pp ? tc->bn : tc->bn / tc->wgn;
        const int fits = wm * wn / 128 <= AGMM_GEMM_SCATTER_MAX_ACC;
        sk += tc->sk != 0;
        narrowed += !fits;
        wrong += !w || w->sk || w->bm != tc->bm || w->wgn != tc->wgn || w->pp != tc->pp || w->cluster != tc->cluster ||
                 (fits ? w->bn != tc->bn || w->stages != tc->stages : w->bn >= tc->bn) ||
                 (!tc->sk && fits && agmm_gemm_scatter_config(c) != c) ||
                 agmm_gemm_grid_tiles(c, 1000, 520) != (1000 + tc->bm - 1) / tc->bm * ((520 + tc->bn - 1) / tc->bn);
    }
    const int c256x192 = agmm_gemm_config_find("256x192x64/s3");
    agmm_check(wrong == 0 && sk >= 1 && narrowed >= 1 && agmm_gemm_grid_tiles(-1, 8, 8) == 0 &&
                   agmm_gemm_scatter_config(c256x192) == agmm_gemm_config_find("256x128x64/s4"),
               "gemm policy: each of %d configs (%d split-tail or stream-K, %d past %d accumulators) has a scatter "
               "config: its whole-tile twin of the same tile and ring, itself if it has no split, a narrower one of "
               "the same rows past the accumulators (256x192 -> %s); grid tiles of 1000 x 520 right (%d wrong)",
               n, sk, narrowed, AGMM_GEMM_SCATTER_MAX_ACC, agmm_gemm_config_name(agmm_gemm_scatter_config(c256x192)),
               wrong);
}

typedef struct {
    double rows, n, k;
    const char *name;
} measured;
#define MEASURED_ROW(rows, n, k, name) {rows, n, k, name},
static const measured k_rows_h100[] = {AGMM_GEMM_MEASURED_H100(MEASURED_ROW){0, 0, 0, NULL}};
static const measured k_rows_h200[] = {AGMM_GEMM_MEASURED_H200(MEASURED_ROW){0, 0, 0, NULL}};
#undef MEASURED_ROW
static const measured *const k_rows[AGMM_GEMM_DEVICE_KINDS] = {k_rows_h100, k_rows_h200};

/* One device kind's measured table: every name a config, every shape picking its own config. */
static void check_measured(agmm_gemm_device device)
{
    const measured *rows = k_rows[device];
    int n = 0, missing = 0, wrong = 0;
    char first_missing[96] = "", first_wrong[160] = "";
    for (const measured *r = rows; r->name; r++, n++) {
        const int want = agmm_gemm_config_find(r->name);
        if (want < 0 && missing++ == 0)
            snprintf(first_missing, sizeof first_missing, " (first: \"%s\")", r->name);
        /* The measured shape itself, as W = 8 ranks of rows / 8 (the lab's gathered GEMMs). A row
         * whose shape another row repeats with another name is skipped: the table may not say. */
        int repeated = 0;
        for (const measured *o = rows; o->name; o++)
            repeated |= o != r && o->rows == r->rows && o->n == r->n && o->k == r->k && strcmp(o->name, r->name);
        agmm_gemm_problem pb = problem(8, (int64_t)r->rows / 8, (int64_t)r->n, (int64_t)r->k, SMS);
        pb.device = device;
        const int got = agmm_gemm_policy_measured(&pb);
        if (!repeated && got != want && wrong++ == 0)
            snprintf(first_wrong, sizeof first_wrong, " (first: %gx%gx%g picks %s, not %s)", r->rows, r->n, r->k,
                     agmm_gemm_config_name(got), r->name);
    }
    agmm_check(n > 0 && missing == 0, "gemm policy: all %d names of the %s measured table are configs%s", n,
               agmm_gemm_device_name(device), first_missing);
    agmm_check(wrong == 0,
               "gemm policy: each of the %d shapes of the %s measured table picks its own config with the whole GPU%s",
               n, agmm_gemm_device_name(device), first_wrong);
}

void test_gemm_policy_measured(void)
{
    for (int d = 0; d < AGMM_GEMM_DEVICE_KINDS; d++)
        check_measured((agmm_gemm_device)d);
    /* A device's kind from its memory: HBM3 parts (80, 94, 96 GiB) take the H100's tables, HBM3e
     * parts (141, 144 GB) the H200's; a kind past the tables has none. */
    const uint64_t gib = 1ull << 30;
    agmm_gemm_problem bad_kind = problem(8, 4096, 4096, 4096, SMS);
    bad_kind.device = AGMM_GEMM_DEVICE_KINDS;
    agmm_check(agmm_gemm_device_kind(80 * gib) == AGMM_GEMM_H100 && agmm_gemm_device_kind(96 * gib) == AGMM_GEMM_H100 &&
                   agmm_gemm_device_kind(141000000000ull) == AGMM_GEMM_H200 &&
                   agmm_gemm_device_kind(144 * gib) == AGMM_GEMM_H200 && agmm_gemm_policy_measured(&bad_kind) == -1 &&
                   agmm_gemm_policy_model(&bad_kind) == -1,
               "gemm policy: 80 and 96 GiB devices take the H100's tables, 141 GB and 144 GiB the H200's; an unknown "
               "kind has neither");

    /* 32768 x 4096 x 4300: 0.07 from the measured 32768 x 4096 x 4096 (summed |log2|), within the
     * radius and further from every other row; it takes whatever that row names. */
    int big = -1;
    for (const measured *r = k_rows_h200; r->name; r++)
        if (r->rows == 32768 && r->n == 4096 && r->k == 4096)
            big = agmm_gemm_config_find(r->name);
    agmm_gemm_problem near = problem(8, 4096, 4096, 4300, SMS), part = near, fused = near;
    part.ctas = SMS - 2;
    fused.ctas = SMS - 1;
    const int got_near = agmm_gemm_policy_measured(&near), got_fused = agmm_gemm_policy_measured(&fused),
              got_part = agmm_gemm_policy_measured(&part);
    agmm_check(big >= 0 && got_near == big && agmm_gemm_policy_choose(&near) == big && got_fused == big &&
                   got_part == -1,
               "gemm policy: 32768x4096x4300 (near 32768x4096x4096) takes its %s with %d and %d CTAs (got %s, %s), "
               "none with %d (got %d)",
               agmm_gemm_config_name(big), SMS, SMS - 1, agmm_gemm_config_name(got_near),
               agmm_gemm_config_name(got_fused), SMS - 2, got_part);
    agmm_gemm_problem far = problem(1, 100, 100000, 8, SMS);
    const int far_c = agmm_gemm_policy_measured(&far);
    agmm_check(far_c == -1 && agmm_gemm_policy_choose(&far) == agmm_gemm_policy_model(&far),
               "gemm policy: 100x100000x8 is near no measured shape (got %d): the cost model decides", far_c);
}

void test_gemm_policy_model(void)
{
    /* Worked out from gemm_configs.h's AGMM_GEMM_FITTED_H200 (regenerating it may move them): a run costs
     * waves x (a x BM x BN x K ps + b us) + c us, on 132 CTAs.
     * W = 8, M = 256 (2048 x 256 x 256): one wave whatever the tile; 128 x 64's 6.66 us against
     * 64 x 128's 6.86 and its ping-pong twin's 6.96. */
    agmm_gemm_problem small = problem(8, 256, 256, 256, SMS);
    /* W = 1, 2176^3: two waves of 238 tiles of 128 x 160 in ping-pong (37.9 us), against the same
     * tile in pairs (40.2) and one wave of 256 x 192 (41.8); the lab measured 128 x 160 ping-pong the
     * fastest there. */
    agmm_gemm_problem odd = problem(1, 2176, 2176, 2176, SMS);
    /* W = 1, 4096^3: four waves of 128 x 256 with the split tail (188.6 us) against 128 x 256's four
     * without it (191.7) and 256 x 128's (193.3). */
    agmm_gemm_problem large = problem(1, 4096, 4096, 4096, SMS);
    const int want_s = agmm_gemm_config_find("128x64x64/s8"), want_o = agmm_gemm_config_find("128x160x64/s5/pp"),
              want_l = agmm_gemm_config_find("128x256x64/s4/sk");
    const int cs = agmm_gemm_policy_model(&small), co = agmm_gemm_policy_model(&odd),
              cl = agmm_gemm_policy_model(&large);
    agmm_check(cs == want_s && co == want_o && cl == want_l,
               "gemm policy: the cost model picks %s for 2048x256x256, %s for 2176^3 and %s for 4096^3 on %d CTAs",
               agmm_gemm_config_name(cs), agmm_gemm_config_name(co), agmm_gemm_config_name(cl), SMS);

    /* Every row of each fitted table names a config, no config twice, ranks larger K dearer and
     * costs nothing less than nothing (a > 0, b >= 0, c >= 0); a config without a row has no
     * coefficients. */
    int rows = 0, bad_row = 0, fitted = 0;
#define FITTED_ROW(name, a, b, c)                                                                                      \
    rows++, bad_row += agmm_gemm_config_find(name) < 0 || !((a) > 0) || !((b) >= 0) || !((c) >= 0);
    AGMM_GEMM_FITTED_H100(FITTED_ROW)
    AGMM_GEMM_FITTED_H200(FITTED_ROW)
#undef FITTED_ROW
    for (int d = 0; d < AGMM_GEMM_DEVICE_KINDS; d++)
        for (int c = 0; c < agmm_gemm_num_configs(); c++) {
            const agmm_gemm_fit *f = agmm_gemm_config_fit((agmm_gemm_device)d, c);
            fitted += f && !strcmp(f->name, agmm_gemm_config_name(c));
        }
    agmm_check(rows > 0 && bad_row == 0 && fitted == rows && !agmm_gemm_config_fit(AGMM_GEMM_H200, -1) &&
                   !agmm_gemm_config_fit(AGMM_GEMM_DEVICE_KINDS, 0),
               "gemm policy: the fitted tables' %d rows name %d distinct configs per device, each a > 0, b >= 0 and "
               "c >= 0 (%d do not)",
               rows, fitted, bad_row);

    /* Whatever the device kind, shape and budget, a config with coefficients, and no pair below 2 CTAs. */
    int bad = 0;
    char first[160] = "";
    for (int d = 0; d < AGMM_GEMM_DEVICE_KINDS; d++)
        for (int64_t m = 1; m <= 9000; m = m * 3 + 7)
            for (int64_t nk = 8; nk <= 9000; nk = nk * 4 + 8)
                for (int ctas = 1; ctas <= SMS; ctas += 37) {
                    agmm_gemm_problem pb = problem(3, m, nk, nk, ctas);
                    pb.device = (agmm_gemm_device)d;
                    const int c = agmm_gemm_policy_model(&pb);
                    const agmm_gemm_config *tc = agmm_gemm_config_at(c);
                    if ((!tc || !agmm_gemm_config_fit(pb.device, c) || (tc->cluster == 2 && ctas < 2)) && bad++ == 0)
                        snprintf(first, sizeof first, " (first: %s m=%lld n=k=%lld ctas=%d: %s)",
                                 agmm_gemm_device_name(pb.device), (long long)m, (long long)nk, ctas,
                                 tc ? tc->name : "none");
                }
    agmm_check(bad == 0, "gemm policy: the cost model picks a config with coefficients on every shape and budget%s",
               first);

    /* A row-major B never gets a config that takes column-major B only, from the model or the table. */
    int row_bad = 0;
    for (int d = 0; d < AGMM_GEMM_DEVICE_KINDS; d++)
        for (int64_t m = 1; m <= 9000; m = m * 3 + 7)
            for (int64_t nk = 8; nk <= 9000; nk = nk * 4 + 8) {
                agmm_gemm_problem pb = problem(8, m, nk, nk, SMS);
                pb.b_row_major = 1;
                pb.device = (agmm_gemm_device)d;
                row_bad += !agmm_gemm_config_takes(agmm_gemm_config_at(agmm_gemm_policy_choose(&pb)), 1);
            }
    agmm_check(row_bad == 0, "gemm policy: with row-major B every choice takes row-major B (%d do not)", row_bad);
}

/* Checks one split-tail plan; returns 0 and describes the first broken rule in why. */
static int split_ok(int64_t tiles, int ctas, int kb, char *why, size_t len)
{
    int64_t first = -1;
    int split = 0;
    agmm_gemm_plan_split_tail(tiles, ctas, kb, &first, &split);
    const int64_t r = tiles % ctas, sk_tiles = tiles - first;
    if (split == 1)
        return first == tiles ? 1 : (snprintf(why, len, "split 1 but first=%lld", (long long)first), 0);
    if (split < 2 || split > AGMM_GEMM_SPLIT_MAX || split > kb)
        return snprintf(why, len, "split=%d outside 2..min(%d, KB=%d)", split, AGMM_GEMM_SPLIT_MAX, kb), 0;
    if (r == 0 || (sk_tiles != r && sk_tiles != r + ctas) || sk_tiles > tiles)
        return snprintf(why, len, "cut %lld tiles, not the last round's r=%lld (or r + %d)", (long long)sk_tiles,
                        (long long)r, ctas), 0;
    /* The pieces partition the K blocks, none empty (the kernel's formula, tile_sched.cuh). */
    for (int p = 0; p < split; p++) {
        const int kb0 = p * kb / split, kb1 = (p + 1) * kb / split;
        if (kb1 <= kb0 || (p == 0 && kb0 != 0) || (p == split - 1 && kb1 != kb))
            return snprintf(why, len, "piece %d of %d: K blocks [%d, %d) of %d", p, split, kb0, kb1, kb), 0;
    }
    /* Faster by the plan's own model: fewer K blocks in the last rounds than whole tiles take. */
    const int64_t j = sk_tiles / ctas, rounds = (sk_tiles * split + ctas - 1) / ctas;
    const double gain = (double)(j + 1) * kb - (double)rounds * ((kb + split - 1) / split + 1 + split);
    if (!(gain > 0))
        return snprintf(why, len, "gain %.1f K blocks: not worth the split", gain), 0;
    return 1;
}

void test_gemm_policy_split_tail(void)
{
    static const int ctas_list[] = {1, 2, 7, 30, 131, 132};
    static const int kb_list[] = {1, 2, 3, 5, 8, 17, 64, 129};
    int64_t cases = 0, splits = 0, bad = 0;
    char why[160] = "", first[256] = "";
    for (int64_t tiles = 1; tiles <= 700; tiles++)
        for (int ci = 0; ci < (int)(sizeof ctas_list / sizeof ctas_list[0]); ci++)
            for (int ki = 0; ki < (int)(sizeof kb_list / sizeof kb_list[0]); ki++) {
                const int ctas = ctas_list[ci], kb = kb_list[ki];
                int64_t f;
                int s;
                agmm_gemm_plan_split_tail(tiles, ctas, kb, &f, &s);
                cases++;
                splits += s > 1;
                if (!split_ok(tiles, ctas, kb, why, sizeof why) && bad++ == 0)
                    snprintf(first, sizeof first, " (first: tiles=%lld ctas=%d KB=%d: %s)", (long long)tiles, ctas, kb,
                             why);
            }
    agmm_check(bad == 0 && splits > 0,
               "gemm policy: split tail over %lld plans (%lld split): only the last round's tiles cut, into 2..%d "
               "pieces partitioning K, each faster by the model%s",
               (long long)cases, (long long)splits, AGMM_GEMM_SPLIT_MAX, first);

    /* tests/gpu/test_gemm_engine.c's shapes on 132 SMs: 777x520x1032 in 128x256 tiles is 21 tiles
     * of 17 K blocks, 2048x1000x512 is 64 tiles of 8. */
    int64_t f1, f2;
    int s1, s2;
    agmm_gemm_plan_split_tail(21, SMS, 17, &f1, &s1);
    agmm_gemm_plan_split_tail(64, SMS, 8, &f2, &s2);
    agmm_check(f1 == 0 && s1 == 3 && f2 == 0 && s2 == 2,
               "gemm policy: 21 tiles of 17 K blocks split in 3 (got %lld from %d), 64 of 8 in 2 (got %lld from %d)",
               (long long)f1, s1, (long long)f2, s2);
}

/* Checks one stream-K plan by decoding every unit as the kernels do (stream_k.h); returns 0 and
 * describes the first broken rule in why. */
static int stream_k_ok(int64_t tiles, int ctas, int kb, int bm, int bn, char *why, size_t len)
{
    agmm_stream_k s;
    agmm_gemm_plan_stream_k(tiles, ctas, kb, bm, bn, &s);
    if (!s.tiles)
        return s.first == tiles ? 1 : (snprintf(why, len, "no stream-K tiles but first=%lld", (long long)s.first), 0);
    const int64_t r = tiles % ctas, iters = (int64_t)s.tiles * kb;
    if (r == 0 || (s.tiles != r && s.tiles != r + ctas) || s.first != tiles - s.tiles || s.first % ctas ||
        s.ctas != ctas || s.kb != kb)
        return snprintf(why, len, "%d stream-K tiles after %lld: not the last round's r=%lld (or r + %d)", s.tiles,
                        (long long)s.first, (long long)r, ctas), 0;
    if (s.q < 1 || (int64_t)s.q * ctas + s.rem != iters || s.rem >= ctas || agmm_stream_k_lo(&s, ctas) != iters)
        return snprintf(why, len, "q=%d rem=%d do not deal %lld iterations to %d CTAs", s.q, s.rem,
                        (long long)iters, ctas), 0;
    /* Every unit: inside its CTA's range, and every iteration of every tile in exactly one unit.
     * Per tile, pieces numbered 0.. in K order, each saying the same count and first index. */
    static int seen[600 * 129], piece_of[600 * 129];
    memset(seen, 0, sizeof(int) * (size_t)iters);
    int used_ws[1200] = {0}, max_segs = 0;
    for (int b = 0; b < ctas; b++) {
        int segs = 0;
        const uint32_t lo = agmm_stream_k_lo(&s, (uint32_t)b), hi = agmm_stream_k_lo(&s, (uint32_t)b + 1);
        for (int seg = 0; seg < s.segs; seg++) {
            const agmm_stream_k_seg g = agmm_stream_k_unit(&s, (uint32_t)(seg * ctas + b));
            if (g.tile < 0 || g.tile >= s.tiles || g.kb0 < 0 || g.kb1 > kb || g.kb0 > g.kb1)
                return snprintf(why, len, "CTA %d segment %d: tile %d K [%d, %d)", b, seg, g.tile, g.kb0, g.kb1), 0;
            if (g.kb0 == g.kb1)
                continue;
            segs++;
            for (int x = g.kb0; x < g.kb1; x++) {
                const int64_t it = (int64_t)g.tile * kb + x;
                if (it < lo || it >= hi || seen[it]++)
                    return snprintf(why, len, "CTA %d (range [%u, %u)) segment %d: iteration %lld outside or twice",
                                    b, lo, hi, seg, (long long)it), 0;
                piece_of[it] = g.piece;
            }
            if (g.piece < 0 || g.piece >= g.pieces || g.ws0 + g.piece >= s.tiles + ctas || used_ws[g.ws0 + g.piece]++)
                return snprintf(why, len, "CTA %d tile %d: piece %d of %d at workspace %d", b, g.tile, g.piece,
                                g.pieces, g.ws0 + g.piece), 0;
            /* Its tile's first and last iterations say the same count: the pieces are its CTAs. */
            const uint32_t first_cta = agmm_stream_k_cta(&s, (uint32_t)g.tile * kb),
                           last_cta = agmm_stream_k_cta(&s, (uint32_t)(g.tile + 1) * kb - 1);
            if ((int)(last_cta - first_cta + 1) != g.pieces || (int)(b - first_cta) != g.piece)
                return snprintf(why, len, "CTA %d tile %d: piece %d of %d, its CTAs are %u..%u", b, g.tile, g.piece,
                                g.pieces, first_cta, last_cta), 0;
        }
        max_segs = segs > max_segs ? segs : max_segs;
    }
    for (int64_t it = 0; it < iters; it++) {
        const uint32_t b = agmm_stream_k_cta(&s, (uint32_t)it); /* by multiplication, as on the device */
        if (!seen[it] || (it % kb && piece_of[it] < piece_of[it - 1]) || b >= (uint32_t)ctas ||
            agmm_stream_k_lo(&s, b) > it || agmm_stream_k_lo(&s, b + 1) <= it)
            return snprintf(why, len, "iteration %lld of %lld: in no unit, pieces out of K order, or CTA %u's range",
                            (long long)it, (long long)iters, b), 0;
    }
    if (max_segs > s.segs || max_segs < s.segs - 1)
        return snprintf(why, len, "segs=%d but the CTAs' ranges touch at most %d tiles", s.segs, max_segs), 0;
    return 1;
}

void test_gemm_policy_stream_k(void)
{
    static const int ctas_list[] = {1, 2, 7, 30, 131, 132};
    static const int kb_list[] = {1, 2, 3, 5, 8, 17, 64, 129};
    static const int tile_list[][2] = {{128, 256}, {128, 128}};
    int64_t cases = 0, used = 0, bad = 0;
    char why[200] = "", first[300] = "";
    for (int64_t tiles = 1; tiles <= 600; tiles++)
        for (int ci = 0; ci < (int)(sizeof ctas_list / sizeof ctas_list[0]); ci++)
            for (int ki = 0; ki < (int)(sizeof kb_list / sizeof kb_list[0]); ki++)
                for (int ti = 0; ti < 2; ti++) {
                    const int ctas = ctas_list[ci], kb = kb_list[ki], bm = tile_list[ti][0], bn = tile_list[ti][1];
                    agmm_stream_k s;
                    agmm_gemm_plan_stream_k(tiles, ctas, kb, bm, bn, &s);
                    cases++;
                    used += s.tiles > 0;
                    if (!stream_k_ok(tiles, ctas, kb, bm, bn, why, sizeof why) && bad++ == 0)
                        snprintf(first, sizeof first, " (first: tiles=%lld ctas=%d KB=%d %dx%d: %s)",
                                 (long long)tiles, ctas, kb, bm, bn, why);
                }
    agmm_check(bad == 0 && used > 0,
               "gemm policy: stream-K over %lld plans (%lld dealt): the last round's tiles (r or r + CTAs), every "
               "K block of them in exactly one unit of its CTA's range, pieces in K order with distinct "
               "workspace slots, segs tight%s",
               (long long)cases, (long long)used, first);

    /* Hand-worked: 2560^3 in 128 x 256 tiles (200 tiles of 40 K blocks on 132 SMs: 1.5 waves) deals
     * all 200 (each CTA 60 or 61 K blocks, against 80 in two whole rounds); 4096^3 (512 tiles of 64,
     * 3.9 waves) keeps whole tiles; tests/gpu/test_gemm_engine.c's 1000 x 264 x 2056 on 11 CTAs (16
     * tiles of 128 x 256, 33 K blocks: 2 rounds of 36 against 48 K blocks each in 3 segments) deals
     * all 16. */
    agmm_stream_k a, b, c;
    agmm_gemm_plan_stream_k(200, SMS, 40, 128, 256, &a);
    agmm_gemm_plan_stream_k(512, SMS, 64, 128, 256, &b);
    agmm_gemm_plan_stream_k(16, 11, 33, 128, 256, &c);
    agmm_check(a.tiles == 200 && a.first == 0 && a.q == 60 && a.rem == 80 && b.tiles == 0 && b.first == 512 &&
                   c.tiles == 16 && c.first == 0 && c.q == 48 && c.segs == 3,
               "gemm policy: stream-K deals 2560^3's 200 tiles (got %d, q=%d rem=%d), keeps 4096^3 whole (got %d), "
               "deals 16 tiles on 11 CTAs (got %d)",
               a.tiles, a.q, a.rem, b.tiles, c.tiles);
}
