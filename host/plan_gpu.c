/* Planning the GPU family's fused kernel (fused_gpu.cl): its local memory, the blocking
 * it takes, and its build, with sub-group reductions where the device has them (plan.c
 * plans the rest; internal.h declares these). */
#include "internal.h"

#include <stdio.h>
#define CL_STD CLATTN_CL_STD

/* fused_gpu.cl's local memory in bytes (its header lists the arrays): q_s, k_s and v_s
 * hold Q, K and V as lm_t, 2 bytes with HALF_MATH and 4 without; p_t and red float32 */
static int64_t gpu_local_bytes(int64_t d_k, int64_t d_v, size_t rq, size_t wg, size_t tile,
                               bool kv_shared, bool half)
{
    const int64_t ct = (int64_t)clattn_gpu_ct(wg), bq = (int64_t)(wg / (size_t)ct * rq);
    const int64_t t = (int64_t)tile, qk = clattn_ceil_div(d_k, 4) * 4 + 4;
    const int64_t dvp = clattn_ceil_div(d_v, 4 * ct) * 4 * ct;
    const int64_t kb = t * qk, vb = t * dvp;
    const int64_t qkv = bq * qk + (kv_shared ? (kb > vb ? kb : vb) : kb + vb);
    return qkv * (half ? 2 : (int64_t)sizeof(float)) +
           (t * (bq + 4) + bq * ct) * (int64_t)sizeof(float) + 16;
}

bool clattn_gpu_fits(const clattn_context *ctx, int64_t d_k, int64_t d_v, size_t rq, size_t wg,
                     size_t tile, bool half, bool *kv_shared)
{
    const int64_t budget = (int64_t)clattn_local_tile_budget(ctx);
    for (int sh = 0; sh < 2; sh++)
        if (gpu_local_bytes(d_k, d_v, rq, wg, tile, sh != 0, half) <= budget) {
            *kv_shared = sh != 0;
            return true;
        }
    return false;
}

clattn_status clattn_plan_fused_gpu(clattn_context *ctx, int64_t n_q, int64_t d_k, int64_t d_v,
                                    size_t wg_request, const char *feat, bool half,
                                    clattn_blocked *out)
{
    /* measured on an H200 (docs/BENCHMARKS.md): d 64 fastest at 4,128,64 (4,256,32: 10 %
     * slower), d 128 at 4,128,32 with K and V sharing a buffer */
    static const size_t prefs[][3] = {{4, 128, 64}, {4, 256, 32}, {4, 128, 32}, {4, 128, 16},
                                      {2, 128, 16}, {2, 64, 16},  {1, 64, 16},  {1, 16, 16}};
    const size_t n_prefs = sizeof prefs / sizeof prefs[0];
    const clattn_blocking_request r = {CLATTN_KERNEL_FUSED, d_k, d_v, n_q, 0, 0, 0, 0, wg_request};
    size_t e[3];
    const int ex = clattn_tuning_explicit(ctx, &r, &e[0], &e[1], &e[2]);
    size_t limit = 0;
    for (size_t at = 0; at <= n_prefs; at++) {
        size_t rq, wg, tile;
        if (at == 0 && !ex)
            continue;
        if (at == 0) {
            rq = e[0], wg = e[1], tile = e[2];
        } else {
            rq = prefs[at - 1][0], wg = wg_request ? wg_request : prefs[at - 1][1];
            tile = prefs[at - 1][2];
        }
        /* private floats per work-item: O and score micro-tiles, the float4s of one step,
         * maxima and sums, 16 scores of the terms pass (CPU devices: the stack bound) */
        const int64_t ct = (int64_t)clattn_gpu_ct(wg);
        const int64_t priv =
            (int64_t)rq * (clattn_ceil_div(d_v, 4 * ct) * 4 + (int64_t)tile / ct + 6) +
            (int64_t)tile / ct * 4 + 48;
        limit = clattn_group_limit_private(ctx, priv * (int64_t)sizeof(float));
        const bool fixed = (at == 0 && ex == 1) || (wg_request != 0 && at == n_prefs);
        bool kv_shared = false;
        const char *why = NULL;
        if (wg > limit)
            why = "exceeds the device's work-group limit";
        else if (!clattn_gpu_fits(ctx, d_k, d_v, rq, wg, tile, half, &kv_shared))
            why = "needs more local memory than the device has";
        if (!why) {
            char opts[512];
            /* with sub-groups (context.c), and without where that build fails: a driver
             * that lists the extension but refuses the program (then not tried again) */
            int sg = ctx->subgroup_std && !ctx->subgroup_build_failed;
            bool retried = false;
            clattn_status st;
            for (;;) {
                snprintf(opts, sizeof opts,
                         "%s -DD_K=%lld -DD_V=%lld %s -DTILE_KV=%zu -DWG=%zu -DRQ=%zu -DCT=%zu "
                         "-DKV_SHARED=%d -DSUBGROUPS=%d -DREQD_SUB_GROUP=%zu%s",
                         sg ? ctx->subgroup_std : CL_STD, (long long)d_k, (long long)d_v, feat,
                         tile, wg, rq, clattn_gpu_ct(wg), kv_shared ? 1 : 0, sg,
                         sg ? ctx->intel_sg_sizes & clattn_gpu_ct(wg) : 0,
                         half ? " -DHALF_MATH=1" : "");
                st = clattn_get_kernel(ctx, "fused_gpu.cl", opts, &out->entry);
                if (st != CLATTN_ERROR_BUILD_FAILED || sg == 0)
                    break;
                sg = 0;
                retried = true;
            }
            if (retried && st == CLATTN_SUCCESS) { /* (its build log is not this call's error) */
                ctx->subgroup_build_failed = true;
                clattn_clear_error(ctx);
                ctx->last_cl = CL_SUCCESS;
            }
            out->subgroups = sg != 0;
            if (st != CLATTN_SUCCESS)
                return st;
            if (out->entry->kernel_wg_max < wg)
                why = "exceeds the kernel's work-group limit (CL_KERNEL_WORK_GROUP_SIZE)";
        }
        if (!why) {
            out->rq = rq;
            out->wg = wg;
            out->tile_kv = tile;
            out->rows = wg / clattn_gpu_ct(wg) * rq;
            return CLATTN_SUCCESS;
        }
        if (fixed)
            return clattn_fail(ctx, CLATTN_ERROR_UNSUPPORTED,
                               "GPU family fused kernel: blocking %zu,%zu,%zu (RQ,WG,TILE_KV; "
                               "%s) %s (local memory %llu bytes, work-group limit %zu)",
                               rq, wg, tile, ex == 1 && at == 0 ? "an override" : "requested", why,
                               (unsigned long long)ctx->local_mem, limit);
    }
    return clattn_fail(ctx, CLATTN_ERROR_UNSUPPORTED,
                       "GPU family fused kernel: no blocking fits d_k %lld, d_v %lld in %llu "
                       "bytes of local memory",
                       (long long)d_k, (long long)d_v, (unsigned long long)ctx->local_mem);
}
