/* head_mean.cl — attention weights averaged over the query heads (PyTorch's
 * average_attn_weights).
 *
 * Reference loop, per (b, i, j):
 *     out[b][0][i][j] = (sum over h < heads of W[b][h][i][j]) / heads
 * summed in head order, in float (deterministic).
 * Index map: NDRange (n_kv, n_q, batch), one output element per work-item.
 */
__kernel void clattn_head_mean(__global const float *w, long w_off, long4 w_st,
                               __global float *out, long out_off, long4 out_st, int heads)
{
    const long j = get_global_id(0), i = get_global_id(1), b = get_global_id(2);
    float sum = 0.0f;
    for (int h = 0; h < heads; h++)
        sum += w[view_at(w_off, w_st, b, h, i, j)];
    out[view_at(out_off, out_st, b, 0, i, j)] = sum / (float)heads;
}
