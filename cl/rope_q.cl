/* rope_q.cl — Q rotated (rotary position embeddings, common.cl rope_at) into a float32
 * workspace that the attention kernels then read in Q's place.
 *
 * Reference loop, per batch entry b, query head h, row i, column c:
 *     pos = kv_start + kv_lens[b] + q_step·i  (kv_lens clamped into 0..n_kv: the cache's
 *                                            length before this call's appended rows;
 *                                            q_step 1 with a causal mask or a window, else
 *                                            0: FlashAttention's convention)
 *     Q'[b][h][i][c] = rope(Q[b][h][i], c, pos)    (columns from rot_dim on: copied)
 * Index map: NDRange (d_k, n_q, batch·h_q), any work-group size; Q' packed
 * [batch, h_q, n_q, d_k].
 */
__kernel void clattn_rope_q(__global const ELEM_T(Q_DT) *q, long q_off, long4 q_st,
                            __global float *qr, __global const int *kv_lens, int h_q, long n_q,
                            long n_kv, int d_k, long kv_start, int q_step, int rot_dim,
                            int rot_interleaved, __global const float *inv_freq, long rope_len)
{
    const int c = get_global_id(0);
    const long i = get_global_id(1), bh = get_global_id(2);
    const long b = bh / h_q, h = bh % h_q;
    const int o = rope_partner(c, rot_dim, rot_interleaved);
    const float x = LD(Q_DT, q, view_at(q_off, q_st, b, h, i, c));
    const float xo = LD(Q_DT, q, view_at(q_off, q_st, b, h, i, o));
    qr[((bh * n_q) + i) * d_k + c] =
        rope_at(x, xo, c, rot_dim, rot_interleaved, inv_freq, rope_len, kv_start + seq_len(kv_lens, b, n_kv) + q_step * i);
}
