/* scores.cl — S = scale · Q·Kᵀ, masked entries set to −∞.
 *
 * Reference loop, per (b, h):
 *     for i < n_q, j < n_kv:
 *         S[i][j] = visible(i, j) ? terms(scale * sum_c Q[i][c] * K[j][c]) : -inf
 * (terms: softcap, ALiBi bias, float mask — score_terms16 in common.cl)
 * Index map: NDRange (⌈n_q/(WG·RQ)⌉·WG, ⌈n_kv/TILE_KV⌉, batch·h_q), work-group
 * (WG, 1, 1). Group (x, y) stages keys [y·TILE_KV, (y+1)·TILE_KV) of K transposed in
 * local memory; its work-item t owns S[i][j] for the RQ queries i = (x·WG + t)·RQ + r
 * and those keys. Query head h reads key head h / group (grouped-query attention).
 * Register blocking as in fused.cl: per 16·NV_S keys, NV_S·RQ float16 accumulators,
 * each K vector feeding RQ FMAs.
 * `#pragma unroll` on the micro-kernel's loops over r (small compile-time trip counts)
 * keeps the register blocks in registers: without it PoCL's LLVM keeps them in memory
 * and runs 2x slower. Setup and stores are not unrolled (compile time).
 */
#ifndef D_K
#define D_K 64 /* head dim of Q and K */
#endif
#ifndef TILE_KV
#define TILE_KV 32 /* keys per work-group; a multiple of 16 */
#endif
#ifndef WG
#define WG 16 /* work-items per work-group */
#endif
#ifndef RQ
#define RQ 4 /* queries per work-item */
#endif
#define N_SV (TILE_KV / 16) /* float16 score vectors per query */
#define NV_S NV_FIT(N_SV) /* score vectors per micro-kernel step (NV: common.cl) */

__kernel __attribute__((reqd_work_group_size(WG, 1, 1))) void
clattn_scores(__global const ELEM_T(Q_DT) *q, long q_off, long4 q_st,
              __global const ELEM_T(K_DT) *k, long k_off, long4 k_st,
              __global float *s, long s_off, long4 s_st,
              int h_q, int group, long n_q, long n_kv, float scale, int sparse, int relative,
              RULE_PARAMS, TERM_PARAMS)
{
    __local float k_t[D_K * TILE_KV]; /* K tile transposed: k_t[c·TILE_KV + key] */
    const long i0 = (get_group_id(0) * WG + get_local_id(0)) * RQ;
    const long j0 = get_group_id(1) * TILE_KV, bh = get_global_id(2);
    const long b = bh / h_q, h = bh % h_q, hk = h / group;
    const int16 lane = (int16)(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    const float slope = ALIBI ? alibi[h] : 0.0f;

    /* sparse (the attention pipeline's own workspace): a tile no row of the group sees
     * is neither staged, computed nor written; softmax and weighted sum never read it.
     * (The test is uniform over the group; the group still meets the barrier: PoCL
     * miscompiles a return before it.) */
    bool skip = false;
    if (sparse) {
        const long g0 = get_group_id(0) * WG * RQ;
        const long2 gr = group_key_range(RULE_ARGS, b, g0, min(g0 + WG * RQ, n_q) - 1, n_q, n_kv);
        skip = j0 >= gr.y || j0 + TILE_KV <= gr.x;
    }
    if (!skip)
        TYPED(stage_rows, K_DT)(k, k_off, k_st, b, hk, j0, n_kv, D_K, D_K, TILE_KV, WG, true, k_t NO_PAGES);
    barrier(CLK_LOCAL_MEM_FENCE); /* K tile staged before anyone reads it */
    if (skip)
        return;

    /* keys outside every row's visible range only get −∞, no products */
    const long2 kr = group_key_range(RULE_ARGS, b, i0, min(i0 + RQ, n_q) - 1, n_q, n_kv);
    const bool work = j0 < kr.y && j0 + TILE_KV > kr.x;
    float q_rows[RQ][D_K];
    for (int r = 0; r < RQ; r++)
        for (int c = 0; c < D_K; c++)
            q_rows[r][c] = work && i0 + r < n_q ? LD(Q_DT, q, view_at(q_off, q_st, b, h, i0 + r, c))
                                                : 0.0f;
    float16 acc[RQ][N_SV];
    for (int sv = 0; sv < N_SV; sv += NV_S) {
        float16 s_[NV_S][RQ];
        #pragma unroll
        for (int u = 0; u < NV_S; u++)
            #pragma unroll
            for (int r = 0; r < RQ; r++)
                s_[u][r] = 0.0f;
        #pragma unroll 2
        for (int c = 0; c < D_K && work; c++) {
            #pragma unroll
            for (int u = 0; u < NV_S; u++) {
                const float16 kc = vload16(sv + u, k_t + c * TILE_KV);
                #pragma unroll
                for (int r = 0; r < RQ; r++)
                    s_[u][r] = fma((float16)(q_rows[r][c]), kc, s_[u][r]);
            }
        }
        #pragma unroll
        for (int u = 0; u < NV_S; u++)
            #pragma unroll
            for (int r = 0; r < RQ; r++)
                acc[r][sv + u] = s_[u][r];
    }
    const int n_keys = (int)min(n_kv - j0, (long)TILE_KV);
    for (int r = 0; r < RQ; r++) {
        const long i = i0 + r;
        if (i >= n_q)
            break;
        const row_rule rr = rule_at(RULE_ARGS, b, i, n_q, n_kv);
        const int lo = rel_bound(rr.lo, j0, n_keys), hi = rel_bound(rr.hi, j0, n_keys);
        const int self = rel_key(rr.self, j0, n_keys);
        const long mbase = MASK_T ? view_at(mt_off, mt_st, b, h, i, 0) : 0;
        const long row = view_at(s_off, s_st, b, h, i, j0);
        for (int sv = 0; sv < N_SV; sv++) {
            const float16 out =
                score_terms16(acc[r][sv] * scale, lane + 16 * sv, lo, hi, self, j0, n_kv,
                              TERM_ARGS, mbase, rr.diag, slope,
                              ALIBI && relative ? alibi_ref(rr) : 0, b, h, i);
            if (s_st.s3 == 1 && 16 * (sv + 1) <= n_keys) {
                vstore16(out, 0, s + row + 16 * sv);
            } else {
                float tmp[16];
                vstore16(out, 0, tmp);
                for (int t = 0; t < 16 && 16 * sv + t < n_keys; t++)
                    s[row + (16 * sv + t) * s_st.s3] = tmp[t];
            }
        }
    }
}
