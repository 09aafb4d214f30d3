#define _POSIX_C_SOURCE 200809L
#define _DEFAULT_SOURCE /* madvise's MADV_HUGEPAGE (glibc; Linux only, checked below) */
/* `clattn bench`: device and wall time of attention calls over a list of shapes, and
 * the device's f32 FMA peak as the ceiling they are compared with. The parsing of
 * --shapes and the timing of one case are shared with `clattn tune` (bench.h). */
#include "bench.h"
#include "cli.h"
#include "commands.h"
#include "progress.h"

#include <clattn.h>

#include <math.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

/* This machine's CPU as /proc/cpuinfo gives it (machines differ from run to run, so
 * every result carries it): model name, x86 family/model or ARM implementer/part,
 * the vector extensions that bound the FMA peak, and the logical CPU count. Empty
 * where /proc/cpuinfo is absent. */
static void host_cpu(char *out, size_t len)
{
    out[0] = '\0';
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (!f)
        return;
    char line[4096], model[128] = "", fam[16] = "", mod[16] = "", impl[16] = "", part[16] = "";
    char ext[96] = "";
    int cpus = 0;
    while (fgets(line, sizeof line, f)) {
        char *colon = strchr(line, ':');
        if (!colon)
            continue;
        char *val = colon + 1;
        while (*val == ' ' || *val == '\t')
            val++;
        val[strcspn(val, "\n")] = '\0';
        if (strncmp(line, "processor", 9) == 0)
            cpus++;
        else if (!model[0] && strncmp(line, "model name", 10) == 0)
            snprintf(model, sizeof model, "%s", val);
        else if (!fam[0] && strncmp(line, "cpu family", 10) == 0)
            snprintf(fam, sizeof fam, "%s", val);
        else if (!mod[0] && strncmp(line, "model\t", 6) == 0)
            snprintf(mod, sizeof mod, "%s", val);
        else if (!impl[0] && strncmp(line, "CPU implementer", 15) == 0)
            snprintf(impl, sizeof impl, "%s", val);
        else if (!part[0] && strncmp(line, "CPU part", 8) == 0)
            snprintf(part, sizeof part, "%s", val);
        else if (!ext[0] && (strncmp(line, "flags", 5) == 0 || strncmp(line, "Features", 8) == 0)) {
            static const char *const wanted[] = {"avx512f", "avx512_bf16", "amx_tile", "avx2",
                                                 "fma",     "asimd",       "sve",      "sve2"};
            for (size_t w = 0; w < sizeof wanted / sizeof wanted[0]; w++) {
                const size_t n = strlen(wanted[w]);
                for (const char *p = strstr(val, wanted[w]); p; p = strstr(p + 1, wanted[w]))
                    if ((p == val || p[-1] == ' ') && (p[n] == ' ' || p[n] == '\0')) {
                        const size_t at = strlen(ext);
                        snprintf(ext + at, sizeof ext - at, "%s%s", at ? " " : "", wanted[w]);
                        break;
                    }
            }
        }
    }
    fclose(f);
    if (fam[0])
        snprintf(out, len, "%s (family %s model %s; %s; %d CPUs)", model[0] ? model : "?", fam, mod,
                 ext[0] ? ext : "no avx2", cpus);
    else
        snprintf(out, len, "%s (implementer %s part %s; %s; %d CPUs)", model[0] ? model : "?",
                 impl[0] ? impl : "?", part[0] ? part : "?", ext[0] ? ext : "-", cpus);
}

static const char bench_usage[] =
    "Usage: clattn bench [--shapes LIST] [--reps N] [--warmup N] [--json] [--peak]\n"
    "                    [--quiet] [--huge-pages] [--device SPEC]\n"
    "\n"
    "Times attention on device buffers (the enqueue API) and prints, per case, the\n"
    "median and spread of the device time (OpenCL profiling events) and of the wall\n"
    "time, GFLOP/s counted as 2*(d_k + d_v) per query row and key it sees, per head\n"
    "(2*n_q*n_kv*(d_k + d_v) without a mask; causal masks and windows count the keys\n"
    "each row sees), GB/s of compulsory traffic (Q, K, V read and O written once; the\n"
    "unfused algorithm also makes 6 passes over the n_q x n_kv score matrix) and the\n"
    "device memory the call itself allocates (its workspace).\n"
    "\n"
    "Options:\n";
/* (in two parts: C99 compilers need only take string literals up to 4095 characters) */
static const char bench_usage_options[] =
    "  --shapes LIST   cases separated by ';', each\n"
    "                  b,h_q,h_kv,n_q,n_kv,d_k,d_v[,mask[,alg[,dtype[,pageN]\n"
    "                  [,inorder|roundrobin][,int8][,half][,varlen|padded][,dropP][,winL]\n"
    "                  [,bshd]]]]\n"
    "                  with mask none|causal|causal-bottom-right|no-self, alg\n"
    "                  fused|unfused|both (default both) or backward (the backward pass\n"
    "                  after one forward call; GFLOP/s counted as 2*n_q*n_kv*(3*d_k +\n"
    "                  2*d_v) per head, the five products of FlashAttention-2's backward)\n"
    "                  and dtype f32|f16|bf16 (storage of Q, K, V and O, and of dO, dQ,\n"
    "                  dK, dV; default f32); pageN (fused only): K and V in a pool of\n"
    "                  pages of N keys read through a block table on the device, each\n"
    "                  sequence's pages shuffled across the pool; inorder (with pageN):\n"
    "                  each sequence's pages in order instead, the block table 0, 1,\n"
    "                  2, ... (with bshd, a contiguous cache's memory order), shown as\n"
    "                  paged16/inorder; roundrobin (with pageN): the pages handed out to\n"
    "                  the sequences in turn, as a fresh pool gives them to sequences\n"
    "                  that grow side by side (sequence i's page p at p*b + i), shown\n"
    "                  as paged16/roundrobin; int8 (fused only, with or without pageN): K and\n"
    "                  V int8 with float32 scales per token and head (a quantized cache;\n"
    "                  dtype then stores Q and O, shown as e.g. f32/i8); half (fused\n"
    "                  only): desc.half_arithmetic = 1 (shown as f16/half; the plan\n"
    "                  says where it runs); varlen (n_q = n_kv, at most 64 sequences,\n"
    "                  not with pageN, int8, dropP): b sequences of n*(i+1)/b tokens\n"
    "                  packed along the sequence dimension with cu_seqlens, padded: the\n"
    "                  same lengths as q_lens and kv_lens of the padded batch; both\n"
    "                  count the sequences' own work, 2*h_q*sum(L_i^2)*(d_k + d_v);\n"
    "                  dropP (any algorithm, backward too): dropout_p P, e.g. drop0.1,\n"
    "                  shown as f32/p0.1; winL (any algorithm, not with varlen or\n"
    "                  padded): a sliding window of L keys before each row's diagonal\n"
    "                  and none after (decoding at the end of the cache: mask\n"
    "                  causal-bottom-right), shown as f32/w4096 (K/V bytes: the\n"
    "                  keys the rows see); bshd (not with varlen, padded or\n"
    "                  backward): K and V laid out [b, n_kv, h_kv, d] as\n"
    "                  FlashAttention's cache (pages [num_pages, page_size, h_kv,\n"
    "                  d]) instead of [b, h_kv, n_kv, d] (int8 scales keep theirs),\n"
    "                  shown as fused/bshd, paged16/bshd or paged16/inorder/bshd;\n"
    "                  default: the CPU set 1,8,8,1024,1024,64,64;\n"
    "                  1,8,8,4096,4096,64,64; 1,1,1,4096,4096,128,128;\n"
    "                  1,8,8,4096,4096,64,64,causal;\n"
    "                  1,32,32,1,8192,128,128 (decode);\n"
    "                  1,32,8,1,32768,128,128 (grouped-query decode)\n";
static const char bench_usage_more[] = /* (C99's 4095-character string limit) */
    "  --reps N        timed runs per case (default 5)\n"
    "  --warmup N      untimed runs first (default 1; the first also builds programs,\n"
    "                  so with 0 the first timed run includes the build)\n"
    "  --json          one JSON object per case on stdout, in a JSON array (a case\n"
    "                  that fails has none; page_size N with pageN, else 0; algorithm\n"
    "                  as the table shows it, e.g. paged16/inorder/bshd; peak_gflops,\n"
    "                  peak_form, peak_gbytes_per_s and bw_gbytes_per_s are null\n"
    "                  without --peak)\n"
    "  --peak          also measure the device's f32 FMA peak (independent vector\n"
    "                  accumulators: the faster of 8 float16 vectors (16 float32 lanes\n"
    "                  each) and 12 of the device's native float width) and its\n"
    "                  streaming read bandwidth (16-lane float32 vector loads\n"
    "                  over 256 MiB, summed), and print each case as a fraction of\n"
    "                  both (the FMA peak bounds large problems, the bandwidth\n"
    "                  decoding); the bandwidth is measured again after every case\n"
    "                  and each case compared with the mean of the runs just before\n"
    "                  and after it (last column, bw GB/s; JSON bw_gbytes_per_s), as\n"
    "                  a shared machine's bandwidth drifts from one case to the next\n"
    "  --huge-pages    operands in host memory advised for transparent huge pages\n"
    "                  (madvise MADV_HUGEPAGE, used in place: CL_MEM_USE_HOST_PTR), as\n"
    "                  an engine allocating its own K/V pool on a CPU device can; Linux\n"
    "                  only (elsewhere plain buffers). Random K/V pages cost a page walk\n"
    "                  each with 4 KiB pages\n"
    "  --quiet         no progress on standard error (by default: the case being timed,\n"
    "                  of how many, elapsed time and an estimate of what is left; one\n"
    "                  line rewritten in place on a terminal, plain lines otherwise)\n"
    "  --device SPEC   \"P:D\" or a device-name substring (default: CLATTN_DEVICE, else\n"
    "                  the first GPU, else the first device)\n"
    "  -h, --help      show this help\n";

static const char default_shapes[] = "1,8,8,1024,1024,64,64;1,8,8,4096,4096,64,64;"
                                     "1,1,1,4096,4096,128,128;1,8,8,4096,4096,64,64,causal;"
                                     "1,32,32,1,8192,128,128;1,32,8,1,32768,128,128";

int bench_quiet; /* tune: candidates the device refuses are expected, not reported */
const char *bench_command = "clattn bench",
           *bench_shapes_grammar =
               "b,h_q,h_kv,n_q,n_kv,d_k,d_v[,mask[,alg[,dtype[,pageN][,inorder|roundrobin]["
               ",int8][,half][,varlen|padded][,dropP][,winL][,bshd]]]]";

int bench_fail(const char *fmt, ...)
{
    if (bench_quiet)
        return 1;
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "%s: ", bench_command);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    return 1;
}

const char *bench_dtype_name(clattn_dtype dtype)
{
    return dtype == CLATTN_FLOAT16 ? "f16" : dtype == CLATTN_BFLOAT16 ? "bf16" : "f32";
}

static const char *mask_name(clattn_mask m)
{
    return (unsigned)m <= CLATTN_MASK_NO_SELF ? cli_mask_names[m] : "?";
}

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

stats bench_summarize(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    stats s = {n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]), v[0], v[n - 1]};
    return s;
}

int bench_huge_pages;

static void CL_CALLBACK free_host(cl_mem m, void *host)
{
    (void)m;
    free(host);
}

/* Host memory for `bytes`, advised for transparent huge pages when bench_huge_pages
 * (2 MiB-aligned, rounded up to whole huge pages; the kernel may still give small pages),
 * else plain malloc; *huge says which. NULL when out of memory. */
static unsigned char *host_memory(size_t bytes, bool *huge)
{
    *huge = false;
#ifdef MADV_HUGEPAGE
    if (bench_huge_pages) {
        const size_t hp = (size_t)2 << 20, len = (bytes + hp - 1) / hp * hp;
        void *p = NULL;
        if (posix_memalign(&p, hp, len) != 0)
            return NULL;
        (void)madvise(p, len, MADV_HUGEPAGE); /* a hint: failure leaves small pages */
        *huge = true;
        return p;
    }
#endif
    return malloc(bytes);
}

/* A device buffer of `count` elements of `dtype` filled with values in [-1, 1) (int8:
 * those values times 127, rounded). With bench_huge_pages the buffer uses host memory
 * advised for huge pages in place (CL_MEM_USE_HOST_PTR; freed by the buffer's destructor
 * callback), as an engine that allocates its own K/V pool on a CPU device can. */
static cl_mem random_buffer(cl_context cl_ctx, cl_command_queue queue, int64_t count, unsigned seed,
                            clattn_dtype dtype)
{
    const size_t n = (size_t)(count > 0 ? count : 1), es = clattn_dtype_size(dtype);
    bool huge;
    unsigned char *host = host_memory(n * es, &huge);
    if (!host)
        return NULL;
    for (size_t i = 0; i < n; i++) {
        seed = seed * 1664525u + 1013904223u;
        const float x = (float)(seed >> 8) / 8388608.0f - 1.0f;
        if (dtype == CLATTN_FLOAT32) {
            memcpy(host + 4 * i, &x, 4);
        } else if (dtype == CLATTN_INT8) { /* -127..127, as a symmetric quantizer stores */
            host[i] = (unsigned char)(int8_t)lrintf(127.0f * x);
        } else {
            const uint16_t h =
                dtype == CLATTN_FLOAT16 ? clattn_f32_to_f16(x) : clattn_f32_to_bf16(x);
            memcpy(host + 2 * i, &h, 2);
        }
    }
    cl_int err;
    if (huge) {
        cl_mem m =
            clCreateBuffer(cl_ctx, CL_MEM_READ_WRITE | CL_MEM_USE_HOST_PTR, n * es, host, &err);
        if (m && clSetMemObjectDestructorCallback(m, free_host, host) == CL_SUCCESS)
            return m;
        if (m) /* no commands use it yet: released at once */
            clReleaseMemObject(m);
        free(host);
        return NULL;
    }
    cl_mem m = clCreateBuffer(cl_ctx, CL_MEM_READ_WRITE, n * es, NULL, &err);
    if (m &&
        clEnqueueWriteBuffer(queue, m, CL_TRUE, 0, n * es, host, 0, NULL, NULL) != CL_SUCCESS) {
        clReleaseMemObject(m);
        m = NULL;
    }
    free(host);
    return m;
}

double bench_event_ns(cl_event e, cl_profiling_info what)
{
    cl_ulong t = 0;
    clGetEventProfilingInfo(e, what, sizeof t, &t, NULL);
    return (double)t;
}

/* The backward pass's extra operands: the LSE (written by one forward call here), dO,
 * and dQ, dK, dV. */
typedef struct bwd_bufs {
    cl_mem mem[5];
    clattn_tensor t[5]; /* lse, dO, dQ, dK, dV */
} bwd_bufs;

static int backward_setup(clattn_context *ctx, const bench_case *c,
                          const clattn_attention_desc *desc, const clattn_tensor *q,
                          const clattn_tensor *k, const clattn_tensor *v, const clattn_tensor *o,
                          bwd_bufs *bw)
{
    cl_context cl_ctx;
    cl_command_queue queue;
    clattn_context_get_cl(ctx, &cl_ctx, NULL, &queue);
    const int64_t rows = c->b * c->h_q * c->n_q;
    bw->mem[0] = random_buffer(cl_ctx, queue, rows, 5, CLATTN_FLOAT32);
    bw->mem[1] = random_buffer(cl_ctx, queue, rows * c->d_v, 6, c->dtype);
    bw->mem[2] = random_buffer(cl_ctx, queue, rows * c->d_k, 7, c->dtype);
    bw->mem[3] = random_buffer(cl_ctx, queue, c->b * c->h_kv * c->n_kv * c->d_k, 8, c->dtype);
    bw->mem[4] = random_buffer(cl_ctx, queue, c->b * c->h_kv * c->n_kv * c->d_v, 9, c->dtype);
    for (int i = 0; i < 5; i++)
        if (!bw->mem[i])
            return bench_fail("cannot allocate the backward pass's operands");
    bw->t[0] = clattn_tensor_buffer(bw->mem[0], c->b, c->h_q, c->n_q, 1);
    bw->t[1] = clattn_tensor_buffer(bw->mem[1], c->b, c->h_q, c->n_q, c->d_v);
    bw->t[2] = clattn_tensor_buffer(bw->mem[2], c->b, c->h_q, c->n_q, c->d_k);
    bw->t[3] = clattn_tensor_buffer(bw->mem[3], c->b, c->h_kv, c->n_kv, c->d_k);
    bw->t[4] = clattn_tensor_buffer(bw->mem[4], c->b, c->h_kv, c->n_kv, c->d_v);
    for (int i = 1; i < 5; i++)
        bw->t[i].dtype = c->dtype;
    clattn_attention_desc fwd = *desc; /* O and the LSE the backward pass reads */
    fwd.lse = &bw->t[0];
    cl_event done = NULL;
    clattn_status st = clattn_attention_enqueue(ctx, &fwd, q, k, v, o, 0, NULL, &done);
    if (st == CLATTN_SUCCESS) {
        clWaitForEvents(1, &done);
        clReleaseEvent(done);
    }
    return st == CLATTN_SUCCESS
               ? 0
               : bench_fail("forward call before the backward pass: %s: %s",
                            clattn_status_string(st), clattn_last_error_message(ctx));
}

/* The K/V rows per KV head time_case allocates: a paged pool's whole pages
 * (b·⌈n_kv / page_size⌉·page_size), a varlen batch's `packed` rows, else b·n_kv; in
 * double, so that sizes up to 2^63 - 1 do not overflow (exact below 2^53). */
static double kv_rows_of(const bench_case *c, int64_t packed)
{
    const double b = (double)c->b, ps = (double)c->page_size;
    return ps > 0   ? b * ceil((double)c->n_kv / ps) * ps
           : packed ? (double)packed
                    : b * (double)c->n_kv;
}

/* Whether the case's operands fit the device's global memory (CL_DEVICE_GLOBAL_MEM_SIZE;
 * on a CPU device that is the host's memory): the rows of Q and O, of K and V (a paged
 * pool's whole pages; and their int8 scales), the backward pass's dO, dQ, dK, dV and LSE.
 * (Each buffer is also staged in host memory while it is filled: not counted.) `packed`:
 * a varlen batch's total rows, else 0. Counted in double, before time_case forms any
 * product of the sizes (each may be up to 2^63 - 1). 0, or bench_fail's 1 with the sizes:
 * a case far too large is refused here instead of allocating until the system stops the
 * process. */
static int operands_fit(clattn_context *ctx, const bench_case *c, int64_t packed)
{
    const double es = (double)clattn_dtype_size(c->dtype), kes = c->int8_kv ? 1.0 : es;
    const double q_rows =
        (packed ? (double)packed : (double)c->b * (double)c->n_q) * (double)c->h_q;
    const double kv_rows = (double)c->h_kv * kv_rows_of(c, packed);
    const double dims = (double)c->d_k + (double)c->d_v;
    const double q = q_rows * dims * es, kv = kv_rows * (dims * kes + (c->int8_kv ? 8 : 0));
    const double need = (q + kv) * (c->backward ? 2 : 1) + (c->backward ? (double)q_rows * 4 : 0);
    cl_device_id dev;
    clattn_context_get_cl(ctx, NULL, &dev, NULL);
    cl_ulong global = 0;
    if (clGetDeviceInfo(dev, CL_DEVICE_GLOBAL_MEM_SIZE, sizeof global, &global, NULL) !=
            CL_SUCCESS ||
        global == 0 || need <= (double)global)
        return 0;
    char alg[BENCH_CASE_NAME];
    return bench_fail("the operands of b %lld, h %lld/%lld, n %lldx%lld, d %lld/%lld (%s) need "
                      "%.3g GiB, more than the device's %.3g GiB of global memory",
                      (long long)c->b, (long long)c->h_q, (long long)c->h_kv, (long long)c->n_q,
                      (long long)c->n_kv, (long long)c->d_k, (long long)c->d_v,
                      bench_case_name(c, alg), need / 1073741824.0, (double)global / 1073741824.0);
}

int time_case(clattn_context *ctx, const bench_case *c, int warmup, int reps, result *res,
              char *plan_reason, size_t reason_len)
{
    cl_context cl_ctx;
    cl_command_queue queue;
    clattn_context_get_cl(ctx, &cl_ctx, NULL, &queue);
    bwd_bufs bw;
    memset(&bw, 0, sizeof bw);
    /* varlen / padded: sequence i is n·(i + 1)/b long (at least 1); varlen packs them
     * (batch 1, total rows), padded gives them as lengths of the [b, h, n, d] batch */
    int32_t cu[65], rl[64];
    int64_t total = 0;
    double work = 0.0; /* Σ L_i² (the useful score entries per head) */
    for (int64_t i = 0; c->ragged && i < c->b && i < 64; i++) {
        const int64_t len = c->n_q * (i + 1) / c->b > 0 ? c->n_q * (i + 1) / c->b : 1;
        cu[i] = (int32_t)total;
        rl[i] = (int32_t)len;
        total += len;
        work += (double)len * (double)len;
    }
    cu[c->b < 64 ? c->b : 64] = (int32_t)total;
    const bool packed = c->ragged == 1;
    const int64_t qb = packed ? 1 : c->b, qn = packed ? total : c->n_q; /* Q's batch, rows */
    if (operands_fit(ctx, c, packed ? total : 0) != 0)
        return 1;
    /* paged: b·⌈n_kv / page_size⌉ pages, each sequence's at shuffled places of the pool
     * (inorder: the table 0, 1, 2, …; roundrobin: sequence b's page p at p·c->b + b) */
    const int64_t ps = c->page_size, max_pages = ps ? (c->n_kv + ps - 1) / ps : 0;
    const int64_t pages = c->b * max_pages; /* (operands_fit: the sizes below fit) */
    const int64_t kv_rows = (int64_t)kv_rows_of(c, packed ? total : 0);
    const clattn_dtype kv_dtype = c->int8_kv ? CLATTN_INT8 : c->dtype;
    cl_mem mq = random_buffer(cl_ctx, queue, qb * c->h_q * qn * c->d_k, 1, c->dtype);
    cl_mem mk = random_buffer(cl_ctx, queue, c->h_kv * kv_rows * c->d_k, 2, kv_dtype);
    cl_mem mv = random_buffer(cl_ctx, queue, c->h_kv * kv_rows * c->d_v, 3, kv_dtype);
    /* int8: a float32 scale per key row and head, K's and V's (1/127: values in [-1, 1]),
     * laid out as K without its last dimension (a pool's through the same table) */
    cl_mem ms[2] = {NULL, NULL};
    for (int i = 0; i < 2 && c->int8_kv; i++) {
        const size_t bytes =
            sizeof(float) * (size_t)(c->h_kv * kv_rows > 0 ? c->h_kv * kv_rows : 1);
        const cl_float inv127 = 1.0f / 127.0f;
        cl_int err;
        ms[i] = clCreateBuffer(cl_ctx, CL_MEM_READ_ONLY, bytes, NULL, &err);
        if (ms[i] && (clEnqueueFillBuffer(queue, ms[i], &inv127, sizeof inv127, 0, bytes, 0, NULL,
                                          NULL) != CL_SUCCESS ||
                      clFinish(queue) != CL_SUCCESS)) {
            clReleaseMemObject(ms[i]);
            ms[i] = NULL;
        }
    }
    cl_mem mt = NULL;
    if (ps) {
        int32_t *table = bench_page_table(c, max_pages);
        cl_int err = CL_SUCCESS;
        if (table)
            mt = clCreateBuffer(cl_ctx, CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR,
                                sizeof(int32_t) * (size_t)(pages > 0 ? pages : 1), table, &err);
        free(table);
        if (!mt) {
            clReleaseMemObject(mk);
            clReleaseMemObject(mv);
            mk = mv = NULL;
        }
    }
    cl_mem mo = random_buffer(cl_ctx, queue, qb * c->h_q * qn * c->d_v, 4, c->dtype);
    double *dev = calloc((size_t)reps, sizeof *dev), *wall = calloc((size_t)reps, sizeof *wall);
    /* the sequences are n_kv long: kv_lens, when the pages hold more */
    int32_t *lens = ps ? malloc(sizeof(int32_t) * (size_t)c->b) : NULL;
    for (int64_t i = 0; lens && i < c->b; i++)
        lens[i] = (int32_t)c->n_kv;
    int rc = 0;
    if (!mq || !mk || !mv || !mo || !dev || !wall || (ps && !lens) ||
        (c->int8_kv && (!ms[0] || !ms[1])) || (c->ragged && c->b > 64)) {
        char pool[96] = "",
             alg[BENCH_CASE_NAME]; /* the pool rounds each sequence up to whole pages */
        if (ps)
            snprintf(pool, sizeof pool, " (a K/V pool of %lld page%s of %lld keys: %lld rows)",
                     (long long)pages, pages == 1 ? "" : "s", (long long)ps, (long long)kv_rows);
        rc = bench_fail("cannot allocate the operands of b %lld, h %lld/%lld, n %lldx%lld, d "
                        "%lld/%lld%s (%s)",
                        (long long)c->b, (long long)c->h_q, (long long)c->h_kv, (long long)c->n_q,
                        (long long)c->n_kv, (long long)c->d_k, (long long)c->d_v, pool,
                        bench_case_name(c, alg));
        goto done;
    }
    clattn_tensor q = clattn_tensor_buffer(mq, qb, c->h_q, qn, c->d_k);
    clattn_tensor k = clattn_tensor_buffer(mk, ps ? pages : qb, c->h_kv,
                                           ps       ? ps
                                           : packed ? total
                                                    : c->n_kv,
                                           c->d_k);
    clattn_tensor v = clattn_tensor_buffer(mv, ps ? pages : qb, c->h_kv,
                                           ps       ? ps
                                           : packed ? total
                                                    : c->n_kv,
                                           c->d_v);
    for (int i = 0; i < 2 && c->bshd; i++) { /* [b, n_kv, h_kv, d] (pages [.., page_size, ..]) */
        clattn_tensor *t = i ? &v : &k;
        const int64_t row = c->h_kv * t->shape[3], st[4] = {t->shape[2] * row, t->shape[3], row, 1};
        memcpy(t->strides, st, sizeof st);
    }
    const clattn_paged_kv pg = {NULL, mt, max_pages};
    const clattn_varlen vl = {cu, cu, c->b, NULL, NULL, 0, 0};
    clattn_tensor o = clattn_tensor_buffer(mo, qb, c->h_q, qn, c->d_v);
    q.dtype = o.dtype = c->dtype;
    k.dtype = v.dtype = kv_dtype;
    clattn_tensor ks =
        clattn_tensor_buffer(ms[0], ps ? pages : c->b, c->h_kv, ps ? ps : c->n_kv, 1);
    clattn_tensor vs =
        clattn_tensor_buffer(ms[1], ps ? pages : c->b, c->h_kv, ps ? ps : c->n_kv, 1);
    clattn_attention_desc desc = clattn_attention_desc_default();
    desc.mask = c->mask;
    desc.algorithm = c->algorithm;
    if (c->int8_kv) {
        desc.k_scale = &ks;
        desc.v_scale = &vs;
    }
    if (ps) {
        desc.paged = &pg;
        desc.kv_lens = lens;
    }
    if (c->ragged == 1)
        desc.varlen = &vl;
    if (c->ragged == 2)
        desc.q_lens = desc.kv_lens = rl;
    desc.dropout_p = c->dropout;
    desc.half_arithmetic = c->half;
    if (c->window_left >= 0) {
        desc.window = 1;
        desc.window_left = c->window_left;
        desc.window_right = 0;
    }
    desc.dropout_seed = 1;
    if (c->backward && (rc = backward_setup(ctx, c, &desc, &q, &k, &v, &o, &bw)) != 0)
        goto done;
    clattn_plan plan;
    clattn_status st = clattn_attention_plan(ctx, &desc, &q, &k, &v, &o, &plan);
    if (st != CLATTN_SUCCESS) {
        rc = bench_fail("plan: %s: %s", clattn_status_string(st), clattn_last_error_message(ctx));
        goto done;
    }
    snprintf(plan_reason, reason_len, "%s", plan.reason);
    snprintf(res->kernels, sizeof res->kernels, "%s", plan.kernels);
    for (int r = -warmup; r < reps; r++) {
        cl_event start = NULL, end = NULL;
        const double t0 = now_s();
        cl_int err = clEnqueueMarkerWithWaitList(queue, 0, NULL, &start);
        st = err != CL_SUCCESS ? CLATTN_ERROR_OPENCL
             : c->backward
                 ? clattn_attention_backward_enqueue(ctx, &desc, &q, &k, &v, &o, &bw.t[0], &bw.t[1],
                                                     &bw.t[2], &bw.t[3], &bw.t[4], 1, &start, &end)
                 : clattn_attention_enqueue(ctx, &desc, &q, &k, &v, &o, 1, &start, &end);
        if (st == CLATTN_SUCCESS)
            err = clWaitForEvents(1, &end);
        const double t1 = now_s();
        if (st == CLATTN_SUCCESS && err == CL_SUCCESS && r >= 0) {
            /* from the marker's end (everything before it done) to the last kernel's end */
            dev[r] = 1e-6 * (bench_event_ns(end, CL_PROFILING_COMMAND_END) -
                             bench_event_ns(start, CL_PROFILING_COMMAND_END));
            wall[r] = 1e3 * (t1 - t0);
        }
        if (start)
            clReleaseEvent(start);
        if (end)
            clReleaseEvent(end);
        if (st != CLATTN_SUCCESS || err != CL_SUCCESS) {
            rc = bench_fail("attention: %s: %s", clattn_status_string(st),
                            clattn_last_error_message(ctx));
            goto done;
        }
    }
    res->device_ms = bench_summarize(dev, reps);
    res->wall_ms = bench_summarize(wall, reps);
    const double heads = (double)(c->b * c->h_q);
    /* FLOPs: 2 per row and key it sees per column of d_k and d_v (the library's rule,
     * clattn_visible_keys: causal masks and windows count the keys a row sees; every batch
     * entry alike, n_kv long), the backward's five products 2·(3·d_k + 2·d_v); varlen and
     * padded: the sequences' own Σ L² (halved when causal). The forward reads each K/V row
     * of the rows' keys (their union) once; the backward writes dK and dV for all n_kv. */
    int64_t seen = 0, kv_lo = c->n_kv, kv_hi = 0;
    for (int64_t i = 0; !c->ragged && i < c->n_q; i++) {
        clattn_key_range kr;
        if (clattn_visible_keys(&desc, c->n_q, c->n_kv, 0, i, &kr) == CLATTN_SUCCESS &&
            kr.hi > kr.lo) {
            seen += kr.hi - kr.lo;
            kv_lo = kr.lo < kv_lo ? kr.lo : kv_lo;
            kv_hi = kr.hi > kv_hi ? kr.hi : kv_hi;
        }
    }
    double flop = 2.0 * heads * (double)seen *
                  (double)(c->backward ? 3 * c->d_k + 2 * c->d_v : c->d_k + c->d_v);
    if (c->ragged) { /* the useful work of the sequences (the same for varlen and padded) */
        flop = 2.0 * (double)c->h_q * work * (double)(c->d_k + c->d_v);
        if (c->mask == CLATTN_MASK_CAUSAL_TOP_LEFT || c->mask == CLATTN_MASK_CAUSAL_BOTTOM_RIGHT)
            flop /= 2;
    }
    const int64_t kv_read = c->backward ? c->n_kv : kv_hi > kv_lo ? kv_hi - kv_lo : 0;
    /* Q read and O written; K and V read (int8: one byte an element and a float32 scale
     * a row, each) */
    double bytes = (double)clattn_dtype_size(c->dtype) * (double)(c->b * c->h_q * c->n_q) *
                       (double)(c->d_k + c->d_v) +
                   (double)(c->b * c->h_kv * kv_read) *
                       ((double)clattn_dtype_size(kv_dtype) * (double)(c->d_k + c->d_v) +
                        (c->int8_kv ? 2.0 * sizeof(float) : 0.0));
    if (c->ragged) /* the sequences' rows only */
        bytes = (double)clattn_dtype_size(c->dtype) * (double)total *
                (double)((c->h_q + c->h_kv) * (c->d_k + c->d_v));
    if (c->backward) /* O and dO read, dQ, dK, dV written too */
        bytes *= 2.0;
    else if (plan.algorithm == CLATTN_ALGORITHM_UNFUSED)
        bytes += 6.0 * 4.0 * heads * (double)c->n_q * (double)c->n_kv;
    res->gflops = flop / (res->device_ms.median * 1e6);
    res->gbytes_per_s = bytes / (res->device_ms.median * 1e6);
    res->workspace_bytes =
        c->backward ? (size_t)(8 * c->b * c->h_q * c->n_q) : plan.workspace_bytes;
done:
    free(dev);
    free(wall);
    for (int i = 0; i < 5; i++)
        if (bw.mem[i])
            clReleaseMemObject(bw.mem[i]);
    cl_mem all[7] = {mq, mk, mv, mo, mt, ms[0], ms[1]};
    for (int i = 0; i < 7; i++)
        if (all[i])
            clReleaseMemObject(all[i]);
    free(lens);
    return rc;
}

int bench_count(const char *command, const char *option, const char *text, long lo, long hi,
                int *out)
{
    char *end;
    const long n = strtol(text, &end, 10);
    if (end == text || *end || n < lo || n > hi)
        return usage_error(command, "%s '%s' is not an integer within %ld..%ld", option, text, lo,
                           hi);
    *out = (int)n;
    return 0;
}

int cmd_bench(int argc, char **argv)
{
    const char *shapes = default_shapes, *device = NULL, *reps_text = NULL, *warmup_text = NULL;
    int reps = 5, warmup = 1, json = 0, peak = 0, quiet = 0, huge = 0;
    const option options[] = {
        {"--shapes", &shapes, NULL},  {"--device", &device, NULL},
        {"--reps", &reps_text, NULL}, {"--warmup", &warmup_text, NULL},
        {"--json", NULL, &json},      {"--peak", NULL, &peak},
        {"--quiet", NULL, &quiet},    {"--huge-pages", NULL, &huge},
    };
    char usage[sizeof bench_usage + sizeof bench_usage_options + sizeof bench_usage_more];
    snprintf(usage, sizeof usage, "%s%s%s", bench_usage, bench_usage_options, bench_usage_more);
    int rc = parse_command_line("clattn bench", usage, argc, argv, options,
                                sizeof options / sizeof options[0]);
    if (rc >= 0)
        return rc;
    if ((reps_text && bench_count("clattn bench", "--reps", reps_text, 1, 1000, &reps)) ||
        (warmup_text && bench_count("clattn bench", "--warmup", warmup_text, 0, 1000, &warmup)))
        return 2;
    bench_huge_pages = huge;
    bench_case cases[64];
    const int n_cases = parse_shapes(shapes, cases, 64);
    if (n_cases < 0)
        return 2;

    clattn_context_options opt = {0};
    opt.device = device;
    clattn_context *ctx;
    clattn_status st = clattn_context_create(&opt, &ctx);
    if (st != CLATTN_SUCCESS)
        return bench_fail("%s", clattn_last_error_message(NULL));
    cl_device_id dev;
    clattn_context_get_cl(ctx, NULL, &dev, NULL);
    char name[256] = "", version[256] = "";
    clGetDeviceInfo(dev, CL_DEVICE_NAME, sizeof name - 1, name, NULL);
    clGetDeviceInfo(dev, CL_DRIVER_VERSION, sizeof version - 1, version, NULL);
    char peak_form_name[48] = "";
    const double peak_gflops =
        peak ? measure_peak(ctx, peak_form_name, sizeof peak_form_name) : 0.0;
    /* the read bandwidth of a shared machine drifts by tens of percent from one second to
     * the next (its neighbours' traffic): with --peak the probe runs again after every
     * case, and each case is compared with the mean of the runs just before and after it */
    bw_probe *probe = peak ? bw_probe_open(ctx) : NULL;
    const double peak_gbs = bw_probe_measure(probe);
    double bw_before = peak_gbs;
    char cpu[320];
    host_cpu(cpu, sizeof cpu);

    if (json)
        printf("[\n");
    else {
        printf("device: %s (driver %s), clattn %s, %d timed runs after %d warm-up\n", name, version,
               clattn_version(), reps, warmup);
        printf("host CPU: %s\n", cpu[0] ? cpu : "unknown (no /proc/cpuinfo)");
        if (peak)
            printf("f32 FMA peak (%s): %.1f GFLOP/s; streaming read: %.1f GB/s\n", peak_form_name,
                   peak_gflops, peak_gbs);
        printf("%-4s %-5s %-5s %-6s %-6s %-4s %-4s %-9s %-24s %-14s %9s %19s %10s %8s %7s %10s%s\n",
               "b", "h_q", "h_kv", "n_q", "n_kv", "d_k", "d_v", "mask", "alg", "dtype", "device_ms",
               "[min-max]", "wall_ms", "GFLOP/s", "GB/s", "workspace",
               peak ? "   of peak     of bw  bw GB/s" : "");
    }
    /* JSON: the peak fields are null where not measured; items are separated as they are
     * printed (a case that fails prints none) */
    char peak_json[160];
    if (peak)
        snprintf(peak_json, sizeof peak_json,
                 "\"peak_gflops\": %.6g, \"peak_form\": \"%s\", \"peak_gbytes_per_s\": %.6g",
                 peak_gflops, peak_form_name, peak_gbs);
    else
        snprintf(peak_json, sizeof peak_json,
                 "\"peak_gflops\": null, \"peak_form\": null, \"peak_gbytes_per_s\": null");
    int json_items = 0;
    rc = 0;
    progress pr;
    progress_start(&pr, "clattn bench", n_cases, quiet);
    for (int i = 0; i < n_cases; i++) {
        const bench_case *c = &cases[i];
        char alg_buf[BENCH_CASE_NAME];
        const char *alg = bench_case_name(c, alg_buf);
        progress_step(&pr, "b %lld, h %lld/%lld, n %lldx%lld, d %lld/%lld, %s, %s, %s",
                      (long long)c->b, (long long)c->h_q, (long long)c->h_kv, (long long)c->n_q,
                      (long long)c->n_kv, (long long)c->d_k, (long long)c->d_v, mask_name(c->mask),
                      alg, bench_dtype_name(c->dtype));
        result r = {0};
        char reason[sizeof((clattn_plan *)0)->reason] = "";
        const int failed = time_case(ctx, c, warmup, reps, &r, reason, sizeof reason) != 0;
        const double bw_after = bw_probe_measure(probe);
        const double bw_case = bw_before > 0 && bw_after > 0 ? (bw_before + bw_after) / 2 : 0.0;
        bw_before = bw_after;
        progress_clear(&pr);
        if (failed) {
            rc = 1;
            continue;
        }
        char dt[64]; /* Q's and O's storage, then K's and V's if int8, dropout, window:
                      * "f16/i8/p0.1/w4096" */
        char drop[16] = "", win[24] = "";
        if (c->dropout > 0.0f)
            snprintf(drop, sizeof drop, "/p%g", (double)c->dropout);
        if (c->window_left >= 0)
            snprintf(win, sizeof win, "/w%lld", (long long)c->window_left);
        snprintf(dt, sizeof dt, "%s%s%s%s%s", bench_dtype_name(c->dtype), c->int8_kv ? "/i8" : "",
                 c->half ? "/half" : "", drop, win);
        if (json) {
            char bw_json[32] = "null";
            if (bw_case > 0)
                snprintf(bw_json, sizeof bw_json, "%.6g", bw_case);
            printf("%s  {\"device\": \"%s\", \"host_cpu\": \"%s\", \"b\": %lld, \"h_q\": %lld, "
                   "\"h_kv\": %lld, \"n_q\": %lld, "
                   "\"n_kv\": %lld, \"d_k\": %lld, \"d_v\": %lld, \"mask\": \"%s\", "
                   "\"algorithm\": \"%s\", \"page_size\": %lld, \"dtype\": \"%s\", \"device_ms\": "
                   "{\"median\": %.6g, "
                   "\"min\": %.6g, "
                   "\"max\": %.6g}, \"wall_ms\": {\"median\": %.6g, \"min\": %.6g, \"max\": "
                   "%.6g}, \"gflops\": %.6g, \"gbytes_per_s\": %.6g, \"workspace_bytes\": %zu, "
                   "%s, \"bw_gbytes_per_s\": %s, \"plan\": \"%s\"}",
                   json_items++ ? ",\n" : "", name, cpu, (long long)c->b, (long long)c->h_q,
                   (long long)c->h_kv, (long long)c->n_q, (long long)c->n_kv, (long long)c->d_k,
                   (long long)c->d_v, mask_name(c->mask), alg, (long long)c->page_size, dt,
                   r.device_ms.median, r.device_ms.min, r.device_ms.max, r.wall_ms.median,
                   r.wall_ms.min, r.wall_ms.max, r.gflops, r.gbytes_per_s, r.workspace_bytes,
                   peak_json, bw_json, reason);
        } else {
            char spread[32];
            snprintf(spread, sizeof spread, "[%.3g-%.3g]", r.device_ms.min, r.device_ms.max);
            printf("%-4lld %-5lld %-5lld %-6lld %-6lld %-4lld %-4lld %-9s %-24s %-14s %9.3f %19s "
                   "%10.3f %8.1f %7.1f %10zu",
                   (long long)c->b, (long long)c->h_q, (long long)c->h_kv, (long long)c->n_q,
                   (long long)c->n_kv, (long long)c->d_k, (long long)c->d_v,
                   c->mask == CLATTN_MASK_CAUSAL_BOTTOM_RIGHT ? "causal-br" : mask_name(c->mask),
                   alg, dt, r.device_ms.median, spread, r.wall_ms.median, r.gflops, r.gbytes_per_s,
                   r.workspace_bytes);
            if (peak && peak_gflops > 0)
                printf("  %7.1f%%", 100.0 * r.gflops / peak_gflops);
            if (peak && bw_case > 0)
                printf("  %7.1f%%  %7.1f", 100.0 * r.gbytes_per_s / bw_case, bw_case);
            printf("\n");
        }
        fflush(stdout);
    }
    if (json)
        printf("%s]\n", json_items ? "\n" : "");
    bw_probe_close(probe);
    clattn_context_release(ctx);
    return rc;
}
