/* block_read_probe.c — what this machine's memory charges for reading a K/V pool in pages
 * at shuffled places rather than in order, with no attention arithmetic and no OpenCL
 * (dev-time only; not part of the library or its tests).
 *
 * The question behind issue 14's page-16 ratio in FlashAttention's pool layout
 * [num_pages, page_size, h_kv, d]: a page of 16 keys × 8 KV heads × 128 float16 is one
 * 32 KiB block, which decode.cl reads whole, head-step by head-step, K and V side by side.
 * Read through a table in order (0, 1, 2, …), that is the contiguous cache's order, and
 * clattn's paged kernel then takes the contiguous kernel's time (docs/BENCHMARKS.md,
 * 2026-12-05, twenty-sixth); shuffled, it takes about 1.1x. This probe reads the same
 * bytes the same way from two threads (the machine's cores), blocks in order or shuffled
 * as `clattn bench`'s pageN shapes shuffle them (seed 5), each thread half of the pieces
 * in reading order: each block's steps of 16 keys, and each step's 8 head-steps (16 rows' 256
 * bytes of one head, 2 KiB apart) of K and V, with a software prefetch of the head-step
 * `ahead` head-steps on in reading order (through the table; 0: none), into L1 or L2.
 * After one warm-up read, each round times every variant once, in order then shuffled.
 *
 * Build and run:
 *   gcc -O2 -mavx2 -mfma -pthread tools/dev/block_read_probe.c -o /tmp/block_read_probe
 *   /tmp/block_read_probe [BLOCK_KEYS [ROUNDS [FMAS [rows]]]]  (BLOCK_KEYS: keys per page,
 *   16 to 4096, a multiple of 16, default 16; ROUNDS 1 to 100, default 10; FMAS: arithmetic
 *   after each row's loads, 4 chains of FMAS dependent 8-lane FMAs, 0 to 1000, default 0,
 *   to slow the read down to the kernel's pace; rows: each piece is 4 KiB in address order
 *   (two whole rows, the order of a kernel that reads whole rows, or of a head-step in
 *   clattn's layout) instead of a head-step's 16 pieces 2 KiB apart; exit 2 with a usage
 *   line on other arguments)
 * (x86 with AVX2 and FMA; prints ms per variant and round and, per variant, the median over
 * the rounds of shuffled / in order within a round, the mean of the middle two for an even
 * count.)
 */
#define _GNU_SOURCE
#include <immintrin.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

enum { HKV = 8, ROW = 2048, POOL = 128 << 20 }; /* row: 8 heads × 128 float16 */
static char *K, *V;
static int *table, nblocks, block_keys, shuffled, ahead, level, work_fmas, rows_order;

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* byte offset of piece p: in reading order, pages; in a page, steps of 16 keys; in a
 * step, the 8 heads (head-steps), as decode.cl reads with every head per work-item.
 * rows_order: the same bytes as 4 KiB stretches instead (2 whole rows), in address order. */
static size_t piece(long p)
{
    const long steps = block_keys / 16; /* per page */
    const long blk = p / (HKV * steps), step = p / HKV % steps, hh = p % HKV;
    const long phys = shuffled ? table[blk] : blk;
    if (rows_order)
        return ((size_t)phys * (size_t)block_keys + (size_t)(p % (HKV * steps)) * 2) * ROW;
    return ((size_t)phys * (size_t)block_keys + (size_t)step * 16) * ROW + (size_t)hh * 256;
}

/* byte offset of a piece's chunk r (0 … 15) of 256 bytes: row r of the head-step, or the
 * r-th 256 bytes of the stretch */
static size_t chunk(int r)
{
    return rows_order ? (size_t)r * 256 : (size_t)r * ROW;
}

static void *work(void *arg)
{
    const long t = (long)arg, per = (long)nblocks * (block_keys / 16) * HKV / 2, p0 = t * per;
    __m256 acc = _mm256_setzero_ps();
    for (long p = p0; p < p0 + per; p++) {
        /* a piece: 16 rows' 256 bytes of one head (a head-step), or 4 KiB in rows_order */
        const size_t off = piece(p);
        const size_t pf = ahead && p + ahead < p0 + per ? piece(p + ahead) : (size_t)-1;
        for (int r = 0; r < 16; r++) {
            if (pf != (size_t)-1)
                for (int c = 0; c < 256; c += 64) {
                    if (level == 2) {
                        __builtin_prefetch(K + pf + chunk(r) + c, 0, 2);
                        __builtin_prefetch(V + pf + chunk(r) + c, 0, 2);
                    } else {
                        __builtin_prefetch(K + pf + chunk(r) + c, 0, 3);
                        __builtin_prefetch(V + pf + chunk(r) + c, 0, 3);
                    }
                }
            const char *kp = K + off + chunk(r), *vp = V + off + chunk(r);
            __m256 x = _mm256_setzero_ps();
            for (int c = 0; c < 256; c += 32) {
                x = _mm256_add_ps(x, _mm256_load_ps((const float *)(const void *)(kp + c)));
                x = _mm256_add_ps(x, _mm256_load_ps((const float *)(const void *)(vp + c)));
            }
            /* arithmetic between the loads, as the kernel's: 4 chains of work_fmas FMAs */
            __m256 w[4] = {x, x, x, x};
            for (int i = 0; i < work_fmas; i++)
                for (int e = 0; e < 4; e++)
                    w[e] = _mm256_fmadd_ps(w[e], x, w[e]);
            acc = _mm256_add_ps(
                acc, _mm256_add_ps(_mm256_add_ps(w[0], w[1]), _mm256_add_ps(w[2], w[3])));
        }
    }
    float o[8];
    _mm256_storeu_ps(o, acc);
    return (void *)(long)(o[0] > 1e30f); /* (keeps the sums) */
}

static double run(void)
{
    const double t0 = now();
    pthread_t th[2];
    for (long i = 0; i < 2; i++)
        pthread_create(&th[i], NULL, work, (void *)i);
    for (int i = 0; i < 2; i++)
        pthread_join(th[i], NULL);
    return now() - t0;
}

static int cmp(const void *a, const void *b)
{
    const double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* argument i as a decimal in [lo, hi], or fallback when absent; -1 when malformed */
static long arg(int argc, char **argv, int i, long lo, long hi, long fallback)
{
    if (argc <= i)
        return fallback;
    char *end = NULL;
    const long v = strtol(argv[i], &end, 10);
    return end != argv[i] && *end == '\0' && v >= lo && v <= hi ? v : -1;
}

int main(int argc, char **argv)
{
    /* pages of 16 to 4096 keys, a multiple of 16 (4096 pages of 32 KiB down to 16 of 8 MiB) */
    const long keys = arg(argc, argv, 1, 16, 4096, 16), r = arg(argc, argv, 2, 1, 100, 10),
               f = arg(argc, argv, 3, 0, 1000, 0);
    rows_order = argc > 4 && strcmp(argv[4], "rows") == 0;
    if (keys < 16 || keys % 16 || r < 0 || f < 0 || argc > 5 || (argc > 4 && !rows_order)) {
        fprintf(stderr, "usage: block_read_probe [BLOCK_KEYS [ROUNDS [FMAS [rows]]]]  "
                        "(BLOCK_KEYS: 16 to 4096, a multiple of 16; ROUNDS: 1 to 100; FMAS: 0 "
                        "to 1000; rows: 4 KiB stretches in address order)\n");
        return 2;
    }
    block_keys = (int)keys;
    work_fmas = (int)f;
    const int rounds = (int)r;
    nblocks = POOL / (block_keys * ROW);
    K = aligned_alloc(4096, POOL);
    V = aligned_alloc(4096, POOL);
    table = malloc(sizeof(int) * (size_t)nblocks);
    if (!K || !V || !table)
        return 1;
    memset(K, 1, POOL);
    memset(V, 1, POOL);
    for (int i = 0; i < nblocks; i++)
        table[i] = i;
    unsigned seed = 5; /* the shuffle of clattn bench's pageN shapes */
    for (int i = nblocks - 1; i > 0; i--) {
        seed = seed * 1664525u + 1013904223u;
        const int j = (int)((seed >> 8) % (unsigned)(i + 1)), x = table[i];
        table[i] = table[j];
        table[j] = x;
    }
    static const int aheads[] = {0, 1, 2, 8, 1, 2, 8}, levels[] = {3, 3, 3, 3, 2, 2, 2};
    enum { NV = 7 };
    double ratio[NV][100];
    shuffled = 0;
    (void)run(); /* a warm-up: the pools' first touch after memset, the threads' start */
    for (int round = 0; round < rounds; round++) {
        printf("round %d:", round);
        for (int v = 0; v < NV; v++) {
            ahead = aheads[v];
            level = levels[v];
            shuffled = 0;
            const double in_order = run();
            shuffled = 1;
            const double sh = run();
            ratio[v][round] = sh / in_order;
            if (ahead)
                printf("  [ahead %d L%d]", ahead, level == 3 ? 1 : 2);
            else
                printf("  [no prefetch]");
            printf(" %.1f / %.1f ms", in_order * 1e3, sh * 1e3);
        }
        printf("\n");
    }
    printf("pages of %d keys (%d KiB blocks), %s, %d FMAs per 256 bytes, %d rounds; shuffled "
           "/ in order, median:\n",
           block_keys, block_keys * ROW / 1024,
           rows_order ? "4 KiB stretches" : "head-steps of 16 rows", work_fmas, rounds);
    for (int v = 0; v < NV; v++) {
        qsort(ratio[v], (size_t)rounds, sizeof(double), cmp);
        const double med = (ratio[v][(rounds - 1) / 2] + ratio[v][rounds / 2]) / 2;
        if (aheads[v])
            printf("  prefetch %d %s ahead into L%d", aheads[v],
                   rows_order ? "stretch(es)" : "head-step(s)", levels[v] == 3 ? 1 : 2);
        else
            printf("  no prefetch");
        printf(": %.3f [%.3f-%.3f]\n", med, ratio[v][0], ratio[v][rounds - 1]);
    }
    free(K);
    free(V);
    free(table);
    return 0;
}
