/* A decode loop with continuous batching over a paged KV cache, as an inference engine
 * runs attention (one layer, random weights): sequences of different prompt lengths join
 * and leave; each joining sequence's prompt is one prefill call, and each step decodes
 * one token for every running sequence in one call. Every call appends the step's K and
 * V rows into the cache's pages with rotary embeddings (desc.k_new, desc.v_new,
 * desc.rotary) and attends through the block table (desc.paged) with the cache's
 * lengths (desc.kv_lens = cache_seqlens), on device buffers made once and reused (the
 * first call of each shape builds its programs; an engine would call
 * clattn_attention_plan for its shapes at start-up).
 * Pages come from a free list and go back to it when a sequence leaves, so later
 * sequences reuse pages in a shuffled order.
 *
 * Each call is checked against clattn_reference_attention (float64), which runs the same
 * call on host copies of the pools: O within 1e-4 + 1e-4·|O|. Prints one line per call
 * and exits 1 on a mismatch or a failed call.
 *
 * With --time it also prints clattn's share of a decode step's wall time (medians over
 * the 23 decode steps, CLOCK_MONOTONIC): the step from making its rows to reading O back,
 * without the reference check (which an engine does not run), and within it clattn's
 * part, clattn_attention_enqueue's return plus the wait for the call's event. Each is a
 * median of its own, so the parts need not add up to the whole.
 *
 *   ./serve_paged [--time] [DEVICE]   (DEVICE: "P:D" or part of its name; default: the
 *                                      first GPU, else the first device; exit 2 on other
 *                                      arguments)
 */
#define _POSIX_C_SOURCE 200809L /* clock_gettime */
#include <clattn.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

enum { H_Q = 8, H_KV = 2, D = 64, PAGE = 16, PAGES = 48, SLOTS = 4, MAX_PAGES = 12 };
enum { MAX_ROWS = 64 }; /* tokens of one call, all sequences: the step buffers' size */

/* What stays on the device across calls: the K and V pools and the buffers each call
 * writes this step's Q, new K and V rows into and reads O from (an engine would also
 * keep the lengths and the block table there: desc.kv_lens_buffer, block_table_buffer). */
typedef struct engine {
    clattn_context *ctx;
    cl_command_queue queue;
    cl_mem kpool, vpool, q, k_new, v_new, o;
    float *hk, *hv; /* the reference's host copies of the pools */
} engine;

/* a small deterministic generator: values in [-1, 1) */
static float gen(unsigned *s)
{
    *s = *s * 1664525u + 1013904223u;
    return (float)(*s >> 8) / 8388608.0f - 1.0f;
}

typedef struct seq {
    int id, active, len, decoded; /* len: tokens in the cache (cache_seqlens) */
    int32_t pages[MAX_PAGES];
} seq;

static int free_pages[PAGES], n_free;

/* --time: each decode step's times in seconds (step: without the reference check) */
enum { MAX_STEPS = 64 };
static double t_step[MAX_STEPS], t_enqueue[MAX_STEPS], t_wait[MAX_STEPS], t_check[MAX_STEPS];
static int n_timed;

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int take_pages(seq *s, int upto)
{
    for (int p = (s->len + PAGE - 1) / PAGE; p * PAGE < upto; p++) {
        if (n_free == 0 || p >= MAX_PAGES)
            return -1;
        s->pages[p] = free_pages[--n_free];
    }
    return 0;
}

/* One call for the batch `seqs` (n_q new tokens each): device and reference, compared;
 * `decode`: a decode step (timed by --time), not a prefill. */
static int step(const engine *e, seq **seqs, int b, int n_q, int decode, unsigned *rng,
                const char *what)
{
    clattn_context *ctx = e->ctx;
    float *hk = e->hk, *hv = e->hv;
    const size_t nq = (size_t)b * H_Q * n_q * D, nn = (size_t)b * H_KV * n_q * D;
    float *q = malloc(nq * 4), *kn = malloc(nn * 4), *vn = malloc(nn * 4), *o = malloc(nq * 4),
          *ro = malloc(nq * 4);
    int32_t table[SLOTS * MAX_PAGES], lens[SLOTS];
    int rc = 1;
    const double t0 = now();
    if (!q || !kn || !vn || !o || !ro)
        goto done;
    for (size_t i = 0; i < nq; i++)
        q[i] = gen(rng);
    for (size_t i = 0; i < nn; i++)
        kn[i] = gen(rng), vn[i] = gen(rng);
    for (int i = 0; i < b; i++) {
        if (take_pages(seqs[i], seqs[i]->len + n_q) != 0) {
            fprintf(stderr, "serve_paged: out of pages\n");
            goto done;
        }
        memcpy(table + i * MAX_PAGES, seqs[i]->pages, sizeof seqs[i]->pages);
        lens[i] = seqs[i]->len;
    }
    /* the pools: [pages, page_size, h_kv, d] (FlashAttention's), as clattn views */
    const int64_t pool_st[4] = {PAGE * H_KV * D, D, H_KV * D, 1};
    clattn_tensor tk = clattn_tensor_buffer(e->kpool, PAGES, H_KV, PAGE, D),
                  tv = clattn_tensor_buffer(e->vpool, PAGES, H_KV, PAGE, D);
    memcpy(tk.strides, pool_st, sizeof pool_st);
    memcpy(tv.strides, pool_st, sizeof pool_st);
    /* this step's rows into the engine's buffers (in-order queue: before the call) */
    cl_mem bq = e->q, bkn = e->k_new, bvn = e->v_new, bo = e->o;
    if ((size_t)b * n_q > MAX_ROWS ||
        clEnqueueWriteBuffer(e->queue, bq, CL_FALSE, 0, nq * 4, q, 0, NULL, NULL) != CL_SUCCESS ||
        clEnqueueWriteBuffer(e->queue, bkn, CL_FALSE, 0, nn * 4, kn, 0, NULL, NULL) != CL_SUCCESS ||
        clEnqueueWriteBuffer(e->queue, bvn, CL_TRUE, 0, nn * 4, vn, 0, NULL, NULL) != CL_SUCCESS) {
        fprintf(stderr, "serve_paged: %s: cannot write the step's rows\n", what);
        goto done;
    }
    clattn_tensor tq = clattn_tensor_buffer(bq, b, H_Q, n_q, D),
                  to = clattn_tensor_buffer(bo, b, H_Q, n_q, D);
    clattn_tensor tkn = clattn_tensor_buffer(bkn, b, H_KV, n_q, D),
                  tvn = clattn_tensor_buffer(bvn, b, H_KV, n_q, D);
    const clattn_paged_kv pg = {table, NULL, MAX_PAGES};
    const clattn_rotary rot = {
        .dim = 0, .interleaved = 0, .base = 10000.0f}; /* Llama's layout over the whole head */
    clattn_attention_desc desc = clattn_attention_desc_default();
    desc.mask = CLATTN_MASK_CAUSAL_BOTTOM_RIGHT;
    desc.paged = &pg;
    desc.kv_lens = lens;
    desc.k_new = &tkn;
    desc.v_new = &tvn;
    desc.rotary = &rot;
    cl_event done = NULL;
    const double t1 = now();
    clattn_status st = clattn_attention_enqueue(ctx, &desc, &tq, &tk, &tv, &to, 0, NULL, &done);
    const double t2 = now();
    if (st == CLATTN_SUCCESS && clWaitForEvents(1, &done) != CL_SUCCESS)
        st = CLATTN_ERROR_OPENCL;
    const double t3 = now();
    if (st == CLATTN_SUCCESS &&
        clEnqueueReadBuffer(e->queue, bo, CL_TRUE, 0, nq * 4, o, 0, NULL, NULL) != CL_SUCCESS)
        st = CLATTN_ERROR_OPENCL;
    const double t4 = now();
    if (done)
        clReleaseEvent(done);
    /* the reference: the same call on the host copies of the pools */
    clattn_tensor rq = clattn_tensor_host(q, b, H_Q, n_q, D),
                  rout = clattn_tensor_host(ro, b, H_Q, n_q, D);
    clattn_tensor rkn = clattn_tensor_host(kn, b, H_KV, n_q, D),
                  rvn = clattn_tensor_host(vn, b, H_KV, n_q, D);
    clattn_tensor rk = clattn_tensor_host(hk, PAGES, H_KV, PAGE, D),
                  rv = clattn_tensor_host(hv, PAGES, H_KV, PAGE, D);
    memcpy(rk.strides, pool_st, sizeof pool_st);
    memcpy(rv.strides, pool_st, sizeof pool_st);
    desc.k_new = &rkn;
    desc.v_new = &rvn;
    clattn_status rst =
        st == CLATTN_SUCCESS ? clattn_reference_attention(&desc, &rq, &rk, &rv, &rout) : st;
    if (decode && n_timed < MAX_STEPS) {
        t_step[n_timed] = t4 - t0;
        t_enqueue[n_timed] = t2 - t1;
        t_wait[n_timed] = t3 - t2;
        t_check[n_timed++] = now() - t4;
    }
    if (st != CLATTN_SUCCESS || rst != CLATTN_SUCCESS) {
        fprintf(stderr, "serve_paged: %s: %s: %s\n", what, clattn_status_string(st ? st : rst),
                clattn_last_error_message(st ? ctx : NULL));
        goto done;
    }
    double worst = 0.0;
    for (size_t i = 0; i < nq; i++) {
        const double rel = fabs((double)o[i] - (double)ro[i]) / (1e-4 + 1e-4 * fabs((double)ro[i]));
        worst = rel > worst || isnan(rel) ? rel : worst;
    }
    printf("%-26s batch %d x %2d tokens, cache lengths", what, b, n_q);
    for (int i = 0; i < b; i++) {
        seqs[i]->len += n_q; /* the caller updates the lengths */
        printf(" %d:%d", seqs[i]->id, seqs[i]->len);
    }
    printf("; worst |O - reference| / tolerance %.3f\n", worst);
    rc = worst <= 1.0 ? 0 : 1;
    if (rc)
        fprintf(stderr, "serve_paged: %s: O differs from the reference\n", what);
done:
    free(q);
    free(kn);
    free(vn);
    free(o);
    free(ro);
    return rc;
}

static int by_value(const void *a, const void *b)
{
    const double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, by_value);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

int main(int argc, char **argv)
{
    int timed = 0;
    const char *device = NULL;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--time") == 0 && !timed)
            timed = 1;
        else if (argv[i][0] != '-' && argv[i][0] != '\0' && !device)
            device = argv[i];
        else {
            fprintf(stderr, "usage: serve_paged [--time] [DEVICE]   (unexpected '%s')\n", argv[i]);
            return 2;
        }
    }
    clattn_context_options opt = {0};
    opt.device = device;
    clattn_context *ctx = NULL;
    clattn_status st = clattn_context_create(&opt, &ctx);
    if (st != CLATTN_SUCCESS) {
        fprintf(stderr, "serve_paged: %s: %s\n", clattn_status_string(st),
                clattn_last_error_message(NULL));
        return 1;
    }
    cl_context cl_ctx;
    engine e = {ctx, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL};
    clattn_context_get_cl(ctx, &cl_ctx, NULL, &e.queue);
    const size_t pool = (size_t)PAGES * PAGE * H_KV * D, rows = (size_t)MAX_ROWS * H_Q * D;
    e.hk = calloc(pool, 4);
    e.hv = calloc(pool, 4);
    cl_int err;
    const cl_mem_flags rw = CL_MEM_READ_WRITE;
    e.kpool = e.hk ? clCreateBuffer(cl_ctx, rw | CL_MEM_COPY_HOST_PTR, pool * 4, e.hk, &err) : NULL;
    e.vpool = e.hv ? clCreateBuffer(cl_ctx, rw | CL_MEM_COPY_HOST_PTR, pool * 4, e.hv, &err) : NULL;
    e.q = clCreateBuffer(cl_ctx, CL_MEM_READ_ONLY, rows * 4, NULL, &err);
    e.k_new = clCreateBuffer(cl_ctx, CL_MEM_READ_ONLY, rows * 4, NULL, &err);
    e.v_new = clCreateBuffer(cl_ctx, CL_MEM_READ_ONLY, rows * 4, NULL, &err);
    e.o = clCreateBuffer(cl_ctx, CL_MEM_WRITE_ONLY, rows * 4, NULL, &err);
    n_free = 0;
    for (int p = PAGES - 1; p >= 0; p--)
        free_pages[n_free++] = (p * 17) % PAGES; /* a shuffled free list */
    /* sequences: id, prompt, tokens to decode, the step at which each joins */
    static const int plan[][4] = {{0, 20, 12, 0}, {1, 7, 20, 2},   {2, 33, 6, 4},
                                  {3, 1, 9, 8},   {4, 18, 10, 13}, {5, 45, 4, 15}};
    const int n_seqs = (int)(sizeof plan / sizeof plan[0]);
    seq seqs[6];
    memset(seqs, 0, sizeof seqs);
    unsigned rng = 12345u;
    int rc = (!e.kpool || !e.vpool || !e.q || !e.k_new || !e.v_new || !e.o) ? 1 : 0;
    for (int t = 0; rc == 0 && t < 40; t++) {
        /* joining sequences: their prompt in one prefill call each */
        for (int s = 0; rc == 0 && s < n_seqs; s++)
            if (plan[s][3] == t) {
                seqs[s].id = plan[s][0];
                seqs[s].active = 1;
                seq *one[1] = {&seqs[s]};
                char what[64];
                snprintf(what, sizeof what, "step %2d: prefill seq %d", t, s);
                rc = step(&e, one, 1, plan[s][1], 0, &rng, what);
            }
        /* one decode step of every running sequence, in one call */
        seq *run[SLOTS];
        int b = 0;
        for (int s = 0; s < n_seqs && b < SLOTS; s++)
            if (seqs[s].active)
                run[b++] = &seqs[s];
        if (rc == 0 && b > 0) {
            char what[64];
            snprintf(what, sizeof what, "step %2d: decode", t);
            rc = step(&e, run, b, 1, 1, &rng, what);
        }
        /* finished sequences leave and give their pages back */
        for (int i = 0; rc == 0 && i < b; i++)
            if (++run[i]->decoded >= plan[run[i] - seqs][2]) {
                run[i]->active = 0;
                for (int p = 0; p * PAGE < run[i]->len; p++)
                    free_pages[n_free++] = run[i]->pages[p];
                printf("step %2d: seq %d leaves (%d tokens)\n", t, run[i]->id, run[i]->len);
            }
    }
    cl_mem all[6] = {e.kpool, e.vpool, e.q, e.k_new, e.v_new, e.o};
    for (int i = 0; i < 6; i++)
        if (all[i])
            clReleaseMemObject(all[i]);
    free(e.hk);
    free(e.hv);
    clattn_context_release(ctx);
    if (timed && rc == 0 && n_timed > 0) {
        double clattn[MAX_STEPS];
        for (int i = 0; i < n_timed; i++)
            clattn[i] = t_enqueue[i] + t_wait[i];
        const double step_s = median(t_step, n_timed), clattn_s = median(clattn, n_timed);
        printf("serve_paged --time: %d decode steps, medians: a step %.0f us without the "
               "reference check, clattn %.0f us of it (%.0f %%: enqueue %.0f us, then its "
               "event %.0f us); the reference check %.0f us\n",
               n_timed, 1e6 * step_s, 1e6 * clattn_s, 100.0 * clattn_s / step_s,
               1e6 * median(t_enqueue, n_timed), 1e6 * median(t_wait, n_timed),
               1e6 * median(t_check, n_timed));
    }
    printf(rc == 0 ? "serve_paged: every call matched the reference\n" : "serve_paged: FAILED\n");
    return rc;
}
