/* decode_gpu.cl — the GPU family's decoding (n_q ≤ 16): split-KV attention
 * ("flash-decoding": Dao, Haziza, Massa, Sizov 2023, "Flash-Decoding for long-context
 * inference"), the first of two kernels; split_merge.cl combines the splits.
 *
 * The keys are cut into n_splits chunks of `chunk` keys, so that batch × KV heads ×
 * splits work-groups fill the device even for one sequence. Work-group (split, row
 * block, batch entry × KV head) takes RB of the rows of a KV head — rows
 * ρ = g·n_q + i for query head h = hk·group + g and query i, as decode.cl numbers them —
 * and streams its chunk of K and V once for all of them (grouped-query heads share
 * each K/V read), in steps of WG keys:
 *   1. scores: work-item t takes key j0 + t, reads its K row and forms the RB dot
 *      products against the rows' queries (staged in local memory; a broadcast);
 *   2. steps that are not fully visible to every row, or have score terms, pass through
 *      score_terms16 (common.cl) 16 keys of a row at a time, as in fused_gpu.cl;
 *   3. the row maxima of the step (16 partial maxima per row), the online-softmax
 *      rescale, P = exp(S − m) in local memory;
 *   4. O += P·V: work-item t owns column t % CW (and t % CW + CW, …) of every row and
 *      keys of one residue mod KS = WG/CW; the work-items of a warp read consecutive
 *      columns of a V row (coalesced). Keys of weight 0 add nothing (inf/NaN values).
 * Output: per row and split, O_s = acc/l (float32) and the LSE of the split relative to
 * the row's ALiBi reference, m + log l (−∞ where the split has no visible key), at
 * part_o[(row·n_splits + s)·D_V + c] and part_lse[row·n_splits + s], row =
 * (b·h_q + h)·n_q + i. The online softmax as in fused.cl (Milakov & Gimelshein 2018).
 */
#ifndef D_K
#define D_K 64
#endif
#ifndef D_V
#define D_V 64
#endif
#ifndef WG
#define WG 128 /* work-items per group = keys per step */
#endif
#ifndef RB
#define RB 4 /* rows per work-group, 1..WG/16 */
#endif
#define DK8 ((D_K + 7) / 8 * 8)
#if D_V <= WG && WG % D_V == 0
#define CW D_V /* columns one pass of the group covers */
#else
#define CW WG
#endif
#define KS (WG / CW)                  /* key residues: work-items sharing a column */
#define NCOL ((D_V + CW - 1) / CW)     /* columns per work-item */
#define NSV (WG / 16)                  /* 16-key vectors per step */

/* 8 elements c … c+7 of a row at src[base] (stride st3 along d), zeros past d */
#define DEFINE_LOAD8(dt)                                                                    \
    float8 load8_##dt(__global const ELEM_T_##dt *src, long base, long st3, int c, int d)  \
    {                                                                                       \
        if (st3 == 1 && c + 8 <= d)                                                         \
            return LD8_##dt(src, base + c);                                                 \
        float t[8];                                                                         \
        for (int u = 0; u < 8; u++)                                                         \
            t[u] = c + u < d ? LD_##dt(src, base + (c + u) * st3) : 0.0f;                   \
        return vload8(0, t);                                                                \
    }
#if K_DT == 0
DEFINE_LOAD8(0)
#elif K_DT == 1
DEFINE_LOAD8(1)
#else
DEFINE_LOAD8(2)
#endif

/* the rule of row r of the block (query head *h and query *i), none past the rows */
row_rule block_row(RULE_PARAMS, long b, long hk, int group, long n_q, long n_kv, long rho, long *h,
                   long *i)
{
    const bool in = rho < group * n_q;
    *h = hk * group + (in ? rho / n_q : 0);
    *i = in ? rho % n_q : 0;
    row_rule r = rule_at(RULE_ARGS, b, *i, n_q, n_kv);
    if (!in)
        r.lo = r.hi = 0;
    return r;
}

__kernel __attribute__((reqd_work_group_size(WG, 1, 1))) void clattn_decode_gpu(
    __global const ELEM_T(Q_DT) *q, long q_off, long4 q_st, __global const ELEM_T(K_DT) *k,
    long k_off, long4 k_st, __global const ELEM_T(V_DT) *v, long v_off, long4 v_st,
    __global float *part_o, __global float *part_lse, int h_q, int group, long n_q, long n_kv,
    float scale, int n_splits, long chunk, RULE_PARAMS, TERM_PARAMS)
{
    __local float q_s[RB * DK8];
    __local float s_s[RB * WG];   /* s_s[r·WG + t]: scores, then weights, of the step */
    __local float red[RB * 16];   /* partial maxima */
    __local float comb[RB * WG];  /* the KS key residues' sums at the end */
    __local float comb_l[RB * KS];
    const int t = get_local_id(0);
    const int split = get_group_id(0);
    const long rb0 = get_global_id(1) * RB; /* first row of the block */
    const long h_kv = h_q / group, bhk = get_global_id(2);
    const long b = bhk / h_kv, hk = bhk % h_kv;
    const int16 lane = (int16)(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    const bool terms = MASK_T || ALIBI || SOFTCAP || mask == MASK_NO_SELF;

    for (int e = t; e < RB * DK8; e += WG) {
        const int r = e / DK8, c = e % DK8;
        long h, i;
        const row_rule rr = block_row(RULE_ARGS, b, hk, group, n_q, n_kv, rb0 + r, &h, &i);
        (void)rr;
        q_s[e] = rb0 + r < group * n_q && c < D_K ? LD(Q_DT, q, view_at(q_off, q_st, b, h, i, c))
                                                  : 0.0f;
    }
    /* the keys of this split any row of the block may see; a step is plain when every
     * row sees all of it */
    long lo_all = n_kv, hi_all = 0, lo_max = 0, hi_min = n_kv;
    for (int r = 0; r < RB; r++) {
        long h, i;
        const row_rule rr = block_row(RULE_ARGS, b, hk, group, n_q, n_kv, rb0 + r, &h, &i);
        if (rb0 + r >= group * n_q)
            continue;
        lo_max = max(lo_max, rr.lo);
        hi_min = min(hi_min, rr.hi);
        if (rr.hi > rr.lo) {
            lo_all = min(lo_all, rr.lo);
            hi_all = max(hi_all, rr.hi);
        }
    }
    const long js = (long)split * chunk, je = min(js + chunk, n_kv);
    const long k_lo = max(js, lo_all), k_hi = min(je, hi_all);

    float m[RB], l[RB], acc[RB][NCOL];
    for (int r = 0; r < RB; r++) {
        m[r] = -INFINITY;
        l[r] = 0.0f;
        for (int n = 0; n < NCOL; n++)
            acc[r][n] = 0.0f;
    }
    barrier(CLK_LOCAL_MEM_FENCE); /* the queries staged */
    const int kh = t / CW, col = t % CW;
    for (long j0 = k_lo; j0 < k_hi; j0 += WG) {
        /* 1. scores of key j0 + t */
        const long j = j0 + t;
        float s[RB];
        for (int r = 0; r < RB; r++)
            s[r] = 0.0f;
        if (j < k_hi) {
            const long base = view_at(k_off, k_st, b, hk, j, 0);
            for (int c = 0; c < DK8; c += 8) {
                const float8 kv = TYPED(load8, K_DT)(k, base, k_st.s3, c, D_K);
                #pragma unroll
                for (int r = 0; r < RB; r++) {
                    const float8 qv = vload8(0, q_s + r * DK8 + c);
                    float x = fma(qv.s0, kv.s0, s[r]);
                    x = fma(qv.s1, kv.s1, x);
                    x = fma(qv.s2, kv.s2, x);
                    x = fma(qv.s3, kv.s3, x);
                    x = fma(qv.s4, kv.s4, x);
                    x = fma(qv.s5, kv.s5, x);
                    x = fma(qv.s6, kv.s6, x);
                    s[r] = fma(qv.s7, kv.s7, x);
                }
            }
        }
        #pragma unroll
        for (int r = 0; r < RB; r++)
            s_s[r * WG + t] = j < k_hi ? s[r] * scale : -INFINITY;
        barrier(CLK_LOCAL_MEM_FENCE);
        /* 2. the rule and score terms (uniform: the same for the whole group) */
        if (terms || lo_max > j0 || hi_min < j0 + WG || j0 + WG > k_hi) {
            for (int ch = t; ch < RB * NSV; ch += WG) {
                const int r = ch / NSV, sv = ch % NSV;
                long h, i;
                const row_rule rr =
                    block_row(RULE_ARGS, b, hk, group, n_q, n_kv, rb0 + r, &h, &i);
                const long mbase = MASK_T ? view_at(mt_off, mt_st, b, h, i, 0) : 0;
                const float16 x = score_terms16(
                    vload16(sv, s_s + r * WG), lane + 16 * sv, rel_bound(rr.lo, j0, WG),
                    rel_bound(min(rr.hi, k_hi), j0, WG), rel_key(rr.self, j0, WG), j0, n_kv, mt,
                    mt_off, mt_st, alibi, softcap, mbase, rr.diag, ALIBI ? alibi[h] : 0.0f,
                    ALIBI ? alibi_ref(rr) : 0);
                vstore16(x, sv, s_s + r * WG);
            }
            barrier(CLK_LOCAL_MEM_FENCE);
        }
        /* 3. row maxima: 16 partial maxima per row, then every work-item the row's */
        if (t < RB * 16) {
            const int r = t / 16, p = t % 16;
            float mx = -INFINITY;
            for (int u = 0; u < NSV; u++)
                mx = max_nan(mx, s_s[r * WG + p * NSV + u]);
            red[r * 16 + p] = mx;
        }
        barrier(CLK_LOCAL_MEM_FENCE);
        float m_new[RB];
        #pragma unroll
        for (int r = 0; r < RB; r++) {
            m_new[r] = m[r];
            for (int p = 0; p < 16; p++)
                m_new[r] = max_nan(m_new[r], red[r * 16 + p]);
        }
        #pragma unroll
        for (int r = 0; r < RB; r++) {
            const float x = s_s[r * WG + t];
            s_s[r * WG + t] = m_new[r] == -INFINITY ? 0.0f : exp(x - m_new[r]);
        }
        #pragma unroll
        for (int r = 0; r < RB; r++)
            if (m_new[r] != -INFINITY && m_new[r] != m[r]) {
                const float alpha = exp(m[r] - m_new[r]);
                l[r] *= alpha;
                for (int n = 0; n < NCOL; n++)
                    acc[r][n] *= alpha;
                m[r] = m_new[r];
            }
        barrier(CLK_LOCAL_MEM_FENCE); /* P in place */
        /* 4. O += P·V over this work-item's key residue */
        for (int jj = kh; jj < WG && j0 + jj < k_hi; jj += KS) {
            const long base = view_at(v_off, v_st, b, hk, j0 + jj, 0);
            float vv[NCOL];
            for (int n = 0; n < NCOL; n++)
                vv[n] = col + CW * n < D_V ? LD(V_DT, v, base + (col + CW * n) * v_st.s3) : 0.0f;
            #pragma unroll
            for (int r = 0; r < RB; r++) {
                const float p = s_s[r * WG + jj];
                l[r] += p;
                if (p != 0.0f)
                    for (int n = 0; n < NCOL; n++)
                        acc[r][n] = fma(p, vv[n], acc[r][n]);
            }
        }
        barrier(CLK_LOCAL_MEM_FENCE); /* all reads of P done before the next step */
    }
    /* the KS residues' sums into residue 0, then the split's O and LSE */
    if (KS > 1) {
        for (int r = 0; r < RB; r++) {
            comb[r * WG + t] = acc[r][0];
            if (col == 0)
                comb_l[r * KS + kh] = l[r];
        }
        barrier(CLK_LOCAL_MEM_FENCE);
        if (kh == 0)
            for (int r = 0; r < RB; r++) {
                float a = 0.0f, ls = 0.0f;
                for (int u = 0; u < KS; u++) {
                    a += comb[r * WG + u * CW + col];
                    ls += comb_l[r * KS + u];
                }
                acc[r][0] = a;
                l[r] = ls;
            }
    }
    if (kh != 0)
        return; /* no barrier follows */
    for (int r = 0; r < RB; r++) {
        const long rho = rb0 + r;
        if (rho >= group * n_q)
            break;
        long h, i;
        (void)block_row(RULE_ARGS, b, hk, group, n_q, n_kv, rho, &h, &i);
        const long row = (b * h_q + h) * n_q + i;
        const bool empty = m[r] == -INFINITY;
        for (int n = 0; n < NCOL; n++)
            if (col + CW * n < D_V)
                part_o[(row * n_splits + split) * D_V + col + CW * n] =
                    empty ? 0.0f : acc[r][n] / l[r];
        if (col == 0)
            part_lse[row * n_splits + split] = empty ? -INFINITY : m[r] + log(l[r]);
    }
}
