/* Shape, stride, size and overflow checks shared by every entry point. Nothing here
 * touches the device except CL_MEM_SIZE queries. */
#include "internal.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

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
    if (clattn_dtype_size(t->dtype) == 0)
        return clattn_fail(ctx, CLATTN_ERROR_INVALID_ARGUMENT, "%s has unknown dtype %d", name,
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
    v.dtype = t->dtype;
    v.esize = (int64_t)clattn_dtype_size(t->dtype);
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
    if (!add_ok(v.offset, v.span, &end) || !clattn_mul_ok(end, v.esize, &bytes) ||
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
        if (err == CL_INVALID_MEM_OBJECT)
            return clattn_fail(ctx, CLATTN_ERROR_INVALID_ARGUMENT,
                               "%s: buffer is not a valid cl_mem (clGetMemObjectInfo: %s)", name,
                               clattn_cl_error_name(err));
        if (err != CL_SUCCESS) { /* out of resources / host memory: the runtime's status */
            char what[96];
            snprintf(what, sizeof what, "clGetMemObjectInfo(%s, CL_MEM_SIZE)", name);
            return clattn_fail_cl(ctx, err, what);
        }
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
                                            const clattn_view *o, const clattn_view *w,
                                            bool w_head_mean)
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
    const int64_t w_heads = w_head_mean ? 1 : q->n[1];
    if (w && (w->n[0] != q->n[0] || w->n[1] != w_heads || w->n[2] != q->n[2] || w->n[3] != k->n[2]))
        return SHAPE_FAIL("weights are [%lld, %lld, %lld, %lld], expected [%lld, %lld, %lld, "
                          "%lld] (batch, %s, n_q, n_kv)",
                          LL(w->n[0]), LL(w->n[1]), LL(w->n[2]), LL(w->n[3]), LL(q->n[0]),
                          LL(w_heads), LL(q->n[2]), LL(k->n[2]),
                          w_head_mean ? "1 (weights_head_mean)" : "heads_q");
    clattn_status st = clattn_view_check_dtype(ctx, "Q", q, CLATTN_DT_FLOATS);
    if (st == CLATTN_SUCCESS)
        st = clattn_view_check_dtype(ctx, "K", k, CLATTN_DT_FLOATS);
    if (st == CLATTN_SUCCESS)
        st = clattn_view_check_dtype(ctx, "V", v, CLATTN_DT_FLOATS);
    if (st == CLATTN_SUCCESS)
        st = clattn_view_check_dtype(ctx, "O", o, CLATTN_DT_FLOATS);
    if (st == CLATTN_SUCCESS && w)
        st = clattn_view_check_dtype(ctx, "weights", w, CLATTN_DT_F32);
    if (st != CLATTN_SUCCESS)
        return st;
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
    if (desc->masked_rows != CLATTN_MASKED_ROWS_ZERO && desc->masked_rows != CLATTN_MASKED_ROWS_NAN)
        return clattn_fail(ctx, CLATTN_ERROR_INVALID_ARGUMENT,
                           "unknown masked_rows %d (CLATTN_MASKED_ROWS_ZERO or _NAN)",
                           desc->masked_rows);
    if (!(desc->softcap == 0.0f || (isfinite(desc->softcap) && desc->softcap > 0.0f)))
        return clattn_fail(ctx, CLATTN_ERROR_INVALID_ARGUMENT,
                           "softcap %g must be 0 (off) or finite and positive",
                           (double)desc->softcap);
    const int64_t pos_max = (int64_t)1 << 53;
    if (desc->q_start <= -pos_max || desc->q_start >= pos_max || desc->kv_start <= -pos_max ||
        desc->kv_start >= pos_max)
        return clattn_fail(ctx, CLATTN_ERROR_INVALID_ARGUMENT,
                           "q_start %lld / kv_start %lld must be within ±2^53",
                           (long long)desc->q_start, (long long)desc->kv_start);
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
    /* byte extents: the views may have different element sizes */
    if (a->host && b->host) {
        const char *a0 = (const char *)a->host + a->offset * a->esize,
                   *b0 = (const char *)b->host + b->offset * b->esize;
        return a0 < b0 + b->span * b->esize && b0 < a0 + a->span * a->esize;
    }
    return a->buffer && a->buffer == b->buffer &&
           a->offset * a->esize < (b->offset + b->span) * b->esize &&
           b->offset * b->esize < (a->offset + a->span) * a->esize;
}

clattn_status clattn_view_check_dtype(clattn_context *ctx, const char *name, const clattn_view *v,
                                      unsigned allowed)
{
    static const char *const names[4] = {"float32", "float16", "bfloat16", "bool"};
    if (allowed & (1u << v->dtype))
        return CLATTN_SUCCESS;
    char list[64] = "";
    for (int i = 0; i < 4; i++)
        if (allowed & (1u << i)) {
            strcat(list, list[0] ? ", " : "");
            strcat(list, names[i]);
        }
    return clattn_fail(ctx, CLATTN_ERROR_INVALID_ARGUMENT, "%s has dtype %s; it must be %s", name,
                       names[v->dtype], list);
}

clattn_status clattn_check_extras(clattn_context *ctx, const clattn_attention_desc *desc,
                                  const clattn_view *q, const clattn_view *k,
                                  clattn_storage storage, clattn_extras *out)
{
#define LL(x) ((long long)(x))
    memset(out, 0, sizeof *out);
    const int64_t batch = q->n[0], h_q = q->n[1], n_q = q->n[2], n_kv = k->n[2];
    clattn_status st;
    if (desc->kv_lens)
        for (int64_t b = 0; b < batch; b++)
            if (desc->kv_lens[b] < 0 || desc->kv_lens[b] > n_kv)
                return clattn_fail(ctx, CLATTN_ERROR_INVALID_SHAPE,
                                   "kv_lens[%lld] is %d; it must be within 0..n_kv (%lld)", LL(b),
                                   (int)desc->kv_lens[b], LL(n_kv));
    if (desc->q_lens)
        for (int64_t b = 0; b < batch; b++)
            if (desc->q_lens[b] < 0 || desc->q_lens[b] > n_q)
                return clattn_fail(ctx, CLATTN_ERROR_INVALID_SHAPE,
                                   "q_lens[%lld] is %d; it must be within 0..n_q (%lld)", LL(b),
                                   (int)desc->q_lens[b], LL(n_q));
    if (desc->alibi_slopes)
        for (int64_t h = 0; h < h_q; h++)
            if (!isfinite(desc->alibi_slopes[h]))
                return clattn_fail(ctx, CLATTN_ERROR_INVALID_ARGUMENT,
                                   "alibi_slopes[%lld] is %g; slopes must be finite", LL(h),
                                   (double)desc->alibi_slopes[h]);
    if (desc->mask_tensor) {
        out->has_mask = true;
        st = clattn_view_make(ctx, "mask_tensor", desc->mask_tensor, storage, false, &out->mask);
        if (st == CLATTN_SUCCESS)
            st = clattn_view_check_dtype(ctx, "mask_tensor", &out->mask, CLATTN_DT_MASK);
        if (st != CLATTN_SUCCESS)
            return st;
        const clattn_view *m = &out->mask;
        if ((m->n[0] != 1 && m->n[0] != batch) || (m->n[1] != 1 && m->n[1] != h_q) ||
            m->n[2] != n_q || m->n[3] != n_kv)
            return clattn_fail(ctx, CLATTN_ERROR_INVALID_SHAPE,
                               "mask_tensor is [%lld, %lld, %lld, %lld], expected [%lld or 1, "
                               "%lld or 1, %lld, %lld] (batch, heads_q, n_q, n_kv)",
                               LL(m->n[0]), LL(m->n[1]), LL(m->n[2]), LL(m->n[3]), LL(batch),
                               LL(h_q), LL(n_q), LL(n_kv));
        /* broadcast: a dimension of 1 is read with stride 0 */
        for (int i = 0; i < 2; i++)
            if (m->n[i] == 1)
                out->mask.s[i] = 0;
    }
    if (desc->lse) {
        out->has_lse = true;
        st = clattn_view_make(ctx, "lse", desc->lse, storage, true, &out->lse);
        if (st == CLATTN_SUCCESS)
            st = clattn_view_check_dtype(ctx, "lse", &out->lse, CLATTN_DT_F32);
        if (st != CLATTN_SUCCESS)
            return st;
        const clattn_view *l = &out->lse;
        if (l->n[0] != batch || l->n[1] != h_q || l->n[2] != n_q || l->n[3] != 1)
            return clattn_fail(ctx, CLATTN_ERROR_INVALID_SHAPE,
                               "lse is [%lld, %lld, %lld, %lld], expected [%lld, %lld, %lld, 1] "
                               "(batch, heads_q, n_q, 1)",
                               LL(l->n[0]), LL(l->n[1]), LL(l->n[2]), LL(l->n[3]), LL(batch),
                               LL(h_q), LL(n_q));
    }
#undef LL
    return CLATTN_SUCCESS;
}

void clattn_view_scatter(const clattn_view *hv, const char *from)
{
    char *base = (char *)hv->host + hv->offset * hv->esize;
    for (int64_t b = 0; b < hv->n[0]; b++)
        for (int64_t h = 0; h < hv->n[1]; h++)
            for (int64_t s = 0; s < hv->n[2]; s++)
                for (int64_t d = 0; d < hv->n[3]; d++) {
                    const int64_t at = b * hv->s[0] + h * hv->s[1] + s * hv->s[2] + d * hv->s[3];
                    memcpy(base + at * hv->esize, from + at * hv->esize, (size_t)hv->esize);
                }
}
