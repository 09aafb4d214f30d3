/* Packed variable-length batches in one launch (desc.varlen; host/varlen.c, common.cl
 * VARLEN_ROWS, varlen.cl): FlashAttention's (total, heads, d) layout with cu_seqlens on
 * the host and on the device (cl_mem, with max_seqlen), against the float64 reference
 * run sequence by sequence, in both kernel families:
 *  - a prefill-sized batch (the tiled kernels) and a decode-sized one (at most 3 query
 *    rows per sequence: the decode kernels, split-KV decoding in both families), with
 *    GQA, empty sequences, rows before the first and after the last sequence, sinks and
 *    score terms;
 *  - the context's kernel family: the CPU family on a CPU, the GPU family with
 *    CLATTN_KERNEL_FAMILY=gpu (CI's GPU-family passes on PoCL and on Intel's runtime);
 *  - blocking with host offsets within the stated tolerance of the reference, every row
 *    outside the sequences untouched; enqueued with host offsets, with offsets on the
 *    device, and with a max_seqlen_q above the longest sequence: the same bits;
 *  - offsets on the device that decrease, run past the tensors or are negative: the call
 *    succeeds and writes nothing outside O's rows (a canary tail after the buffer's
 *    view);
 *  - the unfused algorithm (one call per sequence) within tolerance, and every status.
 * Tolerance: |got − ref| ≤ 1e-5 + 1e-5·|ref| (TU_TOL_DEFAULT); a failure names the
 * worst element. Seed printed at start (CLATTN_TEST_SEED to change). */
#include "testutil.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <clattn.h>

#define MAXB 8
typedef struct vcase {
    const char *name;
    int nb, hq, hk, dk, dv, tq, tk;
    int32_t cu_q[MAXB + 1], cu_k[MAXB + 1];
    clattn_mask mask;
    int64_t window_left;
    bool alibi, sinks;
    float softcap;
    const char *kernels; /* a substring of the CPU family's plan.kernels */
} vcase;

static const vcase CASES[] = {
    {"prefill",
     4,
     4,
     2,
     32,
     24,
     48,
     70,
     {2, 19, 19, 40, 45},
     {0, 17, 30, 60, 66},
     CLATTN_MASK_CAUSAL_BOTTOM_RIGHT,
     -1,
     false,
     true,
     30.0f,
     "fused"},
    {"decode",
     5,
     8,
     2,
     64,
     64,
     8,
     300,
     {0, 1, 2, 2, 5, 6},
     {0, 40, 41, 100, 250, 300},
     CLATTN_MASK_NONE,
     50,
     true,
     true,
     0.0f,
     "decode"},
};
#define N_CASES ((int)(sizeof CASES / sizeof CASES[0]))

typedef struct vrun {
    const vcase *c;
    float *q, *k, *v;
    clattn_tensor tq, tk, tv;
    float slopes[16], sinks[16];
    clattn_varlen vl;
    clattn_attention_desc d;
} vrun;

/* packed [1, h, total, d] views with FlashAttention's (total, h, d) strides */
static clattn_tensor packed(float *data, int h, int total, int d)
{
    const int64_t shape[4] = {1, h, total, d},
                  st[4] = {(int64_t)total * h * d, d, (int64_t)h * d, 1};
    return tu_view(data, shape, st, 0);
}

static void vrun_init(vrun *r, const vcase *c, uint32_t seed)
{
    memset(r, 0, sizeof *r);
    r->c = c;
    r->q = tu_alloc((size_t)c->tq * c->hq * c->dk, 0);
    r->k = tu_alloc((size_t)c->tk * c->hk * c->dk, 0);
    r->v = tu_alloc((size_t)c->tk * c->hk * c->dv, 0);
    tu_fill_gen(r->q, (size_t)c->tq * c->hq * c->dk, seed + 1u, 1.0f);
    tu_fill_gen(r->k, (size_t)c->tk * c->hk * c->dk, seed + 2u, 1.0f);
    tu_fill_gen(r->v, (size_t)c->tk * c->hk * c->dv, seed + 3u, 1.0f);
    r->tq = packed(r->q, c->hq, c->tq, c->dk);
    r->tk = packed(r->k, c->hk, c->tk, c->dk);
    r->tv = packed(r->v, c->hk, c->tk, c->dv);
    for (int h = 0; h < c->hq; h++) {
        r->slopes[h] = exp2f(-(float)(h + 1));
        r->sinks[h] = 0.5f * tu_gen(seed + 4u, (uint32_t)h);
    }
    r->vl.cu_seqlens_q = c->cu_q;
    r->vl.cu_seqlens_k = c->cu_k;
    r->vl.batch = c->nb;
    r->d = clattn_attention_desc_default();
    r->d.mask = c->mask;
    if (c->window_left >= 0) {
        r->d.window = 1;
        r->d.window_left = c->window_left;
        r->d.window_right = -1;
    }
    r->d.alibi_slopes = c->alibi ? r->slopes : NULL;
    r->d.sinks = c->sinks ? r->sinks : NULL;
    r->d.softcap = c->softcap;
    r->d.varlen = &r->vl;
}

static void vrun_free(vrun *r)
{
    free(r->q);
    free(r->k);
    free(r->v);
}

static int seq_of_row(const vcase *c, int i)
{
    for (int b = 0; b < c->nb; b++)
        if (i >= c->cu_q[b] && i < c->cu_q[b + 1])
            return b;
    return -1;
}

/* got against the reference over the sequences' rows (the worst element named); rows
 * outside every sequence still hold the canary -7 */
static void check_against(const vrun *r, const float *o, const float *lse, const float *ro,
                          const float *rl, const char *what)
{
    const vcase *c = r->c;
    double worst = 0;
    int wi = -1, wh = 0, wc = 0;
    for (int i = 0; i < c->tq; i++)
        for (int h = 0; h < c->hq; h++) {
            const bool in = seq_of_row(c, i) >= 0;
            const size_t at = (size_t)i * c->hq + h;
            if (!in) {
                ck_assert_msg(lse[at] == -7.0f, "%s: %s: LSE row %d head %d written (%.9g)",
                              c->name, what, i, h, (double)lse[at]);
                for (int e = 0; e < c->dv; e++)
                    ck_assert_msg(o[at * c->dv + e] == -7.0f, "%s: %s: O row %d written", c->name,
                                  what, i);
                continue;
            }
            ck_assert_msg(tu_within(lse[at], rl[at], TU_TOL_DEFAULT),
                          "%s: %s: LSE row %d head %d is %.9g, reference %.9g", c->name, what, i, h,
                          (double)lse[at], (double)rl[at]);
            for (int e = 0; e < c->dv; e++) {
                const double err = fabs((double)o[at * c->dv + e] - ro[at * c->dv + e]);
                if (!tu_within(o[at * c->dv + e], ro[at * c->dv + e], TU_TOL_DEFAULT) ||
                    err > worst)
                    worst = isnan(err) ? INFINITY : err, wi = i, wh = h, wc = e;
            }
        }
    if (wi >= 0) {
        const size_t at = ((size_t)wi * c->hq + wh) * c->dv + wc;
        ck_assert_msg(tu_within(o[at], ro[at], TU_TOL_DEFAULT),
                      "%s: %s: worst O element row %d head %d col %d is %.9g, reference %.9g",
                      c->name, what, wi, wh, wc, (double)o[at], (double)ro[at]);
    }
}

/* The host twin of varlen.cl's clamping: sequence b starts at clamp(cu[b], end of b − 1,
 * total) and is clamp(cu[b + 1] − start, 0, min(max_len, total − start)) long. The hostile
 * offsets below are chosen so that the non-empty clamped sequences follow each other
 * without a gap: out[] holds them as valid offsets (an empty one's start is moot). */
static void clamped_offsets(const int32_t *cu, int nb, int64_t total, int64_t max_len, int32_t *out)
{
    int64_t end = 0;
    for (int b = 0; b < nb; b++) {
        const int64_t s0 = cu[b] < end ? end : cu[b] > total ? total : cu[b];
        int64_t n = (int64_t)cu[b + 1] - s0, lim = total - s0 < max_len ? total - s0 : max_len;
        n = n < 0 ? 0 : n > lim ? lim : n;
        if (b == 0)
            out[0] = (int32_t)s0;
        ck_assert_msg(n == 0 || s0 == out[b],
                      "hostile offsets: sequence %d starts at %lld after a gap", b, (long long)s0);
        end = s0 + n;
        out[b + 1] = n ? (int32_t)end : out[b];
    }
}

/* Enqueued on buffers (O with `tail` canary floats past the view's rows): O and the LSE
 * read back into o, lse (the tail checked). */
static clattn_status run_enqueue(const vrun *r, const clattn_attention_desc *d, float *o,
                                 float *lse)
{
    const vcase *c = r->c;
    enum { TAIL = 64 };
    cl_context cl_ctx;
    cl_command_queue queue;
    clattn_context *ctx = tu_ctx();
    ck_assert_int_eq(clattn_context_get_cl(ctx, &cl_ctx, NULL, &queue), CLATTN_SUCCESS);
    const size_t no = (size_t)c->tq * c->hq * c->dv, nl = (size_t)c->tq * c->hq;
    float *oc = tu_alloc(no + TAIL, -7.0f), *lc = tu_alloc(nl + TAIL, -7.0f);
    cl_mem mq = tu_buffer(cl_ctx, r->q, (size_t)c->tq * c->hq * c->dk * 4),
           mk = tu_buffer(cl_ctx, r->k, (size_t)c->tk * c->hk * c->dk * 4),
           mv = tu_buffer(cl_ctx, r->v, (size_t)c->tk * c->hk * c->dv * 4),
           mo = tu_buffer(cl_ctx, oc, (no + TAIL) * 4), ml = tu_buffer(cl_ctx, lc, (nl + TAIL) * 4);
    clattn_tensor bq = r->tq, bk = r->tk, bv = r->tv, bo = packed(NULL, c->hq, c->tq, c->dv);
    const int64_t shl[4] = {1, c->hq, c->tq, 1}, sl[4] = {(int64_t)c->tq * c->hq, 1, c->hq, 1};
    clattn_tensor bl = tu_view(NULL, shl, sl, 0);
    bq.host = bk.host = bv.host = bo.host = bl.host = NULL;
    bq.buffer = mq, bk.buffer = mk, bv.buffer = mv, bo.buffer = mo, bl.buffer = ml;
    clattn_attention_desc de = *d;
    de.lse = &bl;
    cl_event done = NULL;
    const clattn_status st = clattn_attention_enqueue(ctx, &de, &bq, &bk, &bv, &bo, 0, NULL, &done);
    if (st == CLATTN_SUCCESS) {
        ck_assert_int_eq(
            clEnqueueReadBuffer(queue, mo, CL_TRUE, 0, (no + TAIL) * 4, oc, 1, &done, NULL),
            CL_SUCCESS);
        ck_assert_int_eq(
            clEnqueueReadBuffer(queue, ml, CL_TRUE, 0, (nl + TAIL) * 4, lc, 0, NULL, NULL),
            CL_SUCCESS);
        clReleaseEvent(done);
        for (int t = 0; t < TAIL; t++) /* nothing past the views' rows */
            ck_assert_msg(oc[no + t] == -7.0f && lc[nl + t] == -7.0f,
                          "%s: element %d past O / the LSE written", c->name, t);
        memcpy(o, oc, no * 4);
        memcpy(lse, lc, nl * 4);
    }
    cl_mem all[5] = {mq, mk, mv, mo, ml};
    for (int i = 0; i < 5; i++)
        clReleaseMemObject(all[i]);
    free(oc);
    free(lc);
    return st;
}

static void run_case(const vcase *c, clattn_kernel_family family)
{
    clattn_context *ctx = tu_ctx();
    const clattn_kernel_family before = clattn_context_kernel_family(ctx);
    ck_assert_int_eq(clattn_context_set_kernel_family(ctx, family), CLATTN_SUCCESS);
    family = clattn_context_kernel_family(ctx);
    /* split-KV decoding in 3 splits (both families), so the merge runs per sequence */
    ck_assert_int_eq(clattn_context_set_decode_splits(ctx, 3), CLATTN_SUCCESS);
    const char *fam = family == CLATTN_KERNEL_FAMILY_GPU ? "GPU family" : "CPU family";
    vrun r;
    vrun_init(&r, c, tu_seed() + 0x51u);
    const size_t no = (size_t)c->tq * c->hq * c->dv, nl = (size_t)c->tq * c->hq;
    float *o = tu_alloc(no, -7.0f), *lse = tu_alloc(nl, -7.0f);
    float *ro = tu_alloc(no, -7.0f), *rl = tu_alloc(nl, -7.0f);
    float *o2 = tu_alloc(no, -7.0f), *l2 = tu_alloc(nl, -7.0f);
    clattn_tensor to = packed(o, c->hq, c->tq, c->dv), tro = packed(ro, c->hq, c->tq, c->dv);
    const int64_t shl[4] = {1, c->hq, c->tq, 1}, sl[4] = {(int64_t)c->tq * c->hq, 1, c->hq, 1};
    clattn_tensor tl = tu_view(lse, shl, sl, 0), trl = tu_view(rl, shl, sl, 0);
    /* the reference, one sequence at a time */
    clattn_attention_desc d = r.d;
    d.lse = &trl;
    ck_assert_int_eq(clattn_reference_attention(&d, &r.tq, &r.tk, &r.tv, &tro), CLATTN_SUCCESS);
    /* the plan: one launch, the kernels expected for the shape */
    clattn_plan plan;
    d.lse = &tl;
    TU_ASSERT_OK(clattn_attention_plan(ctx, &d, &r.tq, &r.tk, &r.tv, &to, &plan), "%s plan",
                 c->name);
    printf("varlen %s (%s): %s (%s)\n", c->name, fam, plan.kernels, plan.reason);
    if (family == CLATTN_KERNEL_FAMILY_CPU)
        ck_assert_msg(strstr(plan.kernels, c->kernels) != NULL, "%s: plan %s, expected %s", c->name,
                      plan.kernels, c->kernels);
    /* blocking, host offsets */
    TU_ASSERT_OK(clattn_attention(ctx, &d, &r.tq, &r.tk, &r.tv, &to), "%s blocking", c->name);
    check_against(&r, o, lse, ro, rl, fam);
    /* enqueued with host offsets, and with offsets on the device: the same bits */
    TU_ASSERT_OK(run_enqueue(&r, &d, o2, l2), "%s enqueue", c->name);
    tu_assert_same_bits(o2, o, no, "%s: %s", c->name, "O enqueued, host offsets");
    tu_assert_same_bits(l2, lse, nl, "%s: %s", c->name, "LSE enqueued, host offsets");
    cl_context cl_ctx;
    ck_assert_int_eq(clattn_context_get_cl(ctx, &cl_ctx, NULL, NULL), CLATTN_SUCCESS);
    cl_mem mcq = tu_buffer(cl_ctx, c->cu_q, (size_t)(c->nb + 1) * 4),
           mck = tu_buffer(cl_ctx, c->cu_k, (size_t)(c->nb + 1) * 4);
    clattn_varlen dv = {NULL, NULL, c->nb, mcq, mck, 0, 0};
    for (int b = 0; b < c->nb; b++) {
        dv.max_seqlen_q = fmax(dv.max_seqlen_q, c->cu_q[b + 1] - c->cu_q[b]);
        dv.max_seqlen_k = fmax(dv.max_seqlen_k, c->cu_k[b + 1] - c->cu_k[b]);
    }
    clattn_attention_desc dd = d;
    dd.varlen = &dv;
    for (int extra = 0; extra <= 5; extra += 5) { /* max_seqlen exact, then 5 more */
        dv.max_seqlen_q += extra;
        dv.max_seqlen_k += extra;
        tu_fill_value(o2, no, -7.0f);
        tu_fill_value(l2, nl, -7.0f);
        TU_ASSERT_OK(run_enqueue(&r, &dd, o2, l2), "%s enqueue, device offsets", c->name);
        tu_assert_same_bits(o2, o, no, "%s: %s", c->name,
                            extra ? "O, device offsets, larger max_seqlen" : "O, device offsets");
        tu_assert_same_bits(l2, lse, nl, "%s: %s", c->name, "LSE, device offsets");
    }
    /* hostile offsets on the device: decreasing, past the tensors, negative; the kernels
     * clamp them (nothing written outside O and the LSE: run_enqueue checks the tails),
     * giving the same bits as the clamped offsets from the host */
    const int32_t bad_q[MAXB + 1] = {5, 2, 1000, -3, 7, 1 << 30, 0, 3, 9},
                               bad_k[MAXB + 1] = {-100, 7, 5000, 2, 1 << 30, 0, 9, 1, 4};
    cl_mem mbq = tu_buffer(cl_ctx, bad_q, sizeof bad_q),
           mbk = tu_buffer(cl_ctx, bad_k, sizeof bad_k);
    /* max_seqlen below some clamped lengths: those sequences are cut */
    const int64_t cut_q = c->tq - c->tq / 4, cut_k = c->tk - 10;
    clattn_varlen bv = {NULL, NULL, c->nb, mbq, mbk, cut_q, cut_k};
    dd.varlen = &bv;
    tu_fill_value(o2, no, -7.0f);
    tu_fill_value(l2, nl, -7.0f);
    TU_ASSERT_OK(run_enqueue(&r, &dd, o2, l2), "%s enqueue, hostile device offsets", c->name);
    int32_t fix_q[MAXB + 1], fix_k[MAXB + 1];
    clamped_offsets(bad_q, c->nb, c->tq, cut_q, fix_q);
    clamped_offsets(bad_k, c->nb, c->tk, cut_k, fix_k);
    clattn_varlen hv = {fix_q, fix_k, c->nb, NULL, NULL, 0, 0};
    dd.varlen = &hv;
    float *o3 = tu_alloc(no, -7.0f), *l3 = tu_alloc(nl, -7.0f);
    TU_ASSERT_OK(run_enqueue(&r, &dd, o3, l3), "%s enqueue, the clamped offsets", c->name);
    tu_assert_same_bits(o2, o3, no, "%s: %s", c->name,
                        "O, hostile device offsets vs the clamped ones");
    tu_assert_same_bits(l2, l3, nl, "%s: %s", c->name,
                        "LSE, hostile device offsets vs the clamped ones");
    free(o3);
    free(l3);
    /* the unfused algorithm: a call per sequence (host offsets), within tolerance; with
     * offsets on the device it is refused */
    clattn_attention_desc du = d;
    du.algorithm = CLATTN_ALGORITHM_UNFUSED;
    tu_fill_value(o2, no, -7.0f);
    tu_fill_value(l2, nl, -7.0f);
    clattn_tensor to2 = packed(o2, c->hq, c->tq, c->dv), tl2 = tu_view(l2, shl, sl, 0);
    du.lse = &tl2;
    TU_ASSERT_OK(clattn_attention(ctx, &du, &r.tq, &r.tk, &r.tv, &to2), "%s unfused", c->name);
    check_against(&r, o2, l2, ro, rl, "unfused");
    dv.max_seqlen_q = c->tq;
    du.varlen = &dv;
    ck_assert_int_eq(run_enqueue(&r, &du, o2, l2), CLATTN_ERROR_UNSUPPORTED);
    cl_mem all[4] = {mcq, mck, mbq, mbk};
    for (int i = 0; i < 4; i++)
        clReleaseMemObject(all[i]);
    float *bufs[6] = {o, lse, ro, rl, o2, l2};
    for (int i = 0; i < 6; i++)
        free(bufs[i]);
    vrun_free(&r);
    ck_assert_int_eq(clattn_context_set_kernel_family(ctx, before), CLATTN_SUCCESS);
    ck_assert_int_eq(clattn_context_set_decode_splits(ctx, 0), CLATTN_SUCCESS);
}

/* the context's family: the CPU family on PoCL's CPU device, unless CLATTN_KERNEL_FAMILY
 * forces one (CI's GPU-family passes, mutate.py's GPU mutants) */
START_TEST(varlen_context_family)
{
    run_case(&CASES[_i], clattn_context_kernel_family(tu_ctx()));
}
END_TEST

/* Every status of the offsets' forms and hints. */
START_TEST(varlen_statuses)
{
    clattn_context *ctx = tu_ctx();
    const vcase *c = &CASES[0];
    vrun r;
    vrun_init(&r, c, tu_seed() + 0x52u);
    float *o = tu_alloc((size_t)c->tq * c->hq * c->dv, -7.0f);
    clattn_tensor to = packed(o, c->hq, c->tq, c->dv);
    cl_context cl_ctx;
    ck_assert_int_eq(clattn_context_get_cl(ctx, &cl_ctx, NULL, NULL), CLATTN_SUCCESS);
    cl_mem mcq = tu_buffer(cl_ctx, c->cu_q, (size_t)(c->nb + 1) * 4),
           mck = tu_buffer(cl_ctx, c->cu_k, (size_t)(c->nb + 1) * 4),
           small = tu_buffer(cl_ctx, c->cu_k, (size_t)c->nb * 4);
    clattn_attention_desc d = r.d;
    clattn_varlen vl = r.vl;
    d.varlen = &vl;
    /* hints below the longest sequence, negative hints */
    vl.max_seqlen_q = 16; /* the longest is 21 */
    ck_assert_int_eq(clattn_attention(ctx, &d, &r.tq, &r.tk, &r.tv, &to),
                     CLATTN_ERROR_INVALID_SHAPE);
    vl.max_seqlen_q = 21;
    TU_ASSERT_OK(clattn_attention(ctx, &d, &r.tq, &r.tk, &r.tv, &to), "exact hint");
    vl.max_seqlen_k = -1;
    ck_assert_int_eq(clattn_attention(ctx, &d, &r.tq, &r.tk, &r.tv, &to),
                     CLATTN_ERROR_INVALID_SHAPE);
    vl.max_seqlen_k = 0;
    /* both forms, or half of one */
    vl.cu_seqlens_q_buffer = mcq;
    ck_assert_int_eq(clattn_attention(ctx, &d, &r.tq, &r.tk, &r.tv, &to),
                     CLATTN_ERROR_INVALID_ARGUMENT);
    vl.cu_seqlens_q = NULL;
    vl.cu_seqlens_k = NULL;
    ck_assert_int_eq(clattn_attention(ctx, &d, &r.tq, &r.tk, &r.tv, &to),
                     CLATTN_ERROR_INVALID_ARGUMENT);
    /* device offsets in a blocking call, and on the reference */
    vl.cu_seqlens_k_buffer = mck;
    ck_assert_int_eq(clattn_attention(ctx, &d, &r.tq, &r.tk, &r.tv, &to),
                     CLATTN_ERROR_INVALID_ARGUMENT);
    ck_assert_int_eq(clattn_reference_attention(&d, &r.tq, &r.tk, &r.tv, &to),
                     CLATTN_ERROR_INVALID_ARGUMENT);
    /* a buffer smaller than batch + 1 offsets */
    vl.cu_seqlens_k_buffer = small;
    clattn_plan plan;
    vl.max_seqlen_q = c->tq;
    vl.max_seqlen_k = c->tk;
    ck_assert_int_eq(clattn_attention_plan(ctx, &d, &r.tq, &r.tk, &r.tv, &to, &plan),
                     CLATTN_ERROR_BUFFER_TOO_SMALL);
    vl.cu_seqlens_k_buffer = mck;
    /* device offsets need max_seqlen (0 would cut every sequence to nothing) */
    vl.max_seqlen_k = 0;
    ck_assert_int_eq(clattn_attention_plan(ctx, &d, &r.tq, &r.tk, &r.tv, &to, &plan),
                     CLATTN_ERROR_INVALID_SHAPE);
    vl.max_seqlen_k = c->tk;
    TU_ASSERT_OK(clattn_attention_plan(ctx, &d, &r.tq, &r.tk, &r.tv, &to, &plan), "device plan");
    cl_mem all[3] = {mcq, mck, small};
    for (int i = 0; i < 3; i++)
        clReleaseMemObject(all[i]);
    free(o);
    vrun_free(&r);
}
END_TEST

int main(void)
{
    tu_seed_init(0x7a41e9u);
    Suite *s = suite_create("varlen");
    TCase *tc = tcase_create("context_family");
    tcase_set_timeout(tc, 600);
    tcase_add_loop_test(tc, varlen_context_family, 0, N_CASES);
    tcase_add_test(tc, varlen_statuses);
    suite_add_tcase(s, tc);
    return tu_run_suite(s);
}
