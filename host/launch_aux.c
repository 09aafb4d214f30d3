/* The optional terms' device inputs (the desc's host arrays as small buffers, the
 * caller's buffers as they are) and their kernel arguments, in the order of common.cl's
 * RULE_PARAMS, TERM_PARAMS, PAGE_PARAMS and DROPOUT_PARAMS. */
#include "internal.h"
#include "launch_args.h"

#include <stdio.h>
#include <string.h>

/* common.cl PAGE_PARAMS: the block table, its row stride, page_size and the pool's page
 * count (a NULL table and 0, 1, 1 without pages) */
void arg_pages(arg_list *a, const aux_t *x)
{
    const clattn_view *k = x->pages;
    arg(a, sizeof(cl_mem), &x->table);
    arg_long(a, k ? k->page_stride : 0);
    arg_long(a, k ? k->page_size : 1);
    arg_long(a, k ? k->num_pages : 1);
}

void arg_rule(arg_list *a, const aux_t *x)
{
    const clattn_attention_desc *d = x->desc;
    int64_t wl = -1, wr = -1; /* saturated by the host rule (rule.c) */
    if (d)
        clattn_rule_window(d, &wl, &wr);
    arg_int(a, d ? d->mask : CLATTN_MASK_NONE);
    arg_long(a, d ? d->q_start - d->kv_start : 0);
    arg_long(a, wl);
    arg_long(a, wr);
    arg(a, sizeof(cl_mem), &x->q_lens);
    arg(a, sizeof(cl_mem), &x->kv_lens);
}

void arg_terms(arg_list *a, const aux_t *x)
{
    arg_opt_view(a, x->mask);
    arg(a, sizeof(cl_mem), &x->alibi);
    arg(a, sizeof(float), &x->softcap);
    const clattn_attention_desc *d = x->desc;
    const cl_long2 mod_pos = {{d ? d->q_start : 0, d ? d->kv_start : 0}};
    arg(a, sizeof mod_pos, &mod_pos);
    cl_mem bmask; /* the snippet's block mask, or NULL */
    cl_long4 bm_st;
    clattn_block_mask_arg(d, &bmask, &bm_st);
    arg(a, sizeof bmask, &bmask);
    arg(a, sizeof bm_st, &bm_st);
    for (int i = 0; i < x->n_mods; i++) /* MOD_BUF_PARAMS: only in programs with snippets */
        arg(a, sizeof(cl_mem), &x->mods[i]);
}

/* common.cl DROPOUT_PARAMS: seed, offset, threshold ⌊p·2^32⌋ and 1/(1 − p) (zeros
 * without dropout, or without a desc: the public stages) */
void arg_dropout(arg_list *a, const aux_t *x)
{
    const clattn_attention_desc *d = x->desc;
    const bool on = d && d->dropout_p > 0.0f;
    const cl_ulong seed = on ? d->dropout_seed : 0;
    const cl_uint offset = on ? (cl_uint)d->dropout_offset : 0;
    const cl_uint thr = on ? clattn_dropout_threshold(d->dropout_p) : 0;
    const float keep_scale = on ? (float)(1.0 / (1.0 - (double)d->dropout_p)) : 1.0f;
    arg(a, sizeof seed, &seed);
    arg(a, sizeof offset, &offset);
    arg(a, sizeof thr, &thr);
    arg(a, sizeof keep_scale, &keep_scale);
}

/* The host arrays of the desc as device buffers (count elements of 4 bytes each). */
clattn_status aux_make(clattn_context *ctx, const clattn_attention_desc *desc, const clattn_view *q,
                       const clattn_view *k, const clattn_view *mask, aux_t *x)
{
    memset(x, 0, sizeof *x);
    x->desc = desc;
    x->mask = mask;
    x->softcap = desc->softcap;
    const cl_mem_flags ro = CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR;
    clattn_status st = CLATTN_SUCCESS;
    if (desc->q_lens && q->n[0] > 0)
        st = clattn_create_buffer(ctx, ro, q->n[0] * 4, (void *)desc->q_lens, &x->q_lens);
    if (st == CLATTN_SUCCESS && desc->kv_lens && q->n[0] > 0)
        st = clattn_create_buffer(ctx, ro, q->n[0] * 4, (void *)desc->kv_lens, &x->kv_lens);
    /* lengths already on the device: used as they are, not released here */
    x->lens_given[0] = desc->q_lens_buffer, x->lens_given[1] = desc->kv_lens_buffer;
    if (desc->q_lens_buffer)
        x->q_lens = desc->q_lens_buffer;
    if (desc->kv_lens_buffer)
        x->kv_lens = desc->kv_lens_buffer;
    if (st == CLATTN_SUCCESS && desc->alibi_slopes && q->n[1] > 0)
        st = clattn_create_buffer(ctx, ro, q->n[1] * 4, (void *)desc->alibi_slopes, &x->alibi);
    if (st == CLATTN_SUCCESS && desc->sinks && q->n[1] > 0)
        st = clattn_create_buffer(ctx, ro, q->n[1] * 4, (void *)desc->sinks, &x->sinks);
    if (st == CLATTN_SUCCESS)
        st = clattn_mods_buffers(ctx, desc, x->mods, x->own_mods, &x->n_mods);
    if (st == CLATTN_SUCCESS && k && k->paged) {
        x->pages = k;
        x->table = k->page_table_buffer;
        if (!x->table && k->page_stride > 0 && q->n[0] > 0) {
            x->own_table = true;
            st = clattn_create_buffer(ctx, ro, q->n[0] * k->page_stride * 4, (void *)k->page_table,
                                      &x->table);
            if (st != CLATTN_SUCCESS) { /* say which buffer: the table is uploaded whole */
                char cause[192];
                snprintf(cause, sizeof cause, "%s", clattn_last_error_message(ctx));
                st = clattn_fail(ctx, st, "the host block table [%lld, %lld] of int32: %s",
                                 (long long)q->n[0], (long long)k->page_stride, cause);
            }
        }
    }
    return st;
}

void aux_release(aux_t *x)
{
    cl_mem *bufs[4] = {&x->q_lens, &x->kv_lens, &x->alibi, &x->sinks};
    for (int i = 0; i < 4; i++)
        if (*bufs[i] && (i >= 2 || *bufs[i] != x->lens_given[i])) {
            (void)clReleaseMemObject(*bufs[i]); /* freed once the kernels that use it finish */
            *bufs[i] = NULL;
        }
    if (x->own_table && x->table)
        (void)clReleaseMemObject(x->table);
    for (int i = 0; i < x->n_mods; i++)
        if (x->own_mods[i] && x->mods[i])
            (void)clReleaseMemObject(x->mods[i]);
    x->n_mods = 0;
    x->table = NULL;
}
