/* Launches: one enqueue function per .cl file (its arguments in the order of the
 * kernel's signature), and each algorithm's event chain: the fused kernel (plus the
 * weights pass), the three unfused stages, the public stages one by one, and the merge.
 * Events chain the kernels, so an out-of-order queue is fine. */
#include "internal.h"
#include "launch_args.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------ stage dispatchers */

static clattn_status enqueue_scores(clattn_context *ctx, const clattn_blocked *bk,
                                    const clattn_view *q, const clattn_view *k,
                                    const clattn_view *s, float scale, bool sparse, bool relative,
                                    const aux_t *x, cl_uint n_wait, const cl_event *wait,
                                    cl_event *done)
{
    arg_list a = {bk->entry->kernel, 0, CL_SUCCESS};
    arg_view(&a, q);
    arg_view(&a, k);
    arg_view(&a, s);
    arg_int(&a, q->n[1]);
    arg_int(&a, clattn_group(q->n[1], k->n[1]));
    arg_long(&a, q->n[2]);
    arg_long(&a, k->n[2]);
    arg(&a, sizeof scale, &scale);
    arg_int(&a, sparse);
    arg_int(&a, relative);
    arg_rule(&a, x);
    arg_terms(&a, x);
    const size_t global[3] = {round_up(clattn_ceil_div(q->n[2], (int64_t)bk->rq), bk->wg),
                              (size_t)clattn_ceil_div(k->n[2], (int64_t)bk->tile_kv),
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
    arg(&a, sizeof(cl_mem), &aux->sinks);
    arg_dropout(&a, aux);
    arg(&a, wg * sizeof(float), NULL);
    const size_t global[3] = {wg, (size_t)x->n[2], (size_t)(x->n[0] * x->n[1])};
    const size_t local[3] = {wg, 1, 1};
    return launch(ctx, "softmax", &a, 3, global, local, n_wait, wait, done);
}

/* O = W·V; the rule only lets groups skip key tiles whose weights are all zero */
static clattn_status enqueue_wsum(clattn_context *ctx, const clattn_blocked *bk,
                                  const clattn_view *w, const clattn_view *v, const clattn_view *o,
                                  bool sparse, const aux_t *x, cl_uint n_wait, const cl_event *wait,
                                  cl_event *done)
{
    arg_list a = {bk->entry->kernel, 0, CL_SUCCESS};
    arg_view(&a, w);
    arg_view(&a, v);
    arg_view(&a, o);
    arg_int(&a, o->n[1]);
    arg_int(&a, clattn_group(o->n[1], v->n[1]));
    arg_long(&a, o->n[2]);
    arg_long(&a, v->n[2]);
    arg_int(&a, sparse);
    arg_rule(&a, x);
    const size_t global[2] = {round_up(clattn_ceil_div(o->n[2], (int64_t)bk->rq), bk->wg),
                              (size_t)(o->n[0] * o->n[1])};
    const size_t local[2] = {bk->wg, 1};
    return launch(ctx, "weighted_sum", &a, 2, global, local, n_wait, wait, done);
}

/* fused.cl, fused_gpu.cl or decode.cl; for decode.cl with SPLITS (bk->n_splits), o and lse
 * are views of the float32 partial buffers (the kernel indexes them itself) and chunk
 * number get_global_id(2) of the keys the work-item's rows see (at least bk->split_chunk
 * keys each) */
static clattn_status enqueue_fused(clattn_context *ctx, const clattn_blocked *bk,
                                   const clattn_view *q, const clattn_view *k, const clattn_view *v,
                                   const clattn_view *o, const clattn_view *lse, bool lse_relative,
                                   float scale, const aux_t *x, cl_uint n_wait,
                                   const cl_event *wait, cl_event *done)
{
    arg_list a = {bk->entry->kernel, 0, CL_SUCCESS};
    arg_view(&a, q);
    arg_view(&a, k);
    arg_view(&a, v);
    arg_view(&a, o);
    arg_opt_view(&a, lse);
    arg_int(&a, q->n[1]);
    arg_int(&a, clattn_group(q->n[1], k->n[1]));
    arg_long(&a, q->n[2]);
    arg_long(&a, k->n[2]);
    arg(&a, sizeof scale, &scale);
    arg_int(&a, x->desc->masked_rows);
    arg_int(&a, lse_relative);
    arg_rule(&a, x);
    arg_terms(&a, x);
    arg_pages(&a, x);
    arg(&a, sizeof(cl_mem), &x->sinks);
    arg_opt_view(&a, x->k_scale); /* an int8 K's and V's scales, or none */
    arg_opt_view(&a, x->v_scale);
    arg_dropout(&a, x);
    arg(&a, sizeof(cl_mem), &x->q_row0);
    arg(&a, sizeof(cl_mem), &x->k_row0);
    if (bk->n_splits) {
        arg_int(&a, (int64_t)bk->n_splits);
        arg_long(&a, bk->split_chunk);
    }
    /* fused.cl: RQ queries per work-item, a (batch entry, query head) per row of groups;
     * decode.cl: RQ rows of each of its KV heads per work-item, a (batch entry, group of
     * bk->heads KV heads) per row */
    const int64_t rows = bk->decode ? q->n[2] * clattn_group(q->n[1], k->n[1]) : q->n[2];
    /* fused_gpu.cl: a block of bk->rows query rows per work-group */
    const size_t groups = (size_t)(bk->rows ? clattn_ceil_div(rows, (int64_t)bk->rows)
                                            : clattn_ceil_div(rows, (int64_t)(bk->rq * bk->wg)));
    const size_t global[3] = {
        groups * bk->wg, (size_t)(q->n[0] * (bk->decode ? k->n[1] / (int64_t)bk->heads : q->n[1])),
        bk->n_splits ? bk->n_splits : 1};
    const size_t local[3] = {bk->wg, 1, 1};
    return launch(ctx,
                  bk->decode ? "decode"
                  : bk->rows ? "fused_gpu"
                             : "fused",
                  &a, bk->n_splits ? 3 : 2, global, local, n_wait, wait, done);
}

/* Split-KV decoding (decode_gpu.cl, or decode.cl with SPLITS, then split_merge.cl): the
 * splits' O and LSE into a float32 workspace (released once the kernels finish), merged
 * into O and the LSE. */
static clattn_status enqueue_decode_split(clattn_context *ctx, const clattn_blocked *bk,
                                          const clattn_view *q, const clattn_view *k,
                                          const clattn_view *v, const clattn_view *o,
                                          const clattn_view *lse, float scale, const aux_t *x,
                                          cl_uint n_wait, const cl_event *wait, cl_event *done)
{
    const int64_t rows = q->n[0] * q->n[1] * q->n[2], ns = (int64_t)bk->n_splits;
    cl_mem po = NULL, pl = NULL;
    clattn_status st =
        clattn_create_buffer(ctx, CL_MEM_READ_WRITE, rows * ns * o->n[3] * 4, NULL, &po);
    if (st == CLATTN_SUCCESS)
        st = clattn_create_buffer(ctx, CL_MEM_READ_WRITE, rows * ns * 4, NULL, &pl);
    cl_event ev = NULL;
    if (st == CLATTN_SUCCESS && !bk->rows) { /* decode.cl (the CPU family) */
        clattn_view part_o = *o, part_lse = *o;
        part_o.buffer = po;
        part_lse.buffer = pl;
        st =
            enqueue_fused(ctx, bk, q, k, v, &part_o, &part_lse, false, scale, x, n_wait, wait, &ev);
    } else if (st == CLATTN_SUCCESS) {
        arg_list a = {bk->entry->kernel, 0, CL_SUCCESS};
        arg_view(&a, q);
        arg_view(&a, k);
        arg_view(&a, v);
        arg(&a, sizeof(cl_mem), &po);
        arg(&a, sizeof(cl_mem), &pl);
        arg_int(&a, q->n[1]);
        arg_int(&a, clattn_group(q->n[1], k->n[1]));
        arg_long(&a, q->n[2]);
        arg_long(&a, k->n[2]);
        arg(&a, sizeof scale, &scale);
        arg_int(&a, ns);
        arg_long(&a, bk->split_chunk);
        arg_rule(&a, x);
        arg_terms(&a, x);
        arg_pages(&a, x);
        arg_opt_view(&a, x->k_scale); /* a quantized K's and V's scales, or none */
        arg_opt_view(&a, x->v_scale);
        arg(&a, sizeof(cl_mem), &x->q_row0);
        arg(&a, sizeof(cl_mem), &x->k_row0);
        const int64_t kv_rows = q->n[2] * clattn_group(q->n[1], k->n[1]);
        const size_t global[3] = {(size_t)ns * bk->wg,
                                  (size_t)clattn_ceil_div(kv_rows, (int64_t)bk->rows),
                                  (size_t)(q->n[0] * k->n[1])};
        const size_t local[3] = {bk->wg, 1, 1};
        st = launch(ctx, "decode_gpu", &a, 3, global, local, n_wait, wait, &ev);
    }
    if (st == CLATTN_SUCCESS) {
        arg_list a = {bk->merge->kernel, 0, CL_SUCCESS};
        arg(&a, sizeof(cl_mem), &po);
        arg(&a, sizeof(cl_mem), &pl);
        arg_int(&a, ns);
        arg_view(&a, o);
        arg_opt_view(&a, lse);
        arg_int(&a, q->n[1]);
        arg_long(&a, q->n[2]);
        arg_long(&a, k->n[2]);
        arg_int(&a, x->desc->masked_rows);
        arg(&a, sizeof(cl_mem), &x->alibi);
        arg_rule(&a, x);
        arg(&a, sizeof(cl_mem), &x->sinks);
        arg(&a, sizeof(cl_mem), &x->q_row0);
        arg(&a, sizeof(cl_mem), &x->k_row0);
        const size_t global[3] = {(size_t)o->n[3], (size_t)q->n[2], (size_t)(q->n[0] * q->n[1])};
        st = launch(ctx, "split_merge", &a, 3, global, NULL, 1, &ev, done);
    }
    if (ev)
        clReleaseEvent(ev);
    if (po)
        clReleaseMemObject(po);
    if (pl)
        clReleaseMemObject(pl);
    return st;
}

/* key_sums.cl: each key's summed weight (ks: [b, h_q or h_kv, 1, n_kv]) from Q, K and
 * the absolute LSE the fused kernel wrote */
static clattn_status enqueue_key_sums(clattn_context *ctx, const clattn_exec_plan *p,
                                      const clattn_view *q, const clattn_view *k,
                                      const clattn_view *lse, const clattn_view *lse_out,
                                      const clattn_view *ks, float scale, const aux_t *x,
                                      cl_uint n_wait, const cl_event *wait, cl_event *done)
{
    arg_list a = {p->key_sums->kernel, 0, CL_SUCCESS};
    arg_view(&a, q);
    arg_view(&a, k);
    arg_view(&a, lse);
    arg_opt_view(&a, lse_out);
    arg_view(&a, ks);
    arg_int(&a, q->n[1]);
    arg_int(&a, clattn_group(q->n[1], k->n[1]));
    arg_int(&a, ks->n[1]);
    arg_long(&a, q->n[2]);
    arg_long(&a, k->n[2]);
    arg(&a, sizeof scale, &scale);
    arg_rule(&a, x);
    arg_terms(&a, x);
    arg_pages(&a, x);
    const size_t wg = p->key_sums_wg;
    const size_t global[2] = {(size_t)clattn_ceil_div(k->n[2], (int64_t)(16 * wg)) * wg,
                              (size_t)(q->n[0] * ks->n[1])};
    const size_t local[2] = {wg, 1};
    return launch(ctx, "key_sums", &a, 2, global, local, n_wait, wait, done);
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
    arg_dropout(&a, x);
    const size_t global[3] = {(size_t)w->n[3], (size_t)w->n[2], (size_t)(w->n[0] * w->n[1])};
    return launch(ctx, "weights_from_lse", &a, 3, global, NULL, n_wait, wait, done);
}

/* row_max.cl: each row's largest logit (mlog) from the fused kernel's relative LSE
 * columns; the caller's LSE (lse_out, may be NULL) gets the absolute one */
static clattn_status enqueue_row_max(clattn_context *ctx, clattn_program_entry *e,
                                     const clattn_view *lse, const clattn_view *lse_out,
                                     const clattn_view *mlog, int64_t n_kv, const aux_t *x,
                                     cl_uint n_wait, const cl_event *wait, cl_event *done)
{
    arg_list a = {e->kernel, 0, CL_SUCCESS};
    arg_view(&a, lse);
    arg_opt_view(&a, lse_out);
    arg_view(&a, mlog);
    arg_int(&a, mlog->n[1]);
    arg(&a, sizeof(cl_mem), &x->alibi);
    arg_long(&a, mlog->n[2]);
    arg_long(&a, n_kv);
    arg_rule(&a, x);
    const size_t global[2] = {(size_t)mlog->n[2], (size_t)(mlog->n[0] * mlog->n[1])};
    return launch(ctx, "row_max", &a, 2, global, NULL, n_wait, wait, done);
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

static void release_events(cl_event *e, int n)
{
    for (int i = 0; i < n; i++)
        if (e[i])
            clReleaseEvent(e[i]);
}

/* desc.rotary's frequencies f_p = base^(−2p/dim), rounded to float32 (the reference
 * uses the same values), in a new buffer. */
/* With the caller's host tables, only rows 0 … rows − 1 are copied: rows is the last
 * position the call rotates + 1 when the lengths are on the host (validated within
 * table_len), else table_len (device lengths: positions clamped into the table). */
static clattn_status rope_freqs(clattn_context *ctx, const clattn_rotary *r, int64_t dim,
                                int64_t rows, cl_mem *out)
{
    float f[2048];
    const int64_t half = dim / 2;
    if (r->table_buffer) { /* the caller's tables [2][table_len][dim/2]: used as they are */
        *out = r->table_buffer;
        return clRetainMemObject(*out) == CL_SUCCESS
                   ? CLATTN_SUCCESS
                   : clattn_fail(ctx, CLATTN_ERROR_OPENCL, "rotary table_buffer: not a cl_mem");
    }
    if (r->cos_table) { /* host tables: cos rows, then sin rows, in one buffer */
        const size_t bytes = (size_t)(rows * half) * 4; /* (bounded by validation) */
        clattn_status st =
            clattn_create_buffer(ctx, CL_MEM_READ_ONLY, 2 * (int64_t)bytes, NULL, out);
        cl_int err = CL_SUCCESS;
        if (st == CLATTN_SUCCESS && bytes > 0)
            err = clEnqueueWriteBuffer(ctx->queue, *out, CL_TRUE, 0, bytes, r->cos_table, 0, NULL,
                                       NULL);
        if (st == CLATTN_SUCCESS && bytes > 0 && err == CL_SUCCESS)
            err = clEnqueueWriteBuffer(ctx->queue, *out, CL_TRUE, bytes, bytes, r->sin_table, 0,
                                       NULL, NULL);
        return st != CLATTN_SUCCESS ? st
               : err != CL_SUCCESS ? clattn_fail_cl(ctx, err, "clEnqueueWriteBuffer(rotary tables)")
                                   : CLATTN_SUCCESS;
    }
    if (half > 2048)
        return clattn_fail(ctx, CLATTN_ERROR_UNSUPPORTED, "rotary dim %lld above 4096",
                           (long long)dim);
    clattn_rope_freqs(r, dim, f);
    return clattn_create_buffer(ctx, CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR, half * 4, f, out);
}

/* append.cl (k_new, v_new into K, V at the lengths; the lengths after, into *lens_new)
 * and, with rotary embeddings, rope_q.cl (Q rotated into the float32 view *q_rot) */
static clattn_status enqueue_append(clattn_context *ctx, const clattn_exec_plan *p,
                                    const clattn_problem *dv, const aux_t *x, cl_uint n_wait,
                                    const cl_event *wait, cl_mem *lens_new, cl_mem *freq,
                                    clattn_view *q_rot, cl_event ev[2])
{
    const clattn_attention_desc *d = dv->desc;
    const clattn_view *q = &dv->q, *k = &dv->k, *v = &dv->v;
    const int64_t batch = q->n[0], h_kv = k->n[1], n_new = dv->k_new.n[2];
    const int64_t d_k = k->n[3], d_v = v->n[3];
    const int64_t rot_dim = d->rotary ? (d->rotary->dim ? d->rotary->dim : d_k) : 0;
    const int interleaved = d->rotary ? d->rotary->interleaved : 0;
    const bool table = d->rotary && (d->rotary->cos_table || d->rotary->table_buffer);
    /* rows of the caller's tables on the device: host tables with host lengths only up to
     * the last position rotated */
    int64_t rope_len = table ? d->rotary->table_len : 0;
    if (table && d->rotary->cos_table && d->kv_lens)
        rope_len = clattn_rope_rows(d, batch, q->n[2], n_new);
    clattn_status st = clattn_create_buffer(ctx, CL_MEM_READ_WRITE, batch * 4, NULL, lens_new);
    if (st == CLATTN_SUCCESS && d->rotary)
        st = rope_freqs(ctx, d->rotary, rot_dim, rope_len, freq);
    if (st != CLATTN_SUCCESS)
        return st;
    arg_list a = {p->append->kernel, 0, CL_SUCCESS};
    arg_view(&a, &dv->k_new);
    arg_view(&a, &dv->v_new);
    arg_view(&a, k);
    arg_view(&a, v);
    arg(&a, sizeof(cl_mem), &x->kv_lens);
    arg(&a, sizeof(cl_mem), lens_new);
    arg_int(&a, h_kv);
    arg_long(&a, n_new);
    arg_long(&a, k->n[2]);
    arg_int(&a, d_k);
    arg_int(&a, d_v);
    arg_long(&a, d->kv_start);
    arg_int(&a, rot_dim);
    arg_int(&a, interleaved);
    arg(&a, sizeof(cl_mem), freq);
    arg_long(&a, rope_len);
    arg_pages(&a, x);
    const size_t global[3] = {(size_t)(d_k > d_v ? d_k : d_v), (size_t)(n_new > 0 ? n_new : 1),
                              (size_t)(batch * h_kv)};
    st = launch(ctx, "append", &a, 3, global, NULL, n_wait, wait, &ev[0]);
    if (st != CLATTN_SUCCESS || !d->rotary || q->count == 0)
        return st;
    *q_rot = clattn_view_packed(q->n[0], q->n[1], q->n[2], q->n[3]);
    if ((st = clattn_create_buffer(ctx, CL_MEM_READ_WRITE, q->count * 4, NULL, &q_rot->buffer)) !=
        CLATTN_SUCCESS)
        return st;
    arg_list r = {p->rope_q->kernel, 0, CL_SUCCESS};
    arg_view(&r, q);
    arg(&r, sizeof(cl_mem), &q_rot->buffer);
    arg(&r, sizeof(cl_mem), &x->kv_lens);
    arg_int(&r, q->n[1]);
    arg_long(&r, q->n[2]);
    arg_long(&r, k->n[2]);
    arg_int(&r, d_k);
    arg_long(&r, d->kv_start);
    arg_int(&r, clattn_rope_q_step(d));
    arg_int(&r, rot_dim);
    arg_int(&r, interleaved);
    arg(&r, sizeof(cl_mem), freq);
    arg_long(&r, rope_len);
    const size_t gq[3] = {(size_t)d_k, (size_t)q->n[2], (size_t)(q->n[0] * q->n[1])};
    return launch(ctx, "rope_q", &r, 3, gq, NULL, n_wait, wait, &ev[1]);
}

/* What enqueue_append made, released (the runtime frees each once the kernels that use
 * it finish): its events, the frequencies, the rotated Q, the lengths before the append
 * unless they are the caller's, and x (which holds the lengths after it). */
static void append_release(cl_event pre[2], cl_mem freq, cl_mem q_rot, cl_mem old_lens, aux_t *x)
{
    release_events(pre, 2);
    if (old_lens == x->kv_lens || old_lens == x->lens_given[1])
        old_lens = NULL; /* (x's own, or the caller's) */
    const cl_mem own[3] = {freq, q_rot, old_lens};
    for (int i = 0; i < 3; i++)
        if (own[i])
            clReleaseMemObject(own[i]);
    aux_release(x);
}

/* no query row: nothing to compute, but key weight sums of zeros to write (key_sums.cl
 * over no rows; it reads no LSE then), or this step's K/V rows to append */
clattn_launch_work clattn_launch_what(const clattn_exec_plan *p, const clattn_problem *dv)
{
    if (dv->q.count > 0 || (dv->has_append && dv->k_new.n[0] * dv->k_new.n[1] > 0))
        return CLATTN_LAUNCH_PLAN;
    return p->key_sums && dv->ksum.count > 0 ? CLATTN_LAUNCH_KEY_SUMS_ONLY : CLATTN_LAUNCH_NOTHING;
}

/* Runs a planned attention on device views. Events chain the kernels, so an
 * out-of-order queue is fine. */
clattn_status clattn_launch_attention(clattn_context *ctx, const clattn_exec_plan *p,
                                      const clattn_problem *dv, cl_uint n_wait,
                                      const cl_event *wait, cl_event *done)
{
    const clattn_attention_desc *desc = dv->desc;
    const clattn_view *q = &dv->q, *k = &dv->k, *v = &dv->v, *o = &dv->o;
    const clattn_view *w = dv->has_w ? &dv->w : NULL;
    const clattn_view *dv_lse = dv->has_lse ? &dv->lse : NULL;
    const float scale = clattn_effective_scale(desc, q->n[3]);
    const clattn_launch_work work = clattn_launch_what(p, dv);
    if (work == CLATTN_LAUNCH_NOTHING)
        return enqueue_marker(ctx, n_wait, wait, done);
    aux_t x;
    clattn_status st = aux_make(ctx, desc, q, k, dv->has_mask ? &dv->mask : NULL, &x);
    if (work == CLATTN_LAUNCH_KEY_SUMS_ONLY) {
        if (st == CLATTN_SUCCESS)
            st = enqueue_key_sums(ctx, p, q, k, &dv->ksum, NULL, &dv->ksum, scale, &x, n_wait, wait,
                                  done);
        aux_release(&x);
        return st;
    }
    if (st != CLATTN_SUCCESS) {
        aux_release(&x);
        return st;
    }
    x.k_scale = dv->has_k_scale ? &dv->k_scale : NULL;
    x.v_scale = dv->has_v_scale ? &dv->v_scale : NULL;
    if (dv->varlen) { /* a packed batch: its lengths and first rows (varlen.c's buffers) */
        x.q_lens = x.lens_given[0] = dv->varlen_bufs[0];
        x.kv_lens = x.lens_given[1] = dv->varlen_bufs[1];
        x.q_row0 = dv->varlen_bufs[2];
        x.k_row0 = dv->varlen_bufs[3];
    }
    /* the append first (and the rotated Q): the attention waits for them, reads the
     * lengths after the append and the rotated Q */
    cl_event pre[2] = {NULL, NULL};
    cl_mem old_lens = x.kv_lens, lens_new = NULL, freq = NULL;
    clattn_view q_rot = clattn_view_packed(0, 0, 0, 0);
    if (dv->has_append) {
        st = enqueue_append(ctx, p, dv, &x, n_wait, wait, &lens_new, &freq, &q_rot, pre);
        if (lens_new) /* the attention reads (and aux_release releases) the lengths after */
            x.kv_lens = lens_new;
        if (st == CLATTN_SUCCESS) {
            if (q_rot.buffer)
                q = &q_rot;
            n_wait = pre[1] ? 2 : 1;
            wait = pre;
        }
        if (st == CLATTN_SUCCESS && q->count == 0)
            st = enqueue_marker(ctx, n_wait, wait, done);
        if (st != CLATTN_SUCCESS || q->count == 0) {
            append_release(pre, freq, q_rot.buffer, old_lens, &x);
            return st;
        }
    }
    const bool head_mean = w && desc->weights_head_mean;
    clattn_view ws_w, ws_lse; /* per-head weights (for the mean), LSE for the weights pass */
    cl_mem ws_mem[3] = {NULL, NULL, NULL};
    cl_event ev[5] = {NULL, NULL, NULL, NULL, NULL};
    const clattn_view *w_heads = w; /* where the per-head weights (or scores) go */
    if (head_mean && !p->no_keys) {
        st = clattn_workspace_nn(ctx, q->n[0], q->n[1], q->n[2], k->n[2], &ws_w, &ws_mem[0]);
        w_heads = &ws_w;
    }
    if (p->no_keys && !p->row_max) {
        /* no keys: the streaming kernel writes every row (zeros or NaN, LSE −∞); weights
         * have no columns (max logits: the fused branch, to write them) */
        if (st == CLATTN_SUCCESS)
            st = enqueue_fused(ctx, &p->fused, q, k, v, o, dv_lse, false, scale, &x, n_wait, wait,
                               done);
    } else if (p->algorithm == CLATTN_ALGORITHM_FUSED) {
        /* with weights, key weight sums or max logits: the LSE of the relative scores
         * (common.cl alibi_ref) into a workspace for the second passes, one of which
         * writes the caller's LSE */
        const clattn_view *lse = dv_lse;
        const bool weights = w && !p->no_keys, other = weights || p->key_sums;
        const bool relative = other || p->row_max;
        /* the second passes' last event: done, or what the row max waits for */
        cl_event *tail = !p->row_max ? done : other ? &ev[3] : NULL;
        if (st == CLATTN_SUCCESS && relative) {
            /* the row max, log-sum and max of the scores, in the LSE's precision (rows.cl
             * STORE_LSE) */
            ws_lse = clattn_view_packed(q->n[0], q->n[1], q->n[2], 3);
            if (dv_lse && dv_lse->dtype == CLATTN_FLOAT64) {
                ws_lse.dtype = CLATTN_FLOAT64;
                ws_lse.esize = 8;
            }
            st = clattn_create_buffer(ctx, CL_MEM_READ_WRITE, ws_lse.count * ws_lse.esize, NULL,
                                      &ws_lse.buffer);
            ws_mem[1] = ws_lse.buffer;
            lse = &ws_lse;
        }
        cl_event *fused_done = relative ? &ev[0] : done;
        if (st == CLATTN_SUCCESS && p->fused.n_splits) /* (never with the second passes) */
            st = enqueue_decode_split(ctx, &p->fused, q, k, v, o, lse, scale, &x, n_wait, wait,
                                      fused_done);
        else if (st == CLATTN_SUCCESS)
            st = enqueue_fused(ctx, &p->fused, q, k, v, o, lse, relative, scale, &x, n_wait, wait,
                               fused_done);
        /* key weight sums (never with weights): they write the caller's LSE */
        if (st == CLATTN_SUCCESS && p->key_sums)
            st = enqueue_key_sums(ctx, p, q, k, lse, dv_lse, &dv->ksum, scale, &x, 1, &ev[0], tail);
        if (weights) { /* second pass: scores again, then W = exp(S − LSE) */
            if (st == CLATTN_SUCCESS)
                st = enqueue_scores(ctx, &p->scores, q, k, w_heads, scale, false, true, &x, 1,
                                    &ev[0], &ev[1]);
            if (st == CLATTN_SUCCESS)
                st = enqueue_from_lse(ctx, p->from_lse, w_heads, lse, dv_lse, q->n[2], k->n[2], &x,
                                      1, &ev[1], head_mean ? &ev[2] : tail);
            if (st == CLATTN_SUCCESS && head_mean)
                st = enqueue_head_mean(ctx, p->head_mean, w_heads, w, 1, &ev[2], tail);
        }
        /* max logits last (after the pass that writes the caller's LSE, or writing it) */
        if (st == CLATTN_SUCCESS && p->row_max)
            st = enqueue_row_max(ctx, p->row_max, lse, other ? NULL : dv_lse, &dv->mlog, k->n[2],
                                 &x, 1, other ? &ev[3] : &ev[0], done);
    } else {
        clattn_view ws;
        /* clattn's own workspace (no weights to return) with zeros for masked rows: the
         * kernels skip the masked tiles instead of writing −∞ and zeros there */
        const bool sparse = !w_heads && desc->masked_rows == CLATTN_MASKED_ROWS_ZERO;
        if (w_heads) {
            ws = *w_heads; /* scores go straight into the weights, softmax runs in place */
        } else if (st == CLATTN_SUCCESS) {
            st = clattn_workspace_nn(ctx, q->n[0], q->n[1], q->n[2], k->n[2], &ws, &ws_mem[2]);
        }
        if (st == CLATTN_SUCCESS)
            st = enqueue_scores(ctx, &p->scores, q, k, &ws, scale, sparse, true, &x, n_wait, wait,
                                &ev[0]);
        if (st == CLATTN_SUCCESS)
            st = enqueue_softmax(ctx, p->softmax, p->softmax_wg, &ws, &ws, dv_lse, sparse, &x, 1,
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
    if (dv->has_append)
        append_release(pre, freq, q_rot.buffer, old_lens, &x);
    else
        aux_release(&x);
    return st;
}
/* bwd_dq's and bwd_dkdv's arguments before their gradients, and after them */
static void arg_bwd_inputs(arg_list *a, const clattn_view *q, const clattn_view *k,
                           const clattn_view *v, const clattn_view *d_o, const cl_mem *ws)
{
    arg_view(a, q);
    arg_view(a, k);
    arg_view(a, v);
    arg_view(a, d_o);
    arg(a, sizeof(cl_mem), ws);
}

static void arg_bwd_sizes(arg_list *a, int64_t h_q, int64_t group, int64_t n_q, int64_t n_kv,
                          float scale, const aux_t *x)
{
    arg_int(a, h_q);
    arg_int(a, group);
    arg_long(a, n_q);
    arg_long(a, n_kv);
    arg(a, sizeof(float), &scale);
    arg_rule(a, x);
    arg_terms(a, x);
    arg_dropout(a, x);
}

/* The backward pass (bwd_prep.cl, bwd_dq.cl, bwd_dkdv.cl, bwd_dq_sum.cl): prep writes each
 * row's D and relative LSE into a workspace of 2 floats per row; dq (or, with dQ formed by
 * dkdv into per-split partial sums, dq_sum after dkdv) and dkdv wait for it and write
 * every element of their gradients (zeros where nothing adds). */
clattn_status clattn_launch_backward(clattn_context *ctx, const clattn_backward_plan *plan,
                                     const clattn_problem *dev, const clattn_view *d_o,
                                     const clattn_view g[4], cl_uint n_wait, const cl_event *wait,
                                     cl_event *done)
{
    const clattn_attention_desc *desc = dev->desc;
    const clattn_view *q = &dev->q, *k = &dev->k, *v = &dev->v;
    const int64_t batch = q->n[0], h_q = q->n[1], n_q = q->n[2], h_kv = k->n[1], n_kv = k->n[2];
    const int64_t rows = batch * h_q * n_q, keys = batch * h_kv * n_kv;
    const int64_t group = clattn_group(h_q, h_kv);
    const float scale = clattn_effective_scale(desc, q->n[3]);
    if (rows == 0 && keys == 0 && !plan->dsinks)
        return enqueue_marker(ctx, n_wait, wait, done);
    aux_t x;
    clattn_status st = aux_make(ctx, desc, q, NULL, dev->has_mask ? &dev->mask : NULL, &x);
    cl_mem ws = NULL, dq_part = NULL;
    cl_event ev[4] = {NULL, NULL, NULL, NULL};
    if (st == CLATTN_SUCCESS)
        st = clattn_create_buffer(ctx, CL_MEM_READ_WRITE, rows * 2 * 4, NULL, &ws);
    /* bwd_dkdv forming dQ: a float32 partial dQ per split (the plan's bytes) */
    const int64_t splits = keys > 0 ? plan->dq_splits : 0;
    if (st == CLATTN_SUCCESS && splits > 0 && rows > 0)
        st = clattn_create_buffer(ctx, CL_MEM_READ_WRITE, plan->dq_part_bytes, NULL, &dq_part);
    if (st == CLATTN_SUCCESS && rows > 0) {
        arg_list a = {plan->prep->kernel, 0, CL_SUCCESS};
        arg_view(&a, &dev->o);
        arg_view(&a, d_o);
        arg_view(&a, &dev->lse);
        arg(&a, sizeof(cl_mem), &ws);
        arg_int(&a, h_q);
        arg_long(&a, n_q);
        arg_long(&a, n_kv);
        arg(&a, sizeof(cl_mem), &x.alibi);
        arg_rule(&a, &x);
        const size_t global[2] = {(size_t)n_q, (size_t)(batch * h_q)};
        st = launch(ctx, "bwd_prep", &a, 2, global, NULL, n_wait, wait, &ev[0]);
    }
    /* after prep, or after the caller's events when there are no rows */
    const cl_uint nw = rows > 0 ? 1 : n_wait;
    const cl_event *w = rows > 0 ? &ev[0] : wait;
    if (st == CLATTN_SUCCESS && rows > 0 && !plan->dq_splits) {
        arg_list a = {plan->dq->kernel, 0, CL_SUCCESS};
        arg_bwd_inputs(&a, q, k, v, d_o, &ws);
        arg_view(&a, &g[0]);
        arg_bwd_sizes(&a, h_q, group, n_q, n_kv, scale, &x);
        const size_t rq = plan->dq_rows; /* RQ rows per work-item */
        const size_t global[2] = {round_up(clattn_ceil_div(n_q, (int64_t)rq), CLATTN_BACKWARD_WG),
                                  (size_t)(batch * h_q)};
        const size_t local[2] = {CLATTN_BACKWARD_WG, 1};
        st = launch(ctx, "bwd_dq", &a, 2, global, local, nw, w, &ev[1]);
    }
    if (st == CLATTN_SUCCESS && keys > 0) {
        arg_list a = {plan->dkdv->kernel, 0, CL_SUCCESS};
        arg_bwd_inputs(&a, q, k, v, d_o, &ws);
        arg_view(&a, &g[1]);
        arg_view(&a, &g[2]);
        arg_bwd_sizes(&a, h_q, group, n_q, n_kv, scale, &x);
        arg(&a, sizeof(cl_mem), dq_part ? &dq_part : &ws);
        const size_t rk = plan->dq_rows; /* RK keys per work-item */
        /* a work-group per block of WG·RK keys, or per split of the blocks (forming dQ) */
        const size_t global[2] = {
            splits > 0 ? (size_t)splits * CLATTN_BACKWARD_WG
                       : round_up(clattn_ceil_div(n_kv, (int64_t)rk), CLATTN_BACKWARD_WG),
            (size_t)(batch * h_kv)};
        const size_t local[2] = {CLATTN_BACKWARD_WG, 1};
        st = launch(ctx, "bwd_dkdv", &a, 2, global, local, nw, w, &ev[2]);
    }
    if (st == CLATTN_SUCCESS && rows > 0 && plan->dq_splits) { /* bwd_dq_sum.cl: after dkdv */
        arg_list a = {plan->dq->kernel, 0, CL_SUCCESS};
        arg(&a, sizeof(cl_mem), dq_part ? &dq_part : &ws);
        arg_int(&a, splits); /* 0 without keys: dQ 0 */
        arg_view(&a, &g[0]);
        arg_int(&a, h_q);
        arg_long(&a, n_q);
        const size_t global[2] = {(size_t)n_q, (size_t)(batch * h_q)};
        st = launch(ctx, "bwd_dq_sum", &a, 2, global, NULL, ev[2] ? 1 : nw, ev[2] ? &ev[2] : w,
                    &ev[1]);
    }
    if (st == CLATTN_SUCCESS && plan->dsinks) { /* bwd_dsinks.cl: after prep's D */
        arg_list a = {plan->dsinks->kernel, 0, CL_SUCCESS};
        arg(&a, sizeof(cl_mem), &ws);
        arg_view(&a, &dev->lse);
        arg(&a, sizeof(cl_mem), &x.sinks);
        arg_view(&a, &g[3]);
        arg_long(&a, batch);
        arg_int(&a, h_q);
        arg_long(&a, n_q);
        arg_rule(&a, &x);
        const size_t global[1] = {(size_t)h_q};
        st = launch(ctx, "bwd_dsinks", &a, 1, global, NULL, nw, w, &ev[3]);
    }
    if (st == CLATTN_SUCCESS) {
        cl_event last[3];
        cl_uint n_last = 0;
        for (int e = 1; e < 4; e++)
            if (ev[e])
                last[n_last++] = ev[e];
        st = enqueue_marker(ctx, n_last, last, done);
    }
    release_events(ev, 4);
    if (ws) /* freed by the runtime once the kernels that use it finish */
        clReleaseMemObject(ws);
    if (dq_part)
        clReleaseMemObject(dq_part);
    aux_release(&x);
    return st;
}

clattn_status clattn_launch_stage(clattn_context *ctx, const clattn_stage_plan *plan,
                                  const clattn_stage_call *sp, cl_uint n_wait, const cl_event *wait,
                                  cl_event *done)
{
    const clattn_view *a = &sp->a, *b = &sp->b, *c = &sp->c;
    if (c->count == 0)
        return enqueue_marker(ctx, n_wait, wait, done);
    aux_t plain;
    memset(&plain, 0, sizeof plain); /* softmax and weighted sum: plain rows */
    switch (sp->kind) {
    case CLATTN_STAGE_SOFTMAX:
        return enqueue_softmax(ctx, plan->softmax, plan->softmax_wg, a, c, NULL, false, &plain,
                               n_wait, wait, done);
    case CLATTN_STAGE_SCORES: {
        aux_t x;
        clattn_status st = aux_make(ctx, sp->desc, a, NULL, sp->has_mask ? &sp->mask : NULL, &x);
        if (st == CLATTN_SUCCESS)
            st = enqueue_scores(ctx, &plan->bk, a, b, c, clattn_effective_scale(sp->desc, a->n[3]),
                                false, false, &x, n_wait, wait, done);
        aux_release(&x);
        return st;
    }
    case CLATTN_STAGE_WEIGHTED_SUM:
    default: return enqueue_wsum(ctx, &plan->bk, a, b, c, false, &plain, n_wait, wait, done);
    }
}
