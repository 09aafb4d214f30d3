/* key_sums.cl — each key's total attention weight over the query rows (the desc's
 * key_weight_sums; H2O / SnapKV eviction scores), after the fused kernel has written each
 * row's max m_i and log-sum l_i of its relative scores (lse_relative, as for the weights
 * pass), with no n_q×n_kv matrix in memory:
 *     S[b, ho, j] = Σ_{h in ho's heads} Σ_{i, m_i ≠ −∞} exp((s_ij − m_i) − l_i)
 * where ho is a query head (h_out = h_q) or a KV head summing its `group` query heads
 * (h_out = h_kv), s_ij the relative score the softmax saw (common.cl rule_at and
 * score_terms16: −∞ for keys the row does not see, so they add 0), its dot product in
 * the tiled kernels' order (one FMA chain over d_k, then the scale), and m_i, l_i include
 * the sink's share: the weights the weights pass (weights_from_lse.cl) gives, by the same
 * formula; s − m stays exact for large scores. Rows with no visible key and padding rows
 * add nothing; keys past the entry's kv_lens get 0. The sum runs head by head, row by row
 * in order: the same bits on every run. Work-item 0 of each (b, ho) also writes the
 * caller's LSE (absolute: m + l − the row's ALiBi constant) of its heads' rows.
 * Index map: NDRange (⌈n_kv / (16·WG)⌉·WG, batch·h_out), work-group (WG, 1): work-item t
 * of group g owns the 16 keys j0 = (g·WG + t)·16 …; the group stages its 16·WG K rows
 * transposed in local memory once, then RT query rows at a time.
 */
#ifndef D_K
#define D_K 64
#endif
#ifndef WG
#define WG 4 /* work-items per group, 16 keys each */
#endif
#ifndef RT
#define RT 16 /* query rows staged per step */
#endif
#define KW (16 * WG)                 /* keys per group */
#define DK_N (D_K > 0 ? D_K : 1)     /* (a head dim may be 0) */
#define DKP PAD16(DK_N)              /* a staged Q row's stride */

/* Σ_c x[c]·t[c·KW + lane] over c < D_K: one FMA chain in c order, as fused.cl and
 * scores.cl form their dot products (the same bits on the CPU family's tiled path, so
 * s − m is exactly what the softmax saw) */
float16 dot_keys(__local const float *x, __local const float *t)
{
    float16 a = 0.0f;
    for (int c = 0; c < D_K; c++)
        a = fma((float16)(x[c]), vload16(0, t + c * KW), a);
    return a;
}

__kernel __attribute__((reqd_work_group_size(WG, 1, 1))) void clattn_key_sums(
    __global const ELEM_T(Q_DT) *q, long q_off, long4 q_st, __global const ELEM_T(K_DT) *k,
    long k_off, long4 k_st, __global const lse_t *lse, long lse_off, long4 lse_st,
    __global lse_t *lse_out, long lo_off, long4 lo_st, __global float *ks, long ks_off,
    long4 ks_st, int h_q, int group, int h_out, long n_q, long n_kv, float scale, RULE_PARAMS,
    TERM_PARAMS, PAGE_PARAMS)
{
    __local float kt[DK_N * KW]; /* the group's keys, transposed: kt[c·KW + key] */
    __local float qs[RT * DKP];  /* RT query rows, row-major */
    const int t = get_local_id(0);
    const long jg = get_group_id(0) * KW, j0 = jg + 16 * t;
    const long bh = get_global_id(1), b = bh / h_out, ho = bh % h_out;
    const bool per_query_head = h_out == h_q;
    const long hk = per_query_head ? ho / group : ho;
    const long h_first = per_query_head ? ho : ho * group;
    const long h_end = per_query_head ? ho + 1 : ho * group + group;
    const int16 lane = (int16)(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    /* keys past the entry's length are staged as zeros and summed as nothing */
    const long nkv_b = seq_len(kv_lens, b, n_kv);
    TYPED(stage_rows, K_DT)(k, k_off, k_st, b, hk, jg, nkv_b, D_K, D_K, KW, WG, true, kt KV_PAGES);
    float16 acc = 0.0f;
    for (long h = h_first; h < h_end; h++) {
        const float slope = ALIBI ? alibi[h] : 0.0f;
        for (long i = 0; lse_out && get_global_id(0) == 0 && i < n_q; i++) {
            const long la = view_at(lse_off, lse_st, b, h, i, 0);
            const lse_t m = lse[la];
            lse_out[view_at(lo_off, lo_st, b, h, i, 0)] =
                m == -INFINITY ? (lse_t)(-INFINITY)
                               : m + lse[la + lse_st.s3] -
                                     (ALIBI ? (lse_t)slope * (lse_t)alibi_ref(rule_at(
                                                                 RULE_ARGS, b, i, n_q, n_kv))
                                            : (lse_t)0.0f);
        }
        for (long i0 = 0; i0 < n_q; i0 += RT) {
            barrier(CLK_LOCAL_MEM_FENCE); /* the K tile staged; the last Q rows read */
            TYPED(stage_rows, Q_DT)(q, q_off, q_st, b, h, i0, n_q, D_K, DKP, RT, WG, false,
                                    qs NO_PAGES);
            barrier(CLK_LOCAL_MEM_FENCE); /* the Q rows staged */
            for (int r = 0; r < RT && i0 + r < n_q; r++) {
                const long i = i0 + r;
                const row_rule rule = rule_at(RULE_ARGS, b, i, n_q, n_kv);
                if (rule.hi <= rule.lo || rule.hi <= j0 || rule.lo >= j0 + 16)
                    continue; /* none of this work-item's keys is visible to row i */
                const long la = view_at(lse_off, lse_st, b, h, i, 0);
                const float m = (float)lse[la], l = (float)lse[la + lse_st.s3];
                if (m == -INFINITY)
                    continue; /* no visible key: adds nothing */
                const long ref = ALIBI ? alibi_ref(rule) : 0;
                const long mbase = MASK_T ? view_at(mt_off, mt_st, b, h, i, 0) : 0;
                const float16 s = score_terms16(
                    dot_keys(qs + r * DKP, kt + 16 * t) * scale, lane, rel_bound(rule.lo, j0, 16),
                    rel_bound(rule.hi, j0, 16), rel_key(rule.self, j0, 16), j0, n_kv, TERM_ARGS,
                    mbase, rule.diag, slope, ref, b, h, i);
                acc += exp((s - m) - l); /* (both relative to the row's ALiBi reference) */
            }
        }
    }
    float out[16];
    vstore16(acc, 0, out);
    for (int e = 0; e < 16; e++)
        if (j0 + e < n_kv)
            ks[view_at(ks_off, ks_st, b, ho, 0, j0 + e)] = j0 + e < nkv_b ? out[e] : 0.0f;
}
