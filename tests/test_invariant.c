#define _POSIX_C_SOURCE 200809L /* mkdtemp */
/* Batch invariance (desc.batch_invariant; docs/SEMANTICS.md "Batch invariance"): the
 * bits of one sequence's rows do not depend on what else is in the batch, how its rows
 * are chunked into calls, n_q (a decode step of one row against the same row of a
 * prefill), or whether the batch is packed (varlen). One sequence S (GQA 4:2, d 32,
 * 21 queries, 150 keys; causal bottom-right, ALiBi, sinks, softcap) computed:
 *  - alone; as entry 1 of a batch of 3 beside other sequences of other lengths;
 *  - row by row for its last three rows, each as a one-row call (n_q = 1, the decode
 *    shape) with the keys it sees;
 *  - in two chunks of rows ([0, 8) and [8, 21));
 *  - packed between two other sequences (cu_seqlens, one launch);
 * every O and LSE element bit for bit equal to the call alone (the one-row calls again on a
 * context with a stored tuning, which the default mode takes for large n_q only), in the
 * context's kernel
 * family (CPU on a CPU; CI's GPU-family passes force the GPU family). Also: the plan of a
 * one-row call is the tiled kernel and says why, weights keep the fused algorithm, and
 * every status (batch_invariant 2; the unfused algorithm). Seed printed at start. */
#include "testutil.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <clattn.h>

enum { HQ = 4, HK = 2, D = 32, NQ = 21, NK = 150 };

typedef struct seq {
    float q[HQ * NQ * D], k[HK * NK * D], v[HK * NK * D];
} seq;

static float slopes[HQ], sinks[HQ];

static void seq_fill(seq *s, uint32_t seed)
{
    tu_fill_gen(s->q, HQ * NQ * D, seed + 1u, 1.0f);
    tu_fill_gen(s->k, HK * NK * D, seed + 2u, 1.0f);
    tu_fill_gen(s->v, HK * NK * D, seed + 3u, 1.0f);
}

static clattn_attention_desc base_desc(void)
{
    for (int h = 0; h < HQ; h++) {
        slopes[h] = exp2f(-(float)(h + 1));
        sinks[h] = 0.25f * (float)h - 0.5f;
    }
    clattn_attention_desc d = clattn_attention_desc_default();
    d.mask = CLATTN_MASK_CAUSAL_BOTTOM_RIGHT;
    d.alibi_slopes = slopes;
    d.sinks = sinks;
    d.softcap = 20.0f;
    d.batch_invariant = 1;
    return d;
}

/* The context the checks run on (the suite's, or one with a stored tuning). */
static clattn_context *cur_ctx(void);

/* The call alone: O [1, HQ, NQ, D] and LSE [1, HQ, NQ, 1]. */
static void run_alone(const seq *s, float *o, float *lse)
{
    clattn_attention_desc d = base_desc();
    clattn_tensor tq = clattn_tensor_host((float *)s->q, 1, HQ, NQ, D),
                  tk = clattn_tensor_host((float *)s->k, 1, HK, NK, D),
                  tv = clattn_tensor_host((float *)s->v, 1, HK, NK, D),
                  to = clattn_tensor_host(o, 1, HQ, NQ, D),
                  tl = clattn_tensor_host(lse, 1, HQ, NQ, 1);
    d.lse = &tl;
    TU_ASSERT_OK(clattn_attention(cur_ctx(), &d, &tq, &tk, &tv, &to), "S alone");
}

static clattn_context *tuned_ctx; /* set by invariant_with_stored_tuning */
static clattn_context *cur_ctx(void)
{
    return tuned_ctx ? tuned_ctx : tu_ctx();
}

/* S's last three rows, each as a one-row call (the decode shape) seeing the keys it sees
 * in S (kv_lens NK − (NQ − 1 − i), bottom-right aligned), against the call alone. */
static void rows_one_by_one(const seq *s, const float *o, const float *lse)
{
    clattn_context *ctx = cur_ctx();
    for (int i = NQ - 3; i < NQ; i++) {
        float q1[HQ * D], o1[HQ * D], l1[HQ];
        for (int h = 0; h < HQ; h++)
            memcpy(q1 + h * D, s->q + (h * NQ + i) * D, D * sizeof(float));
        const int32_t kv_len = NK - (NQ - 1 - i);
        clattn_attention_desc d = base_desc();
        d.kv_lens = &kv_len;
        clattn_tensor tq = clattn_tensor_host(q1, 1, HQ, 1, D),
                      tk = clattn_tensor_host((float *)s->k, 1, HK, NK, D),
                      tv = clattn_tensor_host((float *)s->v, 1, HK, NK, D),
                      to = clattn_tensor_host(o1, 1, HQ, 1, D),
                      tl = clattn_tensor_host(l1, 1, HQ, 1, 1);
        d.lse = &tl;
        clattn_plan plan;
        TU_ASSERT_OK(clattn_attention_plan(ctx, &d, &tq, &tk, &tv, &to, &plan), "row %d plan", i);
        if (i == NQ - 1)
            printf("invariant: a one-row call runs %s (%s)\n", plan.kernels, plan.reason);
        ck_assert_msg(strstr(plan.kernels, "decode") == NULL &&
                          strstr(plan.reason, "batch-invariant"),
                      "a one-row batch-invariant call plans %s (%s)", plan.kernels, plan.reason);
        TU_ASSERT_OK(clattn_attention(ctx, &d, &tq, &tk, &tv, &to), "row %d alone", i);
        for (int h = 0; h < HQ; h++) {
            char what[64];
            snprintf(what, sizeof what, "O of row %d head %d, one-row call", i, h);
            tu_assert_same_bits(o1 + h * D, o + (h * NQ + i) * D, D, "%s", what);
            snprintf(what, sizeof what, "LSE of row %d head %d, one-row call", i, h);
            tu_assert_same_bits(l1 + h, lse + h * NQ + i, 1, "%s", what);
        }
    }
}

START_TEST(invariant_rows)
{
    clattn_context *ctx = tu_ctx();
    seq *s = malloc(sizeof *s), *x = malloc(sizeof *x), *y = malloc(sizeof *y);
    seq_fill(s, tu_seed() + 10u);
    seq_fill(x, tu_seed() + 20u);
    seq_fill(y, tu_seed() + 30u);
    float *o = tu_alloc(HQ * NQ * D, 0), *lse = tu_alloc(HQ * NQ, 0);
    run_alone(s, o, lse);

    /* 1. entry 1 of a batch of 3; the others hold other data and lengths */
    {
        float *bq = tu_alloc(3 * HQ * NQ * D, 0), *bk = tu_alloc(3 * HK * NK * D, 0),
              *bv = tu_alloc(3 * HK * NK * D, 0), *bo = tu_alloc(3 * HQ * NQ * D, 0),
              *bl = tu_alloc(3 * HQ * NQ, 0);
        const seq *parts[3] = {x, s, y};
        for (int b = 0; b < 3; b++) {
            memcpy(bq + b * HQ * NQ * D, parts[b]->q, sizeof s->q);
            memcpy(bk + b * HK * NK * D, parts[b]->k, sizeof s->k);
            memcpy(bv + b * HK * NK * D, parts[b]->v, sizeof s->v);
        }
        const int32_t kv_lens[3] = {60, NK, 111}, q_lens[3] = {5, NQ, NQ};
        clattn_attention_desc d = base_desc();
        d.kv_lens = kv_lens;
        d.q_lens = q_lens;
        clattn_tensor tq = clattn_tensor_host(bq, 3, HQ, NQ, D),
                      tk = clattn_tensor_host(bk, 3, HK, NK, D),
                      tv = clattn_tensor_host(bv, 3, HK, NK, D),
                      to = clattn_tensor_host(bo, 3, HQ, NQ, D),
                      tl = clattn_tensor_host(bl, 3, HQ, NQ, 1);
        d.lse = &tl;
        TU_ASSERT_OK(clattn_attention(ctx, &d, &tq, &tk, &tv, &to), "batch of 3");
        tu_assert_same_bits(bo + HQ * NQ * D, o, HQ * NQ * D, "O, entry 1 of a batch of 3");
        tu_assert_same_bits(bl + HQ * NQ, lse, HQ * NQ, "LSE, entry 1 of a batch of 3");
        float *all[5] = {bq, bk, bv, bo, bl};
        for (int i = 0; i < 5; i++)
            free(all[i]);
    }
    /* 2. the last three rows, each as a one-row call (the decode shape) */
    rows_one_by_one(s, o, lse);
    /* 3. two chunks of rows, [0, 8) and [8, NQ): a chunk ending at row e − 1 sees the
     * keys up to NK − (NQ − e), bottom-right aligned */
    const int cuts[3] = {0, 8, NQ};
    for (int c = 0; c < 2; c++) {
        const int r0 = cuts[c], nr = cuts[c + 1] - cuts[c];
        float *qc = tu_alloc(HQ * nr * D, 0), *oc = tu_alloc(HQ * nr * D, 0),
              *lc = tu_alloc(HQ * nr, 0);
        for (int h = 0; h < HQ; h++)
            memcpy(qc + h * nr * D, s->q + (h * NQ + r0) * D, (size_t)nr * D * sizeof(float));
        const int32_t kv_len = NK - (NQ - cuts[c + 1]);
        clattn_attention_desc d = base_desc();
        d.kv_lens = &kv_len;
        clattn_tensor tq = clattn_tensor_host(qc, 1, HQ, nr, D),
                      tk = clattn_tensor_host(s->k, 1, HK, NK, D),
                      tv = clattn_tensor_host(s->v, 1, HK, NK, D),
                      to = clattn_tensor_host(oc, 1, HQ, nr, D),
                      tl = clattn_tensor_host(lc, 1, HQ, nr, 1);
        d.lse = &tl;
        TU_ASSERT_OK(clattn_attention(ctx, &d, &tq, &tk, &tv, &to), "chunk %d", c);
        for (int h = 0; h < HQ; h++) {
            tu_assert_same_bits(oc + h * nr * D, o + (h * NQ + r0) * D, nr * D,
                                "O, chunk %d of the rows", c);
            tu_assert_same_bits(lc + h * nr, lse + h * NQ + r0, nr, "LSE, chunk %d of the rows", c);
        }
        free(qc);
        free(oc);
        free(lc);
    }
    /* 4. packed between two other sequences (varlen, one launch) */
    {
        const int tq_rows = 7 + NQ + 12, tk_rows = 40 + NK + 90;
        float *pq = tu_alloc((size_t)HQ * tq_rows * D, 0),
              *pk = tu_alloc((size_t)HK * tk_rows * D, 0),
              *pv = tu_alloc((size_t)HK * tk_rows * D, 0),
              *po = tu_alloc((size_t)HQ * tq_rows * D, 0), *pl = tu_alloc((size_t)HQ * tq_rows, 0);
        /* [1, h, total, d] packed: sequence rows one after another per head */
        const int q_at[3] = {0, 7, 7 + NQ}, q_n[3] = {7, NQ, 12};
        const int k_at[3] = {0, 40, 40 + NK}, k_n[3] = {40, NK, 90};
        const seq *parts[3] = {x, s, y};
        for (int b = 0; b < 3; b++) {
            for (int h = 0; h < HQ; h++)
                memcpy(pq + ((size_t)h * tq_rows + q_at[b]) * D, parts[b]->q + h * NQ * D,
                       (size_t)q_n[b] * D * sizeof(float));
            for (int h = 0; h < HK; h++) {
                memcpy(pk + ((size_t)h * tk_rows + k_at[b]) * D, parts[b]->k + h * NK * D,
                       (size_t)k_n[b] * D * sizeof(float));
                memcpy(pv + ((size_t)h * tk_rows + k_at[b]) * D, parts[b]->v + h * NK * D,
                       (size_t)k_n[b] * D * sizeof(float));
            }
        }
        const int32_t cu_q[4] = {0, 7, 7 + NQ, tq_rows}, cu_k[4] = {0, 40, 40 + NK, tk_rows};
        const clattn_varlen vl = {cu_q, cu_k, 3, NULL, NULL, 0, 0};
        clattn_attention_desc d = base_desc();
        d.varlen = &vl;
        clattn_tensor tq = clattn_tensor_host(pq, 1, HQ, tq_rows, D),
                      tk = clattn_tensor_host(pk, 1, HK, tk_rows, D),
                      tv = clattn_tensor_host(pv, 1, HK, tk_rows, D),
                      to = clattn_tensor_host(po, 1, HQ, tq_rows, D),
                      tl = clattn_tensor_host(pl, 1, HQ, tq_rows, 1);
        d.lse = &tl;
        TU_ASSERT_OK(clattn_attention(ctx, &d, &tq, &tk, &tv, &to), "packed (varlen)");
        for (int h = 0; h < HQ; h++) {
            tu_assert_same_bits(po + ((size_t)h * tq_rows + 7) * D, o + h * NQ * D, NQ * D,
                                "O, packed, head %d", h);
            tu_assert_same_bits(pl + (size_t)h * tq_rows + 7, lse + h * NQ, NQ,
                                "LSE, packed, head %d", h);
        }
        float *all[5] = {pq, pk, pv, po, pl};
        for (int i = 0; i < 5; i++)
            free(all[i]);
    }
    free(o);
    free(lse);
    free(s);
    free(x);
    free(y);
}
END_TEST

/* A stored tuning (what `clattn tune` writes) applies to large problems only in the
 * default mode (n_q >= RQ x WG); batch invariance takes it for every shape: on a context
 * with its own cache folder holding a tuned blocking for these head dims (4 queries per
 * work-item, groups of 4, tiles of 32 keys), the one-row calls still give the bits of the
 * call alone. */
START_TEST(invariant_with_stored_tuning)
{
    char dir[] = "/tmp/clattn-invariant-XXXXXX";
    ck_assert_ptr_nonnull(mkdtemp(dir));
    clattn_context_options opt;
    memset(&opt, 0, sizeof opt);
    opt.cache_dir = dir;
    ck_assert_int_eq(clattn_context_create(&opt, &tuned_ctx), CLATTN_SUCCESS);
    ck_assert_int_eq(
        clattn_context_set_kernel_family(tuned_ctx, clattn_context_kernel_family(tu_ctx())),
        CLATTN_SUCCESS);
    const clattn_blocking tuned = {4, 4, 32}; /* RQ x WG 16 <= NQ: the full call takes it */
    TU_ASSERT_OK(clattn_context_store_blocking(tuned_ctx, CLATTN_KERNEL_FUSED, D, D, &tuned,
                                               "test_invariant"),
                 "store a tuning");
    seq *s = malloc(sizeof *s);
    seq_fill(s, tu_seed() + 50u);
    float *o = tu_alloc(HQ * NQ * D, 0), *lse = tu_alloc(HQ * NQ, 0);
    run_alone(s, o, lse);
    rows_one_by_one(s, o, lse);
    free(o);
    free(lse);
    free(s);
    clattn_context_release(tuned_ctx);
    tuned_ctx = NULL;
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    ck_assert_int_eq(system(cmd), 0);
}
END_TEST

/* Weights keep the fused algorithm (its second pass); statuses. */
START_TEST(invariant_plan_and_statuses)
{
    clattn_context *ctx = tu_ctx();
    float q[HQ * 3 * D], k[HK * 9 * D], v[HK * 9 * D], o[HQ * 3 * D], w[HQ * 3 * 9];
    tu_fill_gen(q, sizeof q / 4, tu_seed() + 40u, 1.0f);
    tu_fill_gen(k, sizeof k / 4, tu_seed() + 41u, 1.0f);
    tu_fill_gen(v, sizeof v / 4, tu_seed() + 42u, 1.0f);
    clattn_tensor tq = clattn_tensor_host(q, 1, HQ, 3, D), tk = clattn_tensor_host(k, 1, HK, 9, D),
                  tv = clattn_tensor_host(v, 1, HK, 9, D), to = clattn_tensor_host(o, 1, HQ, 3, D),
                  tw = clattn_tensor_host(w, 1, HQ, 3, 9);
    clattn_attention_desc d = clattn_attention_desc_default();
    d.batch_invariant = 1;
    d.weights = &tw;
    clattn_plan plan;
    TU_ASSERT_OK(clattn_attention_plan(ctx, &d, &tq, &tk, &tv, &to, &plan), "weights plan");
    ck_assert_msg(plan.algorithm == CLATTN_ALGORITHM_FUSED,
                  "batch-invariant with weights plans %s (%s)", plan.kernels, plan.reason);
    TU_ASSERT_OK(clattn_attention(ctx, &d, &tq, &tk, &tv, &to), "weights");
    d.weights = NULL;
    d.algorithm = CLATTN_ALGORITHM_UNFUSED;
    ck_assert_int_eq(clattn_attention(ctx, &d, &tq, &tk, &tv, &to), CLATTN_ERROR_UNSUPPORTED);
    d.algorithm = CLATTN_ALGORITHM_AUTO;
    d.batch_invariant = 2;
    ck_assert_int_eq(clattn_attention(ctx, &d, &tq, &tk, &tv, &to), CLATTN_ERROR_INVALID_ARGUMENT);
    ck_assert_int_eq(clattn_reference_attention(&d, &tq, &tk, &tv, &to),
                     CLATTN_ERROR_INVALID_ARGUMENT);
}
END_TEST

int main(void)
{
    tu_seed_init(0x1a7a11u);
    Suite *s = suite_create("invariant");
    TCase *tc = tcase_create("invariant");
    tcase_set_timeout(tc, 600);
    tcase_add_test(tc, invariant_rows);
    tcase_add_test(tc, invariant_with_stored_tuning);
    tcase_add_test(tc, invariant_plan_and_statuses);
    suite_add_tcase(s, tc);
    return tu_run_suite(s);
}
