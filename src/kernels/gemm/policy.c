/* The GEMM engine's config policy (policy.h). */
#include "kernels/gemm/policy.h"

#include <math.h>
#include <string.h>

#include "kernels/gemm/gemm_configs.h"

/* Row tiles per L2 group (even: cluster pairs share columns). 16, not 8: on an H100 (docs/results,
 * fifteenth session) 8 left 128x256's tensor pipe idle 12% at 4096^3 (2, 4, 16, 32: 7%, about as idle
 * as with no operand traffic at all) and read 8.4-10.2 GB from DRAM at 8192x8192x16384 against
 * cuBLAS's 2.6-3.5 (16 and 32: 4.4-4.6 GB, 25-30% fewer cycles, cuBLAS's count); over the lab's 130
 * shapes the policy's engine time is 0.993 of 8's. */
#define GROUP_M 16
/* Per-tile fixed cost (pipeline fill, epilogue) in units of K, for the stream-K plan
 * (agmm_gemm_plan_stream_k). */
#define K_OVERHEAD 192

#define CONFIG_ROW(bm, bn, st, wgn, cl, sk, pp, name) {bm, bn, st, wgn, cl, sk, pp, name},
static const agmm_gemm_config k_configs[] = {AGMM_GEMM_CONFIGS(CONFIG_ROW)};
#undef CONFIG_ROW
#define NUM_CONFIGS ((int)(sizeof k_configs / sizeof k_configs[0]))

typedef struct {
    double rows, n, k;
    const char *name;
} measured_row;
#define MEASURED_ROW(rows, n, k, name) {rows, n, k, name},
static const measured_row k_measured_h100[] = {AGMM_GEMM_MEASURED_H100(MEASURED_ROW){0, 0, 0, NULL}};
static const measured_row k_measured_h200[] = {AGMM_GEMM_MEASURED_H200(MEASURED_ROW){0, 0, 0, NULL}};
#undef MEASURED_ROW
static const measured_row *const k_measured[AGMM_GEMM_DEVICE_KINDS] = {k_measured_h100, k_measured_h200};

#define FITTED_ROW(name, a, b, c) {name, a, b, c},
static const agmm_gemm_fit k_fitted_h100[] = {AGMM_GEMM_FITTED_H100(FITTED_ROW){NULL, 0, 0, 0}};
static const agmm_gemm_fit k_fitted_h200[] = {AGMM_GEMM_FITTED_H200(FITTED_ROW){NULL, 0, 0, 0}};
#undef FITTED_ROW
static const agmm_gemm_fit *const k_fitted[AGMM_GEMM_DEVICE_KINDS] = {k_fitted_h100, k_fitted_h200};

int agmm_gemm_num_configs(void)
{
    return NUM_CONFIGS;
}

const agmm_gemm_config *agmm_gemm_config_at(int config)
{
    return config >= 0 && config < NUM_CONFIGS ? &k_configs[config] : NULL;
}

const char *agmm_gemm_config_name(int config)
{
    return config >= 0 && config < NUM_CONFIGS ? k_configs[config].name : "?";
}

int agmm_gemm_config_find(const char *name)
{
    for (int c = 0; name && c < NUM_CONFIGS; c++)
        if (!strcmp(k_configs[c].name, name))
            return c;
    return -1;
}

int agmm_gemm_consumer_cols(const agmm_gemm_config *c)
{
    return c->pp ? c->bn : c->bn / c->wgn;
}

int agmm_gemm_config_takes(const agmm_gemm_config *c, int b_row_major)
{
    /* Row-major B comes in 64-column boxes: whole boxes per consumer, and per CTA of a pair. */
    return c != NULL &&
           (!b_row_major || (agmm_gemm_consumer_cols(c) % 64 == 0 && (c->cluster == 1 || c->bn % 128 == 0)));
}

void agmm_gemm_sched_fill(agmm_sched *s, const agmm_gemm_problem *pb, const agmm_gemm_config *c)
{
    memset(s, 0, sizeof *s);
    s->m = pb->m;
    s->n = pb->n;
    s->nranks = pb->nranks;
    s->rank = pb->rank;
    s->splits = pb->splits;
    s->bm = c->bm;
    s->bn = c->bn;
    s->group_m = GROUP_M;
    agmm_sched_init(s);
}

agmm_gemm_device agmm_gemm_device_kind(uint64_t mem_bytes)
{
    return mem_bytes >= (100ull << 30) ? AGMM_GEMM_H200 : AGMM_GEMM_H100;
}

const char *agmm_gemm_device_name(agmm_gemm_device device)
{
    return device == AGMM_GEMM_H100 ? "H100" : device == AGMM_GEMM_H200 ? "H200" : "?";
}

const agmm_gemm_fit *agmm_gemm_config_fit(agmm_gemm_device device, int config)
{
    const char *name = agmm_gemm_config_name(config);
    if ((unsigned)device >= AGMM_GEMM_DEVICE_KINDS)
        return NULL;
    for (const agmm_gemm_fit *f = k_fitted[device]; f->name; f++)
        if (!strcmp(f->name, name))
            return f;
    return NULL;
}

int agmm_gemm_policy_model(const agmm_gemm_problem *pb)
{
    int best = -1;
    double best_cost = 0;
    for (int c = 0; c < NUM_CONFIGS; c++) {
        const agmm_gemm_config *tc = &k_configs[c];
        const agmm_gemm_fit *f = agmm_gemm_config_fit(pb->device, c);
        if (!f || (tc->cluster == 2 && pb->ctas < 2) || !agmm_gemm_config_takes(tc, pb->b_row_major))
            continue;
        agmm_sched s;
        agmm_gemm_sched_fill(&s, pb, tc);
        const int64_t tiles = agmm_sched_num_tiles(&s);
        const int64_t waves = (tiles + pb->ctas - 1) / pb->ctas;
        const double cost = (double)waves * (f->a_ps * 1e-6 * tc->bm * tc->bn * (double)pb->k + f->b_us) + f->c_us;
        if (best < 0 || cost < best_cost) {
            best = c;
            best_cost = cost;
        }
    }
    return best;
}

int agmm_gemm_policy_measured(const agmm_gemm_problem *pb)
{
    if (pb->ctas < pb->sms - 1 || (unsigned)pb->device >= AGMM_GEMM_DEVICE_KINDS)
        return -1;
    const double rows = (double)(pb->nranks * pb->m), n = (double)pb->n, k = (double)pb->k;
    const measured_row *best = NULL;
    double best_dist = AGMM_GEMM_MEASURED_RADIUS;
    for (const measured_row *r = k_measured[pb->device]; r->name; r++) {
        const double dist = fabs(log2(rows / r->rows)) + fabs(log2(n / r->n)) + fabs(log2(k / r->k));
        if (dist <= best_dist) {
            best = r;
            best_dist = dist;
        }
    }
    const int c = best ? agmm_gemm_config_find(best->name) : -1;
    return c >= 0 && agmm_gemm_config_takes(agmm_gemm_config_at(c), pb->b_row_major) ? c : -1;
}

int agmm_gemm_policy_choose(const agmm_gemm_problem *pb)
{
    const int c = agmm_gemm_policy_measured(pb);
    return c >= 0 ? c : agmm_gemm_policy_model(pb);
}

/* A consumer thread's accumulators: its part of the tile (config.cuh's NACC). */
static int accumulators(const agmm_gemm_config *c)
{
    const int wm = c->pp ? c->bm : c->wgn == 1 ? c->bm / 2 : c->bm;
    return wm * agmm_gemm_consumer_cols(c) / 128;
}

int agmm_gemm_scatter_config(int config)
{
    const agmm_gemm_config *c = agmm_gemm_config_at(config);
    int best = -1;
    for (int i = 0; c && i < NUM_CONFIGS; i++) {
        const agmm_gemm_config *o = &k_configs[i];
        if (o->sk || o->bm != c->bm || o->wgn != c->wgn || o->cluster != c->cluster || o->pp != c->pp ||
            o->bn > c->bn || accumulators(o) > AGMM_GEMM_SCATTER_MAX_ACC)
            continue;
        /* The widest; of equal widths, the one with config's ring (itself, or its twin). */
        if (best < 0 || o->bn > k_configs[best].bn || (o->bn == k_configs[best].bn && o->stages == c->stages))
            best = i;
    }
    return best >= 0 ? best : config;
}

int64_t agmm_gemm_grid_tiles(int config, int64_t m, int64_t n)
{
    const agmm_gemm_config *c = agmm_gemm_config_at(config);
    return c ? (m + c->bm - 1) / c->bm * ((n + c->bn - 1) / c->bn) : 0;
}

/* Cutting the last r + j*ctas tiles (r = tiles % ctas, j = 0 or 1) into s pieces turns j + 1
 * rounds of whole tiles into ceil((r + j*ctas) * s / ctas) rounds of ceil(KB/s) K blocks, plus
 * the fix-up (the last piece writes its partials and reads all s back: modelled as 1 + s K blocks,
 * unmeasured). The best gain wins. */
void agmm_gemm_plan_split_tail(int64_t tiles, int ctas, int k_blocks, int64_t *first, int *split)
{
    *first = tiles;
    *split = 1;
    const int64_t r = tiles % ctas;
    double best_gain = 0;
    for (int j = 0; j <= 1 && r; j++) {
        const int64_t sk_tiles = r + (int64_t)j * ctas;
        if (sk_tiles > tiles)
            break;
        for (int s = 2; s <= AGMM_GEMM_SPLIT_MAX && s <= k_blocks; s++) {
            const int64_t rounds = (sk_tiles * s + ctas - 1) / ctas;
            const double gain = (double)(j + 1) * k_blocks - (double)rounds * ((k_blocks + s - 1) / s + 1 + s);
            if (gain > best_gain) {
                best_gain = gain;
                *first = tiles - sk_tiles;
                *split = s;
            }
        }
    }
}

/* Stream-K's model, in K blocks of the tile per CTA, as the split tail's: whole tiles take
 * ceil(tiles / ctas) rounds of KB + OV (OV: a unit's fixed cost, K_OVERHEAD). Dealing the last
 * r + j*ctas tiles (j = 0, 1) leaves (tiles - sk_tiles) / ctas whole rounds, then each CTA's range:
 * L = ceil(iters / ctas) K blocks in up to segs segments (an OV each), at most two of them partial
 * (each writes its fp32 partials), one of which may sum a tile's pmax pieces. A partial costs FIX
 * K blocks: its bytes (bm*bn*4) over a K block's operand bytes (128*(bm + bn)). Unmeasured guesses
 * all: the lab decides where a stream-K config wins. */
void agmm_gemm_plan_stream_k(int64_t tiles, int ctas, int k_blocks, int bm, int bn, agmm_stream_k *s)
{
    memset(s, 0, sizeof *s);
    s->first = tiles;
    const int64_t r = tiles % ctas;
    const double ov = K_OVERHEAD / 64.0, fix = (double)bm * bn / (32.0 * (bm + bn));
    double best = 0.98 * (double)((tiles + ctas - 1) / ctas) * (k_blocks + ov);
    for (int j = 0; j <= 1 && r; j++) {
        const int64_t sk_tiles = r + (int64_t)j * ctas, iters = sk_tiles * k_blocks;
        if (sk_tiles > tiles || iters < ctas || iters > INT32_MAX)
            continue;
        const int64_t q = iters / ctas, len = q + (iters % ctas != 0);
        const int64_t segs = (len - 1 + k_blocks - 1) / k_blocks + 1, pmax = (k_blocks - 1 + q - 1) / q + 1;
        const double cost =
            (double)((tiles - sk_tiles) / ctas) * (k_blocks + ov) + (double)len + (double)segs * ov + fix * (2.0 + pmax);
        if (cost < best) {
            best = cost;
            s->first = tiles - sk_tiles;
            s->tiles = (int32_t)sk_tiles;
            s->kb = k_blocks;
            s->ctas = ctas;
            s->q = (int32_t)q;
            s->rem = (int32_t)(iters % ctas);
            s->segs = (int32_t)segs;
        }
    }
    if (s->tiles) { /* every dividend below iters (< 2^31) or segs * ctas */
        const int64_t iters = (int64_t)s->tiles * k_blocks;
        s->div_ctas = agmm_fastdiv_make(ctas, (int64_t)s->segs * ctas);
        s->div_kb = agmm_fastdiv_make(k_blocks, iters);
        s->div_q = agmm_fastdiv_make(s->q, iters);
        s->div_q1 = agmm_fastdiv_make(s->q + 1, iters);
    }
}
