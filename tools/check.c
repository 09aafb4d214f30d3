/* The element comparison of `clattn run --check` and `clattn demo` with the CPU
 * reference; see check.h. */
#include "check.h"

#include <math.h>
#include <stdio.h>

/* Whether got matches ref within atol + rtol*|ref| + extra; NaN must meet NaN and
 * infinities must be equal. *diff receives |got - ref| (infinite on a NaN or infinity
 * mismatch). */
static int element_ok(double g, double r, double atol, double rtol, double extra, double *diff)
{
    if (isnan(g) || isnan(r) || isinf(g) || isinf(r)) {
        const int ok = (isnan(g) && isnan(r)) || g == r;
        *diff = ok ? 0.0 : INFINITY;
        return ok;
    }
    *diff = fabs(g - r);
    return *diff <= atol + rtol * fabs(r) + extra;
}

deviation compare(const float *got, const float *ref, size_t count)
{
    deviation dev = {0.0, 0, 1};
    for (size_t i = 0; i < count; ++i) {
        double diff;
        const int ok = element_ok(got[i], ref[i], CHECK_ATOL, CHECK_RTOL, 0.0, &diff);
        if (!ok) {
            dev.within = 0;
        }
        if (diff > dev.max_abs) {
            dev.max_abs = diff;
            dev.worst = i;
        }
    }
    return dev;
}

/* Element i of a float32, float16 or bfloat16 array. */
static double load_value(clattn_dtype dtype, const void *data, size_t i)
{
    if (dtype == CLATTN_FLOAT32) {
        return ((const float *)data)[i];
    }
    if (dtype == CLATTN_FLOAT64) {
        return ((const double *)data)[i];
    }
    uint16_t bits = ((const uint16_t *)data)[i];
    return dtype == CLATTN_FLOAT16 ? clattn_f16_to_f32(bits) : clattn_bf16_to_f32(bits);
}

/* One unit in the last place of a 16-bit float type at the magnitude of `x` (0 for
 * float32, whose outputs are compared with CHECK_ATOL and CHECK_RTOL alone). */
static double ulp16(clattn_dtype dtype, double x)
{
    if (dtype == CLATTN_FLOAT32 || dtype == CLATTN_FLOAT64 || !isfinite(x)) {
        return 0.0;
    }
    const int mantissa = dtype == CLATTN_FLOAT16 ? 10 : 7;
    const int min_exp = dtype == CLATTN_FLOAT16 ? -14 : -126; /* smallest normal: 2^min_exp */
    int e;
    frexp(x, &e); /* |x| = m * 2^e, 0.5 <= m < 1: its binade is 2^(e-1) */
    if (x == 0.0 || e - 1 < min_exp) {
        e = min_exp + 1;
    }
    return ldexp(1.0, e - 1 - mantissa);
}

double check_max_abs(clattn_dtype dtype, const void *data, size_t count)
{
    double max = 0.0;
    for (size_t i = 0; i < count; ++i) {
        const double x = fabs(load_value(dtype, data, i));
        if (isfinite(x) && x > max) {
            max = x;
        }
    }
    return max;
}

/* report_check() and report_check_tol(): the comparison within atol + rtol*|ref| (+ 1
 * ulp of a 16-bit type), `tol` its text in the printed line. */
static int report(const char *name, clattn_dtype dtype, const void *got, const void *ref,
                  size_t count, double atol, double rtol, const char *tol)
{
    double max_abs = 0.0, worst_bad = -1.0;
    size_t worst = 0, bad = 0;
    for (size_t i = 0; i < count; ++i) {
        const double r = load_value(dtype, ref, i);
        double diff;
        const int ok = element_ok(load_value(dtype, got, i), r, atol, rtol, ulp16(dtype, r), &diff);
        if (diff > max_abs) {
            max_abs = diff;
            worst = i;
        }
        /* show the worst element out of tolerance, else the largest deviation */
        if (!ok && diff > worst_bad) {
            worst_bad = diff;
            bad = i;
        }
    }
    const int within = worst_bad < 0.0;
    if (!within) {
        worst = bad;
    }
    printf("check %s: max abs error %.3g", name, max_abs);
    if (count > 0) {
        printf(" (element %zu: got %.9g, reference %.9g)", worst, load_value(dtype, got, worst),
               load_value(dtype, ref, worst));
    }
    printf(": %s %s%s\n", within ? "within" : "NOT within", tol,
           dtype == CLATTN_FLOAT16    ? " + 1 ulp of float16"
           : dtype == CLATTN_BFLOAT16 ? " + 1 ulp of bfloat16"
                                      : "");
    return within;
}

/* Prints the comparison of `got` with the reference `ref` (both `count` elements of
 * `dtype`); returns 1 if every element is within CHECK_ATOL + CHECK_RTOL*|ref|, plus one
 * unit in the last place for float16 and bfloat16. NaN must meet NaN, and infinities
 * must be equal. */
int report_check(const char *name, clattn_dtype dtype, const void *got, const void *ref,
                 size_t count)
{
    return report(name, dtype, got, ref, count, CHECK_ATOL, CHECK_RTOL, "1e-5 + 1e-5*|reference|");
}

int report_check_tol(const char *name, clattn_dtype dtype, const void *got, const void *ref,
                     size_t count, double atol, double rtol)
{
    char tol[64];
    snprintf(tol, sizeof tol, "%.3g + %.3g*|reference|", atol, rtol);
    return report(name, dtype, got, ref, count, atol, rtol, tol);
}
