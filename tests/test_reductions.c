/* Key weight sums (desc.key_weight_sums; cl/key_sums.cl, host/reductions.c): each key's
 * total attention weight over the query rows, per query head or summed over each KV
 * head's query heads, from the fused path. Against the float64 reference (which sums its
 * own weights) within 2e-5 + 2e-5·|x| (sums of up to 148 weights in float32; a failure
 * names the worst element), and against the device's own weights output summed in
 * float64 (the same quantity by the other path), over:
 *  - GQA 4:2 per query head with no-self (d_k 22: a dot-product tail); GQA 4:2 summed
 *    per KV head with ALiBi, a window, softcap, sinks, a float
 *    mask and q_lens / kv_lens (padding rows and keys past the lengths: 0); a decode shape
 *    (n_q 1: the decode kernels) with sinks; the caller's LSE in float64 (written by
 *    key_sums.cl, against the reference's); no query row (zeros); scores in the hundreds
 *    (Q and K times 60: s − m must stay exact);
 *  - the enqueue call on buffers: the same bits; a rerun: the same bits; paged K/V
 *    (pages swapped through the block table): the contiguous call's bits;
 *  - every status (weights, dropout, UNFUSED, int8 K, varlen, an append, d_k 0, shapes,
 *    dtype, overlap with O).
 * In the context's kernel family (CI's GPU-family step on Intel's runtime forces the GPU family).
 * Seed printed at start. */
#include "testutil.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <clattn.h>
#include <clattn_mods.h>

typedef struct rcase {
    const char *name;
    int64_t b, h_q, h_kv, n_q, n_kv, d_k, d_v;
    bool per_kv_head, terms, lse64;
    float big; /* Q and K times this (large scores), or 0 */
} rcase;

static const rcase CASES[] = {
    {"GQA no-self, d_k 22, per query head", 2, 4, 2, 37, 70, 22, 16, false, false, false, 0},
    {"GQA, every term, per KV head", 2, 4, 2, 29, 53, 24, 8, true, true, false, 0},
    {"decode, GQA, sinks, per KV head", 3, 8, 2, 1, 150, 64, 64, true, true, true, 0},
    {"no query row", 1, 2, 1, 0, 20, 16, 16, false, false, false, 0},
    /* scores in the hundreds: s - m must stay exact (a weight near 1 is not above it) */
    {"large scores, GQA, per KV head", 1, 2, 1, 40, 200, 64, 16, true, false, true, 60.0f},
};
#define N_CASES ((int)(sizeof CASES / sizeof CASES[0]))

static float slopes[8], sinks[8];
static const int32_t q_lens[3] = {29, 20, 1}, kv_lens[3] = {53, 41, 99};

static clattn_attention_desc desc_for(const rcase *c, float *mask, clattn_tensor *tm)
{
    clattn_attention_desc d = clattn_attention_desc_default();
    d.mask = CLATTN_MASK_CAUSAL_BOTTOM_RIGHT;
    if (!c->terms) {
        d.mask = CLATTN_MASK_NO_SELF;
        return d;
    }
    for (int h = 0; h < 8; h++) {
        slopes[h] = exp2f(-(float)(h + 1));
        sinks[h] = h == 1 ? -INFINITY : 0.3f * (float)h - 1.0f; /* head 1: no sink */
    }
    d.alibi_slopes = slopes;
    d.sinks = sinks;
    d.softcap = 6.0f;
    d.kv_lens = kv_lens;
    /* queries 60 positions past the keys: every row's diagonal lies past its last key, so
     * ALiBi's reference (the nearest visible key) is not 0 */
    d.q_start = 60;
    if (c->n_q > 1) {
        d.q_lens = q_lens;
        d.window = 1;
        d.window_left = 200;
        d.window_right = 2;
        /* a float mask: -inf on every 7th key and on every key of row 3 (with head 1's
         * missing sink: a row with no visible key, LSE -inf), small biases elsewhere */
        const size_t nm = (size_t)(c->b * c->h_q * c->n_q * c->n_kv);
        for (size_t e = 0; e < nm; e++)
            mask[e] = e % 7 == 3 || (e / (size_t)c->n_kv) % (size_t)c->n_q == 3
                          ? -INFINITY
                          : 0.25f * tu_gen(tu_seed() + 9u, (uint32_t)e);
        *tm = clattn_tensor_host(mask, c->b, c->h_q, c->n_q, c->n_kv);
        d.mask_tensor = tm;
    }
    return d;
}

static void run_case(const rcase *c)
{
    clattn_context *ctx = tu_ctx();
    tu_problem p;
    tu_problem_init(&p, c->b, c->h_q, c->h_kv, c->n_q, c->n_kv, c->d_k, c->d_v, tu_seed() + 1u,
                    tu_seed() + 2u, tu_seed() + 3u, 0);
    for (int64_t e = 0; c->big && e < tu_count(&p.tq); e++)
        p.q[e] *= c->big;
    for (int64_t e = 0; c->big && e < tu_count(&p.tk); e++)
        p.k[e] *= c->big;
    /* … with each key twice (rows of keys 2j and 2j + 1 equal): a row's top weight splits
     * in two, so log l is log 2 and m + l rounds at the scores' size */
    for (int64_t r = 0; c->big && r + 1 < c->b * c->h_kv * c->n_kv; r += 2)
        memcpy(p.k + (r + 1) * c->d_k, p.k + r * c->d_k, sizeof(float) * (size_t)c->d_k);
    const int64_t h_out = c->per_kv_head ? c->h_kv : c->h_q, ns = c->b * h_out * c->n_kv;
    float *mask = tu_alloc((size_t)(c->b * c->h_q * (c->n_q ? c->n_q : 1) * c->n_kv), 0);
    clattn_tensor tm;
    clattn_attention_desc d = desc_for(c, mask, &tm);
    float *o = tu_alloc((size_t)(c->b * c->h_q * (c->n_q ? c->n_q : 1) * c->d_v), 0);
    float *ks = tu_alloc((size_t)ns, -7.0f), *ks_ref = tu_alloc((size_t)ns, -7.0f);
    const size_t nl = (size_t)(c->b * c->h_q * (c->n_q ? c->n_q : 1));
    double *lse64 = calloc(nl, sizeof(double)), *lse_ref = calloc(nl, sizeof(double));
    clattn_tensor to = tu_problem_o(&p, o), tks = clattn_tensor_host(ks, c->b, h_out, 1, c->n_kv),
                  tref = clattn_tensor_host(ks_ref, c->b, h_out, 1, c->n_kv);
    clattn_tensor tl = clattn_tensor_host(NULL, c->b, c->h_q, c->n_q, 1);
    tl.dtype = CLATTN_FLOAT64;
    clattn_tensor tlr = tl;
    tl.host = lse64;
    tlr.host = lse_ref;
    if (c->lse64)
        d.lse = &tlr;
    d.key_weight_sums = &tref;
    ck_assert_int_eq(clattn_reference_attention(&d, &p.tq, &p.tk, &p.tv, &to), CLATTN_SUCCESS);
    if (c->lse64)
        d.lse = &tl;
    d.key_weight_sums = &tks;
    clattn_plan plan;
    TU_ASSERT_OK(clattn_attention_plan(ctx, &d, &p.tq, &p.tk, &p.tv, &to, &plan), "%s plan",
                 c->name);
    printf("key sums, %s: %s\n", c->name, plan.kernels);
    TU_ASSERT_OK(clattn_attention(ctx, &d, &p.tq, &p.tk, &p.tv, &to), "%s", c->name);
    /* against the reference, the worst element named */
    double *exp64 = malloc(sizeof(double) * (size_t)(ns ? ns : 1));
    for (int64_t e = 0; e < ns; e++)
        exp64[e] = ks_ref[e];
    char what[160];
    snprintf(what, sizeof what, "key weight sums, %s", c->name);
    TU_ASSERT_CLOSE(what, &tks, exp64, NULL, ((tu_tol){2e-5, 2e-5}));
    /* the caller's LSE, which key_sums.cl writes from the relative max and log-sum */
    for (size_t e = 0; c->lse64 && e < nl; e++) /* (float64: compared here, row by row) */
        ck_assert_msg(tu_within(lse64[e], lse_ref[e], TU_TOL_DEFAULT),
                      "%s: LSE element %zu is %.17g, reference %.17g", c->name, e, lse64[e],
                      lse_ref[e]);
    /* keys past kv_lens: exactly 0 */
    for (int64_t b = 0; d.kv_lens && b < c->b; b++)
        for (int64_t h = 0; h < h_out; h++)
            for (int64_t j = d.kv_lens[b]; j < c->n_kv; j++)
                ck_assert_msg(ks[(b * h_out + h) * c->n_kv + j] == 0.0f,
                              "%s: key %lld past kv_lens of entry %lld sums to %g", c->name,
                              (long long)j, (long long)b,
                              (double)ks[(b * h_out + h) * c->n_kv + j]);
    /* against the device's weights output, summed in float64 (not for n_q 0) */
    if (c->n_q > 0) {
        float *w = tu_alloc((size_t)(c->b * c->h_q * c->n_q * c->n_kv), 0);
        clattn_tensor tw = clattn_tensor_host(w, c->b, c->h_q, c->n_q, c->n_kv);
        clattn_attention_desc dw = d;
        dw.key_weight_sums = NULL;
        dw.weights = &tw;
        dw.lse = NULL;
        dw.masked_rows = CLATTN_MASKED_ROWS_ZERO;
        TU_ASSERT_OK(clattn_attention(ctx, &dw, &p.tq, &p.tk, &p.tv, &to), "%s weights", c->name);
        const int64_t group = c->h_q / c->h_kv;
        for (int64_t e = 0; e < ns; e++)
            exp64[e] = 0.0;
        for (int64_t b = 0; b < c->b; b++)
            for (int64_t h = 0; h < c->h_q; h++)
                for (int64_t i = 0; i < c->n_q; i++)
                    for (int64_t j = 0; j < c->n_kv; j++)
                        exp64[(b * h_out + (c->per_kv_head ? h / group : h)) * c->n_kv + j] +=
                            w[((b * c->h_q + h) * c->n_q + i) * c->n_kv + j];
        snprintf(what, sizeof what, "key weight sums against the summed weights, %s", c->name);
        TU_ASSERT_CLOSE(what, &tks, exp64, NULL, ((tu_tol){2e-5, 2e-5}));
        free(w);
    }
    /* a rerun, and the enqueue call on buffers: the same bits */
    float *ks2 = tu_alloc((size_t)ns, -7.0f);
    clattn_tensor tks2 = clattn_tensor_host(ks2, c->b, h_out, 1, c->n_kv);
    d.key_weight_sums = &tks2;
    TU_ASSERT_OK(clattn_attention(ctx, &d, &p.tq, &p.tk, &p.tv, &to), "%s rerun", c->name);
    tu_assert_same_bits(ks2, ks, (size_t)ns, "%s: key weight sums of a rerun", c->name);
    if (!c->lse64 && !c->terms && c->n_q > 0) {
        cl_context cl_ctx;
        cl_command_queue queue;
        ck_assert_int_eq(clattn_context_get_cl(ctx, &cl_ctx, NULL, &queue), CLATTN_SUCCESS);
        cl_int err;
        const size_t bq = (size_t)tu_count(&p.tq) * 4, bk = (size_t)tu_count(&p.tk) * 4,
                     bv = (size_t)tu_count(&p.tv) * 4, bo = (size_t)tu_count(&to) * 4;
        cl_mem mq = clCreateBuffer(cl_ctx, CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR, bq, p.q, &err),
               mk = clCreateBuffer(cl_ctx, CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR, bk, p.k, &err),
               mv = clCreateBuffer(cl_ctx, CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR, bv, p.v, &err),
               mo = clCreateBuffer(cl_ctx, CL_MEM_READ_WRITE, bo, NULL, &err),
               ms = clCreateBuffer(cl_ctx, CL_MEM_READ_WRITE, (size_t)ns * 4, NULL, &err);
        ck_assert_int_eq(err, CL_SUCCESS);
        clattn_tensor eq = clattn_tensor_buffer(mq, c->b, c->h_q, c->n_q, c->d_k),
                      ek = clattn_tensor_buffer(mk, c->b, c->h_kv, c->n_kv, c->d_k),
                      ev = clattn_tensor_buffer(mv, c->b, c->h_kv, c->n_kv, c->d_v),
                      eo = clattn_tensor_buffer(mo, c->b, c->h_q, c->n_q, c->d_v),
                      es = clattn_tensor_buffer(ms, c->b, h_out, 1, c->n_kv);
        d.key_weight_sums = &es;
        cl_event done = NULL;
        TU_ASSERT_OK(clattn_attention_enqueue(ctx, &d, &eq, &ek, &ev, &eo, 0, NULL, &done),
                     "%s enqueue", c->name);
        ck_assert_int_eq(
            clEnqueueReadBuffer(queue, ms, CL_TRUE, 0, (size_t)ns * 4, ks2, 1, &done, NULL),
            CL_SUCCESS);
        clReleaseEvent(done);
        tu_assert_same_bits(ks2, ks, (size_t)ns, "%s: key weight sums of the enqueue call",
                            c->name);
        cl_mem all[5] = {mq, mk, mv, mo, ms};
        for (int i = 0; i < 5; i++)
            clReleaseMemObject(all[i]);
    }
    free(ks2);
    free(exp64);
    free(ks);
    free(ks_ref);
    free(o);
    free(mask);
    free(lse64);
    free(lse_ref);
    tu_problem_free(&p);
}

START_TEST(key_sums_against_reference)
{
    run_case(&CASES[_i]);
}
END_TEST

/* Paged K/V: a pool of one page per sequence, the pages swapped (block table {1, 0}),
 * K and V in clattn's pool layout [num_pages, h_kv, page_size, d]: the same bits as the
 * contiguous call. */
START_TEST(key_sums_paged)
{
    clattn_context *ctx = tu_ctx();
    enum { B = 2, HQ = 4, HK = 2, NQ = 9, NK = 40, D = 16 };
    tu_problem p;
    tu_problem_init(&p, B, HQ, HK, NQ, NK, D, D, tu_seed() + 11u, tu_seed() + 12u, tu_seed() + 13u,
                    0);
    float *pk = tu_alloc((size_t)B * HK * NK * D, 0), *pv = tu_alloc((size_t)B * HK * NK * D, 0);
    for (int b = 0; b < B; b++) { /* sequence b's keys in page 1 - b */
        memcpy(pk + (size_t)(1 - b) * HK * NK * D, p.k + (size_t)b * HK * NK * D,
               sizeof(float) * HK * NK * D);
        memcpy(pv + (size_t)(1 - b) * HK * NK * D, p.v + (size_t)b * HK * NK * D,
               sizeof(float) * HK * NK * D);
    }
    const int32_t table[B] = {1, 0};
    const clattn_paged_kv pg = {table, NULL, 1};
    float o[B * HQ * NQ * D], ks[B * HK * NK], kp[B * HK * NK];
    clattn_tensor to = tu_problem_o(&p, o), tks = clattn_tensor_host(ks, B, HK, 1, NK),
                  tkp = clattn_tensor_host(kp, B, HK, 1, NK);
    clattn_tensor tpk = clattn_tensor_host(pk, B, HK, NK, D),
                  tpv = clattn_tensor_host(pv, B, HK, NK, D);
    clattn_attention_desc d = clattn_attention_desc_default();
    d.mask = CLATTN_MASK_CAUSAL_BOTTOM_RIGHT;
    d.key_weight_sums = &tks;
    TU_ASSERT_OK(clattn_attention(ctx, &d, &p.tq, &p.tk, &p.tv, &to), "contiguous");
    d.key_weight_sums = &tkp;
    d.paged = &pg;
    TU_ASSERT_OK(clattn_attention(ctx, &d, &p.tq, &tpk, &tpv, &to), "paged");
    tu_assert_same_bits(kp, ks, B * HK * NK, "key weight sums, paged (expected: contiguous)");
    free(pk);
    free(pv);
    tu_problem_free(&p);
}
END_TEST

START_TEST(key_sums_statuses)
{
    clattn_context *ctx = tu_ctx();
    tu_problem p;
    tu_problem_init(&p, 1, 2, 1, 5, 9, 8, 8, tu_seed() + 5u, tu_seed() + 6u, tu_seed() + 7u, 0);
    float o[2 * 5 * 8], ks[2 * 9], w[2 * 5 * 9];
    clattn_tensor to = tu_problem_o(&p, o), tks = clattn_tensor_host(ks, 1, 2, 1, 9),
                  tw = clattn_tensor_host(w, 1, 2, 5, 9);
    clattn_attention_desc d = clattn_attention_desc_default();
    d.key_weight_sums = &tks;
    TU_ASSERT_OK(clattn_attention(ctx, &d, &p.tq, &p.tk, &p.tv, &to), "plain");
    clattn_attention_desc e = d;
    e.weights = &tw;
    ck_assert_int_eq(clattn_attention(ctx, &e, &p.tq, &p.tk, &p.tv, &to), CLATTN_ERROR_UNSUPPORTED);
    e = d;
    e.dropout_p = 0.5f;
    ck_assert_int_eq(clattn_attention(ctx, &e, &p.tq, &p.tk, &p.tv, &to), CLATTN_ERROR_UNSUPPORTED);
    e = d;
    e.algorithm = CLATTN_ALGORITHM_UNFUSED;
    ck_assert_int_eq(clattn_attention(ctx, &e, &p.tq, &p.tk, &p.tv, &to), CLATTN_ERROR_UNSUPPORTED);
    /* shapes: a middle dim other than 1, heads neither h_q nor h_kv, n_kv off by one */
    const int64_t bad[3][4] = {{1, 2, 5, 9}, {1, 3, 1, 9}, {1, 2, 1, 8}};
    for (int i = 0; i < 3; i++) {
        clattn_tensor tb = clattn_tensor_host(ks, bad[i][0], bad[i][1], bad[i][2], bad[i][3]);
        float big[2 * 5 * 9];
        tb.host = big;
        e = d;
        e.key_weight_sums = &tb;
        ck_assert_int_eq(clattn_attention(ctx, &e, &p.tq, &p.tk, &p.tv, &to),
                         CLATTN_ERROR_INVALID_SHAPE);
    }
    /* a float16 output */
    clattn_tensor th = tks;
    th.dtype = CLATTN_FLOAT16;
    e = d;
    e.key_weight_sums = &th;
    ck_assert_int_ne(clattn_attention(ctx, &e, &p.tq, &p.tk, &p.tv, &to), CLATTN_SUCCESS);
    /* varlen */
    const int32_t cu[2] = {0, 5}, cuk[2] = {0, 9};
    const clattn_varlen vl = {cu, cuk, 1, NULL, NULL, 0, 0};
    e = d;
    e.varlen = &vl;
    ck_assert_int_eq(clattn_attention(ctx, &e, &p.tq, &p.tk, &p.tv, &to), CLATTN_ERROR_UNSUPPORTED);
    /* an output on the cl_mem of kv_lens_buffer, over its ints: INVALID_LAYOUT (the
     * kernels read the lengths while they write); past them: fine */
    {
        cl_context cl_ctx;
        cl_command_queue queue;
        ck_assert_int_eq(clattn_context_get_cl(ctx, &cl_ctx, NULL, &queue), CLATTN_SUCCESS);
        cl_int err;
        const int32_t len9 = 9;
        cl_mem mq = clCreateBuffer(cl_ctx, CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR,
                                   sizeof(float) * 2 * 5 * 8, p.q, &err),
               mk = clCreateBuffer(cl_ctx, CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR,
                                   sizeof(float) * 9 * 8, p.k, &err),
               mo =
                   clCreateBuffer(cl_ctx, CL_MEM_READ_WRITE, sizeof(float) * 2 * 5 * 8, NULL, &err),
               ml = clCreateBuffer(cl_ctx, CL_MEM_READ_WRITE, sizeof(float) * 64, NULL, &err);
        ck_assert_int_eq(err, CL_SUCCESS);
        ck_assert_int_eq(clEnqueueWriteBuffer(queue, ml, CL_TRUE, 0, 4, &len9, 0, NULL, NULL),
                         CL_SUCCESS);
        clattn_tensor eq = clattn_tensor_buffer(mq, 1, 2, 5, 8),
                      ek = clattn_tensor_buffer(mk, 1, 1, 9, 8),
                      eo = clattn_tensor_buffer(mo, 1, 2, 5, 8),
                      es = clattn_tensor_buffer(ml, 1, 2, 1, 9);
        e = d;
        e.kv_lens_buffer = ml;
        e.key_weight_sums = &es;
        ck_assert_int_eq(clattn_attention_enqueue(ctx, &e, &eq, &ek, &ek, &eo, 0, NULL, NULL),
                         CLATTN_ERROR_INVALID_LAYOUT);
        es.offset = 16; /* past the one length */
        TU_ASSERT_OK(clattn_attention_enqueue(ctx, &e, &eq, &ek, &ek, &eo, 0, NULL, NULL),
                     "key sums past the lengths on their cl_mem");
        e.key_weight_sums = NULL;
        clattn_tensor eo2 = clattn_tensor_buffer(ml, 1, 2, 5, 8); /* O over the lengths */
        ck_assert_int_eq(clattn_attention_enqueue(ctx, &e, &eq, &ek, &ek, &eo2, 0, NULL, NULL),
                         CLATTN_ERROR_INVALID_LAYOUT);
        ck_assert_int_eq(clFinish(queue), CL_SUCCESS);
        cl_mem all[4] = {mq, mk, mo, ml};
        for (int i = 0; i < 4; i++)
            clReleaseMemObject(all[i]);
    }
    /* the reference refuses what the device refuses */
    e = d;
    e.weights = &tw;
    ck_assert_int_eq(clattn_reference_attention(&e, &p.tq, &p.tk, &p.tv, &to),
                     CLATTN_ERROR_UNSUPPORTED);
    tu_problem_free(&p);
}
END_TEST

/* ---- max logits (desc.max_logits; cl/row_max.cl, rows.cl STORE_LSE) ----
 * Each row's largest score against the float64 reference within 1e-5 + 1e-5·|x| (one
 * float32 score; −∞ exactly where the row sees no key), with the caller's LSE (written
 * by row_max.cl when no other second pass does, else by key_sums.cl or
 * weights_from_lse.cl) against the reference's; with weights or key weight sums beside
 * them; sinks of 1.5 above many rows' scores (the max excludes the sink); ALiBi with a
 * score_mod (absolute ALiBi); n_kv 0 (every row −∞); a decode shape; an int8 K. */
typedef struct mcase {
    const char *name;
    int64_t b, h_q, h_kv, n_q, n_kv, d_k, d_v;
    bool terms, lse64;
    int with; /* 0: alone, 1: with weights, 2: with key weight sums */
    bool mod, int8;
    float big;
} mcase;

static const mcase MCASES[] = {
    {"MHA no-self, d_k 22", 2, 3, 3, 37, 70, 22, 16, false, false, 0, false, false, 0},
    {"GQA, every term, float64 LSE", 2, 4, 2, 29, 53, 24, 8, true, true, 0, false, false, 0},
    {"GQA, every term, with weights", 2, 4, 2, 29, 53, 24, 8, true, false, 1, false, false, 0},
    {"GQA, every term, with key sums", 2, 4, 2, 29, 53, 24, 8, true, true, 2, false, false, 0},
    {"decode, GQA, sinks", 3, 8, 2, 1, 150, 64, 64, true, true, 0, false, false, 0},
    {"no keys", 2, 2, 1, 5, 0, 16, 16, false, true, 0, false, false, 0},
    {"ALiBi under a score_mod", 2, 4, 2, 29, 53, 24, 8, true, true, 0, true, false, 0},
    {"int8 K and V", 1, 4, 2, 33, 90, 32, 32, false, true, 0, false, true, 0},
    {"large scores", 1, 2, 1, 40, 200, 64, 16, false, true, 0, false, false, 60.0f},
};
#define N_MCASES ((int)(sizeof MCASES / sizeof MCASES[0]))

static double half_plus(double s, int b, int h, int64_t qp, int64_t kp, const void *const *bufs,
                        void *user)
{
    (void)b, (void)h, (void)qp, (void)kp, (void)bufs, (void)user;
    return 0.5 * s + 0.25;
}

START_TEST(max_logits_against_reference)
{
    const mcase *c = &MCASES[_i];
    clattn_context *ctx = tu_ctx();
    tu_problem p;
    tu_problem_init(&p, c->b, c->h_q, c->h_kv, c->n_q, c->n_kv, c->d_k, c->d_v, tu_seed() + 21u,
                    tu_seed() + 22u, tu_seed() + 23u, 0);
    for (int64_t e = 0; c->big && e < tu_count(&p.tq); e++)
        p.q[e] *= c->big;
    for (int64_t e = 0; c->big && e < tu_count(&p.tk); e++)
        p.k[e] *= c->big;
    const rcase rc = {c->name, c->b,   c->h_q, c->h_kv,  c->n_q,   c->n_kv,
                      c->d_k,  c->d_v, false,  c->terms, c->lse64, 0};
    float *mask = tu_alloc((size_t)(c->b * c->h_q * c->n_q * (c->n_kv ? c->n_kv : 1)), 0);
    clattn_tensor tm;
    clattn_attention_desc d = desc_for(&rc, mask, &tm);
    float big_sinks[8];
    if (c->terms) { /* sinks above many rows' scores (odd heads): not their max */
        for (int h = 0; h < 8; h++)
            big_sinks[h] = h % 2 ? 1.5f : -INFINITY;
        d.sinks = big_sinks;
    }
    clattn_mods mods = {0};
    if (c->mod) {
        mods.score_mod = "float clattn_score_mod(float s, int b, int h, long q, long k)\n"
                         "{ return 0.5f * s + 0.25f; }\n";
        mods.score_mod_host = half_plus;
        d.mods = &mods;
    }
    /* an int8 K and V: random integers, a scale per (b, KV head, key) */
    const int64_t nk = tu_count(&p.tk), nv = tu_count(&p.tv), nsc = c->b * c->h_kv * c->n_kv;
    int8_t *k8 = malloc((size_t)(nk + nv + 1));
    float *ksc = tu_alloc((size_t)(2 * nsc + 1), 0);
    clattn_tensor tk = p.tk, tv = p.tv, tks, tvs;
    if (c->int8) {
        for (int64_t e = 0; e < nk + nv; e++)
            k8[e] = (int8_t)(tu_gen(tu_seed() + 24u, (uint32_t)e) * 127.0f);
        for (int64_t e = 0; e < 2 * nsc; e++)
            ksc[e] = 0.01f + 0.02f * (tu_gen(tu_seed() + 25u, (uint32_t)e) + 1.0f);
        tk.host = k8;
        tk.dtype = CLATTN_INT8;
        tv.host = k8 + nk;
        tv.dtype = CLATTN_INT8;
        tks = clattn_tensor_host(ksc, c->b, c->h_kv, c->n_kv, 1);
        tvs = clattn_tensor_host(ksc + nsc, c->b, c->h_kv, c->n_kv, 1);
        d.k_scale = &tks;
        d.v_scale = &tvs;
    }
    const size_t nl = (size_t)(c->b * c->h_q * c->n_q);
    float *o = tu_alloc((size_t)(c->b * c->h_q * c->n_q * c->d_v), 0);
    float *ml = tu_alloc(nl, -7.0f), *ml_ref = tu_alloc(nl, -7.0f);
    double *lse = calloc(nl, sizeof(double)), *lse_ref = calloc(nl, sizeof(double));
    clattn_tensor to = tu_problem_o(&p, o), tml = clattn_tensor_host(ml, c->b, c->h_q, c->n_q, 1),
                  tmr = clattn_tensor_host(ml_ref, c->b, c->h_q, c->n_q, 1);
    clattn_tensor tl = clattn_tensor_host(lse, c->b, c->h_q, c->n_q, 1), tlr = tl;
    tl.dtype = tlr.dtype = CLATTN_FLOAT64;
    tlr.host = lse_ref;
    d.lse = &tlr;
    d.max_logits = &tmr;
    ck_assert_int_eq(clattn_reference_attention(&d, &p.tq, &tk, &tv, &to), CLATTN_SUCCESS);
    if (!c->lse64) /* a float32 LSE (in the same array), compared at its precision */
        tl = clattn_tensor_host((float *)lse, c->b, c->h_q, c->n_q, 1);
    d.lse = &tl;
    d.max_logits = &tml;
    float *w = tu_alloc((size_t)(c->b * c->h_q * c->n_q * (c->n_kv ? c->n_kv : 1)), 0);
    float *ks = tu_alloc((size_t)(c->b * c->h_kv * (c->n_kv ? c->n_kv : 1)), 0);
    clattn_tensor tw = clattn_tensor_host(w, c->b, c->h_q, c->n_q, c->n_kv),
                  tsum = clattn_tensor_host(ks, c->b, c->h_kv, 1, c->n_kv);
    if (c->with == 1)
        d.weights = &tw;
    if (c->with == 2)
        d.key_weight_sums = &tsum;
    clattn_plan plan;
    TU_ASSERT_OK(clattn_attention_plan(ctx, &d, &p.tq, &tk, &tv, &to, &plan), "%s plan", c->name);
    printf("max logits, %s: %s\n", c->name, plan.kernels);
    TU_ASSERT_OK(clattn_attention(ctx, &d, &p.tq, &tk, &tv, &to), "%s", c->name);
    char what[160];
    snprintf(what, sizeof what, "max logits, %s", c->name);
    TU_ASSERT_CLOSE(what, &tml, NULL, ml_ref, TU_TOL_DEFAULT);
    for (size_t e = 0; e < nl; e++) {
        const double got = c->lse64 ? lse[e] : (double)((float *)lse)[e];
        ck_assert_msg(tu_within(got, lse_ref[e], c->lse64 ? TU_TOL_DEFAULT : (tu_tol){2e-6, 2e-6}),
                      "%s: LSE element %zu is %.17g, reference %.17g", c->name, e, got, lse_ref[e]);
    }
    if (c->n_kv == 0)
        for (size_t e = 0; e < nl; e++)
            ck_assert_msg(ml[e] == -INFINITY, "%s: row %zu's max logit is %g, expected -inf",
                          c->name, e, (double)ml[e]);
    free(w);
    free(ks);
    free(k8);
    free(ksc);
    free(o);
    free(ml);
    free(ml_ref);
    free(lse);
    free(lse_ref);
    free(mask);
    tu_problem_free(&p);
}
END_TEST

START_TEST(max_logits_statuses)
{
    clattn_context *ctx = tu_ctx();
    tu_problem p;
    tu_problem_init(&p, 1, 2, 1, 5, 9, 8, 8, tu_seed() + 26u, tu_seed() + 27u, tu_seed() + 28u, 0);
    float o[2 * 5 * 8], ml[2 * 5], big[2 * 5 * 9];
    clattn_tensor to = tu_problem_o(&p, o), tml = clattn_tensor_host(ml, 1, 2, 5, 1);
    clattn_attention_desc d = clattn_attention_desc_default();
    d.mask = CLATTN_MASK_CAUSAL_TOP_LEFT;
    d.max_logits = &tml;
    TU_ASSERT_OK(clattn_attention(ctx, &d, &p.tq, &p.tk, &p.tv, &to), "plain");
    clattn_attention_desc e = d;
    e.algorithm = CLATTN_ALGORITHM_UNFUSED;
    ck_assert_int_eq(clattn_attention(ctx, &e, &p.tq, &p.tk, &p.tv, &to), CLATTN_ERROR_UNSUPPORTED);
    const int64_t bad[3][4] = {{1, 2, 5, 2}, {1, 1, 5, 1}, {1, 2, 4, 1}};
    for (int i = 0; i < 3; i++) {
        clattn_tensor tb = clattn_tensor_host(big, bad[i][0], bad[i][1], bad[i][2], bad[i][3]);
        e = d;
        e.max_logits = &tb;
        ck_assert_int_eq(clattn_attention(ctx, &e, &p.tq, &p.tk, &p.tv, &to),
                         CLATTN_ERROR_INVALID_SHAPE);
    }
    clattn_tensor th = tml;
    th.dtype = CLATTN_FLOAT16;
    e = d;
    e.max_logits = &th;
    ck_assert_int_ne(clattn_attention(ctx, &e, &p.tq, &p.tk, &p.tv, &to), CLATTN_SUCCESS);
    e = d; /* the LSE over the same floats */
    e.lse = &tml;
    ck_assert_int_eq(clattn_attention(ctx, &e, &p.tq, &p.tk, &p.tv, &to),
                     CLATTN_ERROR_INVALID_LAYOUT);
    const int32_t cu[2] = {0, 5}, cuk[2] = {0, 9};
    const clattn_varlen vl = {cu, cuk, 1, NULL, NULL, 0, 0};
    e = d;
    e.varlen = &vl;
    ck_assert_int_eq(clattn_attention(ctx, &e, &p.tq, &p.tk, &p.tv, &to), CLATTN_ERROR_UNSUPPORTED);
    /* an append (k_new, v_new) writes K and V: max logits over K's rows refused, K intact */
    {
        float k[16 * 8], v[16 * 8], kn[8], vn[8];
        for (int i = 0; i < 16 * 8; i++)
            k[i] = v[i] = 0.25f * (float)(i % 7);
        for (int i = 0; i < 8; i++)
            kn[i] = vn[i] = 0.5f;
        const int32_t kvl[1] = {8};
        clattn_tensor tk = clattn_tensor_host(k, 1, 1, 16, 8),
                      tv = clattn_tensor_host(v, 1, 1, 16, 8),
                      tkn = clattn_tensor_host(kn, 1, 1, 1, 8),
                      tvn = clattn_tensor_host(vn, 1, 1, 1, 8),
                      tq1 = clattn_tensor_host(p.q, 1, 2, 1, 8),
                      to1 = clattn_tensor_host(o, 1, 2, 1, 8),
                      tm = clattn_tensor_host(k, 1, 2, 1, 1);
        e = clattn_attention_desc_default();
        e.kv_lens = kvl;
        e.k_new = &tkn;
        e.v_new = &tvn;
        e.max_logits = &tm;
        ck_assert_int_eq(clattn_attention(ctx, &e, &tq1, &tk, &tv, &to1),
                         CLATTN_ERROR_INVALID_LAYOUT);
        ck_assert_msg(k[0] == 0.0f && k[1] == 0.25f, "K changed by a refused call: %g %g",
                      (double)k[0], (double)k[1]);
        float ml1[2];
        tm.host = ml1;
        TU_ASSERT_OK(clattn_attention(ctx, &e, &tq1, &tk, &tv, &to1), "max logits, an append");
    }
    /* the enqueue call on buffers: the bits of the blocking call */
    {
        cl_context cl_ctx;
        cl_command_queue queue;
        ck_assert_int_eq(clattn_context_get_cl(ctx, &cl_ctx, NULL, &queue), CLATTN_SUCCESS);
        cl_int err;
        cl_mem mq = clCreateBuffer(cl_ctx, CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR,
                                   sizeof(float) * 2 * 5 * 8, p.q, &err),
               mk = clCreateBuffer(cl_ctx, CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR,
                                   sizeof(float) * 9 * 8, p.k, &err),
               mv = clCreateBuffer(cl_ctx, CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR,
                                   sizeof(float) * 9 * 8, p.v, &err),
               mo =
                   clCreateBuffer(cl_ctx, CL_MEM_READ_WRITE, sizeof(float) * 2 * 5 * 8, NULL, &err),
               mm = clCreateBuffer(cl_ctx, CL_MEM_READ_WRITE, sizeof(float) * 10, NULL, &err);
        ck_assert_int_eq(err, CL_SUCCESS);
        clattn_tensor eq = clattn_tensor_buffer(mq, 1, 2, 5, 8),
                      ek = clattn_tensor_buffer(mk, 1, 1, 9, 8),
                      ev = clattn_tensor_buffer(mv, 1, 1, 9, 8),
                      eo = clattn_tensor_buffer(mo, 1, 2, 5, 8),
                      em = clattn_tensor_buffer(mm, 1, 2, 5, 1);
        e = d;
        e.max_logits = &em;
        cl_event done = NULL;
        TU_ASSERT_OK(clattn_attention_enqueue(ctx, &e, &eq, &ek, &ev, &eo, 0, NULL, &done),
                     "max logits, enqueue");
        float got[10];
        ck_assert_int_eq(
            clEnqueueReadBuffer(queue, mm, CL_TRUE, 0, sizeof got, got, 1, &done, NULL),
            CL_SUCCESS);
        clReleaseEvent(done);
        tu_assert_same_bits(got, ml, 10, "max logits of the enqueue call");
        cl_mem all[5] = {mq, mk, mv, mo, mm};
        for (int i = 0; i < 5; i++)
            clReleaseMemObject(all[i]);
    }
    tu_problem_free(&p);
}
END_TEST

int main(void)
{
    tu_seed_init(0x5c0e5u);
    Suite *s = suite_create("reductions");
    TCase *tc = tcase_create("key_sums");
    tcase_set_timeout(tc, 600);
    tcase_add_loop_test(tc, key_sums_against_reference, 0, N_CASES);
    tcase_add_test(tc, key_sums_paged);
    tcase_add_test(tc, key_sums_statuses);
    suite_add_tcase(s, tc);
    TCase *tm = tcase_create("max_logits");
    tcase_set_timeout(tm, 600);
    tcase_add_loop_test(tm, max_logits_against_reference, 0, N_MCASES);
    tcase_add_test(tm, max_logits_statuses);
    suite_add_tcase(s, tm);
    return tu_run_suite(s);
}
