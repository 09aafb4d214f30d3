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
                                   int64_t n_q, int64_t acc_floats, int64_t private_floats,
                                   size_t tile_kv, size_t wg_request, bool one_query_per_item,
                                   blocking *out)
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
    if (env && sscanf(env, "%u,%u,%u", &e_rq, &e_wg, &e_tile) == 3 && e_rq >= 1 && e_rq <= 8 &&
        e_tile >= 16 && e_tile % 16 == 0 && e_tile <= 4 * tile_kv && e_wg >= 1) {
        rq = e_rq;
        tile_kv = e_tile;
        if (wg_request == 0)
            wg_request = e_wg;
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
        char opts[192];
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
static clattn_status scores_kernel(clattn_context *ctx, int64_t n_q, int64_t d_k, blocking *out)
{
    const size_t t = fit_tile_kv(ctx, d_k, default_tile_kv(ctx, false));
    if (t == 0)
        return clattn_fail(ctx, CLATTN_ERROR_UNSUPPORTED,
                           "scores: 16 rows of K with d_k %lld exceed the device's local memory "
                           "(%llu bytes)",
                           (long long)d_k, (unsigned long long)ctx->local_mem);
    char dims[48];
    snprintf(dims, sizeof dims, "-DD_K=%lld", (long long)d_k);
    return build_blocked(ctx, "scores.cl", dims, n_q, (int64_t)t, 2 * (int64_t)t + 16, t, 0, false,
                         out);
}

/* weighted_sum.cl for d_v, or why not (local memory) */
static clattn_status wsum_kernel(clattn_context *ctx, int64_t n_q, int64_t d_v, blocking *out)
{
    const int64_t d_v_pad = ceil_div(d_v, 16) * 16;
    const size_t t = fit_tile_kv(ctx, d_v_pad, default_tile_kv(ctx, false));
    if (t == 0)
        return clattn_fail(ctx, CLATTN_ERROR_UNSUPPORTED,
                           "weighted sum: 16 rows of V with d_v %lld exceed the device's local "
                           "memory (%llu bytes)",
                           (long long)d_v, (unsigned long long)ctx->local_mem);
    char dims[48];
    snprintf(dims, sizeof dims, "-DD_V=%lld", (long long)d_v);
    return build_blocked(ctx, "weighted_sum.cl", dims, n_q, d_v_pad, d_v_pad + (int64_t)t + 16, t,
                         0, false, out);
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

typedef struct plan_t {
    clattn_algorithm algorithm;
    blocking scores, wsum, fused; /* the tiled kernels that will run */
    clattn_program_entry *softmax;
    size_t softmax_wg;
    int64_t workspace_bytes;
    char reason[256];
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

static clattn_status plan_attention(clattn_context *ctx, const clattn_attention_desc *desc,
                                    const clattn_view *q, const clattn_view *k,
                                    const clattn_view *v, bool want_weights, plan_t *p)
{
    memset(p, 0, sizeof *p);
    const int64_t batch = q->n[0], h_q = q->n[1], n_q = q->n[2], d_k = q->n[3];
    const int64_t n_kv = k->n[2], d_v = v->n[3];
    if (h_q > INT_MAX || d_k > INT_MAX || d_v > INT_MAX)
        return clattn_fail(ctx, CLATTN_ERROR_UNSUPPORTED, "heads or head dims above INT_MAX");

    char fused_why[160];
    const size_t fused_tile = fused_fit(ctx, d_k, d_v, fused_why, sizeof fused_why);
    if (want_weights && !fused_why[0])
        snprintf(fused_why, sizeof fused_why, "fused: cannot return attention weights");

    char unfused_why[160] = "";
    int64_t ws = 0;
    if (!want_weights && (!clattn_mul_ok(batch * h_q, n_q, &ws) || !clattn_mul_ok(ws, n_kv, &ws) ||
                          !clattn_mul_ok(ws, 4, &ws)))
        snprintf(unfused_why, sizeof unfused_why, "unfused: score matrix size overflows");
    else if (!want_weights && (cl_ulong)ws > ctx->max_alloc)
        snprintf(unfused_why, sizeof unfused_why,
                 "unfused: the %lld-byte score matrix exceeds CL_DEVICE_MAX_MEM_ALLOC_SIZE "
                 "(%llu bytes)",
                 (long long)ws, (unsigned long long)ctx->max_alloc);

    switch (desc->algorithm) {
    case CLATTN_ALGORITHM_FUSED:
        if (fused_why[0])
            return clattn_fail(ctx, CLATTN_ERROR_UNSUPPORTED, "%s", fused_why);
        p->algorithm = CLATTN_ALGORITHM_FUSED;
        snprintf(p->reason, sizeof p->reason, "fused: requested");
        break;
    case CLATTN_ALGORITHM_UNFUSED:
        if (unfused_why[0])
            return clattn_fail(ctx, CLATTN_ERROR_UNSUPPORTED, "%s", unfused_why);
        p->algorithm = CLATTN_ALGORITHM_UNFUSED;
        snprintf(p->reason, sizeof p->reason, "unfused: requested");
        break;
    default:
        if (!fused_why[0]) {
            p->algorithm = CLATTN_ALGORITHM_FUSED;
            snprintf(p->reason, sizeof p->reason,
                     "auto: fused (no weights requested; never stores n_q x n_kv)");
        } else if (!unfused_why[0]) {
            p->algorithm = CLATTN_ALGORITHM_UNFUSED;
            snprintf(p->reason, sizeof p->reason, "auto: unfused, because %s", fused_why);
        } else {
            return clattn_fail(ctx, CLATTN_ERROR_UNSUPPORTED, "no algorithm fits: %s; %s",
                               fused_why, unfused_why);
        }
    }

    if (p->algorithm == CLATTN_ALGORITHM_UNFUSED) {
        clattn_status st;
        p->workspace_bytes = ws;
        if ((st = scores_kernel(ctx, n_q, d_k, &p->scores)) != CLATTN_SUCCESS ||
            (st = wsum_kernel(ctx, n_q, d_v, &p->wsum)) != CLATTN_SUCCESS)
            return st;
        return softmax_kernel(ctx, desc, n_kv, &p->softmax, &p->softmax_wg);
    }
    /* a few queries (decoding) share nothing: stream K and V instead of staging tiles */
    const bool direct = n_q <= DIRECT_MAX_N_Q && desc->work_group_size == 0;
    char dims[80];
    snprintf(dims, sizeof dims, "-DD_K=%lld -DD_V=%lld -DDIRECT=%d", (long long)d_k, (long long)d_v,
             direct ? 1 : 0);
    /* private floats per query: q row, accumulator, scores and weights of a tile */
    const int64_t d_v_pad = ceil_div(d_v, 16) * 16;
    return build_blocked(ctx, "fused.cl", dims, n_q, d_v_pad,
                         d_k + d_v_pad + 2 * (int64_t)fused_tile + 8, fused_tile,
                         desc->work_group_size, direct, &p->fused);
}

/* ------------------------------------------------------------ stage dispatchers */

static clattn_status enqueue_scores(clattn_context *ctx, const blocking *bk, const clattn_view *q,
                                    const clattn_view *k, const clattn_view *s, float scale,
                                    clattn_mask mask, cl_uint n_wait, const cl_event *wait,
                                    cl_event *done)
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
    arg_int(&a, mask);
    const size_t global[3] = {round_up(ceil_div(q->n[2], (int64_t)bk->rq), bk->wg),
                              (size_t)ceil_div(k->n[2], (int64_t)bk->tile_kv),
                              (size_t)(q->n[0] * q->n[1])};
    const size_t local[3] = {bk->wg, 1, 1};
    return launch(ctx, "scores", &a, 3, global, local, n_wait, wait, done);
}

/* W = softmax(S); a causal `mask` (with n_q queries) lets rows stop at their last visible
 * key, the rest of S being −∞ already */
static clattn_status enqueue_softmax(clattn_context *ctx, clattn_program_entry *e, size_t wg,
                                     const clattn_view *x, const clattn_view *y, clattn_mask mask,
                                     cl_uint n_wait, const cl_event *wait, cl_event *done)
{
    arg_list a = {e->kernel, 0, CL_SUCCESS};
    arg_view(&a, x);
    arg_view(&a, y);
    arg_int(&a, x->n[1]);
    arg_long(&a, x->n[3]);
    arg_int(&a, mask);
    arg_long(&a, x->n[2]);
    arg(&a, wg * sizeof(float), NULL);
    const size_t global[3] = {wg, (size_t)x->n[2], (size_t)(x->n[0] * x->n[1])};
    const size_t local[3] = {wg, 1, 1};
    return launch(ctx, "softmax", &a, 3, global, local, n_wait, wait, done);
}

/* O = W·V; `mask` only lets causal masks skip key tiles whose weights are all zero */
static clattn_status enqueue_wsum(clattn_context *ctx, const blocking *bk, const clattn_view *w,
                                  const clattn_view *v, const clattn_view *o, clattn_mask mask,
                                  cl_uint n_wait, const cl_event *wait, cl_event *done)
{
    arg_list a = {bk->entry->kernel, 0, CL_SUCCESS};
    arg_view(&a, w);
    arg_view(&a, v);
    arg_view(&a, o);
    arg_int(&a, o->n[1]);
    arg_int(&a, o->n[1] / v->n[1]);
    arg_long(&a, o->n[2]);
    arg_long(&a, v->n[2]);
    arg_int(&a, mask);
    const size_t global[2] = {round_up(ceil_div(o->n[2], (int64_t)bk->rq), bk->wg),
                              (size_t)(o->n[0] * o->n[1])};
    const size_t local[2] = {bk->wg, 1};
    return launch(ctx, "weighted_sum", &a, 2, global, local, n_wait, wait, done);
}

static clattn_status enqueue_fused(clattn_context *ctx, const blocking *bk, const clattn_view *q,
                                   const clattn_view *k, const clattn_view *v, const clattn_view *o,
                                   float scale, clattn_mask mask, cl_uint n_wait,
                                   const cl_event *wait, cl_event *done)
{
    arg_list a = {bk->entry->kernel, 0, CL_SUCCESS};
    arg_view(&a, q);
    arg_view(&a, k);
    arg_view(&a, v);
    arg_view(&a, o);
    arg_int(&a, q->n[1]);
    arg_int(&a, q->n[1] / k->n[1]);
    arg_long(&a, q->n[2]);
    arg_long(&a, k->n[2]);
    arg(&a, sizeof scale, &scale);
    arg_int(&a, mask);
    const size_t global[2] = {round_up(ceil_div(q->n[2], (int64_t)bk->rq), bk->wg),
                              (size_t)(q->n[0] * q->n[1])};
    const size_t local[2] = {bk->wg, 1};
    return launch(ctx, "fused", &a, 2, global, local, n_wait, wait, done);
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

static clattn_status create_buffer(clattn_context *ctx, cl_mem_flags flags, int64_t elements,
                                   void *host, cl_mem *out)
{
    cl_int err;
    size_t bytes = (size_t)(elements > 0 ? elements : 1) * sizeof(float);
    *out = clCreateBuffer(ctx->context, flags, bytes, host, &err);
    if (err != CL_SUCCESS) {
        char what[96];
        snprintf(what, sizeof what, "clCreateBuffer(%zu bytes)", bytes);
        return clattn_fail_cl(ctx, err, what);
    }
    return CLATTN_SUCCESS;
}

/* Runs a planned attention on device views. Events chain the kernels, so an
 * out-of-order queue is fine. */
static clattn_status run_attention(clattn_context *ctx, const clattn_attention_desc *desc,
                                   const plan_t *p, const clattn_view *q, const clattn_view *k,
                                   const clattn_view *v, const clattn_view *o, const clattn_view *w,
                                   cl_uint n_wait, const cl_event *wait, cl_event *done)
{
    const float scale = clattn_effective_scale(desc, q->n[3]);
    if (q->count == 0)
        return enqueue_marker(ctx, n_wait, wait, done);
    if (p->algorithm == CLATTN_ALGORITHM_FUSED)
        return enqueue_fused(ctx, &p->fused, q, k, v, o, scale, desc->mask, n_wait, wait, done);

    if (k->n[2] == 0) /* no keys: the weighted sum of nothing writes zero rows */
        return enqueue_wsum(ctx, &p->wsum, v, v, o, CLATTN_MASK_NONE, n_wait, wait, done);

    clattn_view ws;
    cl_mem ws_mem = NULL;
    clattn_status st = CLATTN_SUCCESS;
    if (w) {
        ws = *w; /* scores go straight into the caller's weights, softmax runs in place */
    } else {
        memset(&ws, 0, sizeof ws);
        ws.n[0] = q->n[0];
        ws.n[1] = q->n[1];
        ws.n[2] = q->n[2];
        ws.n[3] = k->n[2];
        ws.s[3] = 1;
        ws.s[2] = ws.n[3];
        ws.s[1] = ws.s[2] * ws.n[2];
        ws.s[0] = ws.s[1] * ws.n[1];
        ws.count = ws.span = ws.s[0] * ws.n[0];
        st = create_buffer(ctx, CL_MEM_READ_WRITE, ws.count, NULL, &ws_mem);
        ws.buffer = ws_mem;
    }
    cl_event e1 = NULL, e2 = NULL;
    if (st == CLATTN_SUCCESS)
        st = enqueue_scores(ctx, &p->scores, q, k, &ws, scale, desc->mask, n_wait, wait, &e1);
    if (st == CLATTN_SUCCESS)
        st = enqueue_softmax(ctx, p->softmax, p->softmax_wg, &ws, &ws, desc->mask, 1, &e1, &e2);
    if (st == CLATTN_SUCCESS)
        st = enqueue_wsum(ctx, &p->wsum, &ws, v, o, desc->mask, 1, &e2, done);
    if (e1)
        clReleaseEvent(e1);
    if (e2)
        clReleaseEvent(e2);
    if (ws_mem) /* freed by the runtime once the kernels that use it finish */
        clReleaseMemObject(ws_mem);
    return st;
}

/* ------------------------------------------------------- validation of a call */

typedef struct call_views {
    clattn_view q, k, v, o, w;
    bool has_w;
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
    if (st != CLATTN_SUCCESS)
        return st;
    /* outputs never overlap each other; on device buffers (no staging copy) they must
     * not overlap the inputs the kernels are reading either */
    if (cv->has_w && clattn_views_overlap(&cv->o, &cv->w))
        return clattn_fail(ctx, CLATTN_ERROR_INVALID_LAYOUT, "O and the weights overlap");
    if (storage == CLATTN_STORAGE_BUFFER) {
        const clattn_view *ins[3] = {&cv->q, &cv->k, &cv->v};
        static const char *const names[3] = {"Q", "K", "V"};
        for (int i = 0; i < 3; i++)
            for (int w = 0; w < 1 + cv->has_w; w++)
                if (clattn_views_overlap(w ? &cv->w : &cv->o, ins[i]))
                    return clattn_fail(ctx, CLATTN_ERROR_INVALID_LAYOUT,
                                       "%s overlaps %s in the same cl_mem", w ? "weights" : "O",
                                       names[i]);
    }
    return CLATTN_SUCCESS;
}

/* -------------------------------------------- staging host views through buffers */

#define MAX_STAGED 5

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
    float *base = (float *)hv->host + hv->offset;
    const bool copy = input && hv->span > 0; /* an empty view still gets a valid cl_mem */
    cl_mem_flags flags = copy ? CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR : CL_MEM_READ_WRITE;
    clattn_status st = create_buffer(ctx, flags, hv->span, copy ? base : NULL, &dv->buffer);
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
    float *base = (float *)hv->host + hv->offset;
    const bool dense = hv->span == hv->count;
    float *tmp = dense ? base : malloc((size_t)hv->span * sizeof(float));
    if (!tmp)
        return clattn_fail(ctx, CLATTN_ERROR_OUT_OF_HOST_MEMORY,
                           "cannot allocate %lld floats to read back an output",
                           (long long)hv->span);
    cl_int err = clEnqueueReadBuffer(ctx->queue, dv->buffer, CL_TRUE, 0,
                                     (size_t)hv->span * sizeof(float), tmp, 0, NULL, NULL);
    if (err != CL_SUCCESS) {
        if (!dense)
            free(tmp);
        return clattn_fail_cl(ctx, err, "clEnqueueReadBuffer");
    }
    if (!dense) {
        for (int64_t b = 0; b < hv->n[0]; b++)
            for (int64_t h = 0; h < hv->n[1]; h++)
                for (int64_t s = 0; s < hv->n[2]; s++)
                    for (int64_t d = 0; d < hv->n[3]; d++) {
                        int64_t at = b * hv->s[0] + h * hv->s[1] + s * hv->s[2] + d * hv->s[3];
                        base[at] = tmp[at];
                    }
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
        st = plan_attention(ctx, desc, &cv.q, &cv.k, &cv.v, cv.has_w, &p);
    if (st == CLATTN_SUCCESS)
        st = run_attention(ctx, desc, &p, &cv.q, &cv.k, &cv.v, &cv.o, cv.has_w ? &cv.w : NULL,
                           n_wait, wait, done);
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
        st = plan_attention(ctx, desc, &cv.q, &cv.k, &cv.v, cv.has_w, &p);
    if (st != CLATTN_SUCCESS || cv.q.count == 0)
        return st;

    staging sg = {{NULL}, 0};
    clattn_view dq, dk, dv, dout, dw;
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
    if (st == CLATTN_SUCCESS)
        st = run_attention(ctx, desc, &p, &dq, &dk, &dv, &dout, cv.has_w ? &dw : NULL, 0, NULL,
                           &done);
    if (st == CLATTN_SUCCESS)
        st = finish(ctx, done);
    if (st == CLATTN_SUCCESS)
        st = unstage(ctx, &cv.o, &dout);
    if (st == CLATTN_SUCCESS && cv.has_w)
        st = unstage(ctx, &cv.w, &dw);
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
        st = plan_attention(ctx, desc, &cv.q, &cv.k, &cv.v, cv.has_w, &p);
    if (st != CLATTN_SUCCESS)
        return st;
    memset(out, 0, sizeof *out);
    out->algorithm = p.algorithm;
    out->workspace_bytes = (size_t)p.workspace_bytes;
    const blocking *bk = p.algorithm == CLATTN_ALGORITHM_FUSED ? &p.fused : &p.scores;
    out->work_group_size = p.algorithm == CLATTN_ALGORITHM_FUSED ? p.fused.wg : p.softmax_wg;
    out->queries_per_work_item = bk->rq;
    out->tile_kv = bk->tile_kv;
    snprintf(out->reason, sizeof out->reason, "%s", p.reason);
    return CLATTN_SUCCESS;
}

/* ------------------------------------------------------------- the three stages */

/* Validates the stage's views; stage_kind 0 scores (a=q, b=k, c=s), 1 softmax (a=x,
 * c=y), 2 weighted sum (a=w, b=v, c=o). */
static clattn_status check_stage(clattn_context *ctx, int kind, const clattn_attention_desc *desc,
                                 const clattn_tensor *a, const clattn_tensor *b,
                                 const clattn_tensor *c, clattn_storage storage, clattn_view *va,
                                 clattn_view *vb, clattn_view *vc)
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
    return CLATTN_SUCCESS;
}

/* Runs one stage on device views (kind as in check_stage). */
static clattn_status run_stage(clattn_context *ctx, int kind, const clattn_attention_desc *desc,
                               const clattn_view *a, const clattn_view *b, const clattn_view *c,
                               cl_uint n_wait, const cl_event *wait, cl_event *done)
{
    if (c->count == 0)
        return enqueue_marker(ctx, n_wait, wait, done);
    clattn_program_entry *e;
    size_t size;
    clattn_status st;
    if (kind == 1) {
        if ((st = softmax_kernel(ctx, desc, a->n[3], &e, &size)) != CLATTN_SUCCESS)
            return st;
        return enqueue_softmax(ctx, e, size, a, c, CLATTN_MASK_NONE, n_wait, wait, done);
    }
    blocking bk;
    if (kind == 0) {
        if ((st = scores_kernel(ctx, a->n[2], a->n[3], &bk)) != CLATTN_SUCCESS)
            return st;
        return enqueue_scores(ctx, &bk, a, b, c, clattn_effective_scale(desc, a->n[3]), desc->mask,
                              n_wait, wait, done);
    }
    if ((st = wsum_kernel(ctx, c->n[2], c->n[3], &bk)) != CLATTN_SUCCESS)
        return st;
    return enqueue_wsum(ctx, &bk, a, b, c, CLATTN_MASK_NONE, n_wait, wait, done);
}

static clattn_status stage_enqueue(clattn_context *ctx, int kind, const clattn_attention_desc *desc,
                                   const clattn_tensor *a, const clattn_tensor *b,
                                   const clattn_tensor *c, cl_uint n_wait, const cl_event *wait,
                                   cl_event *done)
{
    clattn_view va, vb, vc;
    clattn_status st = check_stage(ctx, kind, desc, a, b, c, CLATTN_STORAGE_BUFFER, &va, &vb, &vc);
    if (st == CLATTN_SUCCESS && n_wait > 0 && !wait)
        st = clattn_fail(ctx, CLATTN_ERROR_INVALID_ARGUMENT, "n_wait is %u but wait is NULL",
                         n_wait);
    if (st == CLATTN_SUCCESS)
        st = run_stage(ctx, kind, desc, &va, kind == 1 ? &va : &vb, &vc, n_wait, wait, done);
    return st;
}

static clattn_status stage_blocking(clattn_context *ctx, int kind,
                                    const clattn_attention_desc *desc, const clattn_tensor *a,
                                    const clattn_tensor *b, const clattn_tensor *c)
{
    clattn_view va, vb, vc;
    clattn_status st = check_stage(ctx, kind, desc, a, b, c, CLATTN_STORAGE_HOST, &va, &vb, &vc);
    if (st != CLATTN_SUCCESS || vc.count == 0)
        return st;
    staging sg = {{NULL}, 0};
    clattn_view da, db, dc;
    cl_event done = NULL;
    st = stage(ctx, &sg, &va, true, &da);
    if (st == CLATTN_SUCCESS && kind != 1)
        st = stage(ctx, &sg, &vb, true, &db);
    if (st == CLATTN_SUCCESS)
        st = stage(ctx, &sg, &vc, false, &dc);
    if (st == CLATTN_SUCCESS)
        st = run_stage(ctx, kind, desc, &da, kind == 1 ? &da : &db, &dc, 0, NULL, &done);
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
