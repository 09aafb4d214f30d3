#define _POSIX_C_SOURCE 200809L /* pthread_barrier_t, mkdtemp, clock_gettime */
/* Reliability: concurrency, determinism and repeated use.
 *
 *  - The library's thread rule (clattn.h): one clattn_context per host thread, contexts
 *    may share a device. N_THREADS pthreads each create their own context and run
 *    JOBS_PER_THREAD attention calls of mixed shapes (tails off the tiles, GQA, MQA,
 *    every mask, both algorithms, with and without weights) at the same time; every
 *    result must equal, bitwise, the same call run single-threaded beforehand, which
 *    must be within 1e-5 + 1e-5·|x| of clattn_reference_attention. Three rounds: the
 *    threads share a fresh program-binary cache folder (cold: they build and write the
 *    same files at once), then the same folder again (warm: they read them at once),
 *    then the cache off (every context builds from source).
 *  - Determinism: the same input on the same device gives bitwise identical output on
 *    repeated runs, through the blocking API, through the enqueue API on cl_mem
 *    buffers, and on a second context that builds its programs from source.
 *  - Repeated use: 10,000 calls of mixed small shapes (every algorithm, mask and
 *    weights choice) on one context, then 200 contexts created, used once and released
 *    (under ASan 2,000 and 50);
 *    host RSS (/proc/self/statm) may grow by less than RSS_BOUND_MB over each phase
 *    after a warm-up, and the live OpenCL objects (cl_intercept.c counts creates,
 *    retains and releases of every type) must be back at their post-warm-up count
 *    after each phase.
 *
 * Worker threads never call Check (its failures longjmp in CK_NOFORK mode, which must
 * happen on the test's own thread): they record statuses and messages, and the main
 * thread asserts. Seeds derive from the printed base seed (CLATTN_TEST_SEED). */
#include "cl_intercept.h"
#include "testutil.h"

#include <dirent.h>
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define N_THREADS 4
#define JOBS_PER_THREAD 20
#define N_ROUNDS 3
#define RSS_BOUND_MB 20.0
/* AddressSanitizer keeps freed memory in quarantine (RSS grows by design); its leak
 * checker covers what the RSS bound guards, so under ASan the numbers are only printed. */
#if defined(__SANITIZE_ADDRESS__)
#define UNDER_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define UNDER_ASAN 1
#endif
#endif
#ifndef UNDER_ASAN
#define UNDER_ASAN 0
#endif
/* under ASan (3x slower host code; the RSS bound is not checked there, the leak checker
 * and the live-object counts are) a fifth of the calls and a quarter of the contexts */
#define N_REPEAT_CALLS (UNDER_ASAN ? 2000 : 10000)
#define N_REPEAT_CONTEXTS (UNDER_ASAN ? 50 : 200)

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* ---- the jobs ------------------------------------------------------------------------ */

typedef struct shape {
    int64_t b, h_q, h_kv, n_q, n_kv, d_k, d_v;
} shape;

/* On CPUs the tiled kernels take 64 keys per step (fused up to 128) and up to 16·4
 * queries per work-group; fused streams K and V for n_q ≤ 16 (decode.cl). Every size here is off
 * those blocks somewhere. Head dims and query-count classes (which select the compiled
 * programs) come from few combinations, so that a cold OpenCL compiler cache costs
 * about 25 builds, not one per shape: (d_k, d_v) ∈ {(16,16), (33,17), (64,64)}, n_q ∈
 * {1, 7, 17..20, ≥ 33}. */
static const shape SHAPES[] = {
    {1, 1, 1, 1, 1, 16, 16},     /* the smallest problem */
    {1, 2, 2, 17, 65, 16, 16},   /* one query and one key past a block */
    {2, 4, 2, 33, 129, 33, 17},  /* GQA 2:1, head dims off 16 */
    {1, 4, 1, 65, 70, 64, 64},   /* MQA */
    {1, 2, 1, 7, 200, 33, 17},   /* decode: decode.cl streams K and V */
    {2, 1, 1, 100, 37, 33, 17},  /* n_kv inside one block */
    {1, 8, 2, 20, 20, 64, 64},   /* GQA 4:1 */
    {1, 3, 3, 129, 129, 16, 16}, /* odd head count, n one past two blocks */
    {1, 2, 2, 70, 3, 33, 17},    /* n_kv < n_q: bottom-right leaves empty rows */
    {3, 2, 1, 64, 64, 16, 16},   /* exactly one block of queries and of keys */
    {1, 4, 4, 1, 300, 64, 64},   /* single query, long keys */
    {1, 1, 1, 257, 64, 64, 64},  /* many queries, one key block */
};
#define N_SHAPES ((int)(sizeof SHAPES / sizeof SHAPES[0]))
#define N_JOBS (2 * N_SHAPES)

/* Job j: shape j/2 with algorithm j%2; the masks rotate so that every (mask, algorithm)
 * pair occurs three times; UNFUSED jobs of even shapes also return the weights. */
typedef struct job {
    shape s;
    clattn_mask mask;
    clattn_algorithm algorithm;
    bool weights;
    uint32_t seed;
} job;

static job make_job(int j)
{
    job r;
    const int s = j / 2, a = j % 2;
    r.s = SHAPES[s];
    r.algorithm = tu_algorithms[a];
    r.mask = (clattn_mask)((s + a) % 4);
    r.weights = r.algorithm == CLATTN_ALGORITHM_UNFUSED && s % 2 == 0;
    r.seed = tu_seed() + 0x1000u * (uint32_t)j;
    return r;
}

static void job_problem(const job *jb, tu_problem *p)
{
    const shape *s = &jb->s;
    tu_problem_init(p, s->b, s->h_q, s->h_kv, s->n_q, s->n_kv, s->d_k, s->d_v, jb->seed,
                    jb->seed + 1, jb->seed + 2, 0);
}

static size_t o_count(const shape *s)
{
    return (size_t)(s->b * s->h_q * s->n_q * s->d_v);
}

static size_t w_count(const shape *s)
{
    return (size_t)(s->b * s->h_q * s->n_q * s->n_kv);
}

static void job_name(const job *jb, char *buf, size_t cap)
{
    const shape *s = &jb->s;
    snprintf(buf, cap,
             "%s mask %s%s b=%lld h_q=%lld h_kv=%lld n_q=%lld n_kv=%lld d_k=%lld d_v=%lld "
             "seed %u",
             tu_algorithm_name(jb->algorithm), tu_mask_name(jb->mask),
             jb->weights ? " +weights" : "", (long long)s->b, (long long)s->h_q, (long long)s->h_kv,
             (long long)s->n_q, (long long)s->n_kv, (long long)s->d_k, (long long)s->d_v,
             (unsigned)jb->seed);
}

/* Runs the job on ctx into o (and w when the job wants weights). No Check calls: safe
 * on any thread. */
static clattn_status run_job(clattn_context *ctx, const job *jb, const tu_problem *p, float *o,
                             float *w)
{
    clattn_attention_desc d = clattn_attention_desc_default();
    d.mask = jb->mask;
    d.algorithm = jb->algorithm;
    clattn_tensor to = tu_problem_o(p, o);
    clattn_tensor tw = clattn_tensor_host(w, p->b, p->h_q, p->n_q, p->n_kv);
    d.weights = jb->weights ? &tw : NULL;
    return clattn_attention(ctx, &d, &p->tq, &p->tk, &p->tv, &to);
}

/* Fails the test unless got and exp (n floats of packed shape [d0, d1, d2, d3]) are
 * bitwise equal; reports the number of differing elements and the largest difference. */
static void assert_bitwise(const char *what, const float *got, const float *exp, size_t n,
                           int64_t d1, int64_t d2, int64_t d3)
{
    size_t n_bad = 0, worst = 0;
    double worst_diff = -1.0;
    for (size_t i = 0; i < n; i++) {
        if (memcmp(&got[i], &exp[i], sizeof(float)) == 0)
            continue;
        n_bad++;
        double diff = fabs((double)got[i] - (double)exp[i]);
        if (!(diff == diff))
            diff = INFINITY;
        if (diff > worst_diff) {
            worst_diff = diff;
            worst = i;
        }
    }
    if (n_bad == 0)
        return;
    const int64_t j = (int64_t)worst % d3, i = (int64_t)worst / d3 % d2,
                  h = (int64_t)worst / (d3 * d2) % d1, b = (int64_t)worst / (d3 * d2 * d1);
    ck_abort_msg("%s: %zu of %zu elements differ bitwise; worst at (b,h,i,j)=(%lld,%lld,%lld,%lld):"
                 " got %.9g, expected %.9g, |diff| %.3g",
                 what, n_bad, n, (long long)b, (long long)h, (long long)i, (long long)j,
                 (double)got[worst], (double)exp[worst], worst_diff);
}

/* ---- single-threaded baseline ----------------------------------------------------------- */

static tu_problem g_prob[N_JOBS];
static job g_job[N_JOBS];
static float *g_base_o[N_JOBS], *g_base_w[N_JOBS];
static bool g_have_base;

/* Every job once on the suite's context, each checked against the reference; kept for
 * the threaded rounds. */
static void ensure_baseline(void)
{
    if (g_have_base)
        return;
    const double t0 = now_s();
    for (int j = 0; j < N_JOBS; j++) {
        g_job[j] = make_job(j);
        job_problem(&g_job[j], &g_prob[j]);
        const shape *s = &g_job[j].s;
        g_base_o[j] = tu_alloc(o_count(s), 12345.0f);
        g_base_w[j] = tu_alloc(w_count(s), 12345.0f);
        char name[256];
        job_name(&g_job[j], name, sizeof name);
        TU_ASSERT_OK(run_job(tu_ctx(), &g_job[j], &g_prob[j], g_base_o[j], g_base_w[j]),
                     "baseline job %d: %s", j, name);

        clattn_attention_desc d = clattn_attention_desc_default();
        d.mask = g_job[j].mask;
        float *ref_w = NULL;
        float *ref_o = tu_reference(&g_prob[j], &d, g_job[j].weights ? &ref_w : NULL);
        char what[300];
        clattn_tensor to = tu_problem_o(&g_prob[j], g_base_o[j]);
        snprintf(what, sizeof what, "baseline job %d (%s): O vs reference", j, name);
        TU_ASSERT_CLOSE(what, &to, NULL, ref_o, TU_TOL_DEFAULT);
        if (ref_w) {
            clattn_tensor tw = clattn_tensor_host(g_base_w[j], s->b, s->h_q, s->n_q, s->n_kv);
            snprintf(what, sizeof what, "baseline job %d (%s): weights vs reference", j, name);
            TU_ASSERT_CLOSE(what, &tw, NULL, ref_w, TU_TOL_DEFAULT);
        }
        free(ref_o);
        free(ref_w);
    }
    g_have_base = true;
    printf("baseline: %d jobs single-threaded, each within tolerance of the reference (%.2f s)\n",
           N_JOBS, now_s() - t0);
}

static void free_baseline(void)
{
    if (!g_have_base)
        return;
    for (int j = 0; j < N_JOBS; j++) {
        tu_problem_free(&g_prob[j]);
        free(g_base_o[j]);
        free(g_base_w[j]);
    }
    g_have_base = false;
}

START_TEST(single_threaded_baseline)
{
    ensure_baseline();
}
END_TEST

/* ---- concurrent rounds ---------------------------------------------------------------- */

typedef struct worker {
    int index;
    const char *cache_dir; /* context option: a folder, or "off" */
    pthread_barrier_t *start;
    int job[JOBS_PER_THREAD];
    float *o[JOBS_PER_THREAD], *w[JOBS_PER_THREAD];
    clattn_status create_status, status[JOBS_PER_THREAD];
    char message[JOBS_PER_THREAD + 1][512]; /* [JOBS_PER_THREAD]: the create's */
    double seconds;
} worker;

static void *worker_main(void *arg)
{
    worker *wk = arg;
    clattn_context *ctx = NULL;
    clattn_context_options opt = {NULL, NULL, wk->cache_dir, CLATTN_BINARY_CACHE_ON};
    wk->create_status = clattn_context_create(&opt, &ctx);
    if (wk->create_status != CLATTN_SUCCESS)
        snprintf(wk->message[JOBS_PER_THREAD], sizeof wk->message[0], "%s",
                 clattn_last_error_message(NULL));
    /* every thread waits here, so the calls below overlap (a failed create still waits) */
    pthread_barrier_wait(wk->start);
    const double t0 = now_s();
    if (ctx) {
        for (int i = 0; i < JOBS_PER_THREAD; i++) {
            const int j = wk->job[i];
            wk->status[i] = run_job(ctx, &g_job[j], &g_prob[j], wk->o[i], wk->w[i]);
            if (wk->status[i] != CLATTN_SUCCESS)
                snprintf(wk->message[i], sizeof wk->message[0], "%s",
                         clattn_last_error_message(ctx));
        }
    }
    wk->seconds = now_s() - t0;
    clattn_context_release(ctx);
    return NULL;
}

static char g_cache_dir[4096];

static void remove_cache_dir(void)
{
    if (!g_cache_dir[0])
        return;
    DIR *dir = opendir(g_cache_dir);
    if (dir) {
        struct dirent *e;
        char path[4096 + 300];
        while ((e = readdir(dir)) != NULL) {
            if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
                continue;
            snprintf(path, sizeof path, "%s/%s", g_cache_dir, e->d_name);
            remove(path);
        }
        closedir(dir);
    }
    rmdir(g_cache_dir);
    g_cache_dir[0] = '\0';
}

static int count_cache_files(const char *suffix)
{
    DIR *dir = opendir(g_cache_dir);
    if (!dir)
        return 0;
    int n = 0;
    struct dirent *e;
    const size_t ls = strlen(suffix);
    while ((e = readdir(dir)) != NULL) {
        const size_t l = strlen(e->d_name);
        if (l >= ls && strcmp(e->d_name + l - ls, suffix) == 0)
            n++;
    }
    closedir(dir);
    return n;
}

/* Files in the cache folder other than finished .bin files (left-over temporaries). */
static int count_stray_files(void)
{
    DIR *dir = opendir(g_cache_dir);
    if (!dir)
        return 0;
    int n = 0;
    struct dirent *e;
    while ((e = readdir(dir)) != NULL) {
        const size_t l = strlen(e->d_name);
        if (strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0 &&
            !(l > 4 && strcmp(e->d_name + l - 4, ".bin") == 0))
            n++;
    }
    closedir(dir);
    return n;
}

/* Round 0: a fresh shared cache folder (cold); 1: the same folder (warm); 2: cache off. */
START_TEST(threads_own_contexts)
{
    static const char *const round_name[N_ROUNDS] = {"shared cache folder, cold",
                                                     "shared cache folder, warm", "cache off"};
    ensure_baseline();
    if (_i == 0) {
        remove_cache_dir();
        snprintf(g_cache_dir, sizeof g_cache_dir, "/tmp/clattn_test_threads.XXXXXX");
        ck_assert_msg(mkdtemp(g_cache_dir) != NULL, "mkdtemp failed");
    }
    ck_assert_msg(_i == 2 || g_cache_dir[0], "round %d needs round 0's cache folder", _i);

    static worker wk[N_THREADS];
    pthread_barrier_t start;
    ck_assert_int_eq(pthread_barrier_init(&start, NULL, N_THREADS), 0);
    for (int t = 0; t < N_THREADS; t++) {
        memset(&wk[t], 0, sizeof wk[t]);
        wk[t].index = t;
        wk[t].cache_dir = _i == 2 ? "off" : g_cache_dir;
        wk[t].start = &start;
        for (int i = 0; i < JOBS_PER_THREAD; i++) {
            /* 5 is prime to N_JOBS: 20 distinct jobs per thread, each thread its own order */
            const int j = (t * 7 + i * 5) % N_JOBS;
            wk[t].job[i] = j;
            wk[t].o[i] = tu_alloc(o_count(&g_job[j].s), 12345.0f);
            wk[t].w[i] = tu_alloc(w_count(&g_job[j].s), 12345.0f);
        }
    }
    const double t0 = now_s();
    pthread_t tid[N_THREADS];
    for (int t = 0; t < N_THREADS; t++)
        ck_assert_int_eq(pthread_create(&tid[t], NULL, worker_main, &wk[t]), 0);
    for (int t = 0; t < N_THREADS; t++)
        ck_assert_int_eq(pthread_join(tid[t], NULL), 0);
    pthread_barrier_destroy(&start);
    printf("round %d (%s): %d threads x %d calls in %.2f s (calls per thread:", _i, round_name[_i],
           N_THREADS, JOBS_PER_THREAD, now_s() - t0);
    for (int t = 0; t < N_THREADS; t++)
        printf(" %.2f s", wk[t].seconds);
    printf(")");
    if (_i != 2)
        printf("; cache folder holds %d .bin, %d stray files", count_cache_files(".bin"),
               count_stray_files());
    printf("\n");
    if (_i != 2)
        ck_assert_msg(count_stray_files() == 0,
                      "round %d: %d temporary files left in the cache folder %s", _i,
                      count_stray_files(), g_cache_dir);

    for (int t = 0; t < N_THREADS; t++) {
        ck_assert_msg(wk[t].create_status == CLATTN_SUCCESS,
                      "round %d thread %d: clattn_context_create: %s: %s", _i, t,
                      clattn_status_string(wk[t].create_status), wk[t].message[JOBS_PER_THREAD]);
        for (int i = 0; i < JOBS_PER_THREAD; i++) {
            const int j = wk[t].job[i];
            const shape *s = &g_job[j].s;
            char name[256], what[400];
            job_name(&g_job[j], name, sizeof name);
            ck_assert_msg(wk[t].status[i] == CLATTN_SUCCESS,
                          "round %d thread %d call %d (job %d: %s): status %d (%s): %s", _i, t, i,
                          j, name, (int)wk[t].status[i], clattn_status_string(wk[t].status[i]),
                          wk[t].message[i]);
            snprintf(what, sizeof what, "round %d thread %d call %d (job %d: %s): O", _i, t, i, j,
                     name);
            assert_bitwise(what, wk[t].o[i], g_base_o[j], o_count(s), s->h_q, s->n_q, s->d_v);
            if (g_job[j].weights) {
                snprintf(what, sizeof what, "round %d thread %d call %d (job %d: %s): weights", _i,
                         t, i, j, name);
                assert_bitwise(what, wk[t].w[i], g_base_w[j], w_count(s), s->h_q, s->n_q, s->n_kv);
            }
            free(wk[t].o[i]);
            free(wk[t].w[i]);
            wk[t].o[i] = wk[t].w[i] = NULL;
        }
    }
    if (_i == N_ROUNDS - 1)
        remove_cache_dir();
}
END_TEST

/* ---- determinism ------------------------------------------------------------------------ */

#define N_DET_REPEAT 4
static const int DET_SHAPES[] = {2, 3, 4, 7, 10};
#define N_DET_SHAPES ((int)(sizeof DET_SHAPES / sizeof DET_SHAPES[0]))

/* Loop index: shape DET_SHAPES[_i / 2] with algorithm _i % 2 (its job of the table). */
START_TEST(deterministic_repeats)
{
    const int j = 2 * DET_SHAPES[_i / 2] + _i % 2;
    const job jb = make_job(j);
    const shape *s = &jb.s;
    tu_problem p;
    job_problem(&jb, &p);
    char name[256], what[400];
    job_name(&jb, name, sizeof name);
    const size_t no = o_count(s), nw = w_count(s);

    float *o0 = tu_alloc(no, 12345.0f), *w0 = tu_alloc(nw, 12345.0f);
    TU_ASSERT_OK(run_job(tu_ctx(), &jb, &p, o0, w0), "job %d: %s", j, name);
    float *o = tu_alloc(no, 12345.0f), *w = tu_alloc(nw, 12345.0f);

    /* the blocking API, again and again */
    for (int r = 1; r < N_DET_REPEAT; r++) {
        tu_fill_value(o, no, 12345.0f);
        tu_fill_value(w, nw, 12345.0f);
        TU_ASSERT_OK(run_job(tu_ctx(), &jb, &p, o, w), "job %d repeat %d: %s", j, r, name);
        snprintf(what, sizeof what, "job %d (%s), blocking repeat %d: O", j, name, r);
        assert_bitwise(what, o, o0, no, s->h_q, s->n_q, s->d_v);
        if (jb.weights) {
            snprintf(what, sizeof what, "job %d (%s), blocking repeat %d: weights", j, name, r);
            assert_bitwise(what, w, w0, nw, s->h_q, s->n_q, s->n_kv);
        }
    }

    /* the enqueue API on cl_mem copies of the same arrays */
    clattn_attention_desc d = clattn_attention_desc_default();
    d.mask = jb.mask;
    d.algorithm = jb.algorithm;
    clattn_tensor to = tu_problem_o(&p, o);
    clattn_tensor tw = clattn_tensor_host(w, p.b, p.h_q, p.n_q, p.n_kv);
    d.weights = jb.weights ? &tw : NULL;
    const size_t len[5] = {(size_t)tu_count(&p.tq), (size_t)tu_count(&p.tk),
                           (size_t)tu_count(&p.tv), no, nw};
    for (int r = 0; r < N_DET_REPEAT; r++) {
        tu_fill_value(o, no, 12345.0f);
        tu_fill_value(w, nw, 12345.0f);
        TU_ASSERT_OK(tu_attention_via_buffers(tu_ctx(), &d, &p.tq, &p.tk, &p.tv, &to, len),
                     "job %d enqueue %d: %s", j, r, name);
        snprintf(what, sizeof what, "job %d (%s), enqueue run %d vs blocking: O", j, name, r);
        assert_bitwise(what, o, o0, no, s->h_q, s->n_q, s->d_v);
        if (jb.weights) {
            snprintf(what, sizeof what, "job %d (%s), enqueue run %d vs blocking: weights", j, name,
                     r);
            assert_bitwise(what, w, w0, nw, s->h_q, s->n_q, s->n_kv);
        }
    }

    /* a second context on the same device, building from source (no binary cache) */
    clattn_context *fresh = NULL;
    const clattn_context_options opt = {NULL, NULL, "off", CLATTN_BINARY_CACHE_AUTO};
    clattn_status st = clattn_context_create(&opt, &fresh);
    ck_assert_msg(st == CLATTN_SUCCESS, "clattn_context_create: %s: %s", clattn_status_string(st),
                  clattn_last_error_message(NULL));
    tu_fill_value(o, no, 12345.0f);
    tu_fill_value(w, nw, 12345.0f);
    st = run_job(fresh, &jb, &p, o, w);
    char msg[512];
    snprintf(msg, sizeof msg, "%s", clattn_last_error_message(fresh));
    clattn_context_release(fresh);
    ck_assert_msg(st == CLATTN_SUCCESS, "job %d (%s) on a second context: %s: %s", j, name,
                  clattn_status_string(st), msg);
    snprintf(what, sizeof what, "job %d (%s), second context vs first: O", j, name);
    assert_bitwise(what, o, o0, no, s->h_q, s->n_q, s->d_v);
    if (jb.weights) {
        snprintf(what, sizeof what, "job %d (%s), second context vs first: weights", j, name);
        assert_bitwise(what, w, w0, nw, s->h_q, s->n_q, s->n_kv);
    }
    printf("deterministic: job %d (%s): %d blocking + %d enqueue runs + a second context, "
           "bitwise equal\n",
           j, name, N_DET_REPEAT, N_DET_REPEAT);

    free(o0);
    free(w0);
    free(o);
    free(w);
    tu_problem_free(&p);
}
END_TEST

/* ---- repeated use: host memory ------------------------------------------------------------ */

static double rss_mb(void)
{
    FILE *f = fopen("/proc/self/statm", "r");
    ck_assert_msg(f != NULL, "cannot open /proc/self/statm");
    unsigned long size = 0, resident = 0;
    const int n = fscanf(f, "%lu %lu", &size, &resident);
    fclose(f);
    ck_assert_msg(n == 2, "cannot parse /proc/self/statm");
    return (double)resident * (double)sysconf(_SC_PAGESIZE) / (1024.0 * 1024.0);
}

/* Small shapes for the repeated calls: cheap, off the blocks like the jobs above, and
 * with the jobs' head dims and query-count classes (no new programs to build). */
static const shape SMALL[] = {
    {1, 1, 1, 1, 1, 16, 16},   {1, 2, 1, 7, 9, 33, 17},   {2, 2, 2, 17, 17, 16, 16},
    {1, 4, 2, 33, 65, 33, 17}, {1, 2, 2, 1, 130, 64, 64}, {1, 1, 1, 65, 65, 16, 16},
    {2, 1, 1, 20, 12, 64, 64}, {1, 2, 2, 40, 20, 64, 64},
};
#define N_SMALL ((int)(sizeof SMALL / sizeof SMALL[0]))
#define N_SMALL_VARIANTS (N_SMALL * 2 * 4 * 2) /* shape x algorithm x mask x weights */

typedef struct small_set {
    tu_problem p[N_SMALL];
    float *o[N_SMALL], *w[N_SMALL];
} small_set;

static void small_init(small_set *ss)
{
    for (int s = 0; s < N_SMALL; s++) {
        const shape *sh = &SMALL[s];
        const uint32_t seed = tu_seed() + 0x100000u + 0x100u * (uint32_t)s;
        tu_problem_init(&ss->p[s], sh->b, sh->h_q, sh->h_kv, sh->n_q, sh->n_kv, sh->d_k, sh->d_v,
                        seed, seed + 1, seed + 2, 0);
        ss->o[s] = tu_alloc(o_count(sh), 0.0f);
        ss->w[s] = tu_alloc(w_count(sh), 0.0f);
    }
}

static void small_free(small_set *ss)
{
    for (int s = 0; s < N_SMALL; s++) {
        tu_problem_free(&ss->p[s]);
        free(ss->o[s]);
        free(ss->w[s]);
    }
}

/* Variant v of the small calls (every shape, algorithm, mask and weights choice); with
 * `check`, its O is compared with the reference. */
static void small_call(clattn_context *ctx, small_set *ss, int v, bool check)
{
    const int s = v % N_SMALL, a = v / N_SMALL % 2, m = v / (2 * N_SMALL) % 4,
              wt = v / (8 * N_SMALL) % 2;
    job jb;
    jb.s = SMALL[s];
    jb.algorithm = tu_algorithms[a];
    jb.mask = (clattn_mask)m;
    jb.weights = wt && jb.algorithm == CLATTN_ALGORITHM_UNFUSED;
    jb.seed = 0;
    const shape *sh = &SMALL[s];
    if (check)
        tu_fill_value(ss->o[s], o_count(sh), 12345.0f);
    clattn_status st = run_job(ctx, &jb, &ss->p[s], ss->o[s], ss->w[s]);
    char name[256];
    job_name(&jb, name, sizeof name);
    if (st != CLATTN_SUCCESS)
        ck_abort_msg("small call %d (%s): status %d (%s): %s", v, name, (int)st,
                     clattn_status_string(st), clattn_last_error_message(ctx));
    if (check) {
        clattn_attention_desc d = clattn_attention_desc_default();
        d.mask = jb.mask;
        float *ref = tu_reference(&ss->p[s], &d, NULL);
        clattn_tensor to = tu_problem_o(&ss->p[s], ss->o[s]);
        char what[300];
        snprintf(what, sizeof what, "small call %d (%s): O vs reference", v, name);
        TU_ASSERT_CLOSE(what, &to, NULL, ref, TU_TOL_DEFAULT);
        free(ref);
    }
}

static void contexts_once(small_set *ss, int n, int first_variant, bool check)
{
    for (int c = 0; c < n; c++) {
        clattn_context *ctx = NULL;
        clattn_status st = clattn_context_create(NULL, &ctx);
        ck_assert_msg(st == CLATTN_SUCCESS, "context %d: clattn_context_create: %s: %s", c,
                      clattn_status_string(st), clattn_last_error_message(NULL));
        small_call(ctx, ss, (first_variant + c) % N_SMALL_VARIANTS, check);
        clattn_context_release(ctx);
    }
}

START_TEST(repeated_use_host_memory)
{
    small_set ss;
    small_init(&ss);
    const double t0 = now_s();
    /* warm-up: every variant twice (every program built; the first time checked against
       the reference), a few contexts */
    for (int v = 0; v < 2 * N_SMALL_VARIANTS; v++)
        small_call(tu_ctx(), &ss, v, v < N_SMALL_VARIANTS);
    contexts_once(&ss, 10, 0, true);
    const double rss0 = rss_mb(), t1 = now_s();
    const cli_counts live0 = cli_counts_now(); /* the suite's context with its programs */

    for (int c = 0; c < N_REPEAT_CALLS; c++)
        small_call(tu_ctx(), &ss, c % N_SMALL_VARIANTS, false);
    const double rss1 = rss_mb(), t2 = now_s();
    const cli_counts live1 = cli_counts_now();

    contexts_once(&ss, N_REPEAT_CONTEXTS, 0, false);
    const double rss2 = rss_mb(), t3 = now_s();
    const cli_counts live2 = cli_counts_now();
    char diff[256];
    ck_assert_msg(cli_counts_equal(&live0, &live1, diff, sizeof diff),
                  "live OpenCL objects after %d attention calls differ from before: %s",
                  N_REPEAT_CALLS, diff);
    ck_assert_msg(cli_counts_equal(&live1, &live2, diff, sizeof diff),
                  "live OpenCL objects after %d context create/use/release cycles differ from "
                  "before: %s",
                  N_REPEAT_CONTEXTS, diff);
    printf("live OpenCL objects: mem %ld, kernel %ld, program %ld, event %ld, queue %ld, "
           "context %ld before and after both phases\n",
           live0.live[CLI_MEM], live0.live[CLI_KERNEL], live0.live[CLI_PROGRAM],
           live0.live[CLI_EVENT], live0.live[CLI_QUEUE], live0.live[CLI_CONTEXT]);

    printf("host RSS: %.1f MB after warm-up (%.2f s); %.1f MB after %d calls (%+.2f MB, "
           "%.2f s); %.1f MB after %d contexts created, used once, released (%+.2f MB, %.2f s); "
           "bound %+.0f MB per phase\n",
           rss0, t1 - t0, rss1, N_REPEAT_CALLS, rss1 - rss0, t2 - t1, rss2, N_REPEAT_CONTEXTS,
           rss2 - rss1, t3 - t2, RSS_BOUND_MB);
    small_free(&ss);
    if (UNDER_ASAN) {
        printf("host RSS bound not checked under AddressSanitizer (quarantine)\n");
        return;
    }
    ck_assert_msg(rss1 - rss0 < RSS_BOUND_MB,
                  "host RSS grew by %.2f MB over %d attention calls (bound %.0f MB)", rss1 - rss0,
                  N_REPEAT_CALLS, RSS_BOUND_MB);
    ck_assert_msg(rss2 - rss1 < RSS_BOUND_MB,
                  "host RSS grew by %.2f MB over %d context create/use/release cycles (bound "
                  "%.0f MB)",
                  rss2 - rss1, N_REPEAT_CONTEXTS, RSS_BOUND_MB);
}
END_TEST

/* The process's first contexts, created by 8 threads at once before any other OpenCL
 * call (the library serialises device discovery; PoCL 3.1 crashes without that). Run
 * from main() before the suite's own context exists; the test below checks it. */
#define N_FIRST 8
static clattn_status g_first_status[N_FIRST];
static char g_first_message[N_FIRST][256];

static void *first_context_main(void *arg)
{
    const int t = (int)(intptr_t)arg;
    clattn_context *c = NULL;
    g_first_status[t] = clattn_context_create(NULL, &c);
    snprintf(g_first_message[t], sizeof g_first_message[t], "%s", clattn_last_error_message(NULL));
    clattn_context_release(c);
    return NULL;
}

static void create_first_contexts_concurrently(void)
{
    pthread_t tid[N_FIRST];
    for (int t = 0; t < N_FIRST; t++)
        if (pthread_create(&tid[t], NULL, first_context_main, (void *)(intptr_t)t) != 0)
            g_first_status[t] = CLATTN_ERROR_OUT_OF_HOST_MEMORY;
    for (int t = 0; t < N_FIRST; t++)
        pthread_join(tid[t], NULL);
}

START_TEST(first_contexts_created_concurrently)
{
    for (int t = 0; t < N_FIRST; t++)
        ck_assert_msg(g_first_status[t] == CLATTN_SUCCESS,
                      "thread %d of %d creating the process's first contexts: %s (%s)", t, N_FIRST,
                      clattn_status_string(g_first_status[t]), g_first_message[t]);
}
END_TEST

int main(void)
{
    create_first_contexts_concurrently();
    tu_seed_init(0x7E57ADu);
    Suite *s = suite_create("threads");
    TCase *tc = tcase_create("threads");
    tcase_add_test(tc, first_contexts_created_concurrently);
    tcase_add_test(tc, single_threaded_baseline);
    tcase_add_loop_test(tc, threads_own_contexts, 0, N_ROUNDS);
    suite_add_tcase(s, tc);
    tc = tcase_create("determinism");
    tcase_add_loop_test(tc, deterministic_repeats, 0, 2 * N_DET_SHAPES);
    suite_add_tcase(s, tc);
    tc = tcase_create("repeated_use");
    tcase_add_test(tc, repeated_use_host_memory);
    suite_add_tcase(s, tc);
    const int rc = tu_run_suite(s);
    free_baseline();
    remove_cache_dir();
    return rc;
}
