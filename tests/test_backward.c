/* The backward pass (include/clattn_backward.h): the float64 CPU reference, then the
 * device call against it.
 *
 *  - finite_differences: for every score term (causal masks, no-self, window, lengths,
 *    positions, ALiBi, softcap, bool and float mask tensors, grouped-query heads,
 *    d_k != d_v), dQ, dK and dV of L = Σ dO·O against central differences of the forward
 *    reference, every element; each configuration again with dropout (p 0.3, a fixed
 *    seed and offset: the same mask at every evaluation). O is stored in float32, so
 *    the differences carry its rounding: tolerance 1e-3 + 1e-3·|dX| with step 1e-2
 *    (truncation ~1e-5, rounding ~1e-4); a wrong term is off by far more (a dropped
 *    softcap factor by ~20 %).
 *  - masked_rows_and_keys: a fully masked row has dQ 0 and adds nothing to dK/dV; NaN
 *    and inf in K and V at masked keys give finite gradients; padding rows too.
 *  - storage_and_validation: 16-bit gradients are the float32 ones rounded once; bad
 *    shapes, overlaps and a NULL desc give their statuses and write nothing.
 *  - device (clattn_attention_backward after clattn_attention wrote O and the LSE): every
 *    reference configuration and larger shapes against the reference within
 *    2e-4 + 2e-3·|dX| (TOL_DEVICE), bitwise equal on a second run, five of them again
 *    with dropout; masked rows (both
 *    policies), poisoned masked keys and padding rows; float16 / bfloat16 operands and
 *    gradients with a float64 LSE; the enqueue call on cl_mem views (a strided dQ) equal
 *    to the blocking call; empty shapes; every validation status, writing nothing.
 *
 * Seeds: printed; CLATTN_TEST_SEED overrides the base seed. */
#include "testutil.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef struct config {
    const char *name;
    int64_t b, h_q, h_kv, n_q, n_kv, d_k, d_v;
    clattn_mask mask;
    int window;
    int64_t left, right;
    int alibi, lens, mask_tensor; /* mask_tensor: 1 bool, 2 float */
    float softcap, scale;
    int64_t q_start, kv_start;
    int sinks; /* attention sinks (one head without) and their gradient */
} config;

/* name, b, h_q, h_kv, n_q, n_kv, d_k, d_v, mask, window, left, right, alibi, lens,
 * mask_tensor, softcap, scale, q_start, kv_start, sinks: one row each */
// clang-format off
static const config CONFIGS[] = {
    {"plain", 1, 2, 2, 4, 6, 5, 3, CLATTN_MASK_NONE, 0, 0, 0, 0, 0, 0, 0.0f, 0.0f, 0, 0, 0},
    {"gqa_causal", 2, 4, 2, 5, 7, 4, 3, CLATTN_MASK_CAUSAL_TOP_LEFT, 0, 0, 0, 0, 0, 0, 0.0f, 0.0f, 0, 0, 0},
    {"bottom_right_lengths", 2, 2, 1, 4, 7, 3, 4, CLATTN_MASK_CAUSAL_BOTTOM_RIGHT, 0, 0, 0, 0, 1, 0, 0.0f, 0.0f, 0, 0, 0},
    {"no_self_positions", 1, 2, 2, 5, 6, 4, 4, CLATTN_MASK_NO_SELF, 0, 0, 0, 0, 0, 0, 0.0f, 0.0f, 3, 2, 0},
    {"window_alibi", 1, 3, 1, 6, 8, 3, 2, CLATTN_MASK_NONE, 1, 2, 1, 1, 0, 0, 0.0f, 0.0f, 0, 0, 0},
    {"softcap_scale", 1, 2, 2, 4, 5, 6, 3, CLATTN_MASK_NONE, 0, 0, 0, 0, 0, 0, 1.5f, 0.9f, 0, 0, 0},
    {"bool_mask", 2, 2, 2, 4, 6, 4, 4, CLATTN_MASK_NONE, 0, 0, 0, 0, 0, 1, 0.0f, 0.0f, 0, 0, 0},
    {"float_mask_softcap_causal", 1, 4, 2, 5, 5, 4, 3, CLATTN_MASK_CAUSAL_TOP_LEFT, 0, 0, 0, 1, 0, 2, 2.0f, 0.0f, 0, 0, 0},
    {"sinks_gqa_causal_lengths", 2, 4, 2, 5, 7, 4, 3, CLATTN_MASK_CAUSAL_BOTTOM_RIGHT, 0, 0, 0, 0, 1, 0, 0.0f, 0.0f, 0, 0, 1},
    {"sinks_window_alibi_softcap", 1, 3, 1, 6, 8, 3, 2, CLATTN_MASK_NONE, 1, 2, 1, 1, 0, 0, 1.5f, 0.0f, 0, 0, 1},
};
// clang-format on
#define N_CONFIGS ((int)(sizeof CONFIGS / sizeof CONFIGS[0]))

typedef struct setup {
    tu_problem p;
    clattn_attention_desc desc;
    float *d_o, *mask, *slopes, *sinks;
    int32_t kv_lens[2], q_lens[2];
    clattn_tensor t_do, t_mask;
} setup;

static void setup_init(setup *s, const config *c, uint32_t seed)
{
    memset(s, 0, sizeof *s);
    tu_problem_init(&s->p, c->b, c->h_q, c->h_kv, c->n_q, c->n_kv, c->d_k, c->d_v, seed, seed + 1,
                    seed + 2, 0);
    const size_t n_o = (size_t)(c->b * c->h_q * c->n_q * c->d_v);
    s->d_o = tu_alloc(n_o, 0.0f);
    tu_fill_gen(s->d_o, n_o, seed + 3, 1.0f);
    s->t_do = clattn_tensor_host(s->d_o, c->b, c->h_q, c->n_q, c->d_v);
    clattn_attention_desc *d = &s->desc;
    *d = clattn_attention_desc_default();
    d->mask = c->mask;
    d->scale = c->scale;
    d->softcap = c->softcap;
    d->q_start = c->q_start;
    d->kv_start = c->kv_start;
    if (c->window) {
        d->window = 1;
        d->window_left = c->left;
        d->window_right = c->right;
    }
    if (c->alibi) {
        s->slopes = tu_alloc((size_t)c->h_q, 0.0f);
        for (int64_t h = 0; h < c->h_q; h++)
            s->slopes[h] = 0.5f / (float)(h + 1);
        d->alibi_slopes = s->slopes;
    }
    if (c->sinks) { /* head 1 has none (−∞): its gradient is 0 */
        s->sinks = tu_alloc((size_t)c->h_q, 0.0f);
        for (int64_t h = 0; h < c->h_q; h++)
            s->sinks[h] = h == 1 ? -INFINITY : 0.6f * (float)h - 0.4f;
        d->sinks = s->sinks;
    }
    if (c->lens) { /* entry 0 partial, entry 1 full keys and one padding row */
        s->kv_lens[0] = (int32_t)(c->n_kv - 2), s->kv_lens[1] = (int32_t)c->n_kv;
        s->q_lens[0] = (int32_t)c->n_q, s->q_lens[1] = (int32_t)(c->n_q - 1);
        d->kv_lens = s->kv_lens;
        d->q_lens = s->q_lens;
    }
    if (c->mask_tensor) { /* [b, 1, n_q, n_kv], broadcast over heads */
        const size_t n_m = (size_t)(c->b * c->n_q * c->n_kv);
        s->mask = tu_alloc(n_m, 0.0f);
        for (size_t i = 0; i < n_m; i++) {
            const float g = tu_gen(seed + 4, (uint32_t)i);
            if (c->mask_tensor == 1)
                ((uint8_t *)s->mask)[i] = g > -0.4f;
            else
                s->mask[i] = g > -0.4f ? g : -INFINITY;
        }
        s->t_mask = clattn_tensor_host(s->mask, c->b, 1, c->n_q, c->n_kv);
        s->t_mask.dtype = c->mask_tensor == 1 ? CLATTN_BOOL : CLATTN_FLOAT32;
        d->mask_tensor = &s->t_mask;
    }
}

static void setup_free(setup *s)
{
    tu_problem_free(&s->p);
    free(s->d_o);
    free(s->mask);
    free(s->slopes);
    free(s->sinks);
}

/* The reference backward of the setup's problem into the three gradient views, and with
 * sinks their gradient into d_sinks (h_q floats; NULL: not asked). */
static clattn_status backward(const setup *s, const clattn_tensor *dq, const clattn_tensor *dk,
                              const clattn_tensor *dv, float *d_sinks)
{
    clattn_attention_desc d = s->desc;
    clattn_tensor t = clattn_tensor_host(d_sinks, 1, s->p.h_q, 1, 1);
    d.d_sinks = d_sinks ? &t : NULL;
    return clattn_reference_attention_backward(&d, &s->p.tq, &s->p.tk, &s->p.tv, &s->t_do, dq, dk,
                                               dv);
}

/* L = Σ dO·O with O from the forward reference, in double. */
static double loss(const setup *s)
{
    float *o = tu_reference(&s->p, &s->desc, NULL);
    const size_t n = (size_t)tu_count(&s->t_do);
    double l = 0.0;
    for (size_t i = 0; i < n; i++)
        l += (double)s->d_o[i] * o[i];
    free(o);
    return l;
}

/* Dropout in the loops' second half: the configuration's desc with dropout_p 0.3 (the
 * same mask at every evaluation: it depends on the seed, offset and indices only). */
#define DROPOUT_P 0.3f
static void with_dropout(setup *s, int on)
{
    if (on) {
        s->desc.dropout_p = DROPOUT_P;
        s->desc.dropout_seed = 0x0123456789abcdefull;
        s->desc.dropout_offset = 77;
    }
}

START_TEST(finite_differences)
{
    const config *c = &CONFIGS[_i % N_CONFIGS];
    const uint32_t seed = tu_seed() + 101u * (uint32_t)_i;
    printf("backward finite differences: %s%s, seed %u\n", c->name,
           _i >= N_CONFIGS ? " with dropout" : "", seed);
    setup s;
    setup_init(&s, c, seed);
    with_dropout(&s, _i >= N_CONFIGS);
    float *g[3];
    clattn_tensor tg[3];
    float *in[3] = {s.p.q, s.p.k, s.p.v};
    const clattn_tensor *tin[3] = {&s.p.tq, &s.p.tk, &s.p.tv};
    for (int a = 0; a < 3; a++) {
        g[a] = tu_alloc((size_t)tu_count(tin[a]), NAN);
        tg[a] = *tin[a];
        tg[a].host = g[a];
    }
    float *g_sinks = c->sinks ? tu_alloc((size_t)c->h_q, NAN) : NULL;
    TU_ASSERT_OK(backward(&s, &tg[0], &tg[1], &tg[2], g_sinks), "reference backward (%s)", c->name);
    static const char *const names[3] = {"dQ", "dK", "dV"};
    const double h = 1e-2;
    const tu_tol tol = {1e-3, 1e-3};
    for (int a = 0; a < 3; a++) {
        const size_t n = (size_t)tu_count(tin[a]);
        double *fd = malloc(sizeof(double) * n);
        for (size_t e = 0; e < n; e++) {
            const float x = in[a][e];
            in[a][e] = (float)(x + h);
            const double lp = loss(&s);
            in[a][e] = (float)(x - h);
            const double lm = loss(&s);
            in[a][e] = x;
            fd[e] = (lp - lm) / (2 * h);
        }
        char what[96];
        snprintf(what, sizeof what, "%s of %s vs central differences", names[a], c->name);
        TU_ASSERT_CLOSE(what, &tg[a], fd, NULL, tol);
        free(fd);
        free(g[a]);
    }
    if (c->sinks) { /* d_sinks; head 1's sink is −∞: exactly 0 */
        double fd[8];
        for (int64_t e = 0; e < c->h_q; e++) {
            const float x = s.sinks[e];
            s.sinks[e] = (float)(x + h);
            const double lp = loss(&s);
            s.sinks[e] = (float)(x - h);
            const double lm = loss(&s);
            s.sinks[e] = x;
            fd[e] = e == 1 ? 0.0 : (lp - lm) / (2 * h);
        }
        clattn_tensor ts = clattn_tensor_host(g_sinks, 1, c->h_q, 1, 1);
        char what[96];
        snprintf(what, sizeof what, "d_sinks of %s vs central differences", c->name);
        TU_ASSERT_CLOSE(what, &ts, fd, NULL, tol);
        ck_assert_msg(g_sinks[1] == 0.0f, "%s: d_sinks of a -inf sink is %g", c->name,
                      (double)g_sinks[1]);
    }
    free(g_sinks);
    setup_free(&s);
}
END_TEST

START_TEST(masked_rows_and_keys)
{
    /* row 1 of every head sees no key (bool mask); keys 3..5 are masked for every row
     * and hold NaN and inf in K and V; entry's last row is padding (q_lens) */
    const config c = {"masked", 1, 2, 1,    4,    6, 4, 3, CLATTN_MASK_NONE, 0, 0, 0,
                      0,        0, 1, 0.0f, 0.0f, 0, 0, 0};
    setup s;
    setup_init(&s, &c, tu_seed() + 7u);
    uint8_t *m = (uint8_t *)s.mask;
    for (int64_t i = 0; i < c.n_q; i++)
        for (int64_t j = 0; j < c.n_kv; j++)
            m[i * c.n_kv + j] = (uint8_t)(i != 1 && j < 3);
    int32_t q_lens[1] = {3};
    s.desc.q_lens = q_lens;
    for (int64_t j = 3; j < c.n_kv; j++)
        for (int64_t x = 0; x < c.d_k; x++)
            s.p.k[j * c.d_k + x] = (j == 3) ? NAN : INFINITY;
    for (int64_t j = 3; j < c.n_kv; j++)
        for (int64_t x = 0; x < c.d_v; x++)
            s.p.v[j * c.d_v + x] = (j == 4) ? NAN : -INFINITY;
    float dq[2 * 4 * 4], dk[6 * 4], dv[6 * 3];
    clattn_tensor tq = clattn_tensor_host(dq, 1, 2, 4, 4), tk = clattn_tensor_host(dk, 1, 1, 6, 4),
                  tv = clattn_tensor_host(dv, 1, 1, 6, 3);
    TU_ASSERT_OK(backward(&s, &tq, &tk, &tv, NULL), "reference backward with masked rows and keys");
    tu_assert_finite("dQ", &tq);
    tu_assert_finite("dK", &tk);
    tu_assert_finite("dV", &tv);
    for (int64_t h = 0; h < 2; h++)
        for (int64_t i = 1; i < 4; i += 2) /* row 1: no visible key; row 3: padding */
            for (int64_t x = 0; x < 4; x++)
                ck_assert_msg(dq[(h * 4 + i) * 4 + x] == 0.0f, "dQ[h %lld][row %lld] = %g, not 0",
                              (long long)h, (long long)i, (double)dq[(h * 4 + i) * 4 + x]);
    for (int64_t j = 3; j < 6; j++)
        for (int64_t x = 0; x < 3; x++)
            ck_assert_msg(dk[j * 4 + x] == 0.0f && dv[j * 3 + x] == 0.0f,
                          "masked key %lld has a gradient (dK %g, dV %g)", (long long)j,
                          (double)dk[j * 4 + x], (double)dv[j * 3 + x]);
    /* the dO of rows 1 and 3 must not reach dK/dV: poison them and compare */
    float dk2[6 * 4], dv2[6 * 3];
    clattn_tensor tk2 = clattn_tensor_host(dk2, 1, 1, 6, 4),
                  tv2 = clattn_tensor_host(dv2, 1, 1, 6, 3);
    for (int64_t h = 0; h < 2; h++)
        for (int64_t i = 1; i < 4; i += 2)
            for (int64_t x = 0; x < 3; x++)
                s.d_o[(h * 4 + i) * 3 + x] = 1e6f;
    TU_ASSERT_OK(backward(&s, &tq, &tk2, &tv2, NULL), "reference backward, poisoned dO rows");
    ck_assert_msg(memcmp(dk, dk2, sizeof dk) == 0 && memcmp(dv, dv2, sizeof dv) == 0,
                  "dO of a row without keys (or a padding row) changed dK or dV");
    setup_free(&s);
}
END_TEST

START_TEST(storage_and_validation)
{
    const config c = {"storage", 1, 2, 2,    3,    5, 4, 3, CLATTN_MASK_CAUSAL_TOP_LEFT, 0, 0, 0,
                      0,         0, 0, 0.0f, 0.0f, 0, 0, 0};
    setup s;
    setup_init(&s, &c, tu_seed() + 11u);
    float dq[24], dk[40], dv[30];
    clattn_tensor tq = clattn_tensor_host(dq, 1, 2, 3, 4), tk = clattn_tensor_host(dk, 1, 2, 5, 4),
                  tv = clattn_tensor_host(dv, 1, 2, 5, 3);
    TU_ASSERT_OK(backward(&s, &tq, &tk, &tv, NULL), "reference backward, float32");
    /* float16 and bfloat16 dQ: the float32 result rounded once (to nearest, ties even) */
    uint16_t h16[24];
    clattn_tensor t16 = clattn_tensor_host(h16, 1, 2, 3, 4);
    for (int dt = CLATTN_FLOAT16; dt <= CLATTN_BFLOAT16; dt++) {
        t16.dtype = (clattn_dtype)dt;
        TU_ASSERT_OK(backward(&s, &t16, &tk, &tv, NULL), "reference backward, 16-bit dQ");
        for (int i = 0; i < 24; i++) {
            const uint16_t want =
                dt == CLATTN_FLOAT16 ? clattn_f32_to_f16(dq[i]) : clattn_f32_to_bf16(dq[i]);
            ck_assert_msg(h16[i] == want, "16-bit dQ[%d] = 0x%04x, the rounded float32 is 0x%04x",
                          i, h16[i], want);
        }
    }
    /* failures write nothing */
    float canary[40];
    tu_fill_value(canary, 40, 7.0f);
    clattn_tensor bad = clattn_tensor_host(canary, 1, 2, 4, 4); /* dQ with n_q 4, not 3 */
    ck_assert_int_eq(backward(&s, &bad, &tk, &tv, NULL), CLATTN_ERROR_INVALID_SHAPE);
    ck_assert_msg(strstr(clattn_last_error_message(NULL), "dQ") != NULL, "message: %s",
                  clattn_last_error_message(NULL));
    clattn_tensor alias = clattn_tensor_host(dk, 1, 2, 3, 4); /* dQ over dK's memory */
    ck_assert_int_eq(backward(&s, &alias, &tk, &tv, NULL), CLATTN_ERROR_INVALID_LAYOUT);
    clattn_tensor over_q = s.p.tq; /* dQ over Q */
    ck_assert_int_eq(backward(&s, &over_q, &tk, &tv, NULL), CLATTN_ERROR_INVALID_LAYOUT);
    clattn_tensor c_k = clattn_tensor_host(canary, 1, 2, 5, 4);
    ck_assert_int_eq(clattn_reference_attention_backward(NULL, &s.p.tq, &s.p.tk, &s.p.tv, &s.t_do,
                                                         &tq, &c_k, &tv),
                     CLATTN_ERROR_INVALID_ARGUMENT);
    /* d_sinks without sinks; of the wrong shape or dtype; over dQ (host and device calls) */
    ck_assert_int_eq(backward(&s, &tq, &c_k, &tv, canary + 30), CLATTN_ERROR_INVALID_ARGUMENT);
    ck_assert_msg(strstr(clattn_last_error_message(NULL), "d_sinks") != NULL, "message: %s",
                  clattn_last_error_message(NULL));
    const float sinks[2] = {0.5f, -1.0f};
    s.desc.sinks = sinks;
    clattn_tensor ds_bad[3] = {clattn_tensor_host(canary + 30, 1, 3, 1, 1),
                               clattn_tensor_host(canary + 30, 1, 2, 1, 1),
                               clattn_tensor_host(dq, 1, 2, 1, 1)}; /* over dQ */
    ds_bad[1].dtype = CLATTN_FLOAT16;
    const clattn_status want[3] = {CLATTN_ERROR_INVALID_SHAPE, CLATTN_ERROR_INVALID_ARGUMENT,
                                   CLATTN_ERROR_INVALID_LAYOUT};
    float o[18], lse[6];
    clattn_tensor to = tu_problem_o(&s.p, o), tl = clattn_tensor_host(lse, 1, 2, 3, 1);
    clattn_attention_desc df = s.desc;
    df.lse = &tl;
    TU_ASSERT_OK(clattn_attention(tu_ctx(), &df, &s.p.tq, &s.p.tk, &s.p.tv, &to), "forward");
    for (int e = 0; e < 3; e++) {
        clattn_attention_desc d = s.desc;
        d.d_sinks = &ds_bad[e];
        ck_assert_int_eq(clattn_reference_attention_backward(&d, &s.p.tq, &s.p.tk, &s.p.tv, &s.t_do,
                                                             &tq, &c_k, &tv),
                         want[e]);
        ck_assert_int_eq(clattn_attention_backward(tu_ctx(), &d, &s.p.tq, &s.p.tk, &s.p.tv, &to,
                                                   &tl, &s.t_do, &tq, &c_k, &tv),
                         want[e]);
        ck_assert_msg(strstr(clattn_last_error_message(tu_ctx()), "d_sinks") != NULL,
                      "d_sinks case %d: message: %s", e, clattn_last_error_message(tu_ctx()));
    }
    s.desc.sinks = NULL;
    tu_assert_untouched("dK after failed calls", canary, 0, 40, 7.0f);
    setup_free(&s);
}
END_TEST

/* ---- the device backward (clattn_attention_backward) ---------------------------------- */

/* Shapes beyond the reference's small ones: several key tiles, query rows past the
 * 16-key vectors, head dims that are not multiples of 4 or 16. */
/* name, b, h_q, h_kv, n_q, n_kv, d_k, d_v, mask, window, left, right, alibi, lens,
 * mask_tensor, softcap, scale, q_start, kv_start, sinks: one row each */
// clang-format off
static const config DEVICE_CONFIGS[] = {
    {"gqa_causal_lengths", 2, 4, 2, 37, 53, 64, 32, CLATTN_MASK_CAUSAL_TOP_LEFT, 0, 0, 0, 0, 1, 0, 0.0f, 0.0f, 0, 0, 0},
    {"window_alibi_softcap_float_mask", 1, 2, 1, 41, 70, 40, 24, CLATTN_MASK_NONE, 1, 9, 3, 1, 0, 2, 2.5f, 0.0f, 0, 0, 0},
    {"bottom_right_positions_bool_mask", 2, 2, 2, 19, 33, 17, 33, CLATTN_MASK_CAUSAL_BOTTOM_RIGHT, 0, 0, 0, 1, 1, 1, 0.0f, 0.7f, 5, 2, 0},
    {"no_self_mqa", 1, 3, 1, 20, 20, 8, 1, CLATTN_MASK_NO_SELF, 0, 0, 0, 0, 0, 0, 0.0f, 0.0f, 0, 0, 0},
    {"sinks_gqa_lengths_bool_mask", 2, 4, 2, 37, 53, 64, 32, CLATTN_MASK_CAUSAL_TOP_LEFT, 0, 0, 0, 1, 1, 1, 0.0f, 0.0f, 0, 0, 1},
};
// clang-format on
#define N_DEVICE_CONFIGS ((int)(sizeof DEVICE_CONFIGS / sizeof DEVICE_CONFIGS[0]))

/* Tolerance of the device gradients against the float64 reference: float32 products of
 * d_k + d_v terms, P from the forward's float32 LSE, and dS = P·(dP − D) cancelling
 * when dP ≈ D: 2e-4 absolute + 2e-3 relative (a dropped term or scale is off by far
 * more; inputs are O(1)). */
#define TOL_DEVICE ((tu_tol){2e-4, 2e-3})

/* The forward on the device (O and a float32 LSE into o and lse), then the device
 * backward into dq, dk, dv (host views the caller made). */
static clattn_status device_backward(const setup *s, float *o, float *lse, const clattn_tensor *dq,
                                     const clattn_tensor *dk, const clattn_tensor *dv,
                                     float *d_sinks)
{
    const tu_problem *p = &s->p;
    clattn_tensor to = tu_problem_o(p, o);
    clattn_tensor tl = clattn_tensor_host(lse, p->b, p->h_q, p->n_q, 1);
    clattn_attention_desc d = s->desc;
    d.lse = &tl;
    clattn_status st = clattn_attention(tu_ctx(), &d, &p->tq, &p->tk, &p->tv, &to);
    if (st != CLATTN_SUCCESS)
        return st;
    clattn_attention_desc db = s->desc;
    clattn_tensor ts = clattn_tensor_host(d_sinks, 1, p->h_q, 1, 1);
    db.d_sinks = d_sinks ? &ts : NULL;
    return clattn_attention_backward(tu_ctx(), &db, &p->tq, &p->tk, &p->tv, &to, &tl, &s->t_do, dq,
                                     dk, dv);
}

static void check_device(const config *c, uint32_t seed, int dropout)
{
    setup s;
    setup_init(&s, c, seed);
    with_dropout(&s, dropout);
    const tu_problem *p = &s.p;
    const size_t n_q = (size_t)(c->b * c->h_q * c->n_q * c->d_k),
                 n_k = (size_t)(c->b * c->h_kv * c->n_kv * c->d_k),
                 n_v = (size_t)(c->b * c->h_kv * c->n_kv * c->d_v);
    float *dq = tu_alloc(n_q + 4, -7.0f), *dk = tu_alloc(n_k + 4, -7.0f),
          *dv = tu_alloc(n_v + 4, -7.0f);
    float *rq = tu_alloc(n_q, 0.0f), *rk = tu_alloc(n_k, 0.0f), *rv = tu_alloc(n_v, 0.0f);
    float *o = tu_alloc((size_t)tu_count(&s.t_do), 0.0f);
    float *lse = tu_alloc((size_t)(c->b * c->h_q * c->n_q), 0.0f);
    clattn_tensor tq = clattn_tensor_host(dq, c->b, c->h_q, c->n_q, c->d_k),
                  tk = clattn_tensor_host(dk, c->b, c->h_kv, c->n_kv, c->d_k),
                  tv = clattn_tensor_host(dv, c->b, c->h_kv, c->n_kv, c->d_v);
    clattn_tensor trq = clattn_tensor_host(rq, c->b, c->h_q, c->n_q, c->d_k),
                  trk = clattn_tensor_host(rk, c->b, c->h_kv, c->n_kv, c->d_k),
                  trv = clattn_tensor_host(rv, c->b, c->h_kv, c->n_kv, c->d_v);
    float ds[8], rds[8], ds2[8]; /* d_sinks with sinks (h_q <= 8) */
    TU_ASSERT_OK(backward(&s, &trq, &trk, &trv, c->sinks ? rds : NULL), "%s: reference backward",
                 c->name);
    TU_ASSERT_OK(device_backward(&s, o, lse, &tq, &tk, &tv, c->sinks ? ds : NULL),
                 "%s: device backward", c->name);
    if (c->sinks) {
        clattn_tensor tds = clattn_tensor_host(ds, 1, c->h_q, 1, 1);
        char what[160];
        snprintf(what, sizeof what, "%s (seed %u) d_sinks", c->name, seed);
        TU_ASSERT_CLOSE(what, &tds, NULL, rds, TOL_DEVICE);
    }
    /* all three compared before failing, so a failure shows each gradient's worst */
    const clattn_tensor *got[3] = {&tq, &tk, &tv};
    const float *want[3] = {rq, rk, rv};
    static const char *const names[3] = {"dQ", "dK", "dV"};
    char msg[3][600];
    bool ok = true;
    for (int a = 0; a < 3; a++) {
        char what[160];
        snprintf(what, sizeof what, "%s (seed %u) %s", c->name, seed, names[a]);
        msg[a][0] = '\0';
        ok &= tu_close(what, got[a], NULL, want[a], TOL_DEVICE, msg[a], sizeof msg[a]);
    }
    ck_assert_msg(ok, "%s %s %s", msg[0], msg[1], msg[2]);
    tu_assert_untouched("dQ canary", dq, n_q, n_q + 4, -7.0f);
    tu_assert_untouched("dK canary", dk, n_k, n_k + 4, -7.0f);
    tu_assert_untouched("dV canary", dv, n_v, n_v + 4, -7.0f);
    /* deterministic: a second run gives the same bits */
    float *dq2 = tu_alloc(n_q, 0.0f), *dk2 = tu_alloc(n_k, 0.0f), *dv2 = tu_alloc(n_v, 0.0f);
    clattn_tensor tq2 = clattn_tensor_host(dq2, c->b, c->h_q, c->n_q, c->d_k),
                  tk2 = clattn_tensor_host(dk2, c->b, c->h_kv, c->n_kv, c->d_k),
                  tv2 = clattn_tensor_host(dv2, c->b, c->h_kv, c->n_kv, c->d_v);
    TU_ASSERT_OK(device_backward(&s, o, lse, &tq2, &tk2, &tv2, c->sinks ? ds2 : NULL),
                 "%s: second run", c->name);
    ck_assert_msg(memcmp(dq, dq2, n_q * 4) == 0 && memcmp(dk, dk2, n_k * 4) == 0 &&
                      memcmp(dv, dv2, n_v * 4) == 0 &&
                      (!c->sinks || memcmp(ds, ds2, sizeof(float) * (size_t)c->h_q) == 0),
                  "%s: a second run gave different bits", c->name);
    printf("device backward %s%s: seed %u, within %g + %g|x| of the reference, bitwise "
           "reproducible\n",
           c->name, dropout ? " with dropout" : "", seed, TOL_DEVICE.atol, TOL_DEVICE.rtol);
    (void)p;
    free(dq);
    free(dk);
    free(dv);
    free(rq);
    free(rk);
    free(rv);
    free(dq2);
    free(dk2);
    free(dv2);
    free(o);
    free(lse);
    setup_free(&s);
}

/* Every reference configuration (every score term), then the larger shapes; from
 * N_ALL on five of them again with dropout (each is a program of its own: GQA causal,
 * window + ALiBi, float mask + softcap + causal, and two larger shapes with lengths,
 * a bool mask and sinks; the central differences cover every configuration). */
#define N_ALL (N_CONFIGS + N_DEVICE_CONFIGS)
static const int DROPOUT_DEVICE[] = {1, 4, 7, N_CONFIGS + 0, N_CONFIGS + 4};
#define N_DROPOUT_DEVICE ((int)(sizeof DROPOUT_DEVICE / sizeof DROPOUT_DEVICE[0]))
/* Longer key ranges, for the CPU form of bwd_dkdv that forms dQ too (host/tuning.c
 * clattn_backward_dq_splits): blocks of 128 keys (32 work-items × 4 keys), each
 * work-group walking the blocks of one split. 300 keys with one KV head take 3 splits of
 * one block each (with dropout); 290 keys with (batch · KV heads) 4 take one split walking
 * 3 blocks (the last one partly past n_kv, and kv_lens cut earlier). Head dims 12 and 24:
 * rows padded to 16 and 32 in the partial sums. (Two configurations: each is programs of
 * its own, compiled cold in the README suite.) */
// clang-format off
static const config BLOCK_CONFIGS[] = {
    {"three_splits_causal_dropout", 1, 2, 1, 40, 300, 12, 8, CLATTN_MASK_CAUSAL_BOTTOM_RIGHT, 0, 0, 0, 0, 0, 0, 0.0f, 0.0f, 0, 0, 0},
    {"one_split_three_blocks_gqa_lengths", 2, 4, 2, 23, 290, 24, 16, CLATTN_MASK_NONE, 0, 0, 0, 0, 1, 0, 0.0f, 0.0f, 0, 0, 0},
};
// clang-format on
#define N_BLOCK_CONFIGS ((int)(sizeof BLOCK_CONFIGS / sizeof BLOCK_CONFIGS[0]))

START_TEST(device_key_blocks)
{
    check_device(&BLOCK_CONFIGS[_i], tu_seed() + 7000u + 100u * (uint32_t)_i, _i == 0);
}
END_TEST

START_TEST(device_against_reference)
{
    const uint32_t seed = tu_seed() + 100u * (uint32_t)_i;
    const int i = _i < N_ALL ? _i : DROPOUT_DEVICE[_i - N_ALL];
    check_device(i < N_CONFIGS ? &CONFIGS[i] : &DEVICE_CONFIGS[i - N_CONFIGS], seed, _i >= N_ALL);
}
END_TEST

/* Masked rows (no visible key; masked_rows NaN too: O is NaN there, LSE −∞), masked keys
 * holding NaN and inf in K and V, and padding rows: the device gives the reference's
 * finite gradients, zeros where nothing adds. */
START_TEST(device_masked_rows_and_keys)
{
    const config c = {"masked", 1, 2, 1,    4,    6, 4, 3, CLATTN_MASK_NONE, 0, 0, 0,
                      0,        0, 1, 0.0f, 0.0f, 0, 0, 0};
    /* rows 0 and 2 see keys 0-1 and 0-2 (so where K holds inf or NaN, a key is skipped by
     * each row's own weight), row 1 none, row 3 is padding. policy 0 and 1: masked rows 0
     * or NaN, K and V of the masked keys and Q and dO of the rows of weight 0 poisoned; policy 2 as
     * 0 with only V poisoned (K, Q and dO finite: the kernels' dense sums, not their weight-testing
     * ones, must keep those out) */
    for (int policy = 0; policy < 3; policy++) {
        setup s;
        setup_init(&s, &c, tu_seed() + 17u);
        uint8_t *m = (uint8_t *)s.mask;
        for (int64_t i = 0; i < c.n_q; i++)
            for (int64_t j = 0; j < c.n_kv; j++)
                m[i * c.n_kv + j] = (uint8_t)(i != 1 && j < (i == 0 ? 2 : 3));
        int32_t q_lens[1] = {3};
        s.desc.q_lens = q_lens;
        s.desc.masked_rows = policy == 1 ? CLATTN_MASKED_ROWS_NAN : CLATTN_MASKED_ROWS_ZERO;
        for (int64_t j = 3; j < c.n_kv; j++) {
            for (int64_t x = 0; x < c.d_k && policy < 2; x++)
                s.p.k[j * c.d_k + x] = (j == 3) ? NAN : INFINITY;
            for (int64_t x = 0; x < c.d_v; x++)
                s.p.v[j * c.d_v + x] = (j == 4) ? NAN : -INFINITY;
        }
        /* the rows of weight 0 (row 1 masked, row 3 padding) hold inf and NaN in Q and dO
         * (policies 0 and 1): they must add nothing to any key's dK or dV */
        for (int64_t h = 0; h < 2 && policy < 2; h++)
            for (int64_t i = 1; i < 4; i += 2) {
                for (int64_t x = 0; x < c.d_k; x++)
                    s.p.q[(h * 4 + i) * c.d_k + x] = (i == 1) ? INFINITY : NAN;
                for (int64_t x = 0; x < c.d_v; x++)
                    s.d_o[(h * 4 + i) * c.d_v + x] = (i == 1) ? NAN : -INFINITY;
            }
        float dq[32], dk[24], dv[18], rq[32], rk[24], rv[18], o[24], lse[8];
        clattn_tensor tq = clattn_tensor_host(dq, 1, 2, 4, 4),
                      tk = clattn_tensor_host(dk, 1, 1, 6, 4),
                      tv = clattn_tensor_host(dv, 1, 1, 6, 3);
        clattn_tensor trq = clattn_tensor_host(rq, 1, 2, 4, 4),
                      trk = clattn_tensor_host(rk, 1, 1, 6, 4),
                      trv = clattn_tensor_host(rv, 1, 1, 6, 3);
        TU_ASSERT_OK(backward(&s, &trq, &trk, &trv, NULL), "reference, masked rows policy %d",
                     policy);
        TU_ASSERT_OK(device_backward(&s, o, lse, &tq, &tk, &tv, NULL),
                     "device, masked rows policy %d", policy);
        tu_assert_finite("dQ", &tq);
        tu_assert_finite("dK", &tk);
        tu_assert_finite("dV", &tv);
        TU_ASSERT_CLOSE(policy == 1 ? "masked (NaN rows) dQ" : "masked dQ", &tq, NULL, rq,
                        TOL_DEVICE);
        TU_ASSERT_CLOSE(policy == 1 ? "masked (NaN rows) dK" : "masked dK", &tk, NULL, rk,
                        TOL_DEVICE);
        TU_ASSERT_CLOSE(policy == 1 ? "masked (NaN rows) dV" : "masked dV", &tv, NULL, rv,
                        TOL_DEVICE);
        for (int64_t h = 0; h < 2; h++)
            for (int64_t i = 1; i < 4; i += 2)
                for (int64_t x = 0; x < 4; x++)
                    ck_assert_msg(dq[(h * 4 + i) * 4 + x] == 0.0f, "dQ[h %lld][row %lld] = %g",
                                  (long long)h, (long long)i, (double)dq[(h * 4 + i) * 4 + x]);
        setup_free(&s);
    }
}
END_TEST

/* Huge scores (query head 0 scaled by 1e10: scores near 1e9, where float32 steps are
 * 256): the recomputed P must stay ≤ 1, so the gradients stay finite (they were NaN:
 * exp of a score rounded above the LSE overflowed, and inf·0 followed). */
START_TEST(device_huge_scores_finite)
{
    const config c = {"huge", 1, 2, 1,    3,    5, 4, 4, CLATTN_MASK_NONE, 0, 0, 0,
                      0,      0, 0, 0.0f, 0.0f, 0, 0, 0};
    for (uint32_t seed = 0; seed < 16; seed++) { /* rounding decides: several draws */
        setup s;
        setup_init(&s, &c, tu_seed() + 31u + 7u * seed);
        for (int i = 0; i < 3 * 4; i++) /* head 0's queries */
            s.p.q[i] *= 1e10f;
        float dq[24], dk[20], dv[20], o[24], lse[6];
        clattn_tensor tq = clattn_tensor_host(dq, 1, 2, 3, 4),
                      tk = clattn_tensor_host(dk, 1, 1, 5, 4),
                      tv = clattn_tensor_host(dv, 1, 1, 5, 4);
        TU_ASSERT_OK(device_backward(&s, o, lse, &tq, &tk, &tv, NULL), "scores near 1e9, draw %u",
                     seed);
        char what[64];
        snprintf(what, sizeof what, "dQ (scores near 1e9, draw %u)", seed);
        tu_assert_finite(what, &tq);
        snprintf(what, sizeof what, "dK (scores near 1e9, draw %u)", seed);
        tu_assert_finite(what, &tk);
        snprintf(what, sizeof what, "dV (scores near 1e9, draw %u)", seed);
        tu_assert_finite(what, &tv);
        setup_free(&s);
    }
}
END_TEST

/* 16-bit operands and gradients (dK in float32: each gradient its own type), and a
 * float64 LSE: against the reference fed the same rounded inputs, each 16-bit gradient
 * rounded once more (one unit in the last place). */
START_TEST(device_storage_types)
{
    const config c = {"storage", 1, 4, 2,    9,    21, 16, 8, CLATTN_MASK_CAUSAL_TOP_LEFT, 0, 0, 0,
                      1,         0, 0, 0.0f, 0.0f, 0,  0,  0};
    for (int dt = CLATTN_FLOAT16; dt <= CLATTN_BFLOAT16; dt++) {
        setup s;
        setup_init(&s, &c, tu_seed() + 23u);
        tu_problem *p = &s.p;
        const size_t nq = (size_t)tu_count(&p->tq), nk = (size_t)tu_count(&p->tk),
                     nv = (size_t)tu_count(&p->tv), no = (size_t)tu_count(&s.t_do);
        const clattn_dtype t16 = (clattn_dtype)dt;
        /* 16-bit copies of Q, K, V, dO; float32 copies of the rounded values */
        uint16_t *q16 = malloc(nq * 2), *k16 = malloc(nk * 2), *v16 = malloc(nv * 2),
                 *do16 = malloc(no * 2), *dq16 = malloc(nq * 2), *dv16 = malloc(nv * 2);
        float *srcs[4] = {p->q, p->k, p->v, s.d_o};
        uint16_t *dsts[4] = {q16, k16, v16, do16};
        const size_t ns[4] = {nq, nk, nv, no};
        for (int a = 0; a < 4; a++)
            for (size_t i = 0; i < ns[a]; i++) {
                dsts[a][i] = t16 == CLATTN_FLOAT16 ? clattn_f32_to_f16(srcs[a][i])
                                                   : clattn_f32_to_bf16(srcs[a][i]);
                srcs[a][i] = t16 == CLATTN_FLOAT16 ? clattn_f16_to_f32(dsts[a][i])
                                                   : clattn_bf16_to_f32(dsts[a][i]);
            }
        float *rq = tu_alloc(nq, 0.0f), *rk = tu_alloc(nk, 0.0f), *rv = tu_alloc(nv, 0.0f);
        clattn_tensor trq = clattn_tensor_host(rq, 1, 4, 9, 16),
                      trk = clattn_tensor_host(rk, 1, 2, 21, 16),
                      trv = clattn_tensor_host(rv, 1, 2, 21, 8);
        TU_ASSERT_OK(backward(&s, &trq, &trk, &trv, NULL), "reference on the rounded inputs");
        clattn_tensor hq = p->tq, hk = p->tk, hv = p->tv, hdo = s.t_do;
        hq.host = q16, hk.host = k16, hv.host = v16, hdo.host = do16;
        hq.dtype = hk.dtype = hv.dtype = hdo.dtype = t16;
        float *o = tu_alloc(no, 0.0f);
        double lse[36];
        clattn_tensor to = clattn_tensor_host(o, 1, 4, 9, 8);
        clattn_tensor tl = clattn_tensor_host(lse, 1, 4, 9, 1);
        tl.dtype = CLATTN_FLOAT64;
        clattn_attention_desc d = s.desc;
        d.lse = &tl;
        TU_ASSERT_OK(clattn_attention(tu_ctx(), &d, &hq, &hk, &hv, &to), "16-bit forward");
        clattn_tensor gq = clattn_tensor_host(dq16, 1, 4, 9, 16),
                      gk = clattn_tensor_host(NULL, 1, 2, 21, 16),
                      gv = clattn_tensor_host(dv16, 1, 2, 21, 8);
        gq.dtype = gv.dtype = t16; /* dK in float32: each gradient has its own type */
        float *dk32 = tu_alloc(nk, 0.0f);
        gk.host = dk32;
        TU_ASSERT_OK(clattn_attention_backward(tu_ctx(), &s.desc, &hq, &hk, &hv, &to, &tl, &hdo,
                                               &gq, &gk, &gv),
                     "16-bit backward");
        /* one unit in the last place of the 16-bit type on top of the float32 tolerance */
        const double ulp = t16 == CLATTN_FLOAT16 ? 1.0 / 1024 : 1.0 / 128;
        const tu_tol tol = {TOL_DEVICE.atol + 1e-5, TOL_DEVICE.rtol + ulp};
        const uint16_t *g16[3] = {dq16, NULL, dv16};
        const clattn_tensor *gt[3] = {&gq, &gk, &gv};
        const float *ref[3] = {rq, rk, rv};
        static const char *const names[3] = {"dQ", "dK", "dV"};
        for (int a = 0; a < 3; a++) { /* decoded to float32, then compared */
            const size_t n = (size_t)tu_count(gt[a]);
            float *dec = tu_alloc(n, 0.0f);
            for (size_t i = 0; i < n; i++)
                dec[i] = a == 1                  ? dk32[i]
                         : t16 == CLATTN_FLOAT16 ? clattn_f16_to_f32(g16[a][i])
                                                 : clattn_bf16_to_f32(g16[a][i]);
            clattn_tensor td = *gt[a];
            td.host = dec;
            td.dtype = CLATTN_FLOAT32;
            char what[64];
            snprintf(what, sizeof what, "%s %s",
                     a == 1                  ? "float32"
                     : t16 == CLATTN_FLOAT16 ? "float16"
                                             : "bfloat16",
                     names[a]);
            TU_ASSERT_CLOSE(what, &td, NULL, ref[a], tol);
            free(dec);
        }
        free(q16);
        free(k16);
        free(v16);
        free(do16);
        free(dq16);
        free(dk32);
        free(dv16);
        free(rq);
        free(rk);
        free(rv);
        free(o);
        setup_free(&s);
    }
}
END_TEST

/* clattn_attention_backward_enqueue on cl_mem views (strided dQ inside a bigger buffer):
 * the same bits as the blocking call; empty shapes; and validation (nothing written). */
START_TEST(device_enqueue_empty_and_validation)
{
    const config c = {"enqueue", 1, 2, 1,    5,    9, 8, 4, CLATTN_MASK_CAUSAL_TOP_LEFT, 0, 0, 0,
                      0,         0, 0, 0.0f, 0.0f, 0, 0, 0};
    setup s;
    setup_init(&s, &c, tu_seed() + 29u);
    tu_problem *p = &s.p;
    float o[40], lse[10], dq[80], dk[72], dv[36];
    clattn_tensor tq = clattn_tensor_host(dq, 1, 2, 5, 8), tk = clattn_tensor_host(dk, 1, 1, 9, 8),
                  tv = clattn_tensor_host(dv, 1, 1, 9, 4);
    TU_ASSERT_OK(device_backward(&s, o, lse, &tq, &tk, &tv, NULL), "blocking backward");

    cl_context cl_ctx = NULL;
    cl_command_queue queue = NULL;
    ck_assert_int_eq(clattn_context_get_cl(tu_ctx(), &cl_ctx, NULL, &queue), CLATTN_SUCCESS);
    const clattn_tensor *ins[6] = {&p->tq, &p->tk, &p->tv, NULL, NULL, &s.t_do};
    clattn_tensor to = tu_problem_o(p, o), tl = clattn_tensor_host(lse, 1, 2, 5, 1);
    ins[3] = &to;
    ins[4] = &tl;
    cl_mem mem[9];
    clattn_tensor bv[9];
    for (int i = 0; i < 6; i++) {
        cl_int err;
        mem[i] = clCreateBuffer(cl_ctx, CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR,
                                (size_t)tu_count(ins[i]) * 4, ins[i]->host, &err);
        ck_assert_int_eq(err, CL_SUCCESS);
        bv[i] = *ins[i];
        bv[i].host = NULL;
        bv[i].buffer = mem[i];
    }
    /* dQ strided: rows of 12 floats, starting at element 3 of its buffer */
    const clattn_tensor *outs[3] = {&tq, &tk, &tv};
    const size_t out_floats[3] = {3 + 10 * 12, 72, 36};
    for (int i = 0; i < 3; i++) {
        cl_int err;
        mem[6 + i] = clCreateBuffer(cl_ctx, CL_MEM_READ_WRITE, out_floats[i] * 4, NULL, &err);
        ck_assert_int_eq(err, CL_SUCCESS);
        bv[6 + i] = *outs[i];
        bv[6 + i].host = NULL;
        bv[6 + i].buffer = mem[6 + i];
    }
    const int64_t st_q[4] = {10 * 12, 5 * 12, 12, 1};
    memcpy(bv[6].strides, st_q, sizeof st_q);
    bv[6].offset = 3;
    cl_event done = NULL;
    TU_ASSERT_OK(clattn_attention_backward_enqueue(tu_ctx(), &s.desc, &bv[0], &bv[1], &bv[2],
                                                   &bv[3], &bv[4], &bv[5], &bv[6], &bv[7], &bv[8],
                                                   0, NULL, &done),
                 "backward enqueue");
    ck_assert_int_eq(clWaitForEvents(1, &done), CL_SUCCESS);
    clReleaseEvent(done);
    float got_q[3 + 120], got_k[72], got_v[36];
    ck_assert_int_eq(
        clEnqueueReadBuffer(queue, mem[6], CL_TRUE, 0, sizeof got_q, got_q, 0, NULL, NULL),
        CL_SUCCESS);
    ck_assert_int_eq(
        clEnqueueReadBuffer(queue, mem[7], CL_TRUE, 0, sizeof got_k, got_k, 0, NULL, NULL),
        CL_SUCCESS);
    ck_assert_int_eq(
        clEnqueueReadBuffer(queue, mem[8], CL_TRUE, 0, sizeof got_v, got_v, 0, NULL, NULL),
        CL_SUCCESS);
    for (int r = 0; r < 10; r++)
        ck_assert_msg(memcmp(got_q + 3 + r * 12, dq + r * 8, 32) == 0,
                      "enqueue dQ row %d differs from the blocking call's", r);
    ck_assert_msg(memcmp(got_k, dk, sizeof dk) == 0 && memcmp(got_v, dv, sizeof dv) == 0,
                  "enqueue dK/dV differ from the blocking call's");
    /* a host view to the enqueue call, a buffer view to the blocking call */
    ck_assert_int_eq(clattn_attention_backward_enqueue(tu_ctx(), &s.desc, &p->tq, &bv[1], &bv[2],
                                                       &bv[3], &bv[4], &bv[5], &bv[6], &bv[7],
                                                       &bv[8], 0, NULL, NULL),
                     CLATTN_ERROR_INVALID_LAYOUT);
    ck_assert_int_eq(clattn_attention_backward(tu_ctx(), &s.desc, &p->tq, &p->tk, &p->tv, &to, &tl,
                                               &s.t_do, &bv[6], &tk, &tv),
                     CLATTN_ERROR_INVALID_LAYOUT);
    for (int i = 0; i < 9; i++)
        clReleaseMemObject(mem[i]);

    /* validation: each failure writes nothing */
    float canary[80];
    tu_fill_value(canary, 80, 7.0f);
    clattn_tensor cq = clattn_tensor_host(canary, 1, 2, 5, 8);
    clattn_context *ctx = tu_ctx();
    ck_assert_int_eq(clattn_attention_backward(ctx, &s.desc, &p->tq, &p->tk, &p->tv, &to, NULL,
                                               &s.t_do, &cq, &tk, &tv),
                     CLATTN_ERROR_INVALID_ARGUMENT);
    ck_assert_msg(strstr(clattn_last_error_message(ctx), "lse"), "%s",
                  clattn_last_error_message(ctx));
    ck_assert_int_eq(clattn_attention_backward(NULL, &s.desc, &p->tq, &p->tk, &p->tv, &to, &tl,
                                               &s.t_do, &cq, &tk, &tv),
                     CLATTN_ERROR_INVALID_ARGUMENT);
    ck_assert_int_eq(clattn_attention_backward(ctx, NULL, &p->tq, &p->tk, &p->tv, &to, &tl, &s.t_do,
                                               &cq, &tk, &tv),
                     CLATTN_ERROR_INVALID_ARGUMENT);
    clattn_tensor bad_do = clattn_tensor_host(s.d_o, 1, 2, 4, 4); /* n_q 4, not 5 */
    ck_assert_int_eq(clattn_attention_backward(ctx, &s.desc, &p->tq, &p->tk, &p->tv, &to, &tl,
                                               &bad_do, &cq, &tk, &tv),
                     CLATTN_ERROR_INVALID_SHAPE);
    ck_assert_msg(strstr(clattn_last_error_message(ctx), "dO"), "%s",
                  clattn_last_error_message(ctx));
    clattn_tensor bad_lse = clattn_tensor_host(lse, 1, 2, 4, 1);
    ck_assert_int_eq(clattn_attention_backward(ctx, &s.desc, &p->tq, &p->tk, &p->tv, &to, &bad_lse,
                                               &s.t_do, &cq, &tk, &tv),
                     CLATTN_ERROR_INVALID_SHAPE);
    clattn_tensor over_do = clattn_tensor_host(s.d_o, 1, 1, 9, 4); /* dV over dO's memory */
    ck_assert_int_eq(clattn_attention_backward(ctx, &s.desc, &p->tq, &p->tk, &p->tv, &to, &tl,
                                               &s.t_do, &cq, &tk, &over_do),
                     CLATTN_ERROR_INVALID_LAYOUT);
    ck_assert_int_eq(clattn_attention_backward(ctx, &s.desc, &p->tq, &p->tk, &p->tv, &to, &tl,
                                               &s.t_do, &cq, &cq, &tv),
                     CLATTN_ERROR_INVALID_SHAPE);
    tu_assert_untouched("dQ after failed calls", canary, 0, 80, 7.0f);
    setup_free(&s);

    /* head dims above 256: unsupported, said so */
    {
        static float big_q[300], big_k[300], big_v[300], big_o[300], big_do[300];
        float big_lse[1] = {0.0f}, g[3][300];
        clattn_tensor bq = clattn_tensor_host(big_q, 1, 1, 1, 300),
                      bk = clattn_tensor_host(big_k, 1, 1, 1, 300),
                      bvv = clattn_tensor_host(big_v, 1, 1, 1, 300),
                      bo = clattn_tensor_host(big_o, 1, 1, 1, 300),
                      bdo = clattn_tensor_host(big_do, 1, 1, 1, 300),
                      bl = clattn_tensor_host(big_lse, 1, 1, 1, 1);
        clattn_tensor gq = clattn_tensor_host(g[0], 1, 1, 1, 300),
                      gk = clattn_tensor_host(g[1], 1, 1, 1, 300),
                      gv = clattn_tensor_host(g[2], 1, 1, 1, 300);
        clattn_attention_desc d = clattn_attention_desc_default();
        ck_assert_int_eq(
            clattn_attention_backward(ctx, &d, &bq, &bk, &bvv, &bo, &bl, &bdo, &gq, &gk, &gv),
            CLATTN_ERROR_UNSUPPORTED);
        ck_assert_msg(strstr(clattn_last_error_message(ctx), "256"), "%s",
                      clattn_last_error_message(ctx));
    }
    /* empty shapes: no queries (dK = dV = 0), no keys (dQ = 0) */
    {
        float q1[8], k1[16], v1[8], o1[8], do1[8], l1[2], gq[8], gk[16], gv[8];
        tu_fill_gen(q1, 8, 1, 1.0f);
        tu_fill_gen(k1, 16, 2, 1.0f);
        tu_fill_gen(v1, 8, 3, 1.0f);
        tu_fill_gen(do1, 8, 4, 1.0f);
        clattn_attention_desc d = clattn_attention_desc_default();
        /* n_q 0, n_kv 4 */
        clattn_tensor eq = clattn_tensor_host(q1, 1, 1, 0, 4),
                      ek = clattn_tensor_host(k1, 1, 1, 4, 4),
                      ev = clattn_tensor_host(v1, 1, 1, 4, 2),
                      eo = clattn_tensor_host(o1, 1, 1, 0, 2),
                      edo = clattn_tensor_host(do1, 1, 1, 0, 2),
                      el = clattn_tensor_host(l1, 1, 1, 0, 1);
        clattn_tensor egq = clattn_tensor_host(gq, 1, 1, 0, 4),
                      egk = clattn_tensor_host(gk, 1, 1, 4, 4),
                      egv = clattn_tensor_host(gv, 1, 1, 4, 2);
        tu_fill_value(gk, 16, 7.0f);
        tu_fill_value(gv, 8, 7.0f);
        TU_ASSERT_OK(
            clattn_attention_backward(ctx, &d, &eq, &ek, &ev, &eo, &el, &edo, &egq, &egk, &egv),
            "backward with no queries");
        for (int i = 0; i < 16; i++)
            ck_assert_msg(gk[i] == 0.0f && (i >= 8 || gv[i] == 0.0f),
                          "no queries: dK[%d] = %g, dV = %g", i, (double)gk[i],
                          (double)(i < 8 ? gv[i] : 0.0f));
        /* n_q 2, n_kv 0: every row empty, LSE −∞ */
        eq = clattn_tensor_host(q1, 1, 1, 2, 4);
        ek = clattn_tensor_host(k1, 1, 1, 0, 4);
        ev = clattn_tensor_host(v1, 1, 1, 0, 2);
        eo = clattn_tensor_host(o1, 1, 1, 2, 2);
        edo = clattn_tensor_host(do1, 1, 1, 2, 2);
        el = clattn_tensor_host(l1, 1, 1, 2, 1);
        egq = clattn_tensor_host(gq, 1, 1, 2, 4);
        egk = clattn_tensor_host(gk, 1, 1, 0, 4);
        egv = clattn_tensor_host(gv, 1, 1, 0, 2);
        clattn_attention_desc df = d;
        df.lse = &el;
        TU_ASSERT_OK(clattn_attention(ctx, &df, &eq, &ek, &ev, &eo), "forward with no keys");
        tu_fill_value(gq, 8, 7.0f);
        TU_ASSERT_OK(
            clattn_attention_backward(ctx, &d, &eq, &ek, &ev, &eo, &el, &edo, &egq, &egk, &egv),
            "backward with no keys");
        for (int i = 0; i < 8; i++)
            ck_assert_msg(gq[i] == 0.0f, "no keys: dQ[%d] = %g", i, (double)gq[i]);
    }
}
END_TEST

int main(void)
{
    tu_seed_init(20261130u);
    Suite *suite = suite_create("backward");
    TCase *tc = tcase_create("reference");
    tcase_set_timeout(tc, 300);
    tcase_add_loop_test(tc, finite_differences, 0, 2 * N_CONFIGS);
    tcase_add_test(tc, masked_rows_and_keys);
    tcase_add_test(tc, storage_and_validation);
    suite_add_tcase(suite, tc);
    /* device_small: two small cases (the README's command and test_oclgrind.sh run them:
     * float mask + softcap + causal + GQA; masked rows and keys with NaN and inf) */
    tc = tcase_create("device_small");
    tcase_set_timeout(tc, 600);
    tcase_add_loop_test(tc, device_against_reference, 7, 8);
    tcase_add_test(tc, device_masked_rows_and_keys);
    tcase_add_test(tc, device_huge_scores_finite);
    suite_add_tcase(suite, tc);
    /* device_blocks: several key blocks and splits (test_oclgrind.sh runs it too) */
    tc = tcase_create("device_blocks");
    tcase_set_timeout(tc, 600);
    tcase_add_loop_test(tc, device_key_blocks, 0, N_BLOCK_CONFIGS);
    suite_add_tcase(suite, tc);
    /* device_dropout: the same small case with dropout (test_oclgrind_paged runs it) */
    tc = tcase_create("device_dropout");
    tcase_set_timeout(tc, 600);
    tcase_add_loop_test(tc, device_against_reference, N_ALL + 2, N_ALL + 3); /* config 7 */
    suite_add_tcase(suite, tc);
    tc = tcase_create("device");
    tcase_set_timeout(tc, 600);
    tcase_add_loop_test(tc, device_against_reference, 0, 7);
    tcase_add_loop_test(tc, device_against_reference, 8, N_ALL + 2);
    tcase_add_loop_test(tc, device_against_reference, N_ALL + 3, N_ALL + N_DROPOUT_DEVICE);
    tcase_add_test(tc, device_storage_types);
    tcase_add_test(tc, device_enqueue_empty_and_validation);
    tcase_set_tags(tc, "slow"); /* ctest runs it apart: test_backward_device, label slow */
    suite_add_tcase(suite, tc);
    return tu_run_suite(suite);
}
