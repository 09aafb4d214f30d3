/* weighted_sum.cl — O = W·V.
 *
 * Reference loop, per (b, h):
 *     for i < n_q, c < d_v:
 *         O[i][c] = sum over j < n_kv with W[i][j] != 0 of W[i][j] * V[j][c]
 * Keys of weight exactly 0 (masked) contribute nothing, even when V holds NaN or inf.
 * Index map: NDRange (⌈d_v/TILE⌉·TILE, ⌈n_q/TILE⌉·TILE, batch·h_q), work-group
 * (TILE, TILE, 1); work-item (x, y) owns O[i = gid.y][c = gid.x] of head gid.z.
 */
#ifndef TILE
#define TILE 16 /* edge of the square tile of O one work-group computes */
#endif

__kernel __attribute__((reqd_work_group_size(TILE, TILE, 1))) void
clattn_weighted_sum(__global const float *w, long w_off, long4 w_st,
                    __global const float *v, long v_off, long4 v_st,
                    __global float *o, long o_off, long4 o_st,
                    int h_q, int group, long n_q, long n_kv, int d_v)
{
    __local float w_tile[TILE][TILE + 1]; /* rows of W, TILE keys */
    __local float v_tile[TILE][TILE + 1]; /* those TILE rows of V, TILE columns */
    const int lx = get_local_id(0), ly = get_local_id(1);
    const long c = get_global_id(0), i = get_global_id(1), bh = get_global_id(2);
    const long b = bh / h_q, h = bh % h_q, hk = h / group;

    float acc = 0.0f;
    for (long j0 = 0; j0 < n_kv; j0 += TILE) {
        const long jw = j0 + lx, jv = j0 + ly;
        w_tile[ly][lx] = (i < n_q && jw < n_kv) ? w[view_at(w_off, w_st, b, h, i, jw)] : 0.0f;
        v_tile[ly][lx] = (jv < n_kv && c < d_v) ? v[view_at(v_off, v_st, b, hk, jv, c)] : 0.0f;
        barrier(CLK_LOCAL_MEM_FENCE); /* both tiles written before anyone reads them */
        for (int t = 0; t < TILE; t++) {
            const float wt = w_tile[ly][t];
            acc += (wt != 0.0f) ? wt * v_tile[t][lx] : 0.0f;
        }
        barrier(CLK_LOCAL_MEM_FENCE); /* all reads done before the next keys overwrite */
    }
    if (i < n_q && c < d_v)
        o[view_at(o_off, o_st, b, h, i, c)] = acc;
}
