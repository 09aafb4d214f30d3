/* The CPU reference: plain loops, every sum in double. The oracle for the tests and
 * for `clattn run --check`. Semantics match the kernels (docs/SEMANTICS.md):
 *  - score s_ij = softcap(scale · q_i·k_j) − slope_h·|a_i − j| + float_mask_ij for the
 *    visible keys (lengths, causal, window, no-self, bool mask), −∞ for the others;
 *  - masked keys (and keys whose weight is exactly 0) contribute nothing;
 *  - a row with no visible key outputs zeros (or NaN with CLATTN_MASKED_ROWS_NAN) and
 *    LSE −∞; rows past q_lens[b] output zeros and LSE −∞;
 *  - a sink (desc->sinks) is one more visible key of logit sinks[h] and value zero;
 *  - an int8 K or V (k_scale, v_scale) is dequantized in double: integer × row scale;
 *  - dropout (desc->dropout_p): each weight times clattn_dropout_factor (0, or 1/(1 − p)
 *    in double) in O and the weights; the row's sum and LSE are those before dropout;
 *  - NaN and +inf follow IEEE arithmetic within their own row. */
#include "internal.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* The scores of one query row into p[0..n_kv), −∞ where masked; returns the row max
 * (NaN wins, as in the kernels). */
/* The row's ALiBi reference (common.cl alibi_ref): the distance from the diagonal to the
 * nearest key of [lo, hi), 0 when the diagonal is inside or the range is empty. */
static int64_t alibi_ref(const clattn_attention_desc *desc, const clattn_row_rule *r)
{
    if (clattn_alibi_absolute(desc) || r->hi <= r->lo) /* score_mod: absolute */
        return 0;
    if (r->diag < r->lo)
        return r->lo - r->diag;
    if (r->diag >= r->hi)
        return r->diag - (r->hi - 1);
    return 0;
}

/* ref (may be NULL): the row's ALiBi reference, taken out of every bias so the
 * differences between keys stay exact at far positions (the caller adds −slope·ref to
 * the LSE); NULL: absolute biases (clattn_scores). */
static double row_scores(const clattn_attention_desc *desc, const clattn_view *q,
                         const clattn_view *k, const clattn_problem *ex, double scale, int64_t b,
                         int64_t h, int64_t hk, int64_t i, double *p, int64_t *ref)
{
    const int64_t n_q = q->n[2], n_kv = k->n[2], d_k = q->n[3];
    const clattn_row_rule rule = clattn_rule(desc, b, i, n_q, n_kv);
    const int64_t r0 = ref ? alibi_ref(desc, &rule) : 0;
    if (ref)
        *ref = r0;
    const double slope = desc->alibi_slopes ? (double)desc->alibi_slopes[h] : 0.0;
    double m = -INFINITY;
    for (int64_t j = 0; j < n_kv; j++) {
        p[j] = -INFINITY;
        if (!rule.valid || j < rule.lo || j >= rule.hi || j == rule.self)
            continue;
        double mval = 0.0;
        if (ex->has_mask) {
            mval = clattn_host_load(&ex->mask, clattn_view_index(&ex->mask, b, h, i, j));
            if (ex->mask.dtype == CLATTN_BOOL) {
                if (mval == 0.0)
                    continue;
                mval = 0.0;
            } else if (mval == -INFINITY) {
                continue; /* a −∞ float mask masks the key: its K and V are never read */
            }
        }
        double dot = 0.0;
        for (int64_t c = 0; c < d_k; c++)
            dot += (double)clattn_host_load(q, clattn_view_index(q, b, h, i, c)) *
                   (double)clattn_host_load(k, clattn_view_index(k, b, hk, j, c));
        if (ex->has_k_scale) /* an int8 K: the row's integers times its scale */
            dot *= (double)clattn_host_load(&ex->k_scale,
                                            clattn_view_index(&ex->k_scale, b, hk, j, 0));
        double s = scale * dot;
        if (desc->softcap > 0.0f)
            s = desc->softcap * tanh(s / desc->softcap);
        if (slope != 0.0) { /* |a_i − j| − ref: an exact integer, small near the keys */
            const int64_t dist = rule.diag > j ? rule.diag - j : j - rule.diag;
            s -= slope * (double)(dist - r0);
        }
        s += mval;
        const clattn_mods *mods = desc->mods; /* the snippets' C twins (clattn_mods.h) */
        if (mods) {
            const void *bufs[CLATTN_MAX_MOD_BUFFERS];
            for (int u = 0; u < mods->n_buffers; u++)
                bufs[u] = mods->buffers[u].host;
            const int64_t qp = desc->q_start + i, kp = desc->kv_start + j;
            if (mods->score_mod)
                s = mods->score_mod_host(s, (int)b, (int)h, qp, kp, bufs, mods->user);
            if (mods->mask_mod && !mods->mask_mod_host((int)b, (int)h, qp, kp, bufs, mods->user))
                continue;
        }
        p[j] = s;
        if (s > m || isnan(s))
            m = isnan(m) ? m : s;
    }
    return m;
}

/* Element c of a row at position pos with rotary embeddings (append.cl's rope_at in
 * float64): pair p turns by pos·f[p] (f: clattn_rope_freqs, float32 values), or by the
 * caller's table entries cos_table / sin_table[pos][p]. */
static double rope64(const clattn_view *x, int64_t b, int64_t h, int64_t s, int64_t c,
                     const clattn_rotary *r, int64_t dim, const float *f, int64_t pos)
{
    const double xc = clattn_host_load(x, clattn_view_index(x, b, h, s, c));
    if (c >= dim)
        return xc;
    const int64_t half = dim / 2;
    const int64_t pair = r->interleaved ? c / 2 : (c < half ? c : c - half);
    const int64_t o = r->interleaved ? (c ^ 1) : (c < half ? c + half : c - half);
    const bool first = r->interleaved ? c % 2 == 0 : c < half;
    const double xo = clattn_host_load(x, clattn_view_index(x, b, h, s, o));
    double cs, sn;
    if (r->cos_table) { /* the caller's tables (positions validated within them) */
        cs = (double)r->cos_table[pos * half + pair];
        sn = (double)r->sin_table[pos * half + pair];
    } else {
        const double a = (double)pos * (double)f[pair];
        cs = cos(a);
        sn = sin(a);
    }
    return first ? xc * cs - xo * sn : xc * cs + xo * sn;
}

/* The attention of a resolved host problem (after any append). */
static clattn_status attend(const clattn_attention_desc *desc, const clattn_problem ex);

clattn_status clattn_reference_attention(const clattn_attention_desc *desc,
                                         const clattn_tensor *q_t, const clattn_tensor *k_t,
                                         const clattn_tensor *v_t, const clattn_tensor *o_t)
{
    const clattn_status st_twins = clattn_mods_check_twins(desc);
    if (st_twins != CLATTN_SUCCESS)
        return st_twins;
    if (desc && desc->varlen)
        return clattn_varlen_run(NULL, CLATTN_VARLEN_REFERENCE, desc, q_t, k_t, v_t, o_t, 0, NULL,
                                 NULL, NULL);
    clattn_problem ex;
    clattn_status st =
        clattn_resolve_attention(NULL, desc, q_t, k_t, v_t, o_t, CLATTN_STORAGE_HOST, &ex);
    if (st != CLATTN_SUCCESS || !ex.has_append)
        return st == CLATTN_SUCCESS ? attend(desc, ex) : st;
    /* the append (k_new, v_new into K, V at kv_lens, rotated), then the attention over
     * kv_lens + n_new keys with Q rotated (rounded to float32, as the kernels' Q) */
    const int64_t batch = ex.q.n[0], h_kv = ex.k.n[1], n_new = ex.k_new.n[2];
    const int64_t d_k = ex.k.n[3], d_v = ex.v.n[3];
    const clattn_rotary *rot = desc->rotary;
    const int64_t dim = rot ? (rot->dim ? rot->dim : d_k) : 0;
    float *f = malloc(sizeof(float) * (size_t)(dim / 2 + 1));
    int32_t *lens = malloc(sizeof(int32_t) * (size_t)(batch + 1));
    float *qr = rot ? malloc(sizeof(float) * (size_t)(ex.q.count + 1)) : NULL;
    if (!f || !lens || (rot && !qr)) {
        free(f);
        free(lens);
        free(qr);
        return clattn_fail(NULL, CLATTN_ERROR_OUT_OF_HOST_MEMORY, "reference: append buffers");
    }
    if (rot)
        clattn_rope_freqs(rot, dim, f);
    for (int64_t b = 0; b < batch; b++) {
        const int64_t len = desc->kv_lens[b];
        lens[b] = (int32_t)(len + n_new);
        for (int64_t h = 0; h < h_kv; h++)
            for (int64_t t = 0; t < n_new; t++) {
                const int64_t pos = desc->kv_start + len + t;
                for (int64_t c = 0; c < d_k; c++)
                    clattn_host_store(
                        &ex.k, clattn_view_index(&ex.k, b, h, len + t, c),
                        (float)(rot ? rope64(&ex.k_new, b, h, t, c, rot, dim, f, pos)
                                    : clattn_host_load(&ex.k_new,
                                                       clattn_view_index(&ex.k_new, b, h, t, c))));
                for (int64_t c = 0; c < d_v; c++)
                    clattn_host_store(
                        &ex.v, clattn_view_index(&ex.v, b, h, len + t, c),
                        clattn_host_load(&ex.v_new, clattn_view_index(&ex.v_new, b, h, t, c)));
            }
    }
    if (rot) {
        const clattn_view q0 = ex.q;
        ex.q = clattn_view_packed(q0.n[0], q0.n[1], q0.n[2], q0.n[3]);
        ex.q.host = qr;
        for (int64_t b = 0; b < batch; b++)
            for (int64_t h = 0; h < q0.n[1]; h++)
                for (int64_t i = 0; i < q0.n[2]; i++)
                    for (int64_t c = 0; c < d_k; c++)
                        qr[((b * q0.n[1] + h) * q0.n[2] + i) * d_k + c] = (float)rope64(
                            &q0, b, h, i, c, rot, dim, f,
                            desc->kv_start + desc->kv_lens[b] + clattn_rope_q_step(desc) * i);
    }
    clattn_attention_desc after = *desc;
    after.kv_lens = lens;
    st = attend(&after, ex);
    free(f);
    free(lens);
    free(qr);
    return st;
}

static clattn_status attend(const clattn_attention_desc *desc, const clattn_problem ex)
{
    const clattn_view q = ex.q, k = ex.k, v = ex.v, o = ex.o, w = ex.w;
    clattn_clear_error(NULL);

    const int64_t batch = q.n[0], h_q = q.n[1], n_q = q.n[2], d_k = q.n[3];
    const int64_t n_kv = k.n[2], d_v = v.n[3];
    if (batch == 0 || h_q == 0 || (n_q == 0 && !ex.has_ksum))
        return CLATTN_SUCCESS; /* (no row: the loops below write key weight sums of 0) */
    const int64_t group = clattn_group(h_q, k.n[1]);
    const double scale = clattn_effective_scale(desc, d_k);
    const bool mean = desc->weights && desc->weights_head_mean;
    const bool nan_rows = desc->masked_rows == CLATTN_MASKED_ROWS_NAN;

    double *p = malloc(sizeof(double) * (size_t)(n_kv > 0 ? n_kv : 1));
    double *acc = malloc(sizeof(double) * (size_t)d_v);
    /* head mean: per (b, i) sums over heads, in double */
    double *wsum =
        mean ? calloc((size_t)(n_kv > 0 ? n_kv : 1) * (size_t)n_q, sizeof(double)) : NULL;
    /* key weight sums: per (b, head of the output, j), in double */
    const int64_t h_out = ex.has_ksum ? ex.ksum.n[1] : 0;
    double *ksum =
        ex.has_ksum ? calloc((size_t)(h_out * n_kv > 0 ? h_out * n_kv : 1), sizeof(double)) : NULL;
    if (!p || !acc || (mean && !wsum) || (ex.has_ksum && !ksum)) {
        free(p);
        free(acc);
        free(wsum);
        free(ksum);
        return clattn_fail(NULL, CLATTN_ERROR_OUT_OF_HOST_MEMORY,
                           "reference: cannot allocate %lld doubles", (long long)(n_kv + d_v));
    }
    for (int64_t b = 0; b < batch; b++) {
        if (mean)
            memset(wsum, 0, sizeof(double) * (size_t)(n_kv > 0 ? n_kv : 1) * (size_t)n_q);
        if (ksum)
            memset(ksum, 0, sizeof(double) * (size_t)(h_out * n_kv > 0 ? h_out * n_kv : 1));
        for (int64_t h = 0; h < h_q; h++) {
            const int64_t hk = h / group;
            for (int64_t i = 0; i < n_q; i++) {
                const bool valid = clattn_rule(desc, b, i, n_q, n_kv).valid;
                int64_t ref = 0;
                double m = row_scores(desc, &q, &k, &ex, scale, b, h, hk, i, p, &ref);
                const double shift =
                    desc->alibi_slopes ? -(double)desc->alibi_slopes[h] * (double)ref : 0.0;
                /* the sink: one more key of logit sinks[h] (relative to the row's ALiBi
                 * reference, as the scores are) and value zero; not for padding rows */
                const double sink =
                    desc->sinks && valid ? (double)desc->sinks[h] - shift : -INFINITY;
                if (ex.has_mlog) /* the scores' max, before the sink */
                    clattn_host_store(&ex.mlog, clattn_view_index(&ex.mlog, b, h, i, 0),
                                      m == -INFINITY ? -INFINITY : (float)(m + shift));
                if (sink > m)
                    m = sink;
                const bool empty = (m == -INFINITY);
                /* padding rows (past q_lens) are zeros; fully masked rows zeros or NaN */
                const double fill = (!valid || !nan_rows) ? 0.0 : NAN;
                double l = 0.0;
                for (int64_t c = 0; c < d_v; c++)
                    acc[c] = 0.0;
                for (int64_t j = 0; j < n_kv; j++) {
                    p[j] = empty ? 0.0 : exp(p[j] - m);
                    if (p[j] == 0.0)
                        continue; /* masked or zero weight: contributes nothing */
                    l += p[j];
                    /* dropout: a dropped weight adds nothing (l keeps it), a kept one
                     * counts 1/(1 − p) times */
                    const double z = clattn_dropout_factor(desc, b * h_q + h, i, j);
                    if (z == 0.0)
                        continue;
                    /* an int8 V: the row's integers times its scale */
                    const double vs =
                        ex.has_v_scale
                            ? (double)clattn_host_load(&ex.v_scale,
                                                       clattn_view_index(&ex.v_scale, b, hk, j, 0))
                            : 1.0;
                    for (int64_t c = 0; c < d_v; c++)
                        acc[c] += p[j] * z * vs *
                                  (double)clattn_host_load(&v, clattn_view_index(&v, b, hk, j, c));
                }
                if (!empty && sink != -INFINITY)
                    l += exp(sink - m); /* its value is zero: nothing into acc */
                for (int64_t c = 0; c < d_v; c++)
                    clattn_host_store(&o, clattn_view_index(&o, b, h, i, c),
                                      empty ? (float)fill : (float)(acc[c] / l));
                if (ex.has_lse)
                    clattn_host_store64(&ex.lse, clattn_view_index(&ex.lse, b, h, i, 0),
                                        empty ? -INFINITY : m + log(l) + shift);
                /* the row's weights into its output head's key sums (a row with no
                 * visible key adds nothing) */
                const int64_t ho = h_out == h_q ? h : hk;
                for (int64_t j = 0; ksum && !empty && j < n_kv; j++)
                    ksum[ho * n_kv + j] += p[j] / l;
                for (int64_t j = 0; desc->weights && j < n_kv; j++) {
                    const double wij =
                        empty ? fill : p[j] / l * clattn_dropout_factor(desc, b * h_q + h, i, j);
                    if (mean)
                        wsum[i * n_kv + j] += wij;
                    else
                        clattn_host_store(&w, clattn_view_index(&w, b, h, i, j), (float)wij);
                }
            }
        }
        for (int64_t i = 0; mean && i < n_q; i++)
            for (int64_t j = 0; j < n_kv; j++)
                clattn_host_store(&w, clattn_view_index(&w, b, 0, i, j),
                                  (float)(wsum[i * n_kv + j] / (double)h_q));
        for (int64_t ho = 0; ksum && ho < h_out; ho++)
            for (int64_t j = 0; j < n_kv; j++)
                clattn_host_store(&ex.ksum, clattn_view_index(&ex.ksum, b, ho, 0, j),
                                  (float)ksum[ho * n_kv + j]);
    }
    free(p);
    free(acc);
    free(wsum);
    free(ksum);
    return CLATTN_SUCCESS;
}

clattn_status clattn_reference_scores(const clattn_attention_desc *desc, const clattn_tensor *q_t,
                                      const clattn_tensor *k_t, const clattn_tensor *s_t)
{
    clattn_stage_call sp;
    clattn_status st = clattn_resolve_stage(NULL, CLATTN_STAGE_SCORES, desc, q_t, k_t, s_t,
                                            CLATTN_STORAGE_HOST, &sp);
    if (st == CLATTN_SUCCESS)
        st = clattn_mods_check_twins(desc);
    if (st != CLATTN_SUCCESS)
        return st;
    clattn_problem ex; /* the mask, as row_scores reads it */
    memset(&ex, 0, sizeof ex);
    ex.has_mask = sp.has_mask;
    ex.mask = sp.mask;
    const clattn_view *q = &sp.a, *k = &sp.b, *s = &sp.c;
    const int64_t batch = q->n[0], h_q = q->n[1], n_q = q->n[2], n_kv = k->n[2];
    if (s->count == 0)
        return CLATTN_SUCCESS;
    const int64_t group = clattn_group(h_q, k->n[1]);
    const double scale = clattn_effective_scale(desc, q->n[3]);
    double *p = malloc(sizeof(double) * (size_t)(n_kv > 0 ? n_kv : 1));
    if (!p)
        return clattn_fail(NULL, CLATTN_ERROR_OUT_OF_HOST_MEMORY,
                           "reference: cannot allocate %lld doubles", (long long)n_kv);
    for (int64_t b = 0; b < batch; b++)
        for (int64_t h = 0; h < h_q; h++)
            for (int64_t i = 0; i < n_q; i++) {
                (void)row_scores(desc, q, k, &ex, scale, b, h, h / group, i, p, NULL);
                for (int64_t j = 0; j < n_kv; j++)
                    clattn_host_store(s, clattn_view_index(s, b, h, i, j), (float)p[j]);
            }
    free(p);
    return CLATTN_SUCCESS;
}

/* The backward pass of clattn_reference_attention (FlashAttention-2's backward, Dao 2023,
 * Algorithm 2, as plain loops in double): per row, P is recomputed from the scores, then
 *   D_i = Σ_c dO_ic·O_ic,  dP_ij = dO_i·V_j,  dS_ij = P_ij·(dP_ij − D_i)·g_ij,
 *   dQ_i += scale·Σ_j dS_ij K_j,  dK_j += scale·Σ_i dS_ij Q_i,  dV_j += Σ_i P_ij dO_i
 * with g_ij = 1 − tanh²(scale·q_i·k_j / softcap) under a softcap (1 otherwise); ALiBi and
 * float masks are constants of s, so they take no gradient. dK and dV sum over every
 * query head of a KV head's group. A row with no visible key (and a padding row) has
 * P = 0: it adds nothing, and its dQ row is 0. Keys of weight exactly 0 add nothing.
 * Sinks (desc->sinks) are one more key of value zero in l; d_sinks[h] = −Σ P_sink·D_i. */
clattn_status
clattn_reference_attention_backward(const clattn_attention_desc *desc, const clattn_tensor *q_t,
                                    const clattn_tensor *k_t, const clattn_tensor *v_t,
                                    const clattn_tensor *do_t, const clattn_tensor *dq_t,
                                    const clattn_tensor *dk_t, const clattn_tensor *dv_t)
{
    if (!desc)
        return clattn_fail(NULL, CLATTN_ERROR_INVALID_ARGUMENT, "desc is NULL");
    clattn_status st0 = clattn_check_backward_desc(NULL, desc);
    if (st0 == CLATTN_SUCCESS)
        st0 = clattn_mods_check_twins(desc);
    if (st0 != CLATTN_SUCCESS)
        return st0;
    clattn_attention_desc fwd = *desc; /* the weights and LSE outputs play no part */
    fwd.weights = NULL;
    fwd.lse = NULL;
    clattn_problem ex; /* dO is checked in O's place: the same shape and dtypes */
    clattn_status st =
        clattn_resolve_attention(NULL, &fwd, q_t, k_t, v_t, do_t, CLATTN_STORAGE_HOST, &ex);
    if (st != CLATTN_SUCCESS)
        return st;
    const clattn_tensor *const outs_t[4] = {dq_t, dk_t, dv_t, desc->d_sinks};
    clattn_view g[4];
    st = clattn_resolve_gradients(NULL, &ex, NULL, outs_t, CLATTN_STORAGE_HOST, g);
    if (st != CLATTN_SUCCESS)
        return st;
    clattn_clear_error(NULL);
    const clattn_view q = ex.q, k = ex.k, v = ex.v, d_o = ex.o;
    const int64_t batch = q.n[0], h_q = q.n[1], n_q = q.n[2], d_k = q.n[3];
    const int64_t h_kv = k.n[1], n_kv = k.n[2], d_v = v.n[3];
    const int64_t group = clattn_group(h_q, h_kv);
    const double scale = clattn_effective_scale(desc, d_k);
    /* dK and dV of one batch entry in double, [h_kv][n_kv][d] */
    const size_t kv_elems = (size_t)(h_kv * n_kv);
    double *p = malloc(sizeof(double) * (size_t)(n_kv > 0 ? n_kv : 1));
    double *row = malloc(sizeof(double) * (size_t)(2 * d_k + 2 * d_v + 1));
    double *dk = calloc(kv_elems * (size_t)d_k + 1, sizeof(double));
    double *dv = calloc(kv_elems * (size_t)d_v + 1, sizeof(double));
    double *dsink = calloc((size_t)h_q + 1, sizeof(double)); /* ∂L/∂sinks[h] */
    if (!p || !row || !dk || !dv || !dsink) {
        free(p);
        free(row);
        free(dk);
        free(dv);
        free(dsink);
        return clattn_fail(NULL, CLATTN_ERROR_OUT_OF_HOST_MEMORY,
                           "reference backward: cannot allocate %lld doubles",
                           (long long)(kv_elems * (size_t)(d_k + d_v)));
    }
    /* one query row's dQ, O, Q and dO */
    double *dq = row, *o = row + d_k, *qi = o + d_v, *goi = qi + d_k;
    for (int64_t b = 0; b < batch; b++) {
        memset(dk, 0, sizeof(double) * kv_elems * (size_t)d_k);
        memset(dv, 0, sizeof(double) * kv_elems * (size_t)d_v);
        for (int64_t h = 0; h < h_q; h++) {
            const int64_t hk = h / group;
            for (int64_t i = 0; i < n_q; i++) {
                const double m_keys = row_scores(&fwd, &q, &k, &ex, scale, b, h, hk, i, p, NULL);
                /* the sink: one more key of logit sinks[h] and value zero (not for padding
                 * rows); its weight P_sink takes the gradient −P_sink·D_i */
                const double sink = desc->sinks && clattn_rule(desc, b, i, n_q, n_kv).valid
                                        ? (double)desc->sinks[h]
                                        : -INFINITY;
                const double m = sink > m_keys ? sink : m_keys;
                for (int64_t c = 0; c < d_k; c++)
                    dq[c] = 0.0;
                if (m_keys != -INFINITY) {
                    for (int64_t c = 0; c < d_k; c++)
                        qi[c] = clattn_host_load(&q, clattn_view_index(&q, b, h, i, c));
                    for (int64_t c = 0; c < d_v; c++)
                        goi[c] = clattn_host_load(&d_o, clattn_view_index(&d_o, b, h, i, c));
                    double l = 0.0;
                    for (int64_t j = 0; j < n_kv; j++)
                        l += (p[j] = exp(p[j] - m));
                    if (sink != -INFINITY)
                        l += exp(sink - m);
                    for (int64_t c = 0; c < d_v; c++)
                        o[c] = 0.0;
                    for (int64_t j = 0; j < n_kv; j++) {
                        p[j] /= l;
                        const double z = clattn_dropout_factor(desc, b * h_q + h, i, j);
                        for (int64_t c = 0; p[j] * z != 0.0 && c < d_v; c++)
                            o[c] +=
                                p[j] * z * clattn_host_load(&v, clattn_view_index(&v, b, hk, j, c));
                    }
                    double dsum = 0.0; /* D_i */
                    for (int64_t c = 0; c < d_v; c++)
                        dsum += o[c] * goi[c];
                    if (sink != -INFINITY)
                        dsink[h] -= exp(sink - m) / l * dsum;
                    for (int64_t j = 0; j < n_kv; j++) {
                        if (p[j] == 0.0)
                            continue; /* masked, or a weight that underflowed to 0 */
                        /* dropout: dP_ij = Z_ij·dO_i·V_j and dV_j += P_ij·Z_ij·dO_i (Z the
                         * factor, 0 or 1/(1 − p)); a dropped weight still has
                         * dS_ij = −P_ij·D_i */
                        const double z = clattn_dropout_factor(desc, b * h_q + h, i, j);
                        double dp = 0.0;
                        for (int64_t c = 0; z != 0.0 && c < d_v; c++) {
                            dp += goi[c] * clattn_host_load(&v, clattn_view_index(&v, b, hk, j, c));
                            dv[(hk * n_kv + j) * d_v + c] += p[j] * z * goi[c];
                        }
                        dp *= z;
                        double ds = p[j] * (dp - dsum) * scale;
                        if (desc->softcap > 0.0f) {
                            double dot = 0.0;
                            for (int64_t c = 0; c < d_k; c++)
                                dot += qi[c] *
                                       clattn_host_load(&k, clattn_view_index(&k, b, hk, j, c));
                            const double t = tanh(scale * dot / desc->softcap);
                            ds *= 1.0 - t * t;
                        }
                        for (int64_t c = 0; c < d_k; c++) {
                            dq[c] += ds * clattn_host_load(&k, clattn_view_index(&k, b, hk, j, c));
                            dk[(hk * n_kv + j) * d_k + c] += ds * qi[c];
                        }
                    }
                }
                for (int64_t c = 0; c < d_k; c++)
                    clattn_host_store(&g[0], clattn_view_index(&g[0], b, h, i, c), (float)dq[c]);
            }
        }
        for (int64_t hk = 0; hk < h_kv; hk++)
            for (int64_t j = 0; j < n_kv; j++) {
                for (int64_t c = 0; c < d_k; c++)
                    clattn_host_store(&g[1], clattn_view_index(&g[1], b, hk, j, c),
                                      (float)dk[(hk * n_kv + j) * d_k + c]);
                for (int64_t c = 0; c < d_v; c++)
                    clattn_host_store(&g[2], clattn_view_index(&g[2], b, hk, j, c),
                                      (float)dv[(hk * n_kv + j) * d_v + c]);
            }
    }
    for (int64_t h = 0; desc->d_sinks && h < h_q; h++)
        clattn_host_store(&g[3], clattn_view_index(&g[3], 0, h, 0, 0), (float)dsink[h]);
    free(p);
    free(row);
    free(dk);
    free(dv);
    free(dsink);
    return CLATTN_SUCCESS;
}
