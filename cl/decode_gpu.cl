/* decode_gpu.cl — the GPU family's decoding (n_q ≤ 16): split-KV attention
 * ("flash-decoding": Dao, Haziza, Massa, Sizov 2023, "Flash-Decoding for long-context
 * inference"), the first of two kernels; split_merge.cl combines the splits.
 *
 * The keys a work-group's rows see are cut into n_splits chunks of whole steps of WG keys
 * (at least `chunk` keys; common.cl split_range), so that batch × KV heads × splits
 * work-groups fill the device even for one sequence or a window. Work-group (split, row
 * block, batch entry × KV head) takes RB of the rows of a KV head — rows
 * ρ = g·n_q + i for query head h = hk·group + g and query i, as decode.cl numbers them —
 * and streams its chunk of K and V once for all of them (grouped-query heads share
 * each K/V read), in steps of WG keys:
 *   1. scores: the group stages KB K rows at a time in local memory (coalesced), and
 *      work-item t forms the dot products of key t % KB with rows t / KB, … (the
 *      queries staged in local memory too);
 *   2. steps that are not fully visible to every row, or have score terms, pass through
 *      score_terms16 (common.cl) 16 keys of a row at a time, as in fused_gpu.cl;
 *   3. the row maxima of the step (16 partial maxima per row), the online-softmax
 *      rescale, P = exp(S − m) in local memory;
 *   4. O += P·V, KB keys at a time staged in local memory like K: work-item t owns
 *      column t % CW (and t % CW + CW, …) of every row and the keys of one residue mod
 *      KS = WG/CW. Keys of weight 0 add nothing (inf/NaN values).
 * Local memory (plan.c's decode_gpu_local must agree): q_s, k_s, s_s, red, comb, comb_l.
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
#ifndef KB
#define KB 32 /* keys per K / V staging (a divisor of WG) */
#endif
#define K_STRIDE (DK8 + 4)             /* local row stride of the staged K rows */
#define DVW ((NCOL * CW + 3) / 4 * 4)  /* … and of the staged V rows (whole float4s) */
#define KV_FLOATS (KB * (K_STRIDE > DVW ? K_STRIDE : DVW))

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
    float scale, int n_splits, long chunk, RULE_PARAMS, TERM_PARAMS, PAGE_PARAMS,
    __global const float *k_sc, long ks_off, long4 ks_st, __global const float *v_sc, long vs_off,
    long4 vs_st, ROW0_PARAMS)
{
    __local float q_s[RB * DK8];
    __local float k_s[KV_FLOATS]; /* K rows, then V rows, of the step, KB at a time */
    __local float s_s[RB * WG];   /* s_s[r·WG + t]: scores, then weights, of the step */
    __local float red[RB * 16];   /* partial maxima */
    __local float comb[RB * WG];  /* the KS key residues' sums at the end */
    __local float comb_l[RB * KS];
    const int t = get_local_id(0);
    const int split = get_group_id(0);
    const long rb0 = get_global_id(1) * RB; /* first row of the block */
    const long h_kv = h_q / group, bhk = get_global_id(2);
    const long b = bhk / h_kv, hk = bhk % h_kv;
    if (VARLEN) { /* a packed batch: sequence b's rows (the partials stay per row) */
        VARLEN_SHIFT(q_off, q_st, q_row0[b]);
        VARLEN_SHIFT(k_off, k_st, k_row0[b]);
        VARLEN_SHIFT(v_off, v_st, k_row0[b]);
        VARLEN_SHIFT(ks_off, ks_st, k_row0[b]);
        VARLEN_SHIFT(vs_off, vs_st, k_row0[b]);
    }
    const int16 lane = (int16)(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    const bool terms = SCORE_TERMS || mask == MASK_NO_SELF;

    for (int e = t; e < RB * DK8; e += WG) {
        const int r = e / DK8, c = e % DK8;
        long h, i;
        const row_rule rr = block_row(RULE_ARGS, b, hk, group, n_q, n_kv, rb0 + r, &h, &i);
        (void)rr;
        q_s[e] = rb0 + r < group * n_q && i < Q_ROWS(b) && c < D_K ? LD(Q_DT, q, view_at(q_off, q_st, b, h, i, c))
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
    const long2 part = split_range(lo_all, hi_all, split, n_splits, chunk, WG);
    const long k_lo = part.x, k_hi = part.y;

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
        /* 1. scores, KB keys at a time: the group stages their K rows in local memory
         * (coalesced float4 loads), then work-item t forms the dot products of key
         * t % KB with rows t / KB, t / KB + WG/KB, … */
        for (int sb = 0; sb < WG; sb += KB) {
            (void)TYPED(stage4, K_DT)(k, k_off, k_st, b, hk, j0 + sb, k_hi, KB, D_K, DK8, K_STRIDE,
                                      k_s KV_PAGES);
            barrier(CLK_LOCAL_MEM_FENCE);
            const int kk = t % KB;
            for (int r = t / KB; r < RB; r += WG / KB) {
                float x = 0.0f;
                for (int c = 0; c < DK8; c += 4) {
                    const float4 qv = vload4(0, q_s + r * DK8 + c);
                    const float4 kv = vload4(0, k_s + kk * K_STRIDE + c);
                    x = fma(qv.x, kv.x, x);
                    x = fma(qv.y, kv.y, x);
                    x = fma(qv.z, kv.z, x);
                    x = fma(qv.w, kv.w, x);
                }
#if K_SCALED /* a quantized key: its scale (common.cl kv_scale) */
                if (j0 + sb + kk < k_hi)
                    x *= kv_scale(k_sc, ks_off, ks_st, b, hk, j0 + sb + kk KV_PAGES);
#endif
                s_s[r * WG + sb + kk] = j0 + sb + kk < k_hi ? x * scale : -INFINITY;
            }
            barrier(CLK_LOCAL_MEM_FENCE); /* k_s free for the next keys */
        }
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
                    rel_bound(min(rr.hi, k_hi), j0, WG), rel_key(rr.self, j0, WG), j0, n_kv,
                    TERM_ARGS, mbase, rr.diag, ALIBI ? alibi[h] : 0.0f, ALIBI ? alibi_ref(rr) : 0,
                    b, h, i);
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
        /* 4. O += P·V over this work-item's key residue, KB keys at a time: the group
         * stages their V rows in local memory (coalesced float4 loads, all in flight at
         * once) in K's buffer; staged keys past the split weigh 0 */
        for (int sb = 0; sb < WG && j0 + sb < k_hi; sb += KB) {
            (void)TYPED(stage4, V_DT)(v, v_off, v_st, b, hk, j0 + sb, k_hi, KB, D_V, DVW, DVW,
                                      k_s KV_PAGES);
            barrier(CLK_LOCAL_MEM_FENCE);
            for (int jj = kh; jj < KB; jj += KS) {
                float vv[NCOL];
#if V_SCALED /* a quantized value row: its scale on the weight (not in l) */
                const float vsc = j0 + sb + jj < k_hi
                                      ? kv_scale(v_sc, vs_off, vs_st, b, hk, j0 + sb + jj KV_PAGES)
                                      : 0.0f;
#else
                const float vsc = 1.0f;
#endif
                #pragma unroll
                for (int n = 0; n < NCOL; n++)
                    vv[n] = k_s[jj * DVW + col + CW * n];
                #pragma unroll
                for (int r = 0; r < RB; r++) {
                    const float p = s_s[r * WG + sb + jj];
                    l[r] += p;
                    if (p != 0.0f) /* weight 0 adds nothing, even inf or NaN values */
                        for (int n = 0; n < NCOL; n++)
                            acc[r][n] = fma(p * vsc, vv[n], acc[r][n]);
                }
            }
            barrier(CLK_LOCAL_MEM_FENCE); /* k_s free for the next keys */
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
