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

/* Device-side inputs of the optional terms: host arrays copied into small buffers (the
 * runtime keeps them alive until the kernels that use them finish). */
typedef struct aux_t {
    const clattn_attention_desc *desc; /* NULL: plain rows (the public softmax stage) */
    cl_mem q_lens, kv_lens, alibi, sinks;
    cl_mem lens_given[2];    /* the desc's q_lens_buffer, kv_lens_buffer (not ours) */
    const clattn_view *mask; /* device view, or NULL */
    float softcap;
    const clattn_view *pages;              /* paged K (the block table's shape), or NULL */
    const clattn_view *k_scale, *v_scale;  /* an int8 K's and V's scales, or NULL */
    cl_mem table;                          /* its block table on the device */
    cl_mem q_row0, k_row0;                 /* a packed batch's first rows (not ours), or NULL */
    bool own_table;                        /* … copied from the host table here */
    cl_mem mods[CLATTN_MAX_MOD_BUFFERS];   /* the snippets' user buffers (clattn_mods.h) */
    bool own_mods[CLATTN_MAX_MOD_BUFFERS]; /* … copied from host arrays here */
    int n_mods;
} aux_t;

/* launch_aux.c: the desc's host arrays (lengths, ALiBi slopes, sinks, a host block table,
 * the snippets' host buffers) as device buffers, and their release (the runtime keeps a
 * buffer alive until the kernels that use it finish) */
clattn_status aux_make(clattn_context *ctx, const clattn_attention_desc *desc, const clattn_view *q,
                       const clattn_view *k, const clattn_view *mask, aux_t *x);
void aux_release(aux_t *x);
/* the arguments of common.cl's PAGE_PARAMS, RULE_PARAMS, TERM_PARAMS, DROPOUT_PARAMS */
void arg_pages(arg_list *a, const aux_t *x);
void arg_rule(arg_list *a, const aux_t *x);
void arg_terms(arg_list *a, const aux_t *x);
void arg_dropout(arg_list *a, const aux_t *x);

#endif
