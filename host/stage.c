/* Buffers, staging of host views through device buffers, and read-back (blocking and
 * not) with the strided scatter into the caller's view. */
#include "internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

clattn_status clattn_create_buffer(clattn_context *ctx, cl_mem_flags flags, int64_t bytes_wanted,
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

clattn_status clattn_workspace(clattn_context *ctx, int64_t a, int64_t b, int64_t c, int64_t d,
                               clattn_view *ws)
{
    *ws = clattn_view_packed(a, b, c, d);
    return clattn_create_buffer(ctx, CL_MEM_READ_WRITE, ws->count * 4, NULL, &ws->buffer);
}

clattn_status clattn_workspace_nn(clattn_context *ctx, int64_t a, int64_t b, int64_t c, int64_t d,
                                  clattn_view *ws, cl_mem *own)
{
    *own = NULL;
    if (!ctx->in_order) {
        clattn_status st = clattn_workspace(ctx, a, b, c, d, ws);
        *own = ws->buffer;
        return st;
    }
    *ws = clattn_view_packed(a, b, c, d);
    const int64_t bytes = ws->count * 4 > 0 ? ws->count * 4 : 1;
    if (ctx->nn_ws_bytes < bytes) {
        /* the old buffer is freed once the kernels already enqueued on it finish */
        if (ctx->nn_ws)
            clReleaseMemObject(ctx->nn_ws);
        ctx->nn_ws = NULL;
        ctx->nn_ws_bytes = 0;
        clattn_status st = clattn_create_buffer(ctx, CL_MEM_READ_WRITE, bytes, NULL, &ctx->nn_ws);
        if (st != CLATTN_SUCCESS)
            return st;
        ctx->nn_ws_bytes = bytes;
    }
    ws->buffer = ctx->nn_ws;
    return CLATTN_SUCCESS;
}

/* A device copy of host view hv (inputs copied, outputs not), as view dv with
 * offset 0 over the view's span. */
/* input: copied in; written: the kernels write it (read back by clattn_unstage) */
static clattn_status stage(clattn_context *ctx, clattn_staging *sg, const clattn_view *hv,
                           bool input, bool written, clattn_view *dv)
{
    *dv = *hv;
    dv->host = NULL;
    dv->offset = 0;
    char *base = (char *)hv->host + hv->offset * hv->esize;
    const bool copy = input && hv->span > 0; /* an empty view still gets a valid cl_mem */
    cl_mem_flags flags = (copy && !written ? CL_MEM_READ_ONLY : CL_MEM_READ_WRITE) |
                         (copy ? CL_MEM_COPY_HOST_PTR : 0);
    if (sg->n == sg->cap) {
        const size_t cap = sg->cap ? 2 * sg->cap : 8;
        cl_mem *grown = realloc(sg->mem, cap * sizeof *grown);
        if (!grown)
            return clattn_fail(ctx, CLATTN_ERROR_OUT_OF_HOST_MEMORY,
                               "cannot allocate the staging list");
        sg->mem = grown;
        sg->cap = cap;
    }
    clattn_status st =
        clattn_create_buffer(ctx, flags, hv->span * hv->esize, copy ? base : NULL, &dv->buffer);
    if (st == CLATTN_SUCCESS)
        sg->mem[sg->n++] = dv->buffer;
    return st;
}

clattn_status clattn_stage_view(clattn_context *ctx, clattn_staging *sg, const clattn_view *hv,
                                bool input, clattn_view *dv)
{
    return stage(ctx, sg, hv, input, !input, dv);
}

void clattn_staging_release(clattn_staging *sg)
{
    for (size_t i = 0; i < sg->n; i++)
        clReleaseMemObject(sg->mem[i]);
    free(sg->mem);
    sg->mem = NULL;
    sg->n = sg->cap = 0;
}

/* Reads device view dv back into host view hv, writing only the view's elements. */
clattn_status clattn_unstage(clattn_context *ctx, const clattn_view *hv, const clattn_view *dv)
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

clattn_status clattn_wait(clattn_context *ctx, cl_event done)
{
    cl_int err = clWaitForEvents(1, &done);
    clReleaseEvent(done);
    return err == CL_SUCCESS ? CLATTN_SUCCESS : clattn_fail_cl(ctx, err, "clWaitForEvents");
}

clattn_status clattn_stage_problem(clattn_context *ctx, clattn_staging *sg,
                                   const clattn_problem *host, clattn_problem *dev)
{
    *dev = *host;
    clattn_status st = clattn_stage_view(ctx, sg, &host->q, true, &dev->q);
    /* K and V: read, and written by an append (then read back) */
    if (st == CLATTN_SUCCESS)
        st = stage(ctx, sg, &host->k, true, host->has_append, &dev->k);
    if (st == CLATTN_SUCCESS)
        st = stage(ctx, sg, &host->v, true, host->has_append, &dev->v);
    if (st == CLATTN_SUCCESS && host->has_append)
        st = clattn_stage_view(ctx, sg, &host->k_new, true, &dev->k_new);
    if (st == CLATTN_SUCCESS && host->has_append)
        st = clattn_stage_view(ctx, sg, &host->v_new, true, &dev->v_new);
    if (st == CLATTN_SUCCESS && host->has_k_scale)
        st = clattn_stage_view(ctx, sg, &host->k_scale, true, &dev->k_scale);
    if (st == CLATTN_SUCCESS && host->has_v_scale)
        st = clattn_stage_view(ctx, sg, &host->v_scale, true, &dev->v_scale);
    if (st == CLATTN_SUCCESS)
        st = clattn_stage_view(ctx, sg, &host->o, false, &dev->o);
    if (st == CLATTN_SUCCESS && host->has_w)
        st = clattn_stage_view(ctx, sg, &host->w, false, &dev->w);
    if (st == CLATTN_SUCCESS && host->has_mask)
        st = clattn_stage_view(ctx, sg, &host->mask, true, &dev->mask);
    if (st == CLATTN_SUCCESS && host->has_lse)
        st = clattn_stage_view(ctx, sg, &host->lse, false, &dev->lse);
    if (st == CLATTN_SUCCESS && host->has_ksum)
        st = clattn_stage_view(ctx, sg, &host->ksum, false, &dev->ksum);
    if (st == CLATTN_SUCCESS && host->has_mlog)
        st = clattn_stage_view(ctx, sg, &host->mlog, false, &dev->mlog);
    return st;
}

clattn_status clattn_unstage_problem(clattn_context *ctx, const clattn_problem *host,
                                     const clattn_problem *dev)
{
    clattn_status st = clattn_unstage(ctx, &host->o, &dev->o);
    if (host->has_append) { /* the cache's new rows: K and V back (a pool as a plain view) */
        const clattn_view hk = clattn_view_pool(&host->k), hv = clattn_view_pool(&host->v);
        if (st == CLATTN_SUCCESS)
            st = clattn_unstage(ctx, &hk, &dev->k);
        if (st == CLATTN_SUCCESS)
            st = clattn_unstage(ctx, &hv, &dev->v);
    }
    if (st == CLATTN_SUCCESS && host->has_w)
        st = clattn_unstage(ctx, &host->w, &dev->w);
    if (st == CLATTN_SUCCESS && host->has_lse)
        st = clattn_unstage(ctx, &host->lse, &dev->lse);
    if (st == CLATTN_SUCCESS && host->has_ksum)
        st = clattn_unstage(ctx, &host->ksum, &dev->ksum);
    if (st == CLATTN_SUCCESS && host->has_mlog)
        st = clattn_unstage(ctx, &host->mlog, &dev->mlog);
    return st;
}

clattn_status clattn_readback_start(clattn_context *ctx, const clattn_view *hv,
                                    const clattn_view *dv, cl_event after, clattn_readback *rb,
                                    cl_event *read)
{
    rb->host = *hv;
    rb->tmp = NULL;
    *read = NULL;
    if (hv->count == 0)
        return CLATTN_SUCCESS;
    char *base = (char *)hv->host + hv->offset * hv->esize;
    const bool dense = hv->span == hv->count;
    rb->tmp = dense ? base : malloc((size_t)(hv->span * hv->esize));
    if (!rb->tmp)
        return clattn_fail(ctx, CLATTN_ERROR_OUT_OF_HOST_MEMORY,
                           "cannot allocate %lld bytes to read back an output",
                           (long long)(hv->span * hv->esize));
    cl_int err =
        clEnqueueReadBuffer(ctx->queue, dv->buffer, CL_FALSE, 0, (size_t)(hv->span * hv->esize),
                            rb->tmp, after ? 1 : 0, after ? &after : NULL, read);
    if (err != CL_SUCCESS) {
        *read = NULL;
        return clattn_fail_cl(ctx, err, "clEnqueueReadBuffer");
    }
    return CLATTN_SUCCESS;
}

void clattn_readback_finish(clattn_readback *rb, bool scatter)
{
    const clattn_view *hv = &rb->host;
    char *base = rb->tmp ? (char *)hv->host + hv->offset * hv->esize : NULL;
    if (rb->tmp && rb->tmp != base) {
        if (scatter)
            clattn_view_scatter(hv, rb->tmp);
        free(rb->tmp);
    }
    rb->tmp = NULL;
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
