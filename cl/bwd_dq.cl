/* bwd_dq.cl — the backward pass's dQ (bwd_prep.cl's header states the algorithm). A
 * work-group of WG work-items takes WG·RQ query rows of one (batch entry, query head), RQ
 * rows per work-item, and walks the keys any of them sees in tiles of 16: the group
 * stages the tile's K and V rows transposed in local memory (kt[c·16 + key], stage_rows)
 * and K again row-major; each work-item forms its rows' 16 scores and dP as GEMM
 * micro-kernels in broadcast form (each staged K or V column vector feeds RQ FMAs, one
 * float16 accumulator per row: scale·q·k, then the rule and terms through score_terms16,
 * the forward's; dP = dO·V), P = exp(s − LSE), dS = P·(dP − D)·scale·g, and dQ += dS_t·K_t
 * key by key from the row-major K rows (each K vector feeding RQ FMAs, the accumulators
 * of up to 4 vectors per row in registers at a time). DROPOUT: dP = z·dO·V with the
 * forward's factor z (dropout.cl), so a dropped weight has dS = −P·D. A weight of 0 adds
 * nothing even where K holds inf or NaN: the work-items flag staged K rows holding either,
 * and only such tiles take the sum that tests each weight (fused.cl does the same). */
#ifndef D_K
#define D_K 64
#endif
#ifndef D_V
#define D_V 64
#endif
#ifndef WG
#define WG 32 /* work-items per work-group */
#endif
#ifndef RQ
#define RQ 1 /* query rows per work-item (the host: 4 on 16-lane CPUs, 2 on others, 1 on GPUs) */
#endif
#define KT 16 /* keys per tile */
/* private and local array lengths (a head dim may be 0) */
#define DK_N (D_K > 0 ? D_K : 1)
#define DV_N (D_V > 0 ? D_V : 1)
#define DKP PAD16(DK_N) /* d_k in whole float16 vectors */
#define NK (DKP / 16)

__kernel __attribute__((reqd_work_group_size(WG, 1, 1))) void clattn_bwd_dq(
    __global const ELEM_T(Q_DT) *q, long q_off, long4 q_st, __global const ELEM_T(K_DT) *k,
    long k_off, long4 k_st, __global const ELEM_T(V_DT) *v, long v_off, long4 v_st,
    __global const ELEM_T(DO_DT) *d_o, long do_off, long4 do_st, __global const float *rows,
    __global ELEM_T(DQ_DT) *dq, long dq_off, long4 dq_st, int h_q, int group, long n_q,
    long n_kv, float scale, RULE_PARAMS, TERM_PARAMS, DROPOUT_PARAMS)
{
    __local float kt[DK_N * KT], vt[DV_N * KT], k_r[KT * DKP];
    __local int tile_bad[WG]; /* work-item t staged a K row holding inf or NaN */
    const int lid = get_local_id(0);
    const long g0 = get_group_id(0) * (WG * RQ), i0 = g0 + lid * RQ, bh = get_global_id(1);
    const long b = bh / h_q, h = bh % h_q, hk = h / group;
    const int16 lane = (int16)(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    const float slope = ALIBI ? alibi[h] : 0.0f;
    float qi[RQ][DK_N], gi[RQ][DV_N], dsum[RQ], lse_r[RQ];
    float16 acc[RQ][NK];
    row_rule rule[RQ];
    long wi_lo = n_kv, wi_hi = 0; /* keys any active row of this work-item sees */
    for (int r = 0; r < RQ; r++) { /* (setup and stores not unrolled: compile time) */
        const long i = i0 + r;
        const bool in = i < n_q;
        const long row = bh * n_q + (in ? i : 0);
        dsum[r] = in ? rows[2 * row] : 0.0f;
        lse_r[r] = in ? rows[2 * row + 1] : -INFINITY;
        const bool active = lse_r[r] != -INFINITY; /* the row adds something */
        for (int c = 0; c < D_K; c++)
            qi[r][c] = active ? LD(Q_DT, q, view_at(q_off, q_st, b, h, i, c)) : 0.0f;
        for (int c = 0; c < D_V; c++)
            gi[r][c] = active ? LD(DO_DT, d_o, view_at(do_off, do_st, b, h, i, c)) : 0.0f;
        for (int a = 0; a < NK; a++)
            acc[r][a] = 0.0f;
        rule[r] = rule_at(RULE_ARGS, b, in ? i : 0, n_q, n_kv);
        if (!active)
            rule[r].lo = rule[r].hi = 0;
        if (rule[r].hi > rule[r].lo) {
            wi_lo = min(wi_lo, rule[r].lo);
            wi_hi = max(wi_hi, rule[r].hi);
        }
    }
    /* the keys any row of the group sees (uniform) */
    const long2 kr = group_key_range(RULE_ARGS, b, g0, g0 + WG * RQ - 1, n_q, n_kv);
    for (long j0 = kr.x / KT * KT; j0 < kr.y; j0 += KT) {
        TYPED(stage_rows, K_DT)(k, k_off, k_st, b, hk, j0, n_kv, D_K, D_K, KT, WG, true, kt NO_PAGES);
        TYPED(stage_rows, V_DT)(v, v_off, v_st, b, hk, j0, n_kv, D_V, D_V, KT, WG, true, vt NO_PAGES);
        TYPED(stage_rows, K_DT)(k, k_off, k_st, b, hk, j0, n_kv, D_K, DKP, KT, WG, false, k_r NO_PAGES);
        tile_bad[lid] = rows_nonfinite(k_r, KT, DKP, WG);
        barrier(CLK_LOCAL_MEM_FENCE); /* the tile staged */
        bool k_finite = true;
        for (int t = 0; t < WG; t++)
            k_finite &= !tile_bad[t];
        if (j0 < wi_hi && j0 + KT > wi_lo) {
            /* the raw scores and dP of RQ rows × 16 keys: one float16 accumulator per row,
             * each staged column vector feeding RQ FMAs */
            float16 sr[RQ], dpr[RQ];
            MICRO_COLS(sr, qi, kt, D_K, RQ);
            MICRO_COLS(dpr, gi, vt, D_V, RQ);
            float pa[RQ][KT], dsa[RQ][KT];
            for (int r = 0; r < RQ; r++) {
                const long i = i0 + r;
                if (!(j0 < rule[r].hi && j0 + KT > rule[r].lo)) { /* the row sees none of it */
                    vstore16((float16)(0.0f), 0, pa[r]);
                    vstore16((float16)(0.0f), 0, dsa[r]);
                    continue;
                }
                const long mbase = MASK_T ? view_at(mt_off, mt_st, b, h, i, 0) : 0;
                const float16 raw = sr[r] * scale;
                const float16 s = score_terms16(raw, lane, rel_bound(rule[r].lo, j0, KT),
                                                rel_bound(rule[r].hi, j0, KT),
                                                rel_key(rule[r].self, j0, KT), j0, n_kv, TERM_ARGS,
                                                mbase, rule[r].diag, slope,
                                                ALIBI ? alibi_ref(rule[r]) : 0, b, h, i);
                /* P ≤ 1: a recomputed score may round above the LSE where scores are huge
                 * (float32 steps of 256 at 1e9), and exp must not overflow to inf there */
                const float16 e = exp(s - lse_r[r]);
                const float16 p = select(e, (float16)(1.0f), e > 1.0f);
                float16 dp = dpr[r];
#if DROPOUT /* dP = z·dO·V (0 for a dropped weight, even at inf or NaN in V) */
                const float16 z = dropout16_keys(DROPOUT_ARGS, bh, i, j0);
                dp = select(dp * z, (float16)(0.0f), z == 0.0f);
#endif
                float16 ds = p * (dp - dsum[r]) * scale;
#if SOFTCAP
                const float16 tc = tanh(raw / softcap);
                ds *= 1.0f - tc * tc;
#endif
                /* a weight of 0 adds nothing: dS 0 there even where dP is inf or NaN */
                ds = select(ds, (float16)(0.0f), p == 0.0f);
                vstore16(p, 0, pa[r]);
                vstore16(ds, 0, dsa[r]);
            }
            /* dQ += dS·K: for each NV vectors of d_k, NV·RQ accumulators in registers over
             * the tile's 16 keys, each K vector feeding RQ FMAs (common.cl ACCUMULATE_ROWS;
             * acc lives across the barriers: in memory on CPUs, bwd_dkdv.cl says why that
             * matters) */
            if (k_finite) {
                ACCUMULATE_ROWS(acc, dsa, k_r, KT, DKP, NK, RQ);
            } else { /* K holds inf or NaN: a key of weight 0 is skipped, not multiplied */
                ACCUMULATE_ROWS_TESTED(acc, dsa, pa, k_r, KT, DKP, NK, RQ);
            }
        }
        barrier(CLK_LOCAL_MEM_FENCE); /* everyone done with the tile */
    }
    for (int r = 0; r < RQ; r++) {
        const long i = i0 + r;
        if (i >= n_q)
            break;
        for (int a = 0; a < NK; a++) {
            float out[16];
            vstore16(acc[r][a], 0, out);
            for (int e = 0; e < 16 && 16 * a + e < D_K; e++)
                ST(DQ_DT, dq, view_at(dq_off, dq_st, b, h, i, 16 * a + e), out[e]);
        }
    }
}
