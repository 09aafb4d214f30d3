/* clattn-mpi: ring attention and split-KV decoding over MPI ranks, each with its own
 * clattn context. See clattn_mpi.h and docs/SCALING.md. */
#define _POSIX_C_SOURCE 200809L /* nanosleep */
#include "clattn_mpi.h"
#include "internal.h" /* the core's views and stores (static libclattn) */

#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static _Thread_local char g_message[1024];

const char *clattn_mpi_last_error_message(void)
{
    return g_message;
}

static clattn_status fail(clattn_status st, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;

static clattn_status fail(clattn_status st, const char *fmt, ...)
{
    int rank = -1;
    int up = 0;
    MPI_Initialized(&up);
    if (up)
        MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    char buf[900];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    snprintf(g_message, sizeof g_message, "rank %d: %s", rank, buf);
    return st;
}

static clattn_status fail_ctx(clattn_context *ctx, clattn_status st, const char *what)
{
    return fail(st, "%s: %s", what, clattn_last_error_message(ctx));
}

static clattn_status fail_mpi(int err, const char *what)
{
    char s[MPI_MAX_ERROR_STRING];
    int len = 0;
    MPI_Error_string(err, s, &len);
    return fail(CLATTN_ERROR_OPENCL, "%s failed: %s", what, s);
}

/* An OpenCL failure with the library's one mapping to a status. */
static clattn_status fail_cl(cl_int err, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;

static clattn_status fail_cl(cl_int err, const char *fmt, ...)
{
    char what[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    return fail(clattn_status_from_cl(err), "%s failed: OpenCL error %d", what, (int)err);
}

/* ------------------------------------------------------------------ helpers */

/* Float i of a float array stored in the first half of a double array, as a double:
 * widening in place, from the last element to the first, never overwrites a float not
 * yet read. */
static double widen_at(const double *base, size_t i)
{
    float f;
    memcpy(&f, (const char *)base + i * sizeof f, sizeof f);
    return f;
}

static int64_t count4(const clattn_tensor *t)
{
    return t->shape[0] * t->shape[1] * t->shape[2] * t->shape[3];
}

/* Copies the elements of a host view into a packed array (same dtype). */
static void pack(const clattn_tensor *t, void *dst)
{
    const size_t es = clattn_dtype_size(t->dtype);
    int64_t s[4];
    const bool packed = !t->strides[0] && !t->strides[1] && !t->strides[2] && !t->strides[3];
    s[3] = packed ? 1 : t->strides[3];
    for (int i = 2; i >= 0; i--)
        s[i] = packed ? s[i + 1] * t->shape[i + 1] : t->strides[i];
    const char *src = (const char *)t->host + t->offset * (int64_t)es;
    char *out = dst;
    for (int64_t b = 0; b < t->shape[0]; b++)
        for (int64_t h = 0; h < t->shape[1]; h++)
            for (int64_t i = 0; i < t->shape[2]; i++) {
                const char *row = src + (b * s[0] + h * s[1] + i * s[2]) * (int64_t)es;
                if (s[3] == 1) {
                    memcpy(out, row, (size_t)t->shape[3] * es);
                    out += (size_t)t->shape[3] * es;
                } else {
                    for (int64_t d = 0; d < t->shape[3]; d++, out += es)
                        memcpy(out, row + d * s[3] * (int64_t)es, es);
                }
            }
}

static double now(void)
{
    return MPI_Wtime();
}

static void nap(void)
{
    struct timespec ts = {0, 50000}; /* 50 µs: lets the device threads have the cores */
    nanosleep(&ts, NULL);
}

/* Whether a query at absolute positions [q0, q0 + n_q) sees a key of [k0, k0 + m): the
 * library's rule (clattn_visible_keys) with d's mask and window at those positions. */
static bool block_visible(const clattn_attention_desc *d, int64_t q0, int64_t n_q, int64_t k0,
                          int64_t m)
{
    clattn_attention_desc at = *d;
    at.q_start = q0;
    at.kv_start = k0;
    for (int64_t i = 0; i < n_q; i++) {
        clattn_key_range r;
        if (clattn_visible_keys(&at, n_q, m, 0, i, &r) != CLATTN_SUCCESS)
            return true; /* cannot tell: compute the block */
        if (r.valid && r.hi > r.lo && !(r.hi - r.lo == 1 && r.self == r.lo))
            return true;
    }
    return false;
}

/* Checks shared by both calls; on success *every* rank succeeded (one Allreduce). */
static clattn_status common_checks(clattn_context *ctx, MPI_Comm comm,
                                   const clattn_attention_desc *desc, const clattn_tensor *q,
                                   const clattn_tensor *k, const clattn_tensor *v,
                                   const clattn_tensor *o)
{
    clattn_status st = CLATTN_SUCCESS;
    if (!ctx || !desc || !q || !k || !v || !o)
        st = fail(CLATTN_ERROR_INVALID_ARGUMENT, "ctx, desc, q, k, v and o must be non-NULL");
    else if (desc->weights || desc->mask_tensor || desc->kv_lens || desc->q_lens ||
             desc->masked_rows == CLATTN_MASKED_ROWS_NAN || desc->paged || desc->k_new ||
             desc->rotary || desc->kv_lens_buffer || desc->q_lens_buffer || desc->varlen ||
             desc->k_scale || desc->v_scale || desc->dropout_p != 0.0f || desc->batch_invariant ||
             desc->key_weight_sums || desc->max_logits || desc->mods || k->dtype == CLATTN_INT8 ||
             k->dtype == CLATTN_FLOAT8_E4M3 || v->dtype == CLATTN_INT8 ||
             v->dtype == CLATTN_FLOAT8_E4M3)
        st = fail(CLATTN_ERROR_UNSUPPORTED,
                  "clattn-mpi does not take weights, mask_tensor, kv_lens, q_lens, "
                  "masked_rows = NAN, paged K/V, k_new / v_new, rotary, varlen, dropout, "
                  "batch_invariant (its ring splits the keys), key_weight_sums, max_logits, "
                  "mods or "
                  "int8/FP8 K/V");
    else if (!q->host || !k->host || !v->host || !o->host)
        st = fail(CLATTN_ERROR_INVALID_LAYOUT, "clattn-mpi takes host views");
    else {
        /* the shapes and the desc, as one device would check them */
        clattn_plan plan;
        clattn_attention_desc d = *desc;
        d.mask = d.mask == CLATTN_MASK_CAUSAL_BOTTOM_RIGHT ? CLATTN_MASK_CAUSAL_TOP_LEFT : d.mask;
        d.lse = NULL;
        st = clattn_attention_plan(ctx, &d, q, k, v, o, &plan);
        if (st != CLATTN_SUCCESS)
            st = fail_ctx(ctx, st, "clattn_attention_plan");
        else if (count4(k) * (int64_t)clattn_dtype_size(k->dtype) +
                     count4(v) * (int64_t)clattn_dtype_size(v->dtype) >
                 INT_MAX)
            st = fail(CLATTN_ERROR_SIZE_OVERFLOW, "a K/V block over 2 GiB cannot be one message");
    }
    int mine = (int)st, worst = 0;
    int err = MPI_Allreduce(&mine, &worst, 1, MPI_INT, MPI_MAX, comm);
    if (err != MPI_SUCCESS)
        return fail_mpi(err, "MPI_Allreduce(status)");
    if (st == CLATTN_SUCCESS && worst != 0)
        st = fail((clattn_status)worst, "another rank failed validation (status %d)", worst);
    return st;
}

/* The sinks (desc->sinks), folded into the merged packed (O, LSE) [B, HQ, NQ] rows as
 * one more part of LSE sinks[h] and O = 0 (the blocks ran without them):
 * LSE' = log(exp(LSE) + exp(sink)), O' = exp(LSE − LSE')·O. */
static void fold_sinks(const clattn_attention_desc *desc, int64_t B, int64_t HQ, int64_t NQ,
                       int64_t DV, float *acc_o, double *acc_l)
{
    if (!desc->sinks)
        return;
    size_t row = 0;
    for (int64_t b = 0; b < B; b++)
        for (int64_t h = 0; h < HQ; h++)
            for (int64_t i = 0; i < NQ; i++, row++) {
                const double s = (double)desc->sinks[h], l = acc_l[row];
                if (s == -INFINITY || isnan(l))
                    continue;
                const double mx = l > s ? l : s;
                const double lse = mx + log(exp(l - mx) + exp(s - mx));
                const double f = l == -INFINITY ? 0.0 : exp(l - lse);
                for (int64_t c = 0; c < DV; c++)
                    acc_o[row * (size_t)DV + (size_t)c] =
                        (float)(f * acc_o[row * (size_t)DV + (size_t)c]);
                acc_l[row] = lse;
            }
}

/* Writes the packed float32 (O, LSE) into the caller's views (any dtype and strides;
 * rows with LSE −∞ become zeros), with the core's view checks and stores. */
static clattn_status deliver(const clattn_attention_desc *desc, const clattn_tensor *o,
                             const float *acc_o, const double *acc_l)
{
    clattn_view vo, vl;
    clattn_status st = clattn_view_make(NULL, "O", o, CLATTN_STORAGE_HOST, true, &vo);
    if (st == CLATTN_SUCCESS && desc->lse)
        st = clattn_view_make(NULL, "lse", desc->lse, CLATTN_STORAGE_HOST, true, &vl);
    if (st != CLATTN_SUCCESS)
        return fail(st, "result: %s", clattn_last_error_message(NULL));
    size_t row = 0;
    for (int64_t b = 0; b < vo.n[0]; b++)
        for (int64_t h = 0; h < vo.n[1]; h++)
            for (int64_t i = 0; i < vo.n[2]; i++, row++) {
                const bool empty = acc_l[row] == -INFINITY;
                for (int64_t c = 0; c < vo.n[3]; c++)
                    clattn_host_store(&vo, clattn_view_index(&vo, b, h, i, c),
                                      empty ? 0.0f : acc_o[row * (size_t)vo.n[3] + (size_t)c]);
                if (desc->lse)
                    clattn_host_store64(&vl, clattn_view_index(&vl, b, h, i, 0), acc_l[row]);
            }
    return CLATTN_SUCCESS;
}

/* ------------------------------------------------------------------ ring attention */

typedef struct ring_dev {
    cl_context cl;
    cl_command_queue queue;
    cl_mem q, k, v, o_acc, l_acc, o_part, l_part;
} ring_dev;

static void release_mem(cl_mem m)
{
    if (m)
        clReleaseMemObject(m);
}

static void ring_dev_release(ring_dev *r)
{
    release_mem(r->q);
    release_mem(r->k);
    release_mem(r->v);
    release_mem(r->o_acc);
    release_mem(r->l_acc);
    release_mem(r->o_part);
    release_mem(r->l_part);
}

/* A device buffer through the core's buffer creation (its status mapping and message);
 * a host array is copied in. */
static clattn_status make_buf(clattn_context *ctx, size_t bytes, void *host, cl_mem *out)
{
    const cl_mem_flags flags =
        host && bytes ? CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR : CL_MEM_READ_WRITE;
    clattn_status st = clattn_create_buffer(ctx, flags, (int64_t)bytes, bytes ? host : NULL, out);
    return st == CLATTN_SUCCESS ? st : fail_ctx(ctx, st, "ring buffers");
}

/* Waits for the device event (NULL: none) and the requests together, polling both, so
 * MPI progresses while the device computes. Adds the device time since t_start to
 * *compute and the time waited for MPI after the device finished to *comm. */
static clattn_status wait_both(cl_event ev, MPI_Request *reqs, int n_reqs, double t_start,
                               double *compute, double *comm)
{
    bool dev_done = ev == NULL, comm_done = n_reqs == 0;
    double t_dev = t_start;
    while (!dev_done || !comm_done) {
        if (!comm_done) {
            int flag = 0;
            int err = MPI_Testall(n_reqs, reqs, &flag, MPI_STATUSES_IGNORE);
            if (err != MPI_SUCCESS)
                return fail_mpi(err, "MPI_Testall");
            if (flag) {
                comm_done = true;
                if (dev_done)
                    *comm += now() - t_dev;
            }
        }
        if (!dev_done) {
            cl_int es = CL_QUEUED;
            cl_int err =
                clGetEventInfo(ev, CL_EVENT_COMMAND_EXECUTION_STATUS, sizeof es, &es, NULL);
            if (err != CL_SUCCESS || es < 0)
                return err != CL_SUCCESS ? fail_cl(err, "clGetEventInfo(block)")
                                         : fail_cl(es, "the device's block");
            if (es == CL_COMPLETE) {
                dev_done = true;
                t_dev = now();
                *compute += t_dev - t_start;
            }
        }
        if (!dev_done || !comm_done)
            nap();
    }
    return CLATTN_SUCCESS;
}

clattn_status clattn_mpi_ring_attention(clattn_context *ctx, MPI_Comm comm,
                                        const clattn_attention_desc *desc, const clattn_tensor *q,
                                        const clattn_tensor *k, const clattn_tensor *v,
                                        const clattn_tensor *o, clattn_mpi_stats *stats)
{
    g_message[0] = '\0';
    const double t_begin = now();
    clattn_mpi_stats local;
    memset(&local, 0, sizeof local);
    clattn_status st = common_checks(ctx, comm, desc, q, k, v, o);
    if (st != CLATTN_SUCCESS)
        return st;
    int P = 1, r = 0, err;
    MPI_Comm_size(comm, &P);
    MPI_Comm_rank(comm, &r);
    local.steps = P;

    /* every rank's block lengths → positions */
    int64_t mine[2] = {q->shape[2], k->shape[2]};
    int64_t *lens = malloc(sizeof *lens * 2 * (size_t)P);
    if (!lens)
        return fail(CLATTN_ERROR_OUT_OF_HOST_MEMORY, "lens");
    err = MPI_Allgather(mine, 2, MPI_INT64_T, lens, 2, MPI_INT64_T, comm);
    if (err != MPI_SUCCESS) {
        free(lens);
        return fail_mpi(err, "MPI_Allgather(lengths)");
    }
    int64_t q0 = desc->q_start, n_q_total = 0, n_kv_total = 0;
    for (int j = 0; j < P; j++) {
        if (j < r)
            q0 += lens[2 * j];
        n_q_total += lens[2 * j];
        n_kv_total += lens[2 * j + 1];
    }
    clattn_attention_desc d = *desc;
    d.lse = NULL;
    d.sinks = NULL;                                  /* folded into the merged rows at the end */
    if (d.mask == CLATTN_MASK_CAUSAL_BOTTOM_RIGHT) { /* as top-left, queries shifted */
        d.mask = CLATTN_MASK_CAUSAL_TOP_LEFT;
        q0 += n_kv_total - n_q_total;
    }
    d.q_start = q0;

    const int64_t B = q->shape[0], HQ = q->shape[1], NQ = q->shape[2], DK = q->shape[3];
    const int64_t HKV = k->shape[1], DV = v->shape[3];
    const size_t esk = clattn_dtype_size(k->dtype), esv = clattn_dtype_size(v->dtype);
    int64_t max_kv = 0;
    for (int j = 0; j < P; j++)
        max_kv = lens[2 * j + 1] > max_kv ? lens[2 * j + 1] : max_kv;
    const size_t kbytes_max = (size_t)(B * HKV * max_kv * DK) * esk;
    const size_t vbytes_max = (size_t)(B * HKV * max_kv * DV) * esv;
    const size_t rows = (size_t)(B * HQ * NQ), n_o = rows * (size_t)DV;
    char *host_kv[2] = {malloc(kbytes_max + vbytes_max + 1), malloc(kbytes_max + vbytes_max + 1)};
    void *qpack = malloc((size_t)count4(q) * clattn_dtype_size(q->dtype) + 1);
    /* the running LSE in float64 where the device has it: far ALiBi keys (R17) */
    const bool lse64 = ctx->has_fp64;
    const size_t lse_es = lse64 ? 8 : 4;
    float *acc_o = malloc((n_o + 1) * sizeof *acc_o);
    double *acc_l = malloc((rows + 1) * sizeof *acc_l);
    ring_dev dev;
    memset(&dev, 0, sizeof dev);
    if (!host_kv[0] || !host_kv[1] || !qpack || !acc_o || !acc_l) {
        st = fail(CLATTN_ERROR_OUT_OF_HOST_MEMORY, "ring buffers (%zu bytes per K/V block)",
                  kbytes_max + vbytes_max);
        goto out;
    }
    pack(q, qpack);
    {
        const size_t kb = (size_t)(B * HKV * k->shape[2] * DK) * esk;
        pack(k, host_kv[0]);
        pack(v, host_kv[0] + kb);
    }
    clattn_context_get_cl(ctx, &dev.cl, NULL, &dev.queue);
    st = make_buf(ctx, (size_t)count4(q) * clattn_dtype_size(q->dtype), qpack, &dev.q);
    if (st == CLATTN_SUCCESS)
        st = make_buf(ctx, kbytes_max, NULL, &dev.k);
    if (st == CLATTN_SUCCESS)
        st = make_buf(ctx, vbytes_max, NULL, &dev.v);
    if (st == CLATTN_SUCCESS)
        st = make_buf(ctx, n_o * 4, NULL, &dev.o_acc);
    if (st == CLATTN_SUCCESS)
        st = make_buf(ctx, rows * lse_es, NULL, &dev.l_acc);
    if (st == CLATTN_SUCCESS)
        st = make_buf(ctx, n_o * 4, NULL, &dev.o_part);
    if (st == CLATTN_SUCCESS)
        st = make_buf(ctx, rows * lse_es, NULL, &dev.l_part);
    if (st != CLATTN_SUCCESS)
        goto out;

    clattn_tensor tq = clattn_tensor_buffer(dev.q, B, HQ, NQ, DK);
    tq.dtype = q->dtype;
    clattn_tensor to_acc = clattn_tensor_buffer(dev.o_acc, B, HQ, NQ, DV);
    clattn_tensor tl_acc = clattn_tensor_buffer(dev.l_acc, B, HQ, NQ, 1);
    tl_acc.dtype = lse64 ? CLATTN_FLOAT64 : CLATTN_FLOAT32;
    clattn_tensor to_part = clattn_tensor_buffer(dev.o_part, B, HQ, NQ, DV);
    clattn_tensor tl_part = clattn_tensor_buffer(dev.l_part, B, HQ, NQ, 1);
    tl_part.dtype = tl_acc.dtype;
    const int next = (r + 1) % P, prev = (r - 1 + P) % P;
    int cur = 0;
    for (int s = 0; s < P && st == CLATTN_SUCCESS; s++) {
        const int j = (r - s + P) % P;        /* the block held now */
        const int j_in = (r - s - 1 + P) % P; /* the block arriving */
        const int64_t m = lens[2 * j + 1], m_in = lens[2 * j_in + 1];
        const size_t kb = (size_t)(B * HKV * m * DK) * esk, vb = (size_t)(B * HKV * m * DV) * esv;
        const size_t in_bytes = (size_t)(B * HKV * m_in * (DK * (int64_t)esk + DV * (int64_t)esv));
        MPI_Request reqs[2];
        int n_reqs = 0;
        if (s < P - 1) {
            err = MPI_Irecv(host_kv[1 - cur], (int)in_bytes, MPI_BYTE, prev, s, comm,
                            &reqs[n_reqs++]);
            if (err == MPI_SUCCESS)
                err = MPI_Isend(host_kv[cur], (int)(kb + vb), MPI_BYTE, next, s, comm,
                                &reqs[n_reqs++]);
            if (err != MPI_SUCCESS) {
                st = fail_mpi(err, "MPI_Irecv/MPI_Isend");
                break;
            }
            local.bytes_sent += (int64_t)(kb + vb);
        }
        int64_t k0 = desc->kv_start;
        for (int jj = 0; jj < j; jj++)
            k0 += lens[2 * jj + 1];
        cl_event ev = NULL;
        const double t0 = now();
        if (NQ > 0 && block_visible(&d, q0, NQ, k0, m)) {
            /* the send only reads host_kv[cur]; the device gets its own copy */
            cl_int ce = CL_SUCCESS;
            if (kb)
                ce = clEnqueueWriteBuffer(dev.queue, dev.k, CL_TRUE, 0, kb, host_kv[cur], 0, NULL,
                                          NULL);
            if (ce == CL_SUCCESS && vb)
                ce = clEnqueueWriteBuffer(dev.queue, dev.v, CL_TRUE, 0, vb, host_kv[cur] + kb, 0,
                                          NULL, NULL);
            if (ce != CL_SUCCESS) {
                st = fail_cl(ce, "clEnqueueWriteBuffer(K/V block)");
                break;
            }
            clattn_tensor tk = clattn_tensor_buffer(dev.k, B, HKV, m, DK);
            clattn_tensor tv = clattn_tensor_buffer(dev.v, B, HKV, m, DV);
            tk.dtype = k->dtype;
            tv.dtype = v->dtype;
            clattn_attention_desc db = d;
            db.kv_start = k0;
            const bool first = local.blocks_computed == 0;
            db.lse = first ? &tl_acc : &tl_part;
            cl_event att = NULL;
            st = clattn_attention_enqueue(ctx, &db, &tq, &tk, &tv, first ? &to_acc : &to_part, 0,
                                          NULL, &att);
            if (st != CLATTN_SUCCESS) {
                st = fail_ctx(ctx, st, "clattn_attention_enqueue(block)");
                break;
            }
            if (first) {
                ev = att;
            } else {
                const clattn_tensor po[2] = {to_acc, to_part}, pl[2] = {tl_acc, tl_part};
                st = clattn_merge_enqueue(ctx, 2, po, pl, &to_acc, &tl_acc, 1, &att, &ev);
                clReleaseEvent(att);
                if (st != CLATTN_SUCCESS) {
                    st = fail_ctx(ctx, st, "clattn_merge_enqueue");
                    break;
                }
            }
            clFlush(dev.queue);
            local.blocks_computed++;
        }
        st = wait_both(ev, reqs, n_reqs, t0, &local.compute_s, &local.comm_wait_s);
        if (ev)
            clReleaseEvent(ev);
        cur = 1 - cur;
    }
    if (st == CLATTN_SUCCESS) {
        if (local.blocks_computed == 0) {
            for (size_t i = 0; i < n_o; i++)
                acc_o[i] = 0.0f;
            for (size_t i = 0; i < rows; i++)
                acc_l[i] = -INFINITY;
        } else {
            cl_int ce = clEnqueueReadBuffer(dev.queue, dev.o_acc, CL_TRUE, 0, n_o * 4, acc_o, 0,
                                            NULL, NULL);
            if (ce != CL_SUCCESS)
                st = fail_cl(ce, "clEnqueueReadBuffer(O)");
            else if ((ce = clEnqueueReadBuffer(dev.queue, dev.l_acc, CL_TRUE, 0, rows * lse_es,
                                               acc_l, 0, NULL, NULL)) != CL_SUCCESS)
                st = fail_cl(ce, "clEnqueueReadBuffer(LSE)");
            else if (!lse64) /* float32 LSEs in the first half: widen, last first */
                for (size_t i = rows; i-- > 0;)
                    acc_l[i] = widen_at(acc_l, i);
        }
    }
    if (st == CLATTN_SUCCESS && NQ > 0) {
        fold_sinks(desc, B, HQ, NQ, DV, acc_o, acc_l);
        st = deliver(desc, o, acc_o, acc_l);
    }
out:
    if (dev.queue)
        clFinish(dev.queue);
    ring_dev_release(&dev);
    free(host_kv[0]);
    free(host_kv[1]);
    free(qpack);
    free(acc_o);
    free(acc_l);
    free(lens);
    local.total_s = now() - t_begin;
    if (stats)
        *stats = local;
    return st;
}

/* ------------------------------------------------------------------ split-KV decoding */

clattn_status clattn_mpi_split_kv_attention(clattn_context *ctx, MPI_Comm comm,
                                            const clattn_attention_desc *desc,
                                            const clattn_tensor *q, const clattn_tensor *k,
                                            const clattn_tensor *v, const clattn_tensor *o,
                                            clattn_mpi_stats *stats)
{
    g_message[0] = '\0';
    const double t_begin = now();
    clattn_mpi_stats local;
    memset(&local, 0, sizeof local);
    local.steps = 1;
    clattn_status st = common_checks(ctx, comm, desc, q, k, v, o);
    if (st != CLATTN_SUCCESS)
        return st;
    int P = 1, r = 0, err;
    MPI_Comm_size(comm, &P);
    MPI_Comm_rank(comm, &r);
    int64_t *lens = malloc(sizeof *lens * (size_t)P);
    if (!lens)
        return fail(CLATTN_ERROR_OUT_OF_HOST_MEMORY, "lens");
    const int64_t mine = k->shape[2];
    double t0 = now();
    err = MPI_Allgather(&mine, 1, MPI_INT64_T, lens, 1, MPI_INT64_T, comm);
    local.comm_wait_s += now() - t0;
    if (err != MPI_SUCCESS) {
        free(lens);
        return fail_mpi(err, "MPI_Allgather(lengths)");
    }
    int64_t k0 = desc->kv_start, n_kv_total = 0;
    for (int j = 0; j < P; j++) {
        if (j < r)
            k0 += lens[j];
        n_kv_total += lens[j];
    }
    free(lens);
    const int64_t B = q->shape[0], HQ = q->shape[1], NQ = q->shape[2], DV = v->shape[3];
    const size_t rows = (size_t)(B * HQ * NQ), n_o = rows * (size_t)DV;
    clattn_attention_desc d = *desc;
    d.sinks = NULL; /* folded into the merged rows at the end */
    if (d.mask == CLATTN_MASK_CAUSAL_BOTTOM_RIGHT) {
        d.mask = CLATTN_MASK_CAUSAL_TOP_LEFT;
        d.q_start += n_kv_total - NQ;
    }
    d.kv_start = k0;
    /* the part's LSE in float64 where the device has it (far ALiBi keys, R17) */
    float *part_o = malloc((n_o + 1) * sizeof *part_o);
    double *part_l = malloc((rows + 1) * sizeof *part_l), *max_l = malloc((rows + 1) * 8);
    double *sums = malloc((n_o + rows + 1) * sizeof *sums),
           *tot = malloc((n_o + rows + 1) * sizeof *tot);
    if (!part_o || !part_l || !max_l || !sums || !tot) {
        st = fail(CLATTN_ERROR_OUT_OF_HOST_MEMORY, "split-KV buffers");
        goto out;
    }
    clattn_tensor to = clattn_tensor_host(part_o, B, HQ, NQ, DV);
    clattn_tensor tl = clattn_tensor_host(part_l, B, HQ, NQ, 1);
    tl.dtype = ctx->has_fp64 ? CLATTN_FLOAT64 : CLATTN_FLOAT32;
    t0 = now();
    if (NQ > 0 && block_visible(&d, d.q_start, NQ, k0, mine)) {
        d.lse = &tl;
        st = clattn_attention(ctx, &d, q, k, v, &to);
        if (st != CLATTN_SUCCESS) {
            st = fail_ctx(ctx, st, "clattn_attention(local block)");
            /* the others are in the collectives below: join them with −∞ rows */
        } else if (tl.dtype == CLATTN_FLOAT32) { /* widen in place, last first */
            for (size_t i = rows; i-- > 0;)
                part_l[i] = widen_at(part_l, i);
        }
        local.blocks_computed = 1;
    }
    local.compute_s = now() - t0;
    if (local.blocks_computed == 0 || st != CLATTN_SUCCESS) {
        for (size_t i = 0; i < n_o; i++)
            part_o[i] = 0.0f;
        for (size_t i = 0; i < rows; i++)
            part_l[i] = -INFINITY;
    }
    t0 = now();
    err = MPI_Allreduce(part_l, max_l, (int)rows, MPI_DOUBLE, MPI_MAX, comm);
    if (err != MPI_SUCCESS) {
        st = fail_mpi(err, "MPI_Allreduce(MAX of LSE)");
        goto out;
    }
    for (size_t i = 0; i < rows; i++) {
        const double w = isinf(part_l[i]) && part_l[i] < 0 ? 0.0 : exp(part_l[i] - max_l[i]);
        for (int64_t j = 0; j < DV; j++)
            sums[i * (size_t)DV + (size_t)j] = w * part_o[i * (size_t)DV + (size_t)j];
        sums[n_o + i] = w;
    }
    err = MPI_Allreduce(sums, tot, (int)(n_o + rows), MPI_DOUBLE, MPI_SUM, comm);
    local.comm_wait_s += now() - t0;
    local.bytes_sent = (int64_t)(rows * 8 + (n_o + rows) * 8);
    if (err != MPI_SUCCESS) {
        st = fail_mpi(err, "MPI_Allreduce(SUM of weighted partials)");
        goto out;
    }
    if (st != CLATTN_SUCCESS)
        goto out;
    for (size_t i = 0; i < rows; i++) {
        const double z = tot[n_o + i];
        for (int64_t j = 0; j < DV; j++)
            part_o[i * (size_t)DV + (size_t)j] =
                z > 0 ? (float)(tot[i * (size_t)DV + (size_t)j] / z) : 0.0f;
        part_l[i] = z > 0 ? max_l[i] + log(z) : -INFINITY;
    }
    if (NQ > 0) {
        fold_sinks(desc, B, HQ, NQ, DV, part_o, part_l);
        st = deliver(desc, o, part_o, part_l);
    }
out:
    free(part_o);
    free(part_l);
    free(max_l);
    free(sums);
    free(tot);
    local.total_s = now() - t_begin;
    if (stats)
        *stats = local;
    return st;
}
