/* fused.cl — O = softmax(scale · Q·Kᵀ + mask) · V in one pass, never storing S.
 *
 * Online softmax (Milakov & Gimelshein 2018, "Online normalizer calculation for
 * softmax"; Dao et al. 2022, FlashAttention). Reference loop, per query row i:
 *     m = -inf, l = 0, acc[0..d_v) = 0
 *     for each tile of keys:
 *         s_j = visible(i, j) ? scale * Q[i]·K[j] : -inf
 *         m_new = max(m, max_j s_j)                   (NaN wins)
 *         acc *= exp(m - m_new); l *= exp(m - m_new)  (rescale to the new max)
 *         p_j = exp(s_j - m_new); l += p_j; acc += p_j · V[j]   (p_j == 0 skipped)
 *         m = m_new
 *     O[i] = (m == -inf) ? 0 : acc / l               (no visible key → zeros)
 * Index map: NDRange (⌈n_q/WG⌉·WG, batch·h_q), work-group (WG, 1); work-item t of
 * group g owns query i = g·WG + t. The group stages TILE_KV rows of K and V in local
 * memory per step; causal masks stop at the last key the group's queries can see.
 */
#ifndef D_K
#define D_K 64 /* head dim of Q and K (compile-time: private arrays, unrolled loops) */
#endif
#ifndef D_V
#define D_V 64 /* head dim of V and O */
#endif
#ifndef TILE_KV
#define TILE_KV 32 /* keys staged in local memory per step */
#endif
#ifndef WG
#define WG 64 /* queries (work-items) per work-group */
#endif

__kernel __attribute__((reqd_work_group_size(WG, 1, 1))) void
clattn_fused(__global const float *q, long q_off, long4 q_st,
             __global const float *k, long k_off, long4 k_st,
             __global const float *v, long v_off, long4 v_st,
             __global float *o, long o_off, long4 o_st,
             int h_q, int group, long n_q, long n_kv, float scale, int mask)
{
    __local float k_tile[TILE_KV * D_K];
    __local float v_tile[TILE_KV * D_V];
    const int lid = get_local_id(0);
    const long i0 = get_group_id(0) * WG, i = i0 + lid, bh = get_global_id(1);
    const long b = bh / h_q, h = bh % h_q, hk = h / group;
    const bool active = i < n_q;

    float q_row[D_K], acc[D_V];
    for (int c = 0; c < D_K; c++)
        q_row[c] = active ? q[view_at(q_off, q_st, b, h, i, c)] : 0.0f;
    for (int c = 0; c < D_V; c++)
        acc[c] = 0.0f;
    float m = -INFINITY, l = 0.0f;

    const long kv_end = visible_key_end(mask, min(i0 + WG, n_q) - 1, n_q, n_kv);
    for (long j0 = 0; j0 < kv_end; j0 += TILE_KV) {
        for (int e = lid; e < TILE_KV * D_K; e += WG) {
            const long j = j0 + e / D_K;
            k_tile[e] = j < n_kv ? k[view_at(k_off, k_st, b, hk, j, e % D_K)] : 0.0f;
        }
        for (int e = lid; e < TILE_KV * D_V; e += WG) {
            const long j = j0 + e / D_V;
            v_tile[e] = j < n_kv ? v[view_at(v_off, v_st, b, hk, j, e % D_V)] : 0.0f;
        }
        barrier(CLK_LOCAL_MEM_FENCE); /* K and V tiles staged before anyone reads them */

        if (active) {
            float s[TILE_KV];
            float m_tile = -INFINITY;
            for (int jj = 0; jj < TILE_KV; jj++) {
                const long j = j0 + jj;
                s[jj] = -INFINITY;
                if (j < n_kv && key_visible(mask, i, j, n_q, n_kv)) {
                    float dot = 0.0f;
                    for (int c = 0; c < D_K; c++)
                        dot = fma(q_row[c], k_tile[jj * D_K + c], dot);
                    s[jj] = dot * scale;
                    m_tile = max_nan(m_tile, s[jj]);
                }
            }
            const float m_new = max_nan(m, m_tile);
            if (m_new != -INFINITY) { /* something visible so far (or NaN) */
                const float alpha = exp(m - m_new);
                l *= alpha;
                for (int c = 0; c < D_V; c++)
                    acc[c] *= alpha;
                for (int jj = 0; jj < TILE_KV; jj++) {
                    const float p = exp(s[jj] - m_new);
                    if (p != 0.0f) { /* masked keys contribute nothing, even NaN V */
                        l += p;
                        for (int c = 0; c < D_V; c++)
                            acc[c] = fma(p, v_tile[jj * D_V + c], acc[c]);
                    }
                }
                m = m_new;
            }
        }
        barrier(CLK_LOCAL_MEM_FENCE); /* all reads done before the next tile overwrites */
    }
    if (active) {
        const bool empty = (m == -INFINITY);
        for (int c = 0; c < D_V; c++)
            o[view_at(o_off, o_st, b, h, i, c)] = empty ? 0.0f : acc[c] / l;
    }
}
