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
 * each K/V read), in steps of WG keys, straight from global memory into registers (no
 * staging: a staged copy between barriers kept 8 KiB in flight per group and reached 42 %
 * of an H200's read bandwidth with no arithmetic at all; docs/BENCHMARKS.md):
 *   1. scores: LK = ⌈D_K/16⌉ work-items share a key, each loading 16 of its columns
 *      (common.cl load_row16; V's 8 columns by load_row8) and forming its partial dot
 *      products with the rows' q (registers); KPR = WG/LK keys a round, the rounds' loads
 *      independent; the LK partials of each (row, key) go through local memory (psum) and
 *      work-item t sums those of key t;
 *   2. steps that are not fully visible to every row, or have score terms, pass through
 *      score_terms16 (common.cl) 16 keys of a row at a time, as in fused_gpu.cl;
 *   3. the row maxima of the step (16 partial maxima per row), the online-softmax
 *      rescale, P = exp(S − m) in local memory;
 *   4. O += P·V: LV = ⌈D_V/8⌉ work-items share a value row, each owning 8 columns of every
 *      row of the block, over the keys of one residue mod VR = WG/LV (loads coalesced
 *      along the row); the VR residues' sums are added at the end. Keys of weight 0 add
 *      nothing (inf/NaN values).
 * Local memory (plan.c's decode_gpu_local must agree): q_s, s_s, red, psum, comb_l.
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
#define LK ((D_K + 15) / 16)     /* work-items sharing a key in the scores */
#define DK16 (LK * 16)
#define KPR (WG / LK)              /* keys a round of the scores (WG ≥ LK: plan.c) */
#define LV ((D_V + 7) / 8)         /* work-items sharing a value row in O += P·V */
#define VR (WG / LV)               /* key residues of O += P·V (WG ≥ LV: plan.c) */
#define NSV (WG / 16)              /* 16-key vectors per step */
#define NRK ((WG + KPR - 1) / KPR) /* rounds of the scores per step */
#define NRV ((WG + VR - 1) / VR)   /* rounds of O += P·V per step */
#ifndef KBATCH
#define KBATCH 2 /* rounds of K loads issued before their arithmetic (in flight together) */
#endif
#ifndef VBATCH
#define VBATCH 4 /* … of V loads */
#endif
/* psum: the scores' partial sums, [RB·LK][PART_RS] (a row stride that spreads a round's
 * writes over the banks), then the residues' O sums [VR·RB][LV·8] */
#define PART_RS (WG + (LK >= 32 ? 1 : 32 / LK))
#define PART_FLOATS (RB * LK * PART_RS > VR * RB * LV * 8 ? RB * LK * PART_RS : VR * RB * LV * 8)

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
    __local float q_s[RB * DK16];
    __local float s_s[RB * WG]; /* s_s[r·WG + t]: scores, then weights, of the step */
    __local float red[RB * 16]; /* partial maxima */
    __local float psum[PART_FLOATS];
    __local float comb_l[RB * VR];
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

    for (int e = t; e < RB * DK16; e += WG) {
        const int r = e / DK16, c = e % DK16;
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

    float m[RB], l[RB];
    float8 acc[RB];
    for (int r = 0; r < RB; r++) {
        m[r] = -INFINITY;
        l[r] = 0.0f;
        acc[r] = 0.0f;
    }
    barrier(CLK_LOCAL_MEM_FENCE); /* the queries staged */
    const int kl = t % LK, ks = t / LK; /* scores: columns 16·kl.., keys ks, ks + KPR, … */
    const int vl = t % LV, vs = t / LV; /* O += P·V: columns 8·vl.., keys vs, vs + VR, … */
    float16 qr[RB];
    for (int r = 0; r < RB; r++)
        qr[r] = vload16(0, q_s + r * DK16 + 16 * kl);
    for (long j0 = k_lo; j0 < k_hi; j0 += WG) {
        /* 1. scores: KBATCH rounds' K loads issued together, then their products */
        if (ks < KPR) {
            for (int u0 = 0; u0 < NRK; u0 += KBATCH) {
                float16 kx[KBATCH];
                #pragma unroll
                for (int w = 0; w < KBATCH; w++) {
                    const int kk = (u0 + w) * KPR + ks;
                    kx[w] = u0 + w < NRK && kk < WG && j0 + kk < k_hi
                                ? TYPED(load_row16, K_DT)(
                                      k, kv_row(k_off, k_st, b, hk, j0 + kk KV_PAGES), k_st.s3,
                                      16 * kl, D_K)
                                : (float16)0.0f;
                }
                #pragma unroll
                for (int w = 0; w < KBATCH; w++) {
                    const int kk = (u0 + w) * KPR + ks;
                    if (u0 + w < NRK && kk < WG)
                        for (int r = 0; r < RB; r++) {
                            const float16 pr = qr[r] * kx[w];
                            const float8 h8 = pr.lo + pr.hi;
                            const float4 h4 = h8.lo + h8.hi;
                            psum[(r * LK + kl) * PART_RS + kk] = (h4.x + h4.y) + (h4.z + h4.w);
                        }
                }
            }
        }
        barrier(CLK_LOCAL_MEM_FENCE);
        for (int r = 0; r < RB; r++) { /* work-item t: key j0 + t */
            float x = 0.0f;
            for (int c = 0; c < LK; c++)
                x += psum[(r * LK + c) * PART_RS + t];
#if K_SCALED /* a quantized key: its scale (common.cl kv_scale) */
            if (j0 + t < k_hi)
                x *= kv_scale(k_sc, ks_off, ks_st, b, hk, j0 + t KV_PAGES);
#endif
            s_s[r * WG + t] = j0 + t < k_hi ? x * scale : -INFINITY;
        }
        barrier(CLK_LOCAL_MEM_FENCE); /* the scores in s_s; psum free */
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
                acc[r] *= alpha;
                m[r] = m_new[r];
            }
        barrier(CLK_LOCAL_MEM_FENCE); /* P in place */
        /* 4. O += P·V: work-item t takes columns 8·vl.. of keys vs, vs + VR, … of the
         * step (each round's V loads coalesced along the rows); keys past the split
         * weigh 0 */
        if (vs < VR) {
            for (int u0 = 0; u0 < NRV && j0 + u0 * VR < k_hi; u0 += VBATCH) {
                float8 vx[VBATCH];
                float vsc[VBATCH];
                #pragma unroll
                for (int w = 0; w < VBATCH; w++) { /* VBATCH rounds' loads together */
                    const int kk = (u0 + w) * VR + vs;
                    const bool in = u0 + w < NRV && kk < WG && j0 + kk < k_hi;
                    vx[w] = in ? TYPED(load_row8, V_DT)(
                                         v, kv_row(v_off, v_st, b, hk, j0 + kk KV_PAGES),
                                         v_st.s3, 8 * vl, D_V)
                               : (float8)0.0f;
#if V_SCALED /* a quantized value row: its scale on the weight (not in l) */
                    vsc[w] = in ? kv_scale(v_sc, vs_off, vs_st, b, hk, j0 + kk KV_PAGES) : 0.0f;
#else
                    vsc[w] = 1.0f;
#endif
                }
                #pragma unroll
                for (int w = 0; w < VBATCH; w++) {
                    const int kk = (u0 + w) * VR + vs;
                    if (u0 + w < NRV && kk < WG)
                        for (int r = 0; r < RB; r++) {
                            const float p = s_s[r * WG + kk];
                            l[r] += p;
                            if (p != 0.0f) /* weight 0 adds nothing, even inf or NaN values */
                                acc[r] = fma((float8)(p * vsc[w]), vx[w], acc[r]);
                        }
                }
            }
        }
        barrier(CLK_LOCAL_MEM_FENCE); /* all reads of P done before the next step */
    }
    /* the VR residues' sums into residue 0 (psum holds them: no scores are left), then
     * the split's O and LSE */
    if (vs < VR) {
        for (int r = 0; r < RB; r++) {
            vstore8(acc[r], 0, psum + (vs * RB + r) * LV * 8 + 8 * vl);
            if (vl == 0)
                comb_l[r * VR + vs] = l[r];
        }
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    if (vs != 0)
        return; /* no barrier follows */
    for (int r = 0; r < RB; r++) {
        float8 a = 0.0f;
        float ls = 0.0f;
        for (int w = 0; w < VR; w++) {
            a += vload8(0, psum + (w * RB + r) * LV * 8 + 8 * vl);
            ls += comb_l[r * VR + w];
        }
        acc[r] = a;
        l[r] = ls;
    }
    for (int r = 0; r < RB; r++) {
        const long rho = rb0 + r;
        if (rho >= group * n_q)
            break;
        long h, i;
        (void)block_row(RULE_ARGS, b, hk, group, n_q, n_kv, rho, &h, &i);
        const long row = (b * h_q + h) * n_q + i;
        const bool empty = m[r] == -INFINITY;
        float o[8];
        vstore8(empty ? (float8)0.0f : acc[r] / l[r], 0, o);
        for (int u = 0; u < 8; u++)
            if (8 * vl + u < D_V)
                part_o[(row * n_splits + split) * D_V + 8 * vl + u] = o[u];
        if (vl == 0)
            part_lse[row * n_splits + split] = empty ? -INFINITY : m[r] + log(l[r]);
    }
}
