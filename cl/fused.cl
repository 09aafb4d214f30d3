/* fused.cl — O = softmax(scale · Q·Kᵀ + mask) · V in one pass, never storing S.
 *
 * Online softmax (Milakov & Gimelshein 2018, "Online normalizer calculation for
 * softmax"; Dao et al. 2022, FlashAttention). Reference loop, per query row i:
 *     m = -inf, l = 0, acc[0..d_v) = 0
 *     for each tile of TILE_KV keys:
 *         s_j = visible(i, j) ? scale * Q[i]·K[j] : -inf
 *         m_new = max(m, max_j s_j)                   (NaN wins)
 *         acc *= exp(m - m_new); l *= exp(m - m_new)  (rescale to the new max)
 *         p_j = exp(s_j - m_new); l += p_j; acc += p_j · V[j]   (p_j == 0 skipped)
 *         m = m_new
 *     O[i] = (m == -inf) ? 0 : acc / l               (no visible key → zeros)
 * Index map: NDRange (⌈n_q/WG⌉·WG, batch·h_q), work-group (WG, 1); work-item t of
 * group g owns query i = g·WG + t. The group stages TILE_KV keys of K (transposed) and
 * V in local memory per step; causal masks stop at the last key the group can see.
 *
 * Vector shape (what CPU OpenCL compilers vectorise without fast-math, and plain
 * registers on GPUs): scores of 16 keys at a time are one float16, built by
 * broadcasting q[c] against row c of the transposed K tile, so no horizontal sums
 * in the dot products; the d_v accumulator is float16 vectors.
 */
#ifndef D_K
#define D_K 64 /* head dim of Q and K (compile-time: private arrays, unrolled loops) */
#endif
#ifndef D_V
#define D_V 64 /* head dim of V and O */
#endif
#ifndef TILE_KV
#define TILE_KV 64 /* keys staged in local memory per step; a multiple of 16 */
#endif
#ifndef WG
#define WG 64 /* queries (work-items) per work-group */
#endif

#define N_SV (TILE_KV / 16)           /* float16 score vectors per tile */
#define D_V_PAD (((D_V) + 15) / 16 * 16) /* d_v rounded up to whole float16 vectors */
#define N_AV (D_V_PAD / 16)           /* float16 accumulator vectors */

float16 max_nan16(float16 a, float16 b)
{
    return select(b, a, isgreater(a, b) | isnan(a));
}

float hmax_nan(float16 v)
{
    float8 a = select(v.hi, v.lo, isgreater(v.lo, v.hi) | isnan(v.lo));
    float4 b = select(a.hi, a.lo, isgreater(a.lo, a.hi) | isnan(a.lo));
    float2 c = select(b.hi, b.lo, isgreater(b.lo, b.hi) | isnan(b.lo));
    return max_nan(c.x, c.y);
}

float hsum(float16 v)
{
    float8 a = v.lo + v.hi;
    float4 b = a.lo + a.hi;
    float2 c = b.lo + b.hi;
    return c.x + c.y;
}

__kernel __attribute__((reqd_work_group_size(WG, 1, 1))) void
clattn_fused(__global const float *q, long q_off, long4 q_st,
             __global const float *k, long k_off, long4 k_st,
             __global const float *v, long v_off, long4 v_st,
             __global float *o, long o_off, long4 o_st,
             int h_q, int group, long n_q, long n_kv, float scale, int mask)
{
    __local float k_t[D_K * TILE_KV];    /* K tile transposed: k_t[c·TILE_KV + key] */
    __local float v_tile[TILE_KV * D_V_PAD]; /* V tile, columns zero-padded to D_V_PAD */
    const int lid = get_local_id(0);
    const long i0 = get_group_id(0) * WG, i = i0 + lid, bh = get_global_id(1);
    const long b = bh / h_q, h = bh % h_q, hk = h / group;
    const bool active = i < n_q;
    const int16 lane = (int16)(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);

    float q_row[D_K];
    for (int c = 0; c < D_K; c++)
        q_row[c] = active ? q[view_at(q_off, q_st, b, h, i, c)] : 0.0f;
    float16 acc[N_AV];
    for (int a = 0; a < N_AV; a++)
        acc[a] = 0.0f;
    float m = -INFINITY, l = 0.0f;
    /* one past the last key this row may see */
    const long row_end = visible_key_end(mask, i, n_q, n_kv);

    const long kv_end = visible_key_end(mask, min(i0 + WG, n_q) - 1, n_q, n_kv);
    for (long j0 = 0; j0 < kv_end; j0 += TILE_KV) {
        for (int e = lid; e < TILE_KV * D_K; e += WG) {
            const int jj = e / D_K, c = e % D_K;
            const long j = j0 + jj;
            k_t[c * TILE_KV + jj] = j < n_kv ? k[view_at(k_off, k_st, b, hk, j, c)] : 0.0f;
        }
        for (int e = lid; e < TILE_KV * D_V_PAD; e += WG) {
            const int jj = e / D_V_PAD, c = e % D_V_PAD;
            const long j = j0 + jj;
            v_tile[e] = (j < n_kv && c < D_V) ? v[view_at(v_off, v_st, b, hk, j, c)] : 0.0f;
        }
        barrier(CLK_LOCAL_MEM_FENCE); /* K and V tiles staged before anyone reads them */

        if (active && j0 < row_end) {
            float16 s[N_SV];
            for (int sv = 0; sv < N_SV; sv++)
                s[sv] = 0.0f;
            for (int c = 0; c < D_K; c++) {
                const float16 qc = (float16)(q_row[c]);
                for (int sv = 0; sv < N_SV; sv++)
                    s[sv] = fma(qc, vload16(sv, k_t + c * TILE_KV), s[sv]);
            }
            /* visible keys of this tile: lane + 16·sv < lim, and ≠ self for NO_SELF */
            const int lim = (int)min(row_end - j0, (long)TILE_KV);
            const int self = (mask == MASK_NO_SELF && i >= j0 && i < j0 + TILE_KV)
                                 ? (int)(i - j0) : -1;
            float16 m_tile16 = (float16)(-INFINITY);
            for (int sv = 0; sv < N_SV; sv++) {
                const int16 key = lane + 16 * sv;
                s[sv] = select((float16)(-INFINITY), s[sv] * scale,
                               (key < lim) & (key != self));
                m_tile16 = max_nan16(m_tile16, s[sv]);
            }
            const float m_new = max_nan(m, hmax_nan(m_tile16));
            if (m_new != -INFINITY) { /* something visible so far (or NaN) */
                const float alpha = exp(m - m_new);
                l *= alpha;
                for (int a = 0; a < N_AV; a++)
                    acc[a] *= alpha;
                float p[TILE_KV];
                for (int sv = 0; sv < N_SV; sv++) {
                    const float16 pv = exp(s[sv] - m_new);
                    l += hsum(pv);
                    vstore16(pv, sv, p);
                }
                for (int jj = 0; jj < TILE_KV; jj++)
                    if (p[jj] != 0.0f) /* masked keys contribute nothing, even NaN V */
                        for (int a = 0; a < N_AV; a++)
                            acc[a] = fma((float16)(p[jj]), vload16(a, v_tile + jj * D_V_PAD),
                                         acc[a]);
                m = m_new;
            }
        }
        barrier(CLK_LOCAL_MEM_FENCE); /* all reads done before the next tile overwrites */
    }
    if (active) {
        float out[D_V_PAD];
        const bool empty = (m == -INFINITY);
        for (int a = 0; a < N_AV; a++)
            vstore16(empty ? (float16)(0.0f) : acc[a] / l, a, out);
        for (int c = 0; c < D_V; c++)
            o[view_at(o_off, o_st, b, h, i, c)] = out[c];
    }
}
