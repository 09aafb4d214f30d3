/* weighted_sum.cl — O = W·V.
 *
 * Reference loop, per (b, h):
 *     for i < n_q, c < d_v:
 *         O[i][c] = sum over j < n_kv with W[i][j] != 0 of W[i][j] * V[j][c]
 * Keys of weight exactly 0 (masked) contribute nothing, even when V holds NaN or inf.
 * Index map: NDRange (⌈n_q/(WG·RQ)⌉·WG, batch·h_q), work-group (WG, 1); work-item t
 * of group g owns the RQ rows i = (g·WG + t)·RQ + r of O. The group stages TILE_KV
 * rows of V in local memory per step. `mask` only lets causal masks stop at the last
 * key the group's rows can see (their weights past it are zero anyway).
 * Register blocking as in fused.cl: per 16 columns of V, RQ float16 accumulators, each
 * V vector feeding RQ FMAs (ACCUMULATE_PV_DENSE; the per-weight test of
 * ACCUMULATE_PV only for tiles holding inf or NaN).
 * `#pragma unroll` on the micro-kernel's loops over r (small compile-time trip counts)
 * keeps the register blocks in registers: without it PoCL's LLVM keeps them in memory
 * and runs 2x slower. Setup and stores are not unrolled (compile time).
 */
#ifndef D_V
#define D_V 64 /* head dim of V and O */
#endif
#ifndef TILE_KV
#define TILE_KV 32 /* keys staged in local memory per step */
#endif
#ifndef WG
#define WG 16 /* work-items per work-group */
#endif
#ifndef RQ
#define RQ 4 /* rows of O per work-item */
#endif
#define D_V_PAD PAD16(D_V)  /* d_v rounded up to whole float16 vectors */
#define N_AV (D_V_PAD / 16) /* float16 accumulator vectors per row */

__kernel __attribute__((reqd_work_group_size(WG, 1, 1))) void
clattn_weighted_sum(__global const float *w, long w_off, long4 w_st,
                    __global const ELEM_T(V_DT) *v, long v_off, long4 v_st,
                    __global ELEM_T(O_DT) *o, long o_off, long4 o_st,
                    int h_q, int group, long n_q, long n_kv, int sparse, RULE_PARAMS)
{
    __local float v_tile[TILE_KV * D_V_PAD]; /* V tile, columns zero-padded to D_V_PAD */
    __local int tile_bad[WG];                /* work-item t staged a row holding inf/NaN */
    const long g0 = get_group_id(0) * (WG * RQ), i0 = g0 + get_local_id(0) * RQ;
    const long bh = get_global_id(1);
    const long b = bh / h_q, h = bh % h_q, hk = h / group;

    float16 acc[RQ][N_AV];
    long lo[RQ], hi[RQ]; /* keys each row may read: sparse workspaces hold only these */
    for (int r = 0; r < RQ; r++) {
        for (int a = 0; a < N_AV; a++)
            acc[r][a] = 0.0f;
        const row_rule rr = rule_at(RULE_ARGS, b, min(i0 + r, n_q - 1), n_q, n_kv);
        lo[r] = sparse ? rr.lo : 0;
        hi[r] = sparse ? rr.hi : n_kv;
    }
    /* weights outside every row's visible keys are zero: skip those tiles. NaN rows
     * (masked_rows = NaN) are fully masked and stay NaN through the zero tiles' absence:
     * they need one tile, so the range is widened to at least the first one. */
    long2 kr = group_key_range(RULE_ARGS, b, g0, min(g0 + WG * RQ, n_q) - 1, n_q, n_kv);
    if (kr.y <= kr.x)
        kr = (long2)(0, min(n_kv, (long)TILE_KV));
    for (long j0 = kr.x / TILE_KV * TILE_KV; j0 < kr.y; j0 += TILE_KV) {
        TYPED(stage_rows, V_DT)(v, v_off, v_st, b, hk, j0, n_kv, D_V, D_V_PAD, TILE_KV, WG, false,
                                v_tile NO_PAGES);
        tile_bad[get_local_id(0)] = rows_nonfinite(v_tile, TILE_KV, D_V_PAD, WG);
        barrier(CLK_LOCAL_MEM_FENCE); /* V tile staged before anyone reads it */
        bool v_finite = true; /* then weights of 0 need no test (fused.cl) */
        for (int t = 0; t < WG; t++)
            v_finite &= !tile_bad[t];

        if (i0 < n_q) { /* work-items past the last row only help stage V */
            float p[RQ][TILE_KV];
            for (int r = 0; r < RQ; r++) {
                const long i = i0 + r;
                const long row = view_at(w_off, w_st, b, h, i < n_q ? i : 0, 0);
                /* the tile's keys this row reads: [jlo, jhi) */
                const int jlo = rel_bound(lo[r], j0, TILE_KV);
                const int jhi = i < n_q ? rel_bound(hi[r], j0, TILE_KV) : 0;
                for (int jj = 0; jj < TILE_KV; jj++)
                    p[r][jj] = jj >= jlo && jj < jhi ? w[row + (j0 + jj) * w_st.s3] : 0.0f;
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
        float out[D_V_PAD];
        for (int a = 0; a < N_AV; a++)
            vstore16(acc[r][a], a, out);
        for (int c = 0; c < D_V; c++)
            ST(O_DT, o, view_at(o_off, o_st, b, h, i, c), out[c]);
    }
}
