/* Dropout (clattn_attention_desc.dropout_p; the backward pass with dropout is in
 * test_backward.c, every configuration again with dropout).
 *
 *  - philox_known_answers: the host generator against Random123's published
 *    known-answer vectors of Philox4x32-10 (its kat_vectors file), bit for bit.
 *  - mask_statistics: clattn_dropout_mask's kept fraction within 5 standard deviations
 *    of 1 − p for p 0.1, 0.5, 0.9 over 2·3·64·100 weights; another offset or seed gives
 *    another mask; p 0 keeps everything; keys j and j + 1 (words of one Philox block)
 *    and rows i and i + 1 agree as often as independent bits do.
 *  - device_against_reference: O, the weights and the LSE of the device (fused, unfused,
 *    and the tiled kernel where n_q would take the decode kernel) against the float64
 *    reference with the same mask, within 1e-5 + 1e-5·|x|, over masks, GQA, ALiBi,
 *    softcap, sinks, lengths and float16 storage; the weights' zeros are where
 *    clattn_dropout_mask drops a visible key; the LSE is the LSE without dropout.
 *  - validation: out-of-range p and offsets, and the calls that take no dropout (varlen,
 *    the public stages), give their statuses and leave O untouched.
 *
 * Seeds: printed; CLATTN_TEST_SEED overrides the base seed. */
#include "testutil.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* host/dropout.c (internal; the static library exports it to the tests) */
void clattn_philox4x32_10(const uint32_t ctr[4], const uint32_t key[2], uint32_t out[4]);

START_TEST(philox_known_answers)
{
    static const uint32_t kat[3][10] = {
        {0, 0, 0, 0, 0, 0, 0x6627e8d5u, 0xe169c58du, 0xbc57ac4cu, 0x9b00dbd8u},
        {0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu, 0x408f276du,
         0x41c83b0eu, 0xa20bc7c6u, 0x6d5451fdu},
        {0x243f6a88u, 0x85a308d3u, 0x13198a2eu, 0x03707344u, 0xa4093822u, 0x299f31d0u, 0xd16cfe09u,
         0x94fdccebu, 0x5001e420u, 0x24126ea1u},
    };
    for (int t = 0; t < 3; t++) {
        uint32_t out[4];
        clattn_philox4x32_10(kat[t], kat[t] + 4, out);
        for (int w = 0; w < 4; w++)
            ck_assert_msg(out[w] == kat[t][6 + w],
                          "Philox4x32-10 vector %d word %d: %08x, want %08x", t, w, out[w],
                          kat[t][6 + w]);
    }
}
END_TEST

#define MB 2
#define MH 3
#define MQ 64
#define MK 100
#define M_N ((size_t)MB * MH * MQ * MK)

static double kept_fraction(const uint8_t *m, size_t n)
{
    size_t kept = 0;
    for (size_t e = 0; e < n; e++) {
        ck_assert_msg(m[e] <= 1, "mask[%zu] = %u (not 0 or 1)", e, m[e]);
        kept += m[e];
    }
    return (double)kept / (double)n;
}

static double agreement(const uint8_t *a, const uint8_t *b, size_t n, size_t stride)
{
    size_t same = 0, count = 0;
    for (size_t e = 0; e + stride < n; e++, count++)
        same += a[e] == b[e + stride];
    return (double)same / (double)count;
}

START_TEST(mask_statistics)
{
    uint8_t *m = malloc(M_N), *m2 = malloc(M_N);
    clattn_attention_desc d = clattn_attention_desc_default();
    d.dropout_seed = 0xfeedface12345678ull + tu_seed();
    d.dropout_offset = 3;
    printf("dropout mask statistics: seed %llu\n", (unsigned long long)d.dropout_seed);
    const float ps[3] = {0.1f, 0.5f, 0.9f};
    for (int t = 0; t < 3; t++) {
        d.dropout_p = ps[t];
        TU_ASSERT_OK(clattn_dropout_mask(&d, MB, MH, MQ, MK, m), "clattn_dropout_mask p %g",
                     (double)ps[t]);
        const double keep = 1.0 - (double)ps[t], f = kept_fraction(m, M_N);
        const double sd = sqrt(keep * (1.0 - keep) / (double)M_N);
        ck_assert_msg(fabs(f - keep) < 5.0 * sd, "p %g: kept fraction %.5f, expected %.5f ± %.5f",
                      (double)ps[t], f, keep, 5.0 * sd);
        /* neighbours (words of one block: key j + 1; the next counter word: row i + 1)
         * agree with probability keep² + (1 − keep)², as independent bits */
        const double ind = keep * keep + (1.0 - keep) * (1.0 - keep);
        const double sd2 = sqrt(ind * (1.0 - ind) / (double)M_N);
        const size_t strides[2] = {1, MK};
        for (int s = 0; s < 2; s++) {
            const double a = agreement(m, m, M_N, strides[s]);
            ck_assert_msg(fabs(a - ind) < 6.0 * sd2,
                          "p %g: neighbours %zu apart agree %.5f of the time, independent bits "
                          "%.5f ± %.5f",
                          (double)ps[t], strides[s], a, ind, 6.0 * sd2);
        }
    }
    /* another offset, another seed: other masks (agreement as independent bits) */
    d.dropout_p = 0.5f;
    TU_ASSERT_OK(clattn_dropout_mask(&d, MB, MH, MQ, MK, m), "mask");
    clattn_attention_desc d2 = d;
    d2.dropout_offset = 4;
    TU_ASSERT_OK(clattn_dropout_mask(&d2, MB, MH, MQ, MK, m2), "mask, offset 4");
    ck_assert_msg(fabs(agreement(m, m2, M_N, 0) - 0.5) < 0.02, "offsets 3 and 4 agree %.4f",
                  agreement(m, m2, M_N, 0));
    d2 = d;
    d2.dropout_seed ^= 1ull << 40;
    TU_ASSERT_OK(clattn_dropout_mask(&d2, MB, MH, MQ, MK, m2), "mask, other seed");
    ck_assert_msg(fabs(agreement(m, m2, M_N, 0) - 0.5) < 0.02, "seeds agree %.4f",
                  agreement(m, m2, M_N, 0));
    d2.dropout_p = 0.0f;
    TU_ASSERT_OK(clattn_dropout_mask(&d2, MB, MH, MQ, MK, m2), "mask, p 0");
    ck_assert_msg(kept_fraction(m2, M_N) == 1.0, "p 0 dropped something");
    free(m);
    free(m2);
}
END_TEST

/* ---- the device against the reference ---------------------------------------------- */

typedef struct config {
    const char *name;
    int64_t b, h_q, h_kv, n_q, n_kv, d_k, d_v;
    clattn_mask mask;
    int alibi, softcap, sinks, lens, f16, window;
    float p;
} config;

/* name, b, h_q, h_kv, n_q, n_kv, d_k, d_v, mask, alibi, softcap, sinks, lens, f16, window
 * (left 21, right 3: rows whose first visible key is past 0), p */
// clang-format off
static const config CONFIGS[] = {
    {"plain", 1, 2, 2, 37, 53, 64, 64, CLATTN_MASK_NONE, 0, 0, 0, 0, 0, 0, 0.2f},
    {"gqa_causal_lengths_sinks", 2, 4, 2, 33, 70, 40, 24, CLATTN_MASK_CAUSAL_BOTTOM_RIGHT, 0, 0, 1, 1, 0, 0, 0.5f},
    {"alibi_softcap_no_self_window", 1, 3, 1, 29, 45, 17, 33, CLATTN_MASK_NO_SELF, 1, 1, 0, 0, 0, 1, 0.1f},
    {"decode_shape_f16", 2, 8, 2, 3, 200, 64, 64, CLATTN_MASK_CAUSAL_BOTTOM_RIGHT, 0, 0, 1, 0, 1, 0, 0.3f},
    {"high_p_window", 1, 2, 1, 20, 48, 16, 16, CLATTN_MASK_CAUSAL_TOP_LEFT, 0, 0, 0, 0, 0, 1, 0.9f},
};
// clang-format on
#define N_CONFIGS ((int)(sizeof CONFIGS / sizeof CONFIGS[0]))

/* float32 data as float16 in place (the reference reads the same halves) */
static clattn_tensor as_f16(clattn_tensor t, float *data)
{
    const size_t n = (size_t)tu_count(&t);
    uint16_t *h = (uint16_t *)data;
    for (size_t e = 0; e < n; e++)
        h[e] = clattn_f32_to_f16(data[e]);
    t.dtype = CLATTN_FLOAT16;
    return t;
}

START_TEST(device_against_reference)
{
    const config *c = &CONFIGS[_i / 2];
    const clattn_algorithm alg = tu_algorithms[_i % 2];
    const uint32_t seed = tu_seed() + 37u * (uint32_t)_i;
    printf("dropout %s (%s): seed %u, p %g\n", c->name, tu_algorithm_name(alg), seed, (double)c->p);
    tu_problem p;
    tu_problem_init(&p, c->b, c->h_q, c->h_kv, c->n_q, c->n_kv, c->d_k, c->d_v, seed, seed + 1,
                    seed + 2, 0);
    if (c->f16) {
        p.tq = as_f16(p.tq, p.q);
        p.tk = as_f16(p.tk, p.k);
        p.tv = as_f16(p.tv, p.v);
    }
    clattn_attention_desc d = clattn_attention_desc_default();
    d.mask = c->mask;
    d.algorithm = alg;
    d.dropout_p = c->p;
    d.dropout_seed = 0x9e3779b97f4a7c15ull * (seed + 1u);
    d.dropout_offset = seed % 1000u;
    float slopes[8], sinks[8];
    int32_t kv_lens[2] = {(int32_t)c->n_kv - 9, (int32_t)c->n_kv},
            q_lens[2] = {(int32_t)c->n_q, (int32_t)c->n_q - 2};
    for (int h = 0; h < 8; h++) {
        slopes[h] = 0.25f / (float)(h + 1);
        sinks[h] = h == 1 ? -INFINITY : 0.3f * (float)h - 0.5f;
    }
    if (c->alibi)
        d.alibi_slopes = slopes;
    if (c->softcap)
        d.softcap = 2.0f;
    if (c->sinks)
        d.sinks = sinks;
    if (c->window) {
        d.window = 1;
        d.window_left = 21;
        d.window_right = 3;
    }
    if (c->lens) {
        d.kv_lens = kv_lens;
        d.q_lens = q_lens;
    }
    const size_t n_o = (size_t)(c->b * c->h_q * c->n_q * c->d_v);
    const size_t n_w = (size_t)(c->b * c->h_q * c->n_q * c->n_kv), n_l = n_w / (size_t)c->n_kv;
    float *o = tu_alloc(n_o, 12345.0f), *w = tu_alloc(n_w, 12345.0f), *lse = tu_alloc(n_l, 0.0f);
    float *ro = tu_alloc(n_o, NAN), *rw = tu_alloc(n_w, NAN), *rl = tu_alloc(n_l, NAN);
    clattn_tensor to = tu_problem_o(&p, o),
                  tw = clattn_tensor_host(w, c->b, c->h_q, c->n_q, c->n_kv);
    clattn_tensor tl = clattn_tensor_host(lse, c->b, c->h_q, c->n_q, 1);
    clattn_tensor tro = tu_problem_o(&p, ro),
                  trw = clattn_tensor_host(rw, c->b, c->h_q, c->n_q, c->n_kv),
                  trl = clattn_tensor_host(rl, c->b, c->h_q, c->n_q, 1);
    /* O alone first (the fused kernel without the weights pass, or the decode shape's
     * tiled kernel), then with the weights and LSE */
    TU_ASSERT_OK(clattn_attention(tu_ctx(), &d, &p.tq, &p.tk, &p.tv, &to), "%s: O", c->name);
    clattn_attention_desc dr = d;
    dr.weights = &trw;
    dr.lse = &trl;
    TU_ASSERT_OK(clattn_reference_attention(&dr, &p.tq, &p.tk, &p.tv, &tro), "%s: reference",
                 c->name);
    char what[160];
    snprintf(what, sizeof what, "%s %s (seed %u) O", c->name, tu_algorithm_name(alg), seed);
    TU_ASSERT_CLOSE(what, &to, NULL, ro, TU_TOL_DEFAULT);
    clattn_attention_desc dw = d;
    dw.weights = &tw;
    dw.lse = &tl;
    tu_fill_value(o, n_o, 12345.0f);
    TU_ASSERT_OK(clattn_attention(tu_ctx(), &dw, &p.tq, &p.tk, &p.tv, &to), "%s: O, weights, LSE",
                 c->name);
    TU_ASSERT_CLOSE(what, &to, NULL, ro, TU_TOL_DEFAULT);
    snprintf(what, sizeof what, "%s %s (seed %u) weights", c->name, tu_algorithm_name(alg), seed);
    TU_ASSERT_CLOSE(what, &tw, NULL, rw, TU_TOL_DEFAULT);
    /* the LSE is the one without dropout */
    clattn_attention_desc d0 = dr;
    d0.dropout_p = 0.0f;
    float *rl0 = tu_alloc(n_l, NAN);
    clattn_tensor trl0 = clattn_tensor_host(rl0, c->b, c->h_q, c->n_q, 1);
    d0.lse = &trl0;
    TU_ASSERT_OK(clattn_reference_attention(&d0, &p.tq, &p.tk, &p.tv, &tro),
                 "reference, no dropout");
    snprintf(what, sizeof what, "%s %s (seed %u) LSE", c->name, tu_algorithm_name(alg), seed);
    TU_ASSERT_CLOSE(what, &tl, NULL, rl0, TU_TOL_DEFAULT);
    /* the weights' zeros: where the mask drops a weight that is not 0 without dropout */
    uint8_t *keep = malloc(n_w);
    TU_ASSERT_OK(clattn_dropout_mask(&d, c->b, c->h_q, c->n_q, c->n_kv, keep), "mask");
    size_t dropped = 0, visible = 0;
    float *rw0 = tu_alloc(n_w, NAN);
    clattn_tensor trw0 = clattn_tensor_host(rw0, c->b, c->h_q, c->n_q, c->n_kv);
    d0.weights = &trw0;
    TU_ASSERT_OK(clattn_reference_attention(&d0, &p.tq, &p.tk, &p.tv, &tro), "reference weights");
    for (size_t e = 0; e < n_w; e++) {
        if (rw0[e] == 0.0f)
            continue;
        visible++;
        dropped += !keep[e];
        ck_assert_msg((w[e] == 0.0f) == !keep[e],
                      "%s: weight %zu is %g, its mask bit %u (weight without dropout %g)", c->name,
                      e, (double)w[e], keep[e], (double)rw0[e]);
    }
    printf("  %zu of %zu visible weights dropped (%.3f; p %g)\n", dropped, visible,
           visible ? (double)dropped / (double)visible : 0.0, (double)c->p);
    free(keep);
    free(rw0);
    free(rl0);
    free(o);
    free(w);
    free(lse);
    free(ro);
    free(rw);
    free(rl);
    tu_problem_free(&p);
}
END_TEST

START_TEST(validation)
{
    tu_problem p;
    tu_problem_init(&p, 1, 2, 2, 5, 7, 4, 4, 1u, 2u, 3u, 0);
    float *o = tu_alloc(40, -3.0f);
    clattn_tensor to = tu_problem_o(&p, o);
    const float bad_p[5] = {-0.1f, 1.0f, 1.5f, NAN, INFINITY};
    for (int t = 0; t < 5; t++) {
        clattn_attention_desc d = clattn_attention_desc_default();
        d.dropout_p = bad_p[t];
        ck_assert_int_eq(clattn_attention(tu_ctx(), &d, &p.tq, &p.tk, &p.tv, &to),
                         CLATTN_ERROR_INVALID_ARGUMENT);
        ck_assert_msg(strstr(clattn_last_error_message(tu_ctx()), "dropout_p"), "message: %s",
                      clattn_last_error_message(tu_ctx()));
        ck_assert_int_eq(clattn_reference_attention(&d, &p.tq, &p.tk, &p.tv, &to),
                         CLATTN_ERROR_INVALID_ARGUMENT);
    }
    clattn_attention_desc d = clattn_attention_desc_default();
    d.dropout_p = 0.5f;
    d.dropout_offset = 1ull << 32;
    ck_assert_int_eq(clattn_attention(tu_ctx(), &d, &p.tq, &p.tk, &p.tv, &to),
                     CLATTN_ERROR_INVALID_ARGUMENT);
    ck_assert_msg(strstr(clattn_last_error_message(tu_ctx()), "dropout_offset"), "message: %s",
                  clattn_last_error_message(tu_ctx()));
    uint8_t m[4];
    ck_assert_int_eq(clattn_dropout_mask(&d, 1, 1, 1, 4, m), CLATTN_ERROR_INVALID_ARGUMENT);
    d.dropout_offset = 0;
    ck_assert_int_eq(clattn_dropout_mask(NULL, 1, 1, 1, 4, m), CLATTN_ERROR_INVALID_ARGUMENT);
    ck_assert_int_eq(clattn_dropout_mask(&d, 1, 1, 1, 4, NULL), CLATTN_ERROR_INVALID_ARGUMENT);
    ck_assert_int_eq(clattn_dropout_mask(&d, 1, -1, 1, 4, m), CLATTN_ERROR_INVALID_ARGUMENT);
    ck_assert_int_eq(clattn_dropout_mask(&d, 1, 1, (int64_t)1 << 33, 4, m),
                     CLATTN_ERROR_UNSUPPORTED);
    /* batch x h_q past 2^32, also where the product overflows int64 (nothing written) */
    const int64_t big[3][2] = {
        {(int64_t)1 << 62, 4}, {(int64_t)1 << 32, (int64_t)1 << 32}, {((int64_t)1 << 32) + 1, 1}};
    for (int t = 0; t < 3; t++) {
        memset(m, 7, sizeof m);
        ck_assert_int_eq(clattn_dropout_mask(&d, big[t][0], big[t][1], 1, 1, m),
                         CLATTN_ERROR_UNSUPPORTED);
        ck_assert_msg(m[0] == 7, "mask written by a refused call");
    }
    /* varlen and the public stages draw no dropout */
    int32_t cu[2] = {0, 5}, cuk[2] = {0, 7};
    clattn_varlen vl;
    memset(&vl, 0, sizeof vl);
    vl.cu_seqlens_q = cu;
    vl.cu_seqlens_k = cuk;
    vl.batch = 1;
    d.varlen = &vl;
    ck_assert_int_eq(clattn_attention(tu_ctx(), &d, &p.tq, &p.tk, &p.tv, &to),
                     CLATTN_ERROR_UNSUPPORTED);
    ck_assert_msg(strstr(clattn_last_error_message(tu_ctx()), "dropout"), "message: %s",
                  clattn_last_error_message(tu_ctx()));
    d.varlen = NULL;
    float *s = tu_alloc(70, 0.0f);
    clattn_tensor ts = clattn_tensor_host(s, 1, 2, 5, 7);
    ck_assert_int_eq(clattn_scores(tu_ctx(), &d, &p.tq, &p.tk, &ts), CLATTN_ERROR_UNSUPPORTED);
    tu_assert_untouched("O after refused calls", o, 0, 40, -3.0f);
    free(s);
    free(o);
    tu_problem_free(&p);
}
END_TEST

int main(void)
{
    tu_seed_init(20261201u);
    Suite *suite = suite_create("dropout");
    TCase *tc = tcase_create("host");
    tcase_add_test(tc, philox_known_answers);
    tcase_add_test(tc, mask_statistics);
    tcase_add_test(tc, validation);
    suite_add_tcase(suite, tc);
    /* device: two configurations, both algorithms (the README's suite); device_more the
     * rest (windows, f16 at a decode shape, p 0.9: test_dropout_more, CI's slow pass) */
    tc = tcase_create("device");
    tcase_set_timeout(tc, 600);
    tcase_add_loop_test(tc, device_against_reference, 0, 4);
    suite_add_tcase(suite, tc);
    tc = tcase_create("device_more");
    tcase_set_tags(tc, "slow");
    tcase_set_timeout(tc, 600);
    tcase_add_loop_test(tc, device_against_reference, 4, 2 * N_CONFIGS);
    suite_add_tcase(suite, tc);
    return tu_run_suite(suite);
}
