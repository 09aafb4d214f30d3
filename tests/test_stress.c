/* Randomized differential test: random configurations of clattn_attention /
 * clattn_attention_enqueue against clattn_reference_attention (float64).
 *
 * Each configuration is drawn by a table of independent features (FEATURES below):
 * shapes (n_q, n_kv 0..300 with 0, 1, primes and values next to the tiles 16/64/128
 * favoured; d_k, d_v 1..160 from a fixed set, so that the number of distinct programs
 * to compile stays bounded), heads (MHA, GQA, MQA), the four masks, the algorithm
 * (AUTO, UNFUSED, FUSED), the attention weights (with UNFUSED or AUTO), the API (host
 * views, blocking; or cl_mem views, enqueue), the layout of every operand (packed,
 * [b, n, h, d + pad], [b, h, n, d + pad], with offsets), the scale and the size of Q.
 * A new feature is one more entry (a function that sets its fields of the config and
 * a line in describe()); see the TODO list by the table for those planned.
 *
 * Tolerance: |got − ref| ≤ 1e-5 + 1e-5·|ref| for every element of O and the weights
 * (the project's float32-vs-float64 bound); elements of the output arrays outside the
 * views must keep their canary value; input arrays are NaN outside the views.
 *
 * CLATTN_STRESS_SEED (decimal or 0x-hex; default printed at start) picks the sample,
 * CLATTN_STRESS_N the number of configurations (default 300), CLATTN_STRESS_ONLY=i
 * runs configuration i alone (configuration i depends only on the seed and i). A
 * failure prints the configuration, how to rerun it, and the worst element. */
#include "testutil.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define DEFAULT_SEED 0x57E55EEDu
#define DEFAULT_N 300
/* multiply-adds b·h_q·n_q·n_kv·(d_k + d_v) per configuration (the reference is serial) */
#define WORK_BUDGET 3000000.0
#define CANARY 12345.0f

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static uint32_t rnd(uint32_t *state)
{
    *state += 0x9E3779B9U;
    return tu_lowbias32(*state);
}

static uint32_t below(uint32_t *state, uint32_t n)
{
    return n ? rnd(state) % n : 0;
}

#define LEN(a) ((int)(sizeof(a) / sizeof((a)[0])))

/* ---- a configuration ---------------------------------------------------------------------- */

typedef enum { LAYOUT_PACKED, LAYOUT_BNHD, LAYOUT_BHND_PAD, N_LAYOUTS } layout_kind;
static const char *const LAYOUT_NAMES[N_LAYOUTS] = {"packed", "bnhd", "bhnd+pad"};

typedef struct layout {
    layout_kind kind;
    int64_t pad;    /* extra elements per row of d (not for packed) */
    int64_t offset; /* elements before the view */
} layout;

enum { T_Q, T_K, T_V, T_O, T_W, N_TENSORS };
static const char *const TENSOR_NAMES[N_TENSORS] = {"Q", "K", "V", "O", "W"};

typedef struct config {
    int index;
    uint32_t seed; /* data seed */
    int64_t b, h_q, h_kv, n_q, n_kv, d_k, d_v;
    clattn_mask mask;
    clattn_algorithm algorithm;
    bool weights;
    bool via_buffers; /* cl_mem views through clattn_attention_enqueue */
    float scale;      /* 0 = 1/√d_k */
    float q_amp;
    layout lay[N_TENSORS];
    /* 0.2 features */
    int kv_len_pm,
        q_len_pm; /* per mille of n_kv / n_q for batch entry b: (pm + 333·b) % 1001; -1 = off */
    bool window;
    int64_t wl, wr;
    bool alibi;
    float softcap;
    bool masked_nan, lse, head_mean;
    int64_t q_start, kv_start;
    int mask_kind;         /* 0 none, 1 bool, 2 float additive */
    bool mask_b1, mask_h1; /* broadcast over batch / heads */
    clattn_dtype in_dtype; /* of Q, K and V (host, packed-or-strided; O stays float32) */
} config;

/* ---- the features ------------------------------------------------------------------------- */

/* n_q, n_kv: half the time a value at an edge (0, 1, primes, next to 16, 64, 128 and
 * the CPU blockings 16·4), else uniform in 0..300. */
static int64_t pick_n(uint32_t *rs)
{
    static const int64_t EDGE[] = {0,  1,  2,  3,  5,  7,   8,   13,  15,  16,  17,  31,  33,
                                   47, 63, 64, 65, 97, 127, 128, 129, 191, 255, 257, 293, 300};
    if (below(rs, 2) == 0)
        return EDGE[below(rs, LEN(EDGE))];
    return (int64_t)below(rs, 301);
}

static void f_seq(config *c, uint32_t *rs)
{
    c->n_q = pick_n(rs);
    c->n_kv = pick_n(rs);
    if (below(rs, 8) == 0) /* decoding: a few queries, many keys */
        c->n_q = 1 + (int64_t)below(rs, 8);
}

/* Head dims in 1..160 from a fixed set (1, primes, off and on 16, 160), d_v either d_k
 * or d_k's partner in the set. Each (d_k, d_v) and query-count class is a program to
 * compile (about 1 s each on PoCL when neither PoCL's nor clattn's cache has it): this
 * keeps every seed within about 66 programs, which the default seed builds once (cold
 * caches: about 2 minutes; warm: about 2 s). */
static void f_head_dims(config *c, uint32_t *rs)
{
    static const int64_t D[] = {1, 3, 16, 33, 80, 160}; /* all but 160 also in test_random */
    const uint32_t k = below(rs, LEN(D));
    c->d_k = D[k];
    c->d_v = below(rs, 2) ? c->d_k : D[(k + 2) % LEN(D)];
}

static void f_heads(config *c, uint32_t *rs)
{
    static const int64_t H_KV[] = {1, 1, 2, 3};
    static const int64_t GROUP[] = {1, 1, 2, 3, 4};
    c->b = 1 + (int64_t)below(rs, 3);
    c->h_kv = H_KV[below(rs, LEN(H_KV))];
    c->h_q = c->h_kv * GROUP[below(rs, LEN(GROUP))];
}

static void f_mask(config *c, uint32_t *rs)
{
    c->mask = (clattn_mask)below(rs, 4);
}

static void f_algorithm(config *c, uint32_t *rs)
{
    static const clattn_algorithm A[] = {CLATTN_ALGORITHM_AUTO, CLATTN_ALGORITHM_UNFUSED,
                                         CLATTN_ALGORITHM_FUSED};
    c->algorithm = A[below(rs, LEN(A))];
}

/* the attention weights (FUSED returns them through a second pass from its LSE) */
static void f_weights(config *c, uint32_t *rs)
{
    c->weights = below(rs, 3) == 0;
}

/* The compile-time options of the kernels (mask tensor kind, 16-bit inputs, ALiBi,
 * softcap) follow d_k, so that a seed builds a bounded number of programs (about a
 * second each on a cold PoCL cache); the runtime options are drawn freely. */
typedef struct dk_class {
    int64_t d_k;
    int mask_kind; /* 0 none, 1 bool, 2 float */
    clattn_dtype dtype;
    bool alibi, softcap;
} dk_class;
static const dk_class DK_CLASSES[] = {
    {1, 0, CLATTN_FLOAT32, false, false},  {3, 1, CLATTN_BFLOAT16, true, false},
    {16, 2, CLATTN_FLOAT16, false, true},  {33, 0, CLATTN_FLOAT32, true, false},
    {80, 1, CLATTN_FLOAT16, false, false}, {160, 2, CLATTN_FLOAT32, true, true},
};

static const dk_class *dk_class_of(int64_t d_k)
{
    for (int i = 0; i < LEN(DK_CLASSES); i++)
        if (DK_CLASSES[i].d_k == d_k)
            return &DK_CLASSES[i];
    return &DK_CLASSES[0];
}

/* cl_mem views through the enqueue API (the helper copies float32 arrays and carries
 * no mask tensor): for the classes without either */
static void f_api(config *c, uint32_t *rs)
{
    const dk_class *k = dk_class_of(c->d_k);
    c->via_buffers = below(rs, 3) == 0 && k->mask_kind == 0 && k->dtype == CLATTN_FLOAT32;
}

static void f_layout(config *c, uint32_t *rs)
{
    for (int t = 0; t < N_TENSORS; t++) {
        layout *l = &c->lay[t];
        l->kind = below(rs, 2) ? LAYOUT_PACKED : (layout_kind)(1 + below(rs, N_LAYOUTS - 1));
        l->pad = l->kind == LAYOUT_PACKED ? 0 : (int64_t)below(rs, 4);
        l->offset = below(rs, 3) == 0 ? (int64_t)below(rs, 19) : 0;
    }
}

static void f_scale(config *c, uint32_t *rs)
{
    static const float SCALES[] = {0.0f, 0.0f, 0.125f, 0.3f};
    static const float AMPS[] = {0.5f, 1.0f, 1.0f, 2.0f};
    c->scale = SCALES[below(rs, LEN(SCALES))];
    c->q_amp = AMPS[below(rs, LEN(AMPS))];
}

/* key / query padding lengths, window, ALiBi with positions, softcap, the masked-row
 * policy, LSE and head-mean weights: each on about a quarter of the time */
static void f_positions(config *c, uint32_t *rs)
{
    const dk_class *k = dk_class_of(c->d_k);
    c->kv_len_pm = below(rs, 4) == 0 ? (int)below(rs, 1001) : -1;
    c->q_len_pm = below(rs, 5) == 0 ? (int)below(rs, 1001) : -1;
    c->window = below(rs, 4) == 0;
    c->wl = c->window ? (int64_t)below(rs, 40) - 1 : 0;
    c->wr = c->window ? (int64_t)below(rs, 40) - 1 : 0;
    c->alibi = k->alibi;
    c->softcap = k->softcap ? 1.0f + (float)below(rs, 50) : 0.0f;
    if (below(rs, 5) == 0) {
        c->q_start = (int64_t)below(rs, 50);
        c->kv_start = (int64_t)below(rs, 50);
    }
}

static void f_outputs(config *c, uint32_t *rs)
{
    c->masked_nan = below(rs, 4) == 0;
    c->lse = below(rs, 2) == 0 && !c->via_buffers; /* the cl_mem helper has no LSE */
    c->head_mean = c->weights && below(rs, 3) == 0;
}

/* mask tensors, broadcast over batch and heads or not */
static void f_mask_tensor(config *c, uint32_t *rs)
{
    c->mask_kind = dk_class_of(c->d_k)->mask_kind;
    c->mask_b1 = below(rs, 2) == 0;
    c->mask_h1 = below(rs, 2) == 0;
}

/* 16-bit storage of Q, K and V (the same strided layouts) */
static void f_dtype(config *c, uint32_t *rs)
{
    c->in_dtype = dk_class_of(c->d_k)->dtype;
    (void)rs;
}

typedef struct feature {
    const char *name;
    void (*choose)(config *c, uint32_t *rs);
} feature;

/* Independent feature choices, applied in this order (f_weights reads the algorithm).
 *
 * The 0.2 features (positions, outputs, mask tensors, 16-bit inputs) come last, so
 * the older choices of a seed are unchanged by them. Mask tensors and 16-bit inputs
 * are drawn for the host API only (the cl_mem helper copies float32 arrays). */
static const feature FEATURES[] = {
    {"seq", f_seq},
    {"head_dims", f_head_dims},
    {"heads", f_heads},
    {"mask", f_mask},
    {"algorithm", f_algorithm},
    {"weights", f_weights},
    {"api", f_api},
    {"layout", f_layout},
    {"scale", f_scale},
    {"positions", f_positions},
    {"outputs", f_outputs},
    {"mask_tensor", f_mask_tensor},
    {"dtype", f_dtype},
};

static double work(const config *c)
{
    return (double)c->b * (double)c->h_q * (double)c->n_q * (double)c->n_kv *
           (double)(c->d_k + c->d_v);
}

static config make_config(uint32_t seed, int index)
{
    config c;
    memset(&c, 0, sizeof c);
    c.index = index;
    uint32_t rs = tu_lowbias32(seed ^ tu_lowbias32(0xC0FFEEu + (uint32_t)index));
    for (int f = 0; f < LEN(FEATURES); f++)
        FEATURES[f].choose(&c, &rs);
    /* within the time budget: fewer batches, then fewer heads, then shorter sequences */
    while (work(&c) > WORK_BUDGET && c.b > 1)
        c.b--;
    while (work(&c) > WORK_BUDGET && c.h_q > c.h_kv)
        c.h_q -= c.h_kv;
    while (work(&c) > WORK_BUDGET && c.h_kv > 1)
        c.h_q = c.h_kv = c.h_kv - 1;
    while (work(&c) > WORK_BUDGET)
        c.n_q > c.n_kv ? (c.n_q = c.n_q * 3 / 4) : (c.n_kv = c.n_kv * 3 / 4);
    c.seed = rnd(&rs);
    return c;
}

static void describe(const config *c, char *out, size_t cap)
{
    int n = snprintf(out, cap,
                     "config #%d: b=%lld h_q=%lld h_kv=%lld n_q=%lld n_kv=%lld d_k=%lld d_v=%lld "
                     "mask=%s algorithm=%s%s api=%s scale=%g q_amp=%g data_seed=0x%08x layouts:",
                     c->index, (long long)c->b, (long long)c->h_q, (long long)c->h_kv,
                     (long long)c->n_q, (long long)c->n_kv, (long long)c->d_k, (long long)c->d_v,
                     tu_mask_name(c->mask), tu_algorithm_name(c->algorithm),
                     c->weights ? " +weights" : "",
                     c->via_buffers ? "cl_mem (enqueue)" : "host (blocking)", (double)c->scale,
                     (double)c->q_amp, (unsigned)c->seed);
    static const char *const DT[] = {"f32", "f16", "bf16"};
    n += snprintf(out + n, cap - (size_t)n,
                  " kv_len_pm=%d q_len_pm=%d window=%d(%lld,%lld) alibi=%d softcap=%g "
                  "masked_nan=%d lse=%d head_mean=%d q_start=%lld kv_start=%lld mask_tensor=%d%s%s "
                  "in_dtype=%s",
                  c->kv_len_pm, c->q_len_pm, c->window, (long long)c->wl, (long long)c->wr,
                  c->alibi, (double)c->softcap, c->masked_nan, c->lse, c->head_mean,
                  (long long)c->q_start, (long long)c->kv_start, c->mask_kind,
                  c->mask_b1 ? "/b1" : "", c->mask_h1 ? "/h1" : "", DT[c->in_dtype]);
    for (int t = 0; t < N_TENSORS && n > 0 && (size_t)n < cap; t++) {
        if (t == T_W && !c->weights)
            break;
        const layout *l = &c->lay[t];
        n += snprintf(out + n, cap - (size_t)n, " %s=%s/pad%lld/off%lld", TENSOR_NAMES[t],
                      LAYOUT_NAMES[l->kind], (long long)l->pad, (long long)l->offset);
    }
}

/* ---- running one ------------------------------------------------------------------------ */

/* A host array holding a [b, h, n, d] view in layout l, `fill` elsewhere (canary for
 * outputs, NaN poison for inputs); *len receives its length in floats. */
static float *make_view(const int64_t shape[4], const layout *l, float fill, clattn_tensor *view,
                        size_t *len)
{
    const int64_t b = shape[0], h = shape[1], n = shape[2], d = shape[3], dp = d + l->pad;
    int64_t strides[4] = {0, 0, 0, 0};
    int64_t extent = b * h * n * d;
    if (l->kind == LAYOUT_BNHD) {
        strides[0] = n * h * dp, strides[1] = dp, strides[2] = h * dp, strides[3] = 1;
        extent = b * n * h * dp;
    } else if (l->kind == LAYOUT_BHND_PAD) {
        strides[0] = h * n * dp, strides[1] = n * dp, strides[2] = dp, strides[3] = 1;
        extent = b * h * n * dp;
    }
    *len = (size_t)(l->offset + extent + 5);
    float *arr = tu_alloc(*len, fill);
    *view = tu_view(arr, shape, strides, l->offset);
    return arr;
}

/* Fails the test unless every element of arr outside the view still holds `fill`. */
static void check_outside(const char *what, const float *arr, size_t len, const clattn_tensor *view)
{
    unsigned char *in = calloc(len, 1);
    ck_assert_ptr_nonnull(in);
    for (int64_t b = 0; b < view->shape[0]; b++)
        for (int64_t h = 0; h < view->shape[1]; h++)
            for (int64_t s = 0; s < view->shape[2]; s++)
                for (int64_t d = 0; d < view->shape[3]; d++)
                    in[tu_at(view, b, h, s, d) - (float *)view->host] = 1;
    const float fill = CANARY;
    size_t n_bad = 0, first = 0;
    for (size_t i = 0; i < len; i++)
        if (!in[i] && memcmp(&arr[i], &fill, sizeof fill) != 0 && n_bad++ == 0)
            first = i;
    free(in);
    ck_assert_msg(n_bad == 0, "%s: %zu elements outside the view were written; first at %zu (%.9g)",
                  what, n_bad, first, n_bad ? (double)arr[first] : 0.0);
}

static uint32_t g_seed;
static int g_n;
static double g_seconds_device, g_seconds_reference;
static int g_count_alg[3], g_count_mask[4], g_count_buffers, g_count_weights, g_count_strided,
    g_count_empty;

static void run_config(const config *c)
{
    char name[1024], what[1200];
    describe(c, name, sizeof name);
    char rerun[160];
    snprintf(rerun, sizeof rerun, "(rerun: CLATTN_STRESS_SEED=0x%08x CLATTN_STRESS_ONLY=%d)",
             (unsigned)g_seed, c->index);

    const int64_t sq[4] = {c->b, c->h_q, c->n_q, c->d_k}, sk[4] = {c->b, c->h_kv, c->n_kv, c->d_k},
                  sv[4] = {c->b, c->h_kv, c->n_kv, c->d_v}, so[4] = {c->b, c->h_q, c->n_q, c->d_v},
                  sw[4] = {c->b, c->head_mean ? 1 : c->h_q, c->n_q, c->n_kv};
    clattn_tensor tq, tk, tv, to, tw;
    size_t len[5] = {0, 0, 0, 0, 0};
    float *qa = make_view(sq, &c->lay[T_Q], NAN, &tq, &len[0]);
    float *ka = make_view(sk, &c->lay[T_K], NAN, &tk, &len[1]);
    float *va = make_view(sv, &c->lay[T_V], NAN, &tv, &len[2]);
    float *oa = make_view(so, &c->lay[T_O], CANARY, &to, &len[3]);
    float *wa = c->weights ? make_view(sw, &c->lay[T_W], CANARY, &tw, &len[4]) : NULL;
    uint32_t i = 0;
    for (int64_t b = 0; b < c->b; b++)
        for (int64_t h = 0; h < c->h_q; h++)
            for (int64_t s = 0; s < c->n_q; s++)
                for (int64_t d = 0; d < c->d_k; d++)
                    *tu_at(&tq, b, h, s, d) = c->q_amp * tu_gen(c->seed, i++);
    i = 0;
    for (int64_t b = 0; b < c->b; b++)
        for (int64_t h = 0; h < c->h_kv; h++)
            for (int64_t s = 0; s < c->n_kv; s++) {
                for (int64_t d = 0; d < c->d_k; d++)
                    *tu_at(&tk, b, h, s, d) = tu_gen(c->seed ^ 0x5bd1e995u, i + (uint32_t)d);
                for (int64_t d = 0; d < c->d_v; d++)
                    *tu_at(&tv, b, h, s, d) = tu_gen(c->seed ^ 0x27d4eb2fu, i + (uint32_t)d);
                i += 1000;
            }

    clattn_attention_desc desc = clattn_attention_desc_default();
    desc.scale = c->scale;
    desc.mask = c->mask;
    desc.algorithm = c->algorithm;
    /* the 0.2 features */
    int32_t kv_lens[3], q_lens[3];
    for (int64_t b = 0; b < c->b && b < 3; b++) {
        kv_lens[b] = (int32_t)(c->n_kv * ((c->kv_len_pm + 333 * b) % 1001) / 1000);
        q_lens[b] = (int32_t)(c->n_q * ((c->q_len_pm + 333 * b) % 1001) / 1000);
    }
    desc.kv_lens = c->kv_len_pm >= 0 ? kv_lens : NULL;
    desc.q_lens = c->q_len_pm >= 0 ? q_lens : NULL;
    desc.window = c->window;
    desc.window_left = c->wl;
    desc.window_right = c->wr;
    float *slopes = tu_alloc((size_t)c->h_q, 0.0f);
    for (int64_t h = 0; h < c->h_q; h++)
        slopes[h] = exp2f(-(float)(h + 1) * 8.0f / (float)c->h_q);
    desc.alibi_slopes = c->alibi ? slopes : NULL;
    desc.softcap = c->softcap;
    desc.masked_rows = c->masked_nan ? CLATTN_MASKED_ROWS_NAN : CLATTN_MASKED_ROWS_ZERO;
    desc.q_start = c->q_start;
    desc.kv_start = c->kv_start;
    desc.weights_head_mean = c->head_mean;
    const int64_t mb = c->mask_b1 ? 1 : c->b, mh = c->mask_h1 ? 1 : c->h_q;
    const size_t n_mask = (size_t)(mb * mh * c->n_q * c->n_kv);
    void *mask_data = NULL;
    clattn_tensor tm = clattn_tensor_host(NULL, mb, mh, c->n_q, c->n_kv);
    if (c->mask_kind) {
        mask_data = malloc(n_mask ? n_mask * 4 : 4);
        ck_assert_ptr_nonnull(mask_data);
        for (size_t m = 0; m < n_mask; m++) {
            const float g = tu_gen(c->seed ^ 0x3c6ef372u, (uint32_t)m);
            if (c->mask_kind == 1)
                ((uint8_t *)mask_data)[m] = g > -0.6f;
            else
                ((float *)mask_data)[m] = g < -0.7f ? -INFINITY : g;
        }
        tm.host = mask_data;
        tm.dtype = c->mask_kind == 1 ? CLATTN_BOOL : CLATTN_FLOAT32;
        desc.mask_tensor = &tm;
    }
    /* 16-bit Q, K, V: the same layouts over uint16 copies (NaN poison stays NaN) */
    uint16_t *h16[3] = {NULL, NULL, NULL};
    if (c->in_dtype != CLATTN_FLOAT32) {
        float *arrs[3] = {qa, ka, va};
        clattn_tensor *views[3] = {&tq, &tk, &tv};
        for (int t = 0; t < 3; t++) {
            h16[t] = malloc(len[t] * sizeof(uint16_t));
            ck_assert_ptr_nonnull(h16[t]);
            for (size_t e = 0; e < len[t]; e++)
                h16[t][e] = c->in_dtype == CLATTN_FLOAT16 ? clattn_f32_to_f16(arrs[t][e])
                                                          : clattn_f32_to_bf16(arrs[t][e]);
            views[t]->host = h16[t];
            views[t]->dtype = c->in_dtype;
        }
    }
    const size_t n_lse = (size_t)(c->b * c->h_q * c->n_q);
    float *lse = tu_alloc(n_lse + 4, CANARY), *ref_lse = tu_alloc(n_lse + 4, NAN);
    clattn_tensor tl = clattn_tensor_host(lse, c->b, c->h_q, c->n_q, 1);
    clattn_tensor trl = clattn_tensor_host(ref_lse, c->b, c->h_q, c->n_q, 1);

    /* the reference on the same (strided) views, into packed arrays */
    const double t0 = now_s();
    float *ref_o = tu_alloc((size_t)(c->b * c->h_q * c->n_q * c->d_v), NAN);
    float *ref_w = c->weights ? tu_alloc((size_t)(sw[0] * sw[1] * c->n_q * c->n_kv), NAN) : NULL;
    clattn_tensor tro = clattn_tensor_host(ref_o, c->b, c->h_q, c->n_q, c->d_v);
    clattn_tensor trw = clattn_tensor_host(ref_w, sw[0], sw[1], c->n_q, c->n_kv);
    clattn_attention_desc rdesc = desc;
    rdesc.weights = c->weights ? &trw : NULL;
    rdesc.lse = c->lse ? &trl : NULL;
    clattn_status st = clattn_reference_attention(&rdesc, &tq, &tk, &tv, &tro);
    ck_assert_msg(st == CLATTN_SUCCESS, "%s: reference: %s %s", name, clattn_status_string(st),
                  rerun);
    const double t1 = now_s();

    desc.weights = c->weights ? &tw : NULL;
    desc.lse = c->lse ? &tl : NULL;
    st = c->via_buffers ? tu_attention_via_buffers(tu_ctx(), &desc, &tq, &tk, &tv, &to, len)
                        : clattn_attention(tu_ctx(), &desc, &tq, &tk, &tv, &to);
    const double t2 = now_s();
    g_seconds_reference += t1 - t0;
    g_seconds_device += t2 - t1;
    if (st != CLATTN_SUCCESS)
        ck_abort_msg("%s: status %d (%s): %s %s", name, (int)st, clattn_status_string(st),
                     clattn_last_error_message(tu_ctx()), rerun);

    snprintf(what, sizeof what, "%s %s: O", name, rerun);
    TU_ASSERT_CLOSE(what, &to, NULL, ref_o, TU_TOL_DEFAULT);
    check_outside(what, oa, len[3], &to);
    if (c->weights) {
        snprintf(what, sizeof what, "%s %s: weights", name, rerun);
        TU_ASSERT_CLOSE(what, &tw, NULL, ref_w, TU_TOL_DEFAULT);
        check_outside(what, wa, len[4], &tw);
    }
    if (c->lse) {
        snprintf(what, sizeof what, "%s %s: LSE", name, rerun);
        TU_ASSERT_CLOSE(what, &tl, NULL, ref_lse, TU_TOL_DEFAULT);
        tu_assert_untouched(what, lse, n_lse, n_lse + 4, CANARY);
    }

    g_count_alg[c->algorithm]++;
    g_count_mask[c->mask]++;
    g_count_buffers += c->via_buffers;
    g_count_weights += c->weights;
    g_count_empty += c->n_q == 0 || c->n_kv == 0;
    for (int t = 0; t < N_TENSORS; t++)
        if (c->lay[t].kind != LAYOUT_PACKED || c->lay[t].offset) {
            g_count_strided++;
            break;
        }
    free(qa);
    free(ka);
    free(va);
    free(oa);
    free(wa);
    free(ref_o);
    free(ref_w);
    free(slopes);
    free(mask_data);
    free(lse);
    free(ref_lse);
    for (int t = 0; t < 3; t++)
        free(h16[t]);
}

START_TEST(random_config)
{
    const config c = make_config(g_seed, _i);
    run_config(&c);
}
END_TEST

/* Same seed and index, same configuration; the table reaches every mask, algorithm,
 * API, layout and the edge sizes 0 and 1 within the default sample. */
START_TEST(generator_is_reproducible_and_covers)
{
    bool mask[4] = {false}, alg[3] = {false}, api[2] = {false}, lay[N_LAYOUTS] = {false};
    bool n0 = false, n1 = false, d1 = false, gqa = false, weights = false;
    for (int i = 0; i < DEFAULT_N; i++) {
        const config a = make_config(g_seed, i), b = make_config(g_seed, i);
        ck_assert_msg(memcmp(&a, &b, sizeof a) == 0, "config %d is not reproducible", i);
        ck_assert_msg(a.h_q % a.h_kv == 0 && a.h_q >= 1 && a.b >= 1, "config %d: heads %lld/%lld",
                      i, (long long)a.h_q, (long long)a.h_kv);
        ck_assert_msg(work(&a) <= WORK_BUDGET, "config %d over budget", i);
        mask[a.mask] = alg[a.algorithm] = api[a.via_buffers] = true;
        for (int t = 0; t < N_TENSORS; t++)
            lay[a.lay[t].kind] = true;
        n0 |= a.n_q == 0 || a.n_kv == 0;
        n1 |= a.n_q == 1 || a.n_kv == 1;
        d1 |= a.d_k == 1 || a.d_v == 1;
        gqa |= a.h_q > a.h_kv;
        weights |= a.weights;
    }
    for (int m = 0; m < 4; m++)
        ck_assert_msg(mask[m], "no config with mask %s (seed 0x%08x)", tu_mask_name((clattn_mask)m),
                      (unsigned)g_seed);
    for (int a = 0; a < 3; a++)
        ck_assert_msg(alg[a], "no config with algorithm %d", a);
    ck_assert_msg(api[0] && api[1], "host and cl_mem paths not both drawn");
    for (int l = 0; l < N_LAYOUTS; l++)
        ck_assert_msg(lay[l], "no config with layout %s", LAYOUT_NAMES[l]);
    ck_assert_msg(n0 && n1 && d1 && gqa && weights,
                  "edge features missing: n=0 %d, n=1 %d, d=1 %d, GQA %d, weights %d", n0, n1, d1,
                  gqa, weights);
}
END_TEST

static uint32_t env_u32(const char *name, uint32_t fallback, bool *set)
{
    const char *s = getenv(name);
    *set = s && *s;
    return *set ? (uint32_t)strtoul(s, NULL, 0) : fallback;
}

int main(void)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    bool seed_set, n_set, only_set;
    g_seed = env_u32("CLATTN_STRESS_SEED", DEFAULT_SEED, &seed_set);
    g_n = (int)env_u32("CLATTN_STRESS_N", DEFAULT_N, &n_set);
    const int only = (int)env_u32("CLATTN_STRESS_ONLY", 0, &only_set);
    printf("stress seed 0x%08x (%s), %d configurations%s; tolerance 1e-5 abs + 1e-5 rel\n",
           (unsigned)g_seed, seed_set ? "from CLATTN_STRESS_SEED" : "default; CLATTN_STRESS_SEED",
           only_set ? 1 : g_n, n_set ? " (CLATTN_STRESS_N)" : "");

    Suite *s = suite_create("stress");
    TCase *tc = tcase_create("stress");
    tcase_add_test(tc, generator_is_reproducible_and_covers);
    if (only_set)
        tcase_add_loop_test(tc, random_config, only, only + 1);
    else
        tcase_add_loop_test(tc, random_config, 0, g_n);
    suite_add_tcase(s, tc);
    const double t0 = now_s();
    const int rc = tu_run_suite(s);
    printf("stress: %.1f s (device calls %.1f s, reference %.1f s); algorithms auto %d, unfused "
           "%d, fused %d; masks %d/%d/%d/%d; cl_mem %d, weights %d, strided or offset %d, n=0 %d\n",
           now_s() - t0, g_seconds_device, g_seconds_reference, g_count_alg[0], g_count_alg[1],
           g_count_alg[2], g_count_mask[0], g_count_mask[1], g_count_mask[2], g_count_mask[3],
           g_count_buffers, g_count_weights, g_count_strided, g_count_empty);
    printf("stress seed was 0x%08x\n", (unsigned)g_seed);
    return rc;
}
