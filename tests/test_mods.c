/* Score and mask snippets (desc.mods, clattn_mods.h; docs/SEMANTICS.md "Score and mask
 * snippets"). Each snippet has a C twin the float64 reference runs:
 *  - document masking: mask_mod over an int32 buffer of document ids per position (q_start
 *    and kv_start offsets, GQA 4:2), causal within each document;
 *  - a relative-position bias from a float32 table per head (score_mod with a buffer),
 *    on top of ALiBi, softcap and a bool mask (the documented order);
 *  - tanh softcap written as a score_mod, against the built-in softcap;
 * in both algorithms, the decode shape (n_q 1, GQA) and the prefill shape, with the LSE
 * and weights, the buffers as host arrays and as cl_mem (same bits), key weight sums,
 * and the backward pass with mask_mod (tolerances: 2e-5 absolute and relative for O and
 * LSE, 1e-4 for gradients). causal as a mask_mod gives the bits of the built-in causal
 * mask in the fused algorithm (masked tiles add exact zeros). A snippet that does not
 * compile gives CLATTN_ERROR_BUILD_FAILED naming its own line; every bad field its status.
 * Seed printed at start. */
#include "testutil.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <clattn.h>

enum { B = 2, HQ = 4, HK = 2, D = 16, NQ = 37, NK = 53, NK_DECODE = 300, POS = 400 };
static const int64_t Q_START = 16, KV_START = 0; /* queries sit at positions 16 … 52 */

/* ---- document masking: doc[pos] per position; causal within a document ---- */
static const char *DOC_MASK =
    "bool clattn_mask_mod(int b, int h, long q_pos, long k_pos, __global const int *doc)\n"
    "{\n"
    "    return doc[b * 400 + q_pos] == doc[b * 400 + k_pos] && k_pos <= q_pos;\n"
    "}\n";
static int doc_mask_c(int b, int h, int64_t qp, int64_t kp, const void *const *bufs, void *user)
{
    (void)h;
    (void)user;
    const int32_t *doc = bufs[0];
    return doc[b * POS + qp] == doc[b * POS + kp] && kp <= qp;
}

/* ---- relative-position bias from a table [HQ][33] (distance clamped to ±16) ---- */
static const char *REL_BIAS =
    "float clattn_score_mod(float s, int b, int h, long q_pos, long k_pos,\n"
    "                       __global const float *table)\n"
    "{\n"
    "    const long d = clamp(k_pos - q_pos, -16L, 16L);\n"
    "    return s + table[h * 33 + (d + 16)];\n"
    "}\n";
static double rel_bias_c(double s, int b, int h, int64_t qp, int64_t kp, const void *const *bufs,
                         void *user)
{
    (void)b;
    (void)user;
    const float *table = bufs[0];
    int64_t d = kp - qp;
    d = d < -16 ? -16 : d > 16 ? 16 : d;
    return s + (double)table[h * 33 + (d + 16)];
}

/* ---- tanh softcap 5 as a score_mod ---- */
static const char *SOFTCAP5 = "float clattn_score_mod(float s, int b, int h, long q, long k)\n"
                              "{\n"
                              "    return 5.0f * tanh(s / 5.0f);\n"
                              "}\n";
static double softcap5_c(double s, int b, int h, int64_t qp, int64_t kp, const void *const *bufs,
                         void *user)
{
    (void)b, (void)h, (void)qp, (void)kp, (void)bufs, (void)user;
    return 5.0 * tanh(s / 5.0);
}

static const char *CAUSAL = "bool clattn_mask_mod(int b, int h, long q_pos, long k_pos)\n"
                            "{\n"
                            "    return k_pos <= q_pos;\n"
                            "}\n";

static int32_t docs[B * POS];
static float table[HQ * 33];

static void fill_tables(void)
{
    for (int b = 0; b < B; b++) /* documents of 7 + 5b positions, the last one longer */
        for (int p = 0; p < POS; p++)
            docs[b * POS + p] = p / (7 + 5 * b);
    tu_fill_gen(table, HQ * 33, tu_seed() + 7u, 0.5f);
}

static const tu_tol TOL = {2e-5, 2e-5}, TOL_GRAD = {1e-4, 1e-4};

/* O (and LSE, weights where asked) of `alg` against the reference with the same desc */
static void check_against_reference(const tu_problem *p, clattn_attention_desc d,
                                    clattn_algorithm alg, bool weights, const char *what)
{
    const int64_t rows = p->b * p->h_q * p->n_q;
    float *lse = tu_alloc((size_t)rows, NAN), *lse_ref = tu_alloc((size_t)rows, NAN);
    float *w = weights ? tu_alloc((size_t)(rows * p->n_kv), NAN) : NULL;
    float *w_ref = NULL;
    clattn_tensor tl = clattn_tensor_host(lse, p->b, p->h_q, p->n_q, 1);
    clattn_tensor tw = clattn_tensor_host(w, p->b, p->h_q, p->n_q, p->n_kv);
    d.lse = &tl;
    d.weights = weights ? &tw : NULL;
    float *o = tu_run(p, &d, alg);
    clattn_tensor tlr = clattn_tensor_host(lse_ref, p->b, p->h_q, p->n_q, 1);
    d.lse = &tlr;
    d.weights = NULL;
    float *o_ref = tu_reference(p, &d, weights ? &w_ref : NULL);
    char name[160];
    clattn_tensor to = tu_problem_o(p, o);
    snprintf(name, sizeof name, "%s [%s] O", what, tu_algorithm_name(alg));
    TU_ASSERT_CLOSE(name, &to, NULL, o_ref, TOL);
    snprintf(name, sizeof name, "%s [%s] LSE", what, tu_algorithm_name(alg));
    TU_ASSERT_CLOSE(name, &tl, NULL, lse_ref, TOL);
    if (weights) {
        snprintf(name, sizeof name, "%s [%s] weights", what, tu_algorithm_name(alg));
        TU_ASSERT_CLOSE(name, &tw, NULL, w_ref, TOL);
    }
    free(o);
    free(o_ref);
    free(lse);
    free(lse_ref);
    free(w);
    free(w_ref);
}

START_TEST(document_mask_and_relative_bias)
{
    fill_tables();
    const clattn_mod_buffer doc_buf = {CLATTN_INT32, B * POS, docs, NULL};
    const clattn_mod_buffer tab_buf = {CLATTN_FLOAT32, HQ * 33, table, NULL};
    const clattn_mods doc = {NULL, DOC_MASK, &doc_buf, 1, NULL, doc_mask_c, NULL, NULL};
    const clattn_mods rel = {REL_BIAS, NULL, &tab_buf, 1, rel_bias_c, NULL, NULL, NULL};
    float slopes[HQ];
    for (int h = 0; h < HQ; h++)
        slopes[h] = 0.1f * (float)(h + 1);
    /* a bool mask hiding every 5th key of row 3 */
    uint8_t mask[NQ * NK];
    for (int i = 0; i < NQ * NK; i++)
        mask[i] = !(i / NK == 3 && (i % NK) % 5 == 0);
    clattn_tensor tm = clattn_tensor_host(mask, 1, 1, NQ, NK);
    tm.dtype = CLATTN_BOOL;
    /* prefill; decode (n_q 1, GQA) over more keys than a tile or a decode work-group */
    const int64_t shapes[2][2] = {{NQ, NK}, {1, NK_DECODE}};
    for (int sh = 0; sh < 2; sh++) {
        tu_problem p;
        tu_problem_init(&p, B, HQ, HK, shapes[sh][0], shapes[sh][1], D, D, tu_seed() + 1u,
                        tu_seed() + 2u, tu_seed() + 3u, 0);
        for (int m = 0; m < 2; m++) {
            clattn_attention_desc d = clattn_attention_desc_default();
            d.q_start = Q_START + (sh ? NQ - 1 : 0);
            d.kv_start = KV_START;
            d.mods = m == 0 ? &doc : &rel;
            if (m == 1) { /* every built-in term first, then the table's bias */
                d.alibi_slopes = slopes;
                d.softcap = 8.0f;
                d.mask_tensor = sh == 0 ? &tm : NULL;
            }
            for (int alg = CLATTN_ALGORITHM_UNFUSED; alg <= CLATTN_ALGORITHM_FUSED; alg++) {
                char what[96];
                snprintf(what, sizeof what, "%s, %s", m == 0 ? "document mask" : "relative bias",
                         sh ? "decode" : "prefill");
                check_against_reference(&p, d, (clattn_algorithm)alg, alg == 1, what);
            }
            if (sh == 1 && clattn_context_kernel_family(tu_ctx()) != CLATTN_KERNEL_FAMILY_GPU) {
                /* decode.cl with both KV heads per work-item: each head's terms */
                TU_ASSERT_OK(clattn_context_set_decode_heads(tu_ctx(), HK), "decode heads");
                check_against_reference(&p, d, CLATTN_ALGORITHM_FUSED, false,
                                        m == 0 ? "document mask, decode, 2 KV heads per item"
                                               : "relative bias, decode, 2 KV heads per item");
                TU_ASSERT_OK(clattn_context_set_decode_heads(tu_ctx(), 0), "decode heads 0");
            }
        }
        tu_problem_free(&p);
    }
}
END_TEST

/* The user buffers as cl_mem (the enqueue call) give the bits of host arrays. */
START_TEST(buffers_on_the_device)
{
    fill_tables();
    clattn_context *ctx = tu_ctx();
    cl_context cl;
    ck_assert_int_eq(clattn_context_get_cl(ctx, &cl, NULL, NULL), CLATTN_SUCCESS);
    cl_mem dm = tu_buffer(cl, docs, sizeof docs);
    const clattn_mod_buffer host_buf = {CLATTN_INT32, B * POS, docs, NULL};
    const clattn_mod_buffer dev_buf = {CLATTN_INT32, B * POS, NULL, dm};
    clattn_mods mods = {NULL, DOC_MASK, &host_buf, 1, NULL, doc_mask_c, NULL, NULL};
    tu_problem p;
    tu_problem_init(&p, B, HQ, HK, NQ, NK, D, D, tu_seed() + 4u, tu_seed() + 5u, tu_seed() + 6u, 0);
    clattn_attention_desc d = clattn_attention_desc_default();
    d.q_start = Q_START;
    d.mods = &mods;
    float *o_host = tu_run(&p, &d, CLATTN_ALGORITHM_FUSED);
    mods.buffers = &dev_buf;
    const int64_t n_o = B * HQ * NQ * D;
    float *o = tu_alloc((size_t)n_o, NAN);
    clattn_tensor to = tu_problem_o(&p, o);
    const size_t len[5] = {(size_t)(B * HQ * NQ * D), (size_t)(B * HK * NK * D),
                           (size_t)(B * HK * NK * D), (size_t)n_o, 0};
    d.algorithm = CLATTN_ALGORITHM_FUSED;
    TU_ASSERT_OK(tu_attention_via_buffers(ctx, &d, &p.tq, &p.tk, &p.tv, &to, len),
                 "enqueue with a cl_mem user buffer");
    tu_assert_same_bits(o, o_host, (size_t)n_o, "O, user buffer as cl_mem vs host array");
    /* the reference reads host arrays only */
    ck_assert_int_eq(clattn_reference_attention(&d, &p.tq, &p.tk, &p.tv, &to),
                     CLATTN_ERROR_UNSUPPORTED);
    ck_assert_ptr_nonnull(strstr(clattn_last_error_message(NULL), "host array"));
    clReleaseMemObject(dm);
    free(o);
    free(o_host);
    tu_problem_free(&p);
}
END_TEST

/* causal as a mask_mod: the built-in causal mask's bits (fused), and within tolerance of
 * it in the unfused algorithm; tanh softcap as a score_mod: the built-in softcap's values
 * (300 keys: whole tiles with no other term, the kernels' fast path) and, over ALiBi, the
 * reference's (absolute biases) */
START_TEST(snippets_equal_builtins)
{
    tu_problem p;
    tu_problem_init(&p, 1, HQ, HK, 70, 300, D, D, tu_seed() + 8u, tu_seed() + 9u, tu_seed() + 10u,
                    0);
    const clattn_mods causal = {NULL, CAUSAL, NULL, 0, NULL, NULL, NULL, NULL};
    const clattn_mods cap = {SOFTCAP5, NULL, NULL, 0, softcap5_c, NULL, NULL, NULL};
    clattn_attention_desc builtin = clattn_attention_desc_default(), mod = builtin;
    builtin.mask = CLATTN_MASK_CAUSAL_TOP_LEFT;
    mod.mods = &causal;
    const size_t n_o = (size_t)(HQ * 70 * D);
    for (int alg = CLATTN_ALGORITHM_UNFUSED; alg <= CLATTN_ALGORITHM_FUSED; alg++) {
        float *a = tu_run(&p, &builtin, (clattn_algorithm)alg);
        float *b = tu_run(&p, &mod, (clattn_algorithm)alg);
        if (alg == CLATTN_ALGORITHM_FUSED) {
            tu_assert_same_bits(b, a, n_o, "causal as mask_mod vs built-in causal (fused)");
        } else {
            clattn_tensor tb = tu_problem_o(&p, b);
            TU_ASSERT_CLOSE("causal as mask_mod vs built-in (unfused)", &tb, NULL, a, TOL);
        }
        free(a);
        free(b);
    }
    /* under ALiBi a score_mod sees the absolute bias: queries placed past the keys
     * (the built-in terms would take the bias relative to the nearest key) */
    float slopes[HQ];
    for (int h = 0; h < HQ; h++)
        slopes[h] = 0.05f * (float)(h + 1);
    float sinks[HQ] = {0.5f, -1.0f, 2.0f, 0.0f};
    const int32_t kv_len = 250; /* padding: the diagonal past the visible keys as well */
    mod = clattn_attention_desc_default();
    mod.mods = &cap;
    mod.alibi_slopes = slopes;
    mod.sinks = sinks;
    for (int q_start = 0; q_start <= 1000; q_start += 1000) { /* past every key at 1000 */
        mod.q_start = q_start;
        mod.kv_lens = q_start ? NULL : &kv_len;
        for (int alg = CLATTN_ALGORITHM_UNFUSED; alg <= CLATTN_ALGORITHM_FUSED; alg++)
            check_against_reference(&p, mod, (clattn_algorithm)alg, alg == 1,
                                    q_start ? "softcap as score_mod over absolute ALiBi, past the "
                                              "keys, sinks"
                                            : "softcap as score_mod over absolute ALiBi, padded "
                                              "keys, sinks");
    }
    builtin = clattn_attention_desc_default();
    builtin.softcap = 5.0f;
    mod = clattn_attention_desc_default();
    mod.mods = &cap;
    for (int alg = CLATTN_ALGORITHM_UNFUSED; alg <= CLATTN_ALGORITHM_FUSED; alg++) {
        float *a = tu_run(&p, &builtin, (clattn_algorithm)alg);
        float *b = tu_run(&p, &mod, (clattn_algorithm)alg);
        clattn_tensor tb = tu_problem_o(&p, b);
        TU_ASSERT_CLOSE("softcap as score_mod vs built-in softcap", &tb, NULL, a, TOL);
        free(a);
        free(b);
        check_against_reference(&p, mod, (clattn_algorithm)alg, false, "softcap as score_mod");
    }
    tu_problem_free(&p);
}
END_TEST

/* key weight sums and the backward pass (mask_mod) against the reference */
START_TEST(sums_and_backward)
{
    fill_tables();
    const clattn_mod_buffer doc_buf = {CLATTN_INT32, B * POS, docs, NULL};
    const clattn_mods doc = {NULL, DOC_MASK, &doc_buf, 1, NULL, doc_mask_c, NULL, NULL};
    tu_problem p;
    tu_problem_init(&p, B, HQ, HK, NQ, NK, D, D, tu_seed() + 11u, tu_seed() + 12u, tu_seed() + 13u,
                    0);
    clattn_context *ctx = tu_ctx();
    clattn_attention_desc d = clattn_attention_desc_default();
    d.q_start = Q_START;
    d.mods = &doc;
    /* key weight sums per query head = the reference weights summed over the rows */
    float *sums = tu_alloc(B * HQ * NK, NAN), *o = tu_alloc(B * HQ * NQ * D, NAN);
    clattn_tensor ts = clattn_tensor_host(sums, B, HQ, 1, NK), to = tu_problem_o(&p, o);
    d.key_weight_sums = &ts;
    TU_ASSERT_OK(clattn_attention(ctx, &d, &p.tq, &p.tk, &p.tv, &to), "key weight sums");
    d.key_weight_sums = NULL;
    float *w_ref = NULL;
    float *o_ref = tu_reference(&p, &d, &w_ref);
    double *want = calloc(B * HQ * NK, sizeof(double));
    for (int bh = 0; bh < B * HQ; bh++)
        for (int i = 0; i < NQ; i++)
            for (int j = 0; j < NK; j++)
                want[bh * NK + j] += w_ref[((size_t)bh * NQ + i) * NK + j];
    TU_ASSERT_CLOSE("key weight sums with a document mask", &ts, want, NULL, TOL_GRAD);
    /* backward: dQ, dK, dV against the reference backward */
    float *lse = tu_alloc(B * HQ * NQ, NAN), *dout = tu_alloc(B * HQ * NQ * D, 0);
    tu_fill_gen(dout, B * HQ * NQ * D, tu_seed() + 14u, 1.0f);
    clattn_tensor tl = clattn_tensor_host(lse, B, HQ, NQ, 1),
                  tdo = clattn_tensor_host(dout, B, HQ, NQ, D);
    d.lse = &tl;
    TU_ASSERT_OK(clattn_attention(ctx, &d, &p.tq, &p.tk, &p.tv, &to), "forward for backward");
    float *g[3], *gr[3];
    const int64_t n[3] = {B * HQ * NQ * D, B * HK * NK * D, B * HK * NK * D};
    clattn_tensor tg[3], tgr[3];
    for (int t = 0; t < 3; t++) {
        g[t] = tu_alloc((size_t)n[t], NAN);
        gr[t] = tu_alloc((size_t)n[t], NAN);
        const int64_t hh = t == 0 ? HQ : HK, nn = t == 0 ? NQ : NK;
        tg[t] = clattn_tensor_host(g[t], B, hh, nn, D);
        tgr[t] = clattn_tensor_host(gr[t], B, hh, nn, D);
    }
    TU_ASSERT_OK(clattn_attention_backward(ctx, &d, &p.tq, &p.tk, &p.tv, &to, &tl, &tdo, &tg[0],
                                           &tg[1], &tg[2]),
                 "backward with mask_mod");
    TU_ASSERT_OK(clattn_reference_attention_backward(&d, &p.tq, &p.tk, &p.tv, &tdo, &tgr[0],
                                                     &tgr[1], &tgr[2]),
                 "reference backward with mask_mod");
    const char *names[3] = {"dQ", "dK", "dV"};
    for (int t = 0; t < 3; t++) {
        TU_ASSERT_CLOSE(names[t], &tg[t], NULL, gr[t], TOL_GRAD);
        free(g[t]);
        free(gr[t]);
    }
    /* a score_mod has no gradient clattn can take */
    const clattn_mods cap = {SOFTCAP5, NULL, NULL, 0, softcap5_c, NULL, NULL, NULL};
    d.mods = &cap;
    ck_assert_int_eq(clattn_attention_backward(ctx, &d, &p.tq, &p.tk, &p.tv, &to, &tl, &tdo, &tg[0],
                                               &tg[1], &tg[2]),
                     CLATTN_ERROR_UNSUPPORTED);
    ck_assert_ptr_nonnull(strstr(clattn_last_error_message(ctx), "score_mod"));
    free(sums);
    free(o);
    free(o_ref);
    free(w_ref);
    free(want);
    free(lse);
    free(dout);
    tu_problem_free(&p);
}
END_TEST

/* A snippet's macros come after clattn's sources: they cannot change clattn's kernels
 * (names the kernels use, a function-like macro of a builtin). */
START_TEST(snippet_macros_stay_in_the_snippet)
{
    tu_problem p;
    tu_problem_init(&p, 1, HQ, HK, 20, 150, D, D, tu_seed() + 18u, tu_seed() + 19u, tu_seed() + 20u,
                    0);
    const clattn_mods cap = {"#define SOFTCAP 30\n#define TILE_KV 4\n#define D_K 64\n"
                             "#define ALIBI 1\n#define MASK_T 1\n#define clamp(x, a, b) x\n"
                             "float clattn_score_mod(float s, int b, int h, long q, long k)\n"
                             "{\n    return 5.0f * tanh(s / 5.0f);\n}\n",
                             NULL,
                             NULL,
                             0,
                             softcap5_c,
                             NULL,
                             NULL,
                             NULL};
    clattn_attention_desc d = clattn_attention_desc_default();
    d.mods = &cap;
    for (int alg = CLATTN_ALGORITHM_UNFUSED; alg <= CLATTN_ALGORITHM_FUSED; alg++)
        check_against_reference(&p, d, (clattn_algorithm)alg, false, "a snippet with #defines");
    /* a function given in the other field would never be called: refused */
    const clattn_mods misplaced = {"float clattn_score_mod(float s, int b, int h, long q, long k)\n"
                                   "{\n    return s;\n}\n"
                                   "bool clattn_mask_mod(int b, int h, long q, long k)\n"
                                   "{\n    return k <= q;\n}\n",
                                   NULL,
                                   NULL,
                                   0,
                                   NULL,
                                   NULL,
                                   NULL,
                                   NULL};
    d.mods = &misplaced;
    float *o = tu_alloc((size_t)(HQ * 20 * D), 0);
    clattn_tensor to = tu_problem_o(&p, o);
    ck_assert_int_eq(clattn_attention(tu_ctx(), &d, &p.tq, &p.tk, &p.tv, &to),
                     CLATTN_ERROR_INVALID_ARGUMENT);
    ck_assert_ptr_nonnull(strstr(clattn_last_error_message(tu_ctx()), "its own field"));
    free(o);
    tu_problem_free(&p);
}
END_TEST

/* Block masks: a document mask over 256 rows and keys (8 documents of 32, causal within
 * each) and causal as a mask_mod, each with its block mask built once: every output bit
 * as without it (skipped tiles add exact zeros; full tiles skip only the snippet), the
 * counts as the layout says, a block mask reused over calls and shared over heads; a mask
 * built for other sizes, positions or snippet is refused. */
static const char *DOC256 = "bool clattn_mask_mod(int b, int h, long q_pos, long k_pos)\n"
                            "{\n"
                            "    return q_pos / 32 == k_pos / 32 && k_pos <= q_pos;\n"
                            "}\n";

START_TEST(block_masks)
{
    clattn_context *ctx = tu_ctx();
    tu_problem p;
    tu_problem_init(&p, 2, HQ, HK, 256, 256, D, D, tu_seed() + 15u, tu_seed() + 16u,
                    tu_seed() + 17u, 0);
    const size_t n_o = (size_t)(2 * HQ * 256 * D);
    /* documents; causal; keys below 192 with the built-in no-self rule on top (a tile the
     * block mask calls full still needs the rule's terms: the diagonal lies in it) */
    const char *below192 = "bool clattn_mask_mod(int b, int h, long q_pos, long k_pos)\n"
                           "{\n"
                           "    return k_pos < 192;\n"
                           "}\n";
    const char *srcs[3] = {DOC256, CAUSAL, below192};
    const char *names[3] = {"documents", "causal", "keys below 192, no-self"};
    for (int s = 0; s < 3; s++) {
        clattn_mods mods = {NULL, srcs[s], NULL, 0, NULL, NULL, NULL, NULL};
        clattn_attention_desc d = clattn_attention_desc_default();
        d.mods = &mods;
        if (s == 2)
            d.mask = CLATTN_MASK_NO_SELF;
        float *plain = tu_run(&p, &d, CLATTN_ALGORITHM_FUSED);
        clattn_block_mask *bm = NULL;
        TU_ASSERT_OK(clattn_block_mask_create(ctx, &d, 1, 1, 256, 256, &bm), "block mask %d", s);
        int64_t c[3];
        TU_ASSERT_OK(clattn_block_mask_counts(bm, &c[0], &c[1], &c[2]), "counts");
        /* 16 × 16 blocks: doc: 8 documents of 2 × 2 blocks, each 1 full below 2 diagonal;
         * causal: 16 diagonal blocks mixed, 120 full below */
        const int64_t want[3][3] = {{256 - 24, 16, 8}, {120, 16, 120}, {64, 0, 192}};
        printf("block mask %s: %lld empty, %lld partial, %lld full\n", names[s], (long long)c[0],
               (long long)c[1], (long long)c[2]);
        for (int k = 0; k < 3; k++)
            ck_assert_int_eq(c[k], want[s][k]);
        mods.block_mask = bm;
        for (int rep = 0; rep < 2; rep++) { /* reused */
            float *o = tu_run(&p, &d, CLATTN_ALGORITHM_FUSED);
            tu_assert_same_bits(o, plain, n_o, "O with the block mask of %s (call %d)", names[s],
                                rep);
            free(o);
        }
        /* refused: other sizes, positions, snippet */
        float *o = tu_alloc(n_o, 7.0f);
        clattn_tensor to = tu_problem_o(&p, o);
        clattn_tensor q2 = p.tq;
        q2.shape[2] = 255;
        clattn_tensor o2 = to;
        o2.shape[2] = 255;
        ck_assert_int_eq(clattn_attention(ctx, &d, &q2, &p.tk, &p.tv, &o2),
                         CLATTN_ERROR_INVALID_ARGUMENT);
        ck_assert_ptr_nonnull(strstr(clattn_last_error_message(ctx), "another n_q or n_kv"));
        d.q_start = 1;
        ck_assert_int_eq(clattn_attention(ctx, &d, &p.tq, &p.tk, &p.tv, &to),
                         CLATTN_ERROR_INVALID_ARGUMENT);
        d.q_start = 0;
        mods.mask_mod = s == 0 ? CAUSAL : DOC256;
        ck_assert_int_eq(clattn_attention(ctx, &d, &p.tq, &p.tk, &p.tv, &to),
                         CLATTN_ERROR_INVALID_ARGUMENT);
        ck_assert_ptr_nonnull(strstr(clattn_last_error_message(ctx), "another mask_mod"));
        tu_assert_untouched("O after refused block masks", o, 0, n_o, 7.0f);
        clattn_block_mask_release(bm);
        free(o);
        free(plain);
    }
    /* a decode step (n_q 1) whose window starts off a 16-key boundary: the decode kernels
     * (split-KV in the GPU family) read the flags only of whole blocks */
    {
        tu_problem p1;
        tu_problem_init(&p1, 2, HQ, HK, 1, 256, D, D, tu_seed() + 21u, tu_seed() + 22u,
                        tu_seed() + 23u, 0);
        clattn_mods mods = {NULL, DOC256, NULL, 0, NULL, NULL, NULL, NULL};
        clattn_attention_desc d = clattn_attention_desc_default();
        d.mods = &mods;
        d.q_start = 250;
        d.window = 1;
        d.window_left = 27;
        d.window_right = 0;
        float *plain = tu_run(&p1, &d, CLATTN_ALGORITHM_FUSED);
        clattn_block_mask *bm = NULL;
        TU_ASSERT_OK(clattn_block_mask_create(ctx, &d, 1, 1, 1, 256, &bm), "decode block mask");
        mods.block_mask = bm;
        float *o = tu_run(&p1, &d, CLATTN_ALGORITHM_FUSED);
        tu_assert_same_bits(o, plain, (size_t)(2 * HQ * D), "O of a decode step with a block mask");
        clattn_block_mask_release(bm);
        free(o);
        free(plain);
        tu_problem_free(&p1);
    }
    /* built per batch entry and head (b and h in the snippet): whole tiles of 128 keys
     * empty for some (b, h), and every other block mixed (no tile is full) */
    const char *per_bh = "bool clattn_mask_mod(int b, int h, long q, long k)\n"
                         "{\n"
                         "    return (k / 128 + b + h) % 2 == 0 && (q + k) % 7 != 0;\n"
                         "}\n";
    clattn_mods mods = {NULL, per_bh, NULL, 0, NULL, NULL, NULL, NULL};
    clattn_attention_desc d = clattn_attention_desc_default();
    d.mods = &mods;
    float *plain = tu_run(&p, &d, CLATTN_ALGORITHM_FUSED);
    clattn_block_mask *bm = NULL;
    TU_ASSERT_OK(clattn_block_mask_create(ctx, &d, 2, HQ, 256, 256, &bm), "per (b, h)");
    mods.block_mask = bm;
    float *o = tu_run(&p, &d, CLATTN_ALGORITHM_FUSED);
    tu_assert_same_bits(o, plain, n_o, "O with a block mask per batch entry and head");
    clattn_block_mask *none = NULL;
    ck_assert_int_eq(clattn_block_mask_create(ctx, &d, 0, 1, 4, 4, &none),
                     CLATTN_ERROR_INVALID_SHAPE);
    ck_assert_ptr_null(none);
    ck_assert_int_eq(clattn_block_mask_create(ctx, &d, 1, 1, 1, INT64_MAX, &none),
                     CLATTN_ERROR_INVALID_SHAPE); /* (its block count would overflow) */
    ck_assert_ptr_null(none);
    clattn_block_mask_release(bm);
    free(o);
    free(plain);
    tu_problem_free(&p);
}
END_TEST

/* A snippet that does not compile: BUILD_FAILED, the log naming the snippet's line; then
 * the context still computes. */
START_TEST(build_error_names_the_snippet_line)
{
    clattn_context *ctx = tu_ctx();
    const clattn_mods bad = {NULL,
                             "bool clattn_mask_mod(int b, int h, long q, long k)\n"
                             "{\n"
                             "    return q >= k +* ;\n"
                             "}\n",
                             NULL,
                             0,
                             NULL,
                             NULL,
                             NULL,
                             NULL};
    tu_problem p;
    tu_problem_init(&p, 1, 2, 2, 5, 7, 8, 8, 1u, 2u, 3u, 0);
    float o[2 * 5 * 8];
    clattn_tensor to = tu_problem_o(&p, o);
    clattn_attention_desc d = clattn_attention_desc_default();
    d.mods = &bad;
    ck_assert_int_eq(clattn_attention(ctx, &d, &p.tq, &p.tk, &p.tv, &to),
                     CLATTN_ERROR_BUILD_FAILED);
    const char *msg = clattn_last_error_message(ctx);
    ck_assert_msg(strstr(msg, "mask_mod:3:") != NULL, "the log does not name mask_mod:3: %.600s",
                  msg);
    /* the prototypes clattn declares: a definition of other types (or writing a buffer)
     * does not compile, and the log names the snippet's line */
    int32_t ids[7] = {0};
    const clattn_mod_buffer fbuf = {CLATTN_FLOAT32, 7, ids, NULL};
    const char *wrong[3] = {
        "float clattn_score_mod(float s, int b, int h, long q, long k, __global const int *t)\n"
        "{\n    return s + t[k];\n}\n",
        "float clattn_score_mod(float s, int b, int h, long q, long k, __global float *t)\n"
        "{\n    t[k] = 1.0f;\n    return s;\n}\n",
        "int clattn_score_mod(float s, int b, int h, long q, long k, __global const float *t)\n"
        "{\n    return 1;\n}\n"};
    for (int w = 0; w < 3; w++) {
        const clattn_mods typed = {wrong[w], NULL, &fbuf, 1, NULL, NULL, NULL, NULL};
        d.mods = &typed;
        ck_assert_int_eq(clattn_attention(ctx, &d, &p.tq, &p.tk, &p.tv, &to),
                         CLATTN_ERROR_BUILD_FAILED);
        msg = clattn_last_error_message(ctx);
        ck_assert_msg(strstr(msg, "score_mod:1:") != NULL, "wrong types %d: %.600s", w, msg);
    }
    d.mods = NULL;
    TU_ASSERT_OK(clattn_attention(ctx, &d, &p.tq, &p.tk, &p.tv, &to), "after a failed build");
    tu_problem_free(&p);
}
END_TEST

START_TEST(statuses)
{
    clattn_context *ctx = tu_ctx();
    tu_problem p;
    tu_problem_init(&p, 1, 2, 2, 5, 7, 8, 8, 1u, 2u, 3u, 0);
    float o[2 * 5 * 8];
    clattn_tensor to = tu_problem_o(&p, o);
    int32_t ids[7] = {0};
    const clattn_mod_buffer ok = {CLATTN_INT32, 7, ids, NULL};
    clattn_mod_buffer bad = ok;
    clattn_mods m = {NULL, CAUSAL, &ok, 1, NULL, NULL, NULL, NULL};
    clattn_attention_desc d = clattn_attention_desc_default();
    d.mods = &m;
    struct {
        const char *what;
        int field; /* 0 none, 1 n_buffers, 2 dtype, 3 count, 4 both storages, 5 no snippet, 6
                      empty snippet, 7 small cl_mem */
        clattn_status want;
        const char *in_message;
    } cases[] = {
        {"n_buffers 9", 1, CLATTN_ERROR_INVALID_ARGUMENT, "n_buffers 9"},
        {"dtype bool", 2, CLATTN_ERROR_INVALID_ARGUMENT, "CLATTN_INT32 or CLATTN_FLOAT32"},
        {"count 0", 3, CLATTN_ERROR_INVALID_ARGUMENT, "count 0"},
        {"host and buffer", 4, CLATTN_ERROR_INVALID_ARGUMENT, "exactly one of host and buffer"},
        {"no snippet", 5, CLATTN_ERROR_INVALID_ARGUMENT, "neither score_mod nor mask_mod"},
        {"empty snippet", 6, CLATTN_ERROR_INVALID_ARGUMENT, "empty string"},
        {"small cl_mem", 7, CLATTN_ERROR_BUFFER_TOO_SMALL, "mods.buffers[0]"},
    };
    cl_context cl;
    ck_assert_int_eq(clattn_context_get_cl(ctx, &cl, NULL, NULL), CLATTN_SUCCESS);
    cl_mem small = tu_buffer(cl, ids, 6 * sizeof(int32_t));
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        m = (clattn_mods){NULL, CAUSAL, &bad, 1, NULL, NULL, NULL, NULL};
        bad = ok;
        switch (cases[c].field) {
        case 1: m.n_buffers = 9; break;
        case 2: bad.dtype = CLATTN_BOOL; break;
        case 3: bad.count = 0; break;
        case 4: bad.buffer = small; break;
        case 5: m.mask_mod = NULL; break;
        case 6: m.mask_mod = ""; break;
        case 7:
            bad.host = NULL;
            bad.buffer = small;
            break;
        default: break;
        }
        tu_fill_value(o, 2 * 5 * 8, 7.0f);
        ck_assert_int_eq(clattn_attention(ctx, &d, &p.tq, &p.tk, &p.tv, &to), cases[c].want);
        ck_assert_msg(strstr(clattn_last_error_message(ctx), cases[c].in_message) != NULL,
                      "%s: message \"%s\"", cases[c].what, clattn_last_error_message(ctx));
        tu_assert_untouched(cases[c].what, o, 0, 2 * 5 * 8, 7.0f);
    }
    clReleaseMemObject(small);
    /* the reference without a C twin; varlen, the several-device layer */
    m = (clattn_mods){NULL, CAUSAL, NULL, 0, NULL, NULL, NULL, NULL};
    ck_assert_int_eq(clattn_reference_attention(&d, &p.tq, &p.tk, &p.tv, &to),
                     CLATTN_ERROR_UNSUPPORTED);
    ck_assert_ptr_nonnull(strstr(clattn_last_error_message(NULL), "mask_mod_host"));
    const int32_t cu[2] = {0, 5}, cuk[2] = {0, 7};
    clattn_varlen vl = {0};
    vl.cu_seqlens_q = cu;
    vl.cu_seqlens_k = cuk;
    vl.batch = 1;
    d.varlen = &vl;
    ck_assert_int_eq(clattn_attention(ctx, &d, &p.tq, &p.tk, &p.tv, &to), CLATTN_ERROR_UNSUPPORTED);
    ck_assert_ptr_nonnull(strstr(clattn_last_error_message(ctx), "mods"));
    tu_problem_free(&p);
}
END_TEST

int main(void)
{
    printf("test_mods: seed %u\n", tu_seed_init(20261201u));
    Suite *s = suite_create("mods");
    TCase *tc = tcase_create("mods");
    tcase_set_timeout(tc, 600);
    tcase_add_test(tc, document_mask_and_relative_bias);
    tcase_add_test(tc, buffers_on_the_device);
    tcase_add_test(tc, snippets_equal_builtins);
    tcase_add_test(tc, sums_and_backward);
    tcase_add_test(tc, snippet_macros_stay_in_the_snippet);
    tcase_add_test(tc, block_masks);
    tcase_add_test(tc, build_error_names_the_snippet_line);
    tcase_add_test(tc, statuses);
    suite_add_tcase(s, tc);
    return tu_run_suite(s);
}
