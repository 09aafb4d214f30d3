/* bwd_dkdv.cl — the backward pass's dK and dV: per key, every query row of its KV
 * head's group (P and dP recomputed). bwd_prep.cl's header states the algorithm. */
#ifndef D_K
#define D_K 64
#endif
#ifndef D_V
#define D_V 64
#endif
/* private array lengths (a head dim may be 0) */
#define DK_N (D_K > 0 ? D_K : 1)
#define DV_N (D_V > 0 ? D_V : 1)

__kernel void clattn_bwd_dkdv(__global const ELEM_T(Q_DT) *q, long q_off, long4 q_st,
                              __global const ELEM_T(K_DT) *k, long k_off, long4 k_st,
                              __global const ELEM_T(V_DT) *v, long v_off, long4 v_st,
                              __global const ELEM_T(DO_DT) *d_o, long do_off, long4 do_st,
                              __global const float *rows, __global ELEM_T(DK_DT) *dk,
                              long dk_off, long4 dk_st, __global ELEM_T(DV_DT) *dv, long dv_off,
                              long4 dv_st, int h_q, int group, long n_q, long n_kv, float scale,
                              RULE_PARAMS, TERM_PARAMS)
{
    const long j = get_global_id(0), bhk = get_global_id(1);
    if (j >= n_kv)
        return;
    const long h_kv = h_q / group, b = bhk / h_kv, hk = bhk % h_kv;
    const int16 lane = (int16)(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    float kj[DK_N], vj[DV_N], qi[DK_N], acck[DK_N], accv[DV_N];
    for (int c = 0; c < D_K; c++) {
        kj[c] = LD(K_DT, k, view_at(k_off, k_st, b, hk, j, c));
        acck[c] = 0.0f;
    }
    for (int c = 0; c < D_V; c++) {
        vj[c] = LD(V_DT, v, view_at(v_off, v_st, b, hk, j, c));
        accv[c] = 0.0f;
    }
    for (int g = 0; g < group; g++) {
        const long h = hk * group + g;
        const float slope = ALIBI ? alibi[h] : 0.0f;
        for (long i = 0; i < n_q; i++) {
            const long row = (b * h_q + h) * n_q + i;
            const float lse_r = rows[2 * row + 1];
            if (lse_r == -INFINITY)
                continue;
            const row_rule r = rule_at(RULE_ARGS, b, i, n_q, n_kv);
            if (j < r.lo || j >= r.hi || j == r.self)
                continue;
            float x = 0.0f;
            for (int c = 0; c < D_K; c++) {
                qi[c] = LD(Q_DT, q, view_at(q_off, q_st, b, h, i, c));
                x = fma(qi[c], kj[c], x);
            }
            const float raw = x * scale;
            float s = raw;
#if MASK_T || ALIBI || SOFTCAP
            /* the score terms of this one key: lane 0 of a vector whose other lanes are
             * outside the visible range */
            const long mbase = MASK_T ? view_at(mt_off, mt_st, b, h, i, 0) : 0;
            s = score_terms16((float16)(raw), lane, 0, 1, -1, j, n_kv, mt, mt_off, mt_st, alibi,
                              softcap, mbase, r.diag, slope, ALIBI ? alibi_ref(r) : 0)
                    .s0;
#endif
            const float p = exp(s - lse_r);
            if (p == 0.0f) /* masked, or a weight of 0: adds nothing */
                continue;
            float dp = 0.0f;
            for (int c = 0; c < D_V; c++) {
                const float gc = LD(DO_DT, d_o, view_at(do_off, do_st, b, h, i, c));
                dp = fma(gc, vj[c], dp);
                accv[c] = fma(p, gc, accv[c]);
            }
            float ds = p * (dp - rows[2 * row]) * scale;
#if SOFTCAP
            const float tc = tanh(raw / softcap);
            ds *= 1.0f - tc * tc;
#endif
            for (int c = 0; c < D_K; c++)
                acck[c] = fma(ds, qi[c], acck[c]);
        }
    }
    for (int c = 0; c < D_K; c++)
        ST(DK_DT, dk, view_at(dk_off, dk_st, b, hk, j, c), acck[c]);
    for (int c = 0; c < D_V; c++)
        ST(DV_DT, dv, view_at(dv_off, dv_st, b, hk, j, c), accv[c]);
}
