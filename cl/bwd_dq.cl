/* bwd_dq.cl — the backward pass's dQ (bwd_prep.cl's header states the algorithm). A
 * work-group of WG work-items takes WG query rows of one (batch entry, query head), a
 * row per work-item, and walks the keys any of them sees in tiles of 16: the group stages
 * the tile's K and V rows transposed in local memory (kt[c·16 + key], stage_rows), and
 * each work-item forms its row's 16 scores as float16 vectors (scale·q·k, then the rule
 * and terms through score_terms16, the forward's), P = exp(s − LSE), dP = dO·V,
 * dS = P·(dP − D)·scale·g, and dQ += dS_t·K_t key by key from the K rows also staged
 * row-major (float16 vectors along d_k). DROPOUT: dP = z·dO·V with the forward's factor
 * z (dropout.cl), so a dropped weight has dS = −P·D. */
#ifndef D_K
#define D_K 64
#endif
#ifndef D_V
#define D_V 64
#endif
#ifndef WG
#define WG 32 /* query rows per work-group */
#endif
#define KT 16 /* keys per tile */
/* private and local array lengths (a head dim may be 0) */
#define DK_N (D_K > 0 ? D_K : 1)
#define DV_N (D_V > 0 ? D_V : 1)
#define DKP PAD16(DK_N) /* d_k in whole float16 vectors */
#define NK (DKP / 16)

/* Σ_c x[c]·t[c·KT + lane] over c < n, in four independent FMA chains (a single chain
 * through the sum was bound by the FMA latency: a third of the kernel's time on CPUs) */
float16 dot_cols(const float *x, __local const float *t, int n)
{
    float16 a0 = 0.0f, a1 = 0.0f, a2 = 0.0f, a3 = 0.0f;
    int c = 0;
    for (; c + 4 <= n; c += 4) {
        a0 = fma((float16)(x[c]), vload16(0, t + c * KT), a0);
        a1 = fma((float16)(x[c + 1]), vload16(0, t + (c + 1) * KT), a1);
        a2 = fma((float16)(x[c + 2]), vload16(0, t + (c + 2) * KT), a2);
        a3 = fma((float16)(x[c + 3]), vload16(0, t + (c + 3) * KT), a3);
    }
    for (; c < n; c++)
        a0 = fma((float16)(x[c]), vload16(0, t + c * KT), a0);
    return (a0 + a1) + (a2 + a3);
}

__kernel __attribute__((reqd_work_group_size(WG, 1, 1))) void clattn_bwd_dq(
    __global const ELEM_T(Q_DT) *q, long q_off, long4 q_st, __global const ELEM_T(K_DT) *k,
    long k_off, long4 k_st, __global const ELEM_T(V_DT) *v, long v_off, long4 v_st,
    __global const ELEM_T(DO_DT) *d_o, long do_off, long4 do_st, __global const float *rows,
    __global ELEM_T(DQ_DT) *dq, long dq_off, long4 dq_st, int h_q, int group, long n_q,
    long n_kv, float scale, RULE_PARAMS, TERM_PARAMS, DROPOUT_PARAMS)
{
    __local float kt[DK_N * KT], vt[DV_N * KT], k_r[KT * DKP];
    const int lid = get_local_id(0);
    const long g0 = get_group_id(0) * WG, i = g0 + lid, bh = get_global_id(1);
    const long b = bh / h_q, h = bh % h_q, hk = h / group;
    const int16 lane = (int16)(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    const bool in = i < n_q;
    const long row = bh * n_q + (in ? i : 0);
    const float dsum = in ? rows[2 * row] : 0.0f, lse_r = in ? rows[2 * row + 1] : -INFINITY;
    const bool active = lse_r != -INFINITY; /* the row adds something */
    float qi[DK_N], gi[DV_N];
    float16 acc[NK];
    for (int c = 0; c < D_K; c++)
        qi[c] = active ? LD(Q_DT, q, view_at(q_off, q_st, b, h, i, c)) : 0.0f;
    #pragma unroll
    for (int a = 0; a < NK; a++)
        acc[a] = 0.0f;
    for (int c = 0; c < D_V; c++)
        gi[c] = active ? LD(DO_DT, d_o, view_at(do_off, do_st, b, h, i, c)) : 0.0f;
    const row_rule r = rule_at(RULE_ARGS, b, in ? i : 0, n_q, n_kv);
    const float slope = ALIBI ? alibi[h] : 0.0f;
    const long mbase = MASK_T && in ? view_at(mt_off, mt_st, b, h, i, 0) : 0;
    /* the keys any row of the group sees (uniform) */
    const long2 kr = group_key_range(RULE_ARGS, b, g0, g0 + WG - 1, n_q, n_kv);
    for (long j0 = kr.x / KT * KT; j0 < kr.y; j0 += KT) {
        TYPED(stage_rows, K_DT)(k, k_off, k_st, b, hk, j0, n_kv, D_K, D_K, KT, WG, true, kt NO_PAGES);
        TYPED(stage_rows, V_DT)(v, v_off, v_st, b, hk, j0, n_kv, D_V, D_V, KT, WG, true, vt NO_PAGES);
        TYPED(stage_rows, K_DT)(k, k_off, k_st, b, hk, j0, n_kv, D_K, DKP, KT, WG, false, k_r NO_PAGES);
        barrier(CLK_LOCAL_MEM_FENCE); /* the tile staged */
        if (active && j0 < r.hi && j0 + KT > r.lo) {
            const float16 raw = dot_cols(qi, kt, D_K) * scale;
            const float16 s = score_terms16(raw, lane, rel_bound(r.lo, j0, KT),
                                            rel_bound(r.hi, j0, KT), rel_key(r.self, j0, KT), j0,
                                            n_kv, TERM_ARGS, mbase, r.diag, slope,
                                            ALIBI ? alibi_ref(r) : 0, b, h, i);
            /* P ≤ 1: a recomputed score may round above the LSE where scores are huge
             * (float32 steps of 256 at 1e9), and exp must not overflow to inf there */
            const float16 e = exp(s - lse_r);
            const float16 p = select(e, (float16)(1.0f), e > 1.0f);
            float16 dp = dot_cols(gi, vt, D_V);
#if DROPOUT /* dP = z·dO·V (0 for a dropped weight, even at inf or NaN in V) */
            const float16 z = dropout16_keys(DROPOUT_ARGS, bh, i, j0);
            dp = select(dp * z, (float16)(0.0f), z == 0.0f);
#endif
            float16 ds = p * (dp - dsum) * scale;
#if SOFTCAP
            const float16 tc = tanh(raw / softcap);
            ds *= 1.0f - tc * tc;
#endif
            float pa[16], dsa[16];
            vstore16(p, 0, pa);
            vstore16(ds, 0, dsa);
            /* the tile's sum in registers, then into acc once (acc lives across the
             * barriers: in memory on CPUs, bwd_dkdv.cl says why that matters) */
            float16 ta[NK];
            #pragma unroll
            for (int a = 0; a < NK; a++)
                ta[a] = 0.0f;
            for (int t = 0; t < KT; t++) {
                if (pa[t] == 0.0f) /* weight 0 adds nothing, even inf or NaN in K or V */
                    continue;
                #pragma unroll
                for (int a = 0; a < NK; a++)
                    ta[a] = fma((float16)(dsa[t]), vload16(a, k_r + t * DKP), ta[a]);
            }
            #pragma unroll
            for (int a = 0; a < NK; a++)
                acc[a] += ta[a];
        }
        barrier(CLK_LOCAL_MEM_FENCE); /* everyone done with the tile */
    }
    for (int a = 0; in && a < NK; a++) {
        float out[16];
        vstore16(acc[a], 0, out);
        for (int e = 0; e < 16 && 16 * a + e < D_K; e++)
            ST(DQ_DT, dq, view_at(dq_off, dq_st, b, h, i, 16 * a + e), out[e]);
    }
}
