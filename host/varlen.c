/* Packed variable-length batches (desc.varlen, FlashAttention's cu_seqlens): the packed
 * call is validated once as a batch-1 call; the fused algorithm then runs every sequence
 * in one launch (a batch entry per sequence, rows.cl VARLEN_ROWS), with offsets on the
 * host or the device; the unfused algorithm and the reference run each non-empty sequence
 * as its own attention on slices of the packed views (blocking, enqueued and chained to
 * one event, planned). */
#include "internal.h"
#include "launch_args.h"

#include <stdlib.h>

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
                     : d->key_weight_sums            ? "key_weight_sums"
                     : d->max_logits                 ? "max_logits"
                     : d->dropout_p != 0.0f          ? "dropout"
                     : d->mods                       ? "mods (snippets)"
                                                     : NULL;
    const char *why = d->kv_lens || d->kv_lens_buffer || d->q_lens || d->q_lens_buffer
                          ? " (the offsets give each sequence's lengths)"
                      : d->dropout_p != 0.0f ? " (its generator counts rows and keys per batch "
                                               "entry of an unpacked call)"
                                             : "";
    if (no)
        return clattn_fail(ctx, CLATTN_ERROR_UNSUPPORTED, "varlen: not combined with %s%s", no,
                           why);
    return CLATTN_SUCCESS;
}

/* The longest sequence of host offsets. */
static int64_t longest(const int32_t *cu, int64_t batch)
{
    int64_t m = 0;
    for (int64_t b = 0; b < batch; b++)
        if (cu[b + 1] - cu[b] > m)
            m = cu[b + 1] - cu[b];
    return m;
}

/* A cl_mem of offsets holds batch + 1 int32. */
static clattn_status check_offsets_buffer(clattn_context *ctx, cl_mem m, int64_t batch,
                                          const char *name)
{
    size_t bytes = 0;
    const cl_int err = clGetMemObjectInfo(m, CL_MEM_SIZE, sizeof bytes, &bytes, NULL);
    if (err != CL_SUCCESS)
        return clattn_fail(ctx, CLATTN_ERROR_INVALID_ARGUMENT,
                           "varlen: %s is not a valid cl_mem (clGetMemObjectInfo: %d)", name,
                           (int)err);
    if ((uint64_t)bytes / 4 < (uint64_t)batch + 1)
        return clattn_fail(ctx, CLATTN_ERROR_BUFFER_TOO_SMALL,
                           "varlen: %s holds %zu bytes, fewer than the %lld int32 of batch + 1",
                           name, bytes, (long long)batch + 1);
    return CLATTN_SUCCESS;
}

/* The offsets against the packed problem: host offsets in full; offsets on the device
 * only where they may be (the enqueue and plan calls) and their buffers' sizes. */
static clattn_status check_varlen(clattn_context *ctx, clattn_varlen_mode mode,
                                  const clattn_attention_desc *d, const clattn_problem *pr)
{
    const clattn_varlen *vl = d->varlen;
    const bool host = vl->cu_seqlens_q && vl->cu_seqlens_k;
    const bool device = vl->cu_seqlens_q_buffer && vl->cu_seqlens_k_buffer;
    if ((vl->cu_seqlens_q || vl->cu_seqlens_k) &&
        (vl->cu_seqlens_q_buffer || vl->cu_seqlens_k_buffer))
        return clattn_fail(ctx, CLATTN_ERROR_INVALID_ARGUMENT,
                           "varlen: offsets in host arrays and in cl_mem buffers: one form for "
                           "both (cu_seqlens_q and cu_seqlens_k, or cu_seqlens_q_buffer and "
                           "cu_seqlens_k_buffer)");
    if (!host && !device)
        return clattn_fail(ctx, CLATTN_ERROR_INVALID_ARGUMENT,
                           "varlen: cu_seqlens_q and cu_seqlens_k must both be set (host "
                           "arrays, or both cu_seqlens_q_buffer and cu_seqlens_k_buffer)");
    if (vl->batch < 0)
        return clattn_fail(ctx, CLATTN_ERROR_INVALID_SHAPE, "varlen: batch is %lld (must be >= 0)",
                           (long long)vl->batch);
    if (vl->max_seqlen_q < 0 || vl->max_seqlen_k < 0)
        return clattn_fail(ctx, CLATTN_ERROR_INVALID_SHAPE,
                           "varlen: max_seqlen_q is %lld and max_seqlen_k %lld (both must be >= 0)",
                           (long long)vl->max_seqlen_q, (long long)vl->max_seqlen_k);
    if (pr->q.n[0] != 1)
        return clattn_fail(ctx, CLATTN_ERROR_INVALID_SHAPE,
                           "varlen: Q, K, V and O have a batch dimension of 1 (the sequences "
                           "are packed along seq); Q has %lld",
                           (long long)pr->q.n[0]);
    if (device) {
        if (mode == CLATTN_VARLEN_BLOCKING || mode == CLATTN_VARLEN_REFERENCE)
            return clattn_fail(ctx, CLATTN_ERROR_INVALID_ARGUMENT,
                               "varlen: offsets in cl_mem buffers are for clattn_attention_enqueue "
                               "and clattn_attention_plan (this call reads host arrays)");
        if (vl->batch > 0 && (vl->max_seqlen_q == 0 || vl->max_seqlen_k == 0))
            return clattn_fail(ctx, CLATTN_ERROR_INVALID_SHAPE,
                               "varlen: offsets on the device need max_seqlen_q and max_seqlen_k "
                               "(at least the longest sequence; 0 would cut every sequence to "
                               "nothing): %lld and %lld",
                               (long long)vl->max_seqlen_q, (long long)vl->max_seqlen_k);
        clattn_status st =
            check_offsets_buffer(ctx, vl->cu_seqlens_q_buffer, vl->batch, "cu_seqlens_q_buffer");
        if (st == CLATTN_SUCCESS)
            st = check_offsets_buffer(ctx, vl->cu_seqlens_k_buffer, vl->batch,
                                      "cu_seqlens_k_buffer");
        return st;
    }
    const int32_t *cus[2] = {vl->cu_seqlens_q, vl->cu_seqlens_k};
    const int64_t totals[2] = {pr->q.n[2], pr->k.n[2]};
    const int64_t hints[2] = {vl->max_seqlen_q, vl->max_seqlen_k};
    static const char *const names[2] = {"cu_seqlens_q", "cu_seqlens_k"};
    for (int t = 0; t < 2; t++) {
        const int32_t *cu = cus[t];
        if (cu[0] < 0)
            return clattn_fail(ctx, CLATTN_ERROR_INVALID_SHAPE,
                               "varlen: %s[0] is %d (must be >= 0)", names[t], (int)cu[0]);
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
        const int64_t most = longest(cu, vl->batch);
        if (hints[t] != 0 && hints[t] < most)
            return clattn_fail(ctx, CLATTN_ERROR_INVALID_SHAPE,
                               "varlen: max_seqlen_%s is %lld, but a sequence has %lld rows (0: "
                               "computed from the offsets)",
                               t ? "k" : "q", (long long)hints[t], (long long)most);
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

/* The views of the packed problem as a batch of sequences: batch entry b reads its rows
 * from the row offsets (rows.cl VARLEN_ROWS), so the batch stride is 0 and the seq
 * extent the longest sequence. */
static void as_batches(clattn_view *v, int64_t batch, int64_t rows)
{
    v->n[0] = batch;
    v->s[0] = 0;
    if (v->n[2] > 1 || rows == 0) /* (a per-head scale keeps its extent of 1) */
        v->n[2] = rows;
    v->count = v->n[0] * v->n[1] * v->n[2] * v->n[3];
}

/* The packed problem as the kernels see it: `batch` entries of max_q / max_k rows, the
 * four arrays of offsets_on_device (NULL while planning). */
typedef struct batches {
    int64_t batch, max_q, max_k;
    const cl_mem *bufs;
} batches;

static void problem_as_batches(clattn_problem *p, const void *arg)
{
    const batches *bt = arg;
    clattn_view *qs[3] = {&p->q, &p->o, &p->lse}, *ks[4] = {&p->k, &p->v, &p->k_scale, &p->v_scale};
    const bool has_q[3] = {true, true, p->has_lse},
               has_k[4] = {true, true, p->has_k_scale, p->has_v_scale};
    for (int i = 0; i < 3; i++)
        if (has_q[i])
            as_batches(qs[i], bt->batch, bt->max_q);
    for (int i = 0; i < 4; i++)
        if (has_k[i])
            as_batches(ks[i], bt->batch, bt->max_k);
    p->varlen = true;
    for (int i = 0; i < 4; i++)
        p->varlen_bufs[i] = bt->bufs ? bt->bufs[i] : NULL;
}

/* The four int32 [batch] arrays the kernels read (q_lens, kv_lens, q_row0, k_row0): from
 * host offsets here (Q's rows relative to cu_q[0], where the staged Q and O begin), from
 * offsets on the device by varlen.cl after `wait` (*ready: its event). */
static clattn_status offsets_on_device(clattn_context *ctx, const clattn_varlen *vl,
                                       int64_t total_q, int64_t total_k, int64_t max_q,
                                       int64_t max_k, cl_mem bufs[4], cl_uint n_wait,
                                       const cl_event *wait, cl_event *ready)
{
    const int64_t nb = vl->batch;
    clattn_status st = CLATTN_SUCCESS;
    if (vl->cu_seqlens_q) {
        int32_t *a = malloc((size_t)nb * 4 * sizeof *a);
        if (!a)
            return clattn_fail(ctx, CLATTN_ERROR_OUT_OF_HOST_MEMORY, "varlen: %lld offsets",
                               (long long)nb);
        const int32_t *cq = vl->cu_seqlens_q, *ck = vl->cu_seqlens_k;
        for (int64_t b = 0; b < nb; b++) {
            a[b] = cq[b + 1] - cq[b];
            a[nb + b] = ck[b + 1] - ck[b];
            a[2 * nb + b] = cq[b] - cq[0];
            a[3 * nb + b] = ck[b];
        }
        for (int i = 0; i < 4 && st == CLATTN_SUCCESS; i++)
            st = clattn_create_buffer(ctx, CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR, nb * 4,
                                      a + i * nb, &bufs[i]);
        free(a);
        return st;
    }
    for (int i = 0; i < 4 && st == CLATTN_SUCCESS; i++)
        st = clattn_create_buffer(ctx, CL_MEM_READ_WRITE, nb * 4, NULL, &bufs[i]);
    clattn_program_entry *e = NULL;
    if (st == CLATTN_SUCCESS)
        st = clattn_get_kernel(ctx, "varlen.cl", CLATTN_CL_STD, &e);
    if (st != CLATTN_SUCCESS)
        return st;
    arg_list a = {e->kernel, 0, CL_SUCCESS};
    arg(&a, sizeof(cl_mem), &vl->cu_seqlens_q_buffer);
    arg(&a, sizeof(cl_mem), &vl->cu_seqlens_k_buffer);
    arg_long(&a, nb);
    arg_long(&a, total_q);
    arg_long(&a, total_k);
    arg_long(&a, max_q);
    arg_long(&a, max_k);
    for (int i = 0; i < 4; i++)
        arg(&a, sizeof(cl_mem), &bufs[i]);
    const size_t global = 1; /* one work-item walks the batch (varlen.cl) */
    return launch(ctx, "varlen", &a, 1, &global, NULL, n_wait, wait, ready);
}

/* The fused algorithm over the whole packed batch in one launch (and one plan). *ran is
 * false, with nothing done, when the plan is not the fused algorithm and the offsets are
 * on the host: the caller then runs the sequences one by one. */
static clattn_status one_launch(clattn_context *ctx, clattn_varlen_mode mode,
                                const clattn_attention_desc *desc, const clattn_problem *packed,
                                const clattn_tensor *q, const clattn_tensor *k,
                                const clattn_tensor *v, const clattn_tensor *o, cl_uint n_wait,
                                const cl_event *wait, cl_event *done, clattn_plan *plan_out,
                                bool *ran)
{
    const clattn_varlen *vl = desc->varlen;
    const bool host = vl->cu_seqlens_q != NULL;
    const int64_t nb = vl->batch, total_q = packed->q.n[2], total_k = packed->k.n[2];
    int64_t max_q = host ? longest(vl->cu_seqlens_q, nb) : vl->max_seqlen_q;
    int64_t max_k = host ? longest(vl->cu_seqlens_k, nb) : vl->max_seqlen_k;
    max_q = max_q < total_q ? max_q : total_q;
    max_k = max_k < total_k ? max_k : total_k;
    /* with host offsets only the sequences' rows of Q, O and the LSE are staged */
    const int64_t q_first = host && nb ? vl->cu_seqlens_q[0] : 0;
    const int64_t q_rows = host ? (nb ? vl->cu_seqlens_q[nb] - q_first : 0) : total_q;
    clattn_attention_desc d = *desc;
    d.varlen = NULL;
    const clattn_tensor qs = slice_seq(q, q_first, q_rows), os = slice_seq(o, q_first, q_rows);
    clattn_tensor lse;
    if (desc->lse) {
        lse = slice_seq(desc->lse, q_first, q_rows);
        d.lse = &lse;
    }
    const clattn_storage storage = mode == CLATTN_VARLEN_ENQUEUE ? CLATTN_STORAGE_BUFFER
                                   : mode == CLATTN_VARLEN_PLAN  ? CLATTN_STORAGE_ANY
                                                                 : CLATTN_STORAGE_HOST;
    clattn_problem hp, pr;
    clattn_exec_plan plan;
    cl_mem bufs[4] = {NULL, NULL, NULL, NULL};
    const batches plan_shape = {nb, max_q, max_k, NULL}, run_shape = {nb, max_q, max_k, bufs};
    clattn_status st = clattn_resolve_attention(ctx, &d, &qs, k, v, &os, storage, &hp);
    pr = hp;
    problem_as_batches(&pr, &plan_shape);
    if (st == CLATTN_SUCCESS)
        st = clattn_plan_attention(ctx, &pr, &plan);
    if (st != CLATTN_SUCCESS)
        return st;
    if (plan.algorithm != CLATTN_ALGORITHM_FUSED && !plan.no_keys) {
        if (!host)
            return clattn_fail(ctx, CLATTN_ERROR_UNSUPPORTED,
                               "varlen: offsets on the device run with the fused algorithm only "
                               "(the plan chose %s)",
                               plan.kernels);
        *ran = false;
        return CLATTN_SUCCESS;
    }
    *ran = true;
    if (mode == CLATTN_VARLEN_PLAN) {
        clattn_plan_describe(&plan, plan_out);
        return CLATTN_SUCCESS;
    }
    if (pr.q.count == 0) /* no sequence has a row */
        return mode == CLATTN_VARLEN_ENQUEUE ? enqueue_marker(ctx, n_wait, wait, done)
                                             : CLATTN_SUCCESS;
    cl_event ready = NULL;
    st = offsets_on_device(ctx, vl, total_q, total_k, max_q, max_k, bufs, n_wait, wait, &ready);
    if (ready) { /* the attention after the offsets' kernel (which waited for `wait`) */
        n_wait = 1;
        wait = &ready;
    }
    if (st == CLATTN_SUCCESS && mode == CLATTN_VARLEN_ENQUEUE) {
        clattn_problem run = hp;
        problem_as_batches(&run, &run_shape);
        st = clattn_launch_attention(ctx, &plan, &run, n_wait, wait, done);
    } else if (st == CLATTN_SUCCESS) { /* blocking: the packed views staged, run, read back */
        st = clattn_run_staged(ctx, &plan, &hp, problem_as_batches, &run_shape);
    }
    if (ready)
        clReleaseEvent(ready);
    for (int i = 0; i < 4; i++) /* freed once the kernels that read them finish */
        if (bufs[i])
            clReleaseMemObject(bufs[i]);
    return st;
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
        st = check_varlen(ctx, mode, desc, &pr);
    if (st == CLATTN_SUCCESS && mode == CLATTN_VARLEN_ENQUEUE)
        st = clattn_check_wait_list(ctx, n_wait, wait);
    bool ran = false;
    if (st == CLATTN_SUCCESS && mode != CLATTN_VARLEN_REFERENCE)
        st = one_launch(ctx, mode, desc, &pr, q, k, v, o, n_wait, wait, done, plan, &ran);
    if (st != CLATTN_SUCCESS || ran)
        return st;
    /* the unfused algorithm and the reference: one call per sequence (host offsets) */
    const clattn_varlen *vl = desc->varlen;
    const int32_t *cq = vl->cu_seqlens_q, *ck = vl->cu_seqlens_k;
    clattn_attention_desc d = *desc;
    d.varlen = NULL;
    clattn_tensor lse;
    if (mode == CLATTN_VARLEN_PLAN) { /* the longest query sequence's plan */
        int64_t at = 0, most = -1;
        for (int64_t b = 0; b < vl->batch; b++)
            if (cq[b + 1] - cq[b] > most)
                most = cq[b + 1] - cq[b], at = b;
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
