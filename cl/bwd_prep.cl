/* bwd_prep.cl, bwd_dq.cl, bwd_dkdv.cl, bwd_dq_sum.cl — the backward pass of attention: dQ, dK, dV from Q, K, V, O, dO and the
 * forward call's LSE, FlashAttention-2's backward (Dao 2023, "FlashAttention-2: Faster
 * Attention with Better Parallelism and Work Partitioning", Algorithm 2): P is
 * recomputed from Q, K and the LSE, never stored, so memory stays O(n·d):
 *     D_i = Σ_c dO_ic·O_ic,  P_ij = exp(s_ij − LSE_i),  dP_ij = dO_i·V_j,
 *     dS_ij = P_ij·(dP_ij − D_i)·scale·g_ij,
 *     dQ_i = Σ_j dS_ij·K_j,  dK_j = Σ_i dS_ij·Q_i,  dV_j = Σ_i P_ij·dO_i,
 * with g_ij = 1 − tanh²(scale·q_i·k_j / softcap) under a softcap (1 otherwise). The score
 * s_ij is the forward's (common.cl: the rule, score_terms16), taken relative to the
 * row's ALiBi reference as the forward kernels take it; bwd_prep turns the caller's LSE
 * into that frame once per row.
 *
 * Each output element written by exactly one work-item in a fixed order, with no
 * atomics: the same bits on every run (FlashAttention-2 accumulates dQ with atomic adds
 * instead). Two ways to dQ, the host's choice (tuning.c clattn_backward_blocking):
 *   bwd_prep    NDRange (n_q, batch·h_q): per row D_i and the relative LSE into rows[];
 *   bwd_dkdv    NDRange (⌈n_kv/RK⌉, batch·h_kv): per RK keys, every query row of their
 *               KV head's group (GQA: dK and dV sum over the group's query heads); then
 *   bwd_dq      NDRange (⌈n_q/RQ⌉, batch·h_q): per RQ query rows, their keys 16 at a
 *               time, recomputing P and dP (GPUs: 7 forward-sized products in all); or,
 *               DQ_FUSED (CPUs), bwd_dkdv's NDRange (splits·WG, batch·h_kv): each
 *               work-group walks the key blocks of one split and adds dS·K into that
 *               split's float32 partial dQ as well (5 products), and
 *   bwd_dq_sum  NDRange (n_q, batch·h_q) adds the splits' partial sums in split order.
 * RQ and RK (the host's, tuning.c): 4 on CPUs (2 above head dim 128), 1 on GPUs.
 * A row with no visible key, or past q_lens, adds nothing and gets dQ = 0; a key of
 * weight exactly 0 adds nothing, whatever its K and V. Private arrays of d_k and d_v
 * floats per work-item (the host allows head dims up to 256).
 */
#ifndef D_V
#define D_V 64
#endif

/* rows[2·row] = D_i, rows[2·row + 1] = the LSE relative to the row's ALiBi reference,
 * −∞ for a row that adds nothing (no visible key, padding, or an LSE of −∞) */
__kernel void clattn_bwd_prep(__global const ELEM_T(O_DT) *o, long o_off, long4 o_st,
                              __global const ELEM_T(DO_DT) *d_o, long do_off, long4 do_st,
                              __global const lse_t *lse, long lse_off, long4 lse_st,
                              __global float *rows, int h_q, long n_q, long n_kv,
                              __global const float *alibi, RULE_PARAMS)
{
    const long i = get_global_id(0), bh = get_global_id(1);
    if (i >= n_q)
        return;
    const long b = bh / h_q, h = bh % h_q, row = bh * n_q + i;
    const row_rule r = rule_at(RULE_ARGS, b, i, n_q, n_kv);
    const lse_t l = lse[view_at(lse_off, lse_st, b, h, i, 0)];
    const bool adds = r.hi > r.lo && l != (lse_t)(-INFINITY);
    float dsum = 0.0f;
    for (int c = 0; adds && c < D_V; c++)
        dsum = fma(LD(O_DT, o, view_at(o_off, o_st, b, h, i, c)),
                   LD(DO_DT, d_o, view_at(do_off, do_st, b, h, i, c)), dsum);
    rows[2 * row] = dsum;
    /* LSE = LSE_rel − slope·ref (common.cl LSE_ABS), undone in the LSE's precision */
    const lse_t rel = l + (ALIBI ? (lse_t)alibi[h] * (lse_t)alibi_ref(r) : (lse_t)0);
    rows[2 * row + 1] = adds ? (float)rel : -INFINITY;
}
