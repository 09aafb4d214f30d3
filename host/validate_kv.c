/* The KV-cache terms of an attention call's validation (clattn_resolve_attention in
 * validate.c calls them in order): paged pools, an append and rotary embeddings, a
 * quantized K/V's scales, and the host block table's entries. */
#include "internal.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

/* Paged K/V (desc->paged): the pool views K and V ([num_pages, h_kv, page_size, d])
 * become logical views [batch, h_kv, max_pages·page_size, d] that index through the
 * block table (clattn_view_index; the kernels' kv_row). Their span stays the pool's,
 * so staging, overlap and buffer-size checks see the pool. */
clattn_status clattn_check_paged(clattn_context *ctx, const clattn_attention_desc *desc,
                                 const clattn_view *q, clattn_view *k, clattn_view *v,
                                 clattn_storage storage)
{
#define LL(x) ((long long)(x))
    const clattn_paged_kv *pg = desc->paged;
    if ((pg->block_table && pg->block_table_buffer) ||
        (!pg->block_table && !pg->block_table_buffer && pg->max_pages != 0))
        return clattn_fail(ctx, CLATTN_ERROR_INVALID_ARGUMENT,
                           "paged: set exactly one of block_table (host) and block_table_buffer "
                           "(cl_mem)%s",
                           pg->block_table ? "" : " (neither only for max_pages 0)");
    if (pg->block_table_buffer && storage == CLATTN_STORAGE_HOST)
        return clattn_fail(ctx, CLATTN_ERROR_INVALID_ARGUMENT,
                           "paged: block_table_buffer is for the *_enqueue calls; the blocking "
                           "call (and the reference) take a host block_table");
    if (k->n[0] != v->n[0] || k->n[2] != v->n[2])
        return clattn_fail(ctx, CLATTN_ERROR_INVALID_SHAPE,
                           "paged: the K pool is [%lld pages, %lld, %lld slots, %lld], the V pool "
                           "[%lld pages, %lld, %lld slots, %lld]; pages and page_size must agree",
                           LL(k->n[0]), LL(k->n[1]), LL(k->n[2]), LL(k->n[3]), LL(v->n[0]),
                           LL(v->n[1]), LL(v->n[2]), LL(v->n[3]));
    const int64_t num_pages = k->n[0], page_size = k->n[2];
    if (pg->max_pages < 0)
        return clattn_fail(ctx, CLATTN_ERROR_INVALID_SHAPE,
                           "paged: max_pages is %lld (must be >= 0)", LL(pg->max_pages));
    if (page_size < 1 && pg->max_pages > 0)
        return clattn_fail(ctx, CLATTN_ERROR_INVALID_SHAPE,
                           "paged: page_size (dimension 2 of the pools' views [num_pages, "
                           "h_kv, page_size, d]) is 0");
    int64_t n_kv = 0;
    if (!clattn_mul_ok(pg->max_pages, page_size, &n_kv) || n_kv >= ((int64_t)1 << 53))
        return clattn_fail(ctx, CLATTN_ERROR_UNSUPPORTED,
                           "paged: max_pages %lld x page_size %lld keys exceed 2^53",
                           LL(pg->max_pages), LL(page_size));
    if (n_kv > 0 && num_pages < 1)
        return clattn_fail(ctx, CLATTN_ERROR_INVALID_SHAPE,
                           "paged: the pools hold no page but the table has %lld per sequence",
                           LL(pg->max_pages));
    if (pg->block_table_buffer) {
        clattn_view tv = clattn_view_packed(q->n[0], pg->max_pages, 1, 1);
        tv.buffer = pg->block_table_buffer;
        clattn_status st = clattn_view_check_buffer(ctx, "block_table_buffer", &tv);
        if (st != CLATTN_SUCCESS)
            return st;
    }
    clattn_view *pools[2] = {k, v};
    for (int t = 0; t < 2; t++) {
        clattn_view *x = pools[t];
        x->paged = true;
        x->page_table = pg->block_table;
        x->page_table_buffer = pg->block_table_buffer;
        x->page_size = page_size;
        x->page_stride = pg->max_pages;
        x->num_pages = num_pages;
        x->n[0] = q->n[0];
        x->n[2] = n_kv;
        if (!clattn_mul_ok(x->n[0], x->n[1], &x->count) ||
            !clattn_mul_ok(x->count, x->n[2], &x->count) ||
            !clattn_mul_ok(x->count, x->n[3], &x->count))
            return clattn_fail(ctx, CLATTN_ERROR_UNSUPPORTED,
                               "paged: batch x heads x n_kv x d overflows 64 bits");
    }
    return CLATTN_SUCCESS;
#undef LL
}

/* desc.k_scale / v_scale: the scales of an int8 K or V (a quantized cache). Each is
 * [b or 1, h_kv, n_kv or 1, 1] float32 (a paged pool: [num_pages or 1, h_kv, page_size
 * or 1, 1], read through K's block table); extents of 1 broadcast (stride 0). */
clattn_status clattn_check_quant(clattn_context *ctx, const clattn_attention_desc *desc,
                                 clattn_storage storage, clattn_problem *cv)
{
#define LL(x) ((long long)(x))
    const clattn_tensor *sc[2] = {desc->k_scale, desc->v_scale};
    const clattn_view *kv[2] = {&cv->k, &cv->v};
    clattn_view *out[2] = {&cv->k_scale, &cv->v_scale};
    bool *has[2] = {&cv->has_k_scale, &cv->has_v_scale};
    static const char *const names[2] = {"k_scale", "v_scale"}, *const of[2] = {"K", "V"};
    for (int t = 0; t < 2; t++) {
        const bool int8 = kv[t]->dtype == CLATTN_INT8;
        const bool fp8 = kv[t]->dtype == CLATTN_FLOAT8_E4M3;
        if (int8 && !sc[t])
            return clattn_fail(ctx, CLATTN_ERROR_INVALID_ARGUMENT,
                               "%s has dtype int8: set %s, its float32 scales [b or 1, h_kv, "
                               "n_kv or 1, 1]",
                               of[t], names[t]);
        if (!int8 && !fp8 && sc[t])
            return clattn_fail(ctx, CLATTN_ERROR_INVALID_ARGUMENT,
                               "%s is set but %s is not int8 or float8_e4m3: scales go with a "
                               "quantized %s only",
                               names[t], of[t], of[t]);
        if (!sc[t])
            continue;
        clattn_status st = clattn_view_make(ctx, names[t], sc[t], storage, false, out[t]);
        if (st == CLATTN_SUCCESS)
            st = clattn_view_check_dtype(ctx, names[t], out[t], CLATTN_DT_F32);
        if (st == CLATTN_SUCCESS && storage == CLATTN_STORAGE_BUFFER)
            st = clattn_view_check_buffer(ctx, names[t], out[t]);
        if (st != CLATTN_SUCCESS)
            return st;
        /* the extents of K's storage: batch and keys, or pages and slots of a pool */
        const clattn_view *k = kv[t];
        const int64_t n0 = k->paged ? k->num_pages : k->n[0],
                      n2 = k->paged ? k->page_size : k->n[2];
        clattn_view *v = out[t];
        if ((v->n[0] != 1 && v->n[0] != n0) || v->n[1] != k->n[1] ||
            (v->n[2] != 1 && v->n[2] != n2) || v->n[3] != 1)
            return clattn_fail(ctx, CLATTN_ERROR_INVALID_SHAPE,
                               "%s is [%lld, %lld, %lld, %lld], expected [%lld%s, %lld, %lld%s, "
                               "1] (%s)",
                               names[t], LL(v->n[0]), LL(v->n[1]), LL(v->n[2]), LL(v->n[3]), LL(n0),
                               n0 == 1 ? "" : " or 1", LL(k->n[1]), LL(n2), n2 == 1 ? "" : " or 1",
                               k->paged ? "pages, h_kv, slots of the pool" : "batch, h_kv, n_kv");
        for (int d = 0; d < 3; d += 2)
            if (v->n[d] == 1)
                v->s[d] = 0;
        if (v->host) /* host scales must be finite (device ones: the caller's) */
            for (int64_t b = 0; b < v->n[0]; b++)
                for (int64_t h = 0; h < v->n[1]; h++)
                    for (int64_t j = 0; j < v->n[2]; j++) {
                        const float x = clattn_host_load(v, clattn_view_index(v, b, h, j, 0));
                        if (!isfinite(x))
                            return clattn_fail(ctx, CLATTN_ERROR_INVALID_ARGUMENT,
                                               "%s[%lld, %lld, %lld] is %g; scales must be finite",
                                               names[t], LL(b), LL(h), LL(j), (double)x);
                    }
        if (k->paged) { /* through the block table, as K */
            v->paged = true;
            v->page_table = k->page_table;
            v->page_table_buffer = k->page_table_buffer;
            v->page_size = k->page_size;
            v->page_stride = k->page_stride;
            v->num_pages = k->num_pages;
        }
        *has[t] = true;
    }
    if (clattn_problem_quantized(cv) &&
        (cv->has_w || cv->has_append || desc->varlen || desc->d_sinks))
        return clattn_fail(ctx, CLATTN_ERROR_UNSUPPORTED,
                           "an int8 or FP8 K/V cache: no %s (the fused forward only)",
                           cv->has_w        ? "attention weights"
                           : cv->has_append ? "k_new / v_new append (quantizing new rows is "
                                              "the caller's)"
                           : desc->varlen   ? "varlen"
                                            : "backward");
    return CLATTN_SUCCESS;
#undef LL
}

/* desc.k_new / v_new (rows appended into K and V at kv_lens) and desc.rotary. */
clattn_status clattn_check_append(clattn_context *ctx, const clattn_attention_desc *desc,
                                  const clattn_tensor *k, const clattn_tensor *v,
                                  clattn_storage storage, clattn_problem *cv)
{
#define LL(x) ((long long)(x))
    const clattn_rotary *rot = desc->rotary;
    if (!desc->k_new != !desc->v_new)
        return clattn_fail(ctx, CLATTN_ERROR_INVALID_ARGUMENT,
                           "k_new and v_new: set both (rows appended into K and V) or neither");
    if (rot && !desc->k_new)
        return clattn_fail(ctx, CLATTN_ERROR_INVALID_ARGUMENT,
                           "rotary needs k_new and v_new: it rotates Q and the appended keys "
                           "(the cache holds rotated keys)");
    if (rot) {
        const int64_t d_k = cv->q.n[3], dim = rot->dim ? rot->dim : d_k;
        if (dim < 2 || dim > d_k || dim % 2 != 0)
            return clattn_fail(ctx, CLATTN_ERROR_INVALID_ARGUMENT,
                               "rotary dim %lld: it must be even, within 2..d_k (%lld)%s", LL(dim),
                               LL(d_k), rot->dim ? "" : " (0 means d_k)");
        if (rot->interleaved != 0 && rot->interleaved != 1)
            return clattn_fail(ctx, CLATTN_ERROR_INVALID_ARGUMENT,
                               "rotary interleaved is %d: 0 (GPT-NeoX) or 1 (GPT-J)",
                               rot->interleaved);
        if (!(rot->base == 0.0f || (isfinite(rot->base) && rot->base > 0.0f)))
            return clattn_fail(ctx, CLATTN_ERROR_INVALID_ARGUMENT,
                               "rotary base %g: 0 (10000) or finite and positive",
                               (double)rot->base);
        const bool host_tab = rot->cos_table || rot->sin_table;
        if (host_tab && (!rot->cos_table || !rot->sin_table || rot->table_buffer))
            return clattn_fail(ctx, CLATTN_ERROR_INVALID_ARGUMENT,
                               "rotary tables: set both cos_table and sin_table (host), or "
                               "table_buffer (a cl_mem), or none");
        if (rot->table_buffer && storage != CLATTN_STORAGE_BUFFER)
            return clattn_fail(ctx, CLATTN_ERROR_INVALID_ARGUMENT,
                               "rotary table_buffer is for the *_enqueue calls; the blocking "
                               "calls take cos_table and sin_table on the host");
        if ((host_tab || rot->table_buffer) && rot->table_len < 1)
            return clattn_fail(ctx, CLATTN_ERROR_INVALID_SHAPE,
                               "rotary table_len is %lld; the tables need at least one row",
                               LL(rot->table_len));
        if ((host_tab || rot->table_buffer) && rot->table_len > INT64_MAX / 8 / (dim / 2))
            return clattn_fail(ctx, CLATTN_ERROR_SIZE_OVERFLOW,
                               "rotary table_len %lld x dim/2 %lld floats (x2 tables) overflows "
                               "64 bits",
                               LL(rot->table_len), LL(dim / 2));
        if (rot->table_buffer) { /* [2, table_len, dim/2] float32 from byte 0 */
            clattn_view tv = clattn_view_packed(1, 2, rot->table_len, dim / 2);
            tv.buffer = rot->table_buffer;
            clattn_status st = clattn_view_check_buffer(ctx, "rotary table_buffer", &tv);
            if (st != CLATTN_SUCCESS)
                return st;
        }
    }
    if (!desc->k_new)
        return CLATTN_SUCCESS;
    if (!desc->kv_lens && !desc->kv_lens_buffer)
        return clattn_fail(ctx, CLATTN_ERROR_INVALID_ARGUMENT,
                           "k_new, v_new: kv_lens (or kv_lens_buffer) must give the cache's "
                           "lengths before the call: the new rows are written there");
    clattn_status st = clattn_view_make(ctx, "k_new", desc->k_new, storage, false, &cv->k_new);
    if (st == CLATTN_SUCCESS)
        st = clattn_view_make(ctx, "v_new", desc->v_new, storage, false, &cv->v_new);
    if (st == CLATTN_SUCCESS)
        st = clattn_view_check_dtype(ctx, "k_new", &cv->k_new, CLATTN_DT_FLOATS);
    if (st == CLATTN_SUCCESS)
        st = clattn_view_check_dtype(ctx, "v_new", &cv->v_new, CLATTN_DT_FLOATS);
    if (st != CLATTN_SUCCESS)
        return st;
    const clattn_view *kn = &cv->k_new, *vn = &cv->v_new, *kc = &cv->k;
    const int64_t want_k[4] = {cv->q.n[0], kc->n[1], kn->n[2], kc->n[3]};
    const int64_t want_v[4] = {cv->q.n[0], kc->n[1], kn->n[2], cv->v.n[3]};
    for (int d = 0; d < 4; d++)
        if (kn->n[d] != want_k[d] || vn->n[d] != want_v[d])
            return clattn_fail(ctx, CLATTN_ERROR_INVALID_SHAPE,
                               "k_new is [%lld, %lld, %lld, %lld] and v_new [%lld, %lld, %lld, "
                               "%lld]; expected [%lld, %lld, n_new, %lld] and [.., .., n_new, "
                               "%lld] (batch, h_kv, n_new, d_k / d_v)",
                               LL(kn->n[0]), LL(kn->n[1]), LL(kn->n[2]), LL(kn->n[3]), LL(vn->n[0]),
                               LL(vn->n[1]), LL(vn->n[2]), LL(vn->n[3]), LL(want_k[0]),
                               LL(want_k[1]), LL(want_k[3]), LL(want_v[3]));
    const int64_t n_new = kn->n[2], n_kv = kc->n[2];
    if (desc->kv_lens)
        for (int64_t b = 0; b < cv->q.n[0]; b++)
            if (desc->kv_lens[b] + n_new > n_kv)
                return clattn_fail(ctx, CLATTN_ERROR_INVALID_SHAPE,
                                   "kv_lens[%lld] is %d: with %lld appended row(s) the cache needs "
                                   "%lld keys; it holds n_kv %lld",
                                   LL(b), (int)desc->kv_lens[b], LL(n_new),
                                   LL(desc->kv_lens[b] + n_new), LL(n_kv));
    /* the caller's rotary tables cover every position rotated (host lengths; device
     * lengths: the kernels clamp) */
    if (rot && (rot->cos_table || rot->table_buffer) && desc->kv_lens)
        for (int64_t b = 0; b < cv->q.n[0]; b++) {
            const int64_t first = desc->kv_start + desc->kv_lens[b];
            const int64_t q_last = first + clattn_rope_q_step(desc) * (cv->q.n[2] - 1);
            const int64_t last = n_new - 1 > q_last - first ? first + n_new - 1 : q_last;
            if (first < 0 || last >= rot->table_len)
                return clattn_fail(ctx, CLATTN_ERROR_INVALID_SHAPE,
                                   "rotary tables: batch entry %lld rotates positions %lld..%lld; "
                                   "the tables hold 0..%lld (table_len %lld)",
                                   LL(b), LL(first), LL(last), LL(rot->table_len - 1),
                                   LL(rot->table_len));
        }
    /* K and V are written: writable views (no broadcast, no self-overlap) */
    clattn_view w;
    if ((st = clattn_view_make(ctx, "K (written by the append)", k, storage, true, &w)) !=
            CLATTN_SUCCESS ||
        (st = clattn_view_make(ctx, "V (written by the append)", v, storage, true, &w)) !=
            CLATTN_SUCCESS)
        return st;
    if (clattn_views_overlap(&cv->k, &cv->v))
        return clattn_fail(ctx, CLATTN_ERROR_INVALID_LAYOUT,
                           "K and V overlap: the append writes both");
    /* every output the call writes (key weight sums do not take an append) */
    const clattn_view *outs[4] = {&cv->o, cv->has_w ? &cv->w : NULL, cv->has_lse ? &cv->lse : NULL,
                                  cv->has_mlog ? &cv->mlog : NULL};
    static const char *const out_names[4] = {"O", "weights", "lse", "max_logits"};
    for (int a = 0; a < 4; a++)
        if (outs[a] &&
            (clattn_views_overlap(outs[a], &cv->k) || clattn_views_overlap(outs[a], &cv->v)))
            return clattn_fail(ctx, CLATTN_ERROR_INVALID_LAYOUT,
                               "%s overlaps K or V, which the append writes", out_names[a]);
    if (storage != CLATTN_STORAGE_HOST) {
        const clattn_view *news[2] = {kn, vn}, *caches[2] = {&cv->k, &cv->v};
        for (int a = 0; a < 2; a++)
            for (int c = 0; c < 2; c++)
                if (clattn_views_overlap(news[a], caches[c]))
                    return clattn_fail(ctx, CLATTN_ERROR_INVALID_LAYOUT,
                                       "%s overlaps %s in the same cl_mem (the append reads one "
                                       "while it writes the other)",
                                       a ? "v_new" : "k_new", c ? "V" : "K");
        for (int a = 0; a < 4; a++) /* the outputs are written while k_new, v_new are read */
            if (outs[a] && (clattn_views_overlap(outs[a], kn) || clattn_views_overlap(outs[a], vn)))
                return clattn_fail(ctx, CLATTN_ERROR_INVALID_LAYOUT,
                                   "%s overlaps k_new or v_new in the same cl_mem", out_names[a]);
        if ((st = clattn_view_check_buffer(ctx, "k_new", kn)) != CLATTN_SUCCESS ||
            (st = clattn_view_check_buffer(ctx, "v_new", vn)) != CLATTN_SUCCESS)
            return st;
    }
    cv->has_append = true;
    return CLATTN_SUCCESS;
#undef LL
}

/* One row an append writes: its element offset in the pool (head 0's row: each slot of
 * each page has its own, the pool being a writable view), key j of batch entry b. */
typedef struct {
    int64_t at, b, j;
} append_row;

static int by_offset(const void *x, const void *y)
{
    const int64_t a = ((const append_row *)x)->at, c = ((const append_row *)y)->at;
    return (a > c) - (a < c);
}

/* An append into a paged pool (host table and lengths): no two appended rows may go to
 * one slot of the pool (two batch entries' rows, or one entry's through a page twice in
 * its table), since the append kernel's work-items write them in no set order: the
 * slot's value would depend on the device (a write-write race). Rows appended into a
 * page other keys read are allowed: the append runs before the attention reads (the
 * other sequence then sees the new rows; copy-on-write of shared pages is the caller's). */
static clattn_status check_append_slots(clattn_context *ctx, const clattn_attention_desc *desc,
                                        const clattn_view *k, int64_t n_new)
{
    const int64_t batch = k->n[0], ps = k->page_size, n = batch * n_new;
    if (n == 0)
        return CLATTN_SUCCESS;
    append_row *w = malloc(sizeof *w * (size_t)n);
    if (!w)
        return clattn_fail(ctx, CLATTN_ERROR_OUT_OF_HOST_MEMORY, "paged append: %lld rows to check",
                           (long long)n);
    for (int64_t b = 0, i = 0; b < batch; b++)
        for (int64_t j = desc->kv_lens[b]; j < desc->kv_lens[b] + n_new; j++, i++)
            w[i] = (append_row){clattn_view_index(k, b, 0, j, 0), b, j};
    qsort(w, (size_t)n, sizeof *w, by_offset);
    clattn_status st = CLATTN_SUCCESS;
    for (int64_t i = 1; i < n && st == CLATTN_SUCCESS; i++)
        if (w[i].at == w[i - 1].at)
            st = clattn_fail(ctx, CLATTN_ERROR_INVALID_ARGUMENT,
                             "paged append: batch entry %lld (key %lld) and batch entry %lld (key "
                             "%lld) both append into slot %lld of page %d (block_table[%lld][%lld] "
                             "and [%lld][%lld]); appended rows need slots of their own",
                             (long long)w[i - 1].b, (long long)w[i - 1].j, (long long)w[i].b,
                             (long long)w[i].j, (long long)(w[i].j % ps),
                             (int)k->page_table[w[i].b * k->page_stride + w[i].j / ps],
                             (long long)w[i - 1].b, (long long)(w[i - 1].j / ps), (long long)w[i].b,
                             (long long)(w[i].j / ps));
    free(w);
    return st;
}

/* The host block table's entries that the call reads: those of the pages holding keys
 * j < kv_lens[b] (after check_extras validated the lengths; plus the appended rows). */
clattn_status clattn_check_block_table(clattn_context *ctx, const clattn_attention_desc *desc,
                                       const clattn_view *k)
{
    const int32_t *t = k->page_table;
    if (!k->paged || !t || desc->kv_lens_buffer) /* (device lengths: entries clamped) */
        return CLATTN_SUCCESS;
    const int64_t n_new = desc->k_new ? desc->k_new->shape[2] : 0; /* (checked before) */
    for (int64_t b = 0; b < k->n[0]; b++) {
        const int64_t len = desc->kv_lens ? desc->kv_lens[b] + n_new : k->n[2];
        const int64_t pages = clattn_ceil_div(len, k->page_size);
        for (int64_t p = 0; p < pages; p++) {
            const int32_t e = t[b * k->page_stride + p];
            if (e < 0 || e >= k->num_pages)
                return clattn_fail(ctx, CLATTN_ERROR_INVALID_ARGUMENT,
                                   "paged: block_table[%lld][%lld] is %d; the pools hold pages "
                                   "0..%lld (batch entry %lld reads %lld pages for its %lld keys)",
                                   (long long)b, (long long)p, (int)e, (long long)k->num_pages - 1,
                                   (long long)b, (long long)pages, (long long)len);
        }
    }
    return n_new > 0 && desc->kv_lens ? check_append_slots(ctx, desc, k, n_new) : CLATTN_SUCCESS;
}
