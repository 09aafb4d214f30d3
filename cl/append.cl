/* append.cl — this step's new K and V rows written into the cache before the attention
 * reads it (FlashAttention's k, v arguments of flash_attn_with_kvcache), the new K rows
 * rotated first when the call has rotary embeddings (-DROPE=1; common.cl rope_at), and
 * the lengths the attention then sees.
 *
 * Reference loop, per batch entry b, KV head h, new row t < n_new, column c:
 *     len = kv_lens[b] clamped into 0..n_kv (common.cl seq_len); j = len + t
 *     if j < n_kv:                                  (rows past the cache: not written)
 *         K[b][h][j][c] = ROPE ? rope(K_new[b][h][t], c, pos = kv_start + j) : K_new[b][h][t][c]
 *         V[b][h][j][c] = V_new[b][h][t][c]         (through the block table when PAGED)
 *     new_lens[b] = min(len + n_new, n_kv)          (work-item (0, 0) of each (b, h = 0))
 * Each work-item writes only its own element of K and of V and reads only K_new, V_new
 * and the lengths, so there is no race (a rotated element reads its pair's partner
 * from K_new, never from the cache). Values are converted to the cache's storage type.
 * Index map: NDRange (max(d_k, d_v), n_new, batch·h_kv), any work-group size.
 */
#ifndef KN_DT
#define KN_DT 0 /* storage of K_new and V_new */
#endif
#ifndef VN_DT
#define VN_DT 0
#endif

__kernel void clattn_append(__global const ELEM_T(KN_DT) *kn, long kn_off, long4 kn_st,
                            __global const ELEM_T(VN_DT) *vn, long vn_off, long4 vn_st,
                            __global ELEM_T(K_DT) *k, long k_off, long4 k_st,
                            __global ELEM_T(V_DT) *v, long v_off, long4 v_st,
                            __global const int *kv_lens, __global int *new_lens, int h_kv,
                            long n_new, long n_kv, int d_k, int d_v, long kv_start,
                            int rot_dim, int rot_interleaved, __global const float *inv_freq,
                            long rope_len, PAGE_PARAMS)
{
    const int c = get_global_id(0);
    const long t = get_global_id(1), bh = get_global_id(2);
    const long b = bh / h_kv, h = bh % h_kv;
    const long len = seq_len(kv_lens, b, n_kv), j = len + t;
    if (c == 0 && t == 0 && h == 0)
        new_lens[b] = (int)min(len + n_new, n_kv);
    if (t >= n_new || j >= n_kv) /* (n_new 0: one row of work-items for the lengths) */
        return;
    if (c < d_k) {
        float x = LD(KN_DT, kn, view_at(kn_off, kn_st, b, h, t, c));
#if ROPE
        const int o = rope_partner(c, rot_dim, rot_interleaved);
        x = rope_at(x, LD(KN_DT, kn, view_at(kn_off, kn_st, b, h, t, o)), c, rot_dim,
                    rot_interleaved, inv_freq, rope_len, kv_start + j);
#endif
        ST(K_DT, k, kv_row(k_off, k_st, b, h, j KV_PAGES) + c * k_st.s3, x);
    }
    if (c < d_v)
        ST(V_DT, v, kv_row(v_off, v_st, b, h, j KV_PAGES) + c * v_st.s3,
           LD(VN_DT, vn, view_at(vn_off, vn_st, b, h, t, c)));
}
