/* The backward pass's public calls (clattn_backward.h): validate → plan → stage → launch
 * → unstage, as attention.c does for the forward call. The kernels are bwd_*.cl. */
#include "internal.h"

#include <string.h>

/* Validation of a backward call: the forward problem (the desc with the caller's LSE as
 * its LSE and no weights; O and the LSE in their forward roles), dO shaped as O, then the
 * gradients. fwd must outlive `out` (out->desc points at it). */
static clattn_status resolve_backward(clattn_context *ctx, const clattn_attention_desc *desc,
                                      const clattn_tensor *q, const clattn_tensor *k,
                                      const clattn_tensor *v, const clattn_tensor *o,
                                      const clattn_tensor *lse, const clattn_tensor *d_o,
                                      const clattn_tensor *dq, const clattn_tensor *dk,
                                      const clattn_tensor *dv, clattn_storage storage,
                                      clattn_attention_desc *fwd, clattn_problem *out,
                                      clattn_view *d_o_view, clattn_view g[4])
{
    if (!ctx)
        return clattn_fail(NULL, CLATTN_ERROR_INVALID_ARGUMENT, "ctx is NULL");
    if (!desc)
        return clattn_fail(ctx, CLATTN_ERROR_INVALID_ARGUMENT, "desc is NULL");
    if (!lse)
        return clattn_fail(ctx, CLATTN_ERROR_INVALID_ARGUMENT,
                           "lse is NULL: the backward pass needs the forward call's LSE");
    clattn_status st0 = clattn_check_backward_desc(ctx, desc);
    if (st0 != CLATTN_SUCCESS)
        return st0;
    *fwd = *desc;
    fwd->weights = NULL;
    fwd->weights_head_mean = 0;
    fwd->lse = lse;
    clattn_status st = clattn_resolve_attention(ctx, fwd, q, k, v, o, storage, out);
    if (st == CLATTN_SUCCESS)
        st = clattn_view_make(ctx, "dO", d_o, storage, false, d_o_view);
    if (st == CLATTN_SUCCESS)
        st = clattn_view_check_dtype(ctx, "dO", d_o_view, CLATTN_DT_FLOATS);
    for (int d = 0; st == CLATTN_SUCCESS && d < 4; d++)
        if (d_o_view->n[d] != out->o.n[d])
            st = clattn_fail(ctx, CLATTN_ERROR_INVALID_SHAPE,
                             "dO has extent %lld in dimension %d; O has %lld",
                             (long long)d_o_view->n[d], d, (long long)out->o.n[d]);
    if (st == CLATTN_SUCCESS && storage == CLATTN_STORAGE_BUFFER)
        st = clattn_view_check_buffer(ctx, "dO", d_o_view);
    const clattn_tensor *const t[4] = {dq, dk, dv, desc->d_sinks};
    if (st == CLATTN_SUCCESS)
        st = clattn_resolve_gradients(ctx, out, d_o_view, t, storage, g);
    return st;
}

clattn_status clattn_attention_backward_enqueue(clattn_context *ctx,
                                                const clattn_attention_desc *desc,
                                                const clattn_tensor *q, const clattn_tensor *k,
                                                const clattn_tensor *v, const clattn_tensor *o,
                                                const clattn_tensor *lse, const clattn_tensor *d_o,
                                                const clattn_tensor *dq, const clattn_tensor *dk,
                                                const clattn_tensor *dv, cl_uint n_wait,
                                                const cl_event *wait, cl_event *done)
{
    clattn_attention_desc fwd;
    clattn_problem p;
    clattn_view d_o_view, g[4];
    clattn_backward_plan plan;
    clattn_status st = resolve_backward(ctx, desc, q, k, v, o, lse, d_o, dq, dk, dv,
                                        CLATTN_STORAGE_BUFFER, &fwd, &p, &d_o_view, g);
    if (st == CLATTN_SUCCESS)
        st = clattn_check_wait_list(ctx, n_wait, wait);
    if (st == CLATTN_SUCCESS)
        st = clattn_plan_backward(ctx, &p, &d_o_view, g, &plan);
    if (st == CLATTN_SUCCESS)
        st = clattn_launch_backward(ctx, &plan, &p, &d_o_view, g, n_wait, wait, done);
    return st;
}

clattn_status clattn_attention_backward(clattn_context *ctx, const clattn_attention_desc *desc,
                                        const clattn_tensor *q, const clattn_tensor *k,
                                        const clattn_tensor *v, const clattn_tensor *o,
                                        const clattn_tensor *lse, const clattn_tensor *d_o,
                                        const clattn_tensor *dq, const clattn_tensor *dk,
                                        const clattn_tensor *dv)
{
    clattn_attention_desc fwd;
    clattn_problem host, dev;
    clattn_view d_o_host, d_o_dev, g_host[4], g_dev[4];
    clattn_backward_plan plan;
    clattn_status st = resolve_backward(ctx, desc, q, k, v, o, lse, d_o, dq, dk, dv,
                                        CLATTN_STORAGE_HOST, &fwd, &host, &d_o_host, g_host);
    if (st == CLATTN_SUCCESS)
        st = clattn_plan_backward(ctx, &host, &d_o_host, g_host, &plan);
    if (st != CLATTN_SUCCESS || (g_host[0].count == 0 && g_host[1].count == 0 &&
                                 g_host[2].count == 0 && g_host[3].count == 0))
        return st;
    clattn_staging sg = {NULL, 0, 0};
    cl_event done = NULL;
    dev = host;
    /* every operand is an input here, O and the LSE included */
    const clattn_view *in_h[5] = {&host.q, &host.k, &host.v, &host.o, &host.lse};
    clattn_view *in_d[5] = {&dev.q, &dev.k, &dev.v, &dev.o, &dev.lse};
    for (int i = 0; i < 5 && st == CLATTN_SUCCESS; i++)
        st = clattn_stage_view(ctx, &sg, in_h[i], true, in_d[i]);
    if (st == CLATTN_SUCCESS && host.has_mask)
        st = clattn_stage_view(ctx, &sg, &host.mask, true, &dev.mask);
    if (st == CLATTN_SUCCESS)
        st = clattn_stage_view(ctx, &sg, &d_o_host, true, &d_o_dev);
    g_dev[3] = g_host[3]; /* (count 0: no d_sinks) */
    for (int i = 0; i < 4 && st == CLATTN_SUCCESS; i++)
        if (i < 3 || g_host[3].count > 0)
            st = clattn_stage_view(ctx, &sg, &g_host[i], false, &g_dev[i]);
    if (st == CLATTN_SUCCESS)
        st = clattn_launch_backward(ctx, &plan, &dev, &d_o_dev, g_dev, 0, NULL, &done);
    if (st == CLATTN_SUCCESS)
        st = clattn_wait(ctx, done);
    for (int i = 0; i < 4 && st == CLATTN_SUCCESS; i++)
        if (i < 3 || g_host[3].count > 0)
            st = clattn_unstage(ctx, &g_host[i], &g_dev[i]);
    clattn_staging_release(&sg);
    return st;
}
