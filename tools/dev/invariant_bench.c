#define _POSIX_C_SOURCE 200809L /* clock_gettime */
/* Dev-time: the cost of desc.batch_invariant (docs/BENCHMARKS.md). Wall ms of one
 * enqueued call and clFinish, with and without the flag, alternating, median of 15.
 * cc -O2 -Iinclude tools/dev/invariant_bench.c -o /tmp/invariant_bench -Lbuild -lclattn \
 *    -lOpenCL -lm -Wl,-rpath,$PWD/build && /tmp/invariant_bench b h_q h_kv n_q n_kv d */
#include <clattn.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}
static int cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}
int main(int argc, char **argv)
{
    if (argc != 7) {
        fprintf(stderr, "usage: %s b h_q h_kv n_q n_kv d\n", argv[0]);
        return 2;
    }
    long b = atol(argv[1]), hq = atol(argv[2]), hk = atol(argv[3]), nq = atol(argv[4]),
         nk = atol(argv[5]), d = atol(argv[6]);
    clattn_context *ctx;
    clattn_context_create(NULL, &ctx);
    cl_context c;
    cl_command_queue qu;
    clattn_context_get_cl(ctx, &c, NULL, &qu);
    size_t nqe = b * hq * nq * d, nke = b * hk * nk * d;
    float *h = malloc(sizeof(float) * (nke > nqe ? nke : nqe));
    for (size_t i = 0; i < (nke > nqe ? nke : nqe); i++)
        h[i] = (float)rand() / RAND_MAX - 0.5f;
    cl_int e;
    cl_mem mq = clCreateBuffer(c, CL_MEM_READ_WRITE | CL_MEM_COPY_HOST_PTR, nqe * 4, h, &e);
    cl_mem mk = clCreateBuffer(c, CL_MEM_READ_WRITE | CL_MEM_COPY_HOST_PTR, nke * 4, h, &e);
    cl_mem mv = clCreateBuffer(c, CL_MEM_READ_WRITE | CL_MEM_COPY_HOST_PTR, nke * 4, h, &e);
    cl_mem mo = clCreateBuffer(c, CL_MEM_READ_WRITE, nqe * 4, NULL, &e);
    clattn_tensor tq = clattn_tensor_buffer(mq, b, hq, nq, d),
                  tk = clattn_tensor_buffer(mk, b, hk, nk, d),
                  tv = clattn_tensor_buffer(mv, b, hk, nk, d),
                  to = clattn_tensor_buffer(mo, b, hq, nq, d);
    double t[2][15];
    for (int r = 0; r < 15; r++)
        for (int m = 0; m < 2; m++) {
            clattn_attention_desc de = clattn_attention_desc_default();
            de.batch_invariant = m;
            if (r == 0) {
                clattn_plan p;
                clattn_attention_plan(ctx, &de, &tq, &tk, &tv, &to, &p);
                printf("%s: %s\n", m ? "invariant" : "default", p.kernels);
            }
            clattn_attention_enqueue(ctx, &de, &tq, &tk, &tv, &to, 0, NULL, NULL);
            clFinish(qu);
            double t0 = now();
            clattn_attention_enqueue(ctx, &de, &tq, &tk, &tv, &to, 0, NULL, NULL);
            clFinish(qu);
            t[m][r] = now() - t0;
        }
    qsort(t[0], 15, sizeof(double), cmp);
    qsort(t[1], 15, sizeof(double), cmp);
    printf("%ld,%ld,%ld,%ld,%ld,%ld: default %.2f ms, batch_invariant %.2f ms (median of 15, wall "
           "incl. launch), ratio %.2f\n",
           b, hq, hk, nq, nk, d, t[0][7], t[1][7], t[1][7] / t[0][7]);
    return 0;
}
