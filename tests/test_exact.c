#define _POSIX_C_SOURCE 200809L /* setenv */
/* Exact checks, and checks tied to one behaviour each, written against the kinds of kernel
 * bug that a tolerance-based sweep cannot see (issue 21; tools/dev/mutants.txt lists the
 * planted bugs these tests kill). test_exact16 holds the 16-bit conversions, loads and
 * stores and the merge; this file:
 *
 *  - the public stages: clattn_scores with every score term on its own and together
 *    against a float64 oracle written here (visibility from clattn_visible_keys), the
 *    issue's 1×1 ALiBi case exactly, then softmax (several work-group sizes) and the
 *    weighted sum chained against clattn_reference_attention;
 *  - NaN scores poison their own row (NaN-winning max), masked-row policies, the online
 *    softmax's rescale and running max, ALiBi at far positions with realistic slopes;
 *  - the exponential over its whole range, half arithmetic's error bound and local tiles,
 *    the decode kernel's register blocks at every vector width;
 *  - small blockings (tu_small_blocking(): 16-key tiles, several work-items per group) so
 *    that every tiled kernel runs several tiles and work-items share them.
 *
 * Tolerance where not exact: 1e-5 absolute + 1e-5 relative against float64 results.
 * Seeds: printed; CLATTN_TEST_SEED overrides the base seed (only the random fills). */
#include "testutil.h"

#include <clattn_tuning.h>

#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---- 1. the public stages with every score term -------------------------------------- */

/* A configuration of score terms over one problem shape. */
typedef struct sconf {
    const char *name;
    float scale, softcap;
    clattn_mask mask;
    bool alibi, lens, window;
    int mask_kind; /* 0 none, 1 bool [1,1,n_q,n_kv], 2 float [b,h_q,n_q,n_kv], 3 float [1,h_q,..] */
    int64_t wl, wr, q_start, kv_start;
} sconf;

#define SB 2
#define SHQ 4
#define SHK 2
#define SNQ 21
#define SNKV 37
#define SDK 24
#define SDV 20

static const sconf SCONFS[] = {
    {"plain", 0.7f, 0, CLATTN_MASK_NONE, false, false, false, 0, 0, 0, 0, 0},
    {"softcap", 4.0f, 1.5f, CLATTN_MASK_NONE, false, false, false, 0, 0, 0, 0, 0},
    {"ALiBi with positions", 0, 0, CLATTN_MASK_NONE, true, false, false, 0, 0, 0, 5, 2},
    {"ALiBi, row's own key invisible (lengths, window)", 0, 0, CLATTN_MASK_NONE, true, true, true,
     0, 2, 1, 20, 0},
    {"float mask", 0, 0, CLATTN_MASK_NONE, false, false, false, 2, 0, 0, 0, 0},
    {"bool mask (broadcast)", 0, 0, CLATTN_MASK_NONE, false, false, false, 1, 0, 0, 0, 0},
    {"float mask (broadcast over batch)", 0, 0, CLATTN_MASK_NONE, false, false, false, 3, 0, 0, 0,
     0},
    {"window (3, 2)", 0, 0, CLATTN_MASK_NONE, false, false, true, 0, 3, 2, 0, 0},
    {"window (unbounded, 0) with positions", 0, 0, CLATTN_MASK_NONE, false, false, true, 0, -1, 0,
     9, 4},
    {"causal top-left with positions", 0, 0, CLATTN_MASK_CAUSAL_TOP_LEFT, false, false, false, 0, 0,
     0, 3, 0},
    {"causal bottom-right with lengths", 0, 0, CLATTN_MASK_CAUSAL_BOTTOM_RIGHT, false, true, false,
     0, 0, 0, 0, 0},
    {"no-self with positions", 0, 0, CLATTN_MASK_NO_SELF, false, false, false, 0, 0, 0, 4, 1},
    {"lengths", 0, 0, CLATTN_MASK_NONE, false, true, false, 0, 0, 0, 0, 0},
    {"everything", 1.3f, 2.5f, CLATTN_MASK_CAUSAL_BOTTOM_RIGHT, true, true, true, 3, 6, 4, 7, 3},
    {"everything, no-self and a bool mask", 0, 3.0f, CLATTN_MASK_NO_SELF, true, true, true, 1, 8, 8,
     2, 5},
};
#define N_SCONFS ((int)(sizeof SCONFS / sizeof SCONFS[0]))

typedef struct sprob {
    tu_problem p;
    clattn_attention_desc d;
    int32_t q_lens[SB], kv_lens[SB];
    float slopes[SHQ];
    uint8_t *keep;
    float *add;
    clattn_tensor mt;
} sprob;

static void sprob_init(sprob *s, const sconf *c, uint32_t seed)
{
    memset(s, 0, sizeof *s);
    tu_problem_init(&s->p, SB, SHQ, SHK, SNQ, SNKV, SDK, SDV, seed, seed + 1, seed + 2, 0);
    s->d = clattn_attention_desc_default();
    s->d.scale = c->scale;
    s->d.softcap = c->softcap;
    s->d.mask = c->mask;
    s->d.q_start = c->q_start;
    s->d.kv_start = c->kv_start;
    if (c->window) {
        s->d.window = 1;
        s->d.window_left = c->wl;
        s->d.window_right = c->wr;
    }
    if (c->lens) {
        s->q_lens[0] = SNQ, s->q_lens[1] = 13;
        s->kv_lens[0] = 30, s->kv_lens[1] = SNKV;
        s->d.q_lens = s->q_lens;
        s->d.kv_lens = s->kv_lens;
    }
    if (c->alibi) {
        const float sl[SHQ] = {0.5f, 1.0f, 0.0625f, 0.25f};
        memcpy(s->slopes, sl, sizeof sl);
        s->d.alibi_slopes = s->slopes;
    }
    if (c->mask_kind) {
        const int64_t mb = c->mask_kind == 2 ? SB : 1, mh = c->mask_kind == 1 ? 1 : SHQ;
        const size_t n = (size_t)(mb * mh * SNQ * SNKV);
        s->mt = clattn_tensor_host(NULL, mb, mh, SNQ, SNKV);
        if (c->mask_kind == 1) {
            s->keep = malloc(n);
            for (size_t i = 0; i < n; i++)
                s->keep[i] = tu_lowbias32((uint32_t)i + seed) % 4 != 0;
            s->mt.host = s->keep;
            s->mt.dtype = CLATTN_BOOL;
        } else {
            s->add = malloc(n * sizeof(float));
            for (size_t i = 0; i < n; i++) {
                const uint32_t r = tu_lowbias32((uint32_t)i * 7 + seed);
                s->add[i] = r % 5 == 0 ? -INFINITY : (float)((int)(r % 200) - 100) / 40.0f;
            }
            s->mt.host = s->add;
        }
        s->d.mask_tensor = &s->mt;
    }
}

static void sprob_free(sprob *s)
{
    tu_problem_free(&s->p);
    free(s->keep);
    free(s->add);
}

/* The scores in float64, written from the header: visibility from clattn_visible_keys and
 * the mask tensor, s = softcap(scale·q·k) − slope·|a_i − j| + float mask, −∞ if hidden. */
static double *oracle_scores(const sprob *s)
{
    const tu_problem *p = &s->p;
    double *out = malloc(sizeof(double) * (size_t)(p->b * p->h_q * p->n_q * p->n_kv));
    const double scale = s->d.scale > 0.0f ? s->d.scale : 1.0 / sqrt((double)p->d_k);
    size_t x = 0;
    for (int64_t b = 0; b < p->b; b++)
        for (int64_t h = 0; h < p->h_q; h++)
            for (int64_t i = 0; i < p->n_q; i++) {
                clattn_key_range kr;
                TU_ASSERT_OK(clattn_visible_keys(&s->d, p->n_q, p->n_kv, b, i, &kr),
                             "clattn_visible_keys");
                for (int64_t j = 0; j < p->n_kv; j++, x++) {
                    bool vis = kr.valid && j >= kr.lo && j < kr.hi && j != kr.self;
                    double add = 0.0;
                    if (s->d.mask_tensor) {
                        const clattn_tensor *m = s->d.mask_tensor;
                        const int64_t mb = m->shape[0] == 1 ? 0 : b, mh = m->shape[1] == 1 ? 0 : h;
                        const size_t at =
                            (size_t)(((mb * m->shape[1] + mh) * p->n_q + i) * p->n_kv + j);
                        if (m->dtype == CLATTN_BOOL)
                            vis = vis && ((const uint8_t *)m->host)[at] != 0;
                        else
                            add = ((const float *)m->host)[at];
                        vis = vis && add != -INFINITY;
                    }
                    if (!vis) {
                        out[x] = -INFINITY;
                        continue;
                    }
                    double dot = 0.0;
                    for (int64_t c = 0; c < p->d_k; c++)
                        dot += (double)p->q[((b * p->h_q + h) * p->n_q + i) * p->d_k + c] *
                               (double)p->k[((b * p->h_kv + h / (p->h_q / p->h_kv)) * p->n_kv + j) *
                                                p->d_k +
                                            c];
                    double v = scale * dot;
                    if (s->d.softcap > 0.0f)
                        v = s->d.softcap * tanh(v / s->d.softcap);
                    if (s->d.alibi_slopes)
                        v -= (double)s->d.alibi_slopes[h] * fabs((double)(kr.diag - j));
                    out[x] = v + add;
                }
            }
    return out;
}

static const tu_tol TOL = {1e-5, 1e-5};

/* clattn_scores against the oracle; softmax (work-group size `wgs`) and weighted sum of it
 * against the reference's weights and O; both algorithms against the reference's O, LSE
 * and weights. */
static void stages_case(const sconf *c, uint32_t seed, size_t wgs)
{
    sprob s;
    sprob_init(&s, c, seed);
    tu_problem *p = &s.p;
    const size_t n_s = (size_t)(p->b * p->h_q * p->n_q * p->n_kv),
                 n_o = (size_t)(p->b * p->h_q * p->n_q * p->d_v),
                 rows = (size_t)(p->b * p->h_q * p->n_q);
    double *want_s = oracle_scores(&s);
    float *sc = tu_alloc(n_s, 12345.0f), *w = tu_alloc(n_s, 12345.0f), *o = tu_alloc(n_o, 12345.0f);
    clattn_tensor ts = clattn_tensor_host(sc, p->b, p->h_q, p->n_q, p->n_kv);
    clattn_tensor tw = clattn_tensor_host(w, p->b, p->h_q, p->n_q, p->n_kv);
    clattn_tensor to = tu_problem_o(p, o);
    char what[200];
    snprintf(what, sizeof what, "%s: clattn_scores", c->name);
    TU_ASSERT_OK(clattn_scores(tu_ctx(), &s.d, &p->tq, &p->tk, &ts), "%s", what);
    TU_ASSERT_CLOSE(what, &ts, want_s, NULL, TOL);

    /* the reference: O, weights, LSE */
    float *ro = tu_alloc(n_o, NAN), *rw = tu_alloc(n_s, NAN), *rl = tu_alloc(rows, NAN);
    clattn_tensor tro = tu_problem_o(p, ro),
                  trw = clattn_tensor_host(rw, p->b, p->h_q, p->n_q, p->n_kv);
    clattn_tensor trl = clattn_tensor_host(rl, p->b, p->h_q, p->n_q, 1);
    clattn_attention_desc rd = s.d;
    rd.weights = &trw;
    rd.lse = &trl;
    ck_assert_int_eq(clattn_reference_attention(&rd, &p->tq, &p->tk, &p->tv, &tro), CLATTN_SUCCESS);

    clattn_attention_desc sd = clattn_attention_desc_default();
    sd.work_group_size = wgs;
    snprintf(what, sizeof what, "%s: clattn_softmax (work_group_size %zu) of the scores", c->name,
             wgs);
    TU_ASSERT_OK(clattn_softmax(tu_ctx(), &sd, &ts, &tw), "%s", what);
    TU_ASSERT_CLOSE(what, &tw, NULL, rw, TOL);
    snprintf(what, sizeof what, "%s: clattn_weighted_sum of those weights", c->name);
    TU_ASSERT_OK(clattn_weighted_sum(tu_ctx(), NULL, &tw, &p->tv, &to), "%s", what);
    TU_ASSERT_CLOSE(what, &to, NULL, ro, TOL);

    float *l = tu_alloc(rows, 12345.0f);
    clattn_tensor tl = clattn_tensor_host(l, p->b, p->h_q, p->n_q, 1);
    for (int a = 0; a < 2; a++) {
        clattn_attention_desc d = s.d;
        d.algorithm = tu_algorithms[a];
        d.weights = &tw;
        d.lse = &tl;
        snprintf(what, sizeof what, "%s: attention [%s]", c->name,
                 tu_algorithm_name(tu_algorithms[a]));
        TU_ASSERT_OK(clattn_attention(tu_ctx(), &d, &p->tq, &p->tk, &p->tv, &to), "%s", what);
        char name[240];
        snprintf(name, sizeof name, "%s O", what);
        TU_ASSERT_CLOSE(name, &to, NULL, ro, TOL);
        snprintf(name, sizeof name, "%s weights", what);
        TU_ASSERT_CLOSE(name, &tw, NULL, rw, TOL);
        snprintf(name, sizeof name, "%s LSE", what);
        TU_ASSERT_CLOSE(name, &tl, NULL, rl, TOL);
        /* without weights: the unfused pipeline's sparse workspace (tiles no row of a
         * group sees are neither computed nor read), the fused kernel's own LSE */
        d.weights = NULL;
        snprintf(name, sizeof name, "%s without weights", what);
        TU_ASSERT_OK(clattn_attention(tu_ctx(), &d, &p->tq, &p->tk, &p->tv, &to), "%s", name);
        snprintf(name, sizeof name, "%s without weights: O", what);
        TU_ASSERT_CLOSE(name, &to, NULL, ro, TOL);
        snprintf(name, sizeof name, "%s without weights: LSE", what);
        TU_ASSERT_CLOSE(name, &tl, NULL, rl, TOL);
    }
    free(want_s);
    free(sc);
    free(w);
    free(o);
    free(ro);
    free(rw);
    free(rl);
    free(l);
    sprob_free(&s);
}

START_TEST(public_stages_every_score_term)
{
    /* the 1x1 case: q = k = [[1]], scale 1, slope 1, q_start 1: S = 1 − 1·|1 − 0| = 0 */
    tu_small_blocking(false);
    {
        float one[1] = {1.0f}, s[1] = {7.0f}, slope[1] = {1.0f};
        clattn_tensor t1 = clattn_tensor_host(one, 1, 1, 1, 1),
                      ts = clattn_tensor_host(s, 1, 1, 1, 1);
        clattn_attention_desc d = clattn_attention_desc_default();
        d.scale = 1.0f;
        d.alibi_slopes = slope;
        d.q_start = 1;
        TU_ASSERT_OK(clattn_scores(tu_ctx(), &d, &t1, &t1, &ts), "clattn_scores 1x1");
        ck_assert_msg(s[0] == 0.0f,
                      "clattn_scores(q = k = [[1]], scale 1, ALiBi slope 1, q_start 1) = %g, "
                      "expected 0",
                      (double)s[0]);
    }
    static const size_t wgs[6] = {0, 1, 3, 7, 16, 64};
    const uint32_t seed = tu_seed() ^ 0x5c04e5u;
    for (int c = 0; c < N_SCONFS; c++) {
        tu_small_blocking(true);
        stages_case(&SCONFS[c], seed + (uint32_t)c, wgs[c % 6]);
    }
    tu_small_blocking(false);
    printf("public stages: %d configurations, base seed 0x%08x\n", N_SCONFS, seed);
}
END_TEST

/* The public softmax on rows with NaN, +inf, all −∞, a single finite entry, at several
 * work-group sizes, against a float64 softmax (NaN in a row → the row NaN; +inf → NaN, as
 * IEEE arithmetic gives; all −∞ → zeros). */
START_TEST(public_softmax_special_rows)
{
    tu_small_blocking(false);
    const int64_t rows = 9, width = 83;
    float *x = tu_alloc((size_t)(rows * width), 0.0f), *y = tu_alloc((size_t)(rows * width), 7.0f);
    double *want = malloc(sizeof(double) * (size_t)(rows * width));
    tu_fill_gen(x, (size_t)(rows * width), tu_seed() ^ 0x50f7u, 8.0f);
    for (int64_t j = 0; j < width; j++) {
        x[0 * width + j] = j == 3 ? NAN : -INFINITY;                /* NaN among −∞: NaN */
        x[1 * width + j] = j == width - 1 ? NAN : x[1 * width + j]; /* NaN in the tail */
        x[2 * width + j] = -INFINITY;                               /* all masked: zeros */
        x[3 * width + j] = j == 70 ? 2.5f : -INFINITY;              /* one finite entry: 1 there */
        if (j == 17)
            x[4 * width + j] = INFINITY;           /* +inf: NaN */
        x[5 * width + j] = -100.0f - (float)j;     /* far below 0 */
        x[6 * width + j] = 80.0f + (float)(j % 7); /* near exp's overflow */
    }
    for (int64_t r = 0; r < rows; r++) {
        const float *in = x + r * width;
        double m = -INFINITY, l = 0.0;
        bool nan = false;
        for (int64_t j = 0; j < width; j++) {
            nan = nan || isnan(in[j]);
            m = fmax(m, (double)in[j]);
        }
        for (int64_t j = 0; j < width; j++)
            l += m == -INFINITY ? 0.0 : exp((double)in[j] - m);
        for (int64_t j = 0; j < width; j++)
            want[r * width + j] = nan ? NAN : m == -INFINITY ? 0.0 : exp((double)in[j] - m) / l;
    }
    const size_t sizes[5] = {0, 1, 5, 32, 100};
    clattn_tensor tx = clattn_tensor_host(x, 1, 1, rows, width),
                  ty = clattn_tensor_host(y, 1, 1, rows, width);
    for (int s = 0; s < 5; s++) {
        clattn_attention_desc d = clattn_attention_desc_default();
        d.work_group_size = sizes[s];
        char what[96];
        snprintf(what, sizeof what, "clattn_softmax of special rows (work_group_size %zu)",
                 sizes[s]);
        clattn_status st = clattn_softmax(tu_ctx(), &d, &tx, &ty);
        if (st == CLATTN_ERROR_UNSUPPORTED) /* a size above this device's limit */
            continue;
        TU_ASSERT_OK(st, "%s", what);
        TU_ASSERT_CLOSE(what, &ty, want, NULL, TOL);
    }
    free(x);
    free(y);
    free(want);
}
END_TEST

/* ---- 2. NaN, masked rows, online softmax, far positions, head mean ---------------------- */

/* Runs both algorithms (with weights and LSE) and compares O, LSE and weights with the
 * reference; returns nothing, fails the test on a mismatch. */
static void against_reference(const char *label, const tu_problem *p,
                              const clattn_attention_desc *desc, bool weights)
{
    const size_t n_o = (size_t)(p->b * p->h_q * p->n_q * p->d_v),
                 n_w = (size_t)(p->b * (desc->weights_head_mean ? 1 : p->h_q) * p->n_q * p->n_kv),
                 rows = (size_t)(p->b * p->h_q * p->n_q);
    const int64_t wh = desc->weights_head_mean ? 1 : p->h_q;
    float *ro = tu_alloc(n_o, NAN), *rw = tu_alloc(n_w, NAN), *rl = tu_alloc(rows, NAN);
    clattn_tensor tro = tu_problem_o(p, ro),
                  trw = clattn_tensor_host(rw, p->b, wh, p->n_q, p->n_kv),
                  trl = clattn_tensor_host(rl, p->b, p->h_q, p->n_q, 1);
    clattn_attention_desc rd = *desc;
    rd.weights = weights ? &trw : NULL;
    rd.lse = &trl;
    ck_assert_int_eq(clattn_reference_attention(&rd, &p->tq, &p->tk, &p->tv, &tro), CLATTN_SUCCESS);
    for (int a = 0; a < 2; a++) {
        float *o = tu_alloc(n_o, 12345.0f), *w = tu_alloc(n_w, 12345.0f),
              *l = tu_alloc(rows, 12345.0f);
        clattn_tensor to = tu_problem_o(p, o),
                      tw = clattn_tensor_host(w, p->b, wh, p->n_q, p->n_kv),
                      tl = clattn_tensor_host(l, p->b, p->h_q, p->n_q, 1);
        clattn_attention_desc d = *desc;
        d.algorithm = tu_algorithms[a];
        d.weights = weights ? &tw : NULL;
        d.lse = &tl;
        char what[300];
        snprintf(what, sizeof what, "%s [%s, n_q %lld, n_kv %lld%s]", label,
                 tu_algorithm_name(tu_algorithms[a]), (long long)p->n_q, (long long)p->n_kv,
                 weights ? ", weights" : "");
        TU_ASSERT_OK(clattn_attention(tu_ctx(), &d, &p->tq, &p->tk, &p->tv, &to), "%s", what);
        char name[340];
        snprintf(name, sizeof name, "%s O", what);
        TU_ASSERT_CLOSE(name, &to, NULL, ro, TOL);
        snprintf(name, sizeof name, "%s LSE", what);
        TU_ASSERT_CLOSE(name, &tl, NULL, rl, TOL);
        if (weights) {
            snprintf(name, sizeof name, "%s weights", what);
            TU_ASSERT_CLOSE(name, &tw, NULL, rw, TOL);
        }
        free(o);
        free(w);
        free(l);
    }
    free(ro);
    free(rw);
    free(rl);
}

/* Keys no row sees contribute nothing even when their V rows hold one kind of non-finite
 * value alone: +inf, −inf or NaN, at column 0, 17 (past the first 16) or d_v − 1 of one
 * masked key. The tiled kernels test each staged V tile once for inf and NaN and take a
 * path without per-weight tests when there is none; a test that mixes the kinds, or puts
 * them only in the first 16 columns, cannot see a check that misses one kind or some
 * columns (mutants C37–C39, F18, W07). Causal (top-left), n_q 60 < n_kv 64: keys 60–63
 * are masked for every row, and rows 48–59 see part of the 16-key tile that holds them. */
START_TEST(masked_v_one_nonfinite_kind)
{
    tu_small_blocking(true);
    const float kinds[3] = {INFINITY, -INFINITY, NAN};
    const int64_t d_v = 40, cols[3] = {0, 17, 39};
    for (int k = 0; k < 3; k++)
        for (int c = 0; c < 3; c++) {
            tu_problem p;
            tu_problem_init(&p, 1, 1, 1, 60, 64, SDK, d_v, 71, 72, 73, 0);
            p.v[62 * d_v + cols[c]] = kinds[k];
            clattn_attention_desc d = clattn_attention_desc_default();
            d.mask = CLATTN_MASK_CAUSAL_TOP_LEFT;
            char what[96];
            snprintf(what, sizeof what, "masked key 62 with V[62][%lld] = %g alone",
                     (long long)cols[c], (double)kinds[k]);
            against_reference(what, &p, &d, false);
            tu_problem_free(&p);
        }
    tu_small_blocking(false);
}
END_TEST

/* K as a view with a stride of 2 along d (every other float of its buffer, NaN between)
 * and with d_k 20 (not a multiple of 8) or 24: the tiled kernels stage K transposed in
 * 8×8 register blocks only for rows dense along d, element by element otherwise and for
 * the columns past the last whole 8 (mutants C45, C46). Both algorithms against the
 * float64 reference on the same views, n_q 40 (tiled, several 16-key tiles). Then d_k
 * and d_v 32, n_q 2 (the decode kernel, whose rows of whole float16 vectors take plain
 * loads only at unit stride: mutant DT07). */
START_TEST(strided_k_transposed_staging)
{
    tu_small_blocking(true);
    const int64_t dks[3] = {20, 24, 32};
    for (int s = 0; s < 3; s++)
        for (int strided = 0; strided < 2; strided++) {
            const bool decode = dks[s] == 32;
            const int64_t d_k = dks[s], n_q = decode ? 2 : 40, n_kv = 53;
            tu_problem p;
            tu_problem_init(&p, 1, 2, 1, n_q, n_kv, d_k, decode ? 32 : SDV, 81, 82, 83, 0);
            float *k2 = tu_alloc((size_t)(2 * n_kv * d_k), NAN);
            for (int64_t i = 0; i < n_kv * d_k; i++)
                k2[strided ? 2 * i : i] = p.k[i];
            clattn_tensor tk = p.tk;
            tk.host = k2;
            if (strided) {
                tk.strides[3] = 2;
                tk.strides[2] = 2 * d_k;
                tk.strides[1] = tk.strides[0] = 2 * d_k * n_kv;
            }
            tu_problem q = p;
            q.tk = tk;
            clattn_attention_desc d = clattn_attention_desc_default();
            d.mask = CLATTN_MASK_CAUSAL_BOTTOM_RIGHT;
            char what[96];
            snprintf(what, sizeof what, "K %s, d_k %lld, n_q %lld",
                     strided ? "with stride 2 along d" : "dense", (long long)d_k, (long long)n_q);
            against_reference(what, &q, &d, false);
            free(k2);
            tu_problem_free(&p);
        }
    tu_small_blocking(false);
}
END_TEST

/* K and V laid out [b, n_kv, h_kv, d] (FlashAttention's cache: each row holds every KV
 * head) with GQA decoding: against the float64 reference on the same views, with the
 * plan's heads. On a CPU device the decode kernel then takes every KV head per work-item
 * (whole rows; 4 heads x 8 rows, within tuning.c's CPU_DECODE_ROWS_INTERLEAVED for
 * 256-byte parts) and says so, where the same problem in [b, h_kv, n_kv, d] does not
 * take all 4. */
START_TEST(bshd_decode_reads_whole_rows)
{
    const int64_t b = 2, h_q = 32, h_kv = 4, n_q = 1, n_kv = 53, d = 64;
    tu_problem p;
    tu_problem_init(&p, b, h_q, h_kv, n_q, n_kv, d, d, 91, 92, 93, 0);
    const size_t n = (size_t)(b * h_kv * n_kv * d);
    float *k2 = tu_alloc(n, NAN), *v2 = tu_alloc(n, NAN);
    for (int64_t e = 0; e < b; e++)
        for (int64_t h = 0; h < h_kv; h++)
            for (int64_t j = 0; j < n_kv; j++)
                for (int64_t c = 0; c < d; c++) {
                    const int64_t from = ((e * h_kv + h) * n_kv + j) * d + c,
                                  to = ((e * n_kv + j) * h_kv + h) * d + c;
                    k2[to] = p.k[from];
                    v2[to] = p.v[from];
                }
    tu_problem q = p;
    q.tk.host = k2;
    q.tv.host = v2;
    const int64_t st[4] = {n_kv * h_kv * d, d, h_kv * d, 1};
    memcpy(q.tk.strides, st, sizeof st);
    memcpy(q.tv.strides, st, sizeof st);
    clattn_attention_desc desc = clattn_attention_desc_default();
    against_reference("K and V [b, n_kv, h_kv, d], GQA decode", &q, &desc, false);
    cl_device_id dev;
    cl_device_type type = 0;
    TU_ASSERT_OK(clattn_context_get_cl(tu_ctx(), NULL, &dev, NULL), "get cl");
    ck_assert_int_eq(clGetDeviceInfo(dev, CL_DEVICE_TYPE, sizeof type, &type, NULL), CL_SUCCESS);
    if ((type & CL_DEVICE_TYPE_CPU) &&
        clattn_context_kernel_family(tu_ctx()) == CLATTN_KERNEL_FAMILY_CPU) {
        float *o = tu_alloc((size_t)(b * h_q * n_q * d), 0.0f);
        clattn_tensor to = tu_problem_o(&p, o);
        desc.algorithm = CLATTN_ALGORITHM_FUSED;
        clattn_plan plan;
        /* the runtimes whose prefetch is clang's (context.c): in this layout into L2 */
        cl_platform_id platform;
        char pname[256] = "";
        ck_assert_int_eq(clGetDeviceInfo(dev, CL_DEVICE_PLATFORM, sizeof platform, &platform, NULL),
                         CL_SUCCESS);
        clGetPlatformInfo(platform, CL_PLATFORM_NAME, sizeof pname - 1, pname, NULL);
        const bool l2 = strstr(pname, "Portable Computing Language") != NULL ||
                        strstr(pname, "Intel(R) OpenCL") != NULL;
        const char *l2_text = "; the rows ahead prefetched into L2)";
        for (int layout = 0; layout < 2; layout++) {
            const tu_problem *x = layout ? &q : &p;
            TU_ASSERT_OK(clattn_attention_plan(tu_ctx(), &desc, &x->tq, &x->tk, &x->tv, &to, &plan),
                         "plan");
            const bool all =
                strstr(plan.reason, ", 4 KV heads in turn (K's heads interleave in "
                                    "its rows: 4 of its 4 read together, whole rows") != NULL;
            ck_assert_msg(strcmp(plan.kernels, "decode") == 0 ||
                              strncmp(plan.kernels, "decode,", 7) == 0,
                          "kernels \"%s\"", plan.kernels);
            ck_assert_msg(all == (layout == 1), "%s: reason \"%s\" (expected %s)",
                          layout ? "[b, n_kv, h_kv, d]" : "[b, h_kv, n_kv, d]", plan.reason,
                          layout ? "every KV head per work-item" : "not all 4 KV heads");
            ck_assert_msg((strstr(plan.reason, l2_text) != NULL) == (layout == 1 && l2),
                          "%s on \"%s\": reason \"%s\" (expected %s)",
                          layout ? "[b, n_kv, h_kv, d]" : "[b, h_kv, n_kv, d]", pname, plan.reason,
                          layout == 1 && l2 ? "L2 prefetches" : "no L2 prefetches");
        }
        /* 2 heads forced: the reason says how much of each row a work-item reads */
        TU_ASSERT_OK(clattn_context_set_decode_heads(tu_ctx(), 2), "decode heads 2");
        TU_ASSERT_OK(clattn_attention_plan(tu_ctx(), &desc, &q.tq, &q.tk, &q.tv, &to, &plan),
                     "plan");
        TU_ASSERT_OK(clattn_context_set_decode_heads(tu_ctx(), 0), "decode heads 0");
        ck_assert_msg(strstr(plan.reason, ", 2 KV heads in turn (K's heads interleave in its "
                                          "rows: 2 of its 4 read together") != NULL &&
                          (strstr(plan.reason, l2_text) != NULL) == l2,
                      "2 heads forced: reason \"%s\"", plan.reason);
        /* 1 head forced: no heads in turn, but the prefetch level is still said */
        TU_ASSERT_OK(clattn_context_set_decode_heads(tu_ctx(), 1), "decode heads 1");
        TU_ASSERT_OK(clattn_attention_plan(tu_ctx(), &desc, &q.tq, &q.tk, &q.tv, &to, &plan),
                     "plan");
        TU_ASSERT_OK(clattn_context_set_decode_heads(tu_ctx(), 0), "decode heads 0");
        ck_assert_msg(
            strstr(plan.reason, "in turn") == NULL &&
                (strstr(plan.reason, "(K's heads interleave in its rows: 1 of its 4 read "
                                     "together; the rows ahead prefetched into L2)") != NULL) == l2,
            "1 head forced: reason \"%s\"", plan.reason);
        /* heads interleaved, but each head's part of a row not contiguous (a column stride
         * of 2): not such a layout */
        tu_problem r = q;
        const int64_t st2[4] = {2 * n_kv * h_kv * d, 2 * d, 2 * h_kv * d, 2};
        memcpy(r.tk.strides, st2, sizeof st2);
        float *k3 = tu_alloc(2 * n, 0.0f);
        r.tk.host = k3;
        TU_ASSERT_OK(clattn_attention_plan(tu_ctx(), &desc, &r.tq, &r.tk, &r.tv, &to, &plan),
                     "plan");
        ck_assert_msg(strstr(plan.reason, "interleave") == NULL,
                      "K with a column stride of 2: reason \"%s\"", plan.reason);
        free(k3);
        free(o);
    }
    free(k2);
    free(v2);
    tu_problem_free(&p);
}
END_TEST

/* A NaN score poisons its own row only: a NaN query row, and a float mask with NaN at one
 * key of a row whose other keys are −∞ (a max that drops NaN would call that row empty),
 * in one row a NaN with the sign bit set (x86's default NaN; a max over ordered bits
 * that does not single NaN out puts it below −∞). */
START_TEST(nan_scores_poison_their_row)
{
    const int64_t nqs[2] = {5, 23};
    for (int s = 0; s < 2; s++) {
        tu_small_blocking(true);
        tu_problem p;
        tu_problem_init(&p, 1, 2, 1, nqs[s], 40, SDK, SDV, 61, 62, 63, 0);
        tu_fill_value(p.q + 3 * SDK, SDK, NAN); /* head 0, row 3 */
        float *add = tu_alloc((size_t)(nqs[s] * 40), 0.0f);
        for (int64_t j = 0; j < 40; j++) {
            add[4 * 40 + j] = j == 21 ? NAN : -INFINITY; /* row 4: NaN among −∞ */
            add[1 * 40 + j] = j == 7 ? copysignf(NAN, -1.0f) : -INFINITY; /* row 1: −NaN */
            add[2 * 40 + j] = -INFINITY; /* row 2: no visible key */
        }
        clattn_tensor mt = clattn_tensor_host(add, 1, 1, nqs[s], 40);
        clattn_attention_desc d = clattn_attention_desc_default();
        for (int m = 0; m < 2; m++) {
            d.mask_tensor = m ? &mt : NULL;
            against_reference(m ? "NaN in a float mask among -inf" : "NaN query row", &p, &d, true);
            /* and explicitly: the poisoned row is NaN (not zeros), no other row is (row 4
             * of both heads has the broadcast NaN mask entry) */
            for (int a = 0; a < 2; a++) {
                float *o = tu_run(&p, &d, tu_algorithms[a]);
                for (int64_t h = 0; h < 2; h++)
                    for (int64_t i = 0; i < nqs[s]; i++) {
                        const bool nan_row = (h == 0 && i == 3) || (m && (i == 4 || i == 1));
                        for (int64_t c = 0; c < SDV; c++) {
                            const float x = o[(h * nqs[s] + i) * SDV + c];
                            ck_assert_msg(nan_row ? isnan(x) : isfinite(x),
                                          "%s [%s, n_q %lld]: O(h %lld, i %lld, c %lld) is %g, "
                                          "expected %s",
                                          m ? "NaN in a float mask among -inf" : "NaN query row",
                                          tu_algorithm_name(tu_algorithms[a]), (long long)nqs[s],
                                          (long long)h, (long long)i, (long long)c, (double)x,
                                          nan_row ? "NaN" : "a finite value");
                        }
                    }
                free(o);
            }
        }
        free(add);
        tu_problem_free(&p);
    }
    tu_small_blocking(false);
}
END_TEST

/* Rows with no visible key and padding rows under both policies: O zeros or NaN, padding
 * rows zeros, LSE −∞, weights likewise; both algorithms, decode and tiled, default and
 * small blockings, softmax with several work-items. */
START_TEST(masked_rows_policies)
{
    const int64_t nqs[2] = {5, 23};
    for (int s = 0; s < 2; s++)
        for (int cfg = 0; cfg < 4; cfg++)
            for (int pol = 0; pol < 2; pol++) {
                tu_small_blocking(true);
                tu_problem p;
                tu_problem_init(&p, 2, 2, 1, nqs[s], 29, SDK, SDV, 71, 72, 73, 0);
                clattn_attention_desc d = clattn_attention_desc_default();
                int32_t kv_lens[2] = {0, 29}, q_lens[2] = {(int32_t)nqs[s], 3};
                uint8_t *keep = malloc((size_t)(nqs[s] * 29));
                for (int64_t x = 0; x < nqs[s] * 29; x++)
                    keep[x] = x / 29 >= 1 && x / 29 <= 3 ? 0 : (uint8_t)(x % 3 != 0);
                clattn_tensor mt = clattn_tensor_host(keep, 1, 1, nqs[s], 29);
                mt.dtype = CLATTN_BOOL;
                const char *label = "";
                switch (cfg) {
                case 0: /* batch 0 sees no key; batch 1 has 3 valid rows */
                    d.kv_lens = kv_lens;
                    d.q_lens = q_lens;
                    label = "kv_lens 0 and q_lens";
                    break;
                case 1: /* the window lies past every key */
                    d.window = 1;
                    d.window_left = d.window_right = 0;
                    d.q_start = 100;
                    label = "window past the keys";
                    break;
                case 2: /* rows 1..3 masked by a bool mask */
                    d.mask_tensor = &mt;
                    label = "bool mask rows";
                    break;
                default: /* causal with the queries before the keys: the first rows see none */
                    d.mask = CLATTN_MASK_CAUSAL_TOP_LEFT;
                    d.kv_start = 3;
                    d.q_lens = q_lens;
                    label = "causal, queries before the keys, q_lens";
                    break;
                }
                d.masked_rows = pol ? CLATTN_MASKED_ROWS_NAN : CLATTN_MASKED_ROWS_ZERO;
                char what[128];
                snprintf(what, sizeof what, "%s, masked_rows %s", label, pol ? "NaN" : "zero");
                against_reference(what, &p, &d, true);
                against_reference(what, &p, &d, false);
                free(keep);
                tu_problem_free(&p);
            }
    tu_small_blocking(false);
}
END_TEST

/* Scores far below 0 (a running max started at 0 underflows every exp) and rising from
 * tile to tile (every new tile rescales the accumulator), or falling; several tiles. The
 * scores are exact in float32 (one nonzero column of few bits in Q and K), so float32
 * rounding of scores near −150 does not eat the tolerance. */
START_TEST(online_softmax_rescale)
{
    const int64_t nqs[2] = {6, 30};
    for (int s = 0; s < 2; s++)
        for (int order = 0; order < 3; order++) {
            tu_small_blocking(true);
            const int64_t n_kv = 150;
            tu_problem p;
            tu_problem_init(&p, 1, 2, 2, nqs[s], n_kv, SDK, SDV, 81, 82, 83, 0);
            tu_fill_value(p.q, (size_t)tu_count(&p.tq), 0.0f);
            tu_fill_value(p.k, (size_t)tu_count(&p.tk), 0.0f);
            for (int64_t h = 0; h < 2; h++) {
                for (int64_t i = 0; i < nqs[s]; i++)
                    p.q[(h * nqs[s] + i) * SDK] = 15.0f + 0.125f * (float)(i % 8);
                for (int64_t j = 0; j < n_kv; j++) {
                    const float t = 0.0625f * (float)(j / 4);
                    /* rising, falling, or high in the fifth 16-key tile */
                    float k0 = order == 0   ? -10.0f + 0.25f * t
                               : order == 1 ? -7.0f - 0.25f * t
                                            : -10.0f + 3.0f * (float)(j / 16 == 4);
                    if (order == 2 && j % 16 == 3)
                        k0 = 2.0f; /* and some large positive scores */
                    p.k[(h * n_kv + j) * SDK] = k0;
                }
            }
            clattn_attention_desc d = clattn_attention_desc_default();
            d.scale = 1.0f;
            against_reference(order == 0   ? "scores near -150, rising"
                              : order == 1 ? "scores near -120, falling"
                                           : "scores near -150 with peaks",
                              &p, &d, s == 1);
            tu_problem_free(&p);
        }
    tu_small_blocking(false);
}
END_TEST

/* ALiBi at far positions with realistic slopes: each key's bias relative to the row's
 * nearest visible key keeps the differences between keys exact, so O and the weights
 * match the float64 reference at q_start 1e5 and 1e8. */
START_TEST(alibi_far_positions_realistic_slopes)
{
    /* the case: Q = 0, K = [0, 0], V = [0, 1], slope 1, q_start 1e8 */
    for (int a = 0; a < 2; a++) {
        tu_small_blocking(false);
        float q[1] = {0.0f}, k[2] = {0.0f, 0.0f}, v[2] = {0.0f, 1.0f}, o[1] = {7.0f},
              slope[1] = {1.0f};
        clattn_tensor tq = clattn_tensor_host(q, 1, 1, 1, 1),
                      tk = clattn_tensor_host(k, 1, 1, 2, 1),
                      tv = clattn_tensor_host(v, 1, 1, 2, 1),
                      to = clattn_tensor_host(o, 1, 1, 1, 1);
        clattn_attention_desc d = clattn_attention_desc_default();
        d.algorithm = tu_algorithms[a];
        d.alibi_slopes = slope;
        d.q_start = 100000000;
        TU_ASSERT_OK(clattn_attention(tu_ctx(), &d, &tq, &tk, &tv, &to), "ALiBi 1e8");
        const double want = 1.0 / (1.0 + exp(-1.0)); /* 0.7310585786 */
        ck_assert_msg(fabs(o[0] - want) < 1e-6,
                      "ALiBi slope 1 at q_start 1e8 [%s]: O %.10f, expected %.10f",
                      tu_algorithm_name(tu_algorithms[a]), (double)o[0], want);
    }
    const int64_t starts[2] = {100000, 100000000};
    float slopes[4] = {0.5f, 1.0f, 0.0625f, 0.25f};
    for (int s = 0; s < 2; s++)
        for (int cfg = 0; cfg < 4; cfg++) {
            tu_small_blocking(true);
            const int64_t n_q = cfg < 2 ? 12 : 5;
            tu_problem p;
            tu_problem_init(&p, 1, 4, 2, n_q, 40, SDK, SDV, 91, 92, 93, 0);
            clattn_attention_desc d = clattn_attention_desc_default();
            d.alibi_slopes = slopes;
            d.q_start = starts[s];
            if (cfg == 1 || cfg == 3) { /* keys just behind the queries, causal, a window */
                d.kv_start = starts[s] - 30;
                d.mask = CLATTN_MASK_CAUSAL_BOTTOM_RIGHT;
                d.window = 1;
                d.window_left = 25;
                d.window_right = -1;
            }
            char what[96];
            snprintf(what, sizeof what, "ALiBi slopes 0.5, 1, 1/16, 1/4 at q_start %lld%s",
                     (long long)starts[s], cfg % 2 ? ", kv_start behind, causal, window" : "");
            against_reference(what, &p, &d, true);
            against_reference(what, &p, &d, false);
            tu_problem_free(&p);
        }
    tu_small_blocking(false);
}
END_TEST

/* The softmax's exponential over the whole float32 range of s − m: rows of two keys with
 * scores 0 and x (Q = x, K = (0, 1), V the 2×2 identity, scale 1), so O = (1, e^x)/(1 + e^x)
 * exactly, for 7,996 values of x in [−104, 104] and 20 at the edges of rows.cl's
 * exp_softmax16 (its range reduction's half-steps, ln of the smallest normal float, 88).
 * Both algorithms, tiled (one head of 8,016 rows) and decoding (501 query heads of 16
 * rows on one KV head), against float64: within 4 float32 ulps (4·2⁻²⁴ relative) plus one
 * subnormal ulp (2⁻¹⁴⁹) absolute on devices with denormals (CL_FP_DENORM: results below
 * FLT_MIN are the IEEE subnormals, as R14 asks of PoCL), else plus FLT_MIN (they may be
 * 0); the worst is printed. */
START_TEST(softmax_exp_whole_range)
{
    tu_small_blocking(false);
    enum { N_GRID = 7996 }; /* 8,016 rows: 16 query rows of 501 heads for the decode path */
    static const float special[] = {0.0f,        -1e-30f,     -1e-7f,     -0.3465735f, -0.3465736f,
                                    -0.6931472f, -1.0397208f, -2.0f,      -86.99f,     -87.0f,
                                    -87.33654f,  -87.33655f,  -87.34f,    -88.0f,      -88.72f,
                                    -103.97f,    1e-7f,       0.3465736f, 87.0f,       88.0f};
    const int64_t n_sp = (int64_t)(sizeof special / sizeof special[0]), n_q = N_GRID + n_sp;
    tu_problem p;
    tu_problem_init(&p, 1, 1, 1, n_q, 2, 1, 2, 1, 2, 3, 0);
    for (int64_t i = 0; i < n_q; i++)
        p.q[i] =
            i < N_GRID ? (float)(-104.0 + 208.0 * (double)i / (N_GRID - 1)) : special[i - N_GRID];
    p.k[0] = 0.0f;
    p.k[1] = 1.0f;
    p.v[0] = p.v[3] = 1.0f;
    p.v[1] = p.v[2] = 0.0f;
    double *want = malloc(sizeof(double) * (size_t)(2 * n_q));
    for (int64_t i = 0; i < n_q; i++) { /* 1/(1 + e^x) and e^x/(1 + e^x), stably */
        const double x = p.q[i], e = exp(-fabs(x));
        want[2 * i + (x > 0)] = 1.0 / (1.0 + e);
        want[2 * i + (x <= 0)] = e / (1.0 + e);
    }
    clattn_attention_desc d = clattn_attention_desc_default();
    d.scale = 1.0f;
    /* devices with denormals (CL_FP_DENORM): results below FLT_MIN as IEEE subnormals, to
     * one subnormal ulp (2^-149); without, they may be 0 */
    cl_device_id dev;
    cl_device_fp_config fp = 0;
    TU_ASSERT_OK(clattn_context_get_cl(tu_ctx(), NULL, &dev, NULL), "device");
    clGetDeviceInfo(dev, CL_DEVICE_SINGLE_FP_CONFIG, sizeof fp, &fp, NULL);
    const tu_tol tol = {(fp & CL_FP_DENORM) ? ldexp(1.0, -149) : FLT_MIN, 4.0 / 16777216.0};
    printf("softmax exp: the device %s denormals (absolute tolerance %g)\n",
           (fp & CL_FP_DENORM) ? "has" : "has no", tol.atol);
    for (int c = 0; c < 4; c++) {
        const bool decode = c >= 2;
        d.algorithm = tu_algorithms[c % 2];
        float *o = tu_alloc((size_t)(2 * n_q), NAN);
        clattn_tensor tq = p.tq, to = tu_problem_o(&p, o);
        if (decode) {
            tq = clattn_tensor_host(p.q, 1, n_q / 16, 16, 1);
            to = clattn_tensor_host(o, 1, n_q / 16, 16, 2);
        }
        TU_ASSERT_OK(clattn_attention(tu_ctx(), &d, &tq, &p.tk, &p.tv, &to), "%s%s",
                     tu_algorithm_name(d.algorithm), decode ? ", decoding" : "");
        /* in float32 ulps (2^-24 relative) of the expected value, over the normal results,
         * and over those with x < −17 (1 + e^x rounds to 1 there: the exponential's own
         * error) */
        double worst = 0.0, worst_exp = 0.0;
        for (int64_t e = 0; e < 2 * n_q; e++)
            if (want[e] >= FLT_MIN) {
                const double u = fabs(o[e] - want[e]) / want[e] * 16777216.0;
                worst = fmax(worst, u);
                if (fabs(p.q[e / 2]) > 17.0 && want[e] < 0.5)
                    worst_exp = fmax(worst_exp, u);
            }
        char what[96];
        snprintf(what, sizeof what, "O = (1, e^x)/(1 + e^x), %s%s", tu_algorithm_name(d.algorithm),
                 decode ? ", decoding" : "");
        TU_ASSERT_CLOSE(what, &to, want, NULL, tol);
        printf("softmax exp over [-104, 104], %s%s: worst %.2f ulp (2^-24 relative); e^x alone "
               "(|x| > 17) %.2f ulp\n",
               tu_algorithm_name(d.algorithm), decode ? ", decoding" : "", worst, worst_exp);
        free(o);
    }
    free(want);
    tu_problem_free(&p);
}
END_TEST

/* The half-arithmetic tests' inputs: Q, K and V of p (one KV head; cnt: their element
 * counts) times mul rounded to float16, the bits into h16[0..2] (malloc'ed) and the
 * rounded values back into p; *e_bound = E = 3·2⁻¹¹·scale·max_ij Σ_c|q_ic·k_jc| +
 * d_k·2⁻¹⁴·scale (SEMANTICS.md's first-order bound on a score, scale 1/√d_k), *v_max =
 * max|V|. */
static void half_inputs(tu_problem *p, float mul, const int64_t cnt[3], uint16_t *h16[3],
                        double *e_bound, double *v_max)
{
    float *arr[3] = {p->q, p->k, p->v};
    const int64_t dk = p->d_k, rows = cnt[0] / dk;
    *v_max = 0.0;
    for (int a = 0; a < 3; a++) {
        h16[a] = malloc(sizeof(uint16_t) * (size_t)cnt[a]);
        for (int64_t e = 0; e < cnt[a]; e++) {
            h16[a][e] = clattn_f32_to_f16(mul * arr[a][e]);
            arr[a][e] = clattn_f16_to_f32(h16[a][e]);
        }
    }
    for (int64_t e = 0; e < cnt[2]; e++)
        *v_max = fmax(*v_max, fabs(p->v[e]));
    double sum_max = 0.0;
    for (int64_t i = 0; i < rows; i++)
        for (int64_t j = 0; j < p->n_kv; j++) {
            double sum = 0.0;
            for (int64_t c = 0; c < dk; c++)
                sum += fabs((double)p->q[i * dk + c] * p->k[j * dk + c]);
            sum_max = fmax(sum_max, sum);
        }
    const double scale = 1.0 / sqrt((double)dk);
    *e_bound = 3.0 * ldexp(1.0, -11) * scale * sum_max + (double)dk * ldexp(1.0, -14) * scale;
}

/* desc.half_arithmetic (docs/SEMANTICS.md, "Half arithmetic"): float16 Q, K and V, GQA
 * 2:1, a causal mask, d_k 36 (groups of 4 columns and none left over), n_q 70 (the tiled
 * kernels). Where the GPU family's fused kernel runs on a device with cl_khr_fp16 the
 * plan says "half arithmetic" and O differs from the float32 path's somewhere (the path
 * ran); elsewhere the plan says why not and O has the float32 path's bits. Either way O
 * is within the documented bound of the float64 reference on the same (float16) inputs:
 * |ΔO| ≤ 2·E·max|V| + 1e-5 + 1e-5·|O|, E = 3·2⁻¹¹·scale·max Σ_c|q_c·k_c| + d_k·2⁻¹⁴·scale
 * (first order; the second term for products below 2⁻¹⁴, subnormal or flushed); the worst error
 * and the bound are printed. The last key's V holds an inf that only the last row sees;
 * K is strided along d (a stride of 2). The same K and V as pages (reversed in the pool)
 * give O bit for bit (with half arithmetic where it runs, else without). */
START_TEST(half_arithmetic_error_bound)
{
    tu_small_blocking(false);
    const int64_t h_q = 2, n_q = 70, n_kv = 150, dk = 36, dv = 24;
    tu_problem p;
    tu_problem_init(&p, 1, h_q, 1, n_q, n_kv, dk, dv, 91, 92, 93, 0);
    const int64_t cnt[3] = {h_q * n_q * dk, n_kv * dk, n_kv * dv};
    uint16_t *h16[3];
    double e_max, v_max; /* N(0,1)-like values times 2, rounded to float16 */
    half_inputs(&p, 2.0f, cnt, h16, &e_max, &v_max);
    clattn_attention_desc d = clattn_attention_desc_default();
    d.mask = CLATTN_MASK_CAUSAL_BOTTOM_RIGHT;
    d.algorithm = CLATTN_ALGORITHM_FUSED;
    /* the last key's value inf in column 0: only the last row sees it (its O is inf
     * there); the other rows' weight 0 must add nothing */
    h16[2][(n_kv - 1) * dv] = 0x7c00;
    p.v[(n_kv - 1) * dv] = INFINITY;
    float *ref = tu_reference(&p, &d, NULL);
    /* K strided along d (every other element: the staging's element-wise path) */
    uint16_t *k2 = calloc((size_t)(2 * cnt[1]), sizeof(uint16_t));
    for (int64_t e = 0; e < cnt[1]; e++)
        k2[2 * e] = h16[1][e];
    clattn_tensor tq = clattn_tensor_host(h16[0], 1, h_q, n_q, dk),
                  tk = clattn_tensor_host(k2, 1, 1, n_kv, dk),
                  tv = clattn_tensor_host(h16[2], 1, 1, n_kv, dv);
    tk.strides[0] = 2 * n_kv * dk, tk.strides[1] = 2 * n_kv * dk, tk.strides[2] = 2 * dk;
    tk.strides[3] = 2;
    tq.dtype = tk.dtype = tv.dtype = CLATTN_FLOAT16;
    float *o[2];
    for (int half = 0; half < 2; half++) {
        d.half_arithmetic = half;
        o[half] = tu_alloc((size_t)(h_q * n_q * dv), NAN);
        clattn_tensor to = clattn_tensor_host(o[half], 1, h_q, n_q, dv);
        TU_ASSERT_OK(clattn_attention(tu_ctx(), &d, &tq, &tk, &tv, &to), "half_arithmetic %d",
                     half);
    }
    clattn_plan plan;
    clattn_tensor to = clattn_tensor_host(o[1], 1, h_q, n_q, dv);
    TU_ASSERT_OK(clattn_attention_plan(tu_ctx(), &d, &tq, &tk, &tv, &to, &plan), "plan");
    cl_device_id dev;
    char ext[8192] = "";
    TU_ASSERT_OK(clattn_context_get_cl(tu_ctx(), NULL, &dev, NULL), "device");
    clGetDeviceInfo(dev, CL_DEVICE_EXTENSIONS, sizeof ext - 1, ext, NULL);
    const bool want = clattn_context_kernel_family(tu_ctx()) == CLATTN_KERNEL_FAMILY_GPU &&
                      strstr(ext, "cl_khr_fp16") != NULL;
    ck_assert_msg(
        strstr(plan.reason, want ? "; half arithmetic" : "; half arithmetic asked, not used") &&
            (want == !strstr(plan.reason, "not used")),
        "plan: %s (half arithmetic expected: %d)", plan.reason, (int)want);
    size_t differ = 0;
    for (int64_t e = 0; e < h_q * n_q * dv; e++)
        differ += memcmp(&o[0][e], &o[1][e], sizeof(float)) != 0;
    ck_assert_msg(want ? differ > 0 : differ == 0,
                  "%zu of %lld elements differ from the float32 path (half arithmetic %s)", differ,
                  (long long)(h_q * n_q * dv), want ? "ran" : "did not run");
    /* the same K and V in a pool of pages of 16 keys, in reverse order (the staging's
     * paged path): O bit for bit that of the contiguous call */
    enum { PS = 16, NP = 10 }; /* 10 pages of 16 hold the 150 keys */
    uint16_t *pool[2] = {calloc((size_t)(NP * PS * dk), 2), calloc((size_t)(NP * PS * dv), 2)};
    int32_t table[NP], kv_len = (int32_t)n_kv;
    for (int pg = 0; pg < NP; pg++)
        table[pg] = NP - 1 - pg;
    for (int64_t j = 0; j < n_kv; j++) {
        const int64_t at = table[j / PS] * PS + j % PS;
        memcpy(pool[0] + at * dk, h16[1] + j * dk, sizeof(uint16_t) * (size_t)dk);
        memcpy(pool[1] + at * dv, h16[2] + j * dv, sizeof(uint16_t) * (size_t)dv);
    }
    clattn_paged_kv pg = {0};
    pg.block_table = table;
    pg.max_pages = NP;
    clattn_tensor tkp = clattn_tensor_host(pool[0], NP, 1, PS, dk),
                  tvp = clattn_tensor_host(pool[1], NP, 1, PS, dv);
    tkp.dtype = tvp.dtype = CLATTN_FLOAT16;
    { /* (one program less to build than both: half arithmetic where it runs) */
        const int half = want ? 1 : 0;
        clattn_attention_desc dp = d;
        dp.half_arithmetic = half;
        dp.paged = &pg;
        dp.kv_lens = &kv_len;
        float *op = tu_alloc((size_t)(h_q * n_q * dv), NAN);
        clattn_tensor top = clattn_tensor_host(op, 1, h_q, n_q, dv);
        TU_ASSERT_OK(clattn_attention(tu_ctx(), &dp, &tq, &tkp, &tvp, &top),
                     "paged, half_arithmetic %d", half);
        for (int64_t e = 0; e < h_q * n_q * dv; e++)
            ck_assert_msg(memcmp(&op[e], &o[half][e], sizeof(float)) == 0,
                          "paged K/V, half_arithmetic %d: O[%lld] = %.9g, contiguous %.9g", half,
                          (long long)e, (double)op[e], (double)o[half][e]);
        free(op);
    }
    free(pool[0]);
    free(pool[1]);
    const tu_tol tol = {2.0 * e_max * v_max * 1.1 + 1e-5, 1e-5};
    double worst = 0.0;
    for (int64_t e = 0; e < h_q * n_q * dv; e++)
        if (isfinite(ref[e]))
            worst = fmax(worst, fabs((double)o[1][e] - ref[e]));
    TU_ASSERT_CLOSE("O, half arithmetic", &to, NULL, ref, tol);
    printf("half arithmetic (%s): worst |dO| %.3g, bound %.3g (E %.3g, max|V| %.3g); %zu of %lld "
           "elements differ from float32\n",
           want ? "ran" : "not used", worst, tol.atol, e_max, v_max, differ,
           (long long)(h_q * n_q * dv));
    for (int a = 0; a < 3; a++)
        free(h16[a]);
    free(k2);
    free(o[0]);
    free(o[1]);
    free(ref);
    tu_problem_free(&p);
}
END_TEST

/* The half-arithmetic path keeps Q, K and V as half in local memory, so the GPU family's
 * planning counts 2 bytes for them (host/plan_gpu.c) and takes larger blockings where
 * float32 tiles would not fit. d_k 1024, d_v 16 (Q and K tiles dominate), float16 Q, K, V
 * (seeds 94, 95, 96), 20 queries, 150 keys (three tiles of 64: the rescale): the plan with
 * half arithmetic holds at least the rows × keys of the float32 plan; on a device with
 * 256 KiB of local memory (Intel's CPU runtime) exactly: 64 keys per tile against 16 (4
 * rows per work-item, 128 work-items either way). O within the bound of
 * half_arithmetic_error_bound, the worst error printed. (d_v 1024 or d_k = d_v = 512 show
 * it too, but Intel's runtime takes minutes to build those.) */
START_TEST(half_arithmetic_local_memory)
{
    tu_small_blocking(false);
    const int64_t n_q = 20, n_kv = 150, dk = 1024, dv = 16;
    tu_problem p;
    tu_problem_init(&p, 1, 1, 1, n_q, n_kv, dk, dv, 94, 95, 96, 0);
    const int64_t cnt[3] = {n_q * dk, n_kv * dk, n_kv * dv};
    uint16_t *h16[3];
    double e_max, v_max;
    half_inputs(&p, 1.0f, cnt, h16, &e_max, &v_max);
    clattn_attention_desc d = clattn_attention_desc_default();
    d.algorithm = CLATTN_ALGORITHM_FUSED;
    float *ref = tu_reference(&p, &d, NULL);
    float *o = tu_alloc((size_t)(n_q * dv), NAN);
    clattn_tensor tq = clattn_tensor_host(h16[0], 1, 1, n_q, dk),
                  tk = clattn_tensor_host(h16[1], 1, 1, n_kv, dk),
                  tv = clattn_tensor_host(h16[2], 1, 1, n_kv, dv),
                  to = clattn_tensor_host(o, 1, 1, n_q, dv);
    tq.dtype = tk.dtype = tv.dtype = CLATTN_FLOAT16;
    clattn_plan plan[2];
    for (int half = 0; half < 2; half++) {
        d.half_arithmetic = half;
        TU_ASSERT_OK(clattn_attention_plan(tu_ctx(), &d, &tq, &tk, &tv, &to, &plan[half]),
                     "plan, half_arithmetic %d", half);
    }
    const bool ran =
        strstr(plan[1].reason, "; half arithmetic") && !strstr(plan[1].reason, "not used");
    cl_device_id dev;
    cl_ulong local = 0;
    TU_ASSERT_OK(clattn_context_get_cl(tu_ctx(), NULL, &dev, NULL), "device");
    clGetDeviceInfo(dev, CL_DEVICE_LOCAL_MEM_SIZE, sizeof local, &local, NULL);
    const size_t vol[2] = {
        plan[0].work_group_size * plan[0].queries_per_work_item * plan[0].tile_kv,
        plan[1].work_group_size * plan[1].queries_per_work_item * plan[1].tile_kv};
    printf(
        "d_k 1024, d_v 16, local memory %llu bytes: float32 plan %zu,%zu,%zu, half arithmetic (%s) "
        "%zu,%zu,%zu (RQ,WG,TILE_KV)\n",
        (unsigned long long)local, plan[0].queries_per_work_item, plan[0].work_group_size,
        plan[0].tile_kv, ran ? "ran" : "not used", plan[1].queries_per_work_item,
        plan[1].work_group_size, plan[1].tile_kv);
    if (ran) {
        ck_assert_msg(vol[1] >= vol[0],
                      "half arithmetic's blocking (%zu rows x keys) is smaller "
                      "than float32's (%zu)",
                      vol[1], vol[0]);
        if (local == 256 * 1024)
            ck_assert_msg(plan[0].tile_kv == 16 && plan[1].tile_kv == 64,
                          "256 KiB of local memory: TILE_KV %zu (float32) and %zu (half), "
                          "expected 16 and 64",
                          plan[0].tile_kv, plan[1].tile_kv);
    } else
        ck_assert_msg(plan[0].tile_kv == plan[1].tile_kv &&
                          plan[0].queries_per_work_item == plan[1].queries_per_work_item,
                      "half arithmetic not used, yet the plan's blocking changed");
    TU_ASSERT_OK(clattn_attention(tu_ctx(), &d, &tq, &tk, &tv, &to), "half arithmetic");
    const tu_tol tol = {2.0 * e_max * v_max * 1.1 + 1e-5, 1e-5};
    double worst = 0.0;
    for (int64_t e = 0; e < n_q * dv; e++)
        worst = fmax(worst, fabs((double)o[e] - ref[e]));
    printf("d_k 1024, half arithmetic (%s): worst |dO| %.3g, bound %.3g\n",
           ran ? "ran" : "not used", worst, tol.atol);
    TU_ASSERT_CLOSE("O, half arithmetic, d_k 1024", &to, NULL, ref, tol);
    for (int a = 0; a < 3; a++)
        free(h16[a]);
    free(o);
    free(ref);
    tu_problem_free(&p);
}
END_TEST

/* Weights averaged over three query heads (not a power of two) against the reference. */
START_TEST(weights_head_mean_three_heads)
{
    tu_small_blocking(true);
    tu_problem p;
    tu_problem_init(&p, 2, 3, 1, 19, 33, SDK, SDV, 101, 102, 103, 0);
    clattn_attention_desc d = clattn_attention_desc_default();
    d.mask = CLATTN_MASK_CAUSAL_TOP_LEFT;
    d.weights_head_mean = 1;
    against_reference("weights averaged over 3 heads", &p, &d, true);
    tu_problem_free(&p);
}
END_TEST

/* decode.cl's register blocks follow the device's vector width (NV: AVX2 and AVX-512 take
 * different keys per score block and column blocks per pass) and its rows per work-item:
 * every form, forced through CLATTN_BLOCKING="RQ,1,16,NV" on a fresh context, against
 * the float64 reference (1e-5 + 1e-5·|x|) and bit for bit against the first form (the
 * 16-way reduction adds in the same order whatever the block). GQA, 2 queries: 8 rows
 * per KV head; d_k 32, d_v 48, 45 keys (a partial step). Seeds 111, 112, 113. */
START_TEST(decode_register_blocks_every_vector_width)
{
    static const char *const forms[] = {"4,1,16,1", "1,1,16,1", "2,1,16,1", "3,1,16,1",
                                        "4,1,16,4", "1,1,16,4", "2,1,16,4", "4,1,16,2"};
    const int n_forms = (int)(sizeof forms / sizeof forms[0]);
    tu_problem p;
    tu_problem_init(&p, 1, 8, 2, 2, 45, 32, 48, 111, 112, 113, 0);
    clattn_attention_desc d = clattn_attention_desc_default();
    d.algorithm = CLATTN_ALGORITHM_FUSED;
    d.mask = CLATTN_MASK_CAUSAL_BOTTOM_RIGHT;
    const size_t n_o = (size_t)(p.b * p.h_q * p.n_q * p.d_v);
    float *ref = tu_reference(&p, &d, NULL), *first = NULL;
    for (int f = 0; f < n_forms; f++) {
        ck_assert_int_eq(setenv("CLATTN_BLOCKING", forms[f], 1), 0);
        clattn_context *ctx = NULL;
        TU_ASSERT_OK(clattn_context_create(NULL, &ctx), "context with CLATTN_BLOCKING=%s",
                     forms[f]);
        float *o = tu_alloc(n_o, 12345.0f);
        clattn_tensor to = tu_problem_o(&p, o);
        TU_ASSERT_OK(clattn_attention(ctx, &d, &p.tq, &p.tk, &p.tv, &to),
                     "decode, CLATTN_BLOCKING=%s", forms[f]);
        char what[96];
        snprintf(what, sizeof what, "decode O, CLATTN_BLOCKING=%s", forms[f]);
        TU_ASSERT_CLOSE(what, &to, NULL, ref, TU_TOL_DEFAULT);
        if (first)
            tu_assert_same_bits(o, first, n_o, "decode O, CLATTN_BLOCKING=%s against %s", forms[f],
                                forms[0]);
        clattn_context_release(ctx);
        if (first)
            free(o);
        else
            first = o;
    }
    unsetenv("CLATTN_BLOCKING");
    free(first);
    free(ref);
    tu_problem_free(&p);
}
END_TEST

int main(void)
{
    tu_seed_init(0xe8ac7u);
    Suite *s = suite_create("exact");
    TCase *tc = tcase_create("semantics");
    tcase_set_timeout(tc, 900);
    suite_add_tcase(s, tc);
    tcase_add_test(tc, public_stages_every_score_term);
    tcase_add_test(tc, public_softmax_special_rows);
    tcase_add_test(tc, nan_scores_poison_their_row);
    tcase_add_test(tc, masked_v_one_nonfinite_kind);
    tcase_add_test(tc, strided_k_transposed_staging);
    tcase_add_test(tc, bshd_decode_reads_whole_rows);
    tcase_add_test(tc, decode_register_blocks_every_vector_width);
    tcase_add_test(tc, masked_rows_policies);
    tcase_add_test(tc, online_softmax_rescale);
    tcase_add_test(tc, softmax_exp_whole_range);
    tcase_add_test(tc, half_arithmetic_error_bound);
    tcase_add_test(tc, half_arithmetic_local_memory);
    tcase_add_test(tc, alibi_far_positions_realistic_slopes);
    tcase_add_test(tc, weights_head_mean_three_heads);
    return tu_run_suite(s);
}
