/* Plan and dispatch: the three unfused stages, the fused kernel, and the blocking
 * wrappers that stage host views through device buffers. */
#include "internal.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define GPU_TILE_KV 64        /* blocked kernels on GPUs: keys per step (multiple of 16) */
#define CPU_TILE_KV 64        /* scores / weighted sum on CPUs: keys per step */
#define CPU_FUSED_TILE_KV 128 /* fused on CPUs: at most this many keys per step, */
#define CPU_FUSED_TILE_BYTES (64 * 1024) /* with K and V tiles within this (cache-sized) */
#define GPU_WG 64                        /* blocked kernels on GPUs: work-items per work-group */
#define CPU_WG 16                        /* on CPUs: work-items per work-group (WG·RQ queries) */
/* PoCL's CPU device runs a work-group on one thread's stack, private arrays of every
 * work-item included; beyond about this many bytes in all it crashes (and it reports
 * CL_KERNEL_PRIVATE_MEM_SIZE as a flat 1024, which cannot serve as the limit). */
#define CPU_GROUP_PRIVATE_BYTES (512 * 1024)
#define DIRECT_MAX_N_Q 8   /* fused: up to this many queries stream K and V (decoding) */
#define MAX_SOFTMAX_WG 256 /* softmax: work-items per row */
#define MAX_HEAD_DIM 4096  /* beyond this, private arrays and tiles make no sense */

/* ---------------------------------------------------------------- kernel helpers */

typedef struct arg_list {
    cl_kernel kernel;
    cl_uint next;
    cl_int err;
} arg_list;

static void arg(arg_list *a, size_t size, const void *value)
{
    if (a->err == CL_SUCCESS)
        a->err = clSetKernelArg(a->kernel, a->next, size, value);
    a->next++;
}

static void arg_view(arg_list *a, const clattn_view *v)
{
    cl_long off = v->offset;
    cl_long4 st = {{v->s[0], v->s[1], v->s[2], v->s[3]}};
    arg(a, sizeof(cl_mem), &v->buffer);
    arg(a, sizeof off, &off);
    arg(a, sizeof st, &st);
}

static void arg_int(arg_list *a, int64_t x)
{
    cl_int v = (cl_int)x;
    arg(a, sizeof v, &v);
}

static void arg_long(arg_list *a, int64_t x)
{
    cl_long v = x;
    arg(a, sizeof v, &v);
}

static size_t round_up(int64_t n, size_t m)
{
    return (size_t)((n + (int64_t)m - 1) / (int64_t)m) * m;
}

static clattn_status launch(clattn_context *ctx, const char *name, arg_list *a, cl_uint dims,
                            const size_t *global, const size_t *local, cl_uint n_wait,
                            const cl_event *wait, cl_event *done)
{
    if (a->err != CL_SUCCESS) {
        char what[96];
        snprintf(what, sizeof what, "clSetKernelArg(%s, %u)", name, a->next - 1);
        return clattn_fail_cl(ctx, a->err, what);
    }
    cl_int err = clEnqueueNDRangeKernel(ctx->queue, a->kernel, dims, NULL, global, local, n_wait,
                                        n_wait ? wait : NULL, done);
    if (err != CL_SUCCESS) {
        char what[96];
        snprintf(what, sizeof what, "clEnqueueNDRangeKernel(%s)", name);
        return clattn_fail_cl(ctx, err, what);
    }
    return CLATTN_SUCCESS;
}

static size_t pow2_at_least(int64_t n, size_t cap)
{
    size_t p = 1;
    while ((int64_t)p < n && p < cap)
        p *= 2;
    return p;
}

/* The blocking of the tiled kernels (scores, weighted sum, fused): RQ queries per
 * work-item, WG work-items per group, TILE_KV keys per step — compile-time constants of
 * each program. */
typedef struct blocking {
    size_t rq, wg, tile_kv;
    clattn_program_entry *entry;
} blocking;

static int64_t ceil_div(int64_t a, int64_t b)
{
    return (a + b - 1) / b;
}

/* Largest TILE_KV (a multiple of 16, at most `cap`) whose local tiles of
 * local_floats_per_key floats per key fit the device's local memory; 0 if none. */
static size_t fit_tile_kv(const clattn_context *ctx, int64_t local_floats_per_key, size_t cap)
{
    const cl_ulong budget = ctx->local_mem > 1024 ? ctx->local_mem - 1024 : 0;
    size_t t = cap;
    while (t >= 16 && (cl_ulong)t * (cl_ulong)local_floats_per_key * sizeof(float) > budget)
        t /= 2;
    return t >= 16 ? t : 0;
}

/* Builds `file` with `dims` (e.g. "-DD_K=64") and a blocking for n_q queries whose
 * per-query accumulators are acc_floats wide: on CPUs, where a work-item is a loop
 * iteration, several queries per work-item (register blocking); on GPUs one, to spare
 * registers. wg_request 0 = choose; otherwise exactly that many work-items or
 * CLATTN_ERROR_UNSUPPORTED. */
static clattn_status build_blocked(clattn_context *ctx, const char *file, const char *dims,
                                   const char *tune_key, int64_t local_per_key, int64_t n_q,
                                   int64_t acc_floats, int64_t private_floats, size_t tile_kv,
                                   size_t wg_request, bool one_query_per_item, blocking *out)
{
    const bool cpu = (ctx->device_type & CL_DEVICE_TYPE_CPU) != 0;
    size_t rq = !cpu || one_query_per_item ? 1 : acc_floats <= 128 ? 4 : acc_floats <= 256 ? 2 : 1;
    size_t limit = ctx->max_wg < ctx->max_wi[0] ? ctx->max_wg : ctx->max_wi[0];
    if (cpu) { /* private arrays of the whole group on one thread's stack */
        const int64_t per_item = ((int64_t)rq * private_floats + 64) * (int64_t)sizeof(float);
        const int64_t fits = CPU_GROUP_PRIVATE_BYTES / per_item;
        if ((int64_t)limit > fits)
            limit = fits > 1 ? (size_t)fits : 1;
    }
    /* CLATTN_BLOCKING="RQ,WG,TILE_KV" overrides the choice (tuning experiments) */
    const char *env = getenv("CLATTN_BLOCKING");
    unsigned e_rq, e_wg, e_tile;
    const clattn_tune_entry *tuned = NULL;
    if (env && sscanf(env, "%u,%u,%u", &e_rq, &e_wg, &e_tile) == 3 && e_rq >= 1 && e_rq <= 8 &&
        e_tile >= 16 && e_tile % 16 == 0 && e_tile <= 4 * tile_kv && e_wg >= 1) {
        rq = e_rq;
        tile_kv = e_tile;
        if (wg_request == 0)
            wg_request = e_wg;
    } else if (!one_query_per_item && wg_request == 0 &&
               (tuned = clattn_tune_find(ctx, tune_key)) != NULL &&
               n_q >= (int64_t)(tuned->rq * tuned->wg) && tuned->wg <= limit &&
               fit_tile_kv(ctx, local_per_key, tuned->tile_kv) == tuned->tile_kv) {
        /* stored by `clattn tune` for this device (large enough problems only) */
        rq = tuned->rq;
        tile_kv = tuned->tile_kv;
        wg_request = tuned->wg;
    }
    size_t wg = wg_request;
    if (wg > limit)
        return clattn_fail(ctx, CLATTN_ERROR_UNSUPPORTED,
                           "work_group_size %zu exceeds the limit %zu for %s on this device "
                           "(CL_DEVICE_MAX_WORK_GROUP_SIZE, and on CPUs the stack the "
                           "work-group's private arrays need)",
                           wg, limit, file);
    if (wg == 0) { /* two size classes, not one program per n_q */
        wg = cpu ? CPU_WG : GPU_WG;
        if (cpu && n_q < (int64_t)(wg * rq)) /* fewer queries than one group holds */
            rq = wg = 1;
        while (wg > limit)
            wg /= 2;
    }
    for (;;) {
        char opts[320];
        snprintf(opts, sizeof opts, "-cl-std=CL1.2 %s -DTILE_KV=%zu -DWG=%zu -DRQ=%zu", dims,
                 tile_kv, wg, rq);
        clattn_status st = clattn_get_kernel(ctx, file, opts, &out->entry);
        if (st != CLATTN_SUCCESS)
            return st;
        if (out->entry->kernel_wg_max >= wg)
            break;
        if (wg_request > 0 || wg == 1)
            return clattn_fail(ctx, CLATTN_ERROR_UNSUPPORTED,
                               "work_group_size %zu exceeds the %s kernel's limit %zu "
                               "(CL_KERNEL_WORK_GROUP_SIZE)",
                               wg, file, out->entry->kernel_wg_max);
        wg /= 2;
    }
    out->rq = rq;
    out->wg = wg;
    out->tile_kv = tile_kv;
    return CLATTN_SUCCESS;
}

static size_t default_tile_kv(const clattn_context *ctx, bool fused)
{
    if (!(ctx->device_type & CL_DEVICE_TYPE_CPU))
        return GPU_TILE_KV;
    return fused ? CPU_FUSED_TILE_KV : CPU_TILE_KV;
}

/* scores.cl for d_k, or why not (local memory) */
static clattn_status scores_kernel(clattn_context *ctx, int64_t n_q, int64_t d_k, const char *feat,
                                   blocking *out)
{
    const size_t t = fit_tile_kv(ctx, d_k, default_tile_kv(ctx, false));
    if (t == 0)
        return clattn_fail(ctx, CLATTN_ERROR_UNSUPPORTED,
                           "scores: 16 rows of K with d_k %lld exceed the device's local memory "
                           "(%llu bytes)",
                           (long long)d_k, (unsigned long long)ctx->local_mem);
    char dims[200];
    snprintf(dims, sizeof dims, "-DD_K=%lld %s", (long long)d_k, feat);
    char key[64];
    snprintf(key, sizeof key, "scores %lld 0", (long long)d_k);
    return build_blocked(ctx, "scores.cl", dims, key, d_k, n_q, (int64_t)t, 2 * (int64_t)t + 16, t,
                         0, false, out);
}

/* weighted_sum.cl for d_v, or why not (local memory) */
static clattn_status wsum_kernel(clattn_context *ctx, int64_t n_q, int64_t d_v, const char *feat,
                                 blocking *out)
{
    const int64_t d_v_pad = ceil_div(d_v, 16) * 16;
    const size_t t = fit_tile_kv(ctx, d_v_pad, default_tile_kv(ctx, false));
    if (t == 0)
        return clattn_fail(ctx, CLATTN_ERROR_UNSUPPORTED,
                           "weighted sum: 16 rows of V with d_v %lld exceed the device's local "
                           "memory (%llu bytes)",
                           (long long)d_v, (unsigned long long)ctx->local_mem);
    char dims[200];
    snprintf(dims, sizeof dims, "-DD_V=%lld %s", (long long)d_v, feat);
    char key[64];
    snprintf(key, sizeof key, "weighted_sum 0 %lld", (long long)d_v);
    return build_blocked(ctx, "weighted_sum.cl", dims, key, d_v_pad, n_q, d_v_pad,
                         d_v_pad + (int64_t)t + 16, t, 0, false, out);
}

/* Softmax work-group: the caller's size if it is legal, else a power of two covering
 * the row, capped by the kernel's limit. */
static clattn_status softmax_kernel(clattn_context *ctx, const clattn_attention_desc *desc,
                                    int64_t width, clattn_program_entry **out, size_t *wg)
{
    clattn_status st = clattn_get_kernel(ctx, "softmax.cl", "-cl-std=CL1.2", out);
    if (st != CLATTN_SUCCESS)
        return st;
    size_t limit = (*out)->kernel_wg_max < ctx->max_wi[0] ? (*out)->kernel_wg_max : ctx->max_wi[0];
    size_t want = desc ? desc->work_group_size : 0;
    if (want > 0) {
        if (want > limit)
            return clattn_fail(ctx, CLATTN_ERROR_UNSUPPORTED,
                               "work_group_size %zu exceeds the softmax kernel's limit %zu "
                               "(CL_KERNEL_WORK_GROUP_SIZE / CL_DEVICE_MAX_WORK_ITEM_SIZES)",
                               want, limit);
        *wg = want;
    } else if (ctx->device_type & CL_DEVICE_TYPE_CPU) {
        *wg = 1; /* a row per work-item, 16 lanes at a time: no reduction, one JIT size */
    } else {
        size_t cap = limit < MAX_SOFTMAX_WG ? limit : MAX_SOFTMAX_WG;
        *wg = pow2_at_least(width, cap);
        while (*wg > cap)
            *wg /= 2;
    }
    return CLATTN_SUCCESS;
}

/* ---------------------------------------------------------------------- planning */

/* What a call adds to the plain problem: the desc's optional terms and outputs, and
 * the storage types, as compile-time options of the kernels that read them. */
typedef struct features {
    char opts[160]; /* "-DQ_DT=1 … -DMASK_T=2 -DALIBI=1 -DSOFTCAP=0" */
    bool weights;   /* weights requested */
    bool head_mean; /* … averaged over heads */
    bool lse;       /* LSE requested */
} features;

static void make_features(const clattn_attention_desc *desc, const clattn_view *q,
                          const clattn_view *k, const clattn_view *v, const clattn_view *o,
                          const clattn_extras *ex, bool want_weights, features *f)
{
    const int mask_t = !ex->has_mask ? 0 : ex->mask.dtype == CLATTN_BOOL ? 1 : 2;
    snprintf(f->opts, sizeof f->opts,
             "-DQ_DT=%d -DK_DT=%d -DV_DT=%d -DO_DT=%d -DMASK_T=%d -DALIBI=%d -DSOFTCAP=%d",
             (int)q->dtype, (int)k->dtype, (int)v->dtype, (int)o->dtype, mask_t,
             desc->alibi_slopes != NULL, desc->softcap > 0.0f);
    f->weights = want_weights;
    f->head_mean = want_weights && desc->weights_head_mean;
    f->lse = ex->has_lse;
}

typedef struct plan_t {
    clattn_algorithm algorithm;
    bool no_keys;                 /* n_kv = 0: the fused streaming kernel writes every row */
    blocking scores, wsum, fused; /* the tiled kernels that will run */
    clattn_program_entry *softmax, *from_lse, *head_mean;
    size_t softmax_wg;
    int64_t workspace_bytes;
    char reason[256];
    char kernels[128];
    char rejected[512];
} plan_t;

/* Why the fused kernel cannot run this shape here ("" when it can); picks its tile. */
static size_t fused_fit(const clattn_context *ctx, int64_t d_k, int64_t d_v, char *why,
                        size_t why_len)
{
    why[0] = '\0';
    const int64_t per_key = d_k + ceil_div(d_v, 16) * 16; /* K and V tile floats per key */
    size_t cap = default_tile_kv(ctx, true);
    if (ctx->device_type & CL_DEVICE_TYPE_CPU) /* measured: d 64 best at 128 keys, 128 at 64 */
        while (cap > 16 && (int64_t)cap * per_key * (int64_t)sizeof(float) > CPU_FUSED_TILE_BYTES)
            cap /= 2;
    const size_t t = fit_tile_kv(ctx, per_key, cap);
    if (d_k > MAX_HEAD_DIM || d_v > MAX_HEAD_DIM)
        snprintf(why, why_len, "fused: head dims above %d are not supported", MAX_HEAD_DIM);
    else if (t == 0)
        snprintf(why, why_len,
                 "fused: 16 key rows of K and V (%llu bytes) exceed the device's local "
                 "memory (%llu bytes)",
                 (unsigned long long)(16 * per_key * sizeof(float)),
                 (unsigned long long)ctx->local_mem);
    return t;
}

/* Bytes of a packed float32 [a, b, c, d] workspace into *out, or false (overflow or
 * more than the device allocates at once; `why` says which). */
static bool workspace_fits(const clattn_context *ctx, int64_t a, int64_t b, int64_t c, int64_t d,
                           const char *what, int64_t *out, char *why, size_t why_len)
{
    int64_t n;
    if (!clattn_mul_ok(a, b, &n) || !clattn_mul_ok(n, c, &n) || !clattn_mul_ok(n, d, &n) ||
        !clattn_mul_ok(n, 4, &n)) {
        snprintf(why, why_len, "%s: the size overflows", what);
        return false;
    }
    if ((cl_ulong)n > ctx->max_alloc) {
        snprintf(why, why_len,
                 "%s: the %lld-byte buffer exceeds CL_DEVICE_MAX_MEM_ALLOC_SIZE (%llu bytes)", what,
                 (long long)n, (unsigned long long)ctx->max_alloc);
        return false;
    }
    *out = n;
    return true;
}

static clattn_status plan_attention(clattn_context *ctx, const clattn_attention_desc *desc,
                                    const clattn_view *q, const clattn_view *k,
                                    const clattn_view *v, const features *f, plan_t *p)
{
    memset(p, 0, sizeof *p);
    const int64_t batch = q->n[0], h_q = q->n[1], n_q = q->n[2], d_k = q->n[3];
    const int64_t n_kv = k->n[2], d_v = v->n[3];
    if (h_q > INT_MAX || d_k > INT_MAX || d_v > INT_MAX)
        return clattn_fail(ctx, CLATTN_ERROR_UNSUPPORTED, "heads or head dims above INT_MAX");

    /* workspaces: the unfused n_q×n_kv scores (unless they go straight into the
     * caller's weights), the per-head weights before averaging, the fused LSE */
    char fused_why[200], unfused_why[200] = "";
    const size_t fused_tile = fused_fit(ctx, d_k, d_v, fused_why, sizeof fused_why);
    int64_t ws_scores = 0, ws_lse = 0, ws_fused = 0;
    if ((!f->weights || f->head_mean) &&
        !workspace_fits(ctx, batch, h_q, n_q, n_kv, "unfused: score matrix", &ws_scores,
                        unfused_why, sizeof unfused_why))
        ws_scores = -1;
    if (!fused_why[0] && f->weights) {
        if (!workspace_fits(ctx, batch, h_q, n_q, 1, "fused: LSE for the weights pass", &ws_lse,
                            fused_why, sizeof fused_why))
            ws_lse = -1;
        int64_t wm = 0;
        if (ws_lse >= 0 && f->head_mean &&
            !workspace_fits(ctx, batch, h_q, n_q, n_kv, "fused: per-head weights", &wm, fused_why,
                            sizeof fused_why))
            wm = -1;
        ws_fused = ws_lse + wm;
    }

    const bool want_unfused =
        desc->algorithm == CLATTN_ALGORITHM_UNFUSED ||
        (desc->algorithm == CLATTN_ALGORITHM_AUTO && (f->weights || fused_why[0]));
    if (desc->algorithm == CLATTN_ALGORITHM_FUSED && fused_why[0])
        return clattn_fail(ctx, CLATTN_ERROR_UNSUPPORTED, "%s", fused_why);
    if (desc->algorithm == CLATTN_ALGORITHM_UNFUSED && unfused_why[0])
        return clattn_fail(ctx, CLATTN_ERROR_UNSUPPORTED, "%s", unfused_why);
    if (want_unfused && !unfused_why[0]) {
        p->algorithm = CLATTN_ALGORITHM_UNFUSED;
        snprintf(p->reason, sizeof p->reason, "%s",
                 desc->algorithm == CLATTN_ALGORITHM_UNFUSED ? "unfused: requested"
                 : f->weights ? "auto: unfused, because weights were requested (it computes "
                                "them once; fused would need a second pass)"
                              : "auto: unfused, because the fused kernel cannot run this shape");
        snprintf(p->rejected, sizeof p->rejected, "%s",
                 fused_why[0] ? fused_why : "fused: possible, not preferred");
    } else if (!fused_why[0]) {
        p->algorithm = CLATTN_ALGORITHM_FUSED;
        snprintf(p->reason, sizeof p->reason, "%s",
                 desc->algorithm == CLATTN_ALGORITHM_FUSED
                     ? "fused: requested"
                     : "auto: fused (never stores n_q x n_kv)");
        snprintf(p->rejected, sizeof p->rejected, "%s",
                 unfused_why[0] ? unfused_why : "unfused: possible, not preferred");
    } else {
        return clattn_fail(ctx, CLATTN_ERROR_UNSUPPORTED, "no algorithm fits: %s; %s", fused_why,
                           unfused_why);
    }

    clattn_status st;
    p->no_keys = n_kv == 0;
    if (p->algorithm == CLATTN_ALGORITHM_UNFUSED && !p->no_keys) {
        p->workspace_bytes = ws_scores;
        if ((st = scores_kernel(ctx, n_q, d_k, f->opts, &p->scores)) != CLATTN_SUCCESS ||
            (st = wsum_kernel(ctx, n_q, d_v, f->opts, &p->wsum)) != CLATTN_SUCCESS ||
            (st = softmax_kernel(ctx, desc, n_kv, &p->softmax, &p->softmax_wg)) != CLATTN_SUCCESS)
            return st;
        snprintf(p->kernels, sizeof p->kernels, "scores, softmax, weighted_sum%s",
                 f->head_mean ? ", head_mean" : "");
    } else {
        /* a few queries (decoding) share nothing: stream K and V instead of staging tiles;
         * with no keys at all the streaming kernel just writes the empty rows */
        const bool direct = p->no_keys || (n_q <= DIRECT_MAX_N_Q && desc->work_group_size == 0);
        char dims[240];
        snprintf(dims, sizeof dims, "-DD_K=%lld -DD_V=%lld -DDIRECT=%d %s", (long long)d_k,
                 (long long)d_v, direct ? 1 : 0, f->opts);
        /* private floats per query: q row, accumulator, scores and weights of a tile */
        const int64_t d_v_pad = ceil_div(d_v, 16) * 16;
        const size_t tile = fused_tile ? fused_tile : 16;
        char key[64];
        snprintf(key, sizeof key, "fused %lld %lld", (long long)d_k, (long long)d_v);
        if ((st = build_blocked(ctx, "fused.cl", dims, key, d_k + d_v_pad, n_q, d_v_pad,
                                d_k + d_v_pad + 2 * (int64_t)tile + 8, tile,
                                p->no_keys ? 0 : desc->work_group_size, direct, &p->fused)) !=
            CLATTN_SUCCESS)
            return st;
        snprintf(p->kernels, sizeof p->kernels, "fused%s%s",
                 f->weights && !p->no_keys ? ", scores, weights_from_lse" : "",
                 f->head_mean && !p->no_keys ? ", head_mean" : "");
        if (f->weights && !p->no_keys) {
            p->workspace_bytes = ws_fused;
            if ((st = scores_kernel(ctx, n_q, d_k, f->opts, &p->scores)) != CLATTN_SUCCESS ||
                (st = clattn_get_kernel(ctx, "weights_from_lse.cl", "-cl-std=CL1.2",
                                        &p->from_lse)) != CLATTN_SUCCESS)
                return st;
        }
    }
    if (f->head_mean && !p->no_keys &&
        (st = clattn_get_kernel(ctx, "head_mean.cl", "-cl-std=CL1.2", &p->head_mean)) !=
            CLATTN_SUCCESS)
        return st;
    return CLATTN_SUCCESS;
}

/* ------------------------------------------------------------ stage dispatchers */

/* Device-side inputs of the optional terms: host arrays copied into small buffers (the
 * runtime keeps them alive until the kernels that use them finish). */
typedef struct aux_t {
    const clattn_attention_desc *desc; /* NULL: plain rows (the public softmax stage) */
    cl_mem q_lens, kv_lens, alibi;
    const clattn_view *mask; /* device view, or NULL */
    float softcap;
} aux_t;

static void arg_rule(arg_list *a, const aux_t *x)
{
    const clattn_attention_desc *d = x->desc;
    const bool win = d && d->window;
    arg_int(a, d ? d->mask : CLATTN_MASK_NONE);
    arg_long(a, d ? d->q_start - d->kv_start : 0);
    arg_long(a, win && d->window_left >= 0 ? d->window_left : -1);
    arg_long(a, win && d->window_right >= 0 ? d->window_right : -1);
    arg(a, sizeof(cl_mem), &x->q_lens);
    arg(a, sizeof(cl_mem), &x->kv_lens);
}

/* an optional view argument (LSE, mask tensor, ...); a NULL buffer when absent */
static void arg_opt_view(arg_list *a, const clattn_view *v)
{
    static const clattn_view none = {{0}, {0}, 0, 0, 0, NULL, NULL, CLATTN_FLOAT32, 4};
    arg_view(a, v ? v : &none);
}

static void arg_terms(arg_list *a, const aux_t *x)
{
    arg_opt_view(a, x->mask);
    arg(a, sizeof(cl_mem), &x->alibi);
    arg(a, sizeof(float), &x->softcap);
}

static clattn_status enqueue_scores(clattn_context *ctx, const blocking *bk, const clattn_view *q,
                                    const clattn_view *k, const clattn_view *s, float scale,
                                    bool sparse, bool relative, const aux_t *x, cl_uint n_wait,
                                    const cl_event *wait, cl_event *done)
{
    arg_list a = {bk->entry->kernel, 0, CL_SUCCESS};
    arg_view(&a, q);
    arg_view(&a, k);
    arg_view(&a, s);
    arg_int(&a, q->n[1]);
    arg_int(&a, q->n[1] / k->n[1]);
    arg_long(&a, q->n[2]);
    arg_long(&a, k->n[2]);
    arg(&a, sizeof scale, &scale);
    arg_int(&a, sparse);
    arg_int(&a, relative);
    arg_rule(&a, x);
    arg_terms(&a, x);
    const size_t global[3] = {round_up(ceil_div(q->n[2], (int64_t)bk->rq), bk->wg),
                              (size_t)ceil_div(k->n[2], (int64_t)bk->tile_kv),
                              (size_t)(q->n[0] * q->n[1])};
    const size_t local[3] = {bk->wg, 1, 1};
    return launch(ctx, "scores", &a, 3, global, local, n_wait, wait, done);
}

/* W = softmax(S) (and the LSE); the rule lets rows skip keys outside their visible
 * range, the rest of S being −∞ already */
static clattn_status enqueue_softmax(clattn_context *ctx, clattn_program_entry *e, size_t wg,
                                     const clattn_view *x, const clattn_view *y,
                                     const clattn_view *lse, bool sparse, const aux_t *aux,
                                     cl_uint n_wait, const cl_event *wait, cl_event *done)
{
    arg_list a = {e->kernel, 0, CL_SUCCESS};
    arg_view(&a, x);
    arg_view(&a, y);
    arg_opt_view(&a, lse);
    arg_int(&a, x->n[1]);
    arg_long(&a, x->n[3]);
    arg_long(&a, x->n[2]);
    arg_int(&a, aux->desc ? aux->desc->masked_rows : 0);
    arg_int(&a, sparse);
    arg(&a, sizeof(cl_mem), &aux->alibi); /* the scores are relative to the ALiBi reference */
    arg_rule(&a, aux);
    arg(&a, wg * sizeof(float), NULL);
    const size_t global[3] = {wg, (size_t)x->n[2], (size_t)(x->n[0] * x->n[1])};
    const size_t local[3] = {wg, 1, 1};
    return launch(ctx, "softmax", &a, 3, global, local, n_wait, wait, done);
}

/* O = W·V; the rule only lets groups skip key tiles whose weights are all zero */
static clattn_status enqueue_wsum(clattn_context *ctx, const blocking *bk, const clattn_view *w,
                                  const clattn_view *v, const clattn_view *o, bool sparse,
                                  const aux_t *x, cl_uint n_wait, const cl_event *wait,
                                  cl_event *done)
{
    arg_list a = {bk->entry->kernel, 0, CL_SUCCESS};
    arg_view(&a, w);
    arg_view(&a, v);
    arg_view(&a, o);
    arg_int(&a, o->n[1]);
    arg_int(&a, o->n[1] / v->n[1]);
    arg_long(&a, o->n[2]);
    arg_long(&a, v->n[2]);
    arg_int(&a, sparse);
    arg_rule(&a, x);
    const size_t global[2] = {round_up(ceil_div(o->n[2], (int64_t)bk->rq), bk->wg),
                              (size_t)(o->n[0] * o->n[1])};
    const size_t local[2] = {bk->wg, 1};
    return launch(ctx, "weighted_sum", &a, 2, global, local, n_wait, wait, done);
}

static clattn_status enqueue_fused(clattn_context *ctx, const blocking *bk, const clattn_view *q,
                                   const clattn_view *k, const clattn_view *v, const clattn_view *o,
                                   const clattn_view *lse, bool lse_relative, float scale,
                                   const aux_t *x, cl_uint n_wait, const cl_event *wait,
                                   cl_event *done)
{
    arg_list a = {bk->entry->kernel, 0, CL_SUCCESS};
    arg_view(&a, q);
    arg_view(&a, k);
    arg_view(&a, v);
    arg_view(&a, o);
    arg_opt_view(&a, lse);
    arg_int(&a, q->n[1]);
    arg_int(&a, q->n[1] / k->n[1]);
    arg_long(&a, q->n[2]);
    arg_long(&a, k->n[2]);
    arg(&a, sizeof scale, &scale);
    arg_int(&a, x->desc->masked_rows);
    arg_int(&a, lse_relative);
    arg_rule(&a, x);
    arg_terms(&a, x);
    const size_t global[2] = {round_up(ceil_div(q->n[2], (int64_t)bk->rq), bk->wg),
                              (size_t)(q->n[0] * q->n[1])};
    const size_t local[2] = {bk->wg, 1};
    return launch(ctx, "fused", &a, 2, global, local, n_wait, wait, done);
}

/* W = exp(S − LSE) from the relative scores and the fused kernel's relative LSE; the
 * caller's LSE (lse_out, may be NULL) gets the absolute one */
static clattn_status enqueue_from_lse(clattn_context *ctx, clattn_program_entry *e,
                                      const clattn_view *w, const clattn_view *lse,
                                      const clattn_view *lse_out, int64_t n_q, int64_t n_kv,
                                      const aux_t *x, cl_uint n_wait, const cl_event *wait,
                                      cl_event *done)
{
    arg_list a = {e->kernel, 0, CL_SUCCESS};
    arg_view(&a, w);
    arg_view(&a, lse);
    arg_int(&a, w->n[1]);
    arg_int(&a, x->desc->masked_rows);
    arg_opt_view(&a, lse_out);
    arg(&a, sizeof(cl_mem), &x->alibi);
    arg_long(&a, n_q);
    arg_long(&a, n_kv);
    arg_rule(&a, x);
    const size_t global[3] = {(size_t)w->n[3], (size_t)w->n[2], (size_t)(w->n[0] * w->n[1])};
    return launch(ctx, "weights_from_lse", &a, 3, global, NULL, n_wait, wait, done);
}

static clattn_status enqueue_head_mean(clattn_context *ctx, clattn_program_entry *e,
                                       const clattn_view *w, const clattn_view *out, cl_uint n_wait,
                                       const cl_event *wait, cl_event *done)
{
    arg_list a = {e->kernel, 0, CL_SUCCESS};
    arg_view(&a, w);
    arg_view(&a, out);
    arg_int(&a, w->n[1]);
    const size_t global[3] = {(size_t)w->n[3], (size_t)w->n[2], (size_t)w->n[0]};
    return launch(ctx, "head_mean", &a, 3, global, NULL, n_wait, wait, done);
}

/* Completes `done` after `wait` without running anything (empty problems). */
static clattn_status enqueue_marker(clattn_context *ctx, cl_uint n_wait, const cl_event *wait,
                                    cl_event *done)
{
    if (!done && n_wait == 0)
        return CLATTN_SUCCESS;
    cl_int err = clEnqueueMarkerWithWaitList(ctx->queue, n_wait, n_wait ? wait : NULL, done);
    return err == CL_SUCCESS ? CLATTN_SUCCESS : clattn_fail_cl(ctx, err, "clEnqueueMarker");
}

static clattn_status create_buffer(clattn_context *ctx, cl_mem_flags flags, int64_t bytes_wanted,
                                   void *host, cl_mem *out)
{
    cl_int err;
    size_t bytes = (size_t)(bytes_wanted > 0 ? bytes_wanted : 1);
    *out = clCreateBuffer(ctx->context, flags, bytes, host, &err);
    if (err != CL_SUCCESS) {
        *out = NULL;
        char what[96];
        snprintf(what, sizeof what, "clCreateBuffer(%zu bytes)", bytes);
        return clattn_fail_cl(ctx, err, what);
    }
    return CLATTN_SUCCESS;
}

/* A packed float32 workspace view [a, b, c, d] on a new buffer. */
static clattn_status workspace(clattn_context *ctx, int64_t a, int64_t b, int64_t c, int64_t d,
                               clattn_view *ws)
{
    memset(ws, 0, sizeof *ws);
    ws->n[0] = a;
    ws->n[1] = b;
    ws->n[2] = c;
    ws->n[3] = d;
    ws->s[3] = 1;
    ws->s[2] = d;
    ws->s[1] = c * d;
    ws->s[0] = b * c * d;
    ws->count = ws->span = a * b * c * d;
    ws->dtype = CLATTN_FLOAT32;
    ws->esize = 4;
    return create_buffer(ctx, CL_MEM_READ_WRITE, ws->count * 4, NULL, &ws->buffer);
}

static void release_events(cl_event *e, int n)
{
    for (int i = 0; i < n; i++)
        if (e[i])
            clReleaseEvent(e[i]);
}

/* The host arrays of the desc as device buffers (count elements of 4 bytes each). */
static clattn_status aux_make(clattn_context *ctx, const clattn_attention_desc *desc,
                              const clattn_view *q, const clattn_view *mask, aux_t *x)
{
    memset(x, 0, sizeof *x);
    x->desc = desc;
    x->mask = mask;
    x->softcap = desc->softcap;
    const cl_mem_flags ro = CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR;
    clattn_status st = CLATTN_SUCCESS;
    if (desc->q_lens && q->n[0] > 0)
        st = create_buffer(ctx, ro, q->n[0] * 4, (void *)desc->q_lens, &x->q_lens);
    if (st == CLATTN_SUCCESS && desc->kv_lens && q->n[0] > 0)
        st = create_buffer(ctx, ro, q->n[0] * 4, (void *)desc->kv_lens, &x->kv_lens);
    if (st == CLATTN_SUCCESS && desc->alibi_slopes && q->n[1] > 0)
        st = create_buffer(ctx, ro, q->n[1] * 4, (void *)desc->alibi_slopes, &x->alibi);
    return st;
}

static void aux_release(aux_t *x)
{
    cl_mem *bufs[3] = {&x->q_lens, &x->kv_lens, &x->alibi};
    for (int i = 0; i < 3; i++)
        if (*bufs[i]) {
            (void)clReleaseMemObject(*bufs[i]); /* freed once the kernels that use it finish */
            *bufs[i] = NULL;
        }
}

/* Device views of one attention call. */
typedef struct dev_views {
    const clattn_view *q, *k, *v, *o, *w, *mask, *lse; /* w, mask, lse may be NULL */
} dev_views;

/* Runs a planned attention on device views. Events chain the kernels, so an
 * out-of-order queue is fine. */
static clattn_status run_attention(clattn_context *ctx, const clattn_attention_desc *desc,
                                   const plan_t *p, const dev_views *dv, cl_uint n_wait,
                                   const cl_event *wait, cl_event *done)
{
    const clattn_view *q = dv->q, *k = dv->k, *v = dv->v, *o = dv->o, *w = dv->w;
    const float scale = clattn_effective_scale(desc, q->n[3]);
    if (q->count == 0)
        return enqueue_marker(ctx, n_wait, wait, done);
    aux_t x;
    clattn_status st = aux_make(ctx, desc, q, dv->mask, &x);
    if (st != CLATTN_SUCCESS) {
        aux_release(&x);
        return st;
    }
    const bool head_mean = w && desc->weights_head_mean;
    clattn_view ws_w, ws_lse; /* per-head weights (for the mean), LSE for the weights pass */
    cl_mem ws_mem[3] = {NULL, NULL, NULL};
    cl_event ev[5] = {NULL, NULL, NULL, NULL, NULL};
    const clattn_view *w_heads = w; /* where the per-head weights (or scores) go */
    if (head_mean && !p->no_keys) {
        st = workspace(ctx, q->n[0], q->n[1], q->n[2], k->n[2], &ws_w);
        ws_mem[0] = ws_w.buffer;
        w_heads = &ws_w;
    }
    if (p->no_keys) {
        /* no keys: the streaming kernel writes every row (zeros or NaN, LSE −∞); weights
         * have no columns */
        if (st == CLATTN_SUCCESS)
            st = enqueue_fused(ctx, &p->fused, q, k, v, o, dv->lse, false, scale, &x, n_wait, wait,
                               done);
    } else if (p->algorithm == CLATTN_ALGORITHM_FUSED) {
        /* with weights: the LSE of the relative scores (common.cl alibi_ref) into a
         * workspace for the second pass, which writes the caller's LSE */
        const clattn_view *lse = dv->lse;
        if (st == CLATTN_SUCCESS && w) {
            st = workspace(ctx, q->n[0], q->n[1], q->n[2], 1, &ws_lse);
            ws_mem[1] = ws_lse.buffer;
            lse = &ws_lse;
        }
        if (st == CLATTN_SUCCESS)
            st = enqueue_fused(ctx, &p->fused, q, k, v, o, lse, w != NULL, scale, &x, n_wait, wait,
                               w ? &ev[0] : done);
        if (w) { /* second pass: scores again, then W = exp(S − LSE) */
            if (st == CLATTN_SUCCESS)
                st = enqueue_scores(ctx, &p->scores, q, k, w_heads, scale, false, true, &x, 1,
                                    &ev[0], &ev[1]);
            if (st == CLATTN_SUCCESS)
                st = enqueue_from_lse(ctx, p->from_lse, w_heads, lse, dv->lse, q->n[2], k->n[2], &x,
                                      1, &ev[1], head_mean ? &ev[2] : done);
            if (st == CLATTN_SUCCESS && head_mean)
                st = enqueue_head_mean(ctx, p->head_mean, w_heads, w, 1, &ev[2], done);
        }
    } else {
        clattn_view ws;
        /* clattn's own workspace (no weights to return) with zeros for masked rows: the
         * kernels skip the masked tiles instead of writing −∞ and zeros there */
        const bool sparse = !w_heads && desc->masked_rows == CLATTN_MASKED_ROWS_ZERO;
        if (w_heads) {
            ws = *w_heads; /* scores go straight into the weights, softmax runs in place */
        } else if (st == CLATTN_SUCCESS) {
            st = workspace(ctx, q->n[0], q->n[1], q->n[2], k->n[2], &ws);
            ws_mem[2] = ws.buffer;
        }
        if (st == CLATTN_SUCCESS)
            st = enqueue_scores(ctx, &p->scores, q, k, &ws, scale, sparse, true, &x, n_wait, wait,
                                &ev[0]);
        if (st == CLATTN_SUCCESS)
            st = enqueue_softmax(ctx, p->softmax, p->softmax_wg, &ws, &ws, dv->lse, sparse, &x, 1,
                                 &ev[0], &ev[1]);
        if (st == CLATTN_SUCCESS)
            st = enqueue_wsum(ctx, &p->wsum, &ws, v, o, sparse, &x, 1, &ev[1],
                              head_mean ? &ev[2] : done);
        if (st == CLATTN_SUCCESS && head_mean)
            st = enqueue_head_mean(ctx, p->head_mean, &ws, w, 1, &ev[2], done);
    }
    release_events(ev, 5);
    for (int i = 0; i < 3; i++)
        if (ws_mem[i]) /* freed by the runtime once the kernels that use it finish */
            clReleaseMemObject(ws_mem[i]);
    aux_release(&x);
    return st;
}

/* ------------------------------------------------------- validation of a call */

typedef struct call_views {
    clattn_view q, k, v, o, w;
    bool has_w;
    clattn_extras ex;
    features f;
} call_views;

static clattn_status check_call(clattn_context *ctx, const clattn_attention_desc *desc,
                                const clattn_tensor *q, const clattn_tensor *k,
                                const clattn_tensor *v, const clattn_tensor *o,
                                clattn_storage storage, call_views *cv)
{
    if (!ctx)
        return clattn_fail(NULL, CLATTN_ERROR_INVALID_ARGUMENT, "ctx is NULL");
    clattn_clear_error(ctx);
    clattn_status st = clattn_check_desc(ctx, desc);
    if (st == CLATTN_SUCCESS)
        st = clattn_view_make(ctx, "Q", q, storage, false, &cv->q);
    if (st == CLATTN_SUCCESS)
        st = clattn_view_make(ctx, "K", k, storage, false, &cv->k);
    if (st == CLATTN_SUCCESS)
        st = clattn_view_make(ctx, "V", v, storage, false, &cv->v);
    if (st == CLATTN_SUCCESS)
        st = clattn_view_make(ctx, "O", o, storage, true, &cv->o);
    cv->has_w = desc && desc->weights;
    if (st == CLATTN_SUCCESS && cv->has_w)
        st = clattn_view_make(ctx, "weights", desc->weights, storage, true, &cv->w);
    if (st == CLATTN_SUCCESS)
        st = clattn_check_attention_shapes(ctx, &cv->q, &cv->k, &cv->v, &cv->o,
                                           cv->has_w ? &cv->w : NULL, desc->weights_head_mean != 0);
    if (st == CLATTN_SUCCESS)
        st = clattn_check_extras(ctx, desc, &cv->q, &cv->k, storage, &cv->ex);
    if (st != CLATTN_SUCCESS)
        return st;
    /* outputs never overlap each other; on device buffers (no staging copy) they must
     * not overlap the inputs the kernels are reading either */
    const clattn_view *outs[3] = {&cv->o, cv->has_w ? &cv->w : NULL,
                                  cv->ex.has_lse ? &cv->ex.lse : NULL};
    static const char *const out_names[3] = {"O", "weights", "lse"};
    for (int a = 0; a < 3; a++)
        for (int b = a + 1; b < 3; b++)
            if (outs[a] && outs[b] && clattn_views_overlap(outs[a], outs[b]))
                return clattn_fail(ctx, CLATTN_ERROR_INVALID_LAYOUT, "%s and %s overlap",
                                   out_names[a], out_names[b]);
    if (storage == CLATTN_STORAGE_BUFFER) {
        const clattn_view *ins[4] = {&cv->q, &cv->k, &cv->v, cv->ex.has_mask ? &cv->ex.mask : NULL};
        static const char *const names[4] = {"Q", "K", "V", "mask_tensor"};
        for (int i = 0; i < 4; i++)
            for (int a = 0; a < 3; a++)
                if (ins[i] && outs[a] && clattn_views_overlap(outs[a], ins[i]))
                    return clattn_fail(ctx, CLATTN_ERROR_INVALID_LAYOUT,
                                       "%s overlaps %s in the same cl_mem", out_names[a], names[i]);
    }
    make_features(desc, &cv->q, &cv->k, &cv->v, &cv->o, &cv->ex, cv->has_w, &cv->f);
    return CLATTN_SUCCESS;
}

/* -------------------------------------------- staging host views through buffers */

#define MAX_STAGED 8

typedef struct staging {
    cl_mem mem[MAX_STAGED];
    int n;
} staging;

/* A device copy of host view hv (inputs copied, outputs not), as view dv with
 * offset 0 over the view's span. */
static clattn_status stage(clattn_context *ctx, staging *sg, const clattn_view *hv, bool input,
                           clattn_view *dv)
{
    *dv = *hv;
    dv->host = NULL;
    dv->offset = 0;
    char *base = (char *)hv->host + hv->offset * hv->esize;
    const bool copy = input && hv->span > 0; /* an empty view still gets a valid cl_mem */
    cl_mem_flags flags = copy ? CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR : CL_MEM_READ_WRITE;
    clattn_status st =
        create_buffer(ctx, flags, hv->span * hv->esize, copy ? base : NULL, &dv->buffer);
    if (st == CLATTN_SUCCESS)
        sg->mem[sg->n++] = dv->buffer;
    return st;
}

static void staging_release(staging *sg)
{
    for (int i = 0; i < sg->n; i++)
        clReleaseMemObject(sg->mem[i]);
    sg->n = 0;
}

/* Reads device view dv back into host view hv, writing only the view's elements. */
static clattn_status unstage(clattn_context *ctx, const clattn_view *hv, const clattn_view *dv)
{
    if (hv->count == 0)
        return CLATTN_SUCCESS;
    const size_t es = (size_t)hv->esize;
    char *base = (char *)hv->host + hv->offset * hv->esize;
    const bool dense = hv->span == hv->count;
    char *tmp = dense ? base : malloc((size_t)hv->span * es);
    if (!tmp)
        return clattn_fail(ctx, CLATTN_ERROR_OUT_OF_HOST_MEMORY,
                           "cannot allocate %lld bytes to read back an output",
                           (long long)(hv->span * hv->esize));
    cl_int err = clEnqueueReadBuffer(ctx->queue, dv->buffer, CL_TRUE, 0, (size_t)hv->span * es, tmp,
                                     0, NULL, NULL);
    if (err != CL_SUCCESS) {
        if (!dense)
            free(tmp);
        return clattn_fail_cl(ctx, err, "clEnqueueReadBuffer");
    }
    if (!dense) {
        clattn_view_scatter(hv, tmp);
        free(tmp);
    }
    return CLATTN_SUCCESS;
}

static clattn_status finish(clattn_context *ctx, cl_event done)
{
    cl_int err = clWaitForEvents(1, &done);
    clReleaseEvent(done);
    return err == CL_SUCCESS ? CLATTN_SUCCESS : clattn_fail_cl(ctx, err, "clWaitForEvents");
}

/* ------------------------------------------------------------------ public API */

clattn_status clattn_attention_enqueue(clattn_context *ctx, const clattn_attention_desc *desc,
                                       const clattn_tensor *q, const clattn_tensor *k,
                                       const clattn_tensor *v, const clattn_tensor *o,
                                       cl_uint n_wait, const cl_event *wait, cl_event *done)
{
    call_views cv;
    clattn_status st = check_call(ctx, desc, q, k, v, o, CLATTN_STORAGE_BUFFER, &cv);
    if (st == CLATTN_SUCCESS && n_wait > 0 && !wait)
        st = clattn_fail(ctx, CLATTN_ERROR_INVALID_ARGUMENT, "n_wait is %u but wait is NULL",
                         n_wait);
    plan_t p;
    if (st == CLATTN_SUCCESS)
        st = plan_attention(ctx, desc, &cv.q, &cv.k, &cv.v, &cv.f, &p);
    if (st == CLATTN_SUCCESS) {
        const dev_views dv = {&cv.q,
                              &cv.k,
                              &cv.v,
                              &cv.o,
                              cv.has_w ? &cv.w : NULL,
                              cv.ex.has_mask ? &cv.ex.mask : NULL,
                              cv.ex.has_lse ? &cv.ex.lse : NULL};
        st = run_attention(ctx, desc, &p, &dv, n_wait, wait, done);
    }
    return st;
}

clattn_status clattn_attention(clattn_context *ctx, const clattn_attention_desc *desc,
                               const clattn_tensor *q, const clattn_tensor *k,
                               const clattn_tensor *v, const clattn_tensor *o)
{
    call_views cv;
    clattn_status st = check_call(ctx, desc, q, k, v, o, CLATTN_STORAGE_HOST, &cv);
    plan_t p;
    if (st == CLATTN_SUCCESS)
        st = plan_attention(ctx, desc, &cv.q, &cv.k, &cv.v, &cv.f, &p);
    if (st != CLATTN_SUCCESS || cv.q.count == 0)
        return st;

    staging sg = {{NULL}, 0};
    clattn_view dq, dk, dv, dout, dw, dmask, dlse;
    cl_event done = NULL;
    st = stage(ctx, &sg, &cv.q, true, &dq);
    if (st == CLATTN_SUCCESS)
        st = stage(ctx, &sg, &cv.k, true, &dk);
    if (st == CLATTN_SUCCESS)
        st = stage(ctx, &sg, &cv.v, true, &dv);
    if (st == CLATTN_SUCCESS)
        st = stage(ctx, &sg, &cv.o, false, &dout);
    if (st == CLATTN_SUCCESS && cv.has_w)
        st = stage(ctx, &sg, &cv.w, false, &dw);
    if (st == CLATTN_SUCCESS && cv.ex.has_mask)
        st = stage(ctx, &sg, &cv.ex.mask, true, &dmask);
    if (st == CLATTN_SUCCESS && cv.ex.has_lse)
        st = stage(ctx, &sg, &cv.ex.lse, false, &dlse);
    if (st == CLATTN_SUCCESS) {
        const dev_views views = {&dq,
                                 &dk,
                                 &dv,
                                 &dout,
                                 cv.has_w ? &dw : NULL,
                                 cv.ex.has_mask ? &dmask : NULL,
                                 cv.ex.has_lse ? &dlse : NULL};
        st = run_attention(ctx, desc, &p, &views, 0, NULL, &done);
    }
    if (st == CLATTN_SUCCESS)
        st = finish(ctx, done);
    if (st == CLATTN_SUCCESS)
        st = unstage(ctx, &cv.o, &dout);
    if (st == CLATTN_SUCCESS && cv.has_w)
        st = unstage(ctx, &cv.w, &dw);
    if (st == CLATTN_SUCCESS && cv.ex.has_lse)
        st = unstage(ctx, &cv.ex.lse, &dlse);
    staging_release(&sg);
    return st;
}

clattn_status clattn_attention_plan(clattn_context *ctx, const clattn_attention_desc *desc,
                                    const clattn_tensor *q, const clattn_tensor *k,
                                    const clattn_tensor *v, const clattn_tensor *o,
                                    clattn_plan *out)
{
    call_views cv;
    clattn_status st = check_call(ctx, desc, q, k, v, o, CLATTN_STORAGE_ANY, &cv);
    if (st == CLATTN_SUCCESS && !out)
        st = clattn_fail(ctx, CLATTN_ERROR_INVALID_ARGUMENT, "out is NULL");
    plan_t p;
    if (st == CLATTN_SUCCESS)
        st = plan_attention(ctx, desc, &cv.q, &cv.k, &cv.v, &cv.f, &p);
    if (st != CLATTN_SUCCESS)
        return st;
    memset(out, 0, sizeof *out);
    out->algorithm = p.algorithm;
    out->workspace_bytes = (size_t)p.workspace_bytes;
    const bool fused = p.algorithm == CLATTN_ALGORITHM_FUSED || p.no_keys;
    const blocking *bk = fused ? &p.fused : &p.scores;
    out->work_group_size = fused ? p.fused.wg : p.softmax_wg;
    out->queries_per_work_item = bk->rq;
    out->tile_kv = bk->tile_kv;
    snprintf(out->reason, sizeof out->reason, "%s", p.reason);
    snprintf(out->kernels, sizeof out->kernels, "%s", p.kernels);
    snprintf(out->rejected, sizeof out->rejected, "%s", p.rejected);
    return CLATTN_SUCCESS;
}

/* ------------------------------------------------------------- the three stages */

/* Validates the stage's views; stage_kind 0 scores (a=q, b=k, c=s), 1 softmax (a=x,
 * c=y), 2 weighted sum (a=w, b=v, c=o). */
static clattn_status check_stage(clattn_context *ctx, int kind, const clattn_attention_desc *desc,
                                 const clattn_tensor *a, const clattn_tensor *b,
                                 const clattn_tensor *c, clattn_storage storage, clattn_view *va,
                                 clattn_view *vb, clattn_view *vc, clattn_extras *ex)
{
    static const char *const names[3][3] = {
        {"Q", "K", "scores"}, {"scores", "", "weights"}, {"weights", "V", "O"}};
    if (!ctx)
        return clattn_fail(NULL, CLATTN_ERROR_INVALID_ARGUMENT, "ctx is NULL");
    clattn_clear_error(ctx);
    clattn_status st = CLATTN_SUCCESS;
    if (desc || kind == 0)
        st = clattn_check_desc(ctx, desc);
    if (st == CLATTN_SUCCESS)
        st = clattn_view_make(ctx, names[kind][0], a, storage, false, va);
    if (st == CLATTN_SUCCESS && kind != 1)
        st = clattn_view_make(ctx, names[kind][1], b, storage, false, vb);
    if (st == CLATTN_SUCCESS)
        st = clattn_view_make(ctx, names[kind][2], c, storage, true, vc);
    if (st != CLATTN_SUCCESS)
        return st;
    /* on device buffers the kernel reads its inputs while writing its output: no overlap,
     * except softmax exactly in place (each work-item rewrites what it read) */
    if (storage == CLATTN_STORAGE_BUFFER) {
        const bool in_place = kind == 1 && va->buffer == vc->buffer && va->offset == vc->offset &&
                              !memcmp(va->s, vc->s, sizeof va->s);
        if ((!in_place && clattn_views_overlap(vc, va)) ||
            (kind != 1 && clattn_views_overlap(vc, vb)))
            return clattn_fail(ctx, CLATTN_ERROR_INVALID_LAYOUT,
                               "%s overlaps an input in the same cl_mem", names[kind][2]);
    }
#define LL(x) ((long long)(x))
    const clattn_view *x = va, *y = vc;
    if (kind == 1) {
        st = clattn_view_check_dtype(ctx, "scores", x, CLATTN_DT_F32);
        if (st == CLATTN_SUCCESS)
            st = clattn_view_check_dtype(ctx, "weights", y, CLATTN_DT_F32);
        if (st != CLATTN_SUCCESS)
            return st;
        for (int i = 0; i < 4; i++)
            if (x->n[i] != y->n[i])
                return clattn_fail(ctx, CLATTN_ERROR_INVALID_SHAPE,
                                   "scores are [%lld, %lld, %lld, %lld] but weights are "
                                   "[%lld, %lld, %lld, %lld]",
                                   LL(x->n[0]), LL(x->n[1]), LL(x->n[2]), LL(x->n[3]), LL(y->n[0]),
                                   LL(y->n[1]), LL(y->n[2]), LL(y->n[3]));
        return CLATTN_SUCCESS;
    }
    /* a: [b, h_q, n_q, inner], b: [b, h_kv, n_kv or inner, ...], c: [b, h_q, n_q, out] */
    const int64_t inner_a = va->n[3];
    const int64_t inner_b = kind == 0 ? vb->n[3] : vb->n[2];
    const int64_t out_want = kind == 0 ? vb->n[2] : vb->n[3];
    if (vb->n[0] != va->n[0] || vc->n[0] != va->n[0])
        return clattn_fail(ctx, CLATTN_ERROR_INVALID_SHAPE,
                           "batch sizes differ: %s %lld, %s "
                           "%lld, %s %lld",
                           names[kind][0], LL(va->n[0]), names[kind][1], LL(vb->n[0]),
                           names[kind][2], LL(vc->n[0]));
    if (vb->n[1] == 0 ? va->n[1] != 0 : va->n[1] % vb->n[1] != 0)
        return clattn_fail(ctx, CLATTN_ERROR_INVALID_SHAPE,
                           "%s has %lld heads, not a multiple of %s's %lld", names[kind][0],
                           LL(va->n[1]), names[kind][1], LL(vb->n[1]));
    if (inner_a != inner_b)
        return clattn_fail(ctx, CLATTN_ERROR_INVALID_SHAPE, "%s has inner size %lld, %s has %lld",
                           names[kind][0], LL(inner_a), names[kind][1], LL(inner_b));
    if (kind == 0 && inner_a < 1)
        return clattn_fail(ctx, CLATTN_ERROR_INVALID_SHAPE, "d_k is 0; it must be at least 1");
    if (vc->n[1] != va->n[1] || vc->n[2] != va->n[2] || vc->n[3] != out_want)
        return clattn_fail(ctx, CLATTN_ERROR_INVALID_SHAPE,
                           "%s is [%lld, %lld, %lld, %lld], expected [%lld, %lld, %lld, %lld]",
                           names[kind][2], LL(vc->n[0]), LL(vc->n[1]), LL(vc->n[2]), LL(vc->n[3]),
                           LL(va->n[0]), LL(va->n[1]), LL(va->n[2]), LL(out_want));
#undef LL
    if (va->n[1] > INT_MAX || va->n[3] > INT_MAX || vb->n[3] > INT_MAX)
        return clattn_fail(ctx, CLATTN_ERROR_UNSUPPORTED, "heads or dims above INT_MAX");
    /* scores and weights are float32; Q, K, V and O any float storage type */
    st = clattn_view_check_dtype(ctx, names[kind][0], va,
                                 kind == 0 ? CLATTN_DT_FLOATS : CLATTN_DT_F32);
    if (st == CLATTN_SUCCESS)
        st = clattn_view_check_dtype(ctx, names[kind][1], vb, CLATTN_DT_FLOATS);
    if (st == CLATTN_SUCCESS)
        st = clattn_view_check_dtype(ctx, names[kind][2], vc,
                                     kind == 0 ? CLATTN_DT_F32 : CLATTN_DT_FLOATS);
    /* the scores stage applies every score term of the desc */
    if (st == CLATTN_SUCCESS && kind == 0)
        st = clattn_check_extras(ctx, desc, va, vb, storage, ex);
    if (st == CLATTN_SUCCESS && kind == 0 && ex->has_mask && storage == CLATTN_STORAGE_BUFFER &&
        clattn_views_overlap(vc, &ex->mask))
        return clattn_fail(ctx, CLATTN_ERROR_INVALID_LAYOUT,
                           "scores overlap mask_tensor in the same cl_mem");
    return st;
}

/* Runs one stage on device views (kind as in check_stage); mask: the scores stage's
 * device mask view or NULL. */
static clattn_status run_stage(clattn_context *ctx, int kind, const clattn_attention_desc *desc,
                               const clattn_view *a, const clattn_view *b, const clattn_view *c,
                               const clattn_view *mask, cl_uint n_wait, const cl_event *wait,
                               cl_event *done)
{
    if (c->count == 0)
        return enqueue_marker(ctx, n_wait, wait, done);
    clattn_program_entry *e;
    size_t size;
    clattn_status st;
    aux_t plain;
    memset(&plain, 0, sizeof plain); /* softmax and weighted sum: plain rows */
    if (kind == 1) {
        if ((st = softmax_kernel(ctx, desc, a->n[3], &e, &size)) != CLATTN_SUCCESS)
            return st;
        return enqueue_softmax(ctx, e, size, a, c, NULL, false, &plain, n_wait, wait, done);
    }
    blocking bk;
    char feat[160];
    if (kind == 0) {
        snprintf(feat, sizeof feat, "-DQ_DT=%d -DK_DT=%d -DMASK_T=%d -DALIBI=%d -DSOFTCAP=%d",
                 (int)a->dtype, (int)b->dtype,
                 !mask                        ? 0
                 : mask->dtype == CLATTN_BOOL ? 1
                                              : 2,
                 desc->alibi_slopes != NULL, desc->softcap > 0.0f);
        if ((st = scores_kernel(ctx, a->n[2], a->n[3], feat, &bk)) != CLATTN_SUCCESS)
            return st;
        aux_t x;
        st = aux_make(ctx, desc, a, mask, &x);
        if (st == CLATTN_SUCCESS)
            st = enqueue_scores(ctx, &bk, a, b, c, clattn_effective_scale(desc, a->n[3]), false,
                                false, &x, n_wait, wait, done);
        aux_release(&x);
        return st;
    }
    snprintf(feat, sizeof feat, "-DV_DT=%d -DO_DT=%d", (int)b->dtype, (int)c->dtype);
    if ((st = wsum_kernel(ctx, c->n[2], c->n[3], feat, &bk)) != CLATTN_SUCCESS)
        return st;
    return enqueue_wsum(ctx, &bk, a, b, c, false, &plain, n_wait, wait, done);
}

static clattn_status stage_enqueue(clattn_context *ctx, int kind, const clattn_attention_desc *desc,
                                   const clattn_tensor *a, const clattn_tensor *b,
                                   const clattn_tensor *c, cl_uint n_wait, const cl_event *wait,
                                   cl_event *done)
{
    clattn_view va, vb, vc;
    clattn_extras ex;
    memset(&ex, 0, sizeof ex);
    clattn_status st =
        check_stage(ctx, kind, desc, a, b, c, CLATTN_STORAGE_BUFFER, &va, &vb, &vc, &ex);
    if (st == CLATTN_SUCCESS && n_wait > 0 && !wait)
        st = clattn_fail(ctx, CLATTN_ERROR_INVALID_ARGUMENT, "n_wait is %u but wait is NULL",
                         n_wait);
    if (st == CLATTN_SUCCESS)
        st = run_stage(ctx, kind, desc, &va, kind == 1 ? &va : &vb, &vc,
                       ex.has_mask ? &ex.mask : NULL, n_wait, wait, done);
    return st;
}

static clattn_status stage_blocking(clattn_context *ctx, int kind,
                                    const clattn_attention_desc *desc, const clattn_tensor *a,
                                    const clattn_tensor *b, const clattn_tensor *c)
{
    clattn_view va, vb, vc;
    clattn_extras ex;
    memset(&ex, 0, sizeof ex);
    clattn_status st =
        check_stage(ctx, kind, desc, a, b, c, CLATTN_STORAGE_HOST, &va, &vb, &vc, &ex);
    if (st != CLATTN_SUCCESS || vc.count == 0)
        return st;
    staging sg = {{NULL}, 0};
    clattn_view da, db, dc, dm;
    cl_event done = NULL;
    st = stage(ctx, &sg, &va, true, &da);
    if (st == CLATTN_SUCCESS && kind != 1)
        st = stage(ctx, &sg, &vb, true, &db);
    if (st == CLATTN_SUCCESS)
        st = stage(ctx, &sg, &vc, false, &dc);
    if (st == CLATTN_SUCCESS && ex.has_mask)
        st = stage(ctx, &sg, &ex.mask, true, &dm);
    if (st == CLATTN_SUCCESS)
        st = run_stage(ctx, kind, desc, &da, kind == 1 ? &da : &db, &dc, ex.has_mask ? &dm : NULL,
                       0, NULL, &done);
    if (st == CLATTN_SUCCESS)
        st = finish(ctx, done);
    if (st == CLATTN_SUCCESS)
        st = unstage(ctx, &vc, &dc);
    staging_release(&sg);
    return st;
}

clattn_status clattn_scores(clattn_context *ctx, const clattn_attention_desc *desc,
                            const clattn_tensor *q, const clattn_tensor *k,
                            const clattn_tensor *scores)
{
    return stage_blocking(ctx, 0, desc, q, k, scores);
}

clattn_status clattn_scores_enqueue(clattn_context *ctx, const clattn_attention_desc *desc,
                                    const clattn_tensor *q, const clattn_tensor *k,
                                    const clattn_tensor *scores, cl_uint n_wait,
                                    const cl_event *wait, cl_event *done)
{
    return stage_enqueue(ctx, 0, desc, q, k, scores, n_wait, wait, done);
}

clattn_status clattn_softmax(clattn_context *ctx, const clattn_attention_desc *desc,
                             const clattn_tensor *scores, const clattn_tensor *weights)
{
    return stage_blocking(ctx, 1, desc, scores, NULL, weights);
}

clattn_status clattn_softmax_enqueue(clattn_context *ctx, const clattn_attention_desc *desc,
                                     const clattn_tensor *scores, const clattn_tensor *weights,
                                     cl_uint n_wait, const cl_event *wait, cl_event *done)
{
    return stage_enqueue(ctx, 1, desc, scores, NULL, weights, n_wait, wait, done);
}

clattn_status clattn_weighted_sum(clattn_context *ctx, const clattn_attention_desc *desc,
                                  const clattn_tensor *weights, const clattn_tensor *v,
                                  const clattn_tensor *o)
{
    return stage_blocking(ctx, 2, desc, weights, v, o);
}

clattn_status clattn_weighted_sum_enqueue(clattn_context *ctx, const clattn_attention_desc *desc,
                                          const clattn_tensor *weights, const clattn_tensor *v,
                                          const clattn_tensor *o, cl_uint n_wait,
                                          const cl_event *wait, cl_event *done)
{
    return stage_enqueue(ctx, 2, desc, weights, v, o, n_wait, wait, done);
}

/* ------------------------------------------------------------------------ merge */

#define MAX_MERGE_PARTS 4096

/* Validates a merge call: parts, output, optional LSE. */
static clattn_status check_merge(clattn_context *ctx, size_t n_parts, const clattn_tensor *o_parts,
                                 const clattn_tensor *lse_parts, const clattn_tensor *o,
                                 const clattn_tensor *lse, clattn_storage storage, clattn_view *po,
                                 clattn_view *pl, clattn_view *vo, clattn_view *vl)
{
#define LL(x) ((long long)(x))
    if (!ctx)
        return clattn_fail(NULL, CLATTN_ERROR_INVALID_ARGUMENT, "ctx is NULL");
    clattn_clear_error(ctx);
    if (n_parts < 1 || n_parts > MAX_MERGE_PARTS)
        return clattn_fail(ctx, CLATTN_ERROR_INVALID_ARGUMENT,
                           "n_parts is %zu; it must be within 1..%d", n_parts, MAX_MERGE_PARTS);
    if (!o_parts || !lse_parts)
        return clattn_fail(ctx, CLATTN_ERROR_INVALID_ARGUMENT, "%s is NULL",
                           !o_parts ? "o_parts" : "lse_parts");
    clattn_status st = clattn_view_make(ctx, "O", o, storage, true, vo);
    if (st == CLATTN_SUCCESS)
        st = clattn_view_check_dtype(ctx, "O", vo, CLATTN_DT_FLOATS);
    if (st == CLATTN_SUCCESS && lse) {
        st = clattn_view_make(ctx, "lse", lse, storage, true, vl);
        if (st == CLATTN_SUCCESS)
            st = clattn_view_check_dtype(ctx, "lse", vl, CLATTN_DT_F32);
    }
    if (st != CLATTN_SUCCESS)
        return st;
    const int64_t *n = vo->n;
    if (lse && (vl->n[0] != n[0] || vl->n[1] != n[1] || vl->n[2] != n[2] || vl->n[3] != 1))
        return clattn_fail(ctx, CLATTN_ERROR_INVALID_SHAPE,
                           "lse is [%lld, %lld, %lld, %lld], expected [%lld, %lld, %lld, 1]",
                           LL(vl->n[0]), LL(vl->n[1]), LL(vl->n[2]), LL(vl->n[3]), LL(n[0]),
                           LL(n[1]), LL(n[2]));
    if (lse && clattn_views_overlap(vo, vl))
        return clattn_fail(ctx, CLATTN_ERROR_INVALID_LAYOUT, "O and lse overlap");
    for (size_t p = 0; p < n_parts; p++) {
        char name[48];
        snprintf(name, sizeof name, "o_parts[%zu]", p);
        st = clattn_view_make(ctx, name, &o_parts[p], storage, false, &po[p]);
        if (st == CLATTN_SUCCESS)
            st = clattn_view_check_dtype(ctx, name, &po[p], CLATTN_DT_FLOATS);
        if (st != CLATTN_SUCCESS)
            return st;
        if (memcmp(po[p].n, n, sizeof po[p].n) != 0)
            return clattn_fail(ctx, CLATTN_ERROR_INVALID_SHAPE,
                               "%s is [%lld, %lld, %lld, %lld] but O is [%lld, %lld, %lld, %lld]",
                               name, LL(po[p].n[0]), LL(po[p].n[1]), LL(po[p].n[2]), LL(po[p].n[3]),
                               LL(n[0]), LL(n[1]), LL(n[2]), LL(n[3]));
        snprintf(name, sizeof name, "lse_parts[%zu]", p);
        st = clattn_view_make(ctx, name, &lse_parts[p], storage, false, &pl[p]);
        if (st == CLATTN_SUCCESS)
            st = clattn_view_check_dtype(ctx, name, &pl[p], CLATTN_DT_F32);
        if (st != CLATTN_SUCCESS)
            return st;
        if (pl[p].n[0] != n[0] || pl[p].n[1] != n[1] || pl[p].n[2] != n[2] || pl[p].n[3] != 1)
            return clattn_fail(ctx, CLATTN_ERROR_INVALID_SHAPE,
                               "%s is [%lld, %lld, %lld, %lld], expected [%lld, %lld, %lld, 1]",
                               name, LL(pl[p].n[0]), LL(pl[p].n[1]), LL(pl[p].n[2]), LL(pl[p].n[3]),
                               LL(n[0]), LL(n[1]), LL(n[2]));
        /* in place only exactly on part 0 (read before anything is written) */
        const bool same_o = p == 0 && po[p].host == vo->host && po[p].buffer == vo->buffer &&
                            po[p].offset == vo->offset && po[p].dtype == vo->dtype &&
                            !memcmp(po[p].s, vo->s, sizeof vo->s);
        const bool same_l = p == 0 && lse && pl[p].host == vl->host && pl[p].buffer == vl->buffer &&
                            pl[p].offset == vl->offset && !memcmp(pl[p].s, vl->s, sizeof vl->s);
        if ((!same_o && clattn_views_overlap(vo, &po[p])) || clattn_views_overlap(vo, &pl[p]) ||
            (lse &&
             ((!same_l && clattn_views_overlap(vl, &pl[p])) || clattn_views_overlap(vl, &po[p]))))
            return clattn_fail(ctx, CLATTN_ERROR_INVALID_LAYOUT,
                               "an output overlaps part %zu (only o_parts[0] / lse_parts[0] "
                               "may be the outputs themselves)",
                               p);
    }
    if (n[0] * n[1] > INT_MAX)
        return clattn_fail(ctx, CLATTN_ERROR_UNSUPPORTED, "batch x heads above INT_MAX");
#undef LL
    return CLATTN_SUCCESS;
}

static clattn_status enqueue_merge_step(clattn_context *ctx, clattn_program_entry *e,
                                        const clattn_view *acc, const clattn_view *acc_lse,
                                        const clattn_view *po, const clattn_view *pl,
                                        const clattn_view *o, const clattn_view *lse, int mode,
                                        cl_uint n_wait, const cl_event *wait, cl_event *done)
{
    arg_list a = {e->kernel, 0, CL_SUCCESS};
    arg(&a, sizeof(cl_mem), &acc->buffer);
    arg(&a, sizeof(cl_mem), &acc_lse->buffer);
    arg_long(&a, acc->n[3]);
    arg_int(&a, acc->n[1]);
    arg_long(&a, acc->n[2]);
    arg_opt_view(&a, po);
    arg_opt_view(&a, pl);
    arg_opt_view(&a, o);
    arg_opt_view(&a, lse);
    arg_int(&a, mode);
    const size_t global[1] = {(size_t)(acc->n[0] * acc->n[1] * acc->n[2])};
    return launch(ctx, "merge", &a, 1, global, NULL, n_wait, wait, done);
}

/* Runs a validated merge on device views. */
static clattn_status run_merge(clattn_context *ctx, size_t n_parts, const clattn_view *po,
                               const clattn_view *pl, const clattn_view *o, const clattn_view *lse,
                               cl_uint n_wait, const cl_event *wait, cl_event *done)
{
    if (o->count == 0)
        return enqueue_marker(ctx, n_wait, wait, done);
    clattn_view acc, acc_lse;
    acc.buffer = acc_lse.buffer = NULL;
    clattn_status st = workspace(ctx, o->n[0], o->n[1], o->n[2], o->n[3], &acc);
    if (st == CLATTN_SUCCESS)
        st = workspace(ctx, o->n[0], o->n[1], o->n[2], 1, &acc_lse);
    cl_event prev = NULL;
    for (size_t p = 0; st == CLATTN_SUCCESS && p <= n_parts; p++) {
        /* one program per (part storage type, output storage type) */
        char opts[64];
        snprintf(opts, sizeof opts, "-cl-std=CL1.2 -DV_DT=%d -DO_DT=%d",
                 p < n_parts ? (int)po[p].dtype : 0, (int)o->dtype);
        clattn_program_entry *e;
        st = clattn_get_kernel(ctx, "merge.cl", opts, &e);
        cl_event next = NULL;
        if (st == CLATTN_SUCCESS) {
            const int mode = p == 0 ? 0 : p < n_parts ? 1 : 2;
            st = enqueue_merge_step(ctx, e, &acc, &acc_lse, p < n_parts ? &po[p] : NULL,
                                    p < n_parts ? &pl[p] : NULL, o, lse, mode, prev ? 1 : n_wait,
                                    prev ? &prev : wait, p == n_parts ? done : &next);
        }
        if (prev)
            clReleaseEvent(prev);
        prev = next;
    }
    if (prev)
        clReleaseEvent(prev);
    if (acc.buffer)
        clReleaseMemObject(acc.buffer);
    if (acc_lse.buffer)
        clReleaseMemObject(acc_lse.buffer);
    return st;
}

clattn_status clattn_merge_enqueue(clattn_context *ctx, size_t n_parts,
                                   const clattn_tensor *o_parts, const clattn_tensor *lse_parts,
                                   const clattn_tensor *o, const clattn_tensor *lse, cl_uint n_wait,
                                   const cl_event *wait, cl_event *done)
{
    clattn_view vo, vl, *po = NULL, *pl = NULL;
    memset(&vo, 0, sizeof vo);
    memset(&vl, 0, sizeof vl);
    if (n_parts >= 1 && n_parts <= MAX_MERGE_PARTS) {
        po = malloc(n_parts * sizeof *po);
        pl = malloc(n_parts * sizeof *pl);
    }
    clattn_status st;
    if (n_parts >= 1 && n_parts <= MAX_MERGE_PARTS && (!po || !pl))
        st = clattn_fail(ctx, CLATTN_ERROR_OUT_OF_HOST_MEMORY, "cannot allocate %zu part views",
                         n_parts);
    else
        st = check_merge(ctx, n_parts, o_parts, lse_parts, o, lse, CLATTN_STORAGE_BUFFER, po, pl,
                         &vo, &vl);
    if (st == CLATTN_SUCCESS && n_wait > 0 && !wait)
        st = clattn_fail(ctx, CLATTN_ERROR_INVALID_ARGUMENT, "n_wait is %u but wait is NULL",
                         n_wait);
    if (st == CLATTN_SUCCESS)
        st = run_merge(ctx, n_parts, po, pl, &vo, lse ? &vl : NULL, n_wait, wait, done);
    free(po);
    free(pl);
    return st;
}

clattn_status clattn_merge(clattn_context *ctx, size_t n_parts, const clattn_tensor *o_parts,
                           const clattn_tensor *lse_parts, const clattn_tensor *o,
                           const clattn_tensor *lse)
{
    clattn_view vo, vl, *po = NULL, *pl = NULL, *dpo = NULL, *dpl = NULL;
    memset(&vo, 0, sizeof vo);
    memset(&vl, 0, sizeof vl);
    cl_mem *mem = NULL;
    size_t n_mem = 0;
    if (n_parts >= 1 && n_parts <= MAX_MERGE_PARTS) {
        po = malloc(n_parts * sizeof *po);
        pl = malloc(n_parts * sizeof *pl);
        dpo = malloc(n_parts * sizeof *dpo);
        dpl = malloc(n_parts * sizeof *dpl);
        mem = malloc((2 * n_parts + 2) * sizeof *mem);
    }
    clattn_status st;
    if (n_parts >= 1 && n_parts <= MAX_MERGE_PARTS && (!po || !pl || !dpo || !dpl || !mem))
        st = clattn_fail(ctx, CLATTN_ERROR_OUT_OF_HOST_MEMORY, "cannot allocate %zu part views",
                         n_parts);
    else
        st = check_merge(ctx, n_parts, o_parts, lse_parts, o, lse, CLATTN_STORAGE_HOST, po, pl, &vo,
                         &vl);
    if (st == CLATTN_SUCCESS && vo.count > 0) {
        clattn_view dvo, dvl;
        cl_event done = NULL;
        /* stage every part (a staging list per call would cap the part count) */
        for (size_t p = 0; st == CLATTN_SUCCESS && p < n_parts; p++) {
            staging one = {{NULL}, 0};
            st = stage(ctx, &one, &po[p], true, &dpo[p]);
            if (st == CLATTN_SUCCESS)
                mem[n_mem++] = one.mem[0];
            one.n = 0;
            if (st == CLATTN_SUCCESS)
                st = stage(ctx, &one, &pl[p], true, &dpl[p]);
            if (st == CLATTN_SUCCESS)
                mem[n_mem++] = one.mem[0];
        }
        staging sg = {{NULL}, 0};
        if (st == CLATTN_SUCCESS)
            st = stage(ctx, &sg, &vo, false, &dvo);
        if (st == CLATTN_SUCCESS && lse)
            st = stage(ctx, &sg, &vl, false, &dvl);
        if (st == CLATTN_SUCCESS)
            st = run_merge(ctx, n_parts, dpo, dpl, &dvo, lse ? &dvl : NULL, 0, NULL, &done);
        if (st == CLATTN_SUCCESS)
            st = finish(ctx, done);
        if (st == CLATTN_SUCCESS)
            st = unstage(ctx, &vo, &dvo);
        if (st == CLATTN_SUCCESS && lse)
            st = unstage(ctx, &vl, &dvl);
        staging_release(&sg);
    }
    for (size_t i = 0; i < n_mem; i++)
        clReleaseMemObject(mem[i]);
    free(po);
    free(pl);
    free(dpo);
    free(dpl);
    free(mem);
    return st;
}
