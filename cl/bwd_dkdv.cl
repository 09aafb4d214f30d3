/* bwd_dkdv.cl — the backward pass's dK and dV (bwd_prep.cl's header states the
 * algorithm). A work-group of WG work-items takes WG keys of one (batch entry, KV head),
 * a key per work-item, and walks every query head of the KV head's group and the rows that
 * see any of its keys in tiles of 16 rows: the group stages the tile's Q and dO rows in
 * local memory (row-major, padded to float16 vectors), each work-item forms its key's
 * scores against the tile's rows (float16 dot products), the scores pass once through
 * local memory so that score_terms16 (the forward's rule and terms) fixes them 16 keys
 * of a row at a time, then P = exp(s − LSE), dP = dO·v_j, dS = P·(dP − D)·scale·g, and
 * row by row dV += P·dO and dK += dS·Q as float16 vectors along d. DROPOUT: dV takes
 * P·z and dP = z·dO·v_j, z the forward's factor (common.cl).
 *
 * With RK > 1 (CPUs) a work-item takes RK keys and the products are GEMM micro-kernels in
 * broadcast form instead: the group stages the tile's Q and dO rows transposed as well
 * (q_t[c·16 + row]), each work-item forms its keys' scores and dP over the tile's 16 rows
 * as one float16 per key (each staged column vector feeding RK FMAs, with the key's K or V
 * element broadcast: no horizontal sums), and dV += P·dO, dK += dS·Q take the row-major
 * rows, each row vector feeding RK FMAs, NV vectors per step (common.cl). A weight of 0
 * adds nothing even where Q or dO hold inf or NaN: the work-items flag staged rows
 * holding either, and only such tiles take the sums that test each weight. (RK 1 keeps
 * the per-key form, whose local memory — no transposed copies — fits GPUs at d 256.)
 *
 * The RK > 1 kernel walks blocks of KB = WG·RK keys: block split, split + splits, … for
 * work-group `split` of get_num_groups(0) (one block each without DQ_FUSED). DQ_FUSED: it
 * also forms dQ += dS·K — the block's K rows stay staged row-major (k_b), each tile's dS
 * passes through local memory key-major (ds_k), and work-items 0 … RT/DQR − 1 add DQR
 * rows each into the split's float32 partial dQ (dq_part, zeroed by the work-group first;
 * rows of DKP floats, bwd_prep's row order), the same rows in every tile, so each partial
 * element has one writer and one order; bwd_dq_sum.cl adds the splits. */
#ifndef D_K
#define D_K 64
#endif
#ifndef D_V
#define D_V 64
#endif
#ifndef WG
#define WG 32 /* work-items per work-group */
#endif
#ifndef RK
#define RK 1 /* keys per work-item (the host: 4 on CPUs, 2 above head dim 128, 1 on GPUs) */
#endif
#ifndef DQ_FUSED
#define DQ_FUSED 0 /* RK > 1: form dQ too (the host: with bwd_dq_sum.cl, CPUs) */
#endif
#define RT 16 /* query rows per tile */
#define KB (WG * RK) /* keys per block (RK > 1: the work-group walks the blocks of its split) */
#define DQR 4 /* dQ rows per work-item in the RK > 1 kernel's dS·K (RT / DQR of them) */
/* private and local array lengths in whole float16 vectors (a head dim may be 0) */
#define DKP PAD16(D_K > 0 ? D_K : 1)
#define DVP PAD16(D_V > 0 ? D_V : 1)
#define NK (DKP / 16)
#define NDV (DVP / 16) /* float16 vectors of d_v */

/* The rows [first, end) of the tiles of RT rows that see some of the keys [j_lo, j_hi)
 * (uniform over the group; one range, since a row's lo and hi grow with the row) */
long2 row_tiles(RULE_PARAMS, long b, long n_q, long n_kv, long j_lo, long j_hi)
{
    long t_first = n_q, t_end = 0;
    for (long i0 = 0; i0 < n_q; i0 += RT) {
        const long2 kr = group_key_range(RULE_ARGS, b, i0, i0 + RT - 1, n_q, n_kv);
        if (kr.y > j_lo && kr.x < j_hi) {
            t_first = min(t_first, i0);
            t_end = i0 + RT;
        }
    }
    return (long2)(t_first, t_end);
}

/* acc[x][u] += Σ_key w[key·RT + x] · k_b[key·DKP + 16(a + u) .. +16) over the block's KB
 * keys, x < DQR, u < NVQ: common.cl's ACCUMULATE_ROWS for one chunk of NVQ vectors (its
 * NV·DQR accumulators in registers, each K vector feeding DQR FMAs) with the weights read
 * key-major; TESTED: keys of weight 0 skipped */
#define NVQ NV_FIT(NK) /* float16 vectors of d_k per dQ chunk */
#define DQ_ROWS(acc, w, a, TESTED)                                                              \
    _Pragma("unroll 2") for (int jj_ = 0; jj_ < KB; jj_++)                                      \
    {                                                                                           \
        _Pragma("unroll") for (int u_ = 0; u_ < NVQ; u_++) {                                    \
            const float16 vv_ = vload16((a) + u_, k_b + jj_ * DKP);                             \
            _Pragma("unroll") for (int x_ = 0; x_ < DQR; x_++)                                  \
            if (!(TESTED) || (w)[jj_ * RT + x_] != 0.0f)                                        \
                (acc)[x_][u_] = fma((float16)((w)[jj_ * RT + x_]), vv_, (acc)[x_][u_]);         \
        }                                                                                       \
    }

/* the arguments of both forms of the kernel (host/launch.c sets them) */
#define BWD_DKDV_PARAMS                                                                      \
    __global const ELEM_T(Q_DT) *q, long q_off, long4 q_st, __global const ELEM_T(K_DT) *k,   \
        long k_off, long4 k_st, __global const ELEM_T(V_DT) *v, long v_off, long4 v_st,      \
        __global const ELEM_T(DO_DT) *d_o, long do_off, long4 do_st,                         \
        __global const float *rows, __global ELEM_T(DK_DT) *dk, long dk_off, long4 dk_st,    \
        __global ELEM_T(DV_DT) *dv, long dv_off, long4 dv_st, int h_q, int group, long n_q,  \
        long n_kv, float scale, RULE_PARAMS, TERM_PARAMS, DROPOUT_PARAMS, __global float *dq_part

#if RK > 1
/* vec_type_hint: the kernel is vectorised in float16 already, so a runtime that would run
 * work-items as SIMD lanes keeps one per thread (Intel's CPU runtime: 0.31x the time) */
__kernel __attribute__((reqd_work_group_size(WG, 1, 1))) __attribute__((vec_type_hint(float16)))
void clattn_bwd_dkdv(BWD_DKDV_PARAMS)
{
    __local float q_t[DKP * RT], g_t[DVP * RT]; /* the tile's Q and dO rows transposed */
    __local float q_r[RT * DKP], g_r[RT * DVP]; /* … and row-major */
#if SCORE_TERMS
    __local float s_l[RT * WG * RK]; /* s_l[row·WG·RK + key]: the scores, then with their terms */
#endif
    __local float row_d[RT], row_lse[RT];
    __local long row_lo[RT], row_hi[RT], row_self[RT]; /* the tile's rows' rules */
    __local int tile_bad[WG]; /* work-item t staged a Q or dO row holding inf or NaN */
#if DQ_FUSED
    __local float k_b[KB * DKP]; /* the block's K rows, row-major (for dQ) */
    __local float ds_k[KB * RT]; /* the tile's dS, key-major: ds_k[key·RT + row] (for dQ) */
    __local int block_bad[WG]; /* work-item t's keys' K rows hold inf or NaN */
#endif
    const int lid = get_local_id(0);
    const long bhk = get_global_id(1), split = get_group_id(0), n_split = get_num_groups(0);
    const long h_kv = h_q / group, b = bhk / h_kv, hk = bhk % h_kv;
    const int16 lane = (int16)(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
#if DQ_FUSED
    /* this split's dQ partial sums of the group's query heads start at 0 (only this
     * work-group writes them) */
    const long n_rows = get_global_size(1) / h_kv * h_q * n_q; /* rows of the whole call */
    __global float *dq_s = dq_part + (split * n_rows + (b * h_q + hk * group) * n_q) * DKP;
    for (long e = lid; e < group * n_q * DKP; e += WG)
        dq_s[e] = 0.0f;
    barrier(CLK_GLOBAL_MEM_FENCE);
#endif
    /* blocks of KB keys: split, split + n_split, … (uniform over the group) */
    for (long j0 = split * KB; j0 < n_kv; j0 += n_split * KB) {
        const long jw = j0 + lid * RK;
        float kj[RK][DKP], vj[RK][DVP]; /* the keys' K and V rows (broadcast element by element) */
        float16 acck[RK][NK], accv[RK][NDV];
#if DQ_FUSED
        bool bad = false;
#endif
        for (int kk = 0; kk < RK; kk++) { /* (setup and stores not unrolled: compile time) */
            const long j = jw + kk;
            const bool in = j < n_kv;
            for (int c = 0; c < D_K; c++)
                kj[kk][c] = in ? LD(K_DT, k, view_at(k_off, k_st, b, hk, j, c)) : 0.0f;
            for (int c = 0; c < D_V; c++)
                vj[kk][c] = in ? LD(V_DT, v, view_at(v_off, v_st, b, hk, j, c)) : 0.0f;
#if DQ_FUSED
            /* the block's K rows for dQ (every read of the previous block's rows came
             * before its last tile's closing barrier) */
            for (int c = 0; c < DKP; c++) {
                const float x = c < D_K ? kj[kk][c] : 0.0f;
                k_b[(lid * RK + kk) * DKP + c] = x;
                bad |= isnan(x) || isinf(x);
            }
#endif
            for (int a = 0; a < NK; a++)
                acck[kk][a] = 0.0f;
            for (int a = 0; a < NDV; a++)
                accv[kk][a] = 0.0f;
        }
#if DQ_FUSED
        block_bad[lid] = bad;
#endif
        for (int g = 0; g < group; g++) {
            const long h = hk * group + g;
            const float slope = ALIBI ? alibi[h] : 0.0f;
            /* the tiles of rows that see some of the group's keys (uniform; see the RK 1
             * kernel below for why the loop has no other exit) */
            const long2 tr = row_tiles(RULE_ARGS, b, n_q, n_kv, j0, j0 + WG * RK);
            for (long i0 = tr.x; i0 < tr.y; i0 += RT) {
                TYPED(stage_rows, Q_DT)(q, q_off, q_st, b, h, i0, n_q, D_K, D_K, RT, WG, true, q_t NO_PAGES);
                TYPED(stage_rows, DO_DT)(d_o, do_off, do_st, b, h, i0, n_q, D_V, D_V, RT, WG, true,
                                         g_t NO_PAGES);
                TYPED(stage_rows, Q_DT)(q, q_off, q_st, b, h, i0, n_q, D_K, DKP, RT, WG, false, q_r NO_PAGES);
                TYPED(stage_rows, DO_DT)(d_o, do_off, do_st, b, h, i0, n_q, D_V, DVP, RT, WG, false,
                                         g_r NO_PAGES);
                if (lid < RT) {
                    const long i = i0 + lid, row = (b * h_q + h) * n_q + i;
                    row_d[lid] = i < n_q ? rows[2 * row] : 0.0f;
                    row_lse[lid] = i < n_q ? rows[2 * row + 1] : -INFINITY;
                    const row_rule rr = rule_at(RULE_ARGS, b, i < n_q ? i : 0, n_q, n_kv);
                    row_lo[lid] = i < n_q ? rr.lo : 0;
                    row_hi[lid] = i < n_q ? rr.hi : 0;
                    row_self[lid] = rr.self;
                }
                tile_bad[lid] = rows_nonfinite(q_r, RT, DKP, WG) | rows_nonfinite(g_r, RT, DVP, WG);
                barrier(CLK_LOCAL_MEM_FENCE); /* the tile staged */
                /* the raw scores and dP of RK keys × the tile's 16 rows: one float16 per key,
                 * each staged column vector feeding RK FMAs */
                float16 sk[RK], dpk[RK];
                MICRO_COLS(sk, kj, q_t, D_K, RK);
                MICRO_COLS(dpk, vj, g_t, D_V, RK);
                float raw[RK][16]; /* scale·q·k, key by key */
                for (int kk = 0; kk < RK; kk++)
                    vstore16(sk[kk] * scale, 0, raw[kk]);
    #if SCORE_TERMS
                /* the rule and the score terms through the forward's score_terms16, 16 keys of
                 * a row at a time: the scores pass through local memory */
                for (int kk = 0; kk < RK; kk++)
                    for (int r = 0; r < RT; r++)
                        s_l[r * (WG * RK) + lid * RK + kk] = raw[kk][r];
                barrier(CLK_LOCAL_MEM_FENCE);
                for (int ch = lid; ch < RT * (WG * RK / 16); ch += WG) {
                    const int r = ch % RT, kc = ch / RT;
                    const long i = i0 + r, jc = j0 + 16 * kc;
                    row_rule rr = rule_at(RULE_ARGS, b, i < n_q ? i : 0, n_q, n_kv);
                    if (i >= n_q)
                        rr.lo = rr.hi = 0;
                    const long mbase = MASK_T && i < n_q ? view_at(mt_off, mt_st, b, h, i, 0) : 0;
                    const float16 x = score_terms16(
                        vload16(kc, s_l + r * (WG * RK)), lane, rel_bound(rr.lo, jc, 16),
                        rel_bound(rr.hi, jc, 16), rel_key(rr.self, jc, 16), jc, n_kv, TERM_ARGS,
                        mbase, rr.diag, slope, ALIBI ? alibi_ref(rr) : 0, b, h, i);
                    vstore16(x, kc, s_l + r * (WG * RK));
                }
                barrier(CLK_LOCAL_MEM_FENCE);
    #endif
                bool finite = true;
                for (int t = 0; t < WG; t++)
                    finite &= !tile_bad[t];
                const float16 lse16 = vload16(0, row_lse), d16 = vload16(0, row_d);
                float pa[RK][16], pza[RK][16], dsa[RK][16];
    #if !SCORE_TERMS /* the rule alone: row i sees key j when lo_i ≤ j < hi_i, j ≠ self_i */
                const long16 lo16 = vload16(0, row_lo), hi16 = vload16(0, row_hi);
                const long16 self16 = vload16(0, row_self);
                /* every row of the tile sees all RK keys (most tiles of a long sequence):
                 * the scores need no test (rows past n_q have lo = hi = 0: never) */
                const bool all_see = all(lo16 <= jw) && all(hi16 >= jw + RK) &&
                                     all((self16 < jw) | (self16 >= jw + RK));
    #endif
                for (int kk = 0; kk < RK; kk++) {
    #if SCORE_TERMS
                    float t16[16];
                    for (int r = 0; r < RT; r++)
                        t16[r] = s_l[r * (WG * RK) + lid * RK + kk];
                    const float16 sc = vload16(0, t16);
    #else
                    const long j = jw + kk;
                    const float16 sc =
                        all_see ? vload16(0, raw[kk])
                                : select((float16)(-INFINITY), vload16(0, raw[kk]),
                                         convert_int16((j >= lo16) & (j < hi16) & (j != self16)));
    #endif
                    /* rows that add nothing (LSE −∞) weigh 0; P ≤ 1 (bwd_dq.cl says why) */
                    const float16 e = exp(sc - lse16);
                    const float16 p = select((float16)(0.0f), select(e, (float16)(1.0f), e > 1.0f),
                                             lse16 != -INFINITY);
                    float16 dp = dpk[kk];
    #if DROPOUT /* dV takes P·z, dP = z·dO·V (0 for a dropped weight, even at inf or NaN) */
                    const float16 z = dropout16_rows(DROPOUT_ARGS, b * h_q + h, i0, jw + kk);
                    dp = select(dp * z, (float16)(0.0f), z == 0.0f);
                    const float16 pz = p * z;
    #else
                    const float16 pz = p;
    #endif
                    float16 ds = p * (dp - d16) * scale;
    #if SOFTCAP
                    const float16 tc = tanh(vload16(0, raw[kk]) / softcap);
                    ds *= 1.0f - tc * tc;
    #endif
                    /* a weight of 0 adds nothing: dS 0 there even where dP is inf or NaN */
                    ds = select(ds, (float16)(0.0f), p == 0.0f);
                    vstore16(p, 0, pa[kk]);
                    vstore16(pz, 0, pza[kk]);
                    vstore16(ds, 0, dsa[kk]);
                }
                /* dV += P·dO and dK += dS·Q over the tile's rows: for each NV vectors of d, NV·RK
                 * accumulators in registers, each row vector feeding RK FMAs (common.cl
                 * ACCUMULATE_ROWS; accv and acck live across the barriers: in memory on CPUs,
                 * as the RK 1 kernel says) */
                if (finite) {
                    ACCUMULATE_ROWS(accv, pza, g_r, RT, DVP, NDV, RK);
                    ACCUMULATE_ROWS(acck, dsa, q_r, RT, DKP, NK, RK);
                } else { /* Q or dO hold inf or NaN: a row of weight 0 is skipped, not multiplied */
                    ACCUMULATE_ROWS_TESTED(accv, pza, pa, g_r, RT, DVP, NDV, RK);
                    ACCUMULATE_ROWS_TESTED(acck, dsa, pa, q_r, RT, DKP, NK, RK);
                }
#if DQ_FUSED
                /* dQ += dS·K over the block's KB keys: dS passes through local memory (a
                 * vector per key), then RT / DQR work-items take DQR rows each (the same rows
                 * in every tile and block, so each row's partial sum is one work-item's, in
                 * key order) */
                for (int kk = 0; kk < RK; kk++)
                    vstore16(vload16(0, dsa[kk]), lid * RK + kk, ds_k);
                barrier(CLK_LOCAL_MEM_FENCE);
                /* units of DQR rows × NVQ vectors, unit t always work-item t % WG's (GPU-style
                 * runtimes run work-items as SIMD lanes: spread, not 4 busy lanes of 32) */
                bool k_finite = true;
                for (int t = 0; t < WG; t++)
                    k_finite &= !block_bad[t];
                for (int t = lid; t < RT / DQR * (NK / NVQ); t += WG) {
                    const int r0 = t / (NK / NVQ) * DQR, a = t % (NK / NVQ) * NVQ;
                    __global float *dq_t = dq_s + (g * n_q + i0 + r0) * DKP + 16 * a;
                    float16 accq[DQR][NVQ];
                    for (int r = 0; r < DQR; r++)
                        for (int u = 0; u < NVQ; u++)
                            accq[r][u] = i0 + r0 + r < n_q ? vload16(u, dq_t + r * DKP) : 0.0f;
                    if (k_finite) {
                        DQ_ROWS(accq, ds_k + r0, a, false);
                    } else { /* K holds inf or NaN: a key of dS 0 is skipped, not multiplied (a
                              * key with inf or NaN in K has P 0 or NaN, so dS 0 or NaN: the
                              * same keys as a test of P would skip) */
                        DQ_ROWS(accq, ds_k + r0, a, true);
                    }
                    for (int r = 0; r < DQR && i0 + r0 + r < n_q; r++)
                        for (int u = 0; u < NVQ; u++)
                            vstore16(accq[r][u], u, dq_t + r * DKP);
                }
#endif
                barrier(CLK_LOCAL_MEM_FENCE); /* everyone done with the tile */
            }
        }
        for (int kk = 0; kk < RK; kk++) {
            const long j = jw + kk;
            if (j >= n_kv)
                break;
            for (int a = 0; a < NK; a++) {
                float out[16];
                vstore16(acck[kk][a], 0, out);
                for (int e = 0; e < 16 && 16 * a + e < D_K; e++)
                    ST(DK_DT, dk, view_at(dk_off, dk_st, b, hk, j, 16 * a + e), out[e]);
            }
            for (int a = 0; a < NDV; a++) {
                float out[16];
                vstore16(accv[kk][a], 0, out);
                for (int e = 0; e < 16 && 16 * a + e < D_V; e++)
                    ST(DV_DT, dv, view_at(dv_off, dv_st, b, hk, j, 16 * a + e), out[e]);
            }
        }
    } /* the blocks */
}
#else /* RK 1: a key per work-item, dot products along d */
__kernel __attribute__((reqd_work_group_size(WG, 1, 1))) void clattn_bwd_dkdv(BWD_DKDV_PARAMS)
{
    __local float q_r[RT * DKP], g_r[RT * DVP]; /* the tile's Q and dO rows */
    __local float s_l[RT * WG]; /* s_l[row·WG + key]: the scores, then with their terms */
    __local float row_d[RT], row_lse[RT];
    const int lid = get_local_id(0);
    const long j0 = get_group_id(0) * WG, j = j0 + lid, bhk = get_global_id(1);
    const long h_kv = h_q / group, b = bhk / h_kv, hk = bhk % h_kv;
    const int16 lane = (int16)(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    const bool in = j < n_kv;
    float16 kj[NK], vj[NDV], acck[NK], accv[NDV];
    /* the key's K and V rows (common.cl load_row16: zeros past d) */
    const long kb = in ? view_at(k_off, k_st, b, hk, j, 0) : 0;
    const long vb = in ? view_at(v_off, v_st, b, hk, j, 0) : 0;
    #pragma unroll
    for (int a = 0; a < NK; a++) {
        kj[a] = in ? TYPED(load_row16, K_DT)(k, kb, k_st.s3, 16 * a, D_K) : 0.0f;
        acck[a] = 0.0f;
    }
    #pragma unroll
    for (int a = 0; a < NDV; a++) {
        vj[a] = in ? TYPED(load_row16, V_DT)(v, vb, v_st.s3, 16 * a, D_V) : 0.0f;
        accv[a] = 0.0f;
    }
    for (int g = 0; g < group; g++) {
        const long h = hk * group + g;
        const float slope = ALIBI ? alibi[h] : 0.0f;
        /* the tiles of rows that see some of the group's keys (uniform; a range, since a
         * row's lo and hi grow with the row): the loop with barriers has no other exit
         * (PoCL 3.1 miscompiled a uniform `continue` past its barriers: wrong dK and dV) */
        const long2 tr = row_tiles(RULE_ARGS, b, n_q, n_kv, j0, j0 + WG);
        for (long i0 = tr.x; i0 < tr.y; i0 += RT) {
            TYPED(stage_rows, Q_DT)(q, q_off, q_st, b, h, i0, n_q, D_K, DKP, RT, WG, false, q_r NO_PAGES);
            TYPED(stage_rows, DO_DT)(d_o, do_off, do_st, b, h, i0, n_q, D_V, DVP, RT, WG, false,
                                     g_r NO_PAGES);
            if (lid < RT) {
                const long i = i0 + lid, row = (b * h_q + h) * n_q + i;
                row_d[lid] = i < n_q ? rows[2 * row] : 0.0f;
                row_lse[lid] = i < n_q ? rows[2 * row + 1] : -INFINITY;
            }
            barrier(CLK_LOCAL_MEM_FENCE); /* the tile staged */
            float t16[16];
            for (int r = 0; r < RT; r++) {
                float16 x = 0.0f;
                #pragma unroll
                for (int a = 0; a < NK; a++)
                    x = fma(kj[a], vload16(a, q_r + r * DKP), x);
                t16[r] = hsum(x) * scale;
                s_l[r * WG + lid] = t16[r];
            }
#if SOFTCAP
            const float16 raw = vload16(0, t16);
#endif
            barrier(CLK_LOCAL_MEM_FENCE);
            /* the rule and the score terms, 16 keys of a row at a time */
            for (int ch = lid; ch < RT * (WG / 16); ch += WG) {
                const int r = ch % RT, kc = ch / RT;
                const long i = i0 + r, jc = j0 + 16 * kc;
                row_rule rr = rule_at(RULE_ARGS, b, i < n_q ? i : 0, n_q, n_kv);
                if (i >= n_q)
                    rr.lo = rr.hi = 0;
                const long mbase = MASK_T && i < n_q ? view_at(mt_off, mt_st, b, h, i, 0) : 0;
                const float16 x = score_terms16(
                    vload16(kc, s_l + r * WG), lane, rel_bound(rr.lo, jc, 16),
                    rel_bound(rr.hi, jc, 16), rel_key(rr.self, jc, 16), jc, n_kv, TERM_ARGS,
                    mbase, rr.diag, slope, ALIBI ? alibi_ref(rr) : 0, b, h, i);
                vstore16(x, kc, s_l + r * WG);
            }
            barrier(CLK_LOCAL_MEM_FENCE);
            for (int r = 0; r < RT; r++)
                t16[r] = s_l[r * WG + lid];
            const float16 lse16 = vload16(0, row_lse);
            /* rows that add nothing (LSE −∞) weigh 0; P ≤ 1 (bwd_dq.cl says why) */
            const float16 e = exp(vload16(0, t16) - lse16);
            const float16 p = select((float16)(0.0f), select(e, (float16)(1.0f), e > 1.0f),
                                     lse16 != -INFINITY);
            float dpa[16];
            for (int r = 0; r < RT; r++) {
                float16 x = 0.0f;
                #pragma unroll
                for (int a = 0; a < NDV; a++)
                    x = fma(vj[a], vload16(a, g_r + r * DVP), x);
                dpa[r] = hsum(x);
            }
            float16 dp = vload16(0, dpa);
#if DROPOUT /* dV takes P·z, dP = z·dO·V (0 for a dropped weight, even at inf or NaN) */
            const float16 z = dropout16_rows(DROPOUT_ARGS, b * h_q + h, i0, j);
            dp = select(dp * z, (float16)(0.0f), z == 0.0f);
            const float16 pz = p * z;
#else
            const float16 pz = p;
#endif
            float16 ds = p * (dp - vload16(0, row_d)) * scale;
#if SOFTCAP
            const float16 tc = tanh(raw / softcap);
            ds *= 1.0f - tc * tc;
#endif
            float pa[16], pza[16], dsa[16];
            vstore16(p, 0, pa);
            vstore16(pz, 0, pza);
            vstore16(ds, 0, dsa);
            /* the tile's sums in registers, then into accv and acck once: those live
             * across the barriers, which on CPUs (PoCL's work-item loops) keeps them in
             * memory, and a load-FMA-store per product was the kernel's bottleneck */
            float16 tv[NDV], tk[NK];
            #pragma unroll
            for (int a = 0; a < NDV; a++)
                tv[a] = 0.0f;
            #pragma unroll
            for (int a = 0; a < NK; a++)
                tk[a] = 0.0f;
            for (int r = 0; r < RT; r++) {
                if (pa[r] == 0.0f) /* weight 0 adds nothing, even inf or NaN in K or V */
                    continue;
                #pragma unroll
                for (int a = 0; a < NDV; a++)
                    tv[a] = fma((float16)(pza[r]), vload16(a, g_r + r * DVP), tv[a]);
                #pragma unroll
                for (int a = 0; a < NK; a++)
                    tk[a] = fma((float16)(dsa[r]), vload16(a, q_r + r * DKP), tk[a]);
            }
            #pragma unroll
            for (int a = 0; a < NDV; a++)
                accv[a] += tv[a];
            #pragma unroll
            for (int a = 0; a < NK; a++)
                acck[a] += tk[a];
            barrier(CLK_LOCAL_MEM_FENCE); /* everyone done with the tile */
        }
    }
    for (int a = 0; in && a < NK; a++) {
        float out[16];
        vstore16(acck[a], 0, out);
        for (int e = 0; e < 16 && 16 * a + e < D_K; e++)
            ST(DK_DT, dk, view_at(dk_off, dk_st, b, hk, j, 16 * a + e), out[e]);
    }
    for (int a = 0; in && a < NDV; a++) {
        float out[16];
        vstore16(accv[a], 0, out);
        for (int e = 0; e < 16 && 16 * a + e < D_V; e++)
            ST(DV_DT, dv, view_at(dv_off, dv_st, b, hk, j, 16 * a + e), out[e]);
    }
}
#endif
