/* rows.cl — what the fused kernels share beyond common.cl (every program includes it,
 * after common.cl and dropout.cl; host/program.c): their one signature (FUSED_PARAMS),
 * the rows of a packed variable-length batch, attention sinks, the row store and the
 * softmax's exponential. */

/* ---- the fused kernels (fused.cl, decode.cl): one signature and one row store ----
 * The arguments; lse may be NULL (not written). */

#define FUSED_PARAMS                                                                        \
    __global const ELEM_T(Q_DT) *q, long q_off, long4 q_st, __global const ELEM_T(K_DT) *k, \
        long k_off, long4 k_st, __global const ELEM_T(V_DT) *v, long v_off, long4 v_st,     \
        __global ELEM_T(O_DT) *o, long o_off, long4 o_st, __global lse_t *lse, long lse_off, \
        long4 lse_st, int h_q, int group, long n_q, long n_kv, float scale, int masked_nan, \
        int lse_relative, \
        RULE_PARAMS, TERM_PARAMS, PAGE_PARAMS, __global const float *sinks,                \
        __global const float *k_sc, long ks_off, long4 ks_st, __global const float *v_sc,  \
        long vs_off, long4 vs_st, DROPOUT_PARAMS, ROW0_PARAMS

/* ---- packed variable-length batches in one launch (-DVARLEN=1; host: varlen.c) ----
 * Batch entry b is sequence b of a packed batch (FlashAttention's cu_seqlens): its query
 * rows start at row q_row0[b] of Q, O and the LSE, its keys at row k_row0[b] of K, V and
 * their scales (the host passes batch strides of 0), and q_lens / kv_lens hold its
 * lengths, so every rule and term sees a batch entry of those lengths. The host (or
 * clattn_varlen of varlen.cl, from offsets on the device) clamps row0 + length into the
 * packed tensors. Rows past a sequence's length belong to the next one: not written.
 * Programs built with VARLEN 0 take the arguments and never read them. */
#ifndef VARLEN
#define VARLEN 0
#endif
#define ROW0_PARAMS __global const int *q_row0, __global const int *k_row0
/* (row0 is not evaluated in programs without VARLEN: its array is NULL there) */
#define VARLEN_SHIFT(off, st, row0) ((off) += VARLEN ? (long)(row0) * (st).s2 : 0L)
/* the rows of Q that batch entry b may read: n_q, or its sequence's length (past it lie
 * the next sequence's rows, or the end of Q) */
#define Q_ROWS(b) (VARLEN ? seq_len(q_lens, (b), n_q) : n_q)
/* the views of a FUSED_PARAMS kernel moved to batch entry b's sequence */
#define VARLEN_ROWS(b)                                                                      \
    do {                                                                                    \
        if (VARLEN) {                                                                       \
            VARLEN_SHIFT(q_off, q_st, q_row0[b]);                                           \
            VARLEN_SHIFT(o_off, o_st, q_row0[b]);                                           \
            VARLEN_SHIFT(lse_off, lse_st, q_row0[b]);                                       \
            VARLEN_SHIFT(k_off, k_st, k_row0[b]);                                           \
            VARLEN_SHIFT(v_off, v_st, k_row0[b]);                                           \
            VARLEN_SHIFT(ks_off, ks_st, k_row0[b]);                                         \
            VARLEN_SHIFT(vs_off, vs_st, k_row0[b]);                                         \
        }                                                                                   \
    } while (0)


/* ---- attention sinks (the desc's sinks; host twin: reference.c) ----
 * Head h's sink is one more key of logit sinks[h] and value zero in every row's softmax.
 * Folds it into row i's online-softmax state (m, l), relative to the row's ALiBi
 * reference as the scores are (sinks[h] + slope·ref), and returns the factor the row's
 * accumulator takes (exp(m − m_new); 1 when the max does not move). No sinks (NULL), a
 * sink of −∞ and padding rows: nothing changes. A row with no visible key gets m = the
 * sink and l = 1: output zeros, LSE = the sink. Split-KV decoding folds it in the merge
 * (split_merge.cl), as one more part of O = 0. */
float fold_sink(__global const float *sinks, long h, __global const int *q_lens, long b, long i,
                float *m, float *l, float slope, long ref)
{
    if (!sinks || row_padding(q_lens, b, i))
        return 1.0f;
    const float s = sinks[h] + slope * (float)ref;
    if (s == -INFINITY)
        return 1.0f;
    const float m_new = max_nan(*m, s);
    const float alpha = m_new == *m ? 1.0f : exp(*m - m_new); /* 0 from an empty row */
    *l = *l * alpha + exp(s - m_new);
    *m = m_new;
    return alpha;
}

/* Row i of head h, batch entry b (variables at the use; D_V, D_V_PAD and N_AV from the
 * kernel file): the sink folded in (fold_sink), then acc / l, or for a row with no
 * visible key zeros (NaN with masked_nan, but zeros for padding rows); LSE = m + log l
 * (−∞ for no visible key). */
#define STORE_ROW(acc_row, m_row, l_row, slope_row, ref_row)                                \
    do {                                                                                    \
        if (VARLEN && row_padding(q_lens, b, i))                                            \
            break; /* another sequence's row */                                             \
        float out_[D_V_PAD];                                                                \
        float ms_ = (m_row), ls_ = (l_row);                                                 \
        const float as_ = fold_sink(sinks, h, q_lens, b, i, &ms_, &ls_, slope_row, ref_row); \
        const bool empty_ = (ms_ == -INFINITY);                                             \
        const float fill_ = masked_nan && !row_padding(q_lens, b, i) ? NAN : 0.0f;          \
        _Pragma("unroll") for (int a_ = 0; a_ < N_AV; a_++)                                 \
            vstore16(empty_ ? (float16)(fill_) : (acc_row)[a_] * as_ / ls_, a_, out_);      \
        for (int c_ = 0; c_ < D_V; c_++)                                                    \
            ST(O_DT, o, view_at(o_off, o_st, b, h, i, c_), out_[c_]);                       \
        STORE_LSE(empty_, ms_, ls_, m_row, slope_row, ref_row);                             \
    } while (0)

/* The LSE of row i (variables at the use): −∞ for a row with no visible key, else
 * m + log l and the row's ALiBi constant; lse_relative (the second passes: weights, key
 * weight sums, max logits) keeps three columns: the row max and log l (the sink folded
 * in), and the max of the scores alone (mx_row, before the sink; −∞ for no visible key).
 * Nothing without an LSE. */
#define STORE_LSE(empty_row, m_row, l_row, mx_row, slope_row, ref_row)                      \
    do {                                                                                    \
        const long lat_ = view_at(lse_off, lse_st, b, h, i, 0);                             \
        if (lse && lse_relative) { /* the second passes: max, log l, max of the scores */  \
            lse[lat_] = (empty_row) ? (lse_t)(-INFINITY) : (lse_t)(m_row);                  \
            lse[lat_ + lse_st.s3] = (empty_row) ? (lse_t)0.0f : (lse_t)log(l_row);          \
            lse[lat_ + 2 * lse_st.s3] = (lse_t)(mx_row);                                    \
        } else if (lse) {                                                                   \
            lse[lat_] = (empty_row) ? (lse_t)(-INFINITY)                                    \
                                    : LSE_ABS((m_row) + log(l_row), (slope_row), (ref_row)); \
        }                                                                                   \
    } while (0)

/* ---- the softmax's exponential ---- */
/* e^x for the softmax's x = s − m ≤ 0 (and NaN), 16 lanes at a time: the usual range
 * reduction x = n·ln 2 + r, |r| ≤ ln 2 / 2, with ln 2 in two parts (Cody & Waite 1980),
 * exp(r) by the degree-7 polynomial of Cephes' expf (Moshier 1989: 1 + r + r²·P5(r)), and
 * 2^n built in the exponent bits. n comes from one FMA: adding 1.5·2^23 + 191 rounds
 * x·log2(e) to an integer (round to nearest even) and leaves n + 191 in the low mantissa
 * bits, which the shift moves into the exponent: 2^(n + 64), a normal float down to
 * n = −190, and a last product by 2^−64 rounds p·2^n once, so results below the smallest
 * normal float are the IEEE subnormals (exact for normal results). About 16 vector
 * instructions per 8 lanes where PoCL's exp takes 24: the fused kernel 0.93-0.94x the time
 * at d 64 with it, 0.97-0.99x at d 128 (one thread, BENCHMARKS.md; that version flushed
 * subnormal results, one product less); fused.cl and decode.cl use it. Error: 2.3·2⁻²⁴
 * relative at worst, plus half a subnormal ulp (2⁻¹⁵⁰) below FLT_MIN, measured by
 * test_exact's softmax_exp_whole_range; e^x for x < −104 (below half the smallest
 * subnormal) is 0, as is e^−∞; NaN stays NaN. Valid for x ≤ 44 (n + 191 must fit in 8
 * bits): here x ≤ 0 always, since m is the running max. */
float16 exp_softmax16(float16 x)
{
    /* e^x < 2^−150 rounds to 0, −∞ too: x clamped to −104 (a select, so NaN stays NaN) */
    const float16 xc = select(x, (float16)(-104.0f), x < -104.0f);
    const float16 t = fma(xc, (float16)(1.44269504f), (float16)(12583103.0f)); /* 1.5·2^23 + 191 */
    const float16 n = t - 12583103.0f;
    float16 r = fma(n, (float16)(-0.693359375f), xc); /* ln 2 = 0.693359375 − 2.12194440e-4 */
    r = fma(n, (float16)(2.12194440e-4f), r);
    float16 p = (float16)(1.9875691500e-4f);
    p = fma(p, r, (float16)(1.3981999507e-3f));
    p = fma(p, r, (float16)(8.3334519073e-3f));
    p = fma(p, r, (float16)(4.1665795894e-2f));
    p = fma(p, r, (float16)(1.6666665459e-1f));
    p = fma(p, r, (float16)(5.0000001201e-1f));
    p = fma(p, r * r, r + 1.0f);
    /* p·2^(n + 64), exact, then ·2^−64: one rounding, into a subnormal where p·2^n is one;
     * for x clamped to −104 (n = −150, p < 1) it rounds to 0, so e^−∞ is 0 with no select */
    return p * as_float16(as_int16(t) << 23) * 0x1p-64f;
}
