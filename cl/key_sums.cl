/* key_sums.cl — each key's total attention weight over the query rows (the desc's
 * key_weight_sums; H2O / SnapKV eviction scores), after the fused kernel has written the
 * LSE, with no n_q×n_kv matrix in memory:
 *     S[b, ho, j] = Σ_{h in ho's heads} Σ_{i, LSE_i ≠ −∞} exp(s_ij − LSE_i)
 * where ho is a query head (h_out = h_q) or a KV head summing its `group` query heads
 * (h_out = h_kv), s_ij the score the softmax saw (common.cl rule_at and score_terms16:
 * −∞ for keys the row does not see, so they add 0) and LSE_i the row's absolute LSE (with
 * the sink's share, so the sums are those of the weights output). Rows with no visible
 * key (LSE −∞) and padding rows add nothing; keys past the entry's kv_lens get 0. The sum
 * runs head by head, row by row in order: the same bits on every run.
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

/* Σ_c x[c]·t[c·KW + lane] over c < D_K, in four FMA chains (one chain is FMA-latency
 * bound on CPUs) */
float16 dot_keys(__local const float *x, __local const float *t)
{
    float16 a0 = 0.0f, a1 = 0.0f, a2 = 0.0f, a3 = 0.0f;
    int c = 0;
    for (; c + 4 <= D_K; c += 4) {
        a0 = fma((float16)(x[c]), vload16(0, t + c * KW), a0);
        a1 = fma((float16)(x[c + 1]), vload16(0, t + (c + 1) * KW), a1);
        a2 = fma((float16)(x[c + 2]), vload16(0, t + (c + 2) * KW), a2);
        a3 = fma((float16)(x[c + 3]), vload16(0, t + (c + 3) * KW), a3);
    }
    for (; c < D_K; c++)
        a0 = fma((float16)(x[c]), vload16(0, t + c * KW), a0);
    return (a0 + a1) + (a2 + a3);
}

__kernel __attribute__((reqd_work_group_size(WG, 1, 1))) void clattn_key_sums(
    __global const ELEM_T(Q_DT) *q, long q_off, long4 q_st, __global const ELEM_T(K_DT) *k,
    long k_off, long4 k_st, __global const lse_t *lse, long lse_off, long4 lse_st,
    __global float *ks, long ks_off, long4 ks_st, int h_q, int group, int h_out, long n_q,
    long n_kv, float scale, RULE_PARAMS, TERM_PARAMS, PAGE_PARAMS)
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
                const float l = (float)lse[view_at(lse_off, lse_st, b, h, i, 0)];
                if (l == -INFINITY)
                    continue; /* no visible key (the sink alone): adds nothing */
                const long ref = ALIBI ? alibi_ref(rule) : 0;
                const long mbase = MASK_T ? view_at(mt_off, mt_st, b, h, i, 0) : 0;
                const float16 s = score_terms16(
                    dot_keys(qs + r * DKP, kt + 16 * t) * scale, lane, rel_bound(rule.lo, j0, 16),
                    rel_bound(rule.hi, j0, 16), rel_key(rule.self, j0, 16), j0, n_kv, mt, mt_off,
                    mt_st, alibi, softcap, mbase, rule.diag, slope, ref);
                /* the scores are relative to the row's ALiBi reference, the LSE absolute */
                acc += exp((s - slope * (float)ref) - l);
            }
        }
    }
    float out[16];
    vstore16(acc, 0, out);
    for (int e = 0; e < 16; e++)
        if (j0 + e < n_kv)
            ks[view_at(ks_off, ks_st, b, ho, 0, j0 + e)] = j0 + e < nkv_b ? out[e] : 0.0f;
}
