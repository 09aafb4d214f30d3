/* Paged K/V (clattn_paged_kv, issue 14): K and V read from pools of pages through a
 * block table, against the same call on K and V gathered into contiguous views.
 *
 * Each configuration fills a pool, hands each sequence pages in shuffled order (the
 * first page shared by two sequences: a common prefix), poisons with NaN every pool
 * page no sequence uses, the slots past each sequence's length and the contiguous rows
 * past it, and sets table entries past each sequence's pages to −1. Checked:
 * - the paged call gives the same bits (O and LSE) as the contiguous call, with the
 *   CPU and the GPU kernel family (decode kernel, split-KV decoding, tiled kernels);
 * - both against the float64 reference: O and LSE within 1e-5 + 1e-5·|expected|; the
 *   reference itself gives the same doubles paged and contiguous;
 * - the enqueue call with the table in a cl_mem gives the same bits; a device table
 *   with entries outside the pool reads inside it (clamped; oclgrind runs this);
 * - every status of a bad paged call (table, pools, algorithm, weights, backward,
 *   stages, several devices).
 * Seeds: printed; CLATTN_TEST_SEED overrides the base seed. */
#include "testutil.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static uint32_t rng_state;

static uint32_t rnd(uint32_t n)
{
    rng_state = tu_lowbias32(rng_state + 0x9E3779B9u);
    return n ? rng_state % n : 0;
}

static int64_t clattn_ceil_div_test(int64_t a, int64_t b)
{
    return (a + b - 1) / b;
}

/* One paged problem: pools, table, and the contiguous K and V gathered from them. */
typedef struct paged {
    int64_t b, h_q, h_kv, n_q, d_k, d_v, page_size, max_pages, num_pages, n_kv;
    bool fa_layout; /* pools [pages, slot, h_kv, d] (FlashAttention's) */
    float *q, *kpool, *vpool, *k, *v;
    int32_t *table, *lens;
    clattn_tensor tq, tkp, tvp, tk, tv;
    clattn_paged_kv pg;
    char text[256];
} paged;

static int64_t pool_at(const paged *p, int64_t page, int64_t h, int64_t slot, int64_t c, int64_t d)
{
    return p->fa_layout ? ((page * p->page_size + slot) * p->h_kv + h) * d + c
                        : ((page * p->h_kv + h) * p->page_size + slot) * d + c;
}

static clattn_tensor pool_view(const paged *p, float *data, int64_t d)
{
    clattn_tensor t = clattn_tensor_host(data, p->num_pages, p->h_kv, p->page_size, d);
    if (p->fa_layout) {
        t.strides[0] = p->page_size * p->h_kv * d;
        t.strides[1] = d;
        t.strides[2] = p->h_kv * d;
        t.strides[3] = 1;
    }
    return t;
}

/* lens NULL: every sequence fills its max_pages pages */
static void paged_init(paged *p, int64_t b, int64_t h_q, int64_t h_kv, int64_t n_q, int64_t d_k,
                       int64_t d_v, int64_t page_size, int64_t max_pages, const int32_t *lens,
                       bool fa_layout, uint32_t seed)
{
    memset(p, 0, sizeof *p);
    p->b = b, p->h_q = h_q, p->h_kv = h_kv, p->n_q = n_q, p->d_k = d_k, p->d_v = d_v;
    p->page_size = page_size, p->max_pages = max_pages, p->n_kv = page_size * max_pages;
    p->fa_layout = fa_layout;
    rng_state = seed;
    if (lens) {
        p->lens = malloc(sizeof(int32_t) * (size_t)b);
        memcpy(p->lens, lens, sizeof(int32_t) * (size_t)b);
    }
    /* pages: each sequence's own, the first one shared by sequences 0 and 1 when both
     * fill it, and two pages nobody uses */
    p->table = malloc(sizeof(int32_t) * (size_t)(b * max_pages));
    for (int64_t i = 0; i < b * max_pages; i++)
        p->table[i] = -1;
    int64_t need = 2;
    for (int64_t s = 0; s < b; s++)
        need += clattn_ceil_div_test(lens ? lens[s] : p->n_kv, page_size);
    p->num_pages = need;
    /* the sequences' pages in shuffled order; the two unused ones are pages need/2 and
     * need/2 + 1, so that the first and last pages of the pool hold keys (a device table
     * clamped into the pool reads them) */
    int32_t *order = malloc(sizeof(int32_t) * (size_t)need);
    for (int64_t i = 0, id = 0; id < need; id++)
        if (id != need / 2 && id != need / 2 + 1)
            order[i++] = (int32_t)id;
    order[need - 2] = (int32_t)(need / 2);
    order[need - 1] = (int32_t)(need / 2 + 1);
    for (int64_t i = need - 3; i > 0; i--) { /* shuffled */
        const int64_t j = rnd((uint32_t)(i + 1));
        const int32_t t = order[i];
        order[i] = order[j];
        order[j] = t;
    }
    int64_t next = 0;
    bool *used = calloc((size_t)need, sizeof(bool));
    for (int64_t s = 0; s < b; s++) {
        const int64_t len = lens ? lens[s] : p->n_kv;
        for (int64_t pg = 0; pg < clattn_ceil_div_test(len, page_size); pg++) {
            const int64_t len0 = lens ? lens[0] : p->n_kv;
            if (s == 1 && pg == 0 && len >= page_size && len0 >= page_size)
                p->table[s * max_pages] = p->table[0]; /* a shared prefix page */
            else
                p->table[s * max_pages + pg] = order[next++];
            used[p->table[s * max_pages + pg]] = true;
        }
    }
    free(order);
    /* pools: values where a sequence has a key, NaN elsewhere */
    const size_t nk = (size_t)(need * h_kv * page_size * d_k),
                 nv = (size_t)(need * h_kv * page_size * d_v);
    p->kpool = tu_alloc(nk, NAN);
    p->vpool = tu_alloc(nv, NAN);
    p->k = tu_alloc((size_t)(b * h_kv * p->n_kv * d_k), NAN);
    p->v = tu_alloc((size_t)(b * h_kv * p->n_kv * d_v), NAN);
    for (int64_t s = 0; s < b; s++) {
        const int64_t len = lens ? lens[s] : p->n_kv;
        for (int64_t j = 0; j < len; j++) {
            const int64_t page = p->table[s * max_pages + j / page_size], slot = j % page_size;
            for (int64_t h = 0; h < h_kv; h++) {
                for (int64_t c = 0; c < d_k; c++) {
                    const int64_t at = pool_at(p, page, h, slot, c, d_k);
                    p->kpool[at] = tu_gen(seed + 1, (uint32_t)at);
                    p->k[((s * h_kv + h) * p->n_kv + j) * d_k + c] = p->kpool[at];
                }
                for (int64_t c = 0; c < d_v; c++) {
                    const int64_t at = pool_at(p, page, h, slot, c, d_v);
                    p->vpool[at] = tu_gen(seed + 2, (uint32_t)at);
                    p->v[((s * h_kv + h) * p->n_kv + j) * d_v + c] = p->vpool[at];
                }
            }
        }
    }
    free(used);
    p->q = tu_alloc((size_t)(b * h_q * n_q * d_k), 0.0f);
    tu_fill_gen(p->q, (size_t)(b * h_q * n_q * d_k), seed + 3, 1.0f);
    p->tq = clattn_tensor_host(p->q, b, h_q, n_q, d_k);
    p->tk = clattn_tensor_host(p->k, b, h_kv, p->n_kv, d_k);
    p->tv = clattn_tensor_host(p->v, b, h_kv, p->n_kv, d_v);
    p->tkp = pool_view(p, p->kpool, d_k);
    p->tvp = pool_view(p, p->vpool, d_v);
    p->pg.block_table = p->table;
    p->pg.max_pages = max_pages;
    snprintf(p->text, sizeof p->text,
             "b %lld h %lld/%lld n_q %lld d %lld/%lld page_size %lld max_pages %lld pages %lld "
             "%s layout, lens %s (seed 0x%x)",
             (long long)b, (long long)h_q, (long long)h_kv, (long long)n_q, (long long)d_k,
             (long long)d_v, (long long)page_size, (long long)max_pages, (long long)need,
             fa_layout ? "FlashAttention" : "clattn", lens ? "set" : "full", seed);
}

static void paged_free(paged *p)
{
    free(p->q);
    free(p->kpool);
    free(p->vpool);
    free(p->k);
    free(p->v);
    free(p->table);
    free(p->lens);
}

/* O and LSE of one call: paged (pools and table) or on the gathered contiguous K, V */
typedef struct result {
    float *o, *lse;
} result;

static void result_free(result *r)
{
    free(r->o);
    free(r->lse);
}

static clattn_status run(const paged *p, const clattn_attention_desc *base, bool use_pages,
                         bool reference, result *r)
{
    const size_t no = (size_t)(p->b * p->h_q * p->n_q * p->d_v),
                 nl = (size_t)(p->b * p->h_q * p->n_q);
    r->o = tu_alloc(no, -7.0f);
    r->lse = tu_alloc(nl, -7.0f);
    clattn_tensor to = clattn_tensor_host(r->o, p->b, p->h_q, p->n_q, p->d_v);
    clattn_tensor tl = clattn_tensor_host(r->lse, p->b, p->h_q, p->n_q, 1);
    clattn_attention_desc d = *base;
    d.kv_lens = p->lens;
    d.lse = &tl;
    d.paged = use_pages ? &p->pg : NULL;
    const clattn_tensor *k = use_pages ? &p->tkp : &p->tk, *v = use_pages ? &p->tvp : &p->tv;
    return reference ? clattn_reference_attention(&d, &p->tq, k, v, &to)
                     : clattn_attention(tu_ctx(), &d, &p->tq, k, v, &to);
}

static void assert_same_bits(const char *what, const float *a, const float *b, size_t n,
                             const char *text)
{
    tu_assert_same_bits(a, b, n, "%s: %s (expected: the contiguous or host-input call)", text,
                        what);
}

/* The checks of one configuration with the context's current kernel family. */
static void check_config(const paged *p, const clattn_attention_desc *desc, const char *family)
{
    char text[400];
    snprintf(text, sizeof text, "%s, %s family", p->text, family);
    const size_t no = (size_t)(p->b * p->h_q * p->n_q * p->d_v),
                 nl = (size_t)(p->b * p->h_q * p->n_q);
    result paged_r, flat_r, ref_paged, ref_flat;
    TU_ASSERT_OK(run(p, desc, true, false, &paged_r), "%s: paged call", text);
    TU_ASSERT_OK(run(p, desc, false, false, &flat_r), "%s: contiguous call", text);
    ck_assert_int_eq(run(p, desc, true, true, &ref_paged), CLATTN_SUCCESS);
    ck_assert_int_eq(run(p, desc, false, true, &ref_flat), CLATTN_SUCCESS);
    assert_same_bits("O", paged_r.o, flat_r.o, no, text);
    assert_same_bits("LSE", paged_r.lse, flat_r.lse, nl, text);
    assert_same_bits("reference O", ref_paged.o, ref_flat.o, no, text);
    double *exp_o = malloc(sizeof(double) * no), *exp_l = malloc(sizeof(double) * nl);
    for (size_t i = 0; i < no; i++)
        exp_o[i] = ref_flat.o[i];
    for (size_t i = 0; i < nl; i++)
        exp_l[i] = ref_flat.lse[i];
    const clattn_tensor to = clattn_tensor_host(paged_r.o, p->b, p->h_q, p->n_q, p->d_v);
    const clattn_tensor tl = clattn_tensor_host(paged_r.lse, p->b, p->h_q, p->n_q, 1);
    char what[460];
    snprintf(what, sizeof what, "%s: O", text);
    TU_ASSERT_CLOSE(what, &to, exp_o, NULL, TU_TOL_DEFAULT);
    snprintf(what, sizeof what, "%s: LSE", text);
    TU_ASSERT_CLOSE(what, &tl, exp_l, NULL, TU_TOL_DEFAULT);
    free(exp_o);
    free(exp_l);
    result_free(&paged_r);
    result_free(&flat_r);
    result_free(&ref_paged);
    result_free(&ref_flat);
    printf("paged: %s: same bits as contiguous, within tolerance of the reference\n", text);
}

/* Configurations: decode (MHA, GQA with several tokens, split-KV), tiled prefill, page
 * sizes 1, 5, 7, 8, 16 and 256, both pool layouts, every score term in one. */
typedef struct config {
    int64_t b, h_q, h_kv, n_q, d_k, d_v, page_size, max_pages;
    int32_t lens[3]; /* lens[0] < 0: NULL (full) */
    bool fa_layout, terms;
} config;

static const config configs[] = {
    /* the README's suite: GQA with 3 tokens and every term, split-KV */
    {2, 8, 2, 3, 40, 24, 7, 20, {140, 60, 0}, true, true},
    {2, 8, 2, 1, 128, 128, 256, 3, {768, 300, 0}, true, false}, /* split-KV: 2 splits */
    /* whole-vector rows in pages of 8: decode.cl's steps of 16 keys cross pages (its plain
     * one-page loads must not be taken) */
    {2, 8, 4, 2, 64, 32, 8, 12, {90, 41, 0}, false, false}, /* (and 2 of 4 KV heads per item) */
    /* test_paged_sweep (CI's slow pass): MHA decode in clattn's pool layout (the last
     * sequence fills its block-table row: a read past it leaves the table, which oclgrind
     * reports), head dims 4, and the tiled kernels */
    {3, 4, 4, 1, 64, 64, 16, 9, {37, 0, 144}, false, false},
    {2, 4, 2, 3, 4, 4, 5, 8, {40, 17, 0}, true, false}, /* head dims 4 (PoCL once broke it) */
    {2, 4, 2, 37, 32, 48, 5, 20, {100, 71, 0}, true, true},
    {1, 2, 1, 20, 16, 16, 1, 50, {-1, 0, 0}, false, false},
    /* decode.cl's steps of 16 keys over pages of 8 with one KV head, the pool's last page
     * among the sequence's: a step ahead that crosses pages must be prefetched row by row
     * through the table, not as one stretch (its rows would leave the pool, which oclgrind
     * reports: mutant PF02) */
    {1, 2, 1, 1, 16, 16, 8, 24, {-1, 0, 0}, false, false},
    {1, 4, 1, 2, 16, 16, 8, 24, {-1, 0, 0}, false, false},
};
#define N_DECODE_CONFIGS 3 /* (the README suite's: decode configurations 0 to 2) */

static void desc_for(const config *c, clattn_attention_desc *d, float *slopes)
{
    *d = clattn_attention_desc_default();
    if (!c->terms)
        return;
    d->mask = CLATTN_MASK_CAUSAL_BOTTOM_RIGHT;
    d->window = 1;
    d->window_left = 50;
    d->window_right = 0;
    d->softcap = 4.0f;
    for (int64_t h = 0; h < c->h_q; h++)
        slopes[h] = exp2f(-(float)(h + 1));
    d->alibi_slopes = slopes;
}

/* The plan of the paged call of configuration p with desc d on the test context */
static void plan_paged(const paged *p, const clattn_attention_desc *d, clattn_plan *plan)
{
    float o1[1];
    clattn_tensor to = clattn_tensor_host(o1, p->b, p->h_q, p->n_q, p->d_v);
    clattn_attention_desc dp = *d;
    dp.paged = &p->pg;
    dp.kv_lens = p->lens;
    TU_ASSERT_OK(clattn_attention_plan(tu_ctx(), &dp, &p->tq, &p->tkp, &p->tvp, &to, plan),
                 "%s: plan", p->text);
}

START_TEST(paged_equals_contiguous)
{
    const config *c = &configs[_i];
    clattn_context *ctx = tu_ctx();
    const clattn_kernel_family family = clattn_context_kernel_family(ctx);
    paged p;
    paged_init(&p, c->b, c->h_q, c->h_kv, c->n_q, c->d_k, c->d_v, c->page_size, c->max_pages,
               c->lens[0] < 0 ? NULL : c->lens, c->fa_layout, tu_seed() + 101u * (uint32_t)_i);
    float slopes[16];
    clattn_attention_desc d;
    desc_for(c, &d, slopes);
    static const clattn_kernel_family fams[2] = {CLATTN_KERNEL_FAMILY_CPU,
                                                 CLATTN_KERNEL_FAMILY_GPU};
    for (int f = 0; f < 2; f++) {
        TU_ASSERT_OK(clattn_context_set_kernel_family(ctx, fams[f]), "set family");
        check_config(&p, &d, f ? "GPU" : "CPU");
        /* the plan names the pages, and the kernels are the ones meant */
        clattn_plan plan;
        plan_paged(&p, &d, &plan);
        ck_assert_msg(strstr(plan.reason, "paged K/V") != NULL, "%s: reason \"%s\"", p.text,
                      plan.reason);
        const char *want = c->n_q > 16 ? (f ? "fused_gpu" : "fused")
                           : f         ? "decode_gpu, split_merge"
                                       : "decode";
        ck_assert_msg(strcmp(plan.kernels, want) == 0, "%s: kernels \"%s\", expected \"%s\"",
                      p.text, plan.kernels, want);
        const char *at = strstr(plan.reason, "split_merge.cl): ");
        size_t splits = 0;
        if (at)
            ck_assert_int_eq(sscanf(at, "split_merge.cl): %zu splits", &splits), 1);
        if (f && p.n_kv >= 512) /* several splits, each reading its own pages */
            ck_assert_msg(splits >= 2, "%s: %zu splits (%s)", p.text, splits, plan.reason);
    }
    /* decode.cl with several KV heads of a page per work-item (what the plan chooses for
     * small pages where the device has few compute units), 2 and all of them: the same
     * bits as one head per work-item, paged and contiguous */
    for (int64_t nh = 2; c->n_q <= 16 && nh <= c->h_kv; nh = nh < c->h_kv ? c->h_kv : nh + 1) {
        TU_ASSERT_OK(clattn_context_set_kernel_family(ctx, CLATTN_KERNEL_FAMILY_CPU), "family");
        result one, several;
        TU_ASSERT_OK(clattn_context_set_decode_heads(ctx, 1), "heads 1");
        TU_ASSERT_OK(run(&p, &d, true, false, &one), "%s: one head per work-item", p.text);
        TU_ASSERT_OK(clattn_context_set_decode_heads(ctx, (int)nh), "heads");
        char label[64];
        snprintf(label, sizeof label, "CPU, %lld KV heads per work-item", (long long)nh);
        check_config(&p, &d, label);
        TU_ASSERT_OK(run(&p, &d, true, false, &several), "%s: %s", p.text, label);
        tu_assert_same_bits(several.o, one.o, (size_t)(p.b * p.h_q * p.n_q * p.d_v),
                            "%s: O with %lld KV heads per work-item (expected: one)", p.text,
                            (long long)nh);
        tu_assert_same_bits(several.lse, one.lse, (size_t)(p.b * p.h_q * p.n_q),
                            "%s: LSE with %lld KV heads per work-item (expected: one)", p.text,
                            (long long)nh);
        clattn_plan plan;
        plan_paged(&p, &d, &plan);
        char want[64];
        snprintf(want, sizeof want, ", %lld KV heads in turn", (long long)nh);
        ck_assert_msg(strstr(plan.reason, want) != NULL, "%s: reason \"%s\"", p.text, plan.reason);
        result_free(&one);
        result_free(&several);
        TU_ASSERT_OK(clattn_context_set_decode_heads(ctx, 0), "heads 0");
    }
    /* decode.cl's split-KV (the CPU family; its automatic count splits only long caches on
     * few work-items): 3 splits asked, with one and with all KV heads per work-item, paged
     * and contiguous against the reference, and the same bits with either count of heads
     * (the split count fixed: a chosen one follows the work-items, which the heads divide) */
    result split_one = {0};
    for (int64_t nh = 1; c->n_q <= 16 && nh <= c->h_kv; nh = nh < c->h_kv ? c->h_kv : nh + 1) {
        TU_ASSERT_OK(clattn_context_set_kernel_family(ctx, CLATTN_KERNEL_FAMILY_CPU), "family");
        TU_ASSERT_OK(clattn_context_set_decode_heads(ctx, (int)nh), "heads");
        TU_ASSERT_OK(clattn_context_set_decode_splits(ctx, 3), "splits 3");
        char label[64];
        snprintf(label, sizeof label, "CPU, 3 splits, %lld KV head%s per work-item", (long long)nh,
                 nh > 1 ? "s" : "");
        check_config(&p, &d, label);
        clattn_plan plan;
        plan_paged(&p, &d, &plan);
        const char *at = strstr(plan.reason, "split_merge.cl): ");
        size_t splits = 0;
        /* 3 chunks asked of the keys the rows see together (all n_kv, or with desc_for's
         * causal window of 50, min(n_kv, 50 + n_q)) in whole 16-key steps: 53 keys give 2
         * chunks of 32 */
        const int64_t span = c->terms && 50 + p.n_q < p.n_kv ? 50 + p.n_q : p.n_kv;
        const int64_t chunk = ((span + 2) / 3 + 15) / 16 * 16; /* ⌈span / 3⌉ in whole steps */
        const size_t want = (size_t)((span + chunk - 1) / chunk);
        ck_assert_msg(strcmp(plan.kernels, "decode, split_merge") == 0 && at &&
                          sscanf(at, "split_merge.cl): %zu splits", &splits) == 1 && splits == want,
                      "%s: %s: %zu splits expected: kernels \"%s\", reason \"%s\"", p.text, label,
                      want, plan.kernels, plan.reason);
        result r;
        TU_ASSERT_OK(run(&p, &d, true, false, &r), "%s: %s", p.text, label);
        if (nh == 1) {
            split_one = r;
        } else {
            tu_assert_same_bits(r.o, split_one.o, (size_t)(p.b * p.h_q * p.n_q * p.d_v),
                                "%s: O, %s (expected: one head's)", p.text, label);
            tu_assert_same_bits(r.lse, split_one.lse, (size_t)(p.b * p.h_q * p.n_q),
                                "%s: LSE, %s (expected: one head's)", p.text, label);
            result_free(&r);
        }
        TU_ASSERT_OK(clattn_context_set_decode_splits(ctx, 0), "splits 0");
        TU_ASSERT_OK(clattn_context_set_decode_heads(ctx, 0), "heads 0");
    }
    result_free(&split_one);
    TU_ASSERT_OK(clattn_context_set_kernel_family(ctx, family), "restore family");
    paged_free(&p);
}
END_TEST

/* ---- an int8 K/V cache (desc.k_scale, v_scale) ------------------------------------- */

/* The problem's K and V (pools and gathered copies) quantized to int8 with symmetric
 * scales, per (token, KV head) (per_head false: max |x| of the row / 127) or one per KV
 * head (max over the head's keys), as vLLM and FlashInfer quantize caches. Unused pool
 * slots (NaN in the float pools) become 0 with scale 1. */
typedef struct quant {
    int8_t *kpool, *vpool, *k, *v;
    float *kspool, *vspool, *ks,
        *vs; /* scales: pools [pages, h_kv, slot, 1], flat [b, h_kv, n_kv, 1] */
    clattn_tensor tkp, tvp, tk, tv, tksp, tvsp, tks, tvs;
} quant;

/* fp8: FP8 E4M3 codes (scale max |x| / 448, rounded by clattn_f32_to_fp8e4m3) instead
 * of int8 ones */
static bool quant_fp8;

static void quantize_rows(const float *x, int8_t *q, float *sc, int64_t rows, int64_t d,
                          const float *head_scale, int64_t rows_per_head, int64_t h_kv)
{
    const float top = quant_fp8 ? 448.0f : 127.0f;
    for (int64_t r = 0; r < rows; r++) {
        float mx = 0.0f;
        for (int64_t c = 0; c < d; c++)
            if (fabsf(x[r * d + c]) > mx || isnan(x[r * d + c]))
                mx = fabsf(x[r * d + c]);
        const bool unused = isnan(mx);
        const float s = head_scale             ? head_scale[(r / rows_per_head) % h_kv]
                        : unused || mx == 0.0f ? 1.0f
                                               : mx / top;
        sc[r] = s;
        for (int64_t c = 0; c < d; c++)
            q[r * d + c] = unused ? 0
                           : quant_fp8
                               ? (int8_t)clattn_f32_to_fp8e4m3(x[r * d + c] / s)
                               : (int8_t)lrintf(fmaxf(-127.0f, fminf(127.0f, x[r * d + c] / s)));
    }
}

/* per_head: one scale per KV head (from the gathered keys of every sequence) */
static void quant_init(quant *qz, const paged *p, bool per_head)
{
    memset(qz, 0, sizeof *qz);
    const int64_t pool_rows = p->num_pages * p->h_kv * p->page_size;
    const int64_t flat_rows = p->b * p->h_kv * p->n_kv;
    qz->kpool = malloc((size_t)(pool_rows * p->d_k));
    qz->vpool = malloc((size_t)(pool_rows * p->d_v));
    qz->k = malloc((size_t)(flat_rows * p->d_k));
    qz->v = malloc((size_t)(flat_rows * p->d_v));
    qz->kspool = tu_alloc((size_t)pool_rows, 0.0f);
    qz->vspool = tu_alloc((size_t)pool_rows, 0.0f);
    qz->ks = tu_alloc((size_t)flat_rows, 0.0f);
    qz->vs = tu_alloc((size_t)flat_rows, 0.0f);
    float hs[2][16]; /* per head: max |x| over the used keys / 127 */
    for (int t = 0; t < 2; t++) {
        const float *x = t ? p->v : p->k;
        const int64_t d = t ? p->d_v : p->d_k;
        for (int64_t h = 0; h < p->h_kv; h++) {
            float mx = 0.0f;
            for (int64_t s = 0; s < p->b; s++)
                for (int64_t j = 0; j < (p->lens ? p->lens[s] : p->n_kv); j++)
                    for (int64_t c = 0; c < d; c++)
                        mx = fmaxf(mx, fabsf(x[((s * p->h_kv + h) * p->n_kv + j) * d + c]));
            hs[t][h] = mx > 0.0f ? mx / (quant_fp8 ? 448.0f : 127.0f) : 1.0f;
        }
    }
    /* the clattn pool layout only ([pages, h_kv, slot, d]): rows of d, head-major */
    ck_assert(!p->fa_layout);
    const float *hk = per_head ? hs[0] : NULL, *hv = per_head ? hs[1] : NULL;
    quantize_rows(p->kpool, qz->kpool, qz->kspool, pool_rows, p->d_k, hk, p->page_size, p->h_kv);
    quantize_rows(p->vpool, qz->vpool, qz->vspool, pool_rows, p->d_v, hv, p->page_size, p->h_kv);
    quantize_rows(p->k, qz->k, qz->ks, flat_rows, p->d_k, hk, p->n_kv, p->h_kv);
    quantize_rows(p->v, qz->v, qz->vs, flat_rows, p->d_v, hv, p->n_kv, p->h_kv);
    qz->tkp = clattn_tensor_host(qz->kpool, p->num_pages, p->h_kv, p->page_size, p->d_k);
    qz->tvp = clattn_tensor_host(qz->vpool, p->num_pages, p->h_kv, p->page_size, p->d_v);
    qz->tk = clattn_tensor_host(qz->k, p->b, p->h_kv, p->n_kv, p->d_k);
    qz->tv = clattn_tensor_host(qz->v, p->b, p->h_kv, p->n_kv, p->d_v);
    qz->tkp.dtype = qz->tvp.dtype = qz->tk.dtype = qz->tv.dtype =
        quant_fp8 ? CLATTN_FLOAT8_E4M3 : CLATTN_INT8;
    if (per_head) { /* [1, h_kv, 1, 1]: the first row of each head's scales */
        qz->tksp = clattn_tensor_host(qz->kspool, 1, p->h_kv, 1, 1);
        qz->tvsp = clattn_tensor_host(qz->vspool, 1, p->h_kv, 1, 1);
        qz->tksp.strides[1] = qz->tvsp.strides[1] = p->page_size;
        qz->tks = clattn_tensor_host(qz->ks, 1, p->h_kv, 1, 1);
        qz->tvs = clattn_tensor_host(qz->vs, 1, p->h_kv, 1, 1);
        qz->tks.strides[1] = qz->tvs.strides[1] = p->n_kv;
    } else {
        qz->tksp = clattn_tensor_host(qz->kspool, p->num_pages, p->h_kv, p->page_size, 1);
        qz->tvsp = clattn_tensor_host(qz->vspool, p->num_pages, p->h_kv, p->page_size, 1);
        qz->tks = clattn_tensor_host(qz->ks, p->b, p->h_kv, p->n_kv, 1);
        qz->tvs = clattn_tensor_host(qz->vs, p->b, p->h_kv, p->n_kv, 1);
    }
}

static void quant_free(quant *qz)
{
    free(qz->kpool);
    free(qz->vpool);
    free(qz->k);
    free(qz->v);
    free(qz->kspool);
    free(qz->vspool);
    free(qz->ks);
    free(qz->vs);
}

/* O of one int8 call: paged or contiguous, device or reference; v_int8 false keeps V
 * float32 (only K quantized) */
static clattn_status quant_run(const paged *p, const quant *qz, const clattn_attention_desc *base,
                               bool use_pages, bool v_int8, bool reference, float *o, float *lse)
{
    clattn_tensor to = clattn_tensor_host(o, p->b, p->h_q, p->n_q, p->d_v);
    clattn_tensor tl = clattn_tensor_host(lse, p->b, p->h_q, p->n_q, 1);
    clattn_attention_desc d = *base;
    d.kv_lens = p->lens;
    d.lse = &tl;
    d.paged = use_pages ? &p->pg : NULL;
    d.k_scale = use_pages ? &qz->tksp : &qz->tks;
    d.v_scale = v_int8 ? (use_pages ? &qz->tvsp : &qz->tvs) : NULL;
    const clattn_tensor *k = use_pages ? &qz->tkp : &qz->tk;
    const clattn_tensor *v =
        v_int8 ? (use_pages ? &qz->tvp : &qz->tv) : (use_pages ? &p->tvp : &p->tv);
    return reference ? clattn_reference_attention(&d, &p->tq, k, v, &to)
                     : clattn_attention(tu_ctx(), &d, &p->tq, k, v, &to);
}

/* int8 K and V (and int8 K with float32 V), scales per (token, head) and per head,
 * contiguous and paged, decode and tiled prefill, both kernel families (the GPU family
 * runs the CPU family's kernels): against the float64 reference on the same int8 data,
 * and the quantization error against float32 K/V reported. */
START_TEST(int8_kv_cache)
{
    static const config qc[] = {
        {2, 8, 2, 1, 64, 64, 16, 6, {90, 33, 0}, false, false},
        {2, 4, 2, 3, 40, 24, 7, 12, {80, 41, 0}, false, true},
        {1, 4, 4, 37, 32, 48, 16, 6, {77, 0, 0}, false, true},
    };
    clattn_context *ctx = tu_ctx();
    const clattn_kernel_family family = clattn_context_kernel_family(ctx);
    { /* one configuration per loop index: decode in the README's suite, the others slow */
        const int ci = _i;
        const config *c = &qc[ci];
        paged p;
        paged_init(&p, c->b, c->h_q, c->h_kv, c->n_q, c->d_k, c->d_v, c->page_size, c->max_pages,
                   c->lens, false, tu_seed() + 31u * (uint32_t)ci);
        float slopes[16];
        clattn_attention_desc d;
        desc_for(c, &d, slopes);
        const size_t no = (size_t)(p.b * p.h_q * p.n_q * p.d_v), nl = (size_t)(p.b * p.h_q * p.n_q);
        float *o = tu_alloc(no, -7.0f), *lse = tu_alloc(nl, -7.0f);
        float *ro = tu_alloc(no, -7.0f), *rl = tu_alloc(nl, -7.0f);
        float *fo = tu_alloc(no, -7.0f), *fl = tu_alloc(nl, -7.0f);
        result flt; /* float32 K/V, for the quantization error */
        ck_assert_int_eq(run(&p, &d, false, true, &flt), CLATTN_SUCCESS);
        for (int fmt_head = 0; fmt_head < 4; fmt_head++) {
            const int per_head = fmt_head % 2;
            quant_fp8 = fmt_head >= 2; /* int8, then FP8 E4M3 */
            quant qz;
            quant_init(&qz, &p, per_head);
            /* K alone quantized (a float V) in the slow configurations only: the README's
             * suite builds half the programs */
            for (int v_int8 = ci == 0 ? 1 : 0; v_int8 < 2; v_int8++) {
                TU_ASSERT_OK(quant_run(&p, &qz, &d, false, v_int8, true, ro, rl), "reference");
                double qerr = 0.0;
                for (size_t i = 0; i < no; i++)
                    qerr = fmax(qerr, fabs((double)ro[i] - (double)flt.o[i]));
                for (int f = 0; f < 2; f++) {
                    TU_ASSERT_OK(clattn_context_set_kernel_family(
                                     ctx, f ? CLATTN_KERNEL_FAMILY_GPU : CLATTN_KERNEL_FAMILY_CPU),
                                 "family");
                    for (int pages = 0; pages < 2; pages++) {
                        char text[400];
                        snprintf(text, sizeof text, "%s K%s, scales per %s, %s, %s family: %s",
                                 quant_fp8 ? "fp8" : "int8", v_int8 ? " and V" : "",
                                 per_head ? "head" : "token and head",
                                 pages ? "paged" : "contiguous", f ? "GPU" : "CPU", p.text);
                        TU_ASSERT_OK(quant_run(&p, &qz, &d, pages, v_int8, false, o, lse), "%s",
                                     text);
                        { /* the kernels meant: each family's own */
                            clattn_plan plan;
                            clattn_attention_desc dp = d;
                            clattn_tensor t1 = clattn_tensor_host(fo, p.b, p.h_q, p.n_q, p.d_v);
                            dp.kv_lens = p.lens;
                            dp.k_scale = &qz.tks;
                            dp.v_scale = v_int8 ? &qz.tvs : NULL;
                            TU_ASSERT_OK(clattn_attention_plan(ctx, &dp, &p.tq, &qz.tk,
                                                               v_int8 ? &qz.tv : &p.tv, &t1, &plan),
                                         "%s: plan", text);
                            const char *want = p.n_q > 16 ? (f ? "fused_gpu" : "fused")
                                               : f        ? "decode_gpu, split_merge"
                                                          : "decode";
                            ck_assert_msg(strcmp(plan.kernels, want) == 0,
                                          "%s: kernels \"%s\", expected \"%s\"", text, plan.kernels,
                                          want);
                        }
                        clattn_tensor to = clattn_tensor_host(o, p.b, p.h_q, p.n_q, p.d_v);
                        clattn_tensor tl = clattn_tensor_host(lse, p.b, p.h_q, p.n_q, 1);
                        char what[460];
                        snprintf(what, sizeof what, "%s: O", text);
                        TU_ASSERT_CLOSE(what, &to, NULL, ro, TU_TOL_DEFAULT);
                        snprintf(what, sizeof what, "%s: LSE", text);
                        TU_ASSERT_CLOSE(what, &tl, NULL, rl, TU_TOL_DEFAULT);
                        if (pages) { /* paged and contiguous: the same bits */
                            TU_ASSERT_OK(quant_run(&p, &qz, &d, false, v_int8, false, fo, fl), "%s",
                                         text);
                            assert_same_bits("O", o, fo, no, text);
                        }
                    }
                }
                printf("%s K%s, scales per %s: %s: within tolerance of the reference; "
                       "max |O_quantized - O_float32| = %.3g (quantization)\n",
                       quant_fp8 ? "fp8" : "int8", v_int8 ? " and V" : "",
                       per_head ? "head" : "token and head", p.text, qerr);
                /* symmetric int8 of O(1) values: a few 1e-3 (a kernel error is far larger) */
                ck_assert_msg(qerr < 0.05, "%s: quantization error %g", p.text, qerr);
            }
            quant_free(&qz);
        }
        quant_fp8 = false;
        result_free(&flt);
        free(o);
        free(lse);
        free(ro);
        free(rl);
        free(fo);
        free(fl);
        paged_free(&p);
    }
    TU_ASSERT_OK(clattn_context_set_kernel_family(ctx, family), "restore family");
}
END_TEST

/* FP8 E4M3: the host conversions (every code round-trips; ties to even; saturation;
 * NaN) and the kernels' decoder on all 256 codes (one key, so O is its V row exactly;
 * no scale: an unscaled FP8 V), in the decode and the tiled kernel of each family. */
START_TEST(fp8_codes)
{
    for (int c = 0; c < 256; c++) {
        const float f = clattn_fp8e4m3_to_f32((uint8_t)c);
        if ((c & 0x7f) == 0x7f) {
            ck_assert_msg(isnan(f), "code 0x%02x decodes to %g, not NaN", c, (double)f);
            continue;
        }
        ck_assert_msg(clattn_f32_to_fp8e4m3(f) == c, "code 0x%02x (%g) encodes to 0x%02x", c,
                      (double)f, clattn_f32_to_fp8e4m3(f));
        if ((c & 0x7f) < 0x7e) { /* the midpoint to the next code rounds to the even one */
            const float g = clattn_fp8e4m3_to_f32((uint8_t)(c + 1));
            const uint8_t even = (c & 1) ? (uint8_t)(c + 1) : (uint8_t)c;
            ck_assert_msg(clattn_f32_to_fp8e4m3(0.5f * (f + g)) == even,
                          "midpoint of 0x%02x and 0x%02x encodes to 0x%02x", c, c + 1,
                          clattn_f32_to_fp8e4m3(0.5f * (f + g)));
        }
    }
    ck_assert_int_eq(clattn_f32_to_fp8e4m3(1000.0f), 0x7e);
    ck_assert_int_eq(clattn_f32_to_fp8e4m3(-INFINITY), 0xfe);
    ck_assert_int_eq(clattn_f32_to_fp8e4m3(NAN) & 0x7f, 0x7f);
    ck_assert(clattn_fp8e4m3_to_f32(0x7e) == 448.0f && clattn_fp8e4m3_to_f32(0x01) == 0x1p-9f);
    uint8_t codes[256];
    for (int c = 0; c < 256; c++)
        codes[c] = (uint8_t)c;
    clattn_context *ctx = tu_ctx();
    const clattn_kernel_family family = clattn_context_kernel_family(ctx);
    for (int run = 0; run < 4; run++) { /* decode.cl, fused.cl, decode_gpu.cl, fused_gpu.cl */
        const int n_q = run % 2 ? 20 : 1;
        TU_ASSERT_OK(clattn_context_set_kernel_family(ctx, run < 2 ? CLATTN_KERNEL_FAMILY_CPU
                                                                   : CLATTN_KERNEL_FAMILY_GPU),
                     "family");
        float q[20 * 4], k[4] = {0.5f, -1.0f, 0.25f, 2.0f}, o[20 * 256];
        for (int i = 0; i < 20 * 4; i++)
            q[i] = 0.1f * (float)(i % 7);
        clattn_tensor tq = clattn_tensor_host(q, 1, 1, n_q, 4),
                      tk = clattn_tensor_host(k, 1, 1, 1, 4),
                      tv = clattn_tensor_host(codes, 1, 1, 1, 256),
                      to = clattn_tensor_host(o, 1, 1, n_q, 256);
        tv.dtype = CLATTN_FLOAT8_E4M3;
        clattn_attention_desc d = clattn_attention_desc_default();
        TU_ASSERT_OK(clattn_attention(tu_ctx(), &d, &tq, &tk, &tv, &to), "fp8 codes, n_q %d", n_q);
        for (int i = 0; i < n_q; i++)
            for (int c = 0; c < 256; c++) {
                const float want = clattn_fp8e4m3_to_f32((uint8_t)c), got = o[i * 256 + c];
                ck_assert_msg(isnan(want) ? isnan(got) : got == want,
                              "run %d, n_q %d: code 0x%02x decodes to %g on the device, %g on the "
                              "host",
                              run, n_q, c, (double)got, (double)want);
            }
    }
    TU_ASSERT_OK(clattn_context_set_kernel_family(ctx, family), "restore family");
}
END_TEST

/* An int8 K without k_scale, a scale with a float K, a scale of the wrong shape or dtype,
 * and what an int8 cache does not run with (unfused, weights, backward, append): clear
 * statuses, naming the field, and nothing written. */
START_TEST(int8_kv_validation)
{
    quant_fp8 = false; /* int8 here, whatever ran before in this process (CK_FORK=no) */
    paged p;
    paged_init(&p, 2, 4, 2, 1, 16, 16, 8, 4, (const int32_t[]){30, 9}, false, tu_seed() + 5u);
    quant qz;
    quant_init(&qz, &p, false);
    float o[2 * 4 * 16], lse[8];
    tu_fill_value(o, 2 * 4 * 16, 7.0f);
    clattn_tensor to = clattn_tensor_host(o, 2, 4, 1, 16), tl = clattn_tensor_host(lse, 2, 4, 1, 1);
    clattn_tensor bad_shape = clattn_tensor_host(qz.ks, 2, 1, p.n_kv, 1);
    clattn_tensor bad_dtype = qz.tks;
    bad_dtype.dtype = CLATTN_FLOAT16;
    float *inf_scales = tu_alloc((size_t)(2 * 2 * p.n_kv), 0.5f);
    inf_scales[37] = INFINITY;
    clattn_tensor bad_value = clattn_tensor_host(inf_scales, 2, 2, p.n_kv, 1);
    float w[2 * 4 * 32];
    clattn_tensor tw = clattn_tensor_host(w, 2, 4, 1, p.n_kv);
    struct {
        const char *what;
        const clattn_tensor *k, *k_scale;
        clattn_algorithm alg;
        const clattn_tensor *weights;
        clattn_status want;
        const char *needle;
    } cases[] = {
        {"int8 K without k_scale", &qz.tk, NULL, CLATTN_ALGORITHM_AUTO, NULL,
         CLATTN_ERROR_INVALID_ARGUMENT, "k_scale"},
        {"k_scale with a float32 K", &p.tk, &qz.tks, CLATTN_ALGORITHM_AUTO, NULL,
         CLATTN_ERROR_INVALID_ARGUMENT, "k_scale"},
        {"k_scale of the wrong shape", &qz.tk, &bad_shape, CLATTN_ALGORITHM_AUTO, NULL,
         CLATTN_ERROR_INVALID_SHAPE, "k_scale"},
        {"k_scale float16", &qz.tk, &bad_dtype, CLATTN_ALGORITHM_AUTO, NULL,
         CLATTN_ERROR_INVALID_ARGUMENT, "k_scale"},
        {"k_scale holding inf", &qz.tk, &bad_value, CLATTN_ALGORITHM_AUTO, NULL,
         CLATTN_ERROR_INVALID_ARGUMENT, "k_scale[0, 1, 5] is inf"},
        {"unfused", &qz.tk, &qz.tks, CLATTN_ALGORITHM_UNFUSED, NULL, CLATTN_ERROR_UNSUPPORTED,
         "fused"},
        {"weights", &qz.tk, &qz.tks, CLATTN_ALGORITHM_AUTO, &tw, CLATTN_ERROR_UNSUPPORTED,
         "weights"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        clattn_attention_desc d = clattn_attention_desc_default();
        d.kv_lens = p.lens;
        d.lse = &tl;
        d.k_scale = cases[i].k_scale;
        d.algorithm = cases[i].alg;
        d.weights = cases[i].weights;
        const clattn_status st = clattn_attention(tu_ctx(), &d, &p.tq, cases[i].k, &p.tv, &to);
        ck_assert_msg(st == cases[i].want, "%s: status %s, expected %s", cases[i].what,
                      clattn_status_string(st), clattn_status_string(cases[i].want));
        ck_assert_msg(strstr(clattn_last_error_message(tu_ctx()), cases[i].needle) != NULL,
                      "%s: message \"%s\" does not name %s", cases[i].what,
                      clattn_last_error_message(tu_ctx()), cases[i].needle);
        if (cases[i].want == CLATTN_ERROR_UNSUPPORTED)
            continue; /* (the reference has no algorithms) */
        const clattn_status rs = clattn_reference_attention(&d, &p.tq, cases[i].k, &p.tv, &to);
        ck_assert_msg(rs == cases[i].want, "%s: reference status %s", cases[i].what,
                      clattn_status_string(rs));
    }
    tu_assert_untouched("O after failed calls", o, 0, 2 * 4 * 16, 7.0f);
    /* the backward pass takes no int8 K/V */
    clattn_attention_desc d = clattn_attention_desc_default();
    d.k_scale = &qz.tks;
    float g[2 * 4 * 16];
    clattn_tensor tg = clattn_tensor_host(g, 2, 4, 1, 16);
    ck_assert_int_eq(
        clattn_reference_attention_backward(&d, &p.tq, &qz.tk, &p.tv, &to, &tg, &p.tk, &p.tv),
        CLATTN_ERROR_UNSUPPORTED);
    free(inf_scales);
    quant_free(&qz);
    paged_free(&p);
}
END_TEST

/* The enqueue call with the table on the device: same bits as the host table; entries
 * outside the pool are clamped into it (no access outside the pool's cl_mem). */
START_TEST(paged_device_table)
{
    const config *c = &configs[0]; /* GQA, 3 tokens, every term */
    clattn_context *ctx = tu_ctx();
    paged p;
    paged_init(&p, c->b, c->h_q, c->h_kv, c->n_q, c->d_k, c->d_v, c->page_size, c->max_pages,
               c->lens, c->fa_layout, tu_seed() + 7u);
    float slopes[16];
    clattn_attention_desc d;
    desc_for(c, &d, slopes);
    result host_r;
    TU_ASSERT_OK(run(&p, &d, true, false, &host_r), "%s: host table", p.text);

    cl_context cl_ctx;
    cl_command_queue queue;
    ck_assert_int_eq(clattn_context_get_cl(ctx, &cl_ctx, NULL, &queue), CLATTN_SUCCESS);
    const size_t no = (size_t)(p.b * p.h_q * p.n_q * p.d_v), nt = (size_t)(p.b * p.max_pages);
    const size_t nq = (size_t)(p.b * p.h_q * p.n_q * p.d_k);
    const size_t nk = (size_t)(p.num_pages * p.h_kv * p.page_size * p.d_k);
    const size_t nv = (size_t)(p.num_pages * p.h_kv * p.page_size * p.d_v);
    cl_int err;
    cl_mem mq = clCreateBuffer(cl_ctx, CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR, nq * 4, p.q, &err);
    cl_mem mk =
        clCreateBuffer(cl_ctx, CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR, nk * 4, p.kpool, &err);
    cl_mem mv =
        clCreateBuffer(cl_ctx, CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR, nv * 4, p.vpool, &err);
    cl_mem mo = clCreateBuffer(cl_ctx, CL_MEM_READ_WRITE, no * 4, NULL, &err);
    cl_mem mt =
        clCreateBuffer(cl_ctx, CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR, nt * 4, p.table, &err);
    ck_assert_int_eq(err, CL_SUCCESS);
    clattn_tensor bq = p.tq, bk = p.tkp, bv = p.tvp;
    bq.host = bk.host = bv.host = NULL;
    bq.buffer = mq, bk.buffer = mk, bv.buffer = mv;
    clattn_tensor bo = clattn_tensor_buffer(mo, p.b, p.h_q, p.n_q, p.d_v);
    clattn_paged_kv dev_pg = {NULL, mt, p.max_pages};
    d.paged = &dev_pg;
    d.kv_lens = p.lens;
    cl_event done = NULL;
    TU_ASSERT_OK(clattn_attention_enqueue(ctx, &d, &bq, &bk, &bv, &bo, 0, NULL, &done),
                 "%s: device table", p.text);
    float *o = tu_alloc(no, 0.0f);
    ck_assert_int_eq(clEnqueueReadBuffer(queue, mo, CL_TRUE, 0, no * 4, o, 1, &done, NULL),
                     CL_SUCCESS);
    clReleaseEvent(done);
    assert_same_bits("O (device table)", o, host_r.o, no, p.text);

    /* entries far outside the pool, negative, and every entry past the lengths: the
     * kernels clamp them into [0, num_pages) */
    int32_t *bad = malloc(sizeof(int32_t) * nt);
    for (size_t i = 0; i < nt; i++)
        bad[i] = i % 3 == 0 ? (int32_t)1 << 30 : i % 3 == 1 ? -7 : p.table[i];
    ck_assert_int_eq(clEnqueueWriteBuffer(queue, mt, CL_TRUE, 0, nt * 4, bad, 0, NULL, NULL),
                     CL_SUCCESS);
    TU_ASSERT_OK(clattn_attention_enqueue(ctx, &d, &bq, &bk, &bv, &bo, 0, NULL, &done),
                 "%s: bad device table", p.text);
    ck_assert_int_eq(clEnqueueReadBuffer(queue, mo, CL_TRUE, 0, no * 4, o, 1, &done, NULL),
                     CL_SUCCESS);
    clReleaseEvent(done);
    /* … the same as the host call with each entry clamped into [0, num_pages) */
    for (size_t i = 0; i < nt; i++)
        p.table[i] = bad[i] < 0 ? 0 : bad[i] >= p.num_pages ? (int32_t)p.num_pages - 1 : bad[i];
    clattn_attention_desc dh = d;
    dh.paged = NULL;
    result clamped;
    TU_ASSERT_OK(run(&p, &dh, true, false, &clamped), "%s: clamped host table", p.text);
    assert_same_bits("O (device table, entries clamped)", o, clamped.o, no, p.text);
    float *clamped_o = clamped.o;
    /* the lengths in a cl_mem too (a decode step with nothing on the host), with the
     * clamped table (every entry inside the pool) on the device */
    {
        int32_t dev_lens[2] = {p.lens[0], p.lens[1]};
        cl_mem ml = clCreateBuffer(cl_ctx, CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR, sizeof dev_lens,
                                   dev_lens, &err);
        ck_assert_int_eq(err, CL_SUCCESS);
        ck_assert_int_eq(
            clEnqueueWriteBuffer(queue, mt, CL_TRUE, 0, nt * 4, p.table, 0, NULL, NULL),
            CL_SUCCESS);
        clattn_attention_desc dl = d;
        dl.kv_lens = NULL;
        dl.kv_lens_buffer = ml;
        TU_ASSERT_OK(clattn_attention_enqueue(ctx, &dl, &bq, &bk, &bv, &bo, 0, NULL, &done),
                     "%s: device table and lengths", p.text);
        ck_assert_int_eq(clEnqueueReadBuffer(queue, mo, CL_TRUE, 0, no * 4, o, 1, &done, NULL),
                         CL_SUCCESS);
        clReleaseEvent(done);
        assert_same_bits("O (device table and lengths)", o, clamped_o, no, p.text);
        /* lengths outside 0..n_kv: clamped (-5 -> 0 keys, n_kv + 100 -> n_kv) */
        dev_lens[0] = -5;
        dev_lens[1] = (int32_t)p.n_kv + 100;
        ck_assert_int_eq(
            clEnqueueWriteBuffer(queue, ml, CL_TRUE, 0, sizeof dev_lens, dev_lens, 0, NULL, NULL),
            CL_SUCCESS);
        TU_ASSERT_OK(clattn_attention_enqueue(ctx, &dl, &bq, &bk, &bv, &bo, 0, NULL, &done),
                     "%s: device lengths outside 0..n_kv", p.text);
        ck_assert_int_eq(clEnqueueReadBuffer(queue, mo, CL_TRUE, 0, no * 4, o, 1, &done, NULL),
                         CL_SUCCESS);
        clReleaseEvent(done);
        int32_t *keep_lens = p.lens;
        int32_t clamped_lens[2] = {0, (int32_t)p.n_kv};
        p.lens = clamped_lens;
        /* every table entry is inside the pool now, so the host call takes them all */
        result cl2;
        TU_ASSERT_OK(run(&p, &dh, true, false, &cl2), "%s: clamped lengths", p.text);
        p.lens = keep_lens;
        assert_same_bits("O (device lengths clamped)", o, cl2.o, no, p.text);
        result_free(&cl2);
        /* both forms of a length, and device lengths in a blocking call */
        dl.kv_lens = p.lens;
        ck_assert_int_eq(clattn_attention_enqueue(ctx, &dl, &bq, &bk, &bv, &bo, 0, NULL, NULL),
                         CLATTN_ERROR_INVALID_ARGUMENT);
        dh.kv_lens_buffer = ml;
        dh.paged = &p.pg;
        clattn_tensor ho = clattn_tensor_host(o, p.b, p.h_q, p.n_q, p.d_v);
        ck_assert_int_eq(clattn_attention(ctx, &dh, &p.tq, &p.tkp, &p.tvp, &ho),
                         CLATTN_ERROR_INVALID_ARGUMENT);
        dh.kv_lens_buffer = NULL;
        clReleaseMemObject(ml);
    }
    /* a table buffer smaller than batch x max_pages entries */
    cl_mem small = clCreateBuffer(cl_ctx, CL_MEM_READ_ONLY, 4, NULL, &err);
    dev_pg.block_table_buffer = small;
    ck_assert_int_eq(clattn_attention_enqueue(ctx, &d, &bq, &bk, &bv, &bo, 0, NULL, NULL),
                     CLATTN_ERROR_BUFFER_TOO_SMALL);
    free(clamped_o);
    free(clamped.lse);
    free(bad);
    free(o);
    cl_mem all[6] = {mq, mk, mv, mo, mt, small};
    for (int i = 0; i < 6; i++)
        clReleaseMemObject(all[i]);
    result_free(&host_r);
    paged_free(&p);
}
END_TEST

START_TEST(paged_validation)
{
    clattn_context *ctx = tu_ctx();
    paged p;
    const int32_t lens[2] = {30, 9};
    paged_init(&p, 2, 2, 1, 4, 8, 8, 4, 8, lens, false, tu_seed() + 3u);
    float *o = tu_alloc((size_t)(2 * 2 * 4 * 8), 0.0f),
          *w = tu_alloc((size_t)(2 * 2 * 4 * 32), 0.0f);
    clattn_tensor to = clattn_tensor_host(o, 2, 2, 4, 8);
    clattn_attention_desc d = clattn_attention_desc_default();
    d.kv_lens = p.lens;
    clattn_paged_kv pg = p.pg;
    d.paged = &pg;
#define EXPECT(status, what)                                                                       \
    do {                                                                                           \
        const clattn_status st_ = clattn_attention(ctx, &d, &p.tq, &p.tkp, &p.tvp, &to);           \
        ck_assert_msg(st_ == (status), "%s: status %d (%s), expected %d: %s", what, (int)st_,      \
                      clattn_status_string(st_), (int)(status), clattn_last_error_message(ctx));   \
        printf("paged validation, %s: %s\n", what, clattn_last_error_message(ctx));                \
    } while (0)
    EXPECT(CLATTN_SUCCESS, "a good call");
    /* an entry the call reads outside the pool, then one past the lengths (never read) */
    const int32_t keep = p.table[3];
    p.table[3] = (int32_t)p.num_pages;
    EXPECT(CLATTN_ERROR_INVALID_ARGUMENT, "entry [0][3] = num_pages");
    p.table[3] = -1;
    EXPECT(CLATTN_ERROR_INVALID_ARGUMENT, "entry [0][3] = -1");
    p.table[3] = keep;
    p.table[8 + 5] = 1 << 30; /* sequence 1 has 9 keys: pages 0..2 */
    EXPECT(CLATTN_SUCCESS, "an entry past the sequence's pages");
    /* both tables, or none */
    pg.block_table_buffer = (cl_mem)p.q; /* never dereferenced: rejected first */
    EXPECT(CLATTN_ERROR_INVALID_ARGUMENT, "both tables");
    pg.block_table = NULL;
    EXPECT(CLATTN_ERROR_INVALID_ARGUMENT, "a device table in the blocking call");
    pg.block_table_buffer = NULL;
    EXPECT(CLATTN_ERROR_INVALID_ARGUMENT, "no table");
    pg = p.pg;
    pg.max_pages = -1;
    EXPECT(CLATTN_ERROR_INVALID_SHAPE, "max_pages -1");
    pg.max_pages = INT64_MAX / 2;
    EXPECT(CLATTN_ERROR_UNSUPPORTED, "max_pages x page_size beyond 2^53");
    pg = p.pg;
    /* a length beyond the table's keys */
    int32_t long_lens[2] = {33, 9};
    d.kv_lens = long_lens;
    EXPECT(CLATTN_ERROR_INVALID_SHAPE, "kv_lens beyond max_pages x page_size");
    d.kv_lens = p.lens;
    /* an append (2 rows per sequence) into slots of its own; into a page the other
     * sequence reads (allowed: the append runs first, the reader sees the new rows); and
     * into slots the other sequence appends into: refused (the append kernel's work-items
     * write them in no set order) */
    {
        float kn[2 * 1 * 2 * 8], vn[2 * 1 * 2 * 8];
        tu_fill_gen(kn, 32, tu_seed() + 5u, 1.0f);
        tu_fill_gen(vn, 32, tu_seed() + 6u, 1.0f);
        clattn_tensor tkn = clattn_tensor_host(kn, 2, 1, 2, 8),
                      tvn = clattn_tensor_host(vn, 2, 1, 2, 8);
        int32_t app_lens[2] = {26, 9}; /* keys 26, 27: page 6, slots 2, 3; 9, 10: page 2 */
        d.kv_lens = app_lens;
        d.k_new = &tkn;
        d.v_new = &tvn;
        EXPECT(CLATTN_SUCCESS, "an append into slots of its own");
        const int32_t own = p.table[8 + 2];
        p.table[8 + 2] = p.table[3]; /* sequence 0 reads its keys 13, 14 there */
        EXPECT(CLATTN_SUCCESS, "an append into a page another sequence reads");
        p.table[8 + 2] = p.table[6]; /* slot 2: key 10 of sequence 1, key 26 of sequence 0 */
        EXPECT(CLATTN_ERROR_INVALID_ARGUMENT, "two appends into one slot");
        char page_named[64];
        snprintf(page_named, sizeof page_named, "both append into slot 2 of page %d",
                 (int)p.table[6]);
        ck_assert_msg(strstr(clattn_last_error_message(ctx), page_named),
                      "the message names both and the page (%s): %s", page_named,
                      clattn_last_error_message(ctx));
        p.table[8 + 2] = own;
        d.kv_lens = p.lens;
        d.k_new = d.v_new = NULL;
    }
    /* pools that disagree */
    clattn_tensor vp = p.tvp;
    vp.shape[2] = 2;
    {
        const clattn_status st = clattn_attention(ctx, &d, &p.tq, &p.tkp, &vp, &to);
        ck_assert_msg(st == CLATTN_ERROR_INVALID_SHAPE, "page sizes differ: %d", (int)st);
    }
    /* what does not take pages */
    clattn_tensor tw = clattn_tensor_host(w, 2, 2, 4, 32);
    d.weights = &tw;
    EXPECT(CLATTN_ERROR_UNSUPPORTED, "weights");
    d.weights = NULL;
    d.algorithm = CLATTN_ALGORITHM_UNFUSED;
    EXPECT(CLATTN_ERROR_UNSUPPORTED, "the unfused algorithm");
    d.algorithm = CLATTN_ALGORITHM_AUTO;
    float lse[16];
    clattn_tensor tl = clattn_tensor_host(lse, 2, 2, 4, 1);
    ck_assert_int_eq(clattn_attention_backward(ctx, &d, &p.tq, &p.tkp, &p.tvp, &to, &tl, &to, &to,
                                               &p.tkp, &p.tvp),
                     CLATTN_ERROR_UNSUPPORTED);
    ck_assert_int_eq(
        clattn_reference_attention_backward(&d, &p.tq, &p.tkp, &p.tvp, &to, &to, &p.tkp, &p.tvp),
        CLATTN_ERROR_UNSUPPORTED);
    ck_assert_int_eq(clattn_scores(ctx, &d, &p.tq, &p.tkp, &tw), CLATTN_ERROR_UNSUPPORTED);
    /* the several-device layer, on one context of this device */
    cl_device_id dev;
    clattn_context_get_cl(ctx, NULL, &dev, NULL);
    char name[256] = "";
    clGetDeviceInfo(dev, CL_DEVICE_NAME, sizeof name - 1, name, NULL);
    const char *specs[1] = {name};
    clattn_multi *multi = NULL;
    TU_ASSERT_OK(clattn_multi_create(specs, 1, &multi), "clattn_multi_create(%s)", name);
    ck_assert_int_eq(
        clattn_multi_attention(multi, CLATTN_SPLIT_KEYS, &d, &p.tq, &p.tkp, &p.tvp, &to, NULL),
        CLATTN_ERROR_UNSUPPORTED);
    clattn_multi_release(multi);
    /* the reference takes pages too */
    ck_assert_int_eq(clattn_reference_attention(&d, &p.tq, &p.tkp, &p.tvp, &to), CLATTN_SUCCESS);
#undef EXPECT
    free(o);
    free(w);
    paged_free(&p);
}
END_TEST

/* ---- append in place (k_new, v_new) and rotary embeddings ---------------------------- */

/* Rotary: a d_k 4 key row [1, 2, 3, 4] appended at position p comes out as the formula
 * says, in both layouts (checked against cos and sin here, not the reference). */
START_TEST(append_rotary_formula)
{
    clattn_context *ctx = tu_ctx();
    for (int il = 0; il < 2; il++) {
        const int64_t n_kv = 8, len = 5, kv_start = 1000003; /* angles up to 1e6 rad */
        float q[4] = {0.5f, -1.0f, 0.25f, 2.0f}, kc[8 * 4], vc[8 * 4], kn[4] = {1, 2, 3, 4},
              vn[4] = {1, 1, 1, 1}, o[4];
        tu_fill_gen(kc, 32, 11, 1.0f);
        tu_fill_gen(vc, 32, 12, 1.0f);
        clattn_tensor tq = clattn_tensor_host(q, 1, 1, 1, 4),
                      tk = clattn_tensor_host(kc, 1, 1, n_kv, 4);
        clattn_tensor tv = clattn_tensor_host(vc, 1, 1, n_kv, 4),
                      to = clattn_tensor_host(o, 1, 1, 1, 4);
        clattn_tensor tkn = clattn_tensor_host(kn, 1, 1, 1, 4),
                      tvn = clattn_tensor_host(vn, 1, 1, 1, 4);
        const int32_t lens[1] = {(int32_t)len};
        const clattn_rotary rot = {.dim = 0, .interleaved = il, .base = 100.0f};
        clattn_attention_desc d = clattn_attention_desc_default();
        d.kv_lens = lens;
        d.k_new = &tkn;
        d.v_new = &tvn;
        d.rotary = &rot;
        d.kv_start = kv_start;
        TU_ASSERT_OK(clattn_attention(ctx, &d, &tq, &tk, &tv, &to), "rotary %s",
                     il ? "GPT-J" : "GPT-NeoX");
        const double p = (double)(kv_start + len), f1 = (double)(float)pow(100.0, -0.5);
        double want[4];
        if (il) { /* pairs (0, 1) at frequency 1, (2, 3) at 100^-1/2 */
            want[0] = 1 * cos(p) - 2 * sin(p), want[1] = 2 * cos(p) + 1 * sin(p);
            want[2] = 3 * cos(p * f1) - 4 * sin(p * f1),
            want[3] = 4 * cos(p * f1) + 3 * sin(p * f1);
        } else { /* pairs (0, 2) at frequency 1, (1, 3) at 100^-1/2 */
            want[0] = 1 * cos(p) - 3 * sin(p), want[2] = 3 * cos(p) + 1 * sin(p);
            want[1] = 2 * cos(p * f1) - 4 * sin(p * f1),
            want[3] = 4 * cos(p * f1) + 2 * sin(p * f1);
        }
        for (int c = 0; c < 4; c++)
            ck_assert_msg(fabs(kc[len * 4 + c] - want[c]) <= 2e-6 * (1 + fabs(want[c])),
                          "%s: appended K[%d] is %.9g, expected %.9g (position %g)",
                          il ? "GPT-J" : "GPT-NeoX", c, (double)kc[len * 4 + c], want[c], p);
        for (int c = 0; c < 4; c++)
            ck_assert_msg(vc[len * 4 + c] == 1.0f, "appended V[%d] is %g", c,
                          (double)vc[len * 4 + c]);
        printf("append: rotary %s K row at position %g as the formula\n", il ? "GPT-J" : "GPT-NeoX",
               p);
    }
}
END_TEST

/* Rotated query positions (FlashAttention's convention): without a causal mask or a
 * window every query row sits at the cache's length, so equal query rows give equal
 * outputs; with a window (here unbounded: the same keys for every row) row i sits at the
 * length + i, and they differ. */
START_TEST(append_rotary_query_positions)
{
    clattn_context *ctx = tu_ctx();
    enum { NQ = 3, DK = 8, NKV = 16 };
    float q[NQ * DK], kc[NKV * DK], vc[NKV * DK], kn[NQ * DK], vn[NQ * DK], o[NQ * DK];
    for (int i = 0; i < NQ; i++)
        for (int c = 0; c < DK; c++)
            q[i * DK + c] = tu_gen(91, (uint32_t)c); /* every row the same */
    for (int w = 0; w < 2; w++) {
        tu_fill_gen(kc, NKV * DK, 92, 1.0f);
        tu_fill_gen(vc, NKV * DK, 93, 1.0f);
        tu_fill_gen(kn, NQ * DK, 94, 1.0f);
        tu_fill_gen(vn, NQ * DK, 95, 1.0f);
        clattn_tensor tq = clattn_tensor_host(q, 1, 1, NQ, DK),
                      tk = clattn_tensor_host(kc, 1, 1, NKV, DK);
        clattn_tensor tv = clattn_tensor_host(vc, 1, 1, NKV, DK),
                      to = clattn_tensor_host(o, 1, 1, NQ, DK);
        clattn_tensor tkn = clattn_tensor_host(kn, 1, 1, NQ, DK),
                      tvn = clattn_tensor_host(vn, 1, 1, NQ, DK);
        const int32_t lens[1] = {5};
        const clattn_rotary rot = {.dim = 0, .interleaved = 0, .base = 0.0f};
        clattn_attention_desc d = clattn_attention_desc_default();
        d.kv_lens = lens;
        d.k_new = &tkn;
        d.v_new = &tvn;
        d.rotary = &rot;
        d.window = w; /* w 1: window (-1, -1), unbounded: every key visible, as without */
        d.window_left = d.window_right = -1;
        TU_ASSERT_OK(clattn_attention(ctx, &d, &tq, &tk, &tv, &to), "rotary, window %d", w);
        const bool same = memcmp(o, o + DK, sizeof(float) * DK) == 0 &&
                          memcmp(o, o + 2 * DK, sizeof(float) * DK) == 0;
        ck_assert_msg(same == (w == 0),
                      "rotary %s: equal query rows give %s outputs (query rows must sit at %s)",
                      w ? "with a window" : "without a causal mask or window",
                      same ? "equal" : "different",
                      w ? "the cache's length + i" : "the cache's length");
    }
}
END_TEST

static cl_mem buf_of(cl_context cl_ctx, const float *host, size_t n)
{
    return tu_buffer(cl_ctx, host, n * 4);
}

/* The caller's rotary tables (cos_table, sin_table; table_buffer): tables holding the
 * base-θ angles give the same bits as the base (the same float32 cos and sin on a device
 * with float64); tables of other angles (as NTK / YaRN scaling gives) match the
 * reference, blocking with host tables and enqueued with a cl_mem of the same tables
 * (same bits); every status of a bad table. */
START_TEST(rotary_tables)
{
    clattn_context *ctx = tu_ctx();
    enum { B = 2, HQ = 4, HKV = 2, NQ = 3, DK = 16, NKV = 24, LEN = 40, HALF = DK / 2 };
    float q[B * HQ * NQ * DK], kn[B * HKV * NQ * DK], vn[B * HKV * NQ * DK];
    float k0[B * HKV * NKV * DK], v0[B * HKV * NKV * DK];
    float kc[4][B * HKV * NKV * DK], vc[4][B * HKV * NKV * DK], o[4][B * HQ * NQ * DK];
    float cs[2][LEN * HALF], sn[2][LEN * HALF], f[HALF];
    tu_fill_gen(q, sizeof q / 4, 201, 1.0f);
    tu_fill_gen(kn, sizeof kn / 4, 202, 1.0f);
    tu_fill_gen(vn, sizeof vn / 4, 203, 1.0f);
    tu_fill_gen(k0, sizeof k0 / 4, 204, 1.0f);
    tu_fill_gen(v0, sizeof v0 / 4, 205, 1.0f);
    const clattn_rotary base = {.dim = 0, .interleaved = 1, .base = 500.0f};
    for (int p = 0; p < HALF; p++) /* f_p = base^(−2p/dim) rounded to float32, as clattn's */
        f[p] = (float)pow(500.0, -2.0 * (double)p / (double)DK);
    for (int t = 0; t < LEN; t++)
        for (int p = 0; p < HALF; p++) { /* [0]: base-θ angles; [1]: other angles */
            const double a = (double)t * (double)f[p], a2 = 0.37 * (double)t / (double)(p + 1);
            cs[0][t * HALF + p] = (float)cos(a);
            sn[0][t * HALF + p] = (float)sin(a);
            cs[1][t * HALF + p] = (float)cos(a2);
            sn[1][t * HALF + p] = (float)sin(a2);
        }
    const int32_t lens[B] = {7, 20};
    clattn_tensor tq = clattn_tensor_host(q, B, HQ, NQ, DK),
                  tkn = clattn_tensor_host(kn, B, HKV, NQ, DK),
                  tvn = clattn_tensor_host(vn, B, HKV, NQ, DK);
    for (int run = 0; run < 4; run++) { /* base; base tables; other tables; reference */
        memcpy(kc[run], k0, sizeof k0);
        memcpy(vc[run], v0, sizeof v0);
        clattn_rotary rot = base;
        if (run >= 1) {
            const int w = run >= 2;
            rot.cos_table = cs[w];
            rot.sin_table = sn[w];
            rot.table_len = LEN;
        }
        clattn_attention_desc d = clattn_attention_desc_default();
        d.mask = CLATTN_MASK_CAUSAL_BOTTOM_RIGHT;
        d.kv_lens = lens;
        d.k_new = &tkn;
        d.v_new = &tvn;
        d.rotary = &rot;
        clattn_tensor tk = clattn_tensor_host(kc[run], B, HKV, NKV, DK),
                      tv = clattn_tensor_host(vc[run], B, HKV, NKV, DK),
                      to = clattn_tensor_host(o[run], B, HQ, NQ, DK);
        if (run < 3)
            TU_ASSERT_OK(clattn_attention(ctx, &d, &tq, &tk, &tv, &to), "rotary tables, run %d",
                         run);
        else
            TU_ASSERT_OK(clattn_reference_attention(&d, &tq, &tk, &tv, &to), "reference");
    }
    cl_device_id dev;
    clattn_context_get_cl(ctx, NULL, &dev, NULL);
    char ext[4096] = "";
    clGetDeviceInfo(dev, CL_DEVICE_EXTENSIONS, sizeof ext - 1, ext, NULL);
    if (strstr(ext, "cl_khr_fp64")) { /* base-θ tables: the same values, the same bits */
        ck_assert_msg(memcmp(o[0], o[1], sizeof o[0]) == 0,
                      "base-θ tables: O differs from the base");
        ck_assert_msg(memcmp(kc[0], kc[1], sizeof kc[0]) == 0, "base-θ tables: K differs");
    }
    clattn_tensor to2 = clattn_tensor_host(o[2], B, HQ, NQ, DK),
                  tk2 = clattn_tensor_host(kc[2], B, HKV, NKV, DK);
    TU_ASSERT_CLOSE("other tables: O", &to2, NULL, o[3], TU_TOL_DEFAULT);
    TU_ASSERT_CLOSE("other tables: K after the append", &tk2, NULL, kc[3], TU_TOL_DEFAULT);
    /* enqueued, the tables in a cl_mem [2, LEN, HALF]: the same bits as the host tables */
    {
        cl_context cl_ctx;
        cl_command_queue queue;
        clattn_context_get_cl(ctx, &cl_ctx, NULL, &queue);
        float tab[2 * LEN * HALF], kx[B * HKV * NKV * DK], vx[B * HKV * NKV * DK],
            ox[B * HQ * NQ * DK];
        memcpy(tab, cs[1], sizeof cs[1]);
        memcpy(tab + LEN * HALF, sn[1], sizeof sn[1]);
        memcpy(kx, k0, sizeof k0);
        memcpy(vx, v0, sizeof v0);
        cl_mem bt = buf_of(cl_ctx, tab, sizeof tab / 4), bq = buf_of(cl_ctx, q, sizeof q / 4),
               bk = buf_of(cl_ctx, kx, sizeof kx / 4), bv = buf_of(cl_ctx, vx, sizeof vx / 4),
               bkn = buf_of(cl_ctx, kn, sizeof kn / 4), bvn = buf_of(cl_ctx, vn, sizeof vn / 4),
               bo = buf_of(cl_ctx, ox, sizeof ox / 4);
        clattn_tensor eq = clattn_tensor_buffer(bq, B, HQ, NQ, DK),
                      ek = clattn_tensor_buffer(bk, B, HKV, NKV, DK),
                      ev = clattn_tensor_buffer(bv, B, HKV, NKV, DK),
                      eo = clattn_tensor_buffer(bo, B, HQ, NQ, DK),
                      ekn = clattn_tensor_buffer(bkn, B, HKV, NQ, DK),
                      evn = clattn_tensor_buffer(bvn, B, HKV, NQ, DK);
        clattn_rotary rot = base;
        rot.table_buffer = bt;
        rot.table_len = LEN;
        clattn_attention_desc d = clattn_attention_desc_default();
        d.mask = CLATTN_MASK_CAUSAL_BOTTOM_RIGHT;
        d.kv_lens = lens;
        d.k_new = &ekn;
        d.v_new = &evn;
        d.rotary = &rot;
        cl_event done = NULL;
        TU_ASSERT_OK(clattn_attention_enqueue(ctx, &d, &eq, &ek, &ev, &eo, 0, NULL, &done),
                     "enqueue, table_buffer");
        ck_assert_int_eq(clWaitForEvents(1, &done), CL_SUCCESS);
        clReleaseEvent(done);
        ck_assert_int_eq(clEnqueueReadBuffer(queue, bo, CL_TRUE, 0, sizeof ox, ox, 0, NULL, NULL),
                         CL_SUCCESS);
        ck_assert_msg(memcmp(ox, o[2], sizeof ox) == 0,
                      "table_buffer: O differs from the host tables'");
        /* a table_buffer smaller than [2, table_len, dim/2] */
        rot.table_len = LEN + 1;
        ck_assert_int_eq(clattn_attention_enqueue(ctx, &d, &eq, &ek, &ev, &eo, 0, NULL, NULL),
                         CLATTN_ERROR_BUFFER_TOO_SMALL);
        cl_mem all[7] = {bt, bq, bk, bv, bkn, bvn, bo};
        for (int i = 0; i < 7; i++)
            clReleaseMemObject(all[i]);
    }
    /* statuses: tables too short for a position, cos without sin, table_len 0, a
     * table_buffer in a blocking call; nothing written */
    {
        float kx[B * HKV * NKV * DK], vx[B * HKV * NKV * DK], ox[B * HQ * NQ * DK];
        memcpy(kx, k0, sizeof k0);
        memcpy(vx, v0, sizeof v0);
        tu_fill_value(ox, sizeof ox / 4, 7.0f);
        clattn_tensor tk = clattn_tensor_host(kx, B, HKV, NKV, DK),
                      tv = clattn_tensor_host(vx, B, HKV, NKV, DK),
                      to = clattn_tensor_host(ox, B, HQ, NQ, DK);
        struct {
            int64_t len;
            bool sin;
            bool buffer;
            clattn_status want;
        } bad[5] = {{22, true, false, CLATTN_ERROR_INVALID_SHAPE}, /* entry 1 rotates 20..22 */
                    {LEN, false, false, CLATTN_ERROR_INVALID_ARGUMENT},
                    {0, true, false, CLATTN_ERROR_INVALID_SHAPE},
                    {LEN, true, true, CLATTN_ERROR_INVALID_ARGUMENT},
                    {(int64_t)1 << 61, true, false, CLATTN_ERROR_SIZE_OVERFLOW}};
        for (int i = 0; i < 5; i++) {
            clattn_rotary rot = base;
            rot.cos_table = bad[i].buffer ? NULL : cs[1];
            rot.sin_table = bad[i].sin && !bad[i].buffer ? sn[1] : NULL;
            rot.table_buffer = bad[i].buffer ? (cl_mem)ctx : NULL; /* (never read: refused first) */
            rot.table_len = bad[i].len;
            clattn_attention_desc d = clattn_attention_desc_default();
            d.mask = CLATTN_MASK_CAUSAL_BOTTOM_RIGHT;
            d.kv_lens = lens;
            d.k_new = &tkn;
            d.v_new = &tvn;
            d.rotary = &rot;
            const clattn_status st = clattn_attention(ctx, &d, &tq, &tk, &tv, &to);
            ck_assert_msg(st == bad[i].want, "bad table %d: %s, expected %s (%s)", i,
                          clattn_status_string(st), clattn_status_string(bad[i].want),
                          clattn_last_error_message(ctx));
            ck_assert_msg(strstr(clattn_last_error_message(ctx), "rotary") != NULL,
                          "bad table %d: message \"%s\"", i, clattn_last_error_message(ctx));
        }
        tu_assert_untouched("O after bad tables", ox, 0, sizeof ox / 4, 7.0f);
        ck_assert_msg(memcmp(kx, k0, sizeof k0) == 0, "K written by a refused call");
    }
}
END_TEST

/* One append configuration: the device call against the reference on copies of the same
 * caches (O, LSE, the caches after), and without rotary against the call on caches
 * written by hand (same bits); rows outside the appended ones untouched. */
typedef struct acfg {
    int64_t b, h_q, h_kv, n_q, n_new, n_kv, d_k, d_v;
    int32_t lens[2];
    int rot;           /* 0 none, 1 NeoX full, 2 GPT-J partial (dim d_k/2) */
    int64_t page_size; /* 0: contiguous cache */
} acfg;

static const acfg acfgs[] = {
    {2, 8, 2, 3, 3, 64, 32, 24, {20, 61}, 0, 0},
    {2, 8, 2, 3, 3, 64, 32, 24, {20, 61}, 1, 0},
    {2, 4, 4, 1, 1, 40, 16, 16, {0, 39}, 2, 0},
    {2, 8, 2, 3, 3, 64, 32, 24, {15, 45}, 1, 16}, /* paged: rows across a page boundary */
    {1, 4, 2, 20, 20, 60, 16, 8, {33, 0}, 2, 7},  /* paged prefill, tiled kernels */
};

START_TEST(append_against_reference)
{
    const acfg *c = &acfgs[_i];
    clattn_context *ctx = tu_ctx();
    const clattn_kernel_family family = clattn_context_kernel_family(ctx);
    char text[256];
    snprintf(text, sizeof text,
             "append: b %lld h %lld/%lld n_q %lld n_new %lld n_kv %lld d %lld/%lld lens {%d,%d} "
             "rotary %s page_size %lld",
             (long long)c->b, (long long)c->h_q, (long long)c->h_kv, (long long)c->n_q,
             (long long)c->n_new, (long long)c->n_kv, (long long)c->d_k, (long long)c->d_v,
             c->lens[0], c->lens[1],
             c->rot == 0   ? "none"
             : c->rot == 1 ? "NeoX"
                           : "GPT-J half",
             (long long)c->page_size);
    /* caches: contiguous [b, h_kv, n_kv, d], or a paged pool (pages shuffled) */
    paged pg;
    memset(&pg, 0, sizeof pg);
    if (c->page_size)
        paged_init(&pg, c->b, c->h_q, c->h_kv, c->n_q, c->d_k, c->d_v, c->page_size,
                   c->n_kv / c->page_size, NULL, true, tu_seed() + 31u * (uint32_t)_i);
    const int64_t n_kv = c->page_size ? pg.n_kv : c->n_kv;
    const size_t nk = c->page_size ? (size_t)(pg.num_pages * c->h_kv * c->page_size * c->d_k)
                                   : (size_t)(c->b * c->h_kv * n_kv * c->d_k);
    const size_t nv = nk / (size_t)c->d_k * (size_t)c->d_v;
    float *k0 = tu_alloc(nk, 0.0f), *v0 = tu_alloc(nv, 0.0f);
    if (c->page_size) {
        memcpy(k0, pg.kpool, nk * 4);
        memcpy(v0, pg.vpool, nv * 4);
        for (size_t i = 0; i < nk; i++) /* the pools' NaN rows: values, so the caches compare */
            if (isnan(k0[i]))
                k0[i] = tu_gen(77, (uint32_t)i);
        for (size_t i = 0; i < nv; i++)
            if (isnan(v0[i]))
                v0[i] = tu_gen(78, (uint32_t)i);
    } else {
        tu_fill_gen(k0, nk, tu_seed() + 1u, 1.0f);
        tu_fill_gen(v0, nv, tu_seed() + 2u, 1.0f);
    }
    const size_t nq = (size_t)(c->b * c->h_q * c->n_q * c->d_k),
                 no = (size_t)(c->b * c->h_q * c->n_q * c->d_v);
    const size_t nkn = (size_t)(c->b * c->h_kv * c->n_new * c->d_k),
                 nvn = (size_t)(c->b * c->h_kv * c->n_new * c->d_v);
    float *q = tu_alloc(nq, 0.0f), *kn = tu_alloc(nkn, 0.0f), *vn = tu_alloc(nvn, 0.0f);
    tu_fill_gen(q, nq, tu_seed() + 3u, 1.0f);
    tu_fill_gen(kn, nkn, tu_seed() + 4u, 1.0f);
    tu_fill_gen(vn, nvn, tu_seed() + 5u, 1.0f);
    clattn_tensor tq = clattn_tensor_host(q, c->b, c->h_q, c->n_q, c->d_k);
    clattn_tensor tkn = clattn_tensor_host(kn, c->b, c->h_kv, c->n_new, c->d_k);
    clattn_tensor tvn = clattn_tensor_host(vn, c->b, c->h_kv, c->n_new, c->d_v);
    const clattn_rotary rot = {
        .dim = c->rot == 2 ? c->d_k / 2 : 0, .interleaved = c->rot == 2, .base = 0.0f};
    clattn_attention_desc d = clattn_attention_desc_default();
    d.mask = CLATTN_MASK_CAUSAL_BOTTOM_RIGHT;
    d.kv_lens = c->lens;
    d.k_new = &tkn;
    d.v_new = &tvn;
    d.rotary = c->rot ? &rot : NULL;
    d.paged = c->page_size ? &pg.pg : NULL;
    /* the reference on its own copies of the caches */
    float *kr = tu_alloc(nk, 0.0f), *vr = tu_alloc(nv, 0.0f), *orf = tu_alloc(no, 0.0f);
    float *lr = tu_alloc(no / (size_t)c->d_v, 0.0f);
    memcpy(kr, k0, nk * 4);
    memcpy(vr, v0, nv * 4);
    clattn_tensor tkr = c->page_size ? pool_view(&pg, kr, c->d_k)
                                     : clattn_tensor_host(kr, c->b, c->h_kv, n_kv, c->d_k);
    clattn_tensor tvr = c->page_size ? pool_view(&pg, vr, c->d_v)
                                     : clattn_tensor_host(vr, c->b, c->h_kv, n_kv, c->d_v);
    clattn_tensor tor = clattn_tensor_host(orf, c->b, c->h_q, c->n_q, c->d_v);
    clattn_tensor tlr = clattn_tensor_host(lr, c->b, c->h_q, c->n_q, 1);
    d.lse = &tlr;
    ck_assert_int_eq(clattn_reference_attention(&d, &tq, &tkr, &tvr, &tor), CLATTN_SUCCESS);
    double *eo = malloc(sizeof(double) * no), *el = malloc(sizeof(double) * no / (size_t)c->d_v);
    for (size_t i = 0; i < no; i++)
        eo[i] = orf[i];
    for (size_t i = 0; i < no / (size_t)c->d_v; i++)
        el[i] = lr[i];
    static const clattn_kernel_family fams[2] = {CLATTN_KERNEL_FAMILY_CPU,
                                                 CLATTN_KERNEL_FAMILY_GPU};
    for (int f = 0; f < 2; f++) {
        TU_ASSERT_OK(clattn_context_set_kernel_family(ctx, fams[f]), "set family");
        float *kd = tu_alloc(nk, 0.0f), *vd = tu_alloc(nv, 0.0f), *od = tu_alloc(no, -7.0f);
        float *ld = tu_alloc(no / (size_t)c->d_v, -7.0f);
        memcpy(kd, k0, nk * 4);
        memcpy(vd, v0, nv * 4);
        clattn_tensor tkd = c->page_size ? pool_view(&pg, kd, c->d_k)
                                         : clattn_tensor_host(kd, c->b, c->h_kv, n_kv, c->d_k);
        clattn_tensor tvd = c->page_size ? pool_view(&pg, vd, c->d_v)
                                         : clattn_tensor_host(vd, c->b, c->h_kv, n_kv, c->d_v);
        clattn_tensor tod = clattn_tensor_host(od, c->b, c->h_q, c->n_q, c->d_v);
        clattn_tensor tld = clattn_tensor_host(ld, c->b, c->h_q, c->n_q, 1);
        clattn_attention_desc dd = d;
        dd.lse = &tld;
        TU_ASSERT_OK(clattn_attention(ctx, &dd, &tq, &tkd, &tvd, &tod), "%s: %s family", text,
                     f ? "GPU" : "CPU");
        /* the plan's reason names the append last, or ends in "..." where the 255
         * characters cut it (the GPU family's split-KV text is long): never cut silently */
        clattn_plan plan;
        TU_ASSERT_OK(clattn_attention_plan(ctx, &dd, &tq, &tkd, &tvd, &tod, &plan), "plan");
        const size_t rl = strlen(plan.reason);
        ck_assert_msg(
            strstr(plan.reason, "new K/V rows appended") != NULL ||
                (rl == sizeof plan.reason - 1 && strcmp(plan.reason + rl - 3, "...") == 0),
            "%s: reason \"%s\"", text, plan.reason);
        if (!f) /* the CPU family's reasons fit whole */
            ck_assert_msg(strstr(plan.reason, "new K/V rows appended") != NULL, "%s: reason \"%s\"",
                          text, plan.reason);
        char what[320];
        snprintf(what, sizeof what, "%s, %s family: O", text, f ? "GPU" : "CPU");
        TU_ASSERT_CLOSE(what, &tod, eo, NULL, TU_TOL_DEFAULT);
        snprintf(what, sizeof what, "%s, %s family: LSE", text, f ? "GPU" : "CPU");
        TU_ASSERT_CLOSE(what, &tld, el, NULL, TU_TOL_DEFAULT);
        /* the caches: V rows copied exactly, K rows (rotated in float32 on the device,
         * float64 in the reference) within 2 ulp-ish, every other element untouched */
        for (size_t i = 0; i < nk; i++)
            ck_assert_msg(fabsf(kd[i] - kr[i]) <= 1e-6f * (1.0f + fabsf(kr[i])) &&
                              (c->rot || kd[i] == kr[i]),
                          "%s: K cache element %zu is %.9g, the reference wrote %.9g (was %.9g)",
                          text, i, (double)kd[i], (double)kr[i], (double)k0[i]);
        ck_assert_msg(memcmp(vd, vr, nv * 4) == 0, "%s: the V caches differ", text);
        if (!c->rot) { /* the same call on caches written by hand: the same bits */
            float *oh = tu_alloc(no, -7.0f);
            int32_t lens2[2] = {c->lens[0] + (int32_t)c->n_new, c->lens[1] + (int32_t)c->n_new};
            clattn_attention_desc dh = d;
            dh.k_new = dh.v_new = NULL;
            dh.kv_lens = lens2;
            dh.lse = NULL;
            clattn_tensor toh = clattn_tensor_host(oh, c->b, c->h_q, c->n_q, c->d_v);
            TU_ASSERT_OK(clattn_attention(ctx, &dh, &tq, &tkd, &tvd, &toh), "%s: by hand", text);
            assert_same_bits("O (append vs caches written by hand)", od, oh, no, text);
            free(oh);
        }
        free(kd);
        free(vd);
        free(od);
        free(ld);
        printf("%s, %s family: O, LSE and caches as the reference\n", text, f ? "GPU" : "CPU");
    }
    TU_ASSERT_OK(clattn_context_set_kernel_family(ctx, family), "restore family");
    /* the plan names the append */
    clattn_plan plan;
    float o1[1];
    clattn_tensor to1 = clattn_tensor_host(o1, c->b, c->h_q, c->n_q, c->d_v);
    TU_ASSERT_OK(clattn_attention_plan(ctx, &d, &tq, &tkr, &tvr, &to1, &plan), "plan");
    ck_assert_msg(
        strncmp(plan.kernels, c->rot ? "append, rope_q, " : "append, ", c->rot ? 16 : 8) == 0,
        "%s: kernels \"%s\"", text, plan.kernels);
    free(eo);
    free(el);
    free(q);
    free(kn);
    free(vn);
    free(k0);
    free(v0);
    free(kr);
    free(vr);
    free(orf);
    free(lr);
    if (c->page_size)
        paged_free(&pg);
}
END_TEST

/* The enqueue call with the lengths in a cl_mem: the same bits (O, K and V caches) as the
 * blocking call with host lengths; device lengths past the cache are clamped. */

START_TEST(append_enqueue_device_lengths)
{
    clattn_context *ctx = tu_ctx();
    cl_context cl_ctx;
    cl_command_queue queue;
    ck_assert_int_eq(clattn_context_get_cl(ctx, &cl_ctx, NULL, &queue), CLATTN_SUCCESS);
    const int64_t b = 2, h_q = 4, h_kv = 2, n_q = 2, n_new = 2, n_kv = 30, d = 16;
    const size_t nq = (size_t)(b * h_q * n_q * d), nk = (size_t)(b * h_kv * n_kv * d),
                 nn = (size_t)(b * h_kv * n_new * d);
    float *q = tu_alloc(nq, 0), *k = tu_alloc(nk, 0), *v = tu_alloc(nk, 0), *kn = tu_alloc(nn, 0),
          *vn = tu_alloc(nn, 0), *o = tu_alloc(nq, 0);
    tu_fill_gen(q, nq, 41, 1.0f);
    tu_fill_gen(k, nk, 42, 1.0f);
    tu_fill_gen(v, nk, 43, 1.0f);
    tu_fill_gen(kn, nn, 44, 1.0f);
    tu_fill_gen(vn, nn, 45, 1.0f);
    /* K and V buffers with a tail of canaries past the views: a write past the cache
     * (a device length beyond n_kv) would land there */
    const size_t tail = 20000;
    float *kt = tu_alloc(nk + tail, 12345.0f), *vt = tu_alloc(nk + tail, 12345.0f);
    memcpy(kt, k, nk * 4);
    memcpy(vt, v, nk * 4);
    cl_mem mq = buf_of(cl_ctx, q, nq), mk = buf_of(cl_ctx, kt, nk + tail),
           mv = buf_of(cl_ctx, vt, nk + tail);
    cl_mem mkn = buf_of(cl_ctx, kn, nn), mvn = buf_of(cl_ctx, vn, nn), mo = buf_of(cl_ctx, o, nq);
    int32_t lens[2] = {7, 28};
    cl_int err;
    cl_mem ml =
        clCreateBuffer(cl_ctx, CL_MEM_READ_WRITE | CL_MEM_COPY_HOST_PTR, sizeof lens, lens, &err);
    const clattn_rotary rot = {.dim = 0, .interleaved = 0, .base = 500.0f};
    clattn_attention_desc d0 = clattn_attention_desc_default();
    d0.mask = CLATTN_MASK_CAUSAL_BOTTOM_RIGHT;
    d0.rotary = &rot;
    /* the blocking call with host lengths */
    clattn_tensor tq = clattn_tensor_host(q, b, h_q, n_q, d),
                  tk = clattn_tensor_host(k, b, h_kv, n_kv, d);
    clattn_tensor tv = clattn_tensor_host(v, b, h_kv, n_kv, d),
                  to = clattn_tensor_host(o, b, h_q, n_q, d);
    clattn_tensor tkn = clattn_tensor_host(kn, b, h_kv, n_new, d),
                  tvn = clattn_tensor_host(vn, b, h_kv, n_new, d);
    clattn_attention_desc dh = d0;
    dh.kv_lens = lens;
    dh.k_new = &tkn;
    dh.v_new = &tvn;
    TU_ASSERT_OK(clattn_attention(ctx, &dh, &tq, &tk, &tv, &to), "blocking append");
    /* the enqueue call with the lengths on the device */
    clattn_tensor bq = clattn_tensor_buffer(mq, b, h_q, n_q, d),
                  bk = clattn_tensor_buffer(mk, b, h_kv, n_kv, d);
    clattn_tensor bv = clattn_tensor_buffer(mv, b, h_kv, n_kv, d),
                  bo = clattn_tensor_buffer(mo, b, h_q, n_q, d);
    clattn_tensor bkn = clattn_tensor_buffer(mkn, b, h_kv, n_new, d),
                  bvn = clattn_tensor_buffer(mvn, b, h_kv, n_new, d);
    clattn_attention_desc db = d0;
    db.kv_lens_buffer = ml;
    db.k_new = &bkn;
    db.v_new = &bvn;
    cl_event done = NULL;
    TU_ASSERT_OK(clattn_attention_enqueue(ctx, &db, &bq, &bk, &bv, &bo, 0, NULL, &done),
                 "enqueue append with device lengths");
    float *o2 = tu_alloc(nq, 0), *k2 = tu_alloc(nk, 0), *v2 = tu_alloc(nk, 0);
    ck_assert_int_eq(clEnqueueReadBuffer(queue, mo, CL_TRUE, 0, nq * 4, o2, 1, &done, NULL),
                     CL_SUCCESS);
    ck_assert_int_eq(clEnqueueReadBuffer(queue, mk, CL_TRUE, 0, nk * 4, k2, 0, NULL, NULL),
                     CL_SUCCESS);
    ck_assert_int_eq(clEnqueueReadBuffer(queue, mv, CL_TRUE, 0, nk * 4, v2, 0, NULL, NULL),
                     CL_SUCCESS);
    clReleaseEvent(done);
    assert_same_bits("O (enqueue, device lengths)", o2, o, nq, "append");
    assert_same_bits("K cache (enqueue, device lengths)", k2, k, nk, "append");
    assert_same_bits("V cache (enqueue, device lengths)", v2, v, nk, "append");
    /* a device length past the cache: rows past n_kv are not written (no access outside
     * K and V; oclgrind runs this), the attention sees n_kv keys */
    int32_t far[2] = {29, 1000};
    ck_assert_int_eq(clEnqueueWriteBuffer(queue, ml, CL_TRUE, 0, sizeof far, far, 0, NULL, NULL),
                     CL_SUCCESS);
    TU_ASSERT_OK(clattn_attention_enqueue(ctx, &db, &bq, &bk, &bv, &bo, 0, NULL, &done),
                 "enqueue append past the cache");
    ck_assert_int_eq(clWaitForEvents(1, &done), CL_SUCCESS);
    clReleaseEvent(done);
    ck_assert_int_eq(clEnqueueReadBuffer(queue, mk, CL_TRUE, 0, (nk + tail) * 4, kt, 0, NULL, NULL),
                     CL_SUCCESS);
    ck_assert_int_eq(clEnqueueReadBuffer(queue, mv, CL_TRUE, 0, (nk + tail) * 4, vt, 0, NULL, NULL),
                     CL_SUCCESS);
    tu_assert_untouched("K past the cache", kt, nk, nk + tail, 12345.0f);
    tu_assert_untouched("V past the cache", vt, nk, nk + tail, 12345.0f);
    free(kt);
    free(vt);
    cl_mem all[7] = {mq, mk, mv, mkn, mvn, mo, ml};
    for (int i = 0; i < 7; i++)
        clReleaseMemObject(all[i]);
    float *bufs[9] = {q, k, v, kn, vn, o, o2, k2, v2};
    for (int i = 0; i < 9; i++)
        free(bufs[i]);
    (void)err;
}
END_TEST

START_TEST(append_validation)
{
    clattn_context *ctx = tu_ctx();
    float q[2 * 4 * 8], kc[2 * 2 * 10 * 8], vc[2 * 2 * 10 * 8], kn[2 * 2 * 2 * 8],
        vn[2 * 2 * 2 * 8], o[2 * 4 * 8];
    tu_fill_gen(q, 64, 1, 1.0f);
    tu_fill_gen(kc, 320, 2, 1.0f);
    tu_fill_gen(vc, 320, 3, 1.0f);
    tu_fill_gen(kn, 64, 4, 1.0f);
    tu_fill_gen(vn, 64, 5, 1.0f);
    clattn_tensor tq = clattn_tensor_host(q, 2, 4, 1, 8), tk = clattn_tensor_host(kc, 2, 2, 10, 8);
    clattn_tensor tv = clattn_tensor_host(vc, 2, 2, 10, 8), to = clattn_tensor_host(o, 2, 4, 1, 8);
    clattn_tensor tkn = clattn_tensor_host(kn, 2, 2, 2, 8),
                  tvn = clattn_tensor_host(vn, 2, 2, 2, 8);
    int32_t lens[2] = {3, 8};
    clattn_rotary rot = {.dim = 0, .interleaved = 0, .base = 0.0f};
    clattn_attention_desc d = clattn_attention_desc_default();
    d.kv_lens = lens;
    d.k_new = &tkn;
    d.v_new = &tvn;
#define EXPECT(status, what)                                                                       \
    do {                                                                                           \
        const clattn_status st_ = clattn_attention(ctx, &d, &tq, &tk, &tv, &to);                   \
        ck_assert_msg(st_ == (status), "%s: status %d (%s), expected %d: %s", what, (int)st_,      \
                      clattn_status_string(st_), (int)(status), clattn_last_error_message(ctx));   \
        printf("append validation, %s: %s\n", what, clattn_last_error_message(ctx));               \
    } while (0)
    EXPECT(CLATTN_SUCCESS, "a good call");
    lens[1] = 9;
    EXPECT(CLATTN_ERROR_INVALID_SHAPE, "kv_lens + n_new beyond n_kv");
    lens[1] = 8;
    d.v_new = NULL;
    EXPECT(CLATTN_ERROR_INVALID_ARGUMENT, "k_new without v_new");
    d.v_new = &tvn;
    d.kv_lens = NULL;
    EXPECT(CLATTN_ERROR_INVALID_ARGUMENT, "no kv_lens");
    d.kv_lens = lens;
    clattn_tensor bad = tkn;
    bad.shape[3] = 4;
    d.k_new = &bad;
    EXPECT(CLATTN_ERROR_INVALID_SHAPE, "k_new of another d_k");
    d.k_new = &tkn;
    d.rotary = &rot;
    rot.dim = 3;
    EXPECT(CLATTN_ERROR_INVALID_ARGUMENT, "rotary dim 3");
    rot.dim = 10;
    EXPECT(CLATTN_ERROR_INVALID_ARGUMENT, "rotary dim 10 > d_k");
    rot.dim = 0;
    rot.interleaved = 2;
    EXPECT(CLATTN_ERROR_INVALID_ARGUMENT, "rotary interleaved 2");
    rot.interleaved = 0;
    rot.base = -1.0f;
    EXPECT(CLATTN_ERROR_INVALID_ARGUMENT, "rotary base -1");
    rot.base = 0.0f;
    EXPECT(CLATTN_SUCCESS, "rotary");
    d.k_new = d.v_new = NULL;
    EXPECT(CLATTN_ERROR_INVALID_ARGUMENT, "rotary without k_new");
    d.k_new = &tkn;
    d.v_new = &tvn;
    d.rotary = NULL;
    /* K broadcast over the batch: a view the append cannot write */
    clattn_tensor kb = tk;
    kb.shape[0] = 2;
    kb.strides[0] = 0, kb.strides[1] = 80, kb.strides[2] = 8, kb.strides[3] = 1;
    kb.broadcast = CLATTN_BROADCAST(0);
    {
        const clattn_status st = clattn_attention(ctx, &d, &tq, &kb, &tv, &to);
        ck_assert_msg(st == CLATTN_ERROR_INVALID_LAYOUT, "broadcast K with an append: %d (%s)",
                      (int)st, clattn_last_error_message(ctx));
    }
    /* O in K's memory */
    {
        clattn_tensor ok = clattn_tensor_host(kc, 2, 4, 1, 8);
        const clattn_status st = clattn_attention(ctx, &d, &tq, &tk, &tv, &ok);
        ck_assert_msg(st == CLATTN_ERROR_INVALID_LAYOUT, "O over K with an append: %d (%s)",
                      (int)st, clattn_last_error_message(ctx));
    }
    float lse[8];
    clattn_tensor tl = clattn_tensor_host(lse, 2, 4, 1, 1);
    ck_assert_int_eq(
        clattn_attention_backward(ctx, &d, &tq, &tk, &tv, &to, &tl, &to, &tq, &tk, &tv),
        CLATTN_ERROR_UNSUPPORTED);
#undef EXPECT
}
END_TEST

/* ---- packed variable-length batches (desc.varlen) ------------------------------------ */

/* Three sequences packed in FlashAttention's (total, heads, d) layout, one of them with
 * no query (and cu_seqlens_q starting at 1: row 0 is not a sequence's), against the
 * reference on the padded batch with q_lens / kv_lens (same doubles), the device within
 * tolerance, the enqueue call with the same bits, rows outside the sequences untouched,
 * and every status. */
START_TEST(varlen_packed)
{
    clattn_context *ctx = tu_ctx();
    enum { NB = 3, HQ = 4, HK = 2, DK = 24, DV = 16, TQ = 25, TK = 46, MQ = 17, MK = 30 };
    const int32_t cu_q[NB + 1] = {1, 6, 6, 23}, cu_k[NB + 1] = {0, 9, 13, 43};
    float *q = tu_alloc((size_t)TQ * HQ * DK, 0), *k = tu_alloc((size_t)TK * HK * DK, NAN),
          *v = tu_alloc((size_t)TK * HK * DV, NAN), *o = tu_alloc((size_t)TQ * HQ * DV, -7.0f),
          *lse = tu_alloc((size_t)TQ * HQ, -7.0f);
    tu_fill_gen(q, (size_t)TQ * HQ * DK, tu_seed() + 61u, 1.0f);
    tu_fill_gen(k, (size_t)cu_k[NB] * HK * DK, tu_seed() + 62u, 1.0f); /* (NaN past the keys) */
    tu_fill_gen(v, (size_t)cu_k[NB] * HK * DV, tu_seed() + 63u, 1.0f);
    /* packed views [1, h, total, d] with FlashAttention's strides */
    const int64_t sq[4] = {(int64_t)TQ * HQ * DK, DK, HQ * DK, 1},
                  sk[4] = {(int64_t)TK * HK * DK, DK, HK * DK, 1};
    const int64_t sv[4] = {(int64_t)TK * HK * DV, DV, HK * DV, 1},
                  so[4] = {(int64_t)TQ * HQ * DV, DV, HQ * DV, 1};
    const int64_t shq[4] = {1, HQ, TQ, DK}, shk[4] = {1, HK, TK, DK}, shv[4] = {1, HK, TK, DV},
                  sho[4] = {1, HQ, TQ, DV}, shl[4] = {1, HQ, TQ, 1}, sl[4] = {TQ * HQ, 1, HQ, 1};
    clattn_tensor tq = tu_view(q, shq, sq, 0), tk = tu_view(k, shk, sk, 0),
                  tv = tu_view(v, shv, sv, 0);
    clattn_tensor to = tu_view(o, sho, so, 0), tl = tu_view(lse, shl, sl, 0);
    float slopes[HQ] = {0.5f, 0.25f, 0.125f, 0.0625f};
    const clattn_varlen vl = {cu_q, cu_k, NB, NULL, NULL, 0, 0};
    clattn_attention_desc d = clattn_attention_desc_default();
    d.mask = CLATTN_MASK_CAUSAL_BOTTOM_RIGHT;
    d.window = 1;
    d.window_left = 12;
    d.window_right = -1;
    d.alibi_slopes = slopes;
    d.lse = &tl;
    d.varlen = &vl;
    TU_ASSERT_OK(clattn_attention(ctx, &d, &tq, &tk, &tv, &to), "varlen");
    /* the padded batch [NB, h, max, d] with lengths, on the reference */
    float *pq = tu_alloc((size_t)NB * HQ * MQ * DK, 0),
          *pk = tu_alloc((size_t)NB * HK * MK * DK, 0),
          *pv = tu_alloc((size_t)NB * HK * MK * DV, 0),
          *po = tu_alloc((size_t)NB * HQ * MQ * DV, 0), *pl = tu_alloc((size_t)NB * HQ * MQ, 0);
    int32_t ql[NB], kl[NB];
    for (int b = 0; b < NB; b++) {
        ql[b] = cu_q[b + 1] - cu_q[b];
        kl[b] = cu_k[b + 1] - cu_k[b];
        for (int h = 0; h < HQ; h++)
            for (int i = 0; i < ql[b]; i++)
                for (int c = 0; c < DK; c++)
                    pq[((b * HQ + h) * MQ + i) * DK + c] = q[((cu_q[b] + i) * HQ + h) * DK + c];
        for (int h = 0; h < HK; h++)
            for (int j = 0; j < kl[b]; j++) {
                for (int c = 0; c < DK; c++)
                    pk[((b * HK + h) * MK + j) * DK + c] = k[((cu_k[b] + j) * HK + h) * DK + c];
                for (int c = 0; c < DV; c++)
                    pv[((b * HK + h) * MK + j) * DV + c] = v[((cu_k[b] + j) * HK + h) * DV + c];
            }
    }
    clattn_tensor tpq = clattn_tensor_host(pq, NB, HQ, MQ, DK),
                  tpk = clattn_tensor_host(pk, NB, HK, MK, DK);
    clattn_tensor tpv = clattn_tensor_host(pv, NB, HK, MK, DV),
                  tpo = clattn_tensor_host(po, NB, HQ, MQ, DV);
    clattn_tensor tpl = clattn_tensor_host(pl, NB, HQ, MQ, 1);
    clattn_attention_desc dp = d;
    dp.varlen = NULL;
    dp.q_lens = ql;
    dp.kv_lens = kl;
    dp.lse = &tpl;
    ck_assert_int_eq(clattn_reference_attention(&dp, &tpq, &tpk, &tpv, &tpo), CLATTN_SUCCESS);
    /* the reference on the packed call gives the same doubles (as floats) */
    float *ro = tu_alloc((size_t)TQ * HQ * DV, -7.0f), *rl = tu_alloc((size_t)TQ * HQ, -7.0f);
    clattn_tensor tro = tu_view(ro, sho, so, 0), trl = tu_view(rl, shl, sl, 0);
    clattn_attention_desc dr = d;
    dr.lse = &trl;
    ck_assert_int_eq(clattn_reference_attention(&dr, &tq, &tk, &tv, &tro), CLATTN_SUCCESS);
    int checked = 0;
    for (int i = 0; i < TQ; i++) {
        int b = -1;
        for (int s2 = 0; s2 < NB; s2++)
            if (i >= cu_q[s2] && i < cu_q[s2 + 1])
                b = s2;
        for (int h = 0; h < HQ; h++) {
            const float got_l = lse[i * HQ + h], ref_l = rl[i * HQ + h];
            if (b < 0) { /* not a sequence's row: untouched */
                ck_assert_msg(got_l == -7.0f && ref_l == -7.0f, "varlen: row %d head %d written", i,
                              h);
                for (int c = 0; c < DV; c++)
                    ck_assert_msg(o[(i * HQ + h) * DV + c] == -7.0f, "varlen: O row %d written", i);
                continue;
            }
            const int r = i - cu_q[b];
            const float want_l = pl[(b * HQ + h) * MQ + r];
            ck_assert_msg(ref_l == want_l, "varlen reference: LSE row %d head %d %.9g, padded %.9g",
                          i, h, (double)ref_l, (double)want_l);
            ck_assert_msg(tu_within(got_l, want_l, TU_TOL_DEFAULT),
                          "varlen: LSE of sequence %d row %d head %d is %.9g, expected %.9g", b, r,
                          h, (double)got_l, (double)want_l);
            for (int c = 0; c < DV; c++) {
                const float want = po[((b * HQ + h) * MQ + r) * DV + c];
                ck_assert_msg(ro[(i * HQ + h) * DV + c] == want, "varlen reference: O differs");
                ck_assert_msg(tu_within(o[(i * HQ + h) * DV + c], want, TU_TOL_DEFAULT),
                              "varlen: O of sequence %d row %d head %d col %d is %.9g, expected "
                              "%.9g",
                              b, r, h, c, (double)o[(i * HQ + h) * DV + c], (double)want);
                checked++;
            }
        }
    }
    ck_assert_int_eq(checked, (cu_q[NB] - cu_q[0]) * HQ * DV);
    /* the enqueue call: the same bits */
    cl_context cl_ctx;
    cl_command_queue queue;
    ck_assert_int_eq(clattn_context_get_cl(ctx, &cl_ctx, NULL, &queue), CLATTN_SUCCESS);
    cl_mem mq = buf_of(cl_ctx, q, (size_t)TQ * HQ * DK),
           mk = buf_of(cl_ctx, k, (size_t)TK * HK * DK);
    cl_mem mv = buf_of(cl_ctx, v, (size_t)TK * HK * DV);
    float *o2 = tu_alloc((size_t)TQ * HQ * DV, -7.0f);
    cl_mem mo = buf_of(cl_ctx, o2, (size_t)TQ * HQ * DV);
    clattn_tensor bq = tq, bk = tk, bv = tv, bo = to;
    bq.host = bk.host = bv.host = bo.host = NULL;
    bq.buffer = mq, bk.buffer = mk, bv.buffer = mv, bo.buffer = mo;
    clattn_attention_desc de = d;
    de.lse = NULL;
    cl_event done = NULL;
    TU_ASSERT_OK(clattn_attention_enqueue(ctx, &de, &bq, &bk, &bv, &bo, 0, NULL, &done),
                 "varlen enqueue");
    ck_assert_ptr_nonnull(done);
    ck_assert_int_eq(
        clEnqueueReadBuffer(queue, mo, CL_TRUE, 0, (size_t)TQ * HQ * DV * 4, o2, 1, &done, NULL),
        CL_SUCCESS);
    clReleaseEvent(done);
    assert_same_bits("O (varlen enqueue)", o2, o, (size_t)TQ * HQ * DV, "varlen");
    /* the plan: the longest query sequence (17 rows) */
    clattn_plan plan;
    TU_ASSERT_OK(clattn_attention_plan(ctx, &d, &tq, &tk, &tv, &to, &plan), "varlen plan");
    printf("varlen: plan of the longest sequence: %s (%s)\n", plan.kernels, plan.reason);
    /* statuses */
    int32_t bad_q[NB + 1] = {1, 6, 5, 23};
    clattn_varlen vb = vl;
    vb.cu_seqlens_q = bad_q;
    de.varlen = &vb;
    ck_assert_int_eq(clattn_attention(ctx, &de, &tq, &tk, &tv, &to), CLATTN_ERROR_INVALID_SHAPE);
    bad_q[2] = 6;
    bad_q[3] = TQ + 1;
    ck_assert_int_eq(clattn_attention(ctx, &de, &tq, &tk, &tv, &to), CLATTN_ERROR_INVALID_SHAPE);
    vb.cu_seqlens_q = NULL;
    ck_assert_int_eq(clattn_attention(ctx, &de, &tq, &tk, &tv, &to), CLATTN_ERROR_INVALID_ARGUMENT);
    de.varlen = &vl;
    de.kv_lens = kl;
    ck_assert_int_eq(clattn_attention(ctx, &de, &tq, &tk, &tv, &to), CLATTN_ERROR_UNSUPPORTED);
    de.kv_lens = NULL;
    ck_assert_int_eq(clattn_attention_enqueue(ctx, &de, &tq, &tk, &tv, &to, 0, NULL, NULL),
                     CLATTN_ERROR_INVALID_LAYOUT); /* host views in the enqueue call */
    ck_assert_int_eq(
        clattn_attention_backward(ctx, &de, &tq, &tk, &tv, &to, &tl, &to, &tq, &tk, &tv),
        CLATTN_ERROR_UNSUPPORTED);
    /* a batch dimension other than 1 */
    ck_assert_int_eq(clattn_attention(ctx, &de, &tpq, &tpk, &tpv, &tpo),
                     CLATTN_ERROR_INVALID_SHAPE);
    cl_mem all[4] = {mq, mk, mv, mo};
    for (int i = 0; i < 4; i++)
        clReleaseMemObject(all[i]);
    float *bufs[12] = {q, k, v, o, lse, pq, pk, pv, po, pl, ro, rl};
    for (int i = 0; i < 12; i++)
        free(bufs[i]);
    free(o2);
}
END_TEST

int main(void)
{
    tu_seed_init(0x9a6edu);
    Suite *s = suite_create("paged");
    /* one test case per area, so CK_RUN_CASE=device runs one alone (oclgrind) */
    /* the decode configurations here; the tiled ones (a program per shape and family,
     * about 2 min to build cold on PoCL) in ctest's slow test_paged_sweep */
    TCase *tc = tcase_create("equal");
    tcase_set_timeout(tc, 900);
    tcase_add_loop_test(tc, paged_equals_contiguous, 0, N_DECODE_CONFIGS);
    suite_add_tcase(s, tc);
    TCase *tm = tcase_create("equal_more");
    tcase_set_tags(tm, "slow");
    tcase_set_timeout(tm, 900);
    tcase_add_loop_test(tm, paged_equals_contiguous, N_DECODE_CONFIGS,
                        (int)(sizeof configs / sizeof configs[0]));
    suite_add_tcase(s, tm);
    /* int8 K/V in both families, GQA with 3 tokens, tiled prefill; every FP8 code through
     * four kernels (the README's suite keeps int8 and FP8 in test_model's MiniLM check
     * and in int8_kv_validation) */
    TCase *tqm = tcase_create("int8_more");
    tcase_set_tags(tqm, "slow");
    tcase_set_timeout(tqm, 900);
    tcase_add_loop_test(tqm, int8_kv_cache, 0, 3);
    tcase_add_test(tqm, fp8_codes);
    suite_add_tcase(s, tqm);
    TCase *td = tcase_create("device");
    tcase_set_timeout(td, 900);
    tcase_add_test(td, paged_device_table);
    suite_add_tcase(s, td);
    TCase *tv = tcase_create("validation");
    tcase_add_test(tv, paged_validation);
    tcase_add_test(tv, int8_kv_validation);
    tcase_add_test(tv, append_validation);
    suite_add_tcase(s, tv);
    TCase *ta = tcase_create("append");
    tcase_set_timeout(ta, 900);
    tcase_add_test(ta, append_rotary_formula);
    tcase_add_test(ta, append_rotary_query_positions);
    tcase_add_test(ta, rotary_tables);
    tcase_add_test(ta, append_enqueue_device_lengths);
    tcase_add_loop_test(ta, append_against_reference, 0, 1);
    suite_add_tcase(s, ta);
    /* the other configurations (rotary, paged; programs per shape and family): slow */
    TCase *tvl = tcase_create("varlen");
    tcase_set_timeout(tvl, 900);
    tcase_add_test(tvl, varlen_packed);
    suite_add_tcase(s, tvl);
    TCase *tam = tcase_create("append_more");
    tcase_set_tags(tam, "slow");
    tcase_set_timeout(tam, 900);
    tcase_add_loop_test(tam, append_against_reference, 1, (int)(sizeof acfgs / sizeof acfgs[0]));
    suite_add_tcase(s, tam);
    return tu_run_suite(s);
}
