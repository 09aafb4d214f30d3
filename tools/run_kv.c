/* clattn run's checks of the KV-cache inputs (--sinks, --k-scale / --v-scale,
 * --block-table, --k-new / --v-new, --rotary tables, --cu-seqlens-q / -k) against the
 * inputs' shapes, each returning -1 to go on or an exit status; and the desc of a run
 * from its options and inputs (run_make_desc, shared by the forward call in run.c and
 * the backward pass in run_backward.c), with the mask and length checks it needs. */
#include "cli.h"
#include "npy.h"
#include "run_args.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* --sinks: the file (already read) holds one float32 logit per query head, each finite
 * or -inf. Returns -1 to go on, or an exit status (1: a file's fault). */
int run_check_sinks(const char *path, const npy_data *sinks, int64_t h_q)
{
    if (sinks->ndim != 1 || (int64_t)sinks->count != h_q) {
        char shape[128];
        return cli_error("%s: --sinks needs one float32 logit per query head, shape (h_q,) = "
                         "(%lld,), not %s",
                         path, (long long)h_q, shape_text(sinks, shape, sizeof shape));
    }
    const float *logits = sinks->data;
    for (size_t h = 0; h < sinks->count; ++h) {
        if (isnan(logits[h]) || logits[h] == INFINITY) {
            return cli_error("%s: --sinks value %g (head %zu) is not a sink logit (finite, or "
                             "-inf for no sink)",
                             path, (double)logits[h], h);
        }
    }
    return -1;
}

/* --k-scale / --v-scale: `option` names the scales of the int8 K or V in `kv_path`, read
 * as `kv`. Exactly one of them and the int8 dtype, or neither; the scales (already read,
 * float32) have K's (V's) rank, its dimensions but the last, each of b and n_kv either
 * as in K or 1 (broadcast), and a last dimension of 1 (`paged`: K and V are pools, whose
 * num_pages and page_size stand for b and n_kv). Returns -1 to go on, or an exit status
 * (1: a file's fault). */
int run_check_scale(const char *option, const char *path, const npy_data *scale,
                    const char *kv_path, const npy_data *kv, int paged, int bshd)
{
    const int r = kv->ndim;
    if (kv->dtype == NPY_I8 && path == NULL) {
        return cli_error("%s: dtype '|i1' (int8, a quantized cache) needs its float32 scales: "
                         "add %s FILE",
                         kv_path, option);
    }
    if (path == NULL) {
        return -1;
    }
    if (kv->dtype != NPY_I8) {
        return cli_error("%s: %s goes with an int8 ('|i1') %s only, and %s is %s", path, option,
                         option[2] == 'k' ? "K" : "V", kv_path, npy_dtype_name(kv->dtype));
    }
    int ok = scale->ndim == r && scale->shape[r - 1] == 1;
    for (int i = 0; ok && i < r - 1; ++i) {
        const int heads = layout_dim(bshd, r, i) == 1; /* the heads must match: no broadcast */
        ok = scale->shape[i] == kv->shape[i] || (!heads && scale->shape[i] == 1);
    }
    if (!ok) {
        /* "(b|1, h_kv, n_kv|1, 1) = (2|1, 4, 16|1, 1)", from the rank of K (V) */
        static const char *const contiguous[4] = {"b|1", "h_kv", "n_kv|1", "1"};
        static const char *const pools[4] = {"num_pages|1", "h_kv", "page_size|1", "1"};
        const char *const *names = paged ? pools : contiguous;
        char want[64] = "", values[128] = "", shape[128];
        for (int i = 0; i < r; ++i) {
            const int d = layout_dim(bshd, r, i);
            const char *sep = i + 1 < r ? ", " : "";
            size_t used = strlen(want);
            snprintf(want + used, sizeof want - used, "%s%s", names[d], sep);
            used = strlen(values);
            if (d == 3) {
                snprintf(values + used, sizeof values - used, "1");
            } else {
                snprintf(values + used, sizeof values - used, "%lld%s%s", (long long)kv->shape[i],
                         d == 1 ? "" : "|1", sep);
            }
        }
        return cli_error("%s: %s needs float32 scales shaped (%s) = (%s) for %s, not %s", path,
                         option, want, values, kv_path, shape_text(scale, shape, sizeof shape));
    }
    return -1;
}

/* --block-table: the file (already read) is int32 (b, max_pages), b as in Q. Its
 * entries are the library's to check. Returns -1 to go on, or an exit status. */
int run_check_block_table(const char *path, const npy_data *table, int64_t batch)
{
    if (table->ndim != 2 || table->shape[0] != batch) {
        char shape[128];
        return cli_error("%s: --block-table needs an int32 table of shape (b, max_pages) with b "
                         "= %lld (Q's batch size), not %s",
                         path, (long long)batch, shape_text(table, shape, sizeof shape));
    }
    return -1;
}

/* --k-new / --v-new: (b, h_kv, n_new, d_k) and (b, h_kv, n_new, d_v) in Q's rank and
 * layout, b as in Q, h_kv and d as in K and V. Returns -1 to go on, or an exit status. */
int run_check_new_rows(const run_args *a, const run_inputs *in)
{
    const char *const options[2] = {"--k-new", "--v-new"};
    const char *const paths[2] = {a->k_new_file, a->v_new_file};
    const npy_data *const rows[2] = {&in->k_new, &in->v_new};
    const int64_t d[2] = {in->ks[3], in->vs[3]};
    int64_t s[2][4];
    for (int i = 0; i < 2; ++i) {
        shape4(rows[i]->shape, rows[i]->ndim, a->bshd, s[i]);
    }
    const int64_t n_new = s[0][2];
    for (int i = 0; i < 2; ++i) {
        if (rows[i]->ndim != in->q.ndim || s[i][0] != in->qs[0] || s[i][1] != in->ks[1] ||
            s[i][2] != n_new || s[i][3] != d[i]) {
            char b[24], h[24], dim[24], names_text[64], values_text[96], shape[128];
            snprintf(b, sizeof b, "%lld", (long long)in->qs[0]);
            snprintf(h, sizeof h, "%lld", (long long)in->ks[1]);
            snprintf(dim, sizeof dim, "%lld", (long long)d[i]);
            const char *const names[4] = {"b", "h_kv", "n_new", i == 0 ? "d_k" : "d_v"};
            const char *const values[4] = {b, h, i == 0 ? "n_new" : "n_new of --k-new", dim};
            return cli_error(
                "%s: %s needs rows shaped %s = %s in Q's rank %d, not %s (b is Q's, "
                "h_kv and %s those of %s)",
                paths[i], options[i], layout_text(a->bshd, 4, names, names_text, sizeof names_text),
                layout_text(a->bshd, 4, values, values_text, sizeof values_text), in->q.ndim,
                shape_text(rows[i], shape, sizeof shape), names[3], i == 0 ? a->k : a->v);
        }
    }
    return -1;
}

/* --rotary-cos / --rotary-sin: float32 (table_len, dim/2), the same shape. Returns -1
 * to go on, or an exit status. */
int run_check_rotary_tables(const run_args *a, const run_inputs *in)
{
    const int64_t dim = a->rotary_dim != 0 ? a->rotary_dim : in->qs[3];
    const char *const options[2] = {"--rotary-cos", "--rotary-sin"};
    const char *const paths[2] = {a->rotary_cos_file, a->rotary_sin_file};
    const npy_data *const tables[2] = {&in->rotary_cos, &in->rotary_sin};
    for (int i = 0; i < 2; ++i) {
        if (tables[i]->ndim != 2 || tables[i]->shape[1] != dim / 2 ||
            tables[i]->shape[0] != tables[0]->shape[0]) {
            char shape[128];
            return cli_error("%s: %s needs a float32 table of shape (table_len, dim/2) = (%s, "
                             "%lld), not %s",
                             paths[i], options[i], i == 0 ? "table_len" : "that of --rotary-cos",
                             (long long)(dim / 2), shape_text(tables[i], shape, sizeof shape));
        }
    }
    return -1;
}

/* --cu-seqlens-q / --cu-seqlens-k: b + 1 offsets each (lists, or int32 files already
 * read), as many in both; the library checks their values. Returns -1 to go on, or
 * an exit status. */
int run_check_cu_seqlens(const run_args *a, const run_inputs *in, const int32_t **cu_q,
                         const int32_t **cu_k, size_t *count)
{
    const char *const options[2] = {"--cu-seqlens-q", "--cu-seqlens-k"};
    const char *const paths[2] = {a->cu_q_file, a->cu_k_file};
    const npy_data *const files[2] = {&in->cu_q, &in->cu_k};
    const int32_t *const lists[2] = {a->cu_q, a->cu_k};
    const size_t list_counts[2] = {a->n_cu_q, a->n_cu_k};
    const int32_t **const out[2] = {cu_q, cu_k};
    size_t counts[2];
    for (int i = 0; i < 2; ++i) {
        counts[i] = list_counts[i];
        *out[i] = lists[i];
        if (paths[i] != NULL) {
            if (files[i]->ndim != 1 || files[i]->count < 1) {
                char shape[128];
                return cli_error("%s: %s needs b + 1 int32 offsets, shape (b + 1,), not %s",
                                 paths[i], options[i], shape_text(files[i], shape, sizeof shape));
            }
            counts[i] = files[i]->count;
            *out[i] = files[i]->data;
        }
    }
    if (counts[0] != counts[1]) {
        return cli_error("%s has %zu offsets but %s %zu (b + 1 each)", options[0], counts[0],
                         options[1], counts[1]);
    }
    *count = counts[0];
    return -1;
}

/* The mask tensor view of the mask file broadcast to (b, h_q, n_q, n_kv): dimensions of
 * 1 broadcast (b and h through shape 1, n_q and n_kv through stride 0). Returns 1, or
 * 0 after a message. */
static int mask_view(const run_args *a, const run_inputs *in, clattn_tensor *out)
{
    const npy_data *m = &in->mask;
    const int64_t target[4] = {in->qs[0], in->qs[1], in->qs[2], in->n_kv};
    int64_t fs[4], packed[4];
    shape4(m->shape, m->ndim, 0, fs); /* (b, h_q, n_q, n_kv) in either layout */
    static const char *const names[4] = {"b", "h_q", "n_q", "n_kv"};
    for (int i = 0; i < 4; ++i) {
        if (fs[i] != 1 && fs[i] != target[i]) {
            char shape[128];
            cli_error("%s: the mask's shape %s does not broadcast to (b, h_q, n_q, n_kv) = (%lld, "
                      "%lld, %lld, %lld): its %s dimension is %lld, need %s%lld",
                      a->mask_file, shape_text(m, shape, sizeof shape), (long long)target[0],
                      (long long)target[1], (long long)target[2], (long long)target[3], names[i],
                      (long long)fs[i], target[i] == 1 ? "" : "1 or ", (long long)target[i]);
            return 0;
        }
    }
    packed[3] = 1;
    for (int i = 2; i >= 0; --i) {
        packed[i] = packed[i + 1] * fs[i + 1];
    }
    *out = clattn_tensor_host(m->data, fs[0], fs[1], target[2], target[3]);
    out->dtype = m->dtype == NPY_F32 ? CLATTN_FLOAT32 : CLATTN_BOOL;
    for (int i = 0; i < 4; ++i) {
        /* never all 0 (that would mean packed): strides[3] or an earlier one is 1 */
        out->strides[i] = i >= 2 && fs[i] == 1 && target[i] != 1 ? 0 : packed[i];
        if (out->strides[i] == 0) { /* an explicit broadcast, as the library asks */
            out->broadcast |= CLATTN_BROADCAST(i);
        }
    }
    return 1;
}

/* --kv-lens / --q-lens: the list (exit status 2 when it does not fit the inputs) or
 * the int32 file (already read into `file`; exit status 1). Returns -1 to go on. */
static int check_lengths(const char *option, const char *what, const int32_t *list, size_t count,
                         const char *path, const npy_data *file, int64_t batch, int64_t limit,
                         const int32_t **out)
{
    if (path != NULL) {
        list = file->data;
        count = file->count;
        if (file->ndim != 1 || (int64_t)count != batch) {
            return cli_error("%s: %s needs one int32 per batch entry, shape (%lld,)", path, option,
                             (long long)batch);
        }
    } else if ((int64_t)count != batch) {
        return usage_error("clattn run", "%s has %zu value%s but the batch size of Q is %lld",
                           option, count, count == 1 ? "" : "s", (long long)batch);
    }
    for (size_t i = 0; i < count; ++i) {
        if (list[i] < 0 || list[i] > limit) {
            if (path != NULL) {
                return cli_error("%s: value %lld (batch entry %zu) is outside 0..%s (%lld)", path,
                                 (long long)list[i], i, what, (long long)limit);
            }
            return usage_error("clattn run", "%s: value %lld (batch entry %zu) is above %s (%lld)",
                               option, (long long)list[i], i, what, (long long)limit);
        }
    }
    *out = list;
    return -1;
}

/* The desc of the options and inputs (run_args.h): -1 to go on, or an exit status. */
int run_make_desc(const run_args *a, const run_inputs *in, run_desc *rd)
{
    const int ndim = in->q.ndim;
    clattn_attention_desc *desc = &rd->desc;
    memset(rd, 0, sizeof *rd);
    *desc = clattn_attention_desc_default();
    desc->scale = a->scale;
    desc->mask = a->mask;
    desc->algorithm = a->algorithm;
    desc->softcap = a->softcap;
    desc->masked_rows = a->masked_rows;
    desc->window = a->window;
    desc->window_left = a->window_left;
    desc->window_right = a->window_right;
    desc->q_start = a->q_start;
    desc->kv_start = a->kv_start;
    desc->alibi_slopes = a->alibi;
    desc->dropout_p = a->dropout_p; /* 0 without --dropout */
    desc->dropout_seed = a->dropout_seed;
    desc->dropout_offset = a->dropout_offset;
    desc->batch_invariant = a->batch_invariant;
    if (a->k_scale_file != NULL) { /* [b|1, h_kv, n_kv|1, 1]: extents of 1 broadcast */
        rd->k_scale = host_view(in->k_scale.data, in->k_scale.shape, ndim, CLATTN_FLOAT32, a->bshd);
        desc->k_scale = &rd->k_scale;
    }
    if (a->v_scale_file != NULL) {
        rd->v_scale = host_view(in->v_scale.data, in->v_scale.shape, ndim, CLATTN_FLOAT32, a->bshd);
        desc->v_scale = &rd->v_scale;
    }
    if (a->mask_file != NULL) {
        if (!mask_view(a, in, &rd->mask)) {
            return EXIT_FAILURE;
        }
        desc->mask_tensor = &rd->mask;
    }
    int lrc = -1;
    if (a->block_table_file != NULL) {
        lrc = run_check_block_table(a->block_table_file, &in->block_table, in->qs[0]);
        rd->paged = (clattn_paged_kv){in->block_table.data, NULL, in->block_table.shape[1]};
        desc->paged = &rd->paged;
    }
    if (lrc < 0 && a->k_new_file != NULL) {
        lrc = run_check_new_rows(a, in);
        rd->k_new = host_view(in->k_new.data, in->k_new.shape, ndim, in->dk_new, a->bshd);
        rd->v_new = host_view(in->v_new.data, in->v_new.shape, ndim, in->dv_new, a->bshd);
        desc->k_new = &rd->k_new;
        desc->v_new = &rd->v_new;
    }
    if (lrc < 0 && a->rotary) {
        rd->rotary = (clattn_rotary){
            a->rotary_dim, a->rotary_interleaved, a->rotary_base, NULL, NULL, NULL, 0};
        if (a->rotary_cos_file != NULL) {
            lrc = run_check_rotary_tables(a, in);
            rd->rotary.cos_table = in->rotary_cos.data;
            rd->rotary.sin_table = in->rotary_sin.data;
            rd->rotary.table_len = in->rotary_cos.shape[0];
        }
        desc->rotary = &rd->rotary;
    }
    if (lrc < 0 && a->cu_q_text != NULL) {
        const int32_t *cu_q = NULL, *cu_k = NULL;
        size_t n = 0;
        lrc = run_check_cu_seqlens(a, in, &cu_q, &cu_k, &n);
        rd->varlen = (clattn_varlen){cu_q, cu_k, (int64_t)n - 1, NULL, NULL, 0, 0};
        desc->varlen = &rd->varlen;
    }
    if (lrc < 0 && a->kv_lens_text != NULL) {
        lrc = check_lengths(a->kv_lens_option, "n_kv", a->kv_lens, a->n_kv_lens, a->kv_lens_file,
                            &in->kv_lens, in->qs[0], in->n_kv, &desc->kv_lens);
    }
    if (lrc < 0 && a->q_lens_text != NULL) {
        lrc = check_lengths("--q-lens", "n_q", a->q_lens, a->n_q_lens, a->q_lens_file, &in->q_lens,
                            in->qs[0], in->qs[2], &desc->q_lens);
    }
    if (lrc >= 0) {
        return lrc;
    }
    if (a->alibi != NULL && (int64_t)a->n_alibi != in->qs[1]) {
        return usage_error("clattn run",
                           "--alibi has %zu slope%s but Q has %lld heads (one slope "
                           "per query head)",
                           a->n_alibi, a->n_alibi == 1 ? "" : "s", (long long)in->qs[1]);
    }
    if (a->sinks_file != NULL) {
        lrc = run_check_sinks(a->sinks_file, &in->sinks, in->qs[1]);
        desc->sinks = in->sinks.data;
    }
    run_mods_desc(a, in, rd); /* --score-mod, --mask-mod, --mod-buffer (run_mods.c) */
    return lrc;
}
