/* The merge of partial results (clattn_merge, merge.cl): its program, and its steps: the
 * first part initialises a running (O, LSE) workspace, each next part merges into it, the
 * last step writes the outputs; events chain the steps. */
#include "internal.h"
#include "launch_args.h"

clattn_status clattn_plan_merge_step(clattn_context *ctx, clattn_dtype part, clattn_dtype part_lse,
                                     clattn_dtype out, clattn_dtype out_lse, bool lse64,
                                     clattn_program_entry **e)
{
    if (lse64 && !ctx->has_fp64)
        return clattn_fail(ctx, CLATTN_ERROR_UNSUPPORTED,
                           "a float64 LSE needs cl_khr_fp64, which %s does not have (use "
                           "float32 LSEs)",
                           ctx->device_name);
    char opts[112];
    /* LSE_DT: the running LSE (float64 when any LSE is); PL_DT: the part's; OL_DT: the
     * output's */
    snprintf(opts, sizeof opts,
             CLATTN_CL_STD " -DV_DT=%d -DO_DT=%d -DPL_DT=%d -DLSE_DT=%d -DOL_DT=%d", (int)part,
             (int)out, (int)part_lse, lse64 ? 4 : 0, (int)out_lse);
    return clattn_get_kernel(ctx, "merge.cl", opts, e);
}

/* The steps of a merge (merge.cl's `mode`): the first part initialises the running
 * (O, LSE) workspace, each next part merges into it, the last step writes the outputs. */
typedef enum { MERGE_FIRST = 0, MERGE_NEXT = 1, MERGE_FINISH = 2 } merge_step;

static clattn_status enqueue_merge_step(clattn_context *ctx, clattn_program_entry *e,
                                        const clattn_view *acc, const clattn_view *acc_lse,
                                        const clattn_view *po, const clattn_view *pl,
                                        const clattn_view *o, const clattn_view *lse,
                                        merge_step mode, cl_uint n_wait, const cl_event *wait,
                                        cl_event *done)
{
    arg_list a = {e->kernel, 0, CL_SUCCESS};
    arg(&a, sizeof(cl_mem), &acc->buffer);
    arg(&a, sizeof(cl_mem), &acc_lse->buffer);
    arg_long(&a, acc->n[3]);
    arg_int(&a, acc->n[1]);
    arg_long(&a, acc->n[2]);
    arg_opt_view(&a, po);
    arg_opt_view(&a, pl);
    arg_opt_view(&a, o);
    arg_opt_view(&a, lse);
    arg_int(&a, (int)mode);
    const size_t global[1] = {(size_t)(acc->n[0] * acc->n[1] * acc->n[2])};
    return launch(ctx, "merge", &a, 1, global, NULL, n_wait, wait, done);
}

clattn_status clattn_launch_merge(clattn_context *ctx, const clattn_merge_problem *m,
                                  cl_uint n_wait, const cl_event *wait, cl_event *done)
{
    const size_t n_parts = m->n_parts;
    const clattn_view *po = m->o_parts, *pl = m->lse_parts, *o = &m->o;
    const clattn_view *lse = m->has_lse ? &m->lse : NULL;
    if (o->count == 0)
        return enqueue_marker(ctx, n_wait, wait, done);
    /* the running LSE in float64 when any LSE of the merge is (R17: far ALiBi) */
    bool lse64 = lse && lse->dtype == CLATTN_FLOAT64;
    for (size_t p = 0; p < n_parts; p++)
        lse64 = lse64 || pl[p].dtype == CLATTN_FLOAT64;
    clattn_view acc, acc_lse;
    acc.buffer = acc_lse.buffer = NULL;
    clattn_status st = clattn_workspace(ctx, o->n[0], o->n[1], o->n[2], o->n[3], &acc);
    if (st == CLATTN_SUCCESS)
        st = clattn_workspace(ctx, o->n[0], o->n[1], o->n[2], lse64 ? 2 : 1, &acc_lse);
    cl_event prev = NULL;
    for (size_t p = 0; st == CLATTN_SUCCESS && p <= n_parts; p++) {
        /* one program per (part storage types, output storage type) */
        clattn_program_entry *e;
        st = clattn_plan_merge_step(ctx, p < n_parts ? po[p].dtype : CLATTN_FLOAT32,
                                    p < n_parts ? pl[p].dtype : CLATTN_FLOAT32, o->dtype,
                                    lse ? lse->dtype : CLATTN_FLOAT32, lse64, &e);
        cl_event next = NULL;
        if (st == CLATTN_SUCCESS) {
            const merge_step mode = p == 0 ? MERGE_FIRST : p < n_parts ? MERGE_NEXT : MERGE_FINISH;
            st = enqueue_merge_step(ctx, e, &acc, &acc_lse, p < n_parts ? &po[p] : NULL,
                                    p < n_parts ? &pl[p] : NULL, o, lse, mode, prev ? 1 : n_wait,
                                    prev ? &prev : wait, p == n_parts ? done : &next);
        }
        if (prev)
            clReleaseEvent(prev);
        prev = next;
    }
    if (prev)
        clReleaseEvent(prev);
    if (acc.buffer)
        clReleaseMemObject(acc.buffer);
    if (acc_lse.buffer)
        clReleaseMemObject(acc_lse.buffer);
    return st;
}
