#define _POSIX_C_SOURCE 200809L /* clock_gettime */
/* Dev-time: the cost of score / mask snippets and of block masks (docs/BENCHMARKS.md).
 * Wall ms of one enqueued fused call and clFinish, variants alternating, median of 9:
 *   dense            no mask
 *   causal           the built-in causal mask
 *   causal mod       causal as a mask_mod, every tile evaluated
 *   causal mod+bm    causal as a mask_mod with its block mask
 *   docs mod         8 documents of n/8 (causal within each) as a mask_mod
 *   docs mod+bm      … with its block mask
 * cc -O2 -Iinclude tools/dev/mods_bench.c -o /tmp/mods_bench -Lbuild -lclattn \
 *    -lOpenCL -lm -Wl,-rpath,$PWD/build && /tmp/mods_bench b h n d */
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
enum { V = 6, R = 9 };
int main(int argc, char **argv)
{
    if (argc < 5)
        return 2;
    long b = atol(argv[1]), h = atol(argv[2]), n = atol(argv[3]), d = atol(argv[4]);
    clattn_context *ctx;
    if (clattn_context_create(NULL, &ctx) != CLATTN_SUCCESS)
        return 1;
    cl_context c;
    cl_command_queue qu;
    clattn_context_get_cl(ctx, &c, NULL, &qu);
    size_t ne = (size_t)(b * h * n * d);
    float *x = malloc(sizeof(float) * ne);
    for (size_t i = 0; i < ne; i++)
        x[i] = (float)rand() / RAND_MAX - 0.5f;
    cl_int e;
    cl_mem m[4];
    for (int i = 0; i < 4; i++)
        m[i] = clCreateBuffer(c, CL_MEM_READ_WRITE | CL_MEM_COPY_HOST_PTR, ne * 4, x, &e);
    clattn_tensor tq = clattn_tensor_buffer(m[0], b, h, n, d),
                  tk = clattn_tensor_buffer(m[1], b, h, n, d),
                  tv = clattn_tensor_buffer(m[2], b, h, n, d),
                  to = clattn_tensor_buffer(m[3], b, h, n, d);
    char docs[256];
    snprintf(docs, sizeof docs,
             "bool clattn_mask_mod(int b, int h, long q, long k)\n{\n    return q / %ld == k / %ld "
             "&& k <= q;\n}\n",
             n / 8, n / 8);
    const char *causal =
        "bool clattn_mask_mod(int b, int h, long q, long k)\n{\n    return k <= q;\n}\n";
    clattn_mods mods[V] = {{0}};
    const char *names[V] = {"dense",         "causal",   "causal mod",
                            "causal mod+bm", "docs mod", "docs mod+bm"};
    clattn_attention_desc de[V];
    for (int v = 0; v < V; v++) {
        de[v] = clattn_attention_desc_default();
        de[v].algorithm = CLATTN_ALGORITHM_FUSED;
        if (v == 1)
            de[v].mask = CLATTN_MASK_CAUSAL_TOP_LEFT;
        if (v >= 2) {
            mods[v].mask_mod = v < 4 ? causal : docs;
            de[v].mods = &mods[v];
        }
        if (v == 3 || v == 5) {
            clattn_block_mask *bm;
            double t0 = now();
            if (clattn_block_mask_create(ctx, &de[v], 1, 1, n, n, &bm) != CLATTN_SUCCESS) {
                fprintf(stderr, "%s\n", clattn_last_error_message(ctx));
                return 1;
            }
            printf("%s: block mask built in %.1f ms (incl. the program build)\n", names[v],
                   now() - t0);
            mods[v].block_mask = bm;
        }
    }
    double t[V][R];
    for (int r = 0; r < R; r++)
        for (int v = 0; v < V; v++) {
            if (r == 0) { /* warm: build */
                clattn_attention_enqueue(ctx, &de[v], &tq, &tk, &tv, &to, 0, NULL, NULL);
                clFinish(qu);
            }
            double t0 = now();
            if (clattn_attention_enqueue(ctx, &de[v], &tq, &tk, &tv, &to, 0, NULL, NULL) !=
                CLATTN_SUCCESS) {
                fprintf(stderr, "%s\n", clattn_last_error_message(ctx));
                return 1;
            }
            clFinish(qu);
            t[v][r] = now() - t0;
        }
    printf("b=%ld h=%ld n=%ld d=%ld, fused, median of %d (wall ms incl. launch):\n", b, h, n, d, R);
    for (int v = 0; v < V; v++) {
        qsort(t[v], R, sizeof(double), cmp);
        printf("  %-14s %9.2f ms  (%.2fx dense, %.2fx built-in causal)\n", names[v], t[v][R / 2],
               t[v][R / 2] / t[0][R / 2], t[v][R / 2] / t[1][R / 2]);
    }
    return 0;
}
