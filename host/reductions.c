/* Reductions over the attention weights and scores that the fused path computes without
 * storing them: the desc's key_weight_sums (key_sums.cl) and max_logits (row_max.cl), run
 * after the fused kernel wrote its relative LSE columns (rows.cl STORE_LSE). Planning
 * here; the launches are launch.c's (they share the terms' arguments). */
#include "internal.h"

#include <stdio.h>

#define KEY_SUMS_RT 16 /* key_sums.cl: query rows staged per step */
#define KEY_SUMS_MAX_WG 8

/* key_sums.cl's local memory in bytes for wg work-items (its kt and qs arrays) */
static int64_t key_sums_local(int64_t d_k, int64_t wg)
{
    const int64_t d = d_k > 0 ? d_k : 1;
    return (d * 16 * wg + KEY_SUMS_RT * clattn_ceil_div(d, 16) * 16) * (int64_t)sizeof(float);
}

clattn_status clattn_plan_key_sums(clattn_context *ctx, const clattn_problem *pr, const char *feat,
                                   clattn_exec_plan *p)
{
    const int64_t d_k = pr->q.n[3];
    int64_t wg = KEY_SUMS_MAX_WG;
    while (wg > 1 && key_sums_local(d_k, wg) > (int64_t)clattn_local_tile_budget(ctx))
        wg /= 2;
    if (key_sums_local(d_k, wg) > (int64_t)clattn_local_tile_budget(ctx))
        return clattn_fail(ctx, CLATTN_ERROR_UNSUPPORTED,
                           "key_weight_sums: 16 K rows and %d Q rows of d_k %lld exceed the "
                           "device's local memory (%llu bytes for tiles)",
                           KEY_SUMS_RT, (long long)d_k,
                           (unsigned long long)clattn_local_tile_budget(ctx));
    for (;;) {
        char opts[512];
        snprintf(opts, sizeof opts, CLATTN_CL_STD " -DD_K=%lld -DWG=%lld -DRT=%d %s",
                 (long long)d_k, (long long)wg, KEY_SUMS_RT, feat);
        clattn_status st = clattn_get_kernel(ctx, "key_sums.cl", opts, &p->key_sums);
        if (st != CLATTN_SUCCESS)
            return st;
        if (p->key_sums->kernel_wg_max >= (size_t)wg)
            break;
        if (wg == 1)
            return clattn_fail(ctx, CLATTN_ERROR_UNSUPPORTED,
                               "key_weight_sums: the kernel's work-group limit is 0");
        wg /= 2;
    }
    p->key_sums_wg = (size_t)wg;
    return CLATTN_SUCCESS;
}

clattn_status clattn_plan_row_max(clattn_context *ctx, const clattn_problem *pr,
                                  clattn_dtype lse_dt, clattn_exec_plan *p)
{
    char opts[96];
    snprintf(opts, sizeof opts, CLATTN_CL_STD "%s%s", lse_dt == CLATTN_FLOAT64 ? " -DLSE_DT=4" : "",
             clattn_alibi_absolute(pr->desc) ? " -DALIBI_ABSOLUTE=1" : "");
    return clattn_get_kernel(ctx, "row_max.cl", opts, &p->row_max);
}
