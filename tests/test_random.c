/* Random problems against the float64 reference, both algorithms.
 *
 * Axes: b ∈ {1,2,3}, h_q ∈ {1,2,4,8} with h_kv dividing h_q, n_q and n_kv from
 * {1,2,7,16,17,64,100,129,257}, d_k and d_v from {1,3,8,16,33,64,80,128}, every mask.
 * The full product is too large: each axis deals its values from its own shuffled deck
 * (so every value comes up about equally often), problems too large for the time
 * budget shrink b then h_q, and any value left uncovered gets a problem of its own.
 * Also: every mask on n_q ≠ n_kv shapes, the weights of UNFUSED against the
 * reference's, and [b, n, h, d]-strided operands with offsets (host and cl_mem).
 *
 * Every problem prints its index and seed. CLATTN_TEST_SEED changes the whole sample;
 * CLATTN_TEST_CONFIG=k runs only random problem k (with the same CLATTN_TEST_SEED).
 * CLATTN_TEST_RANDOM_N=m draws m problems instead of 180 (1..180; every axis value is
 * still covered): CI's second pass with the GPU kernel family, whose programs take
 * PoCL twice as long to build, draws fewer. */
#include "testutil.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define N_RANDOM 180
#define MAX_CONFIGS (N_RANDOM + 64) /* room for every axis value (49) uncovered */
/* multiply-adds b·h_q·n_q·n_kv·(d_k+d_v) allowed per problem (the reference is serial) */
#define WORK_BUDGET 17000000.0

static const int64_t AX_B[] = {1, 2, 3};
static const int64_t AX_H[] = {1, 2, 4, 8};
static const int64_t AX_N[] = {1, 2, 7, 16, 17, 64, 100, 129, 257};
static const int64_t AX_D[] = {1, 3, 8, 16, 33, 64, 80, 128};
static const int64_t AX_MASK[] = {CLATTN_MASK_NONE, CLATTN_MASK_CAUSAL_TOP_LEFT,
                                  CLATTN_MASK_CAUSAL_BOTTOM_RIGHT, CLATTN_MASK_NO_SELF};
#define LEN(a) ((int)(sizeof(a) / sizeof((a)[0])))

typedef struct config {
    int64_t b, h_q, h_kv, n_q, n_kv, d_k, d_v;
    clattn_mask mask;
    uint32_t seed;
    float scale;  /* 0 = 1/√d_k */
    float q_amp;  /* Q = q_amp · gen(...) */
    bool weights; /* also compare UNFUSED's weights with the reference's */
} config;

static config g_random[MAX_CONFIGS];
static int g_n_random;

static uint32_t rnd(uint32_t *state)
{
    *state += 0x9E3779B9U;
    return tu_lowbias32(*state);
}

/* A shuffled deck of one axis' values, reshuffled when used up. */
typedef struct deck {
    const int64_t *vals;
    int n, pos, perm[16];
} deck;

static int64_t draw(deck *d, uint32_t *rs)
{
    if (d->pos == 0 || d->pos == d->n) {
        for (int i = 0; i < d->n; i++)
            d->perm[i] = i;
        for (int i = d->n - 1; i > 0; i--) {
            int j = (int)(rnd(rs) % (uint32_t)(i + 1)), t = d->perm[i];
            d->perm[i] = d->perm[j];
            d->perm[j] = t;
        }
        d->pos = 0;
    }
    return d->vals[d->perm[d->pos++]];
}

static double work(const config *c)
{
    return (double)c->b * c->h_q * c->n_q * c->n_kv * (double)(c->d_k + c->d_v);
}

static int64_t pick_h_kv(int64_t h_q, uint32_t *rs)
{
    int64_t divisors[4];
    int n = 0;
    for (int64_t h = 1; h <= h_q; h *= 2)
        divisors[n++] = h; /* h_q is a power of two */
    return divisors[rnd(rs) % (uint32_t)n];
}

static void finish_config(config *c, uint32_t *rs)
{
    while (work(c) > WORK_BUDGET && c->b > 1)
        c->b--;
    while (work(c) > WORK_BUDGET && c->h_q > 1)
        c->h_q /= 2;
    if (c->h_kv > c->h_q)
        c->h_kv = c->h_q;
    static const float scales[] = {0.0f, 0.0f, 0.125f, 0.7f};
    static const float amps[] = {0.5f, 1.0f, 1.0f, 3.0f};
    c->scale = scales[rnd(rs) % 4];
    c->q_amp = amps[rnd(rs) % 4];
    c->seed = rnd(rs);
}

/* Which values of one axis some config has. */
static bool covered(int64_t value, int axis)
{
    for (int i = 0; i < g_n_random; i++) {
        const config *c = &g_random[i];
        bool hit = false;
        switch (axis) {
        case 0: hit = c->b == value; break;
        case 1: hit = c->h_q == value; break;
        case 2: hit = c->n_q == value; break;
        case 3: hit = c->n_kv == value; break;
        case 4: hit = c->d_k == value; break;
        case 5: hit = c->d_v == value; break;
        case 6: hit = (int64_t)c->mask == value; break;
        case 7: hit = c->h_kv == value; break;
        }
        if (hit)
            return true;
    }
    return false;
}

static void make_configs(uint32_t seed, int n_draw)
{
    uint32_t rs = seed;
    deck db = {AX_B, LEN(AX_B), 0, {0}}, dh = {AX_H, LEN(AX_H), 0, {0}};
    deck dnq = {AX_N, LEN(AX_N), 0, {0}}, dnk = {AX_N, LEN(AX_N), 0, {0}};
    deck ddk = {AX_D, LEN(AX_D), 0, {0}};
    deck dm = {AX_MASK, LEN(AX_MASK), 0, {0}};
    g_n_random = 0;
    for (int i = 0; i < n_draw; i++) {
        config *c = &g_random[g_n_random++];
        c->b = draw(&db, &rs);
        c->h_q = draw(&dh, &rs);
        c->h_kv = pick_h_kv(c->h_q, &rs);
        c->n_q = draw(&dnq, &rs);
        c->n_kv = draw(&dnk, &rs);
        /* d_v is d_k or d_k's partner (a permutation of AX_D, so every d_v value still
         * appears): 16 (d_k, d_v) pairs instead of 64, each a program to compile (about a
         * second on a cold PoCL cache) */
        c->d_k = draw(&ddk, &rs);
        int dk_index = 0;
        while (AX_D[dk_index] != c->d_k)
            dk_index++;
        c->d_v = (rnd(&rs) & 1) ? c->d_k : AX_D[(dk_index + 3) % LEN(AX_D)];
        c->mask = (clattn_mask)draw(&dm, &rs);
        c->weights = (i % 5) == 0;
        finish_config(c, &rs);
    }
    /* values the shrinking (or the draw) left out get a small problem of their own */
    const struct {
        const int64_t *vals;
        int n;
    } axes[8] = {{AX_B, LEN(AX_B)}, {AX_H, LEN(AX_H)}, {AX_N, LEN(AX_N)},       {AX_N, LEN(AX_N)},
                 {AX_D, LEN(AX_D)}, {AX_D, LEN(AX_D)}, {AX_MASK, LEN(AX_MASK)}, {AX_H, LEN(AX_H)}};
    for (int axis = 0; axis < 8; axis++)
        for (int v = 0; v < axes[axis].n; v++) {
            int64_t val = axes[axis].vals[v];
            if (covered(val, axis) || g_n_random == MAX_CONFIGS)
                continue;
            config *c = &g_random[g_n_random++];
            *c = (config){1, 2, 1, 7, 17, 8, 16, CLATTN_MASK_NONE, 0, 0, 1, true};
            switch (axis) {
            case 0: c->b = val; break;
            case 1: c->h_q = val; break;
            case 2: c->n_q = val; break;
            case 3: c->n_kv = val; break;
            case 4: c->d_k = val; break;
            case 5: c->d_v = val; break;
            case 6: c->mask = (clattn_mask)val; break;
            case 7: c->h_q = 8, c->h_kv = val; break;
            }
            finish_config(c, &rs);
        }
}

static void describe(char *out, size_t cap, const char *kind, int index, const config *c)
{
    snprintf(out, cap,
             "%s #%d seed=0x%08x b=%lld h_q=%lld h_kv=%lld n_q=%lld n_kv=%lld d_k=%lld d_v=%lld "
             "mask=%s scale=%g q_amp=%g%s",
             kind, index, (unsigned)c->seed, (long long)c->b, (long long)c->h_q, (long long)c->h_kv,
             (long long)c->n_q, (long long)c->n_kv, (long long)c->d_k, (long long)c->d_v,
             tu_mask_name(c->mask), (double)c->scale, (double)c->q_amp,
             c->weights ? " +weights" : "");
}

static void make_problem(tu_problem *p, const config *c)
{
    tu_problem_init(p, c->b, c->h_q, c->h_kv, c->n_q, c->n_kv, c->d_k, c->d_v, c->seed,
                    c->seed ^ 0x5bd1e995U, c->seed ^ 0x27d4eb2fU, 0);
    for (int64_t i = 0; i < tu_count(&p->tq); i++)
        p->q[i] *= c->q_amp;
}

/* Both algorithms against the reference; with c->weights also UNFUSED's weights. */
static void run_config(const char *kind, int index, const config *c)
{
    char name[320], what[400];
    describe(name, sizeof name, kind, index, c);
    printf("%s\n", name);
    tu_problem p;
    make_problem(&p, c);
    clattn_attention_desc desc = clattn_attention_desc_default();
    desc.scale = c->scale;
    desc.mask = c->mask;
    float *ref_w = NULL;
    float *ref = tu_reference(&p, &desc, c->weights ? &ref_w : NULL);

    for (int a = 0; a < 2; a++) {
        float *o = tu_run(&p, &desc, tu_algorithms[a]);
        clattn_tensor to = tu_problem_o(&p, o);
        snprintf(what, sizeof what, "%s [%s] O", name, tu_algorithm_name(tu_algorithms[a]));
        TU_ASSERT_CLOSE(what, &to, NULL, ref, TU_TOL_DEFAULT);
        free(o);
    }
    if (c->weights) {
        float *w = tu_alloc((size_t)(p.b * p.h_q * p.n_q * p.n_kv), 12345.0f);
        clattn_tensor tw = clattn_tensor_host(w, p.b, p.h_q, p.n_q, p.n_kv);
        desc.weights = &tw;
        float *o = tu_run(&p, &desc, CLATTN_ALGORITHM_UNFUSED);
        clattn_tensor to = tu_problem_o(&p, o);
        snprintf(what, sizeof what, "%s [unfused with weights] O", name);
        TU_ASSERT_CLOSE(what, &to, NULL, ref, TU_TOL_DEFAULT);
        snprintf(what, sizeof what, "%s [unfused] weights", name);
        TU_ASSERT_CLOSE(what, &tw, NULL, ref_w, TU_TOL_DEFAULT);
        free(o);
        free(w);
    }
    free(ref);
    free(ref_w);
    tu_problem_free(&p);
}

START_TEST(random_problem)
{
    run_config("random", _i, &g_random[_i]);
}
END_TEST

START_TEST(sample_covers_every_axis_value)
{
    const struct {
        const char *name;
        const int64_t *vals;
        int n;
    } axes[8] = {{"b", AX_B, LEN(AX_B)},          {"h_q", AX_H, LEN(AX_H)},
                 {"n_q", AX_N, LEN(AX_N)},        {"n_kv", AX_N, LEN(AX_N)},
                 {"d_k", AX_D, LEN(AX_D)},        {"d_v", AX_D, LEN(AX_D)},
                 {"mask", AX_MASK, LEN(AX_MASK)}, {"h_kv", AX_H, LEN(AX_H)}};
    for (int axis = 0; axis < 8; axis++)
        for (int v = 0; v < axes[axis].n; v++)
            ck_assert_msg(covered(axes[axis].vals[v], axis),
                          "no random problem has %s = %lld (seed 0x%08x)", axes[axis].name,
                          (long long)axes[axis].vals[v], (unsigned)tu_seed());
    for (int i = 0; i < g_n_random; i++) {
        const config *c = &g_random[i];
        ck_assert_msg(c->h_q % c->h_kv == 0, "problem %d: h_kv %lld does not divide h_q %lld", i,
                      (long long)c->h_kv, (long long)c->h_q);
    }
}
END_TEST

/* ---- every mask on n_q ≠ n_kv ------------------------------------------------------- */

static const int64_t NONSQUARE[][4] = {
    /* n_q, n_kv, d_k, d_v */
    {1, 257, 64, 64}, {257, 1, 8, 3},   {2, 129, 33, 16}, {129, 2, 16, 33}, {7, 100, 80, 1},
    {100, 7, 3, 128}, {16, 17, 128, 8}, {17, 16, 1, 80},  {64, 7, 16, 16},  {2, 1, 8, 8},
};
#define N_NONSQUARE ((int)(sizeof NONSQUARE / sizeof NONSQUARE[0]))

START_TEST(nonsquare_every_mask)
{
    const int64_t *s = NONSQUARE[_i / 4];
    config c = {2, 4,    2,    s[0],         s[1], s[2], s[3], (clattn_mask)AX_MASK[_i % 4],
                0, 0.0f, 1.0f, (_i % 4) == 2};
    c.seed = tu_lowbias32(tu_seed() ^ (0xA5A5u + (uint32_t)_i));
    run_config("nonsquare", _i, &c);
}
END_TEST

/* ---- strided layouts: [b, n, h, d + pad] with offsets ------------------------------------ */

static const config STRIDED[] = {
    {2, 4, 2, 17, 33, 8, 16, CLATTN_MASK_NONE, 0, 0.0f, 1.0f, false},
    {1, 8, 1, 7, 100, 33, 3, CLATTN_MASK_CAUSAL_BOTTOM_RIGHT, 0, 0.0f, 1.0f, false},
    {3, 2, 2, 64, 1, 80, 64, CLATTN_MASK_NO_SELF, 0, 0.0f, 1.0f, false},
    {2, 1, 1, 129, 17, 3, 1, CLATTN_MASK_CAUSAL_TOP_LEFT, 0, 0.3f, 1.0f, false},
    {1, 4, 4, 100, 257, 64, 128, CLATTN_MASK_CAUSAL_TOP_LEFT, 0, 0.0f, 3.0f, false},
};
#define N_STRIDED ((int)(sizeof STRIDED / sizeof STRIDED[0]))

/* A [b, h, n, d] view stored as [b][n][h][d + pad] from `offset`, in a NaN-filled (or
 * `fill`-filled) array; copies the packed `src` into it when not NULL. */
static float *bnhd_array(const int64_t shape[4], int64_t pad, int64_t offset, float fill,
                         const float *src, clattn_tensor *view, size_t *len)
{
    const int64_t b = shape[0], h = shape[1], n = shape[2], d = shape[3], dp = d + pad;
    const int64_t strides[4] = {n * h * dp, dp, h * dp, 1};
    *len = (size_t)(offset + b * n * h * dp + 7);
    float *arr = tu_alloc(*len, fill);
    *view = tu_view(arr, shape, strides, offset);
    size_t i = 0;
    if (src)
        for (int64_t bb = 0; bb < b; bb++)
            for (int64_t hh = 0; hh < h; hh++)
                for (int64_t s = 0; s < n; s++)
                    for (int64_t dd = 0; dd < d; dd++)
                        *tu_at(view, bb, hh, s, dd) = src[i++];
    return arr;
}

/* Every element of arr outside the view still holds `fill`. */
static void assert_outside_untouched(const char *what, const float *arr, size_t len,
                                     const clattn_tensor *view, float fill)
{
    unsigned char *in = calloc(len, 1);
    ck_assert_ptr_nonnull(in);
    for (int64_t b = 0; b < view->shape[0]; b++)
        for (int64_t h = 0; h < view->shape[1]; h++)
            for (int64_t s = 0; s < view->shape[2]; s++)
                for (int64_t d = 0; d < view->shape[3]; d++)
                    in[tu_at(view, b, h, s, d) - (float *)view->host] = 1;
    for (size_t i = 0; i < len; i++)
        ck_assert_msg(in[i] || memcmp(&arr[i], &fill, sizeof fill) == 0,
                      "%s: element %zu outside the O view was written (%.9g, was %g)", what, i,
                      (double)arr[i], (double)fill);
    free(in);
}

START_TEST(strided_bnhd_with_offsets)
{
    config c = STRIDED[_i];
    c.seed = tu_lowbias32(tu_seed() ^ (0x5EEDu + (uint32_t)_i));
    char name[320], what[400];
    describe(name, sizeof name, "strided", _i, &c);
    printf("%s (layout [b][n][h][d+pad], offsets)\n", name);
    tu_problem p;
    make_problem(&p, &c);
    clattn_attention_desc desc = clattn_attention_desc_default();
    desc.scale = c.scale;
    desc.mask = c.mask;
    float *ref = tu_reference(&p, &desc, NULL);

    clattn_tensor q, k, v, o;
    size_t len[5] = {0, 0, 0, 0, 0};
    float *qa = bnhd_array(p.tq.shape, 3, 5, NAN, p.q, &q, &len[0]);
    float *ka = bnhd_array(p.tk.shape, 1, 11, NAN, p.k, &k, &len[1]);
    float *va = bnhd_array(p.tv.shape, 2, 17, NAN, p.v, &v, &len[2]);
    const int64_t o_shape[4] = {p.b, p.h_q, p.n_q, p.d_v};
    for (int via_buffers = 0; via_buffers < 2; via_buffers++)
        for (int a = 0; a < 2; a++) {
            float *oa = bnhd_array(o_shape, 3, 3, -7.0f, NULL, &o, &len[3]);
            desc.algorithm = tu_algorithms[a];
            snprintf(what, sizeof what, "%s [%s, %s] O", name, tu_algorithm_name(desc.algorithm),
                     via_buffers ? "cl_mem views, enqueue" : "host views");
            clattn_status st = via_buffers
                                   ? tu_attention_via_buffers(tu_ctx(), &desc, &q, &k, &v, &o, len)
                                   : clattn_attention(tu_ctx(), &desc, &q, &k, &v, &o);
            TU_ASSERT_OK(st, "%s", what);
            TU_ASSERT_CLOSE(what, &o, NULL, ref, TU_TOL_DEFAULT);
            assert_outside_untouched(what, oa, len[3], &o, -7.0f);
            free(oa);
        }
    free(qa);
    free(ka);
    free(va);
    free(ref);
    tu_problem_free(&p);
}
END_TEST

int main(void)
{
    int n_draw = N_RANDOM;
    const char *n_env = getenv("CLATTN_TEST_RANDOM_N");
    if (n_env && *n_env) {
        char *end = NULL;
        long n = strtol(n_env, &end, 10);
        if (*end != '\0' || n < 1 || n > N_RANDOM) {
            fprintf(stderr, "CLATTN_TEST_RANDOM_N=%s: a count of problems in 1..%d\n", n_env,
                    N_RANDOM);
            return EXIT_FAILURE;
        }
        n_draw = (int)n;
    }
    make_configs(tu_seed_init(0xC1A77E57u), n_draw);
    int first = 0, last = g_n_random;
    const char *only = getenv("CLATTN_TEST_CONFIG");
    if (only && *only) {
        first = atoi(only);
        last = first + 1;
        if (first < 0 || first >= g_n_random) {
            fprintf(stderr, "CLATTN_TEST_CONFIG=%s: random problems are 0..%d\n", only,
                    g_n_random - 1);
            return EXIT_FAILURE;
        }
    }
    printf("%d random problems, %d n_q != n_kv problems x 4 masks, %d strided layouts\n",
           g_n_random, N_NONSQUARE, N_STRIDED);

    Suite *s = suite_create("random");
    TCase *tc = tcase_create("random");
    tcase_add_test(tc, sample_covers_every_axis_value);
    tcase_add_loop_test(tc, random_problem, first, last);
    suite_add_tcase(s, tc);
    if (!(only && *only)) {
        tc = tcase_create("nonsquare");
        tcase_add_loop_test(tc, nonsquare_every_mask, 0, 4 * N_NONSQUARE);
        suite_add_tcase(s, tc);
        tc = tcase_create("strided");
        tcase_add_loop_test(tc, strided_bnhd_with_offsets, 0, N_STRIDED);
        suite_add_tcase(s, tc);
    }
    return tu_run_suite(s);
}
