/* A public tensor as a checked view: shape, strides, offset, overflow, storage kind,
 * the size of a cl_mem; overlap tests; slices and packed workspace views. Nothing here
 * touches the device except CL_MEM_SIZE queries. */
#include "internal.h"

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
    if (t->broadcast & ~0xfu)
        return clattn_fail(ctx, CLATTN_ERROR_INVALID_ARGUMENT,
                           "%s has broadcast bits 0x%x outside CLATTN_BROADCAST(0..3)", name,
                           (unsigned)t->broadcast);
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
    memset(&v, 0, sizeof v); /* (a plain view: not paged) */
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
        if (t->strides[i] != 0 || t->broadcast != 0) /* all zeros alone means packed */
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

    /* a stride of 0 on a dimension of extent > 1 reads one slice again and again: only
     * on request (t->broadcast), never silently ("all zeros" alone means packed) */
    for (int i = 0; i < 4 && !packed && !is_output && v.count > 0; i++)
        if (v.n[i] > 1 && v.s[i] == 0 && !(t->broadcast & CLATTN_BROADCAST(i)))
            return clattn_fail(ctx, CLATTN_ERROR_INVALID_LAYOUT,
                               "%s has stride 0 on its %s dimension of size %lld; to read one "
                               "slice for every index there, set CLATTN_BROADCAST(%d) in its "
                               "broadcast field",
                               name, dim_names[i], (long long)v.n[i], i);
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

    *out = v;
    return CLATTN_SUCCESS;
}

/* One clGetMemObjectInfo query of a view's cl_mem: an invalid cl_mem is the caller's
 * argument (INVALID_ARGUMENT), any other failure the runtime's status. */
static clattn_status mem_query(clattn_context *ctx, const char *name, cl_mem m, cl_mem_info param,
                               const char *param_name, size_t size, void *out)
{
    const cl_int err = clGetMemObjectInfo(m, param, size, out, NULL);
    if (err == CL_SUCCESS)
        return CLATTN_SUCCESS;
    if (err == CL_INVALID_MEM_OBJECT)
        return clattn_fail(ctx, CLATTN_ERROR_INVALID_ARGUMENT,
                           "%s: buffer is not a valid cl_mem (clGetMemObjectInfo: %s)", name,
                           clattn_cl_error_name(err));
    char what[96]; /* out of resources / host memory: the runtime's status */
    snprintf(what, sizeof what, "clGetMemObjectInfo(%s, %s)", name, param_name);
    return clattn_fail_cl(ctx, err, what);
}

clattn_status clattn_view_check_buffer(clattn_context *ctx, const char *name, const clattn_view *v)
{
    if (!v->buffer || v->count == 0)
        return CLATTN_SUCCESS;
    const int64_t bytes = (v->offset + v->span) * v->esize; /* checked by clattn_view_make */
    size_t size = 0;
    clattn_status st =
        mem_query(ctx, name, v->buffer, CL_MEM_SIZE, "CL_MEM_SIZE", sizeof size, &size);
    if (st != CLATTN_SUCCESS)
        return st;
    cl_context owner = NULL; /* a cl_mem of another cl_context cannot be used on this queue */
    if (ctx && (st = mem_query(ctx, name, v->buffer, CL_MEM_CONTEXT, "CL_MEM_CONTEXT", sizeof owner,
                               &owner)) != CLATTN_SUCCESS)
        return st;
    if (ctx && owner != ctx->context)
        return clattn_fail(ctx, CLATTN_ERROR_INVALID_ARGUMENT,
                           "%s: the cl_mem belongs to another cl_context than the clattn "
                           "context's (clattn_context_get_cl)",
                           name);
    if ((uint64_t)size < (uint64_t)bytes)
        return clattn_fail(ctx, CLATTN_ERROR_BUFFER_TOO_SMALL,
                           "%s: the view needs %lld bytes of its cl_mem, which has %zu", name,
                           (long long)bytes, size);
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

bool clattn_views_same(const clattn_view *a, const clattn_view *b)
{
    return a->host == b->host && a->buffer == b->buffer && a->offset == b->offset &&
           a->dtype == b->dtype && !memcmp(a->s, b->s, sizeof a->s);
}

clattn_view clattn_view_packed(int64_t a, int64_t b, int64_t c, int64_t d)
{
    clattn_view v;
    memset(&v, 0, sizeof v);
    v.n[0] = a;
    v.n[1] = b;
    v.n[2] = c;
    v.n[3] = d;
    v.s[3] = 1;
    v.s[2] = d;
    v.s[1] = c * d;
    v.s[0] = b * c * d;
    v.count = v.span = a * b * c * d;
    v.dtype = CLATTN_FLOAT32;
    v.esize = 4;
    return v;
}

clattn_view clattn_view_slice(const clattn_view *v, int dim, int64_t start, int64_t len)
{
    clattn_view r = *v;
    r.offset += start * v->s[dim];
    r.n[dim] = len;
    r.count = r.n[0] * r.n[1] * r.n[2] * r.n[3];
    r.span = 0;
    if (r.count > 0) {
        r.span = 1;
        for (int i = 0; i < 4; i++)
            r.span += (r.n[i] - 1) * r.s[i];
    }
    return r;
}

clattn_status clattn_view_check_dtype(clattn_context *ctx, const char *name, const clattn_view *v,
                                      unsigned allowed)
{
    static const char *const names[8] = {"float32", "float16", "bfloat16",    "bool",
                                         "float64", "int8",    "float8_e4m3", "int32"};
    if (allowed & (1u << v->dtype))
        return CLATTN_SUCCESS;
    char list[96] = "";
    for (int i = 0; i < 8; i++)
        if (allowed & (1u << i)) {
            strcat(list, list[0] ? ", " : "");
            strcat(list, names[i]);
        }
    return clattn_fail(ctx, CLATTN_ERROR_INVALID_ARGUMENT, "%s has dtype %s; it must be %s", name,
                       names[v->dtype], list);
}

clattn_view clattn_view_pool(const clattn_view *v)
{
    clattn_view p = *v;
    if (!v->paged)
        return p;
    p.paged = false;
    p.page_table = NULL;
    p.page_table_buffer = NULL;
    p.n[0] = v->num_pages;
    p.n[2] = v->page_size;
    p.count = p.n[0] * p.n[1] * p.n[2] * p.n[3]; /* (validated as the pool's) */
    return p;
}
