/* paged_read_cl.c — the OpenCL twin of paged_read_probe.c: how fast the default OpenCL
 * device reads a K/V cache contiguous or paged, with no attention arithmetic (dev-time
 * only; not part of the library or its tests).
 *
 * K and V: 8 KV heads × 32768 keys × 128 floats each (128 MiB apiece). Contiguous: head hk's
 * rows at hk · 32768. Paged: pages of PS keys in the pool layout [num_pages, h_kv, PS, d]
 * that `clattn bench`'s pageN shapes use, the sequence's pages shuffled (seed 7). Work-item
 * (head group, split) sums its split's keys of NH heads, page by page and the NH heads of a
 * page one after the other (decode.cl's order), K and V row by row (two streams), in
 * float16 vectors, with no software prefetch. Variants: contiguous NH 1 × 4 splits (32
 * work-items), paged NH 1 × 4, NH 4 × 16, NH 8 × 32. Each of 15 rounds times every variant
 * (median of 5 runs); the ratios to the contiguous variant are taken within a round. The
 * prefetch variants fetch the next piece in reading order (the next head of the page, or
 * the next page's first head) row by row next to the current piece's rows, as decode.cl
 * does one head-step ahead (pf 1: every row; pf N > 1: the first N rows only, to start the
 * hardware prefetcher on the next piece early).
 *
 * Build and run:
 *   gcc -O2 tools/dev/paged_read_cl.c -o /tmp/paged_read_cl -lOpenCL
 *   /tmp/paged_read_cl 16 && /tmp/paged_read_cl 256      (the argument: PS)
 *   /tmp/paged_read_cl 16 huge     (K and V in host memory advised for transparent huge
 *                                   pages, MADV_HUGEPAGE, used in place: CL_MEM_USE_HOST_PTR)
 */
#define _DEFAULT_SOURCE /* madvise */
#define CL_TARGET_OPENCL_VERSION 120
#include <CL/cl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

static const char *source =
    "#define PF(a) __builtin_prefetch((const void *)(size_t)(a))\n"
    "__kernel void rd(__global const float16 *k, __global const float16 *v,\n"
    "                 __global const int *table, int paged, int ps, int nh, int splits,\n"
    "                 int pf, __global float *out)\n"
    "{\n"
    "    const int x = get_global_id(0), hg = x / splits, s = x % splits;\n"
    "    const long n = 32768, per = n / splits, j0 = s * per;\n"
    "    float16 a = 0.0f, b = 0.0f;\n"
    "    for (long j = j0; j < j0 + per; j += ps)\n"
    "        for (int hh = 0; hh < nh; hh++) {\n"
    "            const long hk = hg * nh + hh;\n"
    "            const long row = paged ? ((long)table[j / ps] * 8 + hk) * ps : hk * n + j;\n"
    "            /* pf: the next piece in reading order, row by row next to this one's */\n"
    "            const long jn = hh + 1 < nh ? j : j + ps, hn = hh + 1 < nh ? hk + 1 : hg * nh;\n"
    "            const long next = jn >= j0 + per ? -1\n"
    "                              : paged ? ((long)table[jn / ps] * 8 + hn) * ps : hn * n + jn;\n"
    "            for (long t = 0; t < ps * 8; t += 8) {\n"
    "                if (pf && next >= 0 && (pf == 1 || t < 8 * pf))\n"
    "                    for (int e = 0; e < 8; e++) {\n"
    "                        PF(k + next * 8 + t + e);\n"
    "                        PF(v + next * 8 + t + e);\n"
    "                    }\n"
    "                for (int e = 0; e < 8; e++)\n"
    "                    a += k[row * 8 + t + e];\n"
    "                for (int e = 0; e < 8; e++)\n"
    "                    b += v[row * 8 + t + e];\n"
    "            }\n"
    "        }\n"
    "    const float16 c = a + b;\n"
    "    out[x] = c.s0 + c.s5 + c.sf;\n"
    "}\n";

enum { ROUNDS = 15, RUNS = 5, VARIANTS = 9 };

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static int by_value(const void *a, const void *b)
{
    const double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *x, int n)
{
    qsort(x, (size_t)n, sizeof *x, by_value);
    return x[n / 2];
}

int main(int argc, char **argv)
{
    const int ps = argc > 1 ? atoi(argv[1]) : 16;
    const int huge = argc > 2 && strcmp(argv[2], "huge") == 0;
    if (ps < 1 || 1024 % ps != 0) { /* whole pages in every split (32 splits of 1024) */
        fprintf(stderr, "paged_read_cl: the page size must divide 1024\n");
        return 2;
    }
    cl_platform_id platform;
    cl_device_id dev;
    cl_int err = clGetPlatformIDs(1, &platform, NULL);
    if (err == CL_SUCCESS)
        err = clGetDeviceIDs(platform, CL_DEVICE_TYPE_ALL, 1, &dev, NULL);
    if (err != CL_SUCCESS) {
        fprintf(stderr, "paged_read_cl: no OpenCL device (%d)\n", err);
        return 1;
    }
    cl_context ctx = clCreateContext(NULL, 1, &dev, NULL, NULL, &err);
    cl_command_queue queue = clCreateCommandQueue(ctx, dev, 0, &err);
    cl_program prog = clCreateProgramWithSource(ctx, 1, &source, NULL, &err);
    if (clBuildProgram(prog, 1, &dev, "", NULL, NULL) != CL_SUCCESS) {
        fprintf(stderr, "paged_read_cl: the kernel did not build\n");
        return 1;
    }
    const size_t bytes = (size_t)128 << 20;
    const int pages = 32768 / ps;
    int *table = malloc(sizeof(int) * (size_t)pages);
    if (!table)
        return 1;
    for (int i = 0; i < pages; i++)
        table[i] = i;
    srand(7);
    for (int i = pages - 1; i > 0; i--) {
        const int j = rand() % (i + 1), t = table[i];
        table[i] = table[j];
        table[j] = t;
    }
    const float one = 1.0f;
    void *hk = NULL, *hv = NULL; /* "huge": K and V in host memory advised for huge pages */
    if (huge) {
        if (posix_memalign(&hk, (size_t)2 << 20, bytes) ||
            posix_memalign(&hv, (size_t)2 << 20, bytes))
            return 1;
        madvise(hk, bytes, MADV_HUGEPAGE);
        madvise(hv, bytes, MADV_HUGEPAGE);
        memset(hk, 0, bytes);
        memset(hv, 0, bytes);
    }
    const cl_mem_flags flags = CL_MEM_READ_ONLY | (huge ? CL_MEM_USE_HOST_PTR : 0);
    cl_mem k = clCreateBuffer(ctx, flags, bytes, hk, &err);
    cl_mem v = clCreateBuffer(ctx, flags, bytes, hv, &err);
    cl_mem out = clCreateBuffer(ctx, CL_MEM_WRITE_ONLY, 4096, NULL, &err);
    cl_mem tab = clCreateBuffer(ctx, CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR,
                                sizeof(int) * (size_t)pages, table, &err);
    clEnqueueFillBuffer(queue, k, &one, sizeof one, 0, bytes, 0, NULL, NULL);
    clEnqueueFillBuffer(queue, v, &one, sizeof one, 0, bytes, 0, NULL, NULL);
    clFinish(queue);
    cl_kernel kern = clCreateKernel(prog, "rd", &err);
    if (err != CL_SUCCESS) {
        fprintf(stderr, "paged_read_cl: no kernel (%d)\n", err);
        return 1;
    }
    const struct {
        cl_int paged, nh, splits, pf;
        const char *name;
    } var[VARIANTS] = {
        {0, 1, 4, 0, "contiguous, 1 head x 4 splits"}, {1, 1, 4, 0, "paged, 1 head x 4 splits"},
        {1, 4, 16, 0, "paged, 4 heads x 16 splits"},   {1, 8, 32, 0, "paged, 8 heads x 32 splits"},
        {0, 1, 4, 1, "contiguous, 1 head, prefetch"},  {1, 1, 4, 1, "paged, 1 head, prefetch"},
        {1, 4, 16, 1, "paged, 4 heads, prefetch"},     {1, 1, 4, 4, "paged, 1 head, 4 rows ahead"},
        {1, 4, 16, 4, "paged, 4 heads, 4 rows ahead"}};
    double ms[VARIANTS][ROUNDS];
    for (int round = 0; round < ROUNDS; round++)
        for (int w = 0; w < VARIANTS; w++) {
            clSetKernelArg(kern, 0, sizeof k, &k);
            clSetKernelArg(kern, 1, sizeof v, &v);
            clSetKernelArg(kern, 2, sizeof tab, &tab);
            clSetKernelArg(kern, 3, sizeof(cl_int), &var[w].paged);
            clSetKernelArg(kern, 4, sizeof(cl_int), &ps);
            clSetKernelArg(kern, 5, sizeof(cl_int), &var[w].nh);
            clSetKernelArg(kern, 6, sizeof(cl_int), &var[w].splits);
            clSetKernelArg(kern, 7, sizeof(cl_int), &var[w].pf);
            clSetKernelArg(kern, 8, sizeof out, &out);
            const size_t global = (size_t)(8 / var[w].nh * var[w].splits), local = 1;
            double t[RUNS];
            for (int r = 0; r < RUNS; r++) {
                const double t0 = now();
                clEnqueueNDRangeKernel(queue, kern, 1, NULL, &global, &local, 0, NULL, NULL);
                clFinish(queue);
                t[r] = now() - t0;
            }
            ms[w][round] = 1e3 * median(t, RUNS);
        }
    for (int w = 0; w < VARIANTS; w++) {
        double ratio[ROUNDS], time[ROUNDS];
        for (int i = 0; i < ROUNDS; i++) {
            ratio[i] = ms[w][i] / ms[0][i];
            time[i] = ms[w][i];
        }
        const double m = median(time, ROUNDS), r = median(ratio, ROUNDS);
        printf("page %d, %-30s median %.2f ms (%.1f GB/s), / contiguous: median %.3f [%.2f-%.2f]\n",
               ps, var[w].name, m, 2e-6 * (double)bytes / m, r, ratio[0], ratio[ROUNDS - 1]);
    }
    free(table);
    return 0;
}
