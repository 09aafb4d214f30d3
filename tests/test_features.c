/* Attention features beyond the plain problem, device against the float64 reference:
 * mask tensors (bool and additive, broadcast), key and query lengths, sliding windows,
 * ALiBi, softcap, the masked-row policy, position offsets, LSE and weights (also
 * averaged over heads) from both algorithms, float16 / bfloat16 storage, and
 * clattn_merge over split key ranges.
 *
 * Tolerance: 1e-5 absolute + 1e-5 relative against the reference fed the same inputs
 * (for 16-bit inputs: the same rounded inputs). 16-bit outputs: one unit in the last
 * place of the output type (2^-10 relative for float16, 2^-7 for bfloat16) plus 1e-5.
 * Seeds: printed; CLATTN_TEST_SEED overrides the base seed. */
#include "testutil.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---- a small deterministic generator for the configurations ----------------------- */

static uint32_t rng_state;

static uint32_t rnd(uint32_t n)
{
    rng_state = tu_lowbias32(rng_state + 0x9E3779B9u);
    return n ? rng_state % n : 0;
}

/* ---- one feature problem -------------------------------------------------------------- */

typedef struct fproblem {
    tu_problem p;
    clattn_attention_desc desc;
    uint8_t *keep;    /* bool mask data */
    float *add;       /* float mask data */
    clattn_tensor mt; /* the mask tensor view */
    int32_t *kv_lens, *q_lens;
    float *slopes;
    float *sinks;
    char text[512]; /* the configuration, for failure messages */
} fproblem;

static void fproblem_free(fproblem *f)
{
    tu_problem_free(&f->p);
    free(f->keep);
    free(f->add);
    free(f->kv_lens);
    free(f->q_lens);
    free(f->slopes);
    free(f->sinks);
}

/* A random configuration: every feature on or off independently. group, n_q > 0 fix
 * the query heads per KV head and the queries (the decode sweep); 0 draws them. */
static void fproblem_random_shape(fproblem *f, uint32_t seed, int64_t group, int64_t n_q_fixed)
{
    memset(f, 0, sizeof *f);
    rng_state = seed;
    /* The compile-time choices (head dims, mask tensor kind, ALiBi, softcap) come as one
     * of 8 classes, so the sweep builds a bounded number of programs (each is about a
     * second of PoCL compile time on a cold cache); everything else is drawn freely. */
    static const struct {
        int64_t d_k, d_v;
        uint32_t mask_kind; /* 0 none, 1 bool, 2 float */
        bool alibi, softcap;
    } CLASSES[8] = {{1, 3, 0, false, false},  {16, 16, 1, true, false}, {33, 64, 2, false, true},
                    {64, 64, 0, true, true},  {3, 33, 1, false, false}, {64, 16, 2, true, false},
                    {40, 40, 0, false, true}, {17, 1, 1, true, true}};
    const uint32_t cls = rnd(8);
    const int64_t b = 1 + rnd(2), h_kv = 1 + rnd(2), h_q = h_kv * (group ? group : 1 + rnd(2));
    const int64_t n_q = n_q_fixed ? n_q_fixed : rnd(5) == 0 ? 1 + rnd(4) : 1 + rnd(70);
    const int64_t n_kv = rnd(8) == 0 ? rnd(3) : 1 + rnd(90);
    const int64_t d_k = CLASSES[cls].d_k, d_v = CLASSES[cls].d_v;
    tu_problem_init(&f->p, b, h_q, h_kv, n_q, n_kv, d_k, d_v, seed * 3 + 1, seed * 3 + 2,
                    seed * 3 + 3, 8);
    clattn_attention_desc *d = &f->desc;
    *d = clattn_attention_desc_default();
    d->scale = rnd(2) ? 0.0f : 0.5f + (float)rnd(100) / 50.0f;
    d->mask = (clattn_mask)rnd(4);
    int pos = 0;
    pos += snprintf(f->text + pos, sizeof f->text - (size_t)pos,
                    "seed %u: b %lld h_q %lld h_kv %lld n_q %lld n_kv %lld d_k %lld d_v %lld "
                    "scale %g mask %s",
                    seed, (long long)b, (long long)h_q, (long long)h_kv, (long long)n_q,
                    (long long)n_kv, (long long)d_k, (long long)d_v, (double)d->scale,
                    tu_mask_name(d->mask));
    const uint32_t mt_kind = CLASSES[cls].mask_kind;
    if (mt_kind) {
        const int64_t mb = rnd(2) ? b : 1, mh = rnd(2) ? h_q : 1;
        const size_t n = (size_t)(mb * mh * n_q * n_kv);
        f->mt = clattn_tensor_host(NULL, mb, mh, n_q, n_kv);
        if (mt_kind == 1) {
            f->keep = malloc(n ? n : 1);
            for (size_t i = 0; i < n; i++)
                f->keep[i] = rnd(4) != 0;
            f->mt.host = f->keep;
            f->mt.dtype = CLATTN_BOOL;
        } else {
            f->add = malloc((n ? n : 1) * sizeof(float));
            for (size_t i = 0; i < n; i++)
                f->add[i] = rnd(5) == 0 ? -INFINITY : ((float)rnd(200) - 100.0f) / 50.0f;
            f->mt.host = f->add;
        }
        d->mask_tensor = &f->mt;
        pos += snprintf(f->text + pos, sizeof f->text - (size_t)pos, " %s-mask[%lld,%lld]",
                        mt_kind == 1 ? "bool" : "float", (long long)mb, (long long)mh);
    }
    if (rnd(3) == 0) {
        f->kv_lens = malloc(sizeof(int32_t) * (size_t)b);
        for (int64_t i = 0; i < b; i++)
            f->kv_lens[i] = (int32_t)rnd((uint32_t)n_kv + 1);
        d->kv_lens = f->kv_lens;
        pos +=
            snprintf(f->text + pos, sizeof f->text - (size_t)pos, " kv_lens[0]=%d", f->kv_lens[0]);
    }
    if (rnd(4) == 0) {
        f->q_lens = malloc(sizeof(int32_t) * (size_t)b);
        for (int64_t i = 0; i < b; i++)
            f->q_lens[i] = (int32_t)rnd((uint32_t)n_q + 1);
        d->q_lens = f->q_lens;
        pos += snprintf(f->text + pos, sizeof f->text - (size_t)pos, " q_lens[0]=%d", f->q_lens[0]);
    }
    if (rnd(3) == 0) {
        d->window = 1;
        d->window_left = (int64_t)rnd(20) - 2;
        d->window_right = (int64_t)rnd(20) - 2;
        pos += snprintf(f->text + pos, sizeof f->text - (size_t)pos, " window(%lld,%lld)",
                        (long long)d->window_left, (long long)d->window_right);
    }
    if (CLASSES[cls].alibi) {
        f->slopes = malloc(sizeof(float) * (size_t)h_q);
        for (int64_t h = 0; h < h_q; h++)
            f->slopes[h] = exp2f(-(float)(h + 1)) * (rnd(4) ? 1.0f : -1.0f);
        d->alibi_slopes = f->slopes;
        pos += snprintf(f->text + pos, sizeof f->text - (size_t)pos, " alibi");
    }
    if (CLASSES[cls].softcap) {
        d->softcap = 0.5f + (float)rnd(40) / 10.0f;
        pos += snprintf(f->text + pos, sizeof f->text - (size_t)pos, " softcap %g",
                        (double)d->softcap);
    }
    if (rnd(3) == 0) {
        d->masked_rows = CLATTN_MASKED_ROWS_NAN;
        pos += snprintf(f->text + pos, sizeof f->text - (size_t)pos, " masked_rows nan");
    }
    if (rnd(4) == 0) {
        d->q_start = (int64_t)rnd(40);
        d->kv_start = (int64_t)rnd(40);
        pos += snprintf(f->text + pos, sizeof f->text - (size_t)pos, " q_start %lld kv_start %lld",
                        (long long)d->q_start, (long long)d->kv_start);
    }
    if (rnd(3) == 0) { /* attention sinks: none (−∞), comparable to the scores, dominant */
        f->sinks = malloc(sizeof(float) * (size_t)h_q);
        for (int64_t h = 0; h < h_q; h++) {
            const uint32_t kind = rnd(6);
            f->sinks[h] = kind == 0   ? -INFINITY
                          : kind == 1 ? 12.0f
                                      : ((float)rnd(200) - 100.0f) / 40.0f;
        }
        d->sinks = f->sinks;
        pos += snprintf(f->text + pos, sizeof f->text - (size_t)pos, " sinks[0]=%g",
                        (double)f->sinks[0]);
    }
}

static void fproblem_random(fproblem *f, uint32_t seed)
{
    fproblem_random_shape(f, seed, 0, 0);
}

/* Runs the device (blocking or enqueue) with O, LSE and optionally weights and compares
 * all three with the reference. */
static void check_against_reference(fproblem *f, clattn_algorithm alg, bool weights, bool head_mean,
                                    bool via_buffers)
{
    tu_problem *p = &f->p;
    const int64_t rows = p->b * p->h_q * p->n_q, w_heads = head_mean ? 1 : p->h_q;
    const size_t n_o = (size_t)(rows * p->d_v), n_w = (size_t)(p->b * w_heads * p->n_q * p->n_kv);
    float *o = tu_alloc(n_o + 4, -7.0f), *ro = tu_alloc(n_o + 4, -7.0f);
    float *lse = tu_alloc((size_t)rows + 4, -7.0f), *rlse = tu_alloc((size_t)rows + 4, -7.0f);
    float *w = tu_alloc(n_w + 4, -7.0f), *rw = tu_alloc(n_w + 4, -7.0f);
    clattn_tensor to = tu_problem_o(p, o), tro = tu_problem_o(p, ro);
    clattn_tensor tl = clattn_tensor_host(lse, p->b, p->h_q, p->n_q, 1);
    clattn_tensor trl = clattn_tensor_host(rlse, p->b, p->h_q, p->n_q, 1);
    clattn_tensor tw = clattn_tensor_host(w, p->b, w_heads, p->n_q, p->n_kv);
    clattn_tensor trw = clattn_tensor_host(rw, p->b, w_heads, p->n_q, p->n_kv);
    clattn_attention_desc d = f->desc, rd = f->desc;
    d.algorithm = alg;
    d.lse = &tl;
    rd.lse = &trl;
    d.weights_head_mean = rd.weights_head_mean = head_mean;
    if (weights) {
        d.weights = &tw;
        rd.weights = &trw;
    }
    char what[700];
    snprintf(what, sizeof what, "%s [%s%s%s%s]", f->text, tu_algorithm_name(alg),
             weights ? ", weights" : "", head_mean ? " head-mean" : "",
             via_buffers ? ", enqueue" : "");
    clattn_status st = clattn_reference_attention(&rd, &p->tq, &p->tk, &p->tv, &tro);
    ck_assert_msg(st == CLATTN_SUCCESS, "%s: reference: %s", what, clattn_status_string(st));
    if (via_buffers) {
        /* the mask tensor and the LSE need cl_mem views too: use host ones only here */
        d.lse = NULL;
        d.weights = NULL;
        d.mask_tensor = NULL;
        if (f->desc.mask_tensor) { /* not supported by the helper: run blocking instead */
            d = f->desc;
            d.algorithm = alg;
            d.lse = &tl;
            d.weights = weights ? &tw : NULL;
            d.weights_head_mean = head_mean;
            st = clattn_attention(tu_ctx(), &d, &p->tq, &p->tk, &p->tv, &to);
        } else {
            const size_t len[5] = {(size_t)tu_count(&p->tq), (size_t)tu_count(&p->tk),
                                   (size_t)tu_count(&p->tv), n_o, 0};
            st = tu_attention_via_buffers(tu_ctx(), &d, &p->tq, &p->tk, &p->tv, &to, len);
            /* the LSE and weights were not requested on this path: take the reference's */
            memcpy(lse, rlse, sizeof(float) * (size_t)rows);
            memcpy(w, rw, sizeof(float) * n_w);
        }
    } else {
        st = clattn_attention(tu_ctx(), &d, &p->tq, &p->tk, &p->tv, &to);
    }
    ck_assert_msg(st == CLATTN_SUCCESS, "%s: %s: %s", what, clattn_status_string(st),
                  clattn_last_error_message(tu_ctx()));
    char name[800];
    snprintf(name, sizeof name, "%s O", what);
    TU_ASSERT_CLOSE(name, &to, NULL, ro, TU_TOL_DEFAULT);
    snprintf(name, sizeof name, "%s LSE", what);
    TU_ASSERT_CLOSE(name, &tl, NULL, rlse, TU_TOL_DEFAULT);
    if (weights) {
        snprintf(name, sizeof name, "%s weights", what);
        TU_ASSERT_CLOSE(name, &tw, NULL, rw, TU_TOL_DEFAULT);
    }
    tu_assert_untouched("O canary", o, n_o, n_o + 4, -7.0f);
    tu_assert_untouched("LSE canary", lse, (size_t)rows, (size_t)rows + 4, -7.0f);
    tu_assert_untouched("weights canary", w, n_w, n_w + 4, -7.0f);
    free(o);
    free(ro);
    free(lse);
    free(rlse);
    free(w);
    free(rw);
}

#define N_RANDOM 48

START_TEST(random_feature_sweep)
{
    const uint32_t base = tu_seed() ^ 0x5eed0003u;
    for (int c = 0; c < N_RANDOM; c++) {
        fproblem f;
        fproblem_random(&f, base + (uint32_t)c);
        for (int a = 0; a < 2; a++) {
            const bool weights = (c + a) % 3 == 0, head_mean = weights && c % 2 == 0;
            check_against_reference(&f, tu_algorithms[a], weights, head_mean, c % 5 == 4);
        }
        fproblem_free(&f);
    }
    printf("random_feature_sweep: %d configurations x 2 algorithms, base seed 0x%08x\n", N_RANDOM,
           base);
}
END_TEST

/* The decode kernel (fused, n_q <= 16) takes all query heads of a KV head and all their
 * queries in one work-item, up to 16 rows, in blocks as even as possible beyond: rows
 * that differ in head (ALiBi slope, mask tensor, head-mean) and in query (causal
 * diagonal, window, query length) share each K/V step. Group sizes and query counts
 * that give 1, 3, 4, 8, 15 and 16 rows per work-item, one and several blocks. */
START_TEST(decode_grouped_sweep)
{
    static const int64_t shapes[][2] = {{4, 1}, {8, 1}, {3, 5}, {4, 5}, {8, 16}, {1, 16}, {5, 3}};
    const int n_shapes = (int)(sizeof shapes / sizeof shapes[0]);
    const uint32_t base = tu_seed() ^ 0x5eed0005u;
    for (int c = 0; c < 3 * n_shapes; c++) {
        fproblem f;
        fproblem_random_shape(&f, base + (uint32_t)c, shapes[c % n_shapes][0],
                              shapes[c % n_shapes][1]);
        const bool weights = c % 4 == 0, head_mean = weights && c % 8 == 0;
        check_against_reference(&f, CLATTN_ALGORITHM_FUSED, weights, head_mean, c % 5 == 4);
        fproblem_free(&f);
    }
    printf("decode_grouped_sweep: %d configurations, base seed 0x%08x\n", 3 * n_shapes, base);
}
END_TEST

/* The same with every term at once, a fixed configuration in the quick tests: 4 query
 * heads per KV head x 5 queries = 20 rows (two work-items of 10), per-head ALiBi slopes
 * and a per-head bool mask, softcap, bottom-right causal diagonal and window (rows of
 * one work-item see different keys), key and query lengths (padding rows), NaN rows. */
START_TEST(decode_grouped_all_terms)
{
    fproblem f;
    memset(&f, 0, sizeof f);
    /* d_k 72, d_v 70: the GPU family's last K and V chunks part-filled (16 and 8 columns per
     * work-item), 5 work-items per key and 9 per value row (128 a multiple of neither: idle
     * work-items in both stages) */
    const int64_t b = 2, h_kv = 2, h_q = 8, n_q = 5, n_kv = 77, d_k = 72, d_v = 70;
    tu_problem_init(&f.p, b, h_q, h_kv, n_q, n_kv, d_k, d_v, 71, 72, 73, 8);
    clattn_attention_desc *ds = &f.desc;
    *ds = clattn_attention_desc_default();
    ds->mask = CLATTN_MASK_CAUSAL_BOTTOM_RIGHT;
    ds->window = 1;
    ds->window_left = 30;
    ds->window_right = 2;
    ds->softcap = 2.5f;
    ds->masked_rows = CLATTN_MASKED_ROWS_NAN;
    f.kv_lens = malloc(sizeof(int32_t) * 2);
    f.q_lens = malloc(sizeof(int32_t) * 2);
    f.kv_lens[0] = 40; /* the last sequence sees K and V to the buffer's end (77 = 4·16 + 13: */
    f.kv_lens[1] = 77; /* oclgrind checks that decode.cl prefetches no row past it) */
    f.q_lens[0] = 5;
    f.q_lens[1] = 3;
    ds->kv_lens = f.kv_lens;
    ds->q_lens = f.q_lens;
    f.slopes = malloc(sizeof(float) * (size_t)h_q);
    for (int64_t h = 0; h < h_q; h++)
        f.slopes[h] = exp2f(-(float)(h + 1));
    ds->alibi_slopes = f.slopes;
    const size_t n_mask = (size_t)(b * h_q * n_q * n_kv);
    f.keep = malloc(n_mask);
    rng_state = 0x5eed0006u;
    for (size_t i = 0; i < n_mask; i++)
        f.keep[i] = rnd(5) != 0;
    f.mt = clattn_tensor_host(f.keep, b, h_q, n_q, n_kv);
    f.mt.dtype = CLATTN_BOOL;
    ds->mask_tensor = &f.mt;
    snprintf(f.text, sizeof f.text,
             "decode b 2 h_q 8 h_kv 2 n_q 5 n_kv 77 d 72/70, causal-bottom-right window(30,2) "
             "softcap 2.5 alibi bool-mask kv_lens {40,77} q_lens {5,3} masked_rows nan");
    clattn_plan plan;
    float *o = tu_alloc((size_t)(b * h_q * n_q * d_v), 0.0f);
    clattn_tensor to = tu_problem_o(&f.p, o);
    ds->algorithm = CLATTN_ALGORITHM_FUSED;
    ck_assert_int_eq(clattn_attention_plan(tu_ctx(), ds, &f.p.tq, &f.p.tk, &f.p.tv, &to, &plan),
                     CLATTN_SUCCESS);
    /* the CPU family's decode.cl, or the GPU family's split-KV decoding */
    const bool gpu = clattn_context_kernel_family(tu_ctx()) == CLATTN_KERNEL_FAMILY_GPU;
    ck_assert_msg(strcmp(plan.kernels, gpu ? "decode_gpu, split_merge" : "decode") == 0,
                  "kernels \"%s\"", plan.kernels);
    check_against_reference(&f, CLATTN_ALGORITHM_FUSED, false, false, false);
    check_against_reference(&f, CLATTN_ALGORITHM_FUSED, true, false, false);
    check_against_reference(&f, CLATTN_ALGORITHM_FUSED, true, true, false);
    if (!gpu) { /* decode.cl with both KV heads per work-item (chosen for small pages) */
        ck_assert_int_eq(clattn_context_set_decode_heads(tu_ctx(), -1),
                         CLATTN_ERROR_INVALID_ARGUMENT);
        ck_assert_int_eq(clattn_context_set_decode_heads(tu_ctx(), 257),
                         CLATTN_ERROR_INVALID_ARGUMENT);
        ck_assert_int_eq(clattn_context_set_decode_heads(NULL, 2), CLATTN_ERROR_INVALID_ARGUMENT);
        /* 3 asked of 2 KV heads: the largest divisor up to 3, 2 */
        TU_ASSERT_OK(clattn_context_set_decode_heads(tu_ctx(), 3), "decode heads 3");
        ck_assert_int_eq(clattn_attention_plan(tu_ctx(), ds, &f.p.tq, &f.p.tk, &f.p.tv, &to, &plan),
                         CLATTN_SUCCESS);
        ck_assert_msg(strstr(plan.reason, ", 2 KV heads in turn") != NULL, "reason \"%s\"",
                      plan.reason);
        strncat(f.text, ", 2 KV heads per work-item", sizeof f.text - strlen(f.text) - 1);
        check_against_reference(&f, CLATTN_ALGORITHM_FUSED, false, false, false);
        check_against_reference(&f, CLATTN_ALGORITHM_FUSED, true, false, false);
        TU_ASSERT_OK(clattn_context_set_decode_heads(tu_ctx(), 0), "decode heads 0");
    }
    free(o);
    fproblem_free(&f);
}
END_TEST

/* decode_splits_every_term's variants in one family (fam 0: GPU, 1: CPU) */
static void decode_splits_family(clattn_context *ctx, int fam)
{
    const int64_t b = 2, h_kv = 2, h_q = 8, n_q = 3, n_kv = 1100;
    static const int splits[] = {1, 0, 3, 7, 256};
    /* whole steps of 128 (GPU) or 16 keys (CPU) per split: 7 asked give 5 of 256 keys or 7
     * of 160; 0: automatic (not checked), and in the CPU family 1 is none (decode alone).
     * [1]: a window of 300 keys left (causal: none right): the splits cut the 303 keys 3
     * rows see together (clattn_rule_span), each work-item's from its first visible key
     * (split_range), not n_kv from key 0: 7 asked give 3 of 128 keys or 7 of 48. */
    static const size_t expect_splits[2][2][5] = {{{1, 0, 3, 5, 9}, {0, 0, 3, 7, 69}},
                                                  {{1, 0, 3, 3, 3}, {0, 0, 3, 7, 19}}};
    ck_assert_int_eq(clattn_context_set_kernel_family(ctx, fam ? CLATTN_KERNEL_FAMILY_CPU
                                                               : CLATTN_KERNEL_FAMILY_GPU),
                     CLATTN_SUCCESS);
    for (int variant = 0; variant < 4; variant++) {
        const bool all = variant == 0;
        const int64_t d_k = all ? 40 : 64, d_v = all ? 32 : variant == 1 ? 200 : 64;
        fproblem f;
        memset(&f, 0, sizeof f);
        tu_problem_init(&f.p, b, h_q, h_kv, n_q, n_kv, d_k, d_v, 81, 82, 83, 8);
        clattn_attention_desc *ds = &f.desc;
        *ds = clattn_attention_desc_default();
        f.kv_lens = malloc(sizeof(int32_t) * 2);
        /* variant 2: rows end at keys 1023, 1024, 1025, across a step boundary (1024) */
        f.kv_lens[0] = variant == 2 ? 1025 : 1000;
        f.kv_lens[1] = 555;
        ds->kv_lens = f.kv_lens;
        if (variant == 2) /* no term, but rows whose key ranges differ: not plain steps */
            ds->mask = CLATTN_MASK_CAUSAL_BOTTOM_RIGHT;
        if (variant == 3 || all) { /* variant 3: a window alone, steps inside some rows'
                                    * windows, not all; all: one reaching a key ahead */
            ds->mask = CLATTN_MASK_CAUSAL_BOTTOM_RIGHT;
            ds->window = 1;
            ds->window_left = 300;
            ds->window_right = all ? 1 : 0;
        }
        if (all) {
            ds->softcap = 3.0f;
            ds->masked_rows = CLATTN_MASKED_ROWS_NAN;
            f.q_lens = malloc(sizeof(int32_t) * 2);
            f.q_lens[0] = 3;
            f.q_lens[1] = 2;
            ds->q_lens = f.q_lens;
            f.slopes = malloc(sizeof(float) * (size_t)h_q);
            for (int64_t h = 0; h < h_q; h++)
                f.slopes[h] = exp2f(-(float)(h + 1)) * (h % 3 == 2 ? -1.0f : 1.0f);
            ds->alibi_slopes = f.slopes;
            const size_t n_mask = (size_t)(b * h_q * n_q * n_kv);
            f.keep = malloc(n_mask);
            rng_state = 0x5eed0007u;
            for (size_t i = 0; i < n_mask; i++)
                f.keep[i] = rnd(6) != 0;
            /* rows (b 0, heads 5 and 6, query 1) see no key at all: head 5 has no sink
             * (NaN row), head 6 has one (zeros, LSE = the sink) */
            memset(f.keep + ((0 * h_q + 5) * n_q + 1) * n_kv, 0, (size_t)n_kv);
            memset(f.keep + ((0 * h_q + 6) * n_q + 1) * n_kv, 0, (size_t)n_kv);
            f.mt = clattn_tensor_host(f.keep, b, h_q, n_q, n_kv);
            f.mt.dtype = CLATTN_BOOL;
            ds->mask_tensor = &f.mt;
        }
        if (variant < 2) { /* sinks: one more part in the merge */
            f.sinks = malloc(sizeof(float) * (size_t)h_q);
            for (int64_t h = 0; h < h_q; h++)
                f.sinks[h] = h == 5 ? -INFINITY : (float)(h % 4) - 1.5f;
            ds->sinks = f.sinks;
        }
        for (size_t c = 0; c < sizeof splits / sizeof splits[0]; c++) {
            TU_ASSERT_OK(clattn_context_set_decode_splits(ctx, splits[c]), "splits %d", splits[c]);
            snprintf(f.text, sizeof f.text,
                     "%s family split-KV decode, %d splits set: b 2 h_q 8 h_kv 2 n_q 3 n_kv 1100 "
                     "d_k %lld d_v %lld kv_lens {%d,555}%s",
                     fam ? "CPU" : "GPU", splits[c], (long long)d_k, (long long)d_v, f.kv_lens[0],
                     all ? ", causal-bottom-right window(300,1) softcap 3 alibi bool-mask "
                           "q_lens {3,2} masked_rows nan sinks"
                     : variant == 2 ? ", causal-bottom-right"
                     : variant == 3 ? ", causal-bottom-right window(300,0)"
                                    : ", sinks");
            float *o = tu_alloc((size_t)(b * h_q * n_q * d_v), 0.0f);
            clattn_tensor to = tu_problem_o(&f.p, o);
            clattn_plan plan;
            ds->algorithm = CLATTN_ALGORITHM_FUSED;
            TU_ASSERT_OK(clattn_attention_plan(ctx, ds, &f.p.tq, &f.p.tk, &f.p.tv, &to, &plan),
                         "%s: plan", f.text);
            free(o);
            const char *at = strstr(plan.reason, "split_merge.cl): ");
            size_t n_splits = 0;
            if (fam && !at) /* the CPU family unsplit (1 asked, or too few keys for more) */
                ck_assert_msg(
                    strcmp(plan.kernels, "decode") == 0 && expect_splits[ds->window][1][c] == 0,
                    "%s: kernels \"%s\", reason \"%s\"", f.text, plan.kernels, plan.reason);
            else {
                ck_assert_msg(strcmp(plan.kernels,
                                     fam ? "decode, split_merge" : "decode_gpu, split_merge") == 0,
                              "%s: kernels \"%s\"", f.text, plan.kernels);
                ck_assert_msg(at && sscanf(at, "split_merge.cl): %zu splits", &n_splits) == 1,
                              "%s: reason \"%s\"", f.text, plan.reason);
            }
            const size_t want = expect_splits[ds->window][fam][c];
            if (want)
                ck_assert_msg(n_splits == want, "%s: %zu splits, expected %zu", f.text, n_splits,
                              want);
            printf("%s: %zu splits\n", f.text, n_splits);
            check_against_reference(&f, CLATTN_ALGORITHM_FUSED, false, false, c % 2 == 1 && !all);
        }
        fproblem_free(&f);
    }
}

/* Split-KV decoding, in both kernel families forced on this context whatever the device
 * (the GPU family's decode_gpu.cl, the CPU family's decode.cl with SPLITS; then
 * split_merge.cl) with the split count set: 1 split, the automatic count, and 3, 7 and 256
 * asked (each split takes whole steps, of 128 keys in the GPU family and 16 in the CPU
 * family, so 7 asked give 5 splits of 256 keys there, 7 of 160 here; 1 split in the CPU
 * family is no split: decode.cl alone), the last split shorter, and some splits
 * with no visible key for some rows (their LSE is -inf and their O must add nothing). Two variants:
 * every term at once (bottom-right causal with a window of 300 keys, softcap, per-head ALiBi and
 * bool mask, key and query lengths, NaN rows; d_k 40 and d_v 32: four key residues share a column)
 * and no term (plain steps; d_v 200: two columns per work-item). 4 query heads per KV head x 3
 * queries = 12 rows per KV head, in blocks of 8 and 4. O and LSE against the reference; the plan's
 * reason states the split count. */
START_TEST(decode_splits_every_term)
{
    clattn_context *ctx = tu_ctx();
    const clattn_kernel_family family = clattn_context_kernel_family(ctx);
    ck_assert_int_eq(clattn_context_set_kernel_family(ctx, CLATTN_KERNEL_FAMILY_GPU),
                     CLATTN_SUCCESS);
    ck_assert_int_eq(clattn_context_set_decode_splits(ctx, -1), CLATTN_ERROR_INVALID_ARGUMENT);
    ck_assert_int_eq(clattn_context_set_decode_splits(ctx, 257), CLATTN_ERROR_INVALID_ARGUMENT);
    ck_assert_int_eq(clattn_context_set_decode_splits(NULL, 2), CLATTN_ERROR_INVALID_ARGUMENT);
    for (int fam = 0; fam < 2; fam++)
        decode_splits_family(ctx, fam);
    TU_ASSERT_OK(clattn_context_set_decode_splits(ctx, 0), "splits 0");
    TU_ASSERT_OK(clattn_context_set_kernel_family(ctx, family), "family back");
}
END_TEST

/* Split-KV chunks longer than the families' least chunk (2048 keys CPU, 512 GPU): 3 splits
 * asked of 6200 keys plan chunks of 2080 (CPU) and 2176 (GPU) keys, and each work-item cuts
 * its own rows' keys into 3 of ⌈keys / 3⌉ in whole steps (common.cl split_range), at least
 * the least length: batch entry 0 sees all 6200 keys (3 chunks of 2080 / 2176, the
 * rounding up needed to cover the last keys), entry 1 its 3000 (kv_lens: 2 chunks of
 * 2048 in the CPU family, 3 of 1024 in the GPU family). O and LSE against the reference. */
START_TEST(decode_splits_long_rows)
{
    clattn_context *ctx = tu_ctx();
    const clattn_kernel_family family = clattn_context_kernel_family(ctx);
    TU_ASSERT_OK(clattn_context_set_decode_splits(ctx, 3), "splits 3");
    for (int fam = 0; fam < 2; fam++) {
        TU_ASSERT_OK(clattn_context_set_kernel_family(ctx, fam ? CLATTN_KERNEL_FAMILY_CPU
                                                               : CLATTN_KERNEL_FAMILY_GPU),
                     "family");
        fproblem f;
        memset(&f, 0, sizeof f);
        tu_problem_init(&f.p, 2, 4, 1, 1, 6200, 16, 16, 91, 92, 93, 8);
        f.desc = clattn_attention_desc_default();
        f.kv_lens = malloc(sizeof(int32_t) * 2);
        f.kv_lens[0] = 6200;
        f.kv_lens[1] = 3000;
        f.desc.kv_lens = f.kv_lens;
        f.desc.algorithm = CLATTN_ALGORITHM_FUSED;
        snprintf(f.text, sizeof f.text,
                 "%s family split-KV decode, 3 splits set: b 2 h_q 4 h_kv 1 n_q 1 n_kv 6200 d 16 "
                 "kv_lens {6200,3000}",
                 fam ? "CPU" : "GPU");
        check_against_reference(&f, CLATTN_ALGORITHM_FUSED, false, false, false);
        fproblem_free(&f);
    }
    TU_ASSERT_OK(clattn_context_set_decode_splits(ctx, 0), "splits 0");
    TU_ASSERT_OK(clattn_context_set_kernel_family(ctx, family), "family back");
}
END_TEST

/* Every masked key contributes nothing, whatever its K and V (NaN, ±inf): the features
 * that mask (lengths, window, bool and −∞ float masks) with poisoned keys. NaN and inf,
 * not merely large values: 0·NaN and 0·inf are NaN, so a masked key that enters the sum
 * with weight 0 shows (0·1e30 = 0 would hide it). */
START_TEST(masked_keys_contribute_nothing)
{
    /* 9 queries (the decode kernels) and 20 (the tiled fused kernels of either family) */
    for (int shape = 0; shape < 2; shape++)
        for (int variant = 0; variant < 4; variant++) {
            const int64_t nq = shape ? 20 : 9;
            tu_problem p;
            tu_problem_init(&p, 1, 2, 1, nq, 12, 16, 16, 71, 72, 73, 0);
            /* keys 8..11 are poisoned (K NaN; V NaN, +inf, −inf, NaN); each variant masks
             * them a different way */
            for (int64_t j = 8; j < 12; j++) {
                tu_fill_value(p.k + j * 16, 16, NAN);
                tu_fill_value(p.v + j * 16, 16, j == 9 ? INFINITY : j == 10 ? -INFINITY : NAN);
            }
            clattn_attention_desc d = clattn_attention_desc_default();
            int32_t kv_lens[1] = {8};
            uint8_t keep[20 * 12];
            float add[20 * 12];
            for (int i = 0; i < 20 * 12; i++) {
                keep[i] = i % 12 < 8;
                add[i] = i % 12 < 8 ? 0.25f : -INFINITY;
            }
            clattn_tensor mt =
                clattn_tensor_host(variant == 2 ? (void *)keep : (void *)add, 1, 1, nq, 12);
            mt.dtype = variant == 2 ? CLATTN_BOOL : CLATTN_FLOAT32;
            if (variant == 0)
                d.kv_lens = kv_lens;
            if (variant == 1) {
                d.window = 1;
                d.window_left = 20;
                d.window_right = 0; /* key j ≤ i + q_start: with q_start 8 − n_q, j ≤ 7 */
                d.q_start = 8 - nq;
            }
            if (variant >= 2)
                d.mask_tensor = &mt;
            for (int a = 0; a < 2; a++) {
                float *o = tu_run(&p, &d, tu_algorithms[a]);
                clattn_tensor to = tu_problem_o(&p, o);
                char what[96];
                snprintf(what, sizeof what, "masked poisoned keys, n_q %lld, variant %d [%s]",
                         (long long)nq, variant, tu_algorithm_name(tu_algorithms[a]));
                tu_assert_finite(what, &to);
                float *r = tu_reference(&p, &d, NULL);
                TU_ASSERT_CLOSE(what, &to, NULL, r, TU_TOL_DEFAULT);
                free(o);
                free(r);
            }
            tu_problem_free(&p);
        }
}
END_TEST

/* Sliding windows with only a left bound (the right one unbounded) and no score term, on
 * the tiled fused kernels (70 queries, 150 keys: several row blocks and key tiles): a key
 * tile may lie below the window of the block's later rows while the block's first row
 * sees it, so it is not fully visible (a kernel that called such a tile plain from the
 * first row's bound gave later rows keys left of their window). Also with the causal
 * masks, and with the window on the right only. */
START_TEST(sliding_window_one_sided)
{
    static const struct {
        clattn_mask mask;
        int64_t left, right;
    } cases[] = {{CLATTN_MASK_NONE, 5, -1},
                 {CLATTN_MASK_NONE, 40, -1},
                 {CLATTN_MASK_CAUSAL_TOP_LEFT, 9, -1},
                 {CLATTN_MASK_CAUSAL_BOTTOM_RIGHT, 17, -1},
                 {CLATTN_MASK_NONE, -1, 3}};
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        tu_problem p;
        tu_problem_init(&p, 1, 2, 1, 70, 150, 32, 24, 81 + (uint32_t)c, 82, 83, 0);
        clattn_attention_desc d = clattn_attention_desc_default();
        d.mask = cases[c].mask;
        d.window = 1;
        d.window_left = cases[c].left;
        d.window_right = cases[c].right;
        float *r = tu_reference(&p, &d, NULL);
        for (int a = 0; a < 2; a++) {
            float *o = tu_run(&p, &d, tu_algorithms[a]);
            clattn_tensor to = tu_problem_o(&p, o);
            char what[128];
            snprintf(what, sizeof what, "window(%lld,%lld) mask %s [%s]", (long long)cases[c].left,
                     (long long)cases[c].right, tu_mask_name(cases[c].mask),
                     tu_algorithm_name(tu_algorithms[a]));
            TU_ASSERT_CLOSE(what, &to, NULL, r, TU_TOL_DEFAULT);
            free(o);
        }
        free(r);
        tu_problem_free(&p);
    }
}
END_TEST

/* ---- 16-bit storage ------------------------------------------------------------------- */

/* A copy of a packed float array in a 16-bit type. */
static uint16_t *to16(const float *x, size_t n, clattn_dtype dt)
{
    uint16_t *y = malloc(sizeof(uint16_t) * (n ? n : 1));
    for (size_t i = 0; i < n; i++)
        y[i] = dt == CLATTN_FLOAT16 ? clattn_f32_to_f16(x[i]) : clattn_f32_to_bf16(x[i]);
    return y;
}

static float from16(uint16_t x, clattn_dtype dt)
{
    return dt == CLATTN_FLOAT16 ? clattn_f16_to_f32(x) : clattn_bf16_to_f32(x);
}

/* Q, K, V in dt_in (each of the three independently f32 or dt_in by `which` bits), O in
 * dt_out; compares with the reference fed the same rounded inputs. */
static void half_case(clattn_dtype dt_in, int which, clattn_dtype dt_out, float amp, uint32_t seed,
                      const char *label)
{
    tu_problem p;
    tu_problem_init(&p, 1, 2, 1, 37, 45, 40, 24, seed, seed + 1, seed + 2, 0);
    const size_t nq = (size_t)tu_count(&p.tq), nk = (size_t)tu_count(&p.tk),
                 nv = (size_t)tu_count(&p.tv);
    for (size_t i = 0; i < nq; i++)
        p.q[i] *= amp;
    for (size_t i = 0; i < nk; i++)
        p.k[i] *= amp;
    uint16_t *q16 = to16(p.q, nq, dt_in), *k16 = to16(p.k, nk, dt_in), *v16 = to16(p.v, nv, dt_in);
    clattn_tensor tq = p.tq, tk = p.tk, tv = p.tv;
    if (which & 1) {
        tq.host = q16;
        tq.dtype = dt_in;
    }
    if (which & 2) {
        tk.host = k16;
        tk.dtype = dt_in;
    }
    if (which & 4) {
        tv.host = v16;
        tv.dtype = dt_in;
    }
    const size_t n_o = (size_t)(p.b * p.h_q * p.n_q * p.d_v);
    clattn_attention_desc d = clattn_attention_desc_default();
    d.mask = CLATTN_MASK_CAUSAL_BOTTOM_RIGHT;
    float *ref = tu_alloc(n_o, 0.0f);
    clattn_tensor tref = tu_problem_o(&p, ref);
    ck_assert_int_eq(clattn_reference_attention(&d, &tq, &tk, &tv, &tref), CLATTN_SUCCESS);
    for (int a = 0; a < 2; a++) {
        d.algorithm = tu_algorithms[a];
        void *o = malloc(n_o * (dt_out == CLATTN_FLOAT32 ? 4 : 2) + 8);
        clattn_tensor to = tu_problem_o(&p, o);
        to.dtype = dt_out;
        TU_ASSERT_OK(clattn_attention(tu_ctx(), &d, &tq, &tk, &tv, &to), "%s [%s]", label,
                     tu_algorithm_name(tu_algorithms[a]));
        char what[160];
        snprintf(what, sizeof what, "%s [%s]", label, tu_algorithm_name(tu_algorithms[a]));
        if (dt_out == CLATTN_FLOAT32) {
            TU_ASSERT_CLOSE(what, &to, NULL, ref, TU_TOL_DEFAULT);
        } else {
            /* one unit in the last place of the output type */
            const double ulp = dt_out == CLATTN_FLOAT16 ? 0x1p-10 : 0x1p-7;
            double worst = 0.0;
            size_t at = 0;
            for (size_t i = 0; i < n_o; i++) {
                const double got = from16(((uint16_t *)o)[i], dt_out), want = ref[i];
                const double err = fabs(got - want) / (1e-5 + ulp * fabs(want));
                if (!(err <= worst)) {
                    worst = err;
                    at = i;
                }
            }
            ck_assert_msg(worst <= 1.0,
                          "%s: element %zu is %.8g, reference %.8g (tol 1e-5 + %g|x|)", what, at,
                          (double)from16(((uint16_t *)o)[at], dt_out), (double)ref[at], ulp);
        }
        free(o);
    }
    free(ref);
    free(q16);
    free(k16);
    free(v16);
    tu_problem_free(&p);
}

START_TEST(float16_and_bfloat16_storage)
{
    const uint32_t s = tu_seed() ^ 0x16u;
    half_case(CLATTN_FLOAT16, 7, CLATTN_FLOAT32, 1.0f, s, "f16 Q,K,V -> f32 O");
    half_case(CLATTN_FLOAT16, 7, CLATTN_FLOAT16, 1.0f, s + 10, "f16 Q,K,V -> f16 O");
    half_case(CLATTN_FLOAT16, 5, CLATTN_FLOAT32, 1.0f, s + 20, "mixed f16 Q,V + f32 K -> f32 O");
    half_case(CLATTN_BFLOAT16, 7, CLATTN_FLOAT32, 1.0f, s + 30, "bf16 Q,K,V -> f32 O");
    half_case(CLATTN_BFLOAT16, 7, CLATTN_BFLOAT16, 1.0f, s + 40, "bf16 Q,K,V -> bf16 O");
    half_case(CLATTN_FLOAT16, 3, CLATTN_FLOAT16, 1.0f, s + 50, "f16 Q,K + f32 V -> f16 O");
    /* scores far above 65504 are fine: accumulation is float32 (|q|,|k| up to 300,
     * d_k 40: scores up to ~10^5 / sqrt(40)) */
    half_case(CLATTN_FLOAT16, 7, CLATTN_FLOAT32, 300.0f, s + 60, "f16 inputs with scores > 65504");
}
END_TEST

START_TEST(half_conversions)
{
    /* exact values, rounding ties to even, overflow, NaN, subnormals */
    ck_assert_uint_eq(clattn_f32_to_f16(1.0f), 0x3c00);
    ck_assert_uint_eq(clattn_f32_to_f16(-2.0f), 0xc000);
    ck_assert_uint_eq(clattn_f32_to_f16(65504.0f), 0x7bff);
    ck_assert_uint_eq(clattn_f32_to_f16(65520.0f), 0x7c00);
    ck_assert_uint_eq(clattn_f32_to_f16(1.0f + 0x1p-11f), 0x3c00); /* tie → even */
    ck_assert_uint_eq(clattn_f32_to_f16(1.0f + 0x3p-11f), 0x3c02); /* tie → even (up) */
    ck_assert_uint_eq(clattn_f32_to_f16(0x1p-24f), 0x0001);
    ck_assert_uint_eq(clattn_f32_to_f16(0x1p-25f), 0x0000); /* tie → even (zero) */
    ck_assert_uint_eq(clattn_f32_to_f16(0x3p-25f), 0x0002);
    ck_assert(isnan(clattn_f16_to_f32(clattn_f32_to_f16(NAN))));
    ck_assert(clattn_f16_to_f32(0x0001) == 0x1p-24f);
    ck_assert(clattn_f16_to_f32(0x7c00) == INFINITY);
    ck_assert_uint_eq(clattn_f32_to_bf16(1.0f), 0x3f80);
    ck_assert_uint_eq(clattn_f32_to_bf16(1.0f + 0x1p-8f), 0x3f80); /* tie → even */
    ck_assert_uint_eq(clattn_f32_to_bf16(1.0f + 0x3p-8f), 0x3f82);
    ck_assert(isnan(clattn_bf16_to_f32(clattn_f32_to_bf16(NAN))));
    for (uint32_t h = 0; h < 0x10000u; h++) /* every finite half survives a round trip */
        if ((h & 0x7c00u) != 0x7c00u)
            ck_assert_uint_eq(clattn_f32_to_f16(clattn_f16_to_f32((uint16_t)h)), h);
}
END_TEST

/* ---- merge of partial results ---------------------------------------------------------- */

/* Splits the keys into `parts` uneven ranges, computes each range with kv_start (causal
 * masks see absolute positions), merges, and compares O and LSE with the unsplit call. */
static void merge_case(int parts, clattn_mask mask, uint32_t seed)
{
    tu_problem p;
    const int64_t n_q = 19, n_kv = 53, d = 24;
    tu_problem_init(&p, 2, 2, 1, n_q, n_kv, d, d, seed, seed + 1, seed + 2, 0);
    const size_t n_o = (size_t)(p.b * p.h_q * n_q * d), rows = (size_t)(p.b * p.h_q * n_q);
    clattn_attention_desc desc = clattn_attention_desc_default();
    desc.mask = mask;
    desc.q_start = n_kv - n_q; /* the queries are the last n_q positions */
    float *full = tu_alloc(n_o, 0.0f), *full_lse = tu_alloc(rows, 0.0f);
    clattn_tensor t_full = tu_problem_o(&p, full);
    clattn_tensor t_full_lse = clattn_tensor_host(full_lse, p.b, p.h_q, n_q, 1);
    desc.lse = &t_full_lse;
    TU_ASSERT_OK(clattn_attention(tu_ctx(), &desc, &p.tq, &p.tk, &p.tv, &t_full), "unsplit");

    /* uneven cut points */
    int64_t cut[9];
    cut[0] = 0;
    for (int i = 1; i < parts; i++)
        cut[i] = n_kv * i * i / (parts * parts) + i;
    cut[parts] = n_kv;
    float *o_parts = tu_alloc(n_o * (size_t)parts, 0.0f),
          *l_parts = tu_alloc(rows * (size_t)parts, 0.0f);
    clattn_tensor to[8], tl[8];
    for (int i = 0; i < parts; i++) {
        clattn_tensor tk = p.tk, tv = p.tv;
        tk.shape[2] = tv.shape[2] = cut[i + 1] - cut[i];
        tk.strides[0] = n_kv * d, tk.strides[1] = n_kv * d, tk.strides[2] = d, tk.strides[3] = 1;
        tv.strides[0] = n_kv * d, tv.strides[1] = n_kv * d, tv.strides[2] = d, tv.strides[3] = 1;
        tk.offset = tv.offset = cut[i] * d;
        to[i] = tu_problem_o(&p, o_parts + n_o * (size_t)i);
        tl[i] = clattn_tensor_host(l_parts + rows * (size_t)i, p.b, p.h_q, n_q, 1);
        clattn_attention_desc dp = desc;
        dp.kv_start = cut[i];
        dp.lse = &tl[i];
        dp.algorithm = tu_algorithms[i % 2];
        TU_ASSERT_OK(clattn_attention(tu_ctx(), &dp, &p.tq, &tk, &tv, &to[i]), "part %d", i);
    }
    float *merged = tu_alloc(n_o, -7.0f), *merged_lse = tu_alloc(rows, -7.0f);
    clattn_tensor tm = tu_problem_o(&p, merged);
    clattn_tensor tml = clattn_tensor_host(merged_lse, p.b, p.h_q, n_q, 1);
    TU_ASSERT_OK(clattn_merge(tu_ctx(), (size_t)parts, to, tl, &tm, &tml), "merge of %d", parts);
    char what[96];
    const tu_tol tol = {1e-6, 1e-6};
    snprintf(what, sizeof what, "merge of %d parts (%s) O", parts, tu_mask_name(mask));
    TU_ASSERT_CLOSE(what, &tm, NULL, full, tol);
    snprintf(what, sizeof what, "merge of %d parts (%s) LSE", parts, tu_mask_name(mask));
    TU_ASSERT_CLOSE(what, &tml, NULL, full_lse, tol);
    /* in place on part 0 */
    TU_ASSERT_OK(clattn_merge(tu_ctx(), (size_t)parts, to, tl, &to[0], &tl[0]), "in place");
    snprintf(what, sizeof what, "in-place merge of %d parts (%s) O", parts, tu_mask_name(mask));
    TU_ASSERT_CLOSE(what, &to[0], NULL, full, tol);
    free(full);
    free(full_lse);
    free(o_parts);
    free(l_parts);
    free(merged);
    free(merged_lse);
    tu_problem_free(&p);
}

START_TEST(merge_split_keys)
{
    const uint32_t s = tu_seed() ^ 0x3e7u;
    const int parts[3] = {2, 3, 7};
    for (int i = 0; i < 3; i++) {
        merge_case(parts[i], CLATTN_MASK_NONE, s + (uint32_t)i);
        merge_case(parts[i], CLATTN_MASK_CAUSAL_TOP_LEFT, s + 10 + (uint32_t)i);
    }
}
END_TEST

START_TEST(merge_rejects_bad_parts)
{
    float o[8], l[2];
    clattn_tensor to = clattn_tensor_host(o, 1, 1, 2, 4), tl = clattn_tensor_host(l, 1, 1, 2, 1);
    clattn_tensor bad = clattn_tensor_host(l, 1, 1, 3, 1);
    ck_assert_int_eq(clattn_merge(tu_ctx(), 0, &to, &tl, &to, NULL), CLATTN_ERROR_INVALID_ARGUMENT);
    ck_assert_int_eq(clattn_merge(tu_ctx(), 1, &to, &bad, &to, NULL), CLATTN_ERROR_INVALID_SHAPE);
    ck_assert_msg(strstr(clattn_last_error_message(tu_ctx()), "lse_parts[0]"), "%s",
                  clattn_last_error_message(tu_ctx()));
    ck_assert_int_eq(clattn_merge(tu_ctx(), 1, &to, &tl, &to, &to), CLATTN_ERROR_INVALID_SHAPE);
}
END_TEST

/* ---- validation of the new desc fields ------------------------------------------------ */

START_TEST(feature_validation)
{
    tu_problem p;
    tu_problem_init(&p, 2, 2, 1, 3, 4, 8, 8, 1, 2, 3, 0);
    float out[2 * 2 * 3 * 8];
    tu_fill_value(out, 96, -7.0f);
    clattn_tensor o = tu_problem_o(&p, out);
    struct {
        const char *what;
        clattn_status want;
        const char *msg;
    } expect[7] = {{"kv_lens past n_kv", CLATTN_ERROR_INVALID_SHAPE, "kv_lens[1]"},
                   {"negative q_lens", CLATTN_ERROR_INVALID_SHAPE, "q_lens[0]"},
                   {"NaN slope", CLATTN_ERROR_INVALID_ARGUMENT, "alibi_slopes[1]"},
                   {"negative softcap", CLATTN_ERROR_INVALID_ARGUMENT, "softcap"},
                   {"bad masked_rows", CLATTN_ERROR_INVALID_ARGUMENT, "masked_rows"},
                   {"mask of wrong shape", CLATTN_ERROR_INVALID_SHAPE, "mask_tensor"},
                   {"float16 mask", CLATTN_ERROR_INVALID_ARGUMENT, "mask_tensor"}};
    for (int c = 0; c < 7; c++) {
        clattn_attention_desc d = clattn_attention_desc_default();
        int32_t lens[2] = {4, 5}, qlens[2] = {-1, 1};
        float slopes[2] = {0.5f, NAN};
        uint8_t keep[2 * 3 * 4] = {0};
        clattn_tensor mt = clattn_tensor_host(keep, 1, 1, 3, c == 5 ? 3 : 4);
        mt.dtype = c == 6 ? CLATTN_FLOAT16 : CLATTN_BOOL;
        if (c == 0)
            d.kv_lens = lens;
        if (c == 1)
            d.q_lens = qlens;
        if (c == 2)
            d.alibi_slopes = slopes;
        if (c == 3)
            d.softcap = -1.0f;
        if (c == 4)
            d.masked_rows = 7;
        if (c >= 5)
            d.mask_tensor = &mt;
        clattn_status st = clattn_attention(tu_ctx(), &d, &p.tq, &p.tk, &p.tv, &o);
        ck_assert_msg(st == expect[c].want, "%s: status %s (%s)", expect[c].what,
                      clattn_status_string(st), clattn_last_error_message(tu_ctx()));
        ck_assert_msg(strstr(clattn_last_error_message(tu_ctx()), expect[c].msg),
                      "%s: message \"%s\" lacks \"%s\"", expect[c].what,
                      clattn_last_error_message(tu_ctx()), expect[c].msg);
        tu_assert_untouched(expect[c].what, out, 0, 96, -7.0f);
    }
    tu_problem_free(&p);
}
END_TEST

/* ALiBi distances are 64-bit: positions past 2^31 (q_start 3e9, a tiny slope) give
 * the reference's LSE, not a wrapped distance (found by a fresh review: the distance
 * was once computed in 32 bits). */
START_TEST(alibi_far_positions)
{
    tu_problem p;
    tu_problem_init(&p, 1, 2, 1, 3, 5, 4, 4, 81, 82, 83, 0);
    float slopes[2] = {1e-9f, 2e-9f};
    clattn_attention_desc d = clattn_attention_desc_default();
    d.alibi_slopes = slopes;
    d.q_start = 3000000000LL;
    for (int a = 0; a < 2; a++) {
        float o[24], lse[6], ro[24], rlse[6];
        clattn_tensor to = tu_problem_o(&p, o), tro = tu_problem_o(&p, ro);
        clattn_tensor tl = clattn_tensor_host(lse, 1, 2, 3, 1),
                      trl = clattn_tensor_host(rlse, 1, 2, 3, 1);
        clattn_attention_desc dd = d, rd = d;
        dd.algorithm = tu_algorithms[a];
        dd.lse = &tl;
        rd.lse = &trl;
        ck_assert_int_eq(clattn_reference_attention(&rd, &p.tq, &p.tk, &p.tv, &tro),
                         CLATTN_SUCCESS);
        TU_ASSERT_OK(clattn_attention(tu_ctx(), &dd, &p.tq, &p.tk, &p.tv, &to), "alibi far");
        char what[64];
        snprintf(what, sizeof what, "ALiBi at q_start 3e9 [%s] LSE",
                 tu_algorithm_name(tu_algorithms[a]));
        TU_ASSERT_CLOSE(what, &tl, NULL, rlse, TU_TOL_DEFAULT);
        TU_ASSERT_CLOSE(what, &to, NULL, ro, TU_TOL_DEFAULT);
    }
    tu_problem_free(&p);
}
END_TEST

/* One problem (batch 1, d_k = d_v = d, Q/K/V from seeds seed, seed + 1, seed + 2)
 * against the reference with each of the n_algs algorithms. */
static void large_head_dims(int64_t h_q, int64_t h_kv, int64_t n_q, int64_t n_kv, int64_t d,
                            clattn_mask mask, const clattn_algorithm *algs, int n_algs,
                            uint32_t seed)
{
    tu_problem p;
    tu_problem_init(&p, 1, h_q, h_kv, n_q, n_kv, d, d, seed, seed + 1, seed + 2, 4);
    clattn_attention_desc desc = clattn_attention_desc_default();
    desc.mask = mask;
    float *r = tu_reference(&p, &desc, NULL);
    for (int a = 0; a < n_algs; a++) {
        float *o = tu_run(&p, &desc, algs[a]);
        clattn_tensor to = tu_problem_o(&p, o);
        char what[128];
        snprintf(what, sizeof what, "h_q %lld h_kv %lld n_q %lld n_kv %lld d_k = d_v = %lld [%s]",
                 (long long)h_q, (long long)h_kv, (long long)n_q, (long long)n_kv, (long long)d,
                 tu_algorithm_name(algs[a]));
        TU_ASSERT_CLOSE(what, &to, NULL, r, TU_TOL_DEFAULT);
        free(o);
    }
    free(r);
    tu_problem_free(&p);
}

/* Head dims up to 512 on both algorithms (the fused kernel's local tiles shrink). */
START_TEST(head_dim_512)
{
    large_head_dims(1, 1, 21, 35, 512, CLATTN_MASK_CAUSAL_TOP_LEFT, tu_algorithms, 2, 91);
}
END_TEST

/* The decode kernel at the largest head dims: no local memory (the tiled kernel's 16 K
 * and V rows would not fit it), private arrays of 4096 floats per row; GQA. Slow: the
 * program takes about 40 s to build on PoCL. */
START_TEST(decode_head_dim_4096)
{
    const clattn_algorithm fused = CLATTN_ALGORITHM_FUSED;
    large_head_dims(4, 2, 3, 40, 4096, CLATTN_MASK_CAUSAL_BOTTOM_RIGHT, &fused, 1, 94);
}
END_TEST

/* Accuracy over many keys (SEMANTICS.md): one query against 2^20 identical K and V rows
 * (stride 0 on the key dimension, so nothing large is stored) has equal weights, and its
 * exact output is that V row. The decode kernel sums each step of 16 keys on its own
 * before adding it to the row's accumulator; adding every key to the accumulator instead
 * (the kernel before) was off by 9.4e-3 here, this by 6.8e-4: within 4e-3·max|v|, with the
 * measured error printed. In the CPU family twice: decode.cl over all 2^20 keys (split-KV
 * off: the automatic count would split this one-work-item call, and each chunk's shorter
 * sum hid that mutant, D17: 4.2e-4), then as the plan chooses (split: 2.5e-5). */
START_TEST(decode_long_equal_weights)
{
    enum { D = 64 };
    const int64_t n_kv = (int64_t)1 << 20;
    float q[D], kr[D], vr[D], out[D];
    tu_fill_gen(q, D, 3u, 0.1f);
    tu_fill_gen(kr, D, 4u, 1.0f);
    tu_fill_gen(vr, D, 5u, 1.0f);
    clattn_tensor tq = clattn_tensor_host(q, 1, 1, 1, D), to = clattn_tensor_host(out, 1, 1, 1, D);
    clattn_tensor tk = clattn_tensor_host(kr, 1, 1, n_kv, D),
                  tv = clattn_tensor_host(vr, 1, 1, n_kv, D);
    const int64_t st[4] = {0, 0, 0, 1};
    memcpy(tk.strides, st, sizeof st);
    memcpy(tv.strides, st, sizeof st);
    tk.broadcast = tv.broadcast = CLATTN_BROADCAST(2);
    clattn_attention_desc desc = clattn_attention_desc_default();
    clattn_context *ctx = tu_ctx();
    const bool cpu = clattn_context_kernel_family(ctx) == CLATTN_KERNEL_FAMILY_CPU;
    for (int pass = cpu ? 0 : 1; pass < 2; pass++) {
        const char *how = pass ? "splits chosen" : "one split";
        TU_ASSERT_OK(clattn_context_set_decode_splits(ctx, pass ? 0 : 1), "%s", how);
        TU_ASSERT_OK(clattn_attention(ctx, &desc, &tq, &tk, &tv, &to),
                     "decode over 2^20 equal keys, %s", how);
        double worst = 0.0, vmax = 0.0;
        for (int c = 0; c < D; c++) {
            worst = fmax(worst, fabs((double)out[c] - vr[c]));
            vmax = fmax(vmax, fabs((double)vr[c]));
        }
        printf("decode over 2^20 equal weights, %s: max |O - v| = %.3g (max |v| %.3g)\n", how,
               worst, vmax);
        ck_assert_msg(worst <= 4e-3 * vmax,
                      "decode over 2^20 equal weights, %s: max |O - v| = %g > %g", how, worst,
                      4e-3 * vmax);
    }
    TU_ASSERT_OK(clattn_context_set_decode_splits(ctx, 0), "splits 0");
}
END_TEST

/* One key far above every other (a score difference of about 400, so exp of the
 * difference overflows float32) at each place of a step of 128 keys, decoded by each
 * family and by the tiled kernels: the row max must come from every key of the step (a
 * max taken over part of it makes exp overflow: inf, then NaN). O is that key's V row,
 * the LSE its score. */
START_TEST(decode_one_dominant_key_anywhere)
{
    enum { D = 16, NKV = 300 };
    clattn_context *ctx = tu_ctx();
    const clattn_kernel_family family = clattn_context_kernel_family(ctx);
    float q[4 * D], k[NKV * D], v[NKV * D], o[4 * D], lse[4], ro[4 * D], rl[4];
    tu_fill_gen(v, NKV * D, 77u, 1.0f);
    static const int places[] = {3, 70, 127, 200, 299};
    for (int f = 0; f < 2; f++) {
        TU_ASSERT_OK(clattn_context_set_kernel_family(ctx, f ? CLATTN_KERNEL_FAMILY_GPU
                                                             : CLATTN_KERNEL_FAMILY_CPU),
                     "family");
        for (int pl = 0; pl < 5; pl++)
            for (int n_q = 1; n_q <= 4; n_q += 3) {
                tu_fill_gen(k, NKV * D, 78u, 0.05f);
                for (int i = 0; i < n_q * D; i++)
                    q[i] = i % D == 0 ? 20.0f : 0.0f;
                for (int c = 0; c < D; c++) /* score 20·80/4 = 400 (scale 1/4) */
                    k[places[pl] * D + c] = c == 0 ? 80.0f : 0.0f;
                clattn_tensor tq = clattn_tensor_host(q, 1, 1, n_q, D),
                              tk = clattn_tensor_host(k, 1, 1, NKV, D),
                              tv = clattn_tensor_host(v, 1, 1, NKV, D),
                              to = clattn_tensor_host(o, 1, 1, n_q, D),
                              tro = clattn_tensor_host(ro, 1, 1, n_q, D),
                              tl = clattn_tensor_host(lse, 1, 1, n_q, 1),
                              trl = clattn_tensor_host(rl, 1, 1, n_q, 1);
                clattn_attention_desc d = clattn_attention_desc_default(), rd;
                d.work_group_size = n_q == 4 ? 16 : 0; /* 4 queries: the tiled kernel */
                rd = d;
                d.lse = &tl;
                rd.lse = &trl;
                char what[160];
                snprintf(what, sizeof what, "%s family, n_q %d, the dominant key at %d",
                         f ? "GPU" : "CPU", n_q, places[pl]);
                TU_ASSERT_OK(clattn_attention(ctx, &d, &tq, &tk, &tv, &to), "%s", what);
                TU_ASSERT_OK(clattn_reference_attention(&rd, &tq, &tk, &tv, &tro), "%s", what);
                TU_ASSERT_CLOSE(what, &to, NULL, ro, TU_TOL_DEFAULT);
                TU_ASSERT_CLOSE(what, &tl, NULL, rl, TU_TOL_DEFAULT);
            }
    }
    TU_ASSERT_OK(clattn_context_set_kernel_family(ctx, family), "restore family");
}
END_TEST

/* The unfused workspace is kept by the context between calls (PERFORMANCE.md): a call
 * after a bigger one, or one that grows it, must not see the earlier call's scores. The
 * masked (sparse) calls skip key tiles; with a stale workspace behind them, a kernel that
 * read a skipped tile would give a wrong row. */
START_TEST(unfused_workspace_reused_between_calls)
{
    static const struct {
        int64_t n_q, n_kv;
        clattn_mask mask;
        int lens;
    } calls[] = {
        {96, 80, CLATTN_MASK_NONE, 0},            /* allocates */
        {33, 47, CLATTN_MASK_CAUSAL_TOP_LEFT, 1}, /* smaller, masked tiles over stale data */
        {40, 131, CLATTN_MASK_NO_SELF, 0},        /* grows it */
        {17, 64, CLATTN_MASK_CAUSAL_BOTTOM_RIGHT, 1},
    };
    for (size_t c = 0; c < sizeof calls / sizeof calls[0]; c++) {
        tu_problem p;
        tu_problem_init(&p, 2, 2, 1, calls[c].n_q, calls[c].n_kv, 16, 8, 31 + (uint32_t)c,
                        41 + (uint32_t)c, 51 + (uint32_t)c, 0);
        clattn_attention_desc desc = clattn_attention_desc_default();
        desc.mask = calls[c].mask;
        int32_t kv_lens[2] = {(int32_t)(calls[c].n_kv / 3), (int32_t)calls[c].n_kv};
        if (calls[c].lens)
            desc.kv_lens = kv_lens;
        float *got = tu_run(&p, &desc, CLATTN_ALGORITHM_UNFUSED);
        float *exp = tu_reference(&p, &desc, NULL);
        clattn_tensor to = tu_problem_o(&p, got);
        char what[64];
        snprintf(what, sizeof what, "unfused call %zu on a kept workspace", c);
        TU_ASSERT_CLOSE(what, &to, NULL, exp, TU_TOL_DEFAULT);
        free(got);
        free(exp);
        tu_problem_free(&p);
    }
}
END_TEST

int main(void)
{
    tu_seed_init(0x0f3a7u);
    Suite *s = suite_create("features");
    /* one test case per area, so CK_RUN_CASE=merge (etc.) runs one alone (oclgrind) */
    TCase *tc[6];
    static const char *const names[6] = {"validation", "storage", "masks",
                                         "merge",      "sweep",   "decode"};
    for (int a = 0; a < 6; a++) {
        tc[a] = tcase_create(names[a]);
        tcase_set_timeout(tc[a], 900);
        suite_add_tcase(s, tc[a]);
    }
    tcase_add_test(tc[0], feature_validation);
    tcase_add_test(tc[1], half_conversions);
    tcase_add_test(tc[1], float16_and_bfloat16_storage);
    tcase_add_test(tc[1], decode_long_equal_weights);
    tcase_add_test(tc[2], masked_keys_contribute_nothing);
    tcase_add_test(tc[2], sliding_window_one_sided);
    tcase_add_test(tc[2], head_dim_512);
    tcase_add_test(tc[5], decode_grouped_all_terms); /* alone: test_oclgrind.sh runs it */
    tcase_add_test(tc[2], alibi_far_positions);
    tcase_add_test(tc[2], decode_one_dominant_key_anywhere);
    tcase_add_test(tc[2], unfused_workspace_reused_between_calls);
    tcase_add_test(tc[3], merge_rejects_bad_parts);
    tcase_add_test(tc[3], merge_split_keys);
    tcase_add_test(tc[4], random_feature_sweep);
    tcase_add_test(tc[4], decode_grouped_sweep);
    tcase_add_test(tc[4], decode_head_dim_4096);
    tcase_add_test(tc[4], decode_splits_every_term); /* GPU-family programs: slow to build */
    tcase_add_test(tc[4], decode_splits_long_rows);
    /* the sweep builds a program per random feature combination: ctest runs it apart,
     * labelled slow (test_features_sweep, CK_INCLUDE_TAGS=slow) */
    tcase_set_tags(tc[4], "slow");
    return tu_run_suite(s);
}
