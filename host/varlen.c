/* Packed variable-length batches (desc.varlen, FlashAttention's cu_seqlens): the packed
 * call is validated once as a batch-1 call, then each non-empty sequence runs as its own
 * attention on slices of the packed views (blocking, enqueued and chained to one event,
 * planned, or on the reference). */
#include "internal.h"

#include <stdlib.h>
#include <string.h>

/* What a varlen call does not take (before the other checks, so that their messages
 * do not send the caller to lengths varlen refuses). */
static clattn_status not_combined(clattn_context *ctx, const clattn_attention_desc *d)
{
    const char *no = d->kv_lens || d->kv_lens_buffer ? "kv_lens"
                     : d->q_lens || d->q_lens_buffer ? "q_lens"
                     : d->mask_tensor                ? "a mask tensor"
                     : d->weights                    ? "weights"
                     : d->paged                      ? "paged K/V"
                     : d->k_new || d->rotary         ? "k_new, v_new, rotary"
                     : d->dropout_p != 0.0f          ? "dropout (its generator counts rows "
                                                       "and keys per call)"
                                                     : NULL;
    if (no)
        return clattn_fail(ctx, CLATTN_ERROR_UNSUPPORTED,
                           "varlen: not combined with %s (the offsets give each sequence's "
                           "lengths; each sequence is its own call)",
                           no);
    return CLATTN_SUCCESS;
}

/* The offsets against the packed problem. */
static clattn_status check_varlen(clattn_context *ctx, const clattn_attention_desc *d,
                                  const clattn_problem *pr)
{
    const clattn_varlen *vl = d->varlen;
    if (!vl->cu_seqlens_q || !vl->cu_seqlens_k)
        return clattn_fail(ctx, CLATTN_ERROR_INVALID_ARGUMENT,
                           "varlen: cu_seqlens_q and cu_seqlens_k must both be set");
    if (vl->batch < 0)
        return clattn_fail(ctx, CLATTN_ERROR_INVALID_SHAPE, "varlen: batch is %lld (>= 0)",
                           (long long)vl->batch);
    if (pr->q.n[0] != 1)
        return clattn_fail(ctx, CLATTN_ERROR_INVALID_SHAPE,
                           "varlen: Q, K, V and O have a batch dimension of 1 (the sequences "
                           "are packed along seq); Q has %lld",
                           (long long)pr->q.n[0]);
    const int32_t *cus[2] = {vl->cu_seqlens_q, vl->cu_seqlens_k};
    const int64_t totals[2] = {pr->q.n[2], pr->k.n[2]};
    static const char *const names[2] = {"cu_seqlens_q", "cu_seqlens_k"};
    for (int t = 0; t < 2; t++) {
        const int32_t *cu = cus[t];
        if (cu[0] < 0)
            return clattn_fail(ctx, CLATTN_ERROR_INVALID_SHAPE, "varlen: %s[0] is %d (>= 0)",
                               names[t], (int)cu[0]);
        for (int64_t b = 0; b < vl->batch; b++)
            if (cu[b + 1] < cu[b])
                return clattn_fail(ctx, CLATTN_ERROR_INVALID_SHAPE,
                                   "varlen: %s is not non-decreasing: [%lld] = %d, [%lld] = %d",
                                   names[t], (long long)b, (int)cu[b], (long long)b + 1,
                                   (int)cu[b + 1]);
        if (cu[vl->batch] > totals[t])
            return clattn_fail(ctx, CLATTN_ERROR_INVALID_SHAPE,
                               "varlen: %s[%lld] is %d, past the %lld rows of %s", names[t],
                               (long long)vl->batch, (int)cu[vl->batch], (long long)totals[t],
                               t ? "K and V" : "Q and O");
    }
    return CLATTN_SUCCESS;
}

/* Rows [start, start + len) of a tensor's seq dimension (strides made explicit). */
static clattn_tensor slice_seq(const clattn_tensor *t, int64_t start, int64_t len)
{
    clattn_tensor s = *t;
    if (!t->strides[0] && !t->strides[1] && !t->strides[2] && !t->strides[3] && !t->broadcast) {
        s.strides[3] = 1;
        s.strides[2] = t->shape[3];
        s.strides[1] = t->shape[2] * t->shape[3];
        s.strides[0] = t->shape[1] * s.strides[1];
    }
    s.offset += start * s.strides[2];
    s.shape[2] = len;
    return s;
}

clattn_status clattn_varlen_run(clattn_context *ctx, clattn_varlen_mode mode,
                                const clattn_attention_desc *desc, const clattn_tensor *q,
                                const clattn_tensor *k, const clattn_tensor *v,
                                const clattn_tensor *o, cl_uint n_wait, const cl_event *wait,
                                cl_event *done, clattn_plan *plan)
{
    const clattn_storage storage = mode == CLATTN_VARLEN_ENQUEUE ? CLATTN_STORAGE_BUFFER
                                   : mode == CLATTN_VARLEN_PLAN  ? CLATTN_STORAGE_ANY
                                                                 : CLATTN_STORAGE_HOST;
    clattn_problem pr;
    clattn_status st = not_combined(ctx, desc); /* first: what varlen does not take */
    if (st == CLATTN_SUCCESS)
        st = clattn_resolve_attention(ctx, desc, q, k, v, o, storage, &pr);
    if (st == CLATTN_SUCCESS)
        st = check_varlen(ctx, desc, &pr);
    if (st == CLATTN_SUCCESS && mode == CLATTN_VARLEN_ENQUEUE)
        st = clattn_check_wait_list(ctx, n_wait, wait);
    if (st != CLATTN_SUCCESS)
        return st;
    const clattn_varlen *vl = desc->varlen;
    const int32_t *cq = vl->cu_seqlens_q, *ck = vl->cu_seqlens_k;
    clattn_attention_desc d = *desc;
    d.varlen = NULL;
    clattn_tensor lse;
    if (mode == CLATTN_VARLEN_PLAN) { /* the longest query sequence's plan */
        int64_t at = 0, longest = -1;
        for (int64_t b = 0; b < vl->batch; b++)
            if (cq[b + 1] - cq[b] > longest)
                longest = cq[b + 1] - cq[b], at = b;
        const int64_t q0 = vl->batch ? cq[at] : 0, k0 = vl->batch ? ck[at] : 0;
        const int64_t nq = vl->batch ? cq[at + 1] - q0 : 0, nk = vl->batch ? ck[at + 1] - k0 : 0;
        const clattn_tensor qs = slice_seq(q, q0, nq), ks = slice_seq(k, k0, nk),
                            vs = slice_seq(v, k0, nk), os = slice_seq(o, q0, nq);
        if (desc->lse) {
            lse = slice_seq(desc->lse, q0, nq);
            d.lse = &lse;
        }
        return clattn_attention_plan(ctx, &d, &qs, &ks, &vs, &os, plan);
    }
    /* enqueued: plan every sequence first (builds the programs, and fails before anything
     * is enqueued), then enqueue them, each after `wait`, and join them in `done` */
    cl_event *ev = NULL;
    if (mode == CLATTN_VARLEN_ENQUEUE && vl->batch > 0) {
        ev = calloc((size_t)vl->batch, sizeof *ev);
        if (!ev)
            return clattn_fail(ctx, CLATTN_ERROR_OUT_OF_HOST_MEMORY, "varlen: %lld events",
                               (long long)vl->batch);
    }
    cl_uint n_ev = 0;
    for (int pass = mode == CLATTN_VARLEN_ENQUEUE ? 0 : 1; pass < 2 && st == CLATTN_SUCCESS; pass++)
        for (int64_t b = 0; b < vl->batch && st == CLATTN_SUCCESS; b++) {
            const int64_t q0 = cq[b], nq = cq[b + 1] - cq[b], k0 = ck[b], nk = ck[b + 1] - ck[b];
            if (nq == 0)
                continue; /* no row to write */
            const clattn_tensor qs = slice_seq(q, q0, nq), ks = slice_seq(k, k0, nk),
                                vs = slice_seq(v, k0, nk), os = slice_seq(o, q0, nq);
            if (desc->lse) {
                lse = slice_seq(desc->lse, q0, nq);
                d.lse = &lse;
            }
            clattn_plan unused;
            if (pass == 0)
                st = clattn_attention_plan(ctx, &d, &qs, &ks, &vs, &os, &unused);
            else if (mode == CLATTN_VARLEN_ENQUEUE)
                st = clattn_attention_enqueue(ctx, &d, &qs, &ks, &vs, &os, n_wait, wait,
                                              &ev[n_ev++]);
            else if (mode == CLATTN_VARLEN_BLOCKING)
                st = clattn_attention(ctx, &d, &qs, &ks, &vs, &os);
            else
                st = clattn_reference_attention(&d, &qs, &ks, &vs, &os);
        }
    if (st == CLATTN_SUCCESS && mode == CLATTN_VARLEN_ENQUEUE && (done || n_ev)) {
        /* one event for the caller, after every sequence (or after `wait`: nothing ran) */
        const cl_int err =
            n_ev ? clEnqueueMarkerWithWaitList(ctx->queue, n_ev, ev, done)
                 : clEnqueueMarkerWithWaitList(ctx->queue, n_wait, n_wait ? wait : NULL, done);
        if (err != CL_SUCCESS)
            st = clattn_fail_cl(ctx, err, "clEnqueueMarkerWithWaitList(varlen)");
    }
    for (cl_uint i = 0; i < n_ev; i++)
        if (ev[i])
            clReleaseEvent(ev[i]);
    free(ev);
    return st;
}
