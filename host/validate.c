/* Shape, stride, size and overflow checks shared by every entry point. Nothing here
 * touches the device except CL_MEM_SIZE queries. */
#include "internal.h"

#include <math.h>

static const char *const dim_names[4] = {"batch", "heads", "seq", "dim"};

bool clattn_mul_ok(int64_t a, int64_t b, int64_t *out)
{
    /* a, b >= 0 */
    if (a != 0 && b > INT64_MAX / a)
        return false;
    *out = a * b;
    return true;
}

static bool add_ok(int64_t a, int64_t b, int64_t *out)
{
    if (b > INT64_MAX - a)
        return false;
    *out = a + b;
    return true;
}

/* An output view must map distinct indices to distinct elements: with the dimensions
 * of extent > 1 sorted by stride, each stride must exceed the furthest element
 * reachable with the smaller ones. */
static bool views_self_overlap(const clattn_view *v)
{
    int order[4], m = 0;
    for (int i = 0; i < 4; i++)
        if (v->n[i] > 1)
            order[m++] = i;
    for (int a = 1; a < m; a++) /* insertion sort by stride */
        for (int b = a; b > 0 && v->s[order[b]] < v->s[order[b - 1]]; b--) {
            int t = order[b];
            order[b] = order[b - 1];
            order[b - 1] = t;
        }
    int64_t reach = 0;
    for (int a = 0; a < m; a++) {
        int i = order[a];
        if (v->s[i] <= reach)
            return true;
        reach += (v->n[i] - 1) * v->s[i]; /* bounded by span, already checked */
    }
    return false;
}

clattn_status clattn_view_make(clattn_context *ctx, const char *name, const clattn_tensor *t,
                               clattn_storage storage, bool is_output, clattn_view *out)
{
    if (!t)
        return clattn_fail(ctx, CLATTN_ERROR_INVALID_ARGUMENT, "%s is NULL", name);
    if (t->dtype != CLATTN_FLOAT32)
        return clattn_fail(ctx, CLATTN_ERROR_INVALID_ARGUMENT,
                           "%s has unknown dtype %d (only CLATTN_FLOAT32 is supported)", name,
                           (int)t->dtype);
    if (t->host && t->buffer)
        return clattn_fail(ctx, CLATTN_ERROR_INVALID_LAYOUT,
                           "%s has both a host pointer and a cl_mem; set exactly one", name);
    if (storage == CLATTN_STORAGE_HOST && !t->host)
        return clattn_fail(ctx, CLATTN_ERROR_INVALID_LAYOUT,
                           "%s has no host pointer (the blocking calls take host views; use "
                           "the *_enqueue calls for cl_mem views)",
                           name);
    if (storage == CLATTN_STORAGE_BUFFER && !t->buffer)
        return clattn_fail(ctx, CLATTN_ERROR_INVALID_LAYOUT,
                           "%s has no cl_mem (the *_enqueue calls take buffer views)", name);
    if (storage == CLATTN_STORAGE_ANY && !t->host && !t->buffer)
        return clattn_fail(ctx, CLATTN_ERROR_INVALID_LAYOUT, "%s has no storage", name);

    clattn_view v;
    v.host = t->host;
    v.buffer = t->buffer;
    bool packed = true;
    for (int i = 0; i < 4; i++) {
        if (t->shape[i] < 0)
            return clattn_fail(ctx, CLATTN_ERROR_INVALID_SHAPE, "%s has negative %s size %lld",
                               name, dim_names[i], (long long)t->shape[i]);
        if (t->strides[i] < 0)
            return clattn_fail(ctx, CLATTN_ERROR_INVALID_LAYOUT, "%s has negative %s stride %lld",
                               name, dim_names[i], (long long)t->strides[i]);
        if (t->strides[i] != 0)
            packed = false;
        v.n[i] = t->shape[i];
    }
    if (t->offset < 0)
        return clattn_fail(ctx, CLATTN_ERROR_INVALID_LAYOUT, "%s has negative offset %lld", name,
                           (long long)t->offset);
    v.offset = t->offset;

    v.count = 1;
    for (int i = 0; i < 4; i++)
        if (!clattn_mul_ok(v.count, v.n[i], &v.count))
            return clattn_fail(ctx, CLATTN_ERROR_SIZE_OVERFLOW,
                               "%s: element count %lld x %lld x %lld x %lld overflows", name,
                               (long long)v.n[0], (long long)v.n[1], (long long)v.n[2],
                               (long long)v.n[3]);
    if (packed) {
        v.s[3] = 1;
        for (int i = 2; i >= 0; i--)
            v.s[i] = v.s[i + 1] * v.n[i + 1]; /* bounded by count */
    } else {
        for (int i = 0; i < 4; i++)
            v.s[i] = t->strides[i];
    }

    v.span = 0;
    if (v.count > 0) {
        int64_t last = 0;
        for (int i = 0; i < 4; i++) {
            int64_t term;
            if (!clattn_mul_ok(v.n[i] - 1, v.s[i], &term) || !add_ok(last, term, &last))
                return clattn_fail(ctx, CLATTN_ERROR_SIZE_OVERFLOW,
                                   "%s: strides reach past 2^63 elements", name);
        }
        v.span = last + 1;
    }
    int64_t end, bytes;
    if (!add_ok(v.offset, v.span, &end) || !clattn_mul_ok(end, 4, &bytes) ||
        (uint64_t)bytes > (uint64_t)SIZE_MAX)
        return clattn_fail(ctx, CLATTN_ERROR_SIZE_OVERFLOW,
                           "%s: offset %lld + extent %lld elements overflows a byte count", name,
                           (long long)v.offset, (long long)v.span);

    if (is_output && v.count > 0) {
        for (int i = 0; i < 4; i++)
            if (v.n[i] > 1 && v.s[i] == 0)
                return clattn_fail(ctx, CLATTN_ERROR_INVALID_LAYOUT,
                                   "%s is an output but has stride 0 on its %s dimension of "
                                   "size %lld",
                                   name, dim_names[i], (long long)v.n[i]);
        if (views_self_overlap(&v))
            return clattn_fail(ctx, CLATTN_ERROR_INVALID_LAYOUT,
                               "%s is an output whose strides make elements overlap", name);
    }

    if (v.buffer && v.count > 0) {
        size_t size = 0;
        cl_int err = clGetMemObjectInfo(v.buffer, CL_MEM_SIZE, sizeof size, &size, NULL);
        if (err != CL_SUCCESS)
            return clattn_fail(ctx, CLATTN_ERROR_INVALID_ARGUMENT,
                               "%s: buffer is not a valid cl_mem (%s)", name,
                               clattn_cl_error_name(err));
        if ((uint64_t)size < (uint64_t)bytes)
            return clattn_fail(ctx, CLATTN_ERROR_BUFFER_TOO_SMALL,
                               "%s: the view needs %lld bytes of its cl_mem, which has %zu", name,
                               (long long)bytes, size);
    }
    *out = v;
    return CLATTN_SUCCESS;
}

clattn_status clattn_check_attention_shapes(clattn_context *ctx, const clattn_view *q,
                                            const clattn_view *k, const clattn_view *v,
                                            const clattn_view *o, const clattn_view *w)
{
#define SHAPE_FAIL(...) clattn_fail(ctx, CLATTN_ERROR_INVALID_SHAPE, __VA_ARGS__)
#define LL(x) ((long long)(x))
    if (k->n[0] != q->n[0] || v->n[0] != q->n[0] || o->n[0] != q->n[0])
        return SHAPE_FAIL("batch sizes differ: Q %lld, K %lld, V %lld, O %lld", LL(q->n[0]),
                          LL(k->n[0]), LL(v->n[0]), LL(o->n[0]));
    if (v->n[1] != k->n[1])
        return SHAPE_FAIL("K has %lld heads, V has %lld", LL(k->n[1]), LL(v->n[1]));
    if (o->n[1] != q->n[1])
        return SHAPE_FAIL("Q has %lld heads, O has %lld", LL(q->n[1]), LL(o->n[1]));
    if (k->n[1] == 0 && q->n[1] != 0)
        return SHAPE_FAIL("K has 0 heads but Q has %lld", LL(q->n[1]));
    if (k->n[1] != 0 && q->n[1] % k->n[1] != 0)
        return SHAPE_FAIL("Q has %lld heads, not a multiple of K/V's %lld heads", LL(q->n[1]),
                          LL(k->n[1]));
    if (v->n[2] != k->n[2])
        return SHAPE_FAIL("K has %lld rows (n_kv), V has %lld", LL(k->n[2]), LL(v->n[2]));
    if (o->n[2] != q->n[2])
        return SHAPE_FAIL("Q has %lld rows (n_q), O has %lld", LL(q->n[2]), LL(o->n[2]));
    if (q->n[3] < 1)
        return SHAPE_FAIL("d_k is %lld; it must be at least 1", LL(q->n[3]));
    if (k->n[3] != q->n[3])
        return SHAPE_FAIL("Q has d_k %lld, K has %lld", LL(q->n[3]), LL(k->n[3]));
    if (v->n[3] < 1)
        return SHAPE_FAIL("d_v is %lld; it must be at least 1", LL(v->n[3]));
    if (o->n[3] != v->n[3])
        return SHAPE_FAIL("V has d_v %lld, O has %lld", LL(v->n[3]), LL(o->n[3]));
    if (w && (w->n[0] != q->n[0] || w->n[1] != q->n[1] || w->n[2] != q->n[2] || w->n[3] != k->n[2]))
        return SHAPE_FAIL("weights are [%lld, %lld, %lld, %lld], expected [%lld, %lld, %lld, "
                          "%lld] (batch, heads_q, n_q, n_kv)",
                          LL(w->n[0]), LL(w->n[1]), LL(w->n[2]), LL(w->n[3]), LL(q->n[0]),
                          LL(q->n[1]), LL(q->n[2]), LL(k->n[2]));
#undef SHAPE_FAIL
#undef LL
    return CLATTN_SUCCESS;
}

clattn_status clattn_check_desc(clattn_context *ctx, const clattn_attention_desc *desc)
{
    if (!desc)
        return clattn_fail(ctx, CLATTN_ERROR_INVALID_ARGUMENT, "desc is NULL");
    if (!isfinite(desc->scale))
        return clattn_fail(ctx, CLATTN_ERROR_INVALID_ARGUMENT, "scale %g is not finite",
                           (double)desc->scale);
    switch (desc->mask) {
    case CLATTN_MASK_NONE:
    case CLATTN_MASK_CAUSAL_TOP_LEFT:
    case CLATTN_MASK_CAUSAL_BOTTOM_RIGHT:
    case CLATTN_MASK_NO_SELF: break;
    default:
        return clattn_fail(ctx, CLATTN_ERROR_INVALID_ARGUMENT, "unknown mask %d", (int)desc->mask);
    }
    switch (desc->algorithm) {
    case CLATTN_ALGORITHM_AUTO:
    case CLATTN_ALGORITHM_UNFUSED:
    case CLATTN_ALGORITHM_FUSED: break;
    default:
        return clattn_fail(ctx, CLATTN_ERROR_INVALID_ARGUMENT, "unknown algorithm %d",
                           (int)desc->algorithm);
    }
    return CLATTN_SUCCESS;
}

bool clattn_views_overlap(const clattn_view *a, const clattn_view *b)
{
    if (a->count == 0 || b->count == 0)
        return false;
    if (a->host && b->host) {
        const float *a0 = (const float *)a->host + a->offset,
                    *b0 = (const float *)b->host + b->offset;
        return a0 < b0 + b->span && b0 < a0 + a->span;
    }
    return a->buffer && a->buffer == b->buffer && a->offset < b->offset + b->span &&
           b->offset < a->offset + a->span;
}
