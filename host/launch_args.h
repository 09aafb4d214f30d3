/* Kernel arguments and launches, shared by the launch files (launch.c, launch_merge.c):
 * an argument list filled in the order of a kernel's signature (the first failure kept),
 * views as (buffer, offset, strides), and the enqueue that reports a failed argument or
 * launch by the kernel's name. */
#ifndef CLATTN_LAUNCH_ARGS_H
#define CLATTN_LAUNCH_ARGS_H
#include "internal.h"

#include <stdio.h>

typedef struct arg_list {
    cl_kernel kernel;
    cl_uint next;
    cl_int err;
} arg_list;

static inline void arg(arg_list *a, size_t size, const void *value)
{
    if (a->err == CL_SUCCESS)
        a->err = clSetKernelArg(a->kernel, a->next, size, value);
    a->next++;
}

static inline void arg_view(arg_list *a, const clattn_view *v)
{
    cl_long off = v->offset;
    cl_long4 st = {{v->s[0], v->s[1], v->s[2], v->s[3]}};
    arg(a, sizeof(cl_mem), &v->buffer);
    arg(a, sizeof off, &off);
    arg(a, sizeof st, &st);
}

static inline void arg_int(arg_list *a, int64_t x)
{
    cl_int v = (cl_int)x;
    arg(a, sizeof v, &v);
}

static inline void arg_long(arg_list *a, int64_t x)
{
    cl_long v = x;
    arg(a, sizeof v, &v);
}

static inline size_t round_up(int64_t n, size_t m)
{
    return (size_t)((n + (int64_t)m - 1) / (int64_t)m) * m;
}

static inline clattn_status launch(clattn_context *ctx, const char *name, arg_list *a, cl_uint dims,
                                   const size_t *global, const size_t *local, cl_uint n_wait,
                                   const cl_event *wait, cl_event *done)
{
    if (a->err != CL_SUCCESS) {
        char what[96];
        snprintf(what, sizeof what, "clSetKernelArg(%s, %u)", name, a->next - 1);
        return clattn_fail_cl(ctx, a->err, what);
    }
    cl_int err = clEnqueueNDRangeKernel(ctx->queue, a->kernel, dims, NULL, global, local, n_wait,
                                        n_wait ? wait : NULL, done);
    if (err != CL_SUCCESS) {
        char what[96];
        snprintf(what, sizeof what, "clEnqueueNDRangeKernel(%s)", name);
        return clattn_fail_cl(ctx, err, what);
    }
    return CLATTN_SUCCESS;
}

/* an optional view argument (LSE, mask tensor, ...); a NULL buffer when absent */
static inline void arg_opt_view(arg_list *a, const clattn_view *v)
{
    if (v) {
        arg_view(a, v);
        return;
    }
    clattn_view none = clattn_view_packed(0, 0, 0, 0);
    none.s[2] = none.s[3] = 0;
    arg_view(a, &none);
}

/* Completes `done` after `wait` without running anything (empty problems). */
static inline clattn_status enqueue_marker(clattn_context *ctx, cl_uint n_wait,
                                           const cl_event *wait, cl_event *done)
{
    if (!done && n_wait == 0)
        return CLATTN_SUCCESS;
    cl_int err = clEnqueueMarkerWithWaitList(ctx->queue, n_wait, n_wait ? wait : NULL, done);
    return err == CL_SUCCESS ? CLATTN_SUCCESS : clattn_fail_cl(ctx, err, "clEnqueueMarker");
}

#endif
