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
    const size_t no = (size_t)(p->b * p->h_q * p->n_q * p->d_v), nl = (size_t)(p->b * p->h_q * p->n_q);
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
    for (size_t i = 0; i < n; i++)
        ck_assert_msg(memcmp(&a[i], &b[i], sizeof(float)) == 0,
                      "%s: %s: element %zu is %.9g paged, %.9g contiguous", text, what, i,
                      (double)a[i], (double)b[i]);
}

/* The checks of one configuration with the context's current kernel family. */
static void check_config(const paged *p, const clattn_attention_desc *desc, const char *family)
{
    char text[400];
    snprintf(text, sizeof text, "%s, %s family", p->text, family);
    const size_t no = (size_t)(p->b * p->h_q * p->n_q * p->d_v), nl = (size_t)(p->b * p->h_q * p->n_q);
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
 * sizes 1, 5, 7, 16 and 256, both pool layouts, every score term in one. */
typedef struct config {
    int64_t b, h_q, h_kv, n_q, d_k, d_v, page_size, max_pages;
    int32_t lens[3]; /* lens[0] < 0: NULL (full) */
    bool fa_layout, terms;
} config;

static const config configs[] = {
    {3, 4, 4, 1, 64, 64, 16, 9, {144, 37, 0}, false, false},
    {2, 8, 2, 3, 40, 24, 7, 20, {140, 60, 0}, true, true},
    {2, 8, 2, 1, 128, 128, 256, 3, {768, 300, 0}, true, false}, /* split-KV: 2 splits */
    /* the tiled kernels (test_paged_sweep) */
    {2, 4, 2, 37, 32, 48, 5, 20, {100, 71, 0}, true, true},
    {1, 2, 1, 20, 16, 16, 1, 50, {-1, 0, 0}, false, false},
};
#define N_DECODE_CONFIGS 3

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
        float o1[1];
        clattn_tensor to = clattn_tensor_host(o1, p.b, p.h_q, p.n_q, p.d_v);
        clattn_plan plan;
        clattn_attention_desc dp = d;
        dp.paged = &p.pg;
        dp.kv_lens = p.lens;
        TU_ASSERT_OK(clattn_attention_plan(ctx, &dp, &p.tq, &p.tkp, &p.tvp, &to, &plan), "plan");
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
    TU_ASSERT_OK(clattn_context_set_kernel_family(ctx, family), "restore family");
    paged_free(&p);
}
END_TEST

/* The enqueue call with the table on the device: same bits as the host table; entries
 * outside the pool are clamped into it (no access outside the pool's cl_mem). */
START_TEST(paged_device_table)
{
    const config *c = &configs[1];
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
    cl_mem mk = clCreateBuffer(cl_ctx, CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR, nk * 4, p.kpool, &err);
    cl_mem mv = clCreateBuffer(cl_ctx, CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR, nv * 4, p.vpool, &err);
    cl_mem mo = clCreateBuffer(cl_ctx, CL_MEM_READ_WRITE, no * 4, NULL, &err);
    cl_mem mt = clCreateBuffer(cl_ctx, CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR, nt * 4, p.table, &err);
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
    ck_assert_int_eq(
        clEnqueueWriteBuffer(queue, mt, CL_TRUE, 0, nt * 4, bad, 0, NULL, NULL), CL_SUCCESS);
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
        ck_assert_int_eq(clEnqueueWriteBuffer(queue, mt, CL_TRUE, 0, nt * 4, p.table, 0, NULL, NULL),
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
        ck_assert_int_eq(clEnqueueWriteBuffer(queue, ml, CL_TRUE, 0, sizeof dev_lens, dev_lens, 0,
                                              NULL, NULL),
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
    float *o = tu_alloc((size_t)(2 * 2 * 4 * 8), 0.0f), *w = tu_alloc((size_t)(2 * 2 * 4 * 32), 0.0f);
    clattn_tensor to = clattn_tensor_host(o, 2, 2, 4, 8);
    clattn_attention_desc d = clattn_attention_desc_default();
    d.kv_lens = p.lens;
    clattn_paged_kv pg = p.pg;
    d.paged = &pg;
#define EXPECT(status, what)                                                                       \
    do {                                                                                           \
        const clattn_status st_ = clattn_attention(ctx, &d, &p.tq, &p.tkp, &p.tvp, &to);            \
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
    ck_assert_int_eq(clattn_reference_attention_backward(&d, &p.tq, &p.tkp, &p.tvp, &to, &to,
                                                         &p.tkp, &p.tvp),
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
    ck_assert_int_eq(clattn_multi_attention(multi, CLATTN_SPLIT_KEYS, &d, &p.tq, &p.tkp, &p.tvp,
                                            &to, NULL),
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
    TCase *td = tcase_create("device");
    tcase_set_timeout(td, 900);
    tcase_add_test(td, paged_device_table);
    suite_add_tcase(s, td);
    TCase *tv = tcase_create("validation");
    tcase_add_test(tv, paged_validation);
    suite_add_tcase(s, tv);
    return tu_run_suite(s);
}
