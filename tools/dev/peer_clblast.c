#define _POSIX_C_SOURCE 200809L
/* A peer for benchmarks only (not part of the library): attention as the three lines
 * S = Q·Kᵀ; W = softmax(S); O = W·V on the same OpenCL device as clattn, with CLBlast's
 * strided-batched SGEMM for both products and clattn's softmax stage in between.
 * Checks its output against clattn's fused kernel before timing.
 *
 * Usage: clattn_peer_clblast b h n_q n_kv d_k d_v [reps]
 * Prints one JSON object: {"peer": "clblast-sgemm", "ms": median wall ms, ...}. */
#include <clattn.h>
#include <clblast_c.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static double now_ms(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return 1e3 * (double)t.tv_sec + 1e-6 * (double)t.tv_nsec;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static cl_mem upload(cl_context c, cl_command_queue q, const float *host, size_t n)
{
    cl_int err;
    cl_mem m = clCreateBuffer(c, CL_MEM_READ_WRITE, n * sizeof(float), NULL, &err);
    if (err == CL_SUCCESS && host)
        err = clEnqueueWriteBuffer(q, m, CL_TRUE, 0, n * sizeof(float), host, 0, NULL, NULL);
    return err == CL_SUCCESS ? m : NULL;
}

int main(int argc, char **argv)
{
    if (argc < 7) {
        fprintf(stderr, "usage: %s b h n_q n_kv d_k d_v [reps]\n", argv[0]);
        return 2;
    }
    const size_t b = strtoul(argv[1], NULL, 10), h = strtoul(argv[2], NULL, 10),
                 n_q = strtoul(argv[3], NULL, 10), n_kv = strtoul(argv[4], NULL, 10),
                 d_k = strtoul(argv[5], NULL, 10), d_v = strtoul(argv[6], NULL, 10);
    const int reps = argc > 7 ? atoi(argv[7]) : 5;
    if (!b || !h || !n_q || !n_kv || !d_k || !d_v || reps < 1 || reps > 100)
        return fprintf(stderr, "bad arguments\n"), 2;
    const size_t heads = b * h, nq = heads * n_q * d_k, nk = heads * n_kv * d_k,
                 nv = heads * n_kv * d_v, no = heads * n_q * d_v, ns = heads * n_q * n_kv;

    clattn_context *ctx;
    if (clattn_context_create(NULL, &ctx) != CLATTN_SUCCESS)
        return fprintf(stderr, "%s\n", clattn_last_error_message(NULL)), 1;
    cl_context c;
    cl_command_queue queue;
    clattn_context_get_cl(ctx, &c, NULL, &queue);
    float *host = malloc((nq + nk + nv) * sizeof(float));
    float *o_peer = malloc(no * sizeof(float)), *o_ref = malloc(no * sizeof(float));
    if (!host || !o_peer || !o_ref)
        return fprintf(stderr, "out of memory\n"), 1;
    unsigned seed = 12345;
    for (size_t i = 0; i < nq + nk + nv; i++) {
        seed = seed * 1664525u + 1013904223u;
        host[i] = (float)(seed >> 8) / 8388608.0f - 1.0f;
    }
    cl_mem mq = upload(c, queue, host, nq), mk = upload(c, queue, host + nq, nk),
           mv = upload(c, queue, host + nq + nk, nv), ms = upload(c, queue, NULL, ns),
           mo = upload(c, queue, NULL, no), mr = upload(c, queue, NULL, no);
    if (!mq || !mk || !mv || !ms || !mo || !mr)
        return fprintf(stderr, "cannot allocate device buffers\n"), 1;
    const float scale = 1.0f / sqrtf((float)d_k);
    clattn_tensor s = clattn_tensor_buffer(ms, (int64_t)b, (int64_t)h, (int64_t)n_q, (int64_t)n_kv);

    double times[100];
    for (int r = -1; r < reps; r++) { /* one warm-up run (CLBlast compiles its kernels) */
        const double t0 = now_ms();
        CLBlastStatusCode st = CLBlastSgemmStridedBatched(
            CLBlastLayoutRowMajor, CLBlastTransposeNo, CLBlastTransposeYes, n_q, n_kv, d_k, scale,
            mq, 0, d_k, n_q * d_k, mk, 0, d_k, n_kv * d_k, 0.0f, ms, 0, n_kv, n_q * n_kv, heads,
            &queue, NULL);
        if (st == CLBlastSuccess &&
            clattn_softmax_enqueue(ctx, NULL, &s, &s, 0, NULL, NULL) != CLATTN_SUCCESS)
            st = CLBlastInvalidValue;
        if (st == CLBlastSuccess)
            st = CLBlastSgemmStridedBatched(CLBlastLayoutRowMajor, CLBlastTransposeNo,
                                            CLBlastTransposeNo, n_q, d_v, n_kv, 1.0f, ms, 0, n_kv,
                                            n_q * n_kv, mv, 0, d_v, n_kv * d_v, 0.0f, mo, 0, d_v,
                                            n_q * d_v, heads, &queue, NULL);
        clFinish(queue);
        if (st != CLBlastSuccess)
            return fprintf(stderr, "CLBlast failed: %d\n", (int)st), 1;
        if (r >= 0)
            times[r] = now_ms() - t0;
    }
    /* check against clattn's fused kernel */
    clattn_tensor q = clattn_tensor_buffer(mq, (int64_t)b, (int64_t)h, (int64_t)n_q, (int64_t)d_k);
    clattn_tensor k = clattn_tensor_buffer(mk, (int64_t)b, (int64_t)h, (int64_t)n_kv, (int64_t)d_k);
    clattn_tensor v = clattn_tensor_buffer(mv, (int64_t)b, (int64_t)h, (int64_t)n_kv, (int64_t)d_v);
    clattn_tensor o = clattn_tensor_buffer(mr, (int64_t)b, (int64_t)h, (int64_t)n_q, (int64_t)d_v);
    clattn_attention_desc desc = clattn_attention_desc_default();
    if (clattn_attention_enqueue(ctx, &desc, &q, &k, &v, &o, 0, NULL, NULL) != CLATTN_SUCCESS)
        return fprintf(stderr, "clattn: %s\n", clattn_last_error_message(ctx)), 1;
    clEnqueueReadBuffer(queue, mo, CL_TRUE, 0, no * sizeof(float), o_peer, 0, NULL, NULL);
    clEnqueueReadBuffer(queue, mr, CL_TRUE, 0, no * sizeof(float), o_ref, 0, NULL, NULL);
    double worst = 0;
    for (size_t i = 0; i < no; i++) {
        const double e = fabs((double)o_peer[i] - (double)o_ref[i]);
        worst = e > worst || isnan(e) ? e : worst;
    }
    qsort(times, (size_t)reps, sizeof times[0], cmp_double);
    printf("{\"peer\": \"clblast-sgemm+clattn-softmax\", \"ms\": %.6g, \"min_ms\": %.6g, "
           "\"max_ms\": %.6g, \"max_abs_diff_vs_clattn\": %.3g}\n",
           times[reps / 2], times[0], times[reps - 1], worst);
    cl_mem all[] = {mq, mk, mv, ms, mo, mr};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        clReleaseMemObject(all[i]);
    free(host);
    free(o_peer);
    free(o_ref);
    clattn_context_release(ctx);
    return worst < 1e-4 ? 0 : 1;
}
