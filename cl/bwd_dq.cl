/* bwd_dq.cl — the backward pass's dQ: per query row, its visible keys 16 at a time
 * (P and dP recomputed). bwd_prep.cl's header states the algorithm. */
#ifndef D_K
#define D_K 64
#endif
#ifndef D_V
#define D_V 64
#endif
/* private array lengths (a head dim may be 0) */
#define DK_N (D_K > 0 ? D_K : 1)
#define DV_N (D_V > 0 ? D_V : 1)

__kernel void clattn_bwd_dq(__global const ELEM_T(Q_DT) *q, long q_off, long4 q_st,
                            __global const ELEM_T(K_DT) *k, long k_off, long4 k_st,
                            __global const ELEM_T(V_DT) *v, long v_off, long4 v_st,
                            __global const ELEM_T(DO_DT) *d_o, long do_off, long4 do_st,
                            __global const float *rows, __global ELEM_T(DQ_DT) *dq,
                            long dq_off, long4 dq_st, int h_q, int group, long n_q, long n_kv,
                            float scale, RULE_PARAMS, TERM_PARAMS)
{
    const long i = get_global_id(0), bh = get_global_id(1);
    if (i >= n_q)
        return;
    const long b = bh / h_q, h = bh % h_q, hk = h / group, row = bh * n_q + i;
    const int16 lane = (int16)(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    const float dsum = rows[2 * row], lse_r = rows[2 * row + 1];
    float qi[DK_N], gi[DV_N], acc[DK_N];
    for (int c = 0; c < D_K; c++)
        acc[c] = 0.0f;
    if (lse_r != -INFINITY) {
        for (int c = 0; c < D_K; c++)
            qi[c] = LD(Q_DT, q, view_at(q_off, q_st, b, h, i, c));
        for (int c = 0; c < D_V; c++)
            gi[c] = LD(DO_DT, d_o, view_at(do_off, do_st, b, h, i, c));
        const row_rule r = rule_at(RULE_ARGS, b, i, n_q, n_kv);
        const float slope = ALIBI ? alibi[h] : 0.0f;
        const long mbase = MASK_T ? view_at(mt_off, mt_st, b, h, i, 0) : 0;
        for (long j0 = r.lo / 16 * 16; j0 < r.hi; j0 += 16) {
            float raw[16], p[16];
            for (int t = 0; t < 16; t++) {
                const long j = j0 + t;
                float x = 0.0f;
                if (j >= r.lo && j < r.hi)
                    for (int c = 0; c < D_K; c++)
                        x = fma(qi[c], LD(K_DT, k, view_at(k_off, k_st, b, hk, j, c)), x);
                raw[t] = x * scale;
            }
            const float16 s = score_terms16(vload16(0, raw), lane, rel_bound(r.lo, j0, 16),
                                            rel_bound(r.hi, j0, 16), rel_key(r.self, j0, 16), j0,
                                            n_kv, mt, mt_off, mt_st, alibi, softcap, mbase, r.diag,
                                            slope, ALIBI ? alibi_ref(r) : 0);
            vstore16(exp(s - lse_r), 0, p);
            for (int t = 0; t < 16; t++) {
                if (p[t] == 0.0f) /* masked, or a weight of 0: adds nothing */
                    continue;
                const long j = j0 + t;
                float dp = 0.0f;
                for (int c = 0; c < D_V; c++)
                    dp = fma(gi[c], LD(V_DT, v, view_at(v_off, v_st, b, hk, j, c)), dp);
                float ds = p[t] * (dp - dsum) * scale;
#if SOFTCAP
                const float tc = tanh(raw[t] / softcap);
                ds *= 1.0f - tc * tc;
#endif
                for (int c = 0; c < D_K; c++)
                    acc[c] = fma(ds, LD(K_DT, k, view_at(k_off, k_st, b, hk, j, c)), acc[c]);
            }
        }
    }
    for (int c = 0; c < D_K; c++)
        ST(DQ_DT, dq, view_at(dq_off, dq_st, b, h, i, c), acc[c]);
}
