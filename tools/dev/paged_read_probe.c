/* paged_read_probe.c — how fast this CPU reads a K/V cache contiguous, paged head by head,
 * and paged page by page (dev-time only; not part of the library or its tests).
 *
 * The question behind decode.cl's NH (KV heads per work-item): a paged pool laid out
 * [num_pages, h_kv, page_size, d] read one KV head at a time, as one work-item per head
 * does, jumps to a scattered piece of page_size · d floats per page (8 KiB at 16 keys, d 128,
 * float32); read page by page with all heads (NH = h_kv), each page is one stretch of
 * h_kv pieces. Two threads (the machine's cores) sum K and V (8 KV heads × 32768 keys ×
 * 128 floats each, 128 MiB apiece), pages shuffled as `clattn bench`'s pageN shapes
 * shuffle them; each of 6 rounds times the three orders without and with software
 * prefetch of the rows 2 steps (32 keys) ahead.
 *
 * Build and run:
 *   gcc -O2 -mavx2 -mfma -pthread tools/dev/paged_read_probe.c -o /tmp/paged_read_probe
 *   /tmp/paged_read_probe
 * (x86 with AVX2; ms and GB/s per order and round; compare within a round: the machine's
 * memory speed drifts between minutes.)
 */
#define _GNU_SOURCE
#include <immintrin.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

enum { HKV = 8, NKV = 32768, D = 128, PS = 16, NPAGES = NKV / PS };
enum order { CONTIGUOUS, HEAD_BY_HEAD, PAGE_BY_PAGE };
static float *K, *V;
static int table[NPAGES];
static enum order order;
static int prefetch;

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* element offset of key j of KV head hk: [h_kv, n_kv, d], or the pool [pages, h_kv, PS, d] */
static long row(int hk, long j)
{
    if (order == CONTIGUOUS)
        return ((long)hk * NKV + j) * D;
    return (((long)table[j / PS] * HKV + hk) * PS + j % PS) * D;
}

static void read_step(int hk, long j0, __m256 *acc)
{
    if (prefetch && j0 + 32 < NKV)
        for (int u = 0; u < 16; u++)
            for (int c = 0; c < D; c += 16) {
                __builtin_prefetch(K + row(hk, j0 + 32 + u) + c);
                __builtin_prefetch(V + row(hk, j0 + 32 + u) + c);
            }
    for (int u = 0; u < 16; u++) {
        const float *kp = K + row(hk, j0 + u), *vp = V + row(hk, j0 + u);
        for (int c = 0; c < D; c += 8) {
            acc[0] = _mm256_add_ps(acc[0], _mm256_load_ps(kp + c));
            acc[1] = _mm256_add_ps(acc[1], _mm256_load_ps(vp + c));
        }
    }
}

static void *work(void *arg)
{
    const long t = (long)arg;
    __m256 acc[2] = {_mm256_setzero_ps(), _mm256_setzero_ps()};
    if (order == PAGE_BY_PAGE) /* thread t: every other page, all heads of each */
        for (long j0 = t * 16; j0 < NKV; j0 += 32)
            for (int hk = 0; hk < HKV; hk++)
                read_step(hk, j0, acc);
    else /* thread t: every other head, all its keys */
        for (int hk = (int)t; hk < HKV; hk += 2)
            for (long j0 = 0; j0 < NKV; j0 += 16)
                read_step(hk, j0, acc);
    float o[8];
    _mm256_storeu_ps(o, _mm256_add_ps(acc[0], acc[1]));
    return (void *)(long)(o[0] > 1e30f); /* (keeps the sums) */
}

int main(void)
{
    const size_t bytes = (size_t)HKV * NKV * D * sizeof(float);
    K = aligned_alloc(4096, bytes);
    V = aligned_alloc(4096, bytes);
    if (!K || !V)
        return 1;
    memset(K, 0, bytes);
    memset(V, 0, bytes);
    for (int i = 0; i < NPAGES; i++)
        table[i] = i;
    unsigned seed = 5; /* the shuffle of clattn bench's pageN shapes */
    for (int i = NPAGES - 1; i > 0; i--) {
        seed = seed * 1664525u + 1013904223u;
        const int j = (int)((seed >> 8) % (unsigned)(i + 1)), x = table[i];
        table[i] = table[j];
        table[j] = x;
    }
    static const char *names[3] = {"contiguous", "paged, head by head", "paged, page by page"};
    for (int round = 0; round < 6; round++)
        for (int m = 0; m < 6; m++) {
            order = (enum order)(m % 3);
            prefetch = m / 3;
            const double t0 = now();
            pthread_t th[2];
            for (long i = 0; i < 2; i++)
                pthread_create(&th[i], NULL, work, (void *)i);
            for (int i = 0; i < 2; i++)
                pthread_join(th[i], NULL);
            const double dt = now() - t0;
            printf("round %d  %-20s %s: %6.2f ms  %5.1f GB/s\n", round, names[order],
                   prefetch ? "prefetch 2 steps" : "no prefetch     ", dt * 1e3,
                   2.0 * (double)bytes / dt / 1e9);
        }
    free(K);
    free(V);
    return 0;
}
