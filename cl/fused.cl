/* fused.cl — O = softmax(scale · Q·Kᵀ + mask) · V in one pass, never storing S.
 *
 * Online softmax (Milakov & Gimelshein 2018, "Online normalizer calculation for
 * softmax"; Dao et al. 2022, FlashAttention). Reference loop, per query row i of
 * batch entry b and head h (rule_at gives [lo, hi), self and the diagonal a_i):
 *     m = -inf, l = 0, acc[0..d_v) = 0
 *     if i >= q_len[b]: O[i] = 0, LSE = -inf                (padding row)
 *     for each tile of TILE_KV keys j:
 *         visible(i, j) = lo <= j < hi                       (kv_lens, causal, window)
 *                         && j != self                       (NO_SELF)
 *                         && bool_mask[b,h,i,j]              (MASK_T 1)
 *                         && float_mask[b,h,i,j] != -inf     (MASK_T 2)
 *         x_j = scale * Q[i]·K[j]
 *         x_j = softcap > 0 ? softcap * tanh(x_j / softcap) : x_j     (SOFTCAP)
 *         s_j = visible(i, j) ? x_j - slope_h * (|a_i - j| - ref_i)   (ALIBI; ref_i:
 *                               + float_mask[b,h,i,j]        common.cl alibi_ref)
 *                             : -inf                         (MASK_T 2 adds the mask)
 *         m_new = max(m, max_j s_j)                   (NaN wins)
 *         acc *= exp(m - m_new); l *= exp(m - m_new)  (rescale to the new max)
 *         p_j = exp(s_j - m_new); l += p_j; acc += p_j · V[j]   (p_j == 0 skipped)
 *                                     (DROPOUT: acc += p_j·z_ij · V[j], z of dropout.cl)
 *         m = m_new
 *     O[i] = (m == -inf) ? (masked_rows == NAN ? NaN : 0) : acc / l
 *     LSE[i] = (m == -inf) ? -inf : m + log(l) - slope_h * ref_i   (the absolute LSE;
 *                                   lse_relative keeps the relative one for the weights)
 * Index map: NDRange (⌈n_q/(WG·RQ)⌉·WG, batch·h_q), work-group (WG, 1); work-item t
 * of group g owns the RQ queries i = (g·WG + t)·RQ + r. The group stages TILE_KV keys
 * of K (transposed) and V in local memory per step; causal masks stop at the last key
 * the group can see.
 *
 * Register blocking (what CPU OpenCL compilers vectorise without fast-math, and plain
 * registers on GPUs), both products in the broadcast form of a GEMM micro-kernel:
 * - scores: for each 16·NV keys, NV·RQ float16 accumulators (NV per query) built by
 *   broadcasting q[r][c] against row c of the transposed K tile — each K vector feeds
 *   RQ FMAs, each broadcast NV, and no dot product needs a horizontal sum;
 * - weighted sum: for each 16·NV columns of V, NV·RQ float16 accumulators held over the
 *   whole tile, each V row vector feeding RQ FMAs with broadcast weights.
 * NV (common.cl; the host's choice, tuning.c) is 1 where a float16 is two 8-lane
 * registers (AVX2 at RQ 6: 12 accumulators + 2 + a broadcast of 16 registers) and 4 (2
 * above RQ 4) where it is one 16-lane register (AVX-512 at RQ 4: 16 accumulators + 4 K
 * vectors + 4 broadcasts of 32, so that 16 independent FMA chains hide the FMA latency,
 * where RQ chains left the FMA units half idle); whatever d and the tile are, nothing
 * spills. A weight of 0 must add nothing even when V holds inf or NaN: the
 * work-items flag staged V rows holding either, and only such tiles take the summation
 * that tests each weight.
 * `#pragma unroll` on the loops over r (and partly c, keys) keeps the register blocks
 * in registers: without it PoCL's LLVM keeps them in memory and runs 2x slower.
 */
#ifndef D_K
#define D_K 64 /* head dim of Q and K (compile-time: private arrays, unrolled loops) */
#endif
#ifndef D_V
#define D_V 64 /* head dim of V and O */
#endif
#ifndef TILE_KV
#define TILE_KV 32 /* keys staged in local memory per step; a multiple of 16 */
#endif
#ifndef WG
#define WG 16 /* work-items per work-group */
#endif
#ifndef RQ
#define RQ 4 /* queries per work-item */
#endif

#define N_SV (TILE_KV / 16)              /* float16 score vectors per query and tile */
#define D_V_PAD PAD16(D_V)              /* d_v rounded up to whole float16 vectors */
#define N_AV (D_V_PAD / 16)              /* float16 accumulator vectors per query */
#define NV_S NV_FIT(N_SV) /* score vectors per micro-kernel step (NV: common.cl) */

/* vec_type_hint: vectorised in float16 already (Intel's CPU runtime would otherwise run
 * work-items as SIMD lanes: 0.85-0.94x the time with the hint; PoCL ignores it) */
__kernel __attribute__((reqd_work_group_size(WG, 1, 1))) __attribute__((vec_type_hint(float16)))
void clattn_fused(FUSED_PARAMS)
{
    __local float k_t[D_K * TILE_KV];        /* K tile transposed: k_t[c·TILE_KV + key] */
    __local float v_tile[TILE_KV * D_V_PAD]; /* V tile, columns zero-padded to D_V_PAD */
    __local int tile_bad[WG];                /* work-item t staged a row holding inf/NaN */
#if K_SCALED || V_SCALED
    __local float ks_tile[TILE_KV], vs_tile[TILE_KV]; /* the tile's int8 scales (0 past the keys) */
#endif
    const long g0 = get_group_id(0) * (WG * RQ);      /* first query of the group */
    const long i0 = g0 + get_local_id(0) * RQ;        /* first query of this work-item */
    const long bh = get_global_id(1);
    const long b = bh / h_q, h = bh % h_q, hk = h / group;
    VARLEN_ROWS(b); /* a packed batch: sequence b's rows */
    const int16 lane = (int16)(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    const float slope = ALIBI ? alibi[h] : 0.0f;
    /* K/V rows past the batch entry's keys are staged as zeros, not read (with pages,
     * the table holds no page for them) */
    const long nkv_b = seq_len(kv_lens, b, n_kv);

    float q_rows[RQ][D_K];
    float16 acc[RQ][N_AV];
    float m[RQ];
    float16 l16[RQ]; /* each row's running sum, lane-wise: one horizontal sum at the end */
    row_rule rule[RQ]; /* visible keys of each row (none for rows past n_q) */
    const long q_end = Q_ROWS(b); /* rows of Q to read */
    long wi_lo = n_kv, wi_hi = 0; /* keys any of this work-item's rows may see */
    for (int r = 0; r < RQ; r++) { /* (setup and stores not unrolled: compile time) */
        const long i = i0 + r;
        for (int c = 0; c < D_K; c++)
            q_rows[r][c] = i < q_end ? LD(Q_DT, q, view_at(q_off, q_st, b, h, i, c)) : 0.0f;
        for (int a = 0; a < N_AV; a++)
            acc[r][a] = 0.0f;
        m[r] = -INFINITY;
        l16[r] = 0.0f;
        rule[r] = rule_at(RULE_ARGS, b, i < n_q ? i : 0, n_q, n_kv);
        if (i >= n_q)
            rule[r].lo = rule[r].hi = 0;
        if (rule[r].hi > rule[r].lo) {
            wi_lo = min(wi_lo, rule[r].lo);
            wi_hi = max(wi_hi, rule[r].hi);
        }
    }
    /* key tiles outside every row's range are fully masked: the group skips them */
    const long2 kr = group_key_range(RULE_ARGS, b, g0, min(g0 + WG * RQ, n_q) - 1, n_q, n_kv);
    for (long j0 = kr.x / TILE_KV * TILE_KV; j0 < kr.y; j0 += TILE_KV) {
        /* the block mask (uniform over the group): a tile mask_mod masks for every row is
         * skipped, and one it leaves fully visible needs no snippet */
        const int bstate = block_tile_state(bmask, bm_st, b, h, g0, min(g0 + WG * RQ, n_q) - 1,
                                            j0, min(j0 + TILE_KV, n_kv) - 1);
        if (bstate == 0)
            continue;
        TYPED(stage_rows, K_DT)(k, k_off, k_st, b, hk, j0, nkv_b, D_K, D_K, TILE_KV, WG, true, k_t KV_PAGES);
        TYPED(stage_rows, V_DT)(v, v_off, v_st, b, hk, j0, nkv_b, D_V, D_V_PAD, TILE_KV, WG, false,
                                v_tile KV_PAGES);
        /* keys of weight 0 must add nothing even when V holds inf or NaN: one test per
         * tile (each work-item checks the rows it staged), not one per product */
        tile_bad[get_local_id(0)] = rows_nonfinite(v_tile, TILE_KV, D_V_PAD, WG);
#if K_SCALED || V_SCALED
        for (int jj = get_local_id(0); jj < TILE_KV; jj += WG) {
            const bool in = j0 + jj < nkv_b;
            ks_tile[jj] = K_SCALED && in ? kv_scale(k_sc, ks_off, ks_st, b, hk, j0 + jj KV_PAGES) : 0.0f;
            vs_tile[jj] = V_SCALED && in ? kv_scale(v_sc, vs_off, vs_st, b, hk, j0 + jj KV_PAGES) : 0.0f;
        }
#endif
        barrier(CLK_LOCAL_MEM_FENCE); /* K and V tiles staged before anyone reads them */
        bool v_finite = true;
        for (int t = 0; t < WG; t++)
            v_finite &= !tile_bad[t];

        /* this work-item's rows see some key of the tile (the block mask: for its own
         * rows, which a mask_mod may hide where the group's others see keys) */
        if (j0 < wi_hi && j0 + TILE_KV > wi_lo &&
            (!BLOCK_MASK || block_tile_state(bmask, bm_st, b, h, i0, min(i0 + RQ, n_q) - 1, j0,
                                             min(j0 + TILE_KV, n_kv) - 1) != 0)) {
            /* the raw scores of RQ rows × TILE_KV keys, 16·NV_S keys at a time: NV_S·RQ
             * float16 accumulators, each K vector feeding RQ FMAs and each broadcast of q
             * NV_S (a GEMM micro-kernel in broadcast form; the accumulators and NV_S K
             * vectors fit the vector registers: 16 AVX2, 32 AVX-512) */
            float p[RQ][TILE_KV];
            float16 m16[RQ]; /* each row's max of the scaled scores (before any term) */
            #pragma unroll
            for (int r = 0; r < RQ; r++)
                m16[r] = (float16)(-INFINITY);
            for (int sv = 0; sv < N_SV; sv += NV_S) {
                float16 s[NV_S][RQ];
                #pragma unroll
                for (int u = 0; u < NV_S; u++)
                    #pragma unroll
                    for (int r = 0; r < RQ; r++)
                        s[u][r] = 0.0f;
                #pragma unroll 2
                for (int c = 0; c < D_K; c++) {
                    #pragma unroll
                    for (int u = 0; u < NV_S; u++) {
                        const float16 kc = vload16(sv + u, k_t + c * TILE_KV);
                        #pragma unroll
                        for (int r = 0; r < RQ; r++)
                            s[u][r] = fma((float16)(q_rows[r][c]), kc, s[u][r]);
                    }
                }
                #pragma unroll
                for (int u = 0; u < NV_S; u++)
                    #pragma unroll
                    for (int r = 0; r < RQ; r++) {
                        float16 x = s[u][r] * scale;
#if K_SCALED
                        x *= vload16(sv + u, ks_tile); /* the int8 keys' scales */
#endif
                        m16[r] = max_nan16(m16[r], x);
                        vstore16(x, sv + u, p[r]);
                    }
            }
            /* the online softmax of each row over the tile (not unrolled: p, m, l and acc
             * live in memory here anyway, and the unrolled code was 4x the size) */
            for (int r = 0; r < RQ; r++) {
                const long i = i0 + r;
                const int lo = rel_bound(rule[r].lo, j0, TILE_KV);
                const int hi = rel_bound(rule[r].hi, j0, TILE_KV);
                const int self = rel_key(rule[r].self, j0, TILE_KV);
                const long mbase = MASK_T && i < n_q ? view_at(mt_off, mt_st, b, h, i, 0) : 0;
                /* every key of the tile visible and no score term (a mask_mod that the
                 * block mask says masks nothing here counts as none): only the scale */
                const bool no_terms = !SCORE_TERMS || (ONLY_MASK_MOD && bstate == 2);
                const bool plain = no_terms && lo == 0 && hi == TILE_KV && self < 0;
                if (!plain) { /* the score terms and the row's max over them */
                    m16[r] = (float16)(-INFINITY);
                    for (int sv = 0; sv < N_SV; sv++) {
                        float16 x = vload16(sv, p[r]);
                        x = score_terms16(x, lane + 16 * sv, lo, hi, self, j0, n_kv, TERM_ARGS,
                                          mbase, rule[r].diag, slope,
                                          ALIBI ? alibi_ref(rule[r]) : 0, b, h, i);
                        vstore16(x, sv, p[r]);
                        m16[r] = max_nan16(m16[r], x);
                    }
                }
                const float m_new = max_nan(m[r], hmax_nan(m16[r]));
                if (m_new == -INFINITY) { /* nothing visible yet: p = 0 */
                    for (int sv = 0; sv < N_SV; sv++)
                        vstore16((float16)(0.0f), sv, p[r]);
                    continue;
                }
                rescale_row(acc[r], N_AV, &l16[r], m[r], m_new);
                float16 lt = 0.0f;
                for (int sv = 0; sv < N_SV; sv++) {
                    float16 pv = exp_softmax16(vload16(sv, p[r]) - m_new);
                    lt += pv;
#if DROPOUT /* after the sum: l and the LSE are those before dropout */
                    pv *= dropout16_keys(DROPOUT_ARGS, bh, i, j0 + 16 * sv);
#endif
#if V_SCALED
                    vstore16(pv * vload16(sv, vs_tile), sv, p[r]); /* the int8 values' scales */
#else
                    vstore16(pv, sv, p[r]);
#endif
                }
                l16[r] += lt;
                m[r] = m_new;
            }
            if (v_finite) {
                ACCUMULATE_PV_DENSE(acc, p, v_tile);
            } else {
                ACCUMULATE_PV(acc, p, v_tile);
            }
        }
        barrier(CLK_LOCAL_MEM_FENCE); /* all reads done before the next tile overwrites */
    }
    for (int r = 0; r < RQ; r++) {
        const long i = i0 + r;
        if (i >= n_q)
            break;
        STORE_ROW(acc[r], m[r], hsum(l16[r]), slope, ALIBI ? alibi_ref(rule[r]) : 0);
    }
}
