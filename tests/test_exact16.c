/* Exact checks of 16-bit storage and of the merge, written against the kinds of kernel bug
 * that a tolerance-based sweep cannot see (issue 21; tools/dev/mutants.txt lists the
 * planted bugs these tests kill). test_exact holds the score terms, the softmax and the
 * half arithmetic; this file the conversions, loads, stores and the merge:
 *
 *  - conversions: the public clattn_f32_to_f16 / clattn_f32_to_bf16 (and the widenings)
 *    bit for bit against a round-to-nearest-even oracle written here (nearest of the two
 *    neighbouring 16-bit values by binary search over the ordered bit patterns, ties to
 *    the even pattern, overflow past the largest finite value's half-ulp to ±inf), over
 *    every finite 16-bit value, the midpoints (ties), one float32 ulp either side of them
 *    (near-ties), subnormals, overflow, infinities and NaN payloads;
 *  - 16-bit stores on the device, bit for bit against the same oracle: clattn_merge's
 *    output, and O of both algorithms (fused decode, fused tiled, unfused) routed
 *    exactly (Q = K = 0 and a window (0, 0): each row sees one key, so O = V in float32
 *    before the store), and the public weighted sum;
 *  - 16-bit loads on the device: every float16 and bfloat16 pattern as V (O float32 must
 *    be its exact widening), and as Q or K (one visible key per row: the LSE is the score,
 *    exactly), with dense and strided views;
 *  - clattn_merge with parts whose LSE is −∞ holding NaN or ±inf in O, at every position,
 *    normalisation and the LSE's log; float64 LSEs (parts and output, mixed with float32)
 *    where the device has cl_khr_fp64.
 *
 * Every device test runs with tu_small_blocking() (16-key tiles, several work-items per
 * group) or the built-in blocking, as it says. Bit for bit throughout but for the merge's
 * values, which pass through exp and log (1e-6 absolute + 1e-6 relative, the 16-bit
 * outputs within their rounding; stated where checked); seeds:
 * printed, CLATTN_TEST_SEED overrides the base seed (only the random fills). */
#include "testutil.h"

#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---- bits ------------------------------------------------------------------------------ */

static uint32_t f32_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

static float bits_f32(uint32_t u)
{
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* ---- the round-to-nearest-even oracle -------------------------------------------------- */

typedef struct fmt16 {
    const char *name;
    clattn_dtype dtype;
    uint16_t top;    /* largest finite positive pattern */
    uint16_t inf;    /* +inf pattern */
    double overflow; /* the value the pattern after `top` stands for when rounding */
} fmt16;

static const fmt16 F16 = {"float16", CLATTN_FLOAT16, 0x7bff, 0x7c00, 65536.0};
static const fmt16 BF16 = {"bfloat16", CLATTN_BFLOAT16, 0x7f7f, 0x7f80, 0x1p128};

/* The value of a non-negative finite pattern, exact in double. */
static double value16(const fmt16 *f, uint16_t h)
{
    if (f->dtype == CLATTN_BFLOAT16)
        return (double)bits_f32((uint32_t)h << 16);
    const int e = (h >> 10) & 0x1f, m = h & 0x3ff;
    return e == 0 ? ldexp(m, -24) : ldexp(1024 + m, e - 25);
}

static bool is_nan16(const fmt16 *f, uint16_t h)
{
    return (h & 0x7fffu) > f->inf;
}

/* The widening of any pattern (NaN for NaN patterns). */
static double widen16(const fmt16 *f, uint16_t h)
{
    if (is_nan16(f, h))
        return NAN;
    const double v = (h & 0x7fffu) == f->inf ? INFINITY : value16(f, h & 0x7fffu);
    return (h & 0x8000u) ? -v : v;
}

/* The pattern nearest to x, ties to the even pattern; 0xffff stands for "a NaN". */
static uint16_t rne16(const fmt16 *f, float x)
{
    if (isnan(x))
        return 0xffffu;
    const uint16_t sign = signbit(x) ? 0x8000u : 0u;
    const double a = fabs((double)x);
    if (isinf(x))
        return (uint16_t)(sign | f->inf);
    unsigned lo = 0, hi = f->top; /* the largest pattern whose value is ≤ a */
    while (lo < hi) {
        const unsigned mid = (lo + hi + 1) / 2;
        if (value16(f, (uint16_t)mid) <= a)
            lo = mid;
        else
            hi = mid - 1;
    }
    const double below = value16(f, (uint16_t)lo);
    const double above = lo == f->top ? f->overflow : value16(f, (uint16_t)(lo + 1));
    /* 2a against below + above: both exact in double */
    const double twice = 2.0 * a, sum = below + above;
    unsigned r = twice < sum ? lo : twice > sum ? lo + 1 : (lo % 2 == 0 ? lo : lo + 1);
    if (r > f->top)
        r = f->inf;
    return (uint16_t)(sign | r);
}

/* ---- value lists ------------------------------------------------------------------------- */

typedef struct vlist {
    float *v;
    size_t n, cap;
} vlist;

static void push(vlist *l, float x)
{
    if (l->n == l->cap) {
        l->cap = l->cap ? 2 * l->cap : 1024;
        l->v = realloc(l->v, l->cap * sizeof(float));
        ck_assert_msg(l->v != NULL, "out of memory");
    }
    l->v[l->n++] = x;
}

/* NaN payloads (quiet and signalling, both signs) and the infinities. */
static void push_specials(vlist *l)
{
    static const uint32_t nans[] = {0x7fc00000u, 0xffc00000u, 0x7fffffffu, 0xffffffffu,
                                    0x7f808000u, 0x7f800001u, 0x7fa00000u, 0xff800001u};
    for (size_t i = 0; i < sizeof nans / sizeof nans[0]; i++)
        push(l, bits_f32(nans[i]));
    push(l, INFINITY);
    push(l, -INFINITY);
    push(l, FLT_MAX);
    push(l, -FLT_MAX);
    push(l, 1.000732421875f); /* the case: float16 0x3c01, toward zero 0x3c00 */
}

/* For every `step`-th finite positive pattern p (and the last few): its value, the
 * midpoint to the next value (a tie), one float32 ulp either side of the midpoint
 * (near-ties) and of the value; both signs. With `f32_subnormals` false, values that are
 * float32 subnormals (or −0) are left out (device arithmetic may flush them). */
static void push_grid(vlist *l, const fmt16 *f, unsigned step, bool f32_subnormals)
{
    for (unsigned p = 0; p <= f->top; p++) {
        if (p % step != 0 && p + 4 <= f->top && p > 8)
            continue;
        const double v = value16(f, (uint16_t)p);
        const double next = p == f->top ? f->overflow : value16(f, (uint16_t)(p + 1));
        const float mid = (float)((v + next) / 2.0); /* exact: one more bit than the format */
        const float c[5] = {(float)v, mid, nextafterf(mid, 0.0f), nextafterf(mid, INFINITY),
                            nextafterf((float)v, INFINITY)};
        for (int k = 0; k < 5; k++) {
            if (isinf(c[k]) || (!f32_subnormals && (c[k] == 0.0f ? k != 0 : !isnormal(c[k]))))
                continue;
            push(l, c[k]);
            if (c[k] != 0.0f)
                push(l, -c[k]);
        }
    }
}

/* Checks 16-bit results against rne16 of the float32 inputs; NaN inputs need any NaN. */
static void check_bits(const char *what, const fmt16 *f, const float *in, const uint16_t *got,
                       size_t n)
{
    size_t bad = 0, first = 0;
    for (size_t i = 0; i < n; i++) {
        const uint16_t want = rne16(f, in[i]);
        const bool ok = want == 0xffffu ? is_nan16(f, got[i]) : got[i] == want;
        if (!ok && bad++ == 0)
            first = i;
    }
    if (bad) {
        const uint16_t want = rne16(f, in[first]);
        ck_abort_msg("%s: %zu of %zu %s values wrong; first at %zu: input %.9g (0x%08x) gave "
                     "0x%04x, round-to-nearest-even is %s0x%04x",
                     what, bad, n, f->name, first, (double)in[first], f32_bits(in[first]),
                     got[first], want == 0xffffu ? "a NaN, e.g. " : "",
                     want == 0xffffu ? (unsigned)(f->inf | 0x40u) : (unsigned)want);
    }
}

/* Checks float32 results against expected doubles exactly (−0 equals +0; NaN needs NaN). */
static void check_exact(const char *what, const float *got, const double *want, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        const bool ok = isnan(want[i]) ? isnan(got[i]) : (double)got[i] == want[i];
        ck_assert_msg(ok, "%s: element %zu is %.9g (0x%08x), expected exactly %.9g", what, i,
                      (double)got[i], f32_bits(got[i]), want[i]);
    }
}

/* ---- 1. conversions ------------------------------------------------------------------------ */

START_TEST(host_conversions_round_to_nearest_even)
{
    tu_small_blocking(false);
    const fmt16 *fmts[2] = {&F16, &BF16};
    for (int k = 0; k < 2; k++) {
        const fmt16 *f = fmts[k];
        vlist l = {0};
        push_grid(&l, f, 1, true);
        push_specials(&l);
        /* float32 subnormals and values around the 16-bit subnormal range */
        for (uint32_t u = 1; u < 0x00800000u; u = u * 3 + 1) {
            push(&l, bits_f32(u));
            push(&l, -bits_f32(u));
        }
        uint16_t *got = malloc(l.n * sizeof *got);
        for (size_t i = 0; i < l.n; i++)
            got[i] = k == 0 ? clattn_f32_to_f16(l.v[i]) : clattn_f32_to_bf16(l.v[i]);
        check_bits(k == 0 ? "clattn_f32_to_f16" : "clattn_f32_to_bf16", f, l.v, got, l.n);
        /* every pattern widens exactly */
        for (uint32_t h = 0; h < 0x10000u; h++) {
            const double want = widen16(f, (uint16_t)h);
            const float w =
                k == 0 ? clattn_f16_to_f32((uint16_t)h) : clattn_bf16_to_f32((uint16_t)h);
            ck_assert_msg(
                isnan(want) ? isnan(w) : (double)w == want && !signbit(w) == !signbit(want),
                "%s widening of 0x%04x: %.9g, expected %.9g", f->name, h, (double)w, want);
        }
        printf("host conversions: %zu %s values\n", l.n, f->name);
        free(got);
        free(l.v);
    }
}
END_TEST

/* ---- 2. 16-bit stores on the device ------------------------------------------------------ */

/* clattn_merge of one part (LSE 0) and of two (the second with LSE −∞ and NaN in O) into a
 * 16-bit O: a pure store, so every value must be rounded exactly. */
START_TEST(merge_16bit_output_exact)
{
    tu_small_blocking(false);
    const fmt16 *fmts[2] = {&F16, &BF16};
    for (int k = 0; k < 2; k++) {
        const fmt16 *f = fmts[k];
        vlist l = {0};
        push_grid(&l, f, k == 0 ? 1 : 3, true);
        push_specials(&l);
        const int64_t d = 256, rows = ((int64_t)l.n + d - 1) / d;
        const size_t n = (size_t)(rows * d);
        while (l.n < n)
            push(&l, 1.0f);
        float *lse0 = tu_alloc((size_t)rows, 0.0f), *lse1 = tu_alloc((size_t)rows, -INFINITY);
        float *o1 = tu_alloc(n, NAN), *lse_out = tu_alloc((size_t)rows, 7.0f);
        uint16_t *out = malloc(n * sizeof *out);
        clattn_tensor po[2] = {clattn_tensor_host(l.v, 1, 1, rows, d),
                               clattn_tensor_host(o1, 1, 1, rows, d)};
        clattn_tensor pl[2] = {clattn_tensor_host(lse0, 1, 1, rows, 1),
                               clattn_tensor_host(lse1, 1, 1, rows, 1)};
        clattn_tensor to = clattn_tensor_host(out, 1, 1, rows, d);
        clattn_tensor tl = clattn_tensor_host(lse_out, 1, 1, rows, 1);
        to.dtype = f->dtype;
        for (size_t parts = 1; parts <= 2; parts++) {
            memset(out, 0x5a, n * sizeof *out);
            TU_ASSERT_OK(clattn_merge(tu_ctx(), parts, po, pl, &to, &tl), "merge to %s", f->name);
            char what[96];
            snprintf(what, sizeof what, "clattn_merge of %zu part(s) into %s O", parts, f->name);
            check_bits(what, f, l.v, out, n);
            for (int64_t r = 0; r < rows; r++)
                ck_assert_msg(lse_out[r] == 0.0f, "%s: LSE[%lld] = %g, expected 0", what,
                              (long long)r, (double)lse_out[r]);
        }
        printf("merge store: %zu %s values\n", n, f->name);
        free(lse0);
        free(lse1);
        free(o1);
        free(lse_out);
        free(out);
        free(l.v);
    }
}
END_TEST

/* Attention whose O equals V exactly in float32: Q = K = 0, a window (0, 0) with n_q = n_kv
 * (row i sees key i alone: weight 1, LSE 0). O is stored as `f`; with `direct` the
 * problem has 8 queries per head (the fused algorithm's decode kernel), else `n_rows`
 * rows per head over as many heads as the values need. Checks O bit for bit, and the LSE
 * and weights exactly. */
static void route_values(const fmt16 *f, const float *vals, size_t n_vals, clattn_algorithm alg,
                         bool direct, int64_t n_rows, int64_t d_v, bool weights)
{
    const int64_t n = direct ? 8 : n_rows;
    const int64_t per_head = n * d_v, heads = ((int64_t)n_vals + per_head - 1) / per_head;
    const size_t n_o = (size_t)(heads * per_head);
    tu_problem p;
    tu_problem_init(&p, 1, heads, heads, n, n, 16, d_v, 1, 2, 3, 0);
    tu_fill_value(p.q, (size_t)tu_count(&p.tq), 0.0f);
    tu_fill_value(p.k, (size_t)tu_count(&p.tk), 0.0f);
    for (size_t i = 0; i < n_o; i++)
        p.v[i] = i < n_vals ? vals[i] : 0.5f;
    clattn_attention_desc d = clattn_attention_desc_default();
    d.algorithm = alg;
    d.window = 1;
    d.window_left = d.window_right = 0;
    uint16_t *o = malloc(n_o * sizeof *o);
    memset(o, 0x5a, n_o * sizeof *o);
    float *lse = tu_alloc((size_t)(heads * n), 7.0f);
    float *w = tu_alloc((size_t)(heads * n * n), 7.0f);
    clattn_tensor to = tu_problem_o(&p, (float *)o);
    to.dtype = f->dtype;
    clattn_tensor tl = clattn_tensor_host(lse, 1, heads, n, 1);
    clattn_tensor tw = clattn_tensor_host(w, 1, heads, n, n);
    d.lse = &tl;
    d.weights = weights ? &tw : NULL;
    char what[160];
    snprintf(what, sizeof what, "%s O of %s attention (%s, %lld rows, d_v %lld%s)", f->name,
             tu_algorithm_name(alg), direct ? "decode" : "tiled", (long long)n, (long long)d_v,
             weights ? ", weights" : "");
    TU_ASSERT_OK(clattn_attention(tu_ctx(), &d, &p.tq, &p.tk, &p.tv, &to), "%s", what);
    check_bits(what, f, p.v, o, n_o);
    for (int64_t r = 0; r < heads * n; r++)
        ck_assert_msg(lse[r] == 0.0f, "%s: LSE of row %lld is %g, expected 0", what, (long long)r,
                      (double)lse[r]);
    for (int64_t x = 0; weights && x < heads * n * n; x++) {
        const int64_t i = x / n % n, j = x % n;
        ck_assert_msg(w[x] == (i == j ? 1.0f : 0.0f), "%s: weight (%lld, %lld) of head %lld is %g",
                      what, (long long)i, (long long)j, (long long)(x / (n * n)), (double)w[x]);
    }
    free(o);
    free(lse);
    free(w);
    tu_problem_free(&p);
}

START_TEST(attention_16bit_output_exact)
{
    tu_small_blocking(false);
    const fmt16 *fmts[2] = {&F16, &BF16};
    for (int k = 0; k < 2; k++) {
        vlist l = {0};
        push_grid(&l, fmts[k], k == 0 ? 5 : 17, false);
        push_specials(&l);
        for (int a = 0; a < 2; a++) {
            route_values(fmts[k], l.v, l.n, tu_algorithms[a], false, 160, 40, a == 1);
            if (tu_algorithms[a] == CLATTN_ALGORITHM_FUSED)
                route_values(fmts[k], l.v, l.n, tu_algorithms[a], true, 8, 40, false);
        }
        printf("attention store: %zu %s values per path\n", l.n, fmts[k]->name);
        free(l.v);
    }
}
END_TEST

/* The public weighted sum into a 16-bit O: W = identity, so O = V before the store. */
START_TEST(weighted_sum_16bit_output_exact)
{
    tu_small_blocking(false);
    const fmt16 *fmts[2] = {&F16, &BF16};
    for (int k = 0; k < 2; k++) {
        vlist l = {0};
        push_grid(&l, fmts[k], k == 0 ? 7 : 23, false);
        push_specials(&l);
        const int64_t n = 64, d = 32, heads = ((int64_t)l.n + n * d - 1) / (n * d);
        const size_t n_o = (size_t)(heads * n * d);
        while (l.n < n_o)
            push(&l, 0.25f);
        float *w = tu_alloc((size_t)(heads * n * n), 0.0f);
        for (int64_t h = 0; h < heads; h++)
            for (int64_t i = 0; i < n; i++)
                w[(h * n + i) * n + i] = 1.0f;
        uint16_t *o = malloc(n_o * sizeof *o);
        clattn_tensor tw = clattn_tensor_host(w, 1, heads, n, n);
        clattn_tensor tv = clattn_tensor_host(l.v, 1, heads, n, d);
        clattn_tensor to = clattn_tensor_host(o, 1, heads, n, d);
        to.dtype = fmts[k]->dtype;
        TU_ASSERT_OK(clattn_weighted_sum(tu_ctx(), NULL, &tw, &tv, &to), "weighted sum");
        check_bits("clattn_weighted_sum into a 16-bit O", fmts[k], l.v, o, n_o);
        free(w);
        free(o);
        free(l.v);
    }
}
END_TEST

/* ---- 3. 16-bit loads on the device ------------------------------------------------------- */

/* Every pattern of `f` as V (O float32 must be its widening, exactly), through every path,
 * packed and with a stride of 2 along d (the element-wise loads). */
START_TEST(attention_16bit_v_loads_exact)
{
    tu_small_blocking(false);
    const fmt16 *fmts[2] = {&F16, &BF16};
    for (int k = 0; k < 2; k++) {
        const fmt16 *f = fmts[k];
        for (int path = 0; path < 4; path++) { /* unfused, fused tiled, fused decode, strided */
            const bool direct = path == 2, strided = path == 3;
            const int64_t d_v = 40, n = direct ? 8 : strided ? 128 : 820;
            const int64_t heads = (0x10000 + n * d_v - 1) / (n * d_v);
            const size_t n_o = (size_t)(heads * n * d_v);
            tu_problem p;
            tu_problem_init(&p, 1, heads, heads, n, n, 16, d_v, 1, 2, 3, 0);
            tu_fill_value(p.q, (size_t)tu_count(&p.tq), 0.0f);
            tu_fill_value(p.k, (size_t)tu_count(&p.tk), 0.0f);
            uint16_t *v16 = malloc(2 * n_o * sizeof *v16);
            double *want = malloc(n_o * sizeof *want);
            for (size_t i = 0; i < n_o; i++) {
                const uint16_t h = (uint16_t)(i * 40503u); /* a permutation of the patterns */
                v16[strided ? 2 * i : i] = h;
                if (strided)
                    v16[2 * i + 1] = f->inf | 0x200u; /* a NaN between the elements */
                want[i] = widen16(f, h);
                if (want[i] == 0.0)
                    want[i] = 0.0; /* 1·(−0) + 0 is +0 */
            }
            clattn_tensor tv = p.tv;
            tv.host = v16;
            tv.dtype = f->dtype;
            if (strided) {
                tv.strides[3] = 2;
                tv.strides[2] = 2 * d_v;
                tv.strides[1] = 2 * d_v * n;
                tv.strides[0] = 2 * d_v * n * heads;
            }
            float *o = tu_alloc(n_o, 12345.0f);
            clattn_tensor to = tu_problem_o(&p, o);
            clattn_attention_desc d = clattn_attention_desc_default();
            d.algorithm = path == 0 ? CLATTN_ALGORITHM_UNFUSED : CLATTN_ALGORITHM_FUSED;
            d.window = 1;
            d.window_left = d.window_right = 0;
            char what[128];
            snprintf(what, sizeof what, "%s V loads (%s)", f->name,
                     path == 0   ? "unfused"
                     : path == 1 ? "fused tiled"
                     : path == 2 ? "fused decode"
                                 : "fused, stride 2");
            TU_ASSERT_OK(clattn_attention(tu_ctx(), &d, &p.tq, &p.tk, &tv, &to), "%s", what);
            check_exact(what, o, want, n_o);
            if (strided) { /* the unfused weighted sum's element-wise loads too */
                d.algorithm = CLATTN_ALGORITHM_UNFUSED;
                tu_fill_value(o, n_o, 12345.0f);
                TU_ASSERT_OK(clattn_attention(tu_ctx(), &d, &p.tq, &p.tk, &tv, &to), "%s", what);
                check_exact(what, o, want, n_o);
            }
            free(v16);
            free(want);
            free(o);
            tu_problem_free(&p);
        }
    }
}
END_TEST

/* Every finite pattern of `f` (no float32 subnormals) as Q or as K: row i sees key i alone
 * (window (0, 0)), the other operand is a unit vector e_c, scale 1, so the LSE of row i is
 * the value itself, exactly; through the tiled scores, the fused kernel (tiled and
 * decode) and the softmax's LSE. */
START_TEST(attention_16bit_qk_loads_exact)
{
    tu_small_blocking(false);
    const fmt16 *fmts[2] = {&F16, &BF16};
    for (int k = 0; k < 2; k++) {
        const fmt16 *f = fmts[k];
        vlist vals = {0};
        for (uint32_t h = 0; h < 0x10000u; h++) {
            const double x = widen16(f, (uint16_t)h);
            if (isfinite(x) && (x == 0.0 || isnormal((float)x)))
                push(&vals, (float)x);
        }
        for (int path = 0; path < 6; path++) { /* {unfused, fused tiled, decode} × {Q, K} */
            const bool in_q = path < 3, direct = path % 3 == 2;
            const int64_t d_k = 40, n = direct ? 8 : 1024;
            const int64_t heads = ((int64_t)vals.n + n - 1) / n;
            tu_problem p;
            tu_problem_init(&p, 1, heads, heads, n, n, d_k, 16, 1, 2, 3, 0);
            const size_t nq = (size_t)tu_count(&p.tq);
            uint16_t *x16 = calloc(nq, sizeof *x16);
            float *unit = tu_alloc(nq, 0.0f);
            double *want = malloc(sizeof(double) * (size_t)(heads * n));
            for (int64_t r = 0; r < heads * n; r++) {
                const size_t at = (size_t)r < vals.n ? (size_t)r : 0;
                const int64_t c = (r * 7) % d_k;
                x16[r * d_k + c] =
                    k == 0 ? clattn_f32_to_f16(vals.v[at]) : clattn_f32_to_bf16(vals.v[at]);
                unit[r * d_k + c] = 1.0f;
                want[r] = vals.v[at] == 0.0f ? 0.0 : (double)vals.v[at];
            }
            clattn_tensor t16 = p.tq, tunit = p.tq;
            t16.host = x16;
            t16.dtype = f->dtype;
            tunit.host = unit;
            float *o = tu_alloc((size_t)(heads * n * 16), 0.0f),
                  *lse = tu_alloc((size_t)(heads * n), 7.0f);
            clattn_tensor to = tu_problem_o(&p, o);
            clattn_tensor tl = clattn_tensor_host(lse, 1, heads, n, 1);
            clattn_attention_desc d = clattn_attention_desc_default();
            d.algorithm = path % 3 == 0 ? CLATTN_ALGORITHM_UNFUSED : CLATTN_ALGORITHM_FUSED;
            d.scale = 1.0f;
            d.window = 1;
            d.window_left = d.window_right = 0;
            d.lse = &tl;
            char what[128];
            snprintf(what, sizeof what, "%s %s loads (%s): LSE", f->name, in_q ? "Q" : "K",
                     path % 3 == 0 ? "unfused"
                     : direct      ? "fused decode"
                                   : "fused tiled");
            TU_ASSERT_OK(clattn_attention(tu_ctx(), &d, in_q ? &t16 : &tunit, in_q ? &tunit : &t16,
                                          &p.tv, &to),
                         "%s", what);
            check_exact(what, lse, want, (size_t)(heads * n));
            free(x16);
            free(unit);
            free(want);
            free(o);
            free(lse);
            tu_problem_free(&p);
        }
        free(vals.v);
    }
}
END_TEST

/* ---- 4. merge: parts with LSE −∞ ---------------------------------------------------------- */

/* One row per scenario, 3 parts, d_v 4: O and LSE of each part per row. */
#define MR 9
#define MD 4
static const float M_LSE[MR][3] = {
    {0.0f, -INFINITY, -INFINITY}, /* first part only */
    {-INFINITY, 0.0f, -INFINITY}, /* middle part only (the first has NaN) */
    {-INFINITY, -INFINITY, 0.5f}, /* last part only */
    {-INFINITY, -INFINITY, -INFINITY},
    {0.0f, 0.0f, -INFINITY},  /* equal weights: O the mean, LSE log 2 */
    {1.0f, -INFINITY, 2.0f},  /* a −∞ part between two */
    {-INFINITY, 3.0f, -1.0f}, /* a −∞ first part then two */
    {0.25f, 0.25f, 0.25f},    /* three equal */
    {-2.0f, 1.5f, 0.0f},
};

static float m_value(int r, int part, int c)
{
    if (M_LSE[r][part] == -INFINITY) /* poison: NaN, +inf, −inf, NaN */
        return c % 2 == 0 ? NAN : c == 1 ? INFINITY : -INFINITY;
    return (float)(part + 1) * (c % 2 ? -0.75f : 1.25f) + (float)r * 0.5f + (float)c;
}

/* The header's formula in double over the parts' stored values pv: LSE = log Σ exp(LSE_p),
 * O = Σ exp(LSE_p − LSE) O_p over the parts with LSE_p > −∞; zeros and −∞ when none. */
static void merge_expect(int r, int n_parts, const double pv[3][MR][MD], double *o, double *lse)
{
    double mx = -INFINITY;
    for (int p = 0; p < n_parts; p++)
        mx = fmax(mx, (double)M_LSE[r][p]);
    *lse = -INFINITY;
    for (int c = 0; c < MD; c++)
        o[c] = 0.0;
    if (mx == -INFINITY)
        return;
    double s = 0.0;
    for (int p = 0; p < n_parts; p++)
        if (M_LSE[r][p] > -INFINITY)
            s += exp((double)M_LSE[r][p] - mx);
    *lse = mx + log(s);
    for (int p = 0; p < n_parts; p++)
        if (M_LSE[r][p] > -INFINITY)
            for (int c = 0; c < MD; c++)
                o[c] += exp((double)M_LSE[r][p] - *lse) * pv[p][r][c];
}

static const char *dt_name(clattn_dtype dt)
{
    return dt == CLATTN_FLOAT32 ? "f32" : dt == CLATTN_FLOAT16 ? "f16" : "bf16";
}

START_TEST(merge_minus_inf_parts_contribute_nothing)
{
    tu_small_blocking(false);
    /* the case: part 0 O = 2, LSE 0; part 1 O = NaN, LSE −∞ → O = 2 */
    {
        float o0[1] = {2.0f}, l0[1] = {0.0f}, o1[1] = {NAN}, l1[1] = {-INFINITY};
        float out[1] = {7.0f}, lout[1] = {7.0f};
        clattn_tensor po[2] = {clattn_tensor_host(o0, 1, 1, 1, 1),
                               clattn_tensor_host(o1, 1, 1, 1, 1)};
        clattn_tensor pl[2] = {clattn_tensor_host(l0, 1, 1, 1, 1),
                               clattn_tensor_host(l1, 1, 1, 1, 1)};
        clattn_tensor to = clattn_tensor_host(out, 1, 1, 1, 1),
                      tl = clattn_tensor_host(lout, 1, 1, 1, 1);
        TU_ASSERT_OK(clattn_merge(tu_ctx(), 2, po, pl, &to, &tl), "merge 1x1");
        ck_assert_msg(out[0] == 2.0f && lout[0] == 0.0f,
                      "merge of (O 2, LSE 0) and (O NaN, LSE -inf): O %g LSE %g, expected 2 and 0",
                      (double)out[0], (double)lout[0]);
    }
    const clattn_dtype dts[3] = {CLATTN_FLOAT32, CLATTN_FLOAT16, CLATTN_BFLOAT16};
    static float o32[3][MR * MD], l32[3][MR], out32[MR * MD], lout[MR];
    static uint16_t o16[3][MR * MD], out16[MR * MD];
    static double pv[3][MR][MD];
    for (int n_parts = 1; n_parts <= 3; n_parts++)
        for (int pdt = 0; pdt < 3; pdt++)
            for (int odt = 0; odt < 3; odt++) {
                const fmt16 *pf = pdt == 1 ? &F16 : &BF16, *of = odt == 1 ? &F16 : &BF16;
                clattn_tensor po[3], pl[3];
                for (int p = 0; p < 3; p++) {
                    for (int r = 0; r < MR; r++) {
                        l32[p][r] = M_LSE[r][p];
                        for (int c = 0; c < MD; c++) {
                            const float x = m_value(r, p, c);
                            o32[p][r * MD + c] = x;
                            o16[p][r * MD + c] =
                                pdt == 1 ? clattn_f32_to_f16(x) : clattn_f32_to_bf16(x);
                            pv[p][r][c] = pdt ? widen16(pf, o16[p][r * MD + c]) : (double)x;
                        }
                    }
                    po[p] = clattn_tensor_host(pdt ? (void *)o16[p] : (void *)o32[p], 1, 1, MR, MD);
                    po[p].dtype = dts[pdt];
                    pl[p] = clattn_tensor_host(l32[p], 1, 1, MR, 1);
                }
                clattn_tensor to =
                    clattn_tensor_host(odt ? (void *)out16 : (void *)out32, 1, 1, MR, MD);
                to.dtype = dts[odt];
                clattn_tensor tl = clattn_tensor_host(lout, 1, 1, MR, 1);
                char what[128];
                snprintf(what, sizeof what, "merge of %d parts (%s parts, %s O)", n_parts,
                         dt_name(dts[pdt]), dt_name(dts[odt]));
                TU_ASSERT_OK(clattn_merge(tu_ctx(), (size_t)n_parts, po, pl, &to, &tl), "%s", what);
                for (int r = 0; r < MR; r++) {
                    double want[MD], wl;
                    merge_expect(r, n_parts, (const double(*)[MR][MD])pv, want, &wl);
                    ck_assert_msg(tu_within(lout[r], wl, (tu_tol){1e-6, 1e-6}),
                                  "%s: row %d LSE %.9g, expected %.9g", what, r, (double)lout[r],
                                  wl);
                    for (int c = 0; c < MD; c++) {
                        /* a 16-bit O: within half an ulp of the float64 result */
                        const double got = odt ? widen16(of, out16[r * MD + c]) : out32[r * MD + c];
                        const tu_tol tol = {1e-6, odt == 0 ? 1e-6 : odt == 1 ? 0x1p-11 : 0x1p-8};
                        ck_assert_msg(tu_within(got, want[c], tol),
                                      "%s: row %d (LSEs %g, %g, %g) column %d: O %.9g, expected "
                                      "%.9g",
                                      what, r, (double)M_LSE[r][0], (double)M_LSE[r][1],
                                      (double)M_LSE[r][2], c, got, want[c]);
                    }
                }
            }
    /* in place on part 0 (float32) */
    float o[2][MR * MD], l[2][MR];
    clattn_tensor po[2], pl[2];
    for (int p = 0; p < 2; p++) {
        for (int r = 0; r < MR; r++) {
            l[p][r] = M_LSE[r][p];
            for (int c = 0; c < MD; c++) {
                o[p][r * MD + c] = m_value(r, p, c);
                pv[p][r][c] = o[p][r * MD + c];
            }
        }
        po[p] = clattn_tensor_host(o[p], 1, 1, MR, MD);
        pl[p] = clattn_tensor_host(l[p], 1, 1, MR, 1);
    }
    TU_ASSERT_OK(clattn_merge(tu_ctx(), 2, po, pl, &po[0], &pl[0]), "in-place merge");
    for (int r = 0; r < MR; r++) {
        double want[MD], wl;
        merge_expect(r, 2, (const double(*)[MR][MD])pv, want, &wl);
        ck_assert_msg(tu_within(l[0][r], wl, (tu_tol){1e-6, 1e-6}),
                      "in-place merge: row %d LSE %.9g, expected %.9g", r, (double)l[0][r], wl);
        for (int c = 0; c < MD; c++)
            ck_assert_msg(tu_within(o[0][r * MD + c], want[c], (tu_tol){1e-6, 1e-6}),
                          "in-place merge: row %d column %d: O %.9g, expected %.9g", r, c,
                          (double)o[0][r * MD + c], want[c]);
    }
}
END_TEST

/* Whether the device has cl_khr_fp64 (float64 LSEs need it). */
static bool device_has_fp64(void)
{
    cl_device_id dev;
    cl_device_fp_config fp64 = 0;
    return clattn_context_get_cl(tu_ctx(), NULL, &dev, NULL) == CLATTN_SUCCESS &&
           clGetDeviceInfo(dev, CL_DEVICE_DOUBLE_FP_CONFIG, sizeof fp64, &fp64, NULL) ==
               CL_SUCCESS &&
           fp64 != 0;
}

/* The same scenarios with float64 LSEs: every part float64, or float64 and float32 mixed,
 * into a float32 or a float64 output LSE (each written in its own type: a float64 value
 * stored into a float32 view would garble it and run past it). */
START_TEST(merge_float64_lse)
{
    tu_small_blocking(false);
    if (!device_has_fp64()) {
        printf("merge_float64_lse: skipped, the device has no cl_khr_fp64\n");
        return;
    }
    static float o32[3][MR * MD];
    static double pv[3][MR][MD];
    static float l32[3][MR], lout32[MR + 4];
    static double l64[3][MR], lout64[MR + 4];
    float out[MR * MD];
    for (int p = 0; p < 3; p++)
        for (int r = 0; r < MR; r++) {
            l32[p][r] = M_LSE[r][p];
            l64[p][r] = M_LSE[r][p];
            for (int c = 0; c < MD; c++)
                pv[p][r][c] = o32[p][r * MD + c] = m_value(r, p, c);
        }
    for (int n_parts = 1; n_parts <= 3; n_parts++)
        for (int mix = 0; mix < 2; mix++)
            for (int o64 = 0; o64 < 2; o64++) {
                clattn_tensor po[3], pl[3];
                for (int p = 0; p < 3; p++) {
                    const bool f64 = !mix || p % 2 == 0; /* mixed: parts 0 and 2 float64 */
                    po[p] = clattn_tensor_host(o32[p], 1, 1, MR, MD);
                    pl[p] = clattn_tensor_host(f64 ? (void *)l64[p] : (void *)l32[p], 1, 1, MR, 1);
                    pl[p].dtype = f64 ? CLATTN_FLOAT64 : CLATTN_FLOAT32;
                }
                for (int r = 0; r < MR + 4; r++)
                    lout32[r] = -7.0f, lout64[r] = -7.0;
                clattn_tensor to = clattn_tensor_host(out, 1, 1, MR, MD);
                clattn_tensor tl =
                    clattn_tensor_host(o64 ? (void *)lout64 : (void *)lout32, 1, 1, MR, 1);
                tl.dtype = o64 ? CLATTN_FLOAT64 : CLATTN_FLOAT32;
                char what[128];
                snprintf(what, sizeof what, "merge of %d parts (%s LSEs into a %s LSE)", n_parts,
                         mix ? "float64 and float32" : "float64", o64 ? "float64" : "float32");
                TU_ASSERT_OK(clattn_merge(tu_ctx(), (size_t)n_parts, po, pl, &to, &tl), "%s", what);
                for (int r = 0; r < MR; r++) {
                    double want[MD], wl;
                    merge_expect(r, n_parts, (const double(*)[MR][MD])pv, want, &wl);
                    const double got_l = o64 ? lout64[r] : (double)lout32[r];
                    ck_assert_msg(tu_within(got_l, wl, (tu_tol){1e-6, o64 ? 1e-12 : 1e-6}),
                                  "%s: row %d LSE %.12g, expected %.12g", what, r, got_l, wl);
                    for (int c = 0; c < MD; c++)
                        ck_assert_msg(tu_within(out[r * MD + c], want[c], (tu_tol){1e-6, 1e-6}),
                                      "%s: row %d column %d: O %.9g, expected %.9g", what, r, c,
                                      (double)out[r * MD + c], want[c]);
                }
                for (int r = MR; r < MR + 4; r++)
                    ck_assert_msg(o64 ? lout64[r] == -7.0 : lout32[r] == -7.0f,
                                  "%s: the LSE written past its view (element %d)", what, r);
            }
}
END_TEST

int main(void)
{
    tu_seed_init(0xe8ac7u);
    Suite *s = suite_create("exact16");
    /* one test case per area: CK_RUN_CASE=convert (etc.) runs one alone */
    static const char *const names[4] = {"convert", "merge", "store16", "load16"};
    TCase *tc[4];
    for (int a = 0; a < 4; a++) {
        tc[a] = tcase_create(names[a]);
        tcase_set_timeout(tc[a], 900);
        suite_add_tcase(s, tc[a]);
    }
    tcase_add_test(tc[0], host_conversions_round_to_nearest_even);
    tcase_add_test(tc[1], merge_minus_inf_parts_contribute_nothing);
    tcase_add_test(tc[1], merge_float64_lse);
    tcase_add_test(tc[2], merge_16bit_output_exact);
    tcase_add_test(tc[2], attention_16bit_output_exact);
    tcase_add_test(tc[2], weighted_sum_16bit_output_exact);
    tcase_add_test(tc[3], attention_16bit_v_loads_exact);
    tcase_add_test(tc[3], attention_16bit_qk_loads_exact);
    return tu_run_suite(s);
}
