/* The public compute calls, each a short validate → plan → stage → launch → unstage:
 * attention (blocking, enqueue, plan), the three stages, and merge. The work is in
 * validate.c, plan.c, stage.c and launch.c. */
#include "internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------------ attention */

clattn_status clattn_attention_enqueue(clattn_context *ctx, const clattn_attention_desc *desc,
                                       const clattn_tensor *q, const clattn_tensor *k,
                                       const clattn_tensor *v, const clattn_tensor *o,
                                       cl_uint n_wait, const cl_event *wait, cl_event *done)
{
    clattn_problem p;
    clattn_exec_plan plan;
    if (!ctx)
        return clattn_fail(NULL, CLATTN_ERROR_INVALID_ARGUMENT, "ctx is NULL");
    if (desc && desc->varlen)
        return clattn_varlen_run(ctx, CLATTN_VARLEN_ENQUEUE, desc, q, k, v, o, n_wait, wait, done,
                                 NULL);
    clattn_status st = clattn_resolve_attention(ctx, desc, q, k, v, o, CLATTN_STORAGE_BUFFER, &p);
    if (st == CLATTN_SUCCESS)
        st = clattn_check_wait_list(ctx, n_wait, wait);
    if (st == CLATTN_SUCCESS)
        st = clattn_plan_attention(ctx, &p, &plan);
    if (st == CLATTN_SUCCESS)
        st = clattn_launch_attention(ctx, &plan, &p, n_wait, wait, done);
    return st;
}

clattn_status clattn_attention(clattn_context *ctx, const clattn_attention_desc *desc,
                               const clattn_tensor *q, const clattn_tensor *k,
                               const clattn_tensor *v, const clattn_tensor *o)
{
    clattn_problem host;
    clattn_exec_plan plan;
    if (!ctx)
        return clattn_fail(NULL, CLATTN_ERROR_INVALID_ARGUMENT, "ctx is NULL");
    if (desc && desc->varlen)
        return clattn_varlen_run(ctx, CLATTN_VARLEN_BLOCKING, desc, q, k, v, o, 0, NULL, NULL,
                                 NULL);
    clattn_status st = clattn_resolve_attention(ctx, desc, q, k, v, o, CLATTN_STORAGE_HOST, &host);
    if (st == CLATTN_SUCCESS)
        st = clattn_plan_attention(ctx, &host, &plan);
    if (st != CLATTN_SUCCESS || clattn_launch_what(&plan, &host) == CLATTN_LAUNCH_NOTHING)
        return st; /* nothing to stage or run */
    return clattn_run_staged(ctx, &plan, &host, NULL, NULL);
}

clattn_status clattn_run_staged(clattn_context *ctx, const clattn_exec_plan *plan,
                                const clattn_problem *host,
                                void (*adjust)(clattn_problem *dev, const void *arg),
                                const void *arg)
{
    clattn_staging sg = {NULL, 0, 0};
    cl_event done = NULL;
    clattn_problem dev;
    clattn_status st = clattn_stage_problem(ctx, &sg, host, &dev);
    clattn_problem run = dev; /* dev keeps the staged views' shapes for the read-back */
    if (adjust)
        adjust(&run, arg);
    if (st == CLATTN_SUCCESS)
        st = clattn_launch_attention(ctx, plan, &run, 0, NULL, &done);
    if (st == CLATTN_SUCCESS)
        st = clattn_wait(ctx, done);
    if (st == CLATTN_SUCCESS)
        st = clattn_unstage_problem(ctx, host, &dev);
    clattn_staging_release(&sg);
    return st;
}

clattn_status clattn_attention_plan(clattn_context *ctx, const clattn_attention_desc *desc,
                                    const clattn_tensor *q, const clattn_tensor *k,
                                    const clattn_tensor *v, const clattn_tensor *o,
                                    clattn_plan *out)
{
    clattn_problem p;
    clattn_exec_plan plan;
    if (!ctx)
        return clattn_fail(NULL, CLATTN_ERROR_INVALID_ARGUMENT, "ctx is NULL");
    if (desc && desc->varlen && out)
        return clattn_varlen_run(ctx, CLATTN_VARLEN_PLAN, desc, q, k, v, o, 0, NULL, NULL, out);
    clattn_status st = clattn_resolve_attention(ctx, desc, q, k, v, o, CLATTN_STORAGE_ANY, &p);
    if (st == CLATTN_SUCCESS && !out)
        st = clattn_fail(ctx, CLATTN_ERROR_INVALID_ARGUMENT, "out is NULL");
    if (st == CLATTN_SUCCESS)
        st = clattn_plan_attention(ctx, &p, &plan);
    if (st == CLATTN_SUCCESS)
        clattn_plan_describe(&plan, out);
    const clattn_launch_work work =
        st == CLATTN_SUCCESS ? clattn_launch_what(&plan, &p) : CLATTN_LAUNCH_PLAN;
    if (work != CLATTN_LAUNCH_PLAN) { /* no query rows: not the plan's kernels (built) */
        const bool sums = work == CLATTN_LAUNCH_KEY_SUMS_ONLY;
        out->work_group_size = out->queries_per_work_item = out->tile_kv = 0;
        out->rejected[0] = '\0';
        snprintf(out->kernels, sizeof out->kernels, "%s", sums ? "key_sums" : "");
        snprintf(out->reason, sizeof out->reason, "%s",
                 sums ? "no query rows: key_sums.cl writes the key weight sums (zeros)"
                      : "no query rows: the call enqueues nothing but a marker");
    }
    return st;
}

void clattn_plan_describe(const clattn_exec_plan *p, clattn_plan *out)
{
    memset(out, 0, sizeof *out);
    out->algorithm = p->algorithm;
    out->workspace_bytes = (size_t)p->workspace_bytes;
    const bool fused = p->algorithm == CLATTN_ALGORITHM_FUSED || p->no_keys;
    const clattn_blocked *bk = fused ? &p->fused : &p->scores;
    out->work_group_size = fused ? p->fused.wg : p->softmax_wg;
    out->queries_per_work_item = bk->rq;
    out->tile_kv = bk->tile_kv;
    snprintf(out->reason, sizeof out->reason, "%s", p->reason);
    snprintf(out->kernels, sizeof out->kernels, "%s", p->kernels);
    snprintf(out->rejected, sizeof out->rejected, "%s", p->rejected);
}

/* ------------------------------------------------------------- the three stages */

static clattn_status stage_enqueue(clattn_context *ctx, clattn_stage kind,
                                   const clattn_attention_desc *desc, const clattn_tensor *a,
                                   const clattn_tensor *b, const clattn_tensor *c, cl_uint n_wait,
                                   const cl_event *wait, cl_event *done)
{
    clattn_stage_call sp;
    clattn_stage_plan plan;
    if (!ctx)
        return clattn_fail(NULL, CLATTN_ERROR_INVALID_ARGUMENT, "ctx is NULL");
    clattn_status st = clattn_resolve_stage(ctx, kind, desc, a, b, c, CLATTN_STORAGE_BUFFER, &sp);
    if (st == CLATTN_SUCCESS)
        st = clattn_check_wait_list(ctx, n_wait, wait);
    if (st == CLATTN_SUCCESS && sp.c.count > 0)
        st = clattn_plan_stage(ctx, &sp, &plan);
    if (st == CLATTN_SUCCESS)
        st = clattn_launch_stage(ctx, &plan, &sp, n_wait, wait, done);
    return st;
}

static clattn_status stage_blocking(clattn_context *ctx, clattn_stage kind,
                                    const clattn_attention_desc *desc, const clattn_tensor *a,
                                    const clattn_tensor *b, const clattn_tensor *c)
{
    clattn_stage_call host, dev;
    clattn_stage_plan plan;
    if (!ctx)
        return clattn_fail(NULL, CLATTN_ERROR_INVALID_ARGUMENT, "ctx is NULL");
    clattn_status st = clattn_resolve_stage(ctx, kind, desc, a, b, c, CLATTN_STORAGE_HOST, &host);
    if (st != CLATTN_SUCCESS || host.c.count == 0)
        return st;
    st = clattn_plan_stage(ctx, &host, &plan);
    if (st != CLATTN_SUCCESS)
        return st;
    clattn_staging sg = {NULL, 0, 0};
    cl_event done = NULL;
    dev = host;
    st = clattn_stage_view(ctx, &sg, &host.a, true, &dev.a);
    if (st == CLATTN_SUCCESS && kind != CLATTN_STAGE_SOFTMAX)
        st = clattn_stage_view(ctx, &sg, &host.b, true, &dev.b);
    if (st == CLATTN_SUCCESS)
        st = clattn_stage_view(ctx, &sg, &host.c, false, &dev.c);
    if (st == CLATTN_SUCCESS && host.has_mask)
        st = clattn_stage_view(ctx, &sg, &host.mask, true, &dev.mask);
    if (kind == CLATTN_STAGE_SOFTMAX)
        dev.b = dev.a;
    if (st == CLATTN_SUCCESS)
        st = clattn_launch_stage(ctx, &plan, &dev, 0, NULL, &done);
    if (st == CLATTN_SUCCESS)
        st = clattn_wait(ctx, done);
    if (st == CLATTN_SUCCESS)
        st = clattn_unstage(ctx, &host.c, &dev.c);
    clattn_staging_release(&sg);
    return st;
}

clattn_status clattn_scores(clattn_context *ctx, const clattn_attention_desc *desc,
                            const clattn_tensor *q, const clattn_tensor *k,
                            const clattn_tensor *scores)
{
    return stage_blocking(ctx, CLATTN_STAGE_SCORES, desc, q, k, scores);
}

clattn_status clattn_scores_enqueue(clattn_context *ctx, const clattn_attention_desc *desc,
                                    const clattn_tensor *q, const clattn_tensor *k,
                                    const clattn_tensor *scores, cl_uint n_wait,
                                    const cl_event *wait, cl_event *done)
{
    return stage_enqueue(ctx, CLATTN_STAGE_SCORES, desc, q, k, scores, n_wait, wait, done);
}

clattn_status clattn_softmax(clattn_context *ctx, const clattn_attention_desc *desc,
                             const clattn_tensor *scores, const clattn_tensor *weights)
{
    return stage_blocking(ctx, CLATTN_STAGE_SOFTMAX, desc, scores, NULL, weights);
}

clattn_status clattn_softmax_enqueue(clattn_context *ctx, const clattn_attention_desc *desc,
                                     const clattn_tensor *scores, const clattn_tensor *weights,
                                     cl_uint n_wait, const cl_event *wait, cl_event *done)
{
    return stage_enqueue(ctx, CLATTN_STAGE_SOFTMAX, desc, scores, NULL, weights, n_wait, wait,
                         done);
}

clattn_status clattn_weighted_sum(clattn_context *ctx, const clattn_attention_desc *desc,
                                  const clattn_tensor *weights, const clattn_tensor *v,
                                  const clattn_tensor *o)
{
    return stage_blocking(ctx, CLATTN_STAGE_WEIGHTED_SUM, desc, weights, v, o);
}

clattn_status clattn_weighted_sum_enqueue(clattn_context *ctx, const clattn_attention_desc *desc,
                                          const clattn_tensor *weights, const clattn_tensor *v,
                                          const clattn_tensor *o, cl_uint n_wait,
                                          const cl_event *wait, cl_event *done)
{
    return stage_enqueue(ctx, CLATTN_STAGE_WEIGHTED_SUM, desc, weights, v, o, n_wait, wait, done);
}

/* ------------------------------------------------------------------------ merge */

clattn_status clattn_merge_enqueue(clattn_context *ctx, size_t n_parts,
                                   const clattn_tensor *o_parts, const clattn_tensor *lse_parts,
                                   const clattn_tensor *o, const clattn_tensor *lse, cl_uint n_wait,
                                   const cl_event *wait, cl_event *done)
{
    clattn_merge_problem m;
    clattn_status st =
        clattn_resolve_merge(ctx, n_parts, o_parts, lse_parts, o, lse, CLATTN_STORAGE_BUFFER, &m);
    if (st == CLATTN_SUCCESS)
        st = clattn_check_wait_list(ctx, n_wait, wait);
    if (st == CLATTN_SUCCESS)
        st = clattn_launch_merge(ctx, &m, n_wait, wait, done);
    clattn_merge_problem_free(&m);
    return st;
}

clattn_status clattn_merge(clattn_context *ctx, size_t n_parts, const clattn_tensor *o_parts,
                           const clattn_tensor *lse_parts, const clattn_tensor *o,
                           const clattn_tensor *lse)
{
    clattn_merge_problem host, dev;
    memset(&dev, 0, sizeof dev);
    clattn_status st =
        clattn_resolve_merge(ctx, n_parts, o_parts, lse_parts, o, lse, CLATTN_STORAGE_HOST, &host);
    clattn_staging sg = {NULL, 0, 0};
    if (st == CLATTN_SUCCESS && host.o.count > 0) {
        dev = host; /* with its own part arrays for the device views */
        dev.o_parts = malloc(n_parts * sizeof *dev.o_parts);
        dev.lse_parts = malloc(n_parts * sizeof *dev.lse_parts);
        if (!dev.o_parts || !dev.lse_parts)
            st = clattn_fail(ctx, CLATTN_ERROR_OUT_OF_HOST_MEMORY, "cannot allocate %zu part views",
                             n_parts);
        for (size_t p = 0; st == CLATTN_SUCCESS && p < n_parts; p++) {
            st = clattn_stage_view(ctx, &sg, &host.o_parts[p], true, &dev.o_parts[p]);
            if (st == CLATTN_SUCCESS)
                st = clattn_stage_view(ctx, &sg, &host.lse_parts[p], true, &dev.lse_parts[p]);
        }
        if (st == CLATTN_SUCCESS)
            st = clattn_stage_view(ctx, &sg, &host.o, false, &dev.o);
        if (st == CLATTN_SUCCESS && host.has_lse)
            st = clattn_stage_view(ctx, &sg, &host.lse, false, &dev.lse);
        cl_event done = NULL;
        if (st == CLATTN_SUCCESS)
            st = clattn_launch_merge(ctx, &dev, 0, NULL, &done);
        if (st == CLATTN_SUCCESS)
            st = clattn_wait(ctx, done);
        if (st == CLATTN_SUCCESS)
            st = clattn_unstage(ctx, &host.o, &dev.o);
        if (st == CLATTN_SUCCESS && host.has_lse)
            st = clattn_unstage(ctx, &host.lse, &dev.lse);
    }
    clattn_staging_release(&sg);
    clattn_merge_problem_free(&dev);
    clattn_merge_problem_free(&host);
    return st;
}
