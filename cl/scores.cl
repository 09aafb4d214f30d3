/* scores.cl — S = scale · Q·Kᵀ, masked entries set to −∞.
 *
 * Reference loop, per (b, h):
 *     for i < n_q, j < n_kv:
 *         S[i][j] = visible(i, j) ? scale * sum_c Q[i][c] * K[j][c] : -inf
 * Index map: NDRange (⌈n_kv/TILE⌉·TILE, ⌈n_q/TILE⌉·TILE, batch·h_q), work-group
 * (TILE, TILE, 1); work-item (x, y) owns S[i = gid.y][j = gid.x] of head gid.z.
 * Query head h reads key head h / group (grouped-query attention).
 */
#ifndef TILE
#define TILE 16 /* edge of the square tile of S one work-group computes */
#endif

__kernel __attribute__((reqd_work_group_size(TILE, TILE, 1))) void
clattn_scores(__global const float *q, long q_off, long4 q_st,
              __global const float *k, long k_off, long4 k_st,
              __global float *s, long s_off, long4 s_st,
              int h_q, int group, long n_q, long n_kv, int d_k, float scale, int mask)
{
    __local float q_tile[TILE][TILE + 1]; /* rows of Q, a TILE-wide slice of d_k */
    __local float k_tile[TILE][TILE + 1]; /* rows of K, the same slice */
    const int lx = get_local_id(0), ly = get_local_id(1);
    const long j = get_global_id(0), i = get_global_id(1), bh = get_global_id(2);
    const long b = bh / h_q, h = bh % h_q, hk = h / group;
    const long k_row = get_group_id(0) * TILE + ly; /* the K row this work-item stages */

    float acc = 0.0f;
    for (int c0 = 0; c0 < d_k; c0 += TILE) {
        const int c = c0 + lx;
        q_tile[ly][lx] = (i < n_q && c < d_k) ? q[view_at(q_off, q_st, b, h, i, c)] : 0.0f;
        k_tile[ly][lx] =
            (k_row < n_kv && c < d_k) ? k[view_at(k_off, k_st, b, hk, k_row, c)] : 0.0f;
        barrier(CLK_LOCAL_MEM_FENCE); /* both tiles written before anyone reads them */
        for (int t = 0; t < TILE; t++)
            acc = fma(q_tile[ly][t], k_tile[lx][t], acc);
        barrier(CLK_LOCAL_MEM_FENCE); /* all reads done before the next slice overwrites */
    }
    if (i < n_q && j < n_kv)
        s[view_at(s_off, s_st, b, h, i, j)] =
            key_visible(mask, i, j, n_q, n_kv) ? acc * scale : -INFINITY;
}
