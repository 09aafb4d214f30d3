/* bwd_dsinks.cl — the gradient of the attention sinks (the desc's d_sinks), after
 * bwd_prep.cl has written each row's D_i = Σ_c dO_ic·O_ic into rows[2·row].
 *
 * The sink of head h is one more key of logit sink_h and value zero in every row, of
 * weight P_i = exp(sink_h − LSE_i) (LSE_i includes it). Its dP is dO_i·0 = 0, so its dS
 * is P_i·(0 − D_i), and sink_h enters no other score:
 *     ∂L/∂sink_h = −Σ_{b, i} exp(sink_h − LSE_{b,h,i})·D_{b,h,i}
 * over the rows that are not padding (a row with no visible key has O = 0, so D = 0). A
 * sink of −∞ gets 0. One work-item per query head sums its rows in order (batch entry,
 * then row): the same bits on every run. NDRange (h_q).
 */
__kernel void clattn_bwd_dsinks(__global const float *rows, __global const lse_t *lse,
                                long lse_off, long4 lse_st, __global const float *sinks,
                                __global float *d_sinks, long ds_off, long4 ds_st, long batch,
                                int h_q, long n_q, RULE_PARAMS)
{
    const long h = get_global_id(0);
    if (h >= h_q)
        return;
    const float s = sinks[h];
    float acc = 0.0f;
    for (long b = 0; b < batch && s != -INFINITY; b++)
        for (long i = 0; i < n_q; i++) {
            if (row_padding(q_lens, b, i))
                break; /* rows past q_lens[b] */
            const float d = rows[2 * ((b * h_q + h) * n_q + i)];
            /* P ≤ 1: LSE includes the sink (min guards an LSE rounded just below it) */
            const float p = min(1.0f, (float)exp((lse_t)s - lse[view_at(lse_off, lse_st, b, h, i, 0)]));
            acc = fma(-p, d, acc);
        }
    d_sinks[view_at(ds_off, ds_st, 0, h, 0, 0)] = acc;
}
