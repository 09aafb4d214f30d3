/* The backward pass (include/clattn_backward.h), step 1: the float64 CPU reference.
 *
 *  - finite_differences: for every score term (causal masks, no-self, window, lengths,
 *    positions, ALiBi, softcap, bool and float mask tensors, grouped-query heads,
 *    d_k != d_v), dQ, dK and dV of L = Σ dO·O against central differences of the forward
 *    reference, every element. O is stored in float32, so the differences carry its
 *    rounding: tolerance 1e-3 + 1e-3·|dX| with step 1e-2 (truncation ~1e-5, rounding
 *    ~1e-4); a wrong term is off by far more (a dropped softcap factor by ~20 %).
 *  - masked_rows_and_keys: a fully masked row has dQ 0 and adds nothing to dK/dV; NaN
 *    and inf in K and V at masked keys give finite gradients; padding rows too.
 *  - storage_and_validation: 16-bit gradients are the float32 ones rounded once; bad
 *    shapes, overlaps and a NULL desc give their statuses and write nothing.
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
} config;

static const config CONFIGS[] = {
    {"plain", 1, 2, 2, 4, 6, 5, 3, CLATTN_MASK_NONE, 0, 0, 0, 0, 0, 0, 0.0f, 0.0f, 0, 0},
    {"gqa_causal", 2, 4, 2, 5, 7, 4, 3, CLATTN_MASK_CAUSAL_TOP_LEFT, 0, 0, 0, 0, 0, 0, 0.0f, 0.0f,
     0, 0},
    {"bottom_right_lengths", 2, 2, 1, 4, 7, 3, 4, CLATTN_MASK_CAUSAL_BOTTOM_RIGHT, 0, 0, 0, 0, 1, 0,
     0.0f, 0.0f, 0, 0},
    {"no_self_positions", 1, 2, 2, 5, 6, 4, 4, CLATTN_MASK_NO_SELF, 0, 0, 0, 0, 0, 0, 0.0f, 0.0f, 3,
     2},
    {"window_alibi", 1, 3, 1, 6, 8, 3, 2, CLATTN_MASK_NONE, 1, 2, 1, 1, 0, 0, 0.0f, 0.0f, 0, 0},
    {"softcap_scale", 1, 2, 2, 4, 5, 6, 3, CLATTN_MASK_NONE, 0, 0, 0, 0, 0, 0, 1.5f, 0.9f, 0, 0},
    {"bool_mask", 2, 2, 2, 4, 6, 4, 4, CLATTN_MASK_NONE, 0, 0, 0, 0, 0, 1, 0.0f, 0.0f, 0, 0},
    {"float_mask_softcap_causal", 1, 4, 2, 5, 5, 4, 3, CLATTN_MASK_CAUSAL_TOP_LEFT, 0, 0, 0, 1, 0,
     2, 2.0f, 0.0f, 0, 0},
};
#define N_CONFIGS ((int)(sizeof CONFIGS / sizeof CONFIGS[0]))

typedef struct setup {
    tu_problem p;
    clattn_attention_desc desc;
    float *d_o, *mask, *slopes;
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
}

/* The reference backward of the setup's problem into the three gradient views. */
static clattn_status backward(const setup *s, const clattn_tensor *dq, const clattn_tensor *dk,
                              const clattn_tensor *dv)
{
    return clattn_reference_attention_backward(&s->desc, &s->p.tq, &s->p.tk, &s->p.tv, &s->t_do, dq,
                                               dk, dv);
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

START_TEST(finite_differences)
{
    const config *c = &CONFIGS[_i];
    const uint32_t seed = tu_seed() + 101u * (uint32_t)_i;
    printf("backward finite differences: %s, seed %u\n", c->name, seed);
    setup s;
    setup_init(&s, c, seed);
    float *g[3];
    clattn_tensor tg[3];
    float *in[3] = {s.p.q, s.p.k, s.p.v};
    const clattn_tensor *tin[3] = {&s.p.tq, &s.p.tk, &s.p.tv};
    for (int a = 0; a < 3; a++) {
        g[a] = tu_alloc((size_t)tu_count(tin[a]), NAN);
        tg[a] = *tin[a];
        tg[a].host = g[a];
    }
    TU_ASSERT_OK(backward(&s, &tg[0], &tg[1], &tg[2]), "reference backward (%s)", c->name);
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
    setup_free(&s);
}
END_TEST

START_TEST(masked_rows_and_keys)
{
    /* row 1 of every head sees no key (bool mask); keys 3..5 are masked for every row
     * and hold NaN and inf in K and V; entry's last row is padding (q_lens) */
    const config c = {"masked", 1, 2, 1, 4,    6,    4, 3, CLATTN_MASK_NONE, 0, 0,
                      0,        0, 0, 1, 0.0f, 0.0f, 0, 0};
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
    TU_ASSERT_OK(backward(&s, &tq, &tk, &tv), "reference backward with masked rows and keys");
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
    TU_ASSERT_OK(backward(&s, &tq, &tk2, &tv2), "reference backward, poisoned dO rows");
    ck_assert_msg(memcmp(dk, dk2, sizeof dk) == 0 && memcmp(dv, dv2, sizeof dv) == 0,
                  "dO of a row without keys (or a padding row) changed dK or dV");
    setup_free(&s);
}
END_TEST

START_TEST(storage_and_validation)
{
    const config c = {"storage", 1, 2, 2, 3,    5,    4, 3, CLATTN_MASK_CAUSAL_TOP_LEFT, 0, 0,
                      0,         0, 0, 0, 0.0f, 0.0f, 0, 0};
    setup s;
    setup_init(&s, &c, tu_seed() + 11u);
    float dq[24], dk[40], dv[30];
    clattn_tensor tq = clattn_tensor_host(dq, 1, 2, 3, 4), tk = clattn_tensor_host(dk, 1, 2, 5, 4),
                  tv = clattn_tensor_host(dv, 1, 2, 5, 3);
    TU_ASSERT_OK(backward(&s, &tq, &tk, &tv), "reference backward, float32");
    /* float16 and bfloat16 dQ: the float32 result rounded once (to nearest, ties even) */
    uint16_t h16[24];
    clattn_tensor t16 = clattn_tensor_host(h16, 1, 2, 3, 4);
    for (int dt = CLATTN_FLOAT16; dt <= CLATTN_BFLOAT16; dt++) {
        t16.dtype = (clattn_dtype)dt;
        TU_ASSERT_OK(backward(&s, &t16, &tk, &tv), "reference backward, 16-bit dQ");
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
    ck_assert_int_eq(backward(&s, &bad, &tk, &tv), CLATTN_ERROR_INVALID_SHAPE);
    ck_assert_msg(strstr(clattn_last_error_message(NULL), "dQ") != NULL, "message: %s",
                  clattn_last_error_message(NULL));
    clattn_tensor alias = clattn_tensor_host(dk, 1, 2, 3, 4); /* dQ over dK's memory */
    ck_assert_int_eq(backward(&s, &alias, &tk, &tv), CLATTN_ERROR_INVALID_LAYOUT);
    clattn_tensor over_q = s.p.tq; /* dQ over Q */
    ck_assert_int_eq(backward(&s, &over_q, &tk, &tv), CLATTN_ERROR_INVALID_LAYOUT);
    clattn_tensor c_k = clattn_tensor_host(canary, 1, 2, 5, 4);
    ck_assert_int_eq(clattn_reference_attention_backward(NULL, &s.p.tq, &s.p.tk, &s.p.tv, &s.t_do,
                                                         &tq, &c_k, &tv),
                     CLATTN_ERROR_INVALID_ARGUMENT);
    tu_assert_untouched("dK after failed calls", canary, 0, 40, 7.0f);
    setup_free(&s);
}
END_TEST

int main(void)
{
    tu_seed_init(20261130u);
    Suite *suite = suite_create("backward");
    TCase *tc = tcase_create("reference");
    tcase_set_timeout(tc, 300);
    tcase_add_loop_test(tc, finite_differences, 0, N_CONFIGS);
    tcase_add_test(tc, masked_rows_and_keys);
    tcase_add_test(tc, storage_and_validation);
    suite_add_tcase(suite, tc);
    return tu_run_suite(suite);
}
