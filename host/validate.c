/* Each call's checks, producing one resolved problem: the desc, the shapes of an
 * attention call, its optional inputs and outputs, the public stages and merge. Shape
 * errors come before storage errors where both apply. */
#include "internal.h"

#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
                           "q_start %lld / kv_start %lld must be within ±(2^53 − 1)",
                           (long long)desc->q_start, (long long)desc->kv_start);
    clattn_status st = clattn_mods_check(ctx, desc);
    if (st == CLATTN_SUCCESS)
        st = clattn_check_dropout(ctx, desc);
    if (st != CLATTN_SUCCESS)
        return st;
    if (desc->half_arithmetic != 0 && desc->half_arithmetic != 1)
        return clattn_fail(ctx, CLATTN_ERROR_INVALID_ARGUMENT, "half_arithmetic %d: 0 or 1",
                           desc->half_arithmetic);
    if (desc->batch_invariant != 0 && desc->batch_invariant != 1)
        return clattn_fail(ctx, CLATTN_ERROR_INVALID_ARGUMENT, "batch_invariant %d: 0 or 1",
                           desc->batch_invariant);
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

clattn_status clattn_check_backward_desc(clattn_context *ctx, const clattn_attention_desc *desc)
{
    if (desc->paged || desc->k_new || desc->rotary || desc->varlen || desc->k_scale ||
        desc->v_scale)
        return clattn_fail(ctx, CLATTN_ERROR_UNSUPPORTED,
                           "%s: the backward pass takes contiguous float K and V (and dK, dV), "
                           "no append, no rotary embeddings and no varlen",
                           desc->paged    ? "paged K/V"
                           : desc->k_new  ? "k_new, v_new"
                           : desc->rotary ? "rotary"
                           : desc->varlen ? "varlen"
                                          : "an int8 K/V (k_scale, v_scale)");
    if (desc->mods && desc->mods->score_mod) /* (mask_mod has no gradient: it runs) */
        return clattn_fail(ctx, CLATTN_ERROR_UNSUPPORTED,
                           "mods.score_mod: the backward pass cannot differentiate an OpenCL C "
                           "snippet (mask_mod works)");
    return CLATTN_SUCCESS;
}

static clattn_status check_attention_shapes(clattn_context *ctx, const clattn_view *q,
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
    if (q->n[2] >= ((int64_t)1 << 53) || k->n[2] >= ((int64_t)1 << 53))
        return clattn_fail(ctx, CLATTN_ERROR_UNSUPPORTED,
                           "n_q %lld / n_kv %lld: positions are limited to 2^53 (as q_start and "
                           "kv_start)",
                           LL(q->n[2]), LL(k->n[2]));
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
        st = clattn_view_check_dtype(ctx, "K", k, CLATTN_DT_KV);
    if (st == CLATTN_SUCCESS)
        st = clattn_view_check_dtype(ctx, "V", v, CLATTN_DT_KV);
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

/* An output of one value per query row (the LSE, max logits): a writable view of a dtype
 * in dts, shaped [batch, h_q, n_q, 1]. */
static clattn_status row_output(clattn_context *ctx, const char *name, const clattn_tensor *t,
                                clattn_storage storage, unsigned dts, int64_t batch, int64_t h_q,
                                int64_t n_q, clattn_view *v)
{
    clattn_status st = clattn_view_make(ctx, name, t, storage, true, v);
    if (st == CLATTN_SUCCESS)
        st = clattn_view_check_dtype(ctx, name, v, dts);
    if (st == CLATTN_SUCCESS &&
        (v->n[0] != batch || v->n[1] != h_q || v->n[2] != n_q || v->n[3] != 1))
        st = clattn_fail(ctx, CLATTN_ERROR_INVALID_SHAPE,
                         "%s is [%lld, %lld, %lld, %lld], expected [%lld, %lld, %lld, 1] (batch, "
                         "heads_q, n_q, 1)",
                         name, (long long)v->n[0], (long long)v->n[1], (long long)v->n[2],
                         (long long)v->n[3], (long long)batch, (long long)h_q, (long long)n_q);
    return st;
}

static clattn_status check_extras(clattn_context *ctx, const clattn_attention_desc *desc,
                                  const clattn_view *q, const clattn_view *k,
                                  clattn_storage storage, clattn_problem *out)
{
#define LL(x) ((long long)(x))
    const int64_t batch = q->n[0], h_q = q->n[1], n_q = q->n[2], n_kv = k->n[2];
    clattn_status st;
    const cl_mem bufs[2] = {desc->kv_lens_buffer, desc->q_lens_buffer};
    const bool host_arrays[2] = {desc->kv_lens != NULL, desc->q_lens != NULL};
    static const char *const names[2] = {"kv_lens", "q_lens"};
    for (int t = 0; t < 2; t++) {
        if (!bufs[t])
            continue;
        if (host_arrays[t])
            return clattn_fail(ctx, CLATTN_ERROR_INVALID_ARGUMENT,
                               "%s and %s_buffer are both set; set at most one", names[t],
                               names[t]);
        if (storage == CLATTN_STORAGE_HOST)
            return clattn_fail(ctx, CLATTN_ERROR_INVALID_ARGUMENT,
                               "%s_buffer is for the *_enqueue calls; the blocking calls (and "
                               "the reference) take a host %s array",
                               names[t], names[t]);
        clattn_view lv = clattn_view_packed(batch, 1, 1, 1);
        lv.buffer = bufs[t];
        char what[32];
        snprintf(what, sizeof what, "%s_buffer", names[t]);
        if ((st = clattn_view_check_buffer(ctx, what, &lv)) != CLATTN_SUCCESS)
            return st;
    }
    if (desc->kv_lens)
        for (int64_t b = 0; b < batch; b++)
            if (desc->kv_lens[b] < 0 || desc->kv_lens[b] > n_kv)
                return clattn_fail(ctx, CLATTN_ERROR_INVALID_SHAPE,
                                   "kv_lens[%lld] is %d; it must be within 0..n_kv (%lld%s)", LL(b),
                                   (int)desc->kv_lens[b], LL(n_kv),
                                   k->paged ? " = max_pages x page_size of the paged K/V" : "");
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
    if (desc->sinks)
        for (int64_t h = 0; h < h_q; h++)
            if (isnan(desc->sinks[h]) || desc->sinks[h] == INFINITY)
                return clattn_fail(ctx, CLATTN_ERROR_INVALID_ARGUMENT,
                                   "sinks[%lld] is %g; a sink logit must be finite or -inf "
                                   "(no sink for that head)",
                                   LL(h), (double)desc->sinks[h]);
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
        st = row_output(ctx, "lse", desc->lse, storage, CLATTN_DT_LSE, batch, h_q, n_q, &out->lse);
        if (st != CLATTN_SUCCESS)
            return st;
    }
    if (desc->key_weight_sums) {
        out->has_ksum = true;
        st = clattn_view_make(ctx, "key_weight_sums", desc->key_weight_sums, storage, true,
                              &out->ksum);
        if (st == CLATTN_SUCCESS)
            st = clattn_view_check_dtype(ctx, "key_weight_sums", &out->ksum, CLATTN_DT_F32);
        if (st != CLATTN_SUCCESS)
            return st;
        const clattn_view *s = &out->ksum;
        if (s->n[0] != batch || (s->n[1] != h_q && s->n[1] != k->n[1]) || s->n[2] != 1 ||
            s->n[3] != n_kv)
            return clattn_fail(ctx, CLATTN_ERROR_INVALID_SHAPE,
                               "key_weight_sums is [%lld, %lld, %lld, %lld], expected [%lld, "
                               "%lld (per query head) or %lld (per KV head), 1, %lld]",
                               LL(s->n[0]), LL(s->n[1]), LL(s->n[2]), LL(s->n[3]), LL(batch),
                               LL(h_q), LL(k->n[1]), LL(n_kv));
        const char *no = desc->weights                ? "weights (sum them instead)"
                         : desc->dropout_p != 0.0f    ? "dropout"
                         : desc->k_new || desc->v_new ? "an append (k_new, v_new)"
                         : k->dtype == CLATTN_INT8 || k->dtype == CLATTN_FLOAT8_E4M3
                             ? "an int8 or FP8 K"
                             : NULL;
        if (no)
            return clattn_fail(ctx, CLATTN_ERROR_UNSUPPORTED,
                               "key_weight_sums: not combined with %s", no);
    }
    if (desc->max_logits) { /* shaped as the LSE */
        out->has_mlog = true;
        st = row_output(ctx, "max_logits", desc->max_logits, storage, CLATTN_DT_F32, batch, h_q,
                        n_q, &out->mlog);
        if (st != CLATTN_SUCCESS)
            return st;
    }
#undef LL
    return CLATTN_SUCCESS;
}

clattn_status clattn_resolve_attention(clattn_context *ctx, const clattn_attention_desc *desc,
                                       const clattn_tensor *q, const clattn_tensor *k,
                                       const clattn_tensor *v, const clattn_tensor *o,
                                       clattn_storage storage, clattn_problem *cv)
{
    memset(cv, 0, sizeof *cv);
    cv->desc = desc;
    clattn_clear_error(ctx); /* ctx NULL: the reference (messages per thread) */
    clattn_status st = clattn_check_desc(ctx, desc);
    if (st == CLATTN_SUCCESS)
        st = clattn_view_make(ctx, "Q", q, storage, false, &cv->q);
    if (st == CLATTN_SUCCESS)
        st = clattn_view_make(ctx, "K", k, storage, false, &cv->k);
    if (st == CLATTN_SUCCESS)
        st = clattn_view_make(ctx, "V", v, storage, false, &cv->v);
    if (st == CLATTN_SUCCESS)
        st = clattn_view_make(ctx, "O", o, storage, true, &cv->o);
    if (st == CLATTN_SUCCESS && desc->paged)
        st = clattn_check_paged(ctx, desc, &cv->q, &cv->k, &cv->v, storage);
    cv->has_w = desc && desc->weights;
    if (st == CLATTN_SUCCESS && cv->has_w)
        st = clattn_view_make(ctx, "weights", desc->weights, storage, true, &cv->w);
    if (st == CLATTN_SUCCESS)
        st = check_attention_shapes(ctx, &cv->q, &cv->k, &cv->v, &cv->o, cv->has_w ? &cv->w : NULL,
                                    desc->weights_head_mean != 0);
    if (st == CLATTN_SUCCESS)
        st = check_extras(ctx, desc, &cv->q, &cv->k, storage, cv);
    if (st == CLATTN_SUCCESS)
        st = clattn_check_append(ctx, desc, k, v, storage, cv);
    if (st == CLATTN_SUCCESS)
        st = clattn_check_quant(ctx, desc, storage, cv);
    if (st == CLATTN_SUCCESS)
        st = clattn_check_block_table(ctx, desc, &cv->k);
    if (st == CLATTN_SUCCESS)
        st = clattn_check_dropout_shape(ctx, desc, cv->q.n[0], cv->q.n[1], cv->q.n[2], cv->k.n[2]);
    if (st != CLATTN_SUCCESS)
        return st;
    /* outputs never overlap each other; on device buffers (no staging copy) they must
     * not overlap the inputs the kernels are reading either */
    const clattn_view *outs[5] = {&cv->o, cv->has_w ? &cv->w : NULL, cv->has_lse ? &cv->lse : NULL,
                                  cv->has_ksum ? &cv->ksum : NULL, cv->has_mlog ? &cv->mlog : NULL};
    static const char *const out_names[5] = {"O", "weights", "lse", "key_weight_sums",
                                             "max_logits"};
    for (int a = 0; a < 5; a++)
        for (int b = a + 1; b < 5; b++)
            if (outs[a] && outs[b] && clattn_views_overlap(outs[a], outs[b]))
                return clattn_fail(ctx, CLATTN_ERROR_INVALID_LAYOUT, "%s and %s overlap",
                                   out_names[a], out_names[b]);
    if (storage == CLATTN_STORAGE_BUFFER) {
        /* the lengths in a cl_mem (int32 [batch] from byte 0) are inputs too */
        clattn_view lens[2];
        const cl_mem lens_mem[2] = {desc->kv_lens_buffer, desc->q_lens_buffer};
        for (int i = 0; i < 2; i++) {
            lens[i] = clattn_view_packed(1, 1, 1, cv->q.n[0]);
            lens[i].buffer = lens_mem[i];
            lens[i].esize = 4;
        }
        const clattn_view *ins[6] = {&cv->q,
                                     &cv->k,
                                     &cv->v,
                                     cv->has_mask ? &cv->mask : NULL,
                                     lens_mem[0] ? &lens[0] : NULL,
                                     lens_mem[1] ? &lens[1] : NULL};
        static const char *const names[6] = {
            "Q", "K", "V", "mask_tensor", "kv_lens_buffer", "q_lens_buffer"};
        for (int i = 0; i < 6; i++)
            for (int a = 0; a < 5; a++)
                if (ins[i] && outs[a] && clattn_views_overlap(outs[a], ins[i]))
                    return clattn_fail(ctx, CLATTN_ERROR_INVALID_LAYOUT,
                                       "%s overlaps %s in the same cl_mem", out_names[a], names[i]);
    }
    /* last: the cl_mem behind each buffer view (its context, its size) */
    const clattn_view *all[9] = {&cv->q,
                                 &cv->k,
                                 &cv->v,
                                 &cv->o,
                                 cv->has_w ? &cv->w : NULL,
                                 cv->has_mask ? &cv->mask : NULL,
                                 cv->has_lse ? &cv->lse : NULL,
                                 cv->has_ksum ? &cv->ksum : NULL,
                                 cv->has_mlog ? &cv->mlog : NULL};
    static const char *const all_names[9] = {
        "Q", "K", "V", "O", "weights", "mask_tensor", "lse", "key_weight_sums", "max_logits"};
    for (int i = 0; i < 9 && st == CLATTN_SUCCESS; i++)
        if (all[i])
            st = clattn_view_check_buffer(ctx, all_names[i], all[i]);
    return st;
}
/* The backward pass's gradient views (the device call and the reference): dQ, dK and dV
 * shaped as Q, K and V, float storage, none overlapping another or any input (ex's Q, K,
 * V, O, LSE and mask, and d_o when given), and on buffers a cl_mem that holds them. */
clattn_status clattn_resolve_gradients(clattn_context *ctx, const clattn_problem *ex,
                                       const clattn_view *d_o, const clattn_tensor *const t[4],
                                       clattn_storage storage, clattn_view out[4])
{
    static const char *const names[4] = {"dQ", "dK", "dV", "d_sinks"};
    /* d_sinks: [1, h_q, 1, 1] float32, with sinks only */
    clattn_view sinks_like;
    memset(&sinks_like, 0, sizeof sinks_like);
    sinks_like.n[0] = sinks_like.n[2] = sinks_like.n[3] = 1;
    sinks_like.n[1] = ex->q.n[1];
    const clattn_view *like[4] = {&ex->q, &ex->k, &ex->v, &sinks_like};
    memset(&out[3], 0, sizeof out[3]);
    if (t[3] && !ex->desc->sinks)
        return clattn_fail(ctx, CLATTN_ERROR_INVALID_ARGUMENT,
                           "d_sinks is set but sinks is NULL: there is no sink to differentiate");
    const clattn_view *inputs[6] = {&ex->q,
                                    &ex->k,
                                    &ex->v,
                                    &ex->o,
                                    ex->has_lse ? &ex->lse : NULL,
                                    ex->has_mask ? &ex->mask : NULL};
    static const char *const in_names[6] = {"Q", "K", "V", "O", "lse", "mask_tensor"};
    for (int a = 0; a < 4; a++) {
        if (a == 3 && !t[3])
            break;
        clattn_status st = clattn_view_make(ctx, names[a], t[a], storage, true, &out[a]);
        if (st == CLATTN_SUCCESS)
            st = clattn_view_check_dtype(ctx, names[a], &out[a],
                                         a == 3 ? CLATTN_DT_F32 : CLATTN_DT_FLOATS);
        if (st != CLATTN_SUCCESS)
            return st;
        for (int d = 0; d < 4; d++)
            if (out[a].n[d] != like[a]->n[d])
                return clattn_fail(ctx, CLATTN_ERROR_INVALID_SHAPE,
                                   "%s has extent %lld in dimension %d; %s%s %lld", names[a],
                                   (long long)out[a].n[d], d,
                                   a == 3 ? "it must be [1, h_q, 1, 1], here" : names[a] + 1,
                                   a == 3 ? "" : " has", (long long)like[a]->n[d]);
        for (int b = 0; b < a; b++)
            if (clattn_views_overlap(&out[a], &out[b]))
                return clattn_fail(ctx, CLATTN_ERROR_INVALID_LAYOUT, "%s overlaps %s", names[a],
                                   names[b]);
        /* the reference takes dO in O's place; the device call names it apart */
        for (int i = 0; i < 7; i++) {
            const clattn_view *in = i < 6 ? inputs[i] : d_o;
            const char *in_name = i < 6 ? (d_o || i != 3 ? in_names[i] : "dO") : "dO";
            if (in && clattn_views_overlap(&out[a], in))
                return clattn_fail(ctx, CLATTN_ERROR_INVALID_LAYOUT,
                                   "%s overlaps the input %s (every input is read while the "
                                   "gradients are written)",
                                   names[a], in_name);
        }
        if (storage == CLATTN_STORAGE_BUFFER &&
            (st = clattn_view_check_buffer(ctx, names[a], &out[a])) != CLATTN_SUCCESS)
            return st;
    }
    return CLATTN_SUCCESS;
}

/* Validates the stage's views; stage_kind 0 scores (a=q, b=k, c=s), 1 softmax (a=x,
 * c=y), 2 weighted sum (a=w, b=v, c=o). */
static clattn_status check_stage(clattn_context *ctx, int kind, const clattn_attention_desc *desc,
                                 const clattn_tensor *a, const clattn_tensor *b,
                                 const clattn_tensor *c, clattn_storage storage, clattn_view *va,
                                 clattn_view *vb, clattn_view *vc, clattn_problem *ex)
{
    static const char *const names[3][3] = {
        {"Q", "K", "scores"}, {"scores", "", "weights"}, {"weights", "V", "O"}};
    clattn_clear_error(ctx); /* ctx NULL: the reference (messages per thread) */
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
        const bool in_place = kind == 1 && clattn_views_same(va, vc);
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
        st = check_extras(ctx, desc, va, vb, storage, ex);
    if (st == CLATTN_SUCCESS && kind == 0 && ex->has_mask && storage == CLATTN_STORAGE_BUFFER &&
        clattn_views_overlap(vc, &ex->mask))
        return clattn_fail(ctx, CLATTN_ERROR_INVALID_LAYOUT,
                           "scores overlap mask_tensor in the same cl_mem");
    return st;
}

clattn_status clattn_resolve_stage(clattn_context *ctx, clattn_stage kind,
                                   const clattn_attention_desc *desc, const clattn_tensor *a,
                                   const clattn_tensor *b, const clattn_tensor *c,
                                   clattn_storage storage, clattn_stage_call *out)
{
    clattn_problem ex;
    memset(&ex, 0, sizeof ex);
    memset(out, 0, sizeof *out);
    out->kind = kind;
    out->desc = desc;
    if (desc && (desc->paged || desc->k_new || desc->rotary || desc->kv_lens_buffer ||
                 desc->q_lens_buffer || desc->varlen || desc->dropout_p != 0.0f))
        return clattn_fail(ctx, CLATTN_ERROR_UNSUPPORTED,
                           "%s: the stages (and clattn_reference_scores) take contiguous K and "
                           "V, host lengths and no dropout (clattn_attention and "
                           "clattn_reference_attention take them)",
                           desc->paged                   ? "paged K/V"
                           : desc->k_new || desc->rotary ? "k_new, v_new, rotary"
                           : desc->varlen                ? "varlen"
                           : desc->dropout_p != 0.0f     ? "dropout"
                                                         : "lengths in a cl_mem");
    clattn_status st =
        check_stage(ctx, (int)kind, desc, a, b, c, storage, &out->a, &out->b, &out->c, &ex);
    static const char *const names[3][3] = {
        {"Q", "K", "scores"}, {"scores", "", "weights"}, {"weights", "V", "O"}};
    if (st == CLATTN_SUCCESS)
        st = clattn_view_check_buffer(ctx, names[kind][0], &out->a);
    if (st == CLATTN_SUCCESS && kind != CLATTN_STAGE_SOFTMAX)
        st = clattn_view_check_buffer(ctx, names[kind][1], &out->b);
    if (st == CLATTN_SUCCESS)
        st = clattn_view_check_buffer(ctx, names[kind][2], &out->c);
    if (st == CLATTN_SUCCESS && ex.has_mask)
        st = clattn_view_check_buffer(ctx, "mask_tensor", &ex.mask);
    if (kind == CLATTN_STAGE_SOFTMAX)
        out->b = out->a;
    out->has_mask = ex.has_mask;
    out->mask = ex.mask;
    return st;
}

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
    if (n_parts < 1 || n_parts > CLATTN_MAX_MERGE_PARTS)
        return clattn_fail(ctx, CLATTN_ERROR_INVALID_ARGUMENT,
                           "n_parts is %zu; it must be within 1..%d", n_parts,
                           CLATTN_MAX_MERGE_PARTS);
    if (!o_parts || !lse_parts)
        return clattn_fail(ctx, CLATTN_ERROR_INVALID_ARGUMENT, "%s is NULL",
                           !o_parts ? "o_parts" : "lse_parts");
    clattn_status st = clattn_view_make(ctx, "O", o, storage, true, vo);
    if (st == CLATTN_SUCCESS)
        st = clattn_view_check_dtype(ctx, "O", vo, CLATTN_DT_FLOATS);
    if (st == CLATTN_SUCCESS && lse) {
        st = clattn_view_make(ctx, "lse", lse, storage, true, vl);
        if (st == CLATTN_SUCCESS)
            st = clattn_view_check_dtype(ctx, "lse", vl, CLATTN_DT_LSE);
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
            st = clattn_view_check_dtype(ctx, name, &pl[p], CLATTN_DT_LSE);
        if (st != CLATTN_SUCCESS)
            return st;
        if (pl[p].n[0] != n[0] || pl[p].n[1] != n[1] || pl[p].n[2] != n[2] || pl[p].n[3] != 1)
            return clattn_fail(ctx, CLATTN_ERROR_INVALID_SHAPE,
                               "%s is [%lld, %lld, %lld, %lld], expected [%lld, %lld, %lld, 1]",
                               name, LL(pl[p].n[0]), LL(pl[p].n[1]), LL(pl[p].n[2]), LL(pl[p].n[3]),
                               LL(n[0]), LL(n[1]), LL(n[2]));
        /* in place only exactly on part 0 (read before anything is written) */
        const bool same_o = p == 0 && clattn_views_same(&po[p], vo);
        const bool same_l = p == 0 && lse && clattn_views_same(&pl[p], vl);
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
    /* last: the cl_mem behind each buffer view (its context, its size) */
    st = clattn_view_check_buffer(ctx, "O", vo);
    if (st == CLATTN_SUCCESS && lse)
        st = clattn_view_check_buffer(ctx, "lse", vl);
    for (size_t p = 0; p < n_parts && st == CLATTN_SUCCESS; p++) {
        char name[48];
        snprintf(name, sizeof name, "o_parts[%zu]", p);
        st = clattn_view_check_buffer(ctx, name, &po[p]);
        snprintf(name, sizeof name, "lse_parts[%zu]", p);
        if (st == CLATTN_SUCCESS)
            st = clattn_view_check_buffer(ctx, name, &pl[p]);
    }
    return st;
}

void clattn_merge_problem_free(clattn_merge_problem *m)
{
    free(m->o_parts);
    free(m->lse_parts);
    m->o_parts = m->lse_parts = NULL;
}

clattn_status clattn_check_wait_list(clattn_context *ctx, cl_uint n_wait, const cl_event *wait)
{
    if (n_wait > 0 && !wait)
        return clattn_fail(ctx, CLATTN_ERROR_INVALID_ARGUMENT, "n_wait is %u but wait is NULL",
                           n_wait);
    for (cl_uint i = 0; i < n_wait; i++) { /* an event of another cl_context cannot be waited on */
        cl_context owner = NULL;
        const cl_int err = clGetEventInfo(wait[i], CL_EVENT_CONTEXT, sizeof owner, &owner, NULL);
        if (err == CL_INVALID_EVENT)
            return clattn_fail(ctx, CLATTN_ERROR_INVALID_ARGUMENT,
                               "wait[%u] is not a valid cl_event", i);
        if (err != CL_SUCCESS)
            return clattn_fail_cl(ctx, err, "clGetEventInfo(wait, CL_EVENT_CONTEXT)");
        if (owner != ctx->context)
            return clattn_fail(ctx, CLATTN_ERROR_INVALID_ARGUMENT,
                               "wait[%u] belongs to another cl_context than the clattn context's",
                               i);
    }
    return CLATTN_SUCCESS;
}

clattn_status clattn_resolve_merge(clattn_context *ctx, size_t n_parts,
                                   const clattn_tensor *o_parts, const clattn_tensor *lse_parts,
                                   const clattn_tensor *o, const clattn_tensor *lse,
                                   clattn_storage storage, clattn_merge_problem *out)
{
    memset(out, 0, sizeof *out);
    out->n_parts = n_parts;
    out->has_lse = lse != NULL;
    if (n_parts >= 1 && n_parts <= CLATTN_MAX_MERGE_PARTS) {
        out->o_parts = malloc(n_parts * sizeof *out->o_parts);
        out->lse_parts = malloc(n_parts * sizeof *out->lse_parts);
        if (!out->o_parts || !out->lse_parts)
            return clattn_fail(ctx, CLATTN_ERROR_OUT_OF_HOST_MEMORY,
                               "cannot allocate %zu part views", n_parts);
    }
    return check_merge(ctx, n_parts, o_parts, lse_parts, o, lse, storage, out->o_parts,
                       out->lse_parts, &out->o, &out->lse);
}
