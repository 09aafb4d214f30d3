/* Positions and window bounds at the extremes (case R16): a window bound of INT64_MAX
 * (the usual "no limit") and q_start / kv_start near ±2^53 must give the mathematical
 * rule, never a wrapped 64-bit sum.
 *
 *  - R16_case: the case file's input and every variant, both algorithms, O, weights and
 *    LSE (where the case gives them) against the case's float64 `expected`, with the
 *    case's own tolerance; the same for clattn_reference_attention.
 *  - visible_keys_exact: clattn_visible_keys against a brute-force rule written here
 *    from docs/SEMANTICS.md and evaluated per key in exact (__int128) arithmetic, over
 *    the grid of extreme bounds, positions, the four masks, n_q, n_kv in {1, 5} and the
 *    lengths; and its invalid-argument statuses.
 *  - extremes_device_vs_reference: small random problems under a sample of the same
 *    grid: device O and LSE (weights on some) against clattn_reference_attention within
 *    1e-5 + 1e-5·|ref|, and the reference against a float64 attention in this file whose
 *    visibility comes from the exact rule (so a bug shared by the host rule and the
 *    kernels cannot hide). Fixed configurations put INT64_MAX on each side with every
 *    key visible, where the LSE must be finite.
 *
 * Seeds: printed; CLATTN_TEST_SEED overrides the base seed. */
#include "testutil.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* exact arithmetic for the rule (GCC and clang; __extension__ keeps -pedantic quiet) */
__extension__ typedef __int128 i128;
__extension__ typedef unsigned __int128 u128;

#define POS_MAX (((int64_t)1 << 53) - 1) /* the largest |q_start|, |kv_start| allowed */
#define N_ENTRIES 3 /* visible_keys_exact's batch entries: lengths full, zero, partial */

/* The grid: window bounds (each side) and positions (q_start, kv_start). */
static const int64_t BOUNDS[] = {
    -1, /* unbounded */
    0,
    1,
    2,
    ((int64_t)1 << 60) - 1, /* around the host rule's cap (2^60) */
    (int64_t)1 << 60,
    (int64_t)1 << 62,
    INT64_MAX - 1,
    INT64_MAX, /* "no limit" */
};
#define N_BOUNDS ((int)(sizeof BOUNDS / sizeof BOUNDS[0]))
static const int64_t POSITIONS[] = {0, 3, -3, 100000000, -100000000, POS_MAX, -POS_MAX};
#define N_POSITIONS ((int)(sizeof POSITIONS / sizeof POSITIONS[0]))
static const clattn_mask MASKS[4] = {CLATTN_MASK_NONE, CLATTN_MASK_CAUSAL_TOP_LEFT,
                                     CLATTN_MASK_CAUSAL_BOTTOM_RIGHT, CLATTN_MASK_NO_SELF};

/* ---- a small deterministic generator for the configurations ----------------------- */

static uint32_t rng_state;

static uint32_t rnd(uint32_t n)
{
    rng_state = tu_lowbias32(rng_state + 0x9E3779B9u);
    return n ? rng_state % n : 0;
}

/* ---- the rule, from its definition, in exact arithmetic ------------------------------ */

/* a_i = i + q_start − kv_start (+ n_kv_b − n_q_b for bottom-right), exactly. */
static i128 exact_diag(const clattn_attention_desc *d, int64_t n_q, int64_t n_kv, int64_t b,
                       int64_t i)
{
    const i128 nq_b = d->q_lens ? d->q_lens[b] : n_q, nkv_b = d->kv_lens ? d->kv_lens[b] : n_kv;
    i128 a = (i128)i + d->q_start - d->kv_start;
    if (d->mask == CLATTN_MASK_CAUSAL_BOTTOM_RIGHT)
        a += nkv_b - nq_b;
    return a;
}

/* Whether key j is visible to row i of entry b: every term of docs/SEMANTICS.md,
 * "Which keys are visible", checked on its own. */
static bool exact_visible(const clattn_attention_desc *d, int64_t n_q, int64_t n_kv, int64_t b,
                          int64_t i, int64_t j)
{
    const int64_t nq_b = d->q_lens ? d->q_lens[b] : n_q, nkv_b = d->kv_lens ? d->kv_lens[b] : n_kv;
    if (i >= nq_b || j >= nkv_b) /* padding row; key padding */
        return false;
    const i128 a = exact_diag(d, n_q, n_kv, b, i), jj = j;
    if ((d->mask == CLATTN_MASK_CAUSAL_TOP_LEFT || d->mask == CLATTN_MASK_CAUSAL_BOTTOM_RIGHT) &&
        !(jj <= a))
        return false;
    if (d->mask == CLATTN_MASK_NO_SELF && jj == a)
        return false;
    if (d->window) {
        if (d->window_left >= 0 && !(a - (i128)d->window_left <= jj))
            return false;
        if (d->window_right >= 0 && !(jj <= a + (i128)d->window_right))
            return false;
    }
    return true;
}

static void i128_text(i128 x, char *out, size_t cap)
{
    char tmp[48];
    int n = 0;
    const bool neg = x < 0;
    u128 u = neg ? -(u128)x : (u128)x;
    do {
        tmp[n++] = (char)('0' + (int)(u % 10));
        u /= 10;
    } while (u);
    size_t at = 0;
    if (neg && at + 1 < cap)
        out[at++] = '-';
    while (n > 0 && at + 1 < cap)
        out[at++] = tmp[--n];
    out[at] = '\0';
}

/* The configuration in words; the length arrays (if set) have n_entries entries. */
static int desc_text(const clattn_attention_desc *d, int64_t n_q, int64_t n_kv, int n_entries,
                     char *out, size_t cap)
{
    int pos = snprintf(out, cap, "mask %s n_q %lld n_kv %lld q_start %lld kv_start %lld",
                       tu_mask_name(d->mask), (long long)n_q, (long long)n_kv,
                       (long long)d->q_start, (long long)d->kv_start);
    if (d->window)
        pos += snprintf(out + pos, cap - (size_t)pos, " window(%lld,%lld)",
                        (long long)d->window_left, (long long)d->window_right);
    else
        pos += snprintf(out + pos, cap - (size_t)pos, " no window (bounds %lld,%lld ignored)",
                        (long long)d->window_left, (long long)d->window_right);
    for (int t = 0; t < 2; t++) {
        const int32_t *lens = t == 0 ? d->kv_lens : d->q_lens;
        if (!lens)
            continue;
        pos += snprintf(out + pos, cap - (size_t)pos, " %s {", t == 0 ? "kv_lens" : "q_lens");
        for (int e = 0; e < n_entries; e++)
            pos += snprintf(out + pos, cap - (size_t)pos, e ? ",%d" : "%d", lens[e]);
        pos += snprintf(out + pos, cap - (size_t)pos, "}");
    }
    return pos;
}

/* Compares clattn_visible_keys(desc, n_q, n_kv, b, i) with the exact rule. Returns the
 * number of mismatches (0 or 1 per row) and writes the first into msg if msg[0] is
 * still empty. */
static int check_row(const clattn_attention_desc *d, int64_t n_q, int64_t n_kv, int64_t b,
                     int64_t i, char *msg, size_t cap)
{
    clattn_key_range r;
    memset(&r, 0x5a, sizeof r);
    const clattn_status st = clattn_visible_keys(d, n_q, n_kv, b, i, &r);
    const int64_t nq_b = d->q_lens ? d->q_lens[b] : n_q, nkv_b = d->kv_lens ? d->kv_lens[b] : n_kv;
    const i128 a = exact_diag(d, n_q, n_kv, b, i);
    char why[512] = "";
    if (st != CLATTN_SUCCESS) {
        snprintf(why, sizeof why, "status %d (%s): %s", (int)st, clattn_status_string(st),
                 clattn_last_error_message(NULL));
    } else if (!(0 <= r.lo && r.lo <= r.hi && r.hi <= nkv_b)) {
        snprintf(why, sizeof why, "range [%lld, %lld) not within 0 <= lo <= hi <= n_kv_b = %lld",
                 (long long)r.lo, (long long)r.hi, (long long)nkv_b);
    } else if ((i128)r.diag != a) {
        char e[48];
        i128_text(a, e, sizeof e);
        snprintf(why, sizeof why, "diag %lld, expected a_i = %s", (long long)r.diag, e);
    } else if (r.self != (d->mask == CLATTN_MASK_NO_SELF ? r.diag : -1)) {
        snprintf(why, sizeof why, "self %lld, expected %lld", (long long)r.self,
                 (long long)(d->mask == CLATTN_MASK_NO_SELF ? r.diag : -1));
    } else if ((r.valid != 0) != (i < nq_b)) {
        snprintf(why, sizeof why, "valid %d, expected %d", r.valid, (int)(i < nq_b));
    } else {
        char got[64] = "", exp[64] = "";
        int gp = 0, ep = 0;
        bool differ = false;
        for (int64_t j = 0; j < n_kv; j++) {
            const bool g = r.valid && r.lo <= j && j < r.hi && j != r.self;
            const bool e = exact_visible(d, n_q, n_kv, b, i, j);
            differ |= g != e;
            gp += snprintf(got + gp, sizeof got - (size_t)gp, "%c", g ? '1' : '.');
            ep += snprintf(exp + ep, sizeof exp - (size_t)ep, "%c", e ? '1' : '.');
        }
        if (differ)
            snprintf(why, sizeof why,
                     "visible keys %s (lo %lld hi %lld self %lld valid %d), expected %s", got,
                     (long long)r.lo, (long long)r.hi, (long long)r.self, r.valid, exp);
    }
    if (!why[0])
        return 0;
    if (!msg[0]) {
        int pos = desc_text(d, n_q, n_kv, N_ENTRIES, msg, cap);
        snprintf(msg + pos, cap - (size_t)pos, ", b %lld i %lld: %s", (long long)b, (long long)i,
                 why);
    }
    return 1;
}

/* ---- R16: the case file --------------------------------------------------------------- */

/* An exact int64 from a JSON number. cJSON keeps numbers as doubles, so the case's
 * 9223372036854775807 arrives as 2^63: a double at or above 2^63 is read as INT64_MAX
 * (the only int64 the file can mean by it). */
static int64_t json_i64(const cJSON *item)
{
    const double x = tu_jnum(item);
    ck_assert_msg(x == floor(x) && x > -9223372036854775808.0, "case file: %.17g is not an int64",
                  x);
    return x >= 9223372036854775808.0 ? INT64_MAX : (int64_t)x;
}

/* The exact bounds of "--window L,R" or "--window=L,R" in a CLI string; false if the
 * string has no --window. */
static bool cli_window(const char *cli, int64_t *left, int64_t *right)
{
    const char *w = cli ? strstr(cli, "--window") : NULL;
    if (!w)
        return false;
    w += strlen("--window");
    ck_assert_msg(*w == '=' || *w == ' ', "case file: cannot read the --window of '%s'", cli);
    char *end = NULL;
    errno = 0;
    const long long l = strtoll(w + 1, &end, 10);
    ck_assert_msg(errno == 0 && *end == ',', "case file: cannot read the --window of '%s'", cli);
    const long long r = strtoll(end + 1, &end, 10);
    ck_assert_msg(errno == 0, "case file: a --window bound of '%s' is out of int64 range", cli);
    *left = l, *right = r;
    return true;
}

static clattn_mask mask_from(const char *s)
{
    static const struct {
        const char *name;
        clattn_mask mask;
    } NAMES[] = {{"none", CLATTN_MASK_NONE},
                 {"causal", CLATTN_MASK_CAUSAL_TOP_LEFT},
                 {"causal_top_left", CLATTN_MASK_CAUSAL_TOP_LEFT},
                 {"causal_bottom_right", CLATTN_MASK_CAUSAL_BOTTOM_RIGHT},
                 {"no_self", CLATTN_MASK_NO_SELF},
                 {"no-self", CLATTN_MASK_NO_SELF}};
    for (size_t i = 0; i < sizeof NAMES / sizeof NAMES[0]; i++)
        if (strcmp(s, NAMES[i].name) == 0)
            return NAMES[i].mask;
    ck_abort_msg("case file: unknown mask '%s'", s);
    return CLATTN_MASK_NONE;
}

/* The desc of `params`, each field absent from it taken from `base` (the main
 * params). The window comes from the CLI string when it has one (exact int64), and must
 * agree with the JSON fields where those exist. */
static clattn_attention_desc case_desc(const cJSON *params, const clattn_attention_desc *base,
                                       int64_t n_q, int64_t n_kv, char *text, size_t cap)
{
    clattn_attention_desc d = *base;
    const cJSON *x;
    if ((x = tu_jfind(params, "scale")))
        d.scale = (float)tu_jnum(x);
    if ((x = tu_jfind(params, "mask")))
        d.mask = mask_from(cJSON_IsString(x) ? x->valuestring : "?");
    if ((x = tu_jfind(params, "window")))
        d.window = (int)tu_jnum(x);
    if ((x = tu_jfind(params, "q_start")))
        d.q_start = json_i64(x);
    if ((x = tu_jfind(params, "kv_start")))
        d.kv_start = json_i64(x);
    const cJSON *cli = tu_jfind(params, "cli");
    const char *cli_s = cJSON_IsString(cli) ? cli->valuestring : NULL;
    int64_t wl, wr;
    const bool from_cli = cli_window(cli_s, &wl, &wr);
    const cJSON *jl = tu_jfind(params, "window_left"), *jr = tu_jfind(params, "window_right");
    if (from_cli) {
        d.window = 1;
        if (jl)
            ck_assert_msg(json_i64(jl) == wl, "case file: window_left %lld, the CLI says %lld",
                          (long long)json_i64(jl), (long long)wl);
        if (jr)
            ck_assert_msg(json_i64(jr) == wr, "case file: window_right %lld, the CLI says %lld",
                          (long long)json_i64(jr), (long long)wr);
        d.window_left = wl, d.window_right = wr;
    } else {
        if (jl)
            d.window_left = json_i64(jl);
        if (jr)
            d.window_right = json_i64(jr);
    }
    desc_text(&d, n_q, n_kv, 1, text, cap);
    return d;
}

/* The case's tolerance: {"abs", "rel"} (R16's spelling) or {"atol", "rtol"}. */
static tu_tol case_tol(const cJSON *root)
{
    const cJSON *t = tu_jfind(root, "tolerance");
    if (!t) /* none stated: the library's documented accuracy */
        return TU_TOL_DEFAULT;
    const cJSON *a = tu_jfind(t, "abs"), *r = tu_jfind(t, "rel");
    if (a || r)
        return (tu_tol){a ? tu_jnum(a) : 0.0, r ? tu_jnum(r) : 0.0};
    return tu_jtol(t);
}

/* A packed float array of a JSON matrix, with its count checked. */
static float *json_floats(const cJSON *item, size_t want, const char *what)
{
    size_t n = 0;
    double *v = tu_jarray(item, &n);
    ck_assert_msg(n == want, "case file: %s has %zu values, expected %zu", what, n, want);
    float *f = tu_alloc(n, 0.0f);
    for (size_t i = 0; i < n; i++)
        f[i] = (float)v[i];
    free(v);
    return f;
}

/* Runs one R16 configuration (the device with both algorithms, and the reference) and
 * compares O, weights and LSE with `expected` (a NULL entry is not compared). */
static void r16_run(const char *name, const clattn_attention_desc *desc, const float *q,
                    const float *k, const float *v, int64_t n_q, int64_t n_kv, int64_t d_k,
                    int64_t d_v, const double *e_o, const double *e_w, const double *e_l,
                    tu_tol tol)
{
    clattn_tensor tq = clattn_tensor_host((void *)q, 1, 1, n_q, d_k),
                  tk = clattn_tensor_host((void *)k, 1, 1, n_kv, d_k),
                  tv = clattn_tensor_host((void *)v, 1, 1, n_kv, d_v);
    /* every row of the case sees its keys [0, n_kv): what "why" states */
    for (int64_t i = 0; i < n_q; i++) {
        clattn_key_range r;
        ck_assert_int_eq(clattn_visible_keys(desc, n_q, n_kv, 0, i, &r), CLATTN_SUCCESS);
        ck_assert_msg(r.valid && r.lo == 0 && r.hi == n_kv && r.self == -1,
                      "%s: clattn_visible_keys row %lld: lo %lld hi %lld self %lld valid %d, "
                      "expected every key [0, %lld)",
                      name, (long long)i, (long long)r.lo, (long long)r.hi, (long long)r.self,
                      r.valid, (long long)n_kv);
    }
    for (int run = 0; run < 3; run++) { /* unfused, fused, reference */
        const char *who = run < 2 ? tu_algorithm_name(tu_algorithms[run]) : "reference";
        float *o = tu_alloc((size_t)(n_q * d_v), 12345.0f),
              *w = tu_alloc((size_t)(n_q * n_kv), 12345.0f), *l = tu_alloc((size_t)n_q, 12345.0f);
        clattn_tensor to = clattn_tensor_host(o, 1, 1, n_q, d_v),
                      tw = clattn_tensor_host(w, 1, 1, n_q, n_kv),
                      tl = clattn_tensor_host(l, 1, 1, n_q, 1);
        clattn_attention_desc d = *desc;
        d.weights = e_w ? &tw : NULL;
        d.lse = e_l ? &tl : NULL;
        if (run < 2) {
            d.algorithm = tu_algorithms[run];
            TU_ASSERT_OK(clattn_attention(tu_ctx(), &d, &tq, &tk, &tv, &to), "%s [%s]", name, who);
        } else {
            const clattn_status st = clattn_reference_attention(&d, &tq, &tk, &tv, &to);
            ck_assert_msg(st == CLATTN_SUCCESS, "%s: clattn_reference_attention: %s", name,
                          clattn_status_string(st));
        }
        char what[600];
        snprintf(what, sizeof what, "%s [%s] O", name, who);
        TU_ASSERT_CLOSE(what, &to, e_o, NULL, tol);
        if (e_w) {
            snprintf(what, sizeof what, "%s [%s] weights", name, who);
            TU_ASSERT_CLOSE(what, &tw, e_w, NULL, tol);
        }
        if (e_l) {
            snprintf(what, sizeof what, "%s [%s] LSE", name, who);
            TU_ASSERT_CLOSE(what, &tl, e_l, NULL, tol);
        }
        free(o);
        free(w);
        free(l);
    }
}

START_TEST(R16_case)
{
    cJSON *root = tu_case_load("R16");
    ck_assert_str_eq(tu_jget(root, "id")->valuestring, "R16");
    /* The case states its tolerance (abs 1e-5, rel 1e-5): |got − exp| ≤ abs + rel·|exp|;
     * without one, case_tol falls back to 1e-5 + 1e-5·|exp| as well. */
    const tu_tol tol = case_tol(root);
    const cJSON *in = tu_jget(root, "inputs");
    const int n_q = cJSON_GetArraySize(tu_jget(in, "q")),
              n_kv = cJSON_GetArraySize(tu_jget(in, "k"));
    const int d_k = cJSON_GetArraySize(cJSON_GetArrayItem(tu_jget(in, "q"), 0)),
              d_v = cJSON_GetArraySize(cJSON_GetArrayItem(tu_jget(in, "v"), 0));
    ck_assert_int_eq(cJSON_GetArraySize(tu_jget(in, "v")), n_kv);
    float *q = json_floats(tu_jget(in, "q"), (size_t)(n_q * d_k), "q"),
          *k = json_floats(tu_jget(in, "k"), (size_t)(n_kv * d_k), "k"),
          *v = json_floats(tu_jget(in, "v"), (size_t)(n_kv * d_v), "v");

    const clattn_attention_desc zero = clattn_attention_desc_default();
    char text[512];
    const clattn_attention_desc main_d =
        case_desc(tu_jget(root, "params"), &zero, n_q, n_kv, text, sizeof text);
    ck_assert_msg(main_d.window && main_d.window_right == INT64_MAX,
                  "R16: the main params should set window_right = INT64_MAX: %s", text);
    const cJSON *exp = tu_jget(root, "expected");
    const cJSON *jw = tu_jfind(exp, "weights"), *jl = tu_jfind(exp, "lse");
    double *e_o = tu_jarray(tu_jget(exp, "O"), NULL);
    double *e_w = jw ? tu_jarray(jw, NULL) : NULL, *e_l = jl ? tu_jarray(jl, NULL) : NULL;
    char name[600];
    snprintf(name, sizeof name, "R16 main (%s)", text);
    r16_run(name, &main_d, q, k, v, n_q, n_kv, d_k, d_v, e_o, e_w, e_l, tol);
    int runs = 1;

    const cJSON *var;
    int index = 0;
    cJSON_ArrayForEach(var, tu_jget(root, "variants"))
    {
        const clattn_attention_desc d =
            case_desc(tu_jget(var, "params"), &main_d, n_q, n_kv, text, sizeof text);
        snprintf(name, sizeof name, "R16 variant %d (%s)", index++, text);
        const cJSON *vexp = tu_jfind(var, "expected");
        if (vexp) {
            const cJSON *vw = tu_jfind(vexp, "weights"), *vl = tu_jfind(vexp, "lse");
            double *vo = tu_jarray(tu_jget(vexp, "O"), NULL);
            double *vwv = vw ? tu_jarray(vw, NULL) : NULL, *vlv = vl ? tu_jarray(vl, NULL) : NULL;
            r16_run(name, &d, q, k, v, n_q, n_kv, d_k, d_v, vo, vwv, vlv, tol);
            free(vo);
            free(vwv);
            free(vlv);
        } else {
            /* A variant without `expected` (window_right = INT64_MAX − 1, whose observed
             * output the case calls "correct result"): its bound is still beyond every
             * key, so it has the main input's expected values. */
            printf("R16: %s has no expected values of its own: using the main input's\n", name);
            r16_run(name, &d, q, k, v, n_q, n_kv, d_k, d_v, e_o, e_w, e_l, tol);
        }
        runs++;
    }
    ck_assert_msg(runs >= 3, "R16: expected the main input and at least 2 variants, got %d", runs);
    printf("R16_case: %d configurations x (unfused, fused, reference), tolerance %g + %g*|exp|\n",
           runs, tol.atol, tol.rtol);
    free(e_o);
    free(e_w);
    free(e_l);
    free(q);
    free(k);
    free(v);
    cJSON_Delete(root);
}
END_TEST

/* ---- clattn_visible_keys against the exact rule --------------------------------------- */

START_TEST(visible_keys_exact)
{
    static const int64_t SIZES[2] = {1, 5};
    /* the window: N_BOUNDS × N_BOUNDS bound pairs, then one more: no window at all
     * (window = 0, with the bounds 0, 0 that must be ignored) */
    const int n_windows = N_BOUNDS * N_BOUNDS + 1;
    const int n_configs = n_windows * N_POSITIONS * N_POSITIONS * 4 * 2 * 2 * 4;
    long long rows = 0;
    int bad = 0;
    char msg[1024] = "";
    for (int c = 0; c < n_configs; c++) {
        int x = c;
        const int lens = x % 4, sk = (x /= 4) % 2, sq = (x /= 2) % 2, m = (x /= 2) % 4,
                  ks = (x /= 4) % N_POSITIONS, qs = (x /= N_POSITIONS) % N_POSITIONS,
                  w = x / N_POSITIONS;
        const int64_t n_q = SIZES[sq], n_kv = SIZES[sk];
        /* entries: lengths full, empty and partial (5 → 3, 1 → 1) */
        const int32_t kv_lens[N_ENTRIES] = {(int32_t)n_kv, 0, (int32_t)(n_kv + 1) / 2};
        const int32_t q_lens[N_ENTRIES] = {(int32_t)n_q, (int32_t)(n_q + 1) / 2, 0};
        clattn_attention_desc d = clattn_attention_desc_default();
        d.mask = MASKS[m];
        d.window = w < N_BOUNDS * N_BOUNDS;
        d.window_left = d.window ? BOUNDS[w / N_BOUNDS] : 0;
        d.window_right = d.window ? BOUNDS[w % N_BOUNDS] : 0;
        d.q_start = POSITIONS[qs];
        d.kv_start = POSITIONS[ks];
        d.kv_lens = lens & 1 ? kv_lens : NULL;
        d.q_lens = lens & 2 ? q_lens : NULL;
        for (int64_t e = 0; e < N_ENTRIES; e++)
            for (int64_t i = 0; i < n_q; i++, rows++)
                bad += check_row(&d, n_q, n_kv, e, i, msg, sizeof msg);
    }
    printf("visible_keys_exact: %d configurations, %lld rows checked, %d wrong\n", n_configs, rows,
           bad);
    ck_assert_msg(bad == 0, "clattn_visible_keys: %d of %lld rows wrong; first: %s", bad, rows,
                  msg);
}
END_TEST

START_TEST(visible_keys_invalid_arguments)
{
    const clattn_attention_desc ok = clattn_attention_desc_default();
    clattn_key_range r;
    ck_assert_int_eq(clattn_visible_keys(&ok, 3, 4, 0, 2, &r), CLATTN_SUCCESS);
    static const int32_t too_long[1] = {5}, negative[1] = {-1};
    const struct {
        const char *what;
        clattn_attention_desc d;
        int null_desc, null_out;
        int64_t n_q, n_kv, b, i;
    } BAD[] = {
        {"NULL desc", ok, 1, 0, 3, 4, 0, 0},
        {"NULL out", ok, 0, 1, 3, 4, 0, 0},
        {"i = n_q", ok, 0, 0, 3, 4, 0, 3},
        {"i > n_q", ok, 0, 0, 3, 4, 0, 7},
        {"i < 0", ok, 0, 0, 3, 4, 0, -1},
        {"b < 0", ok, 0, 0, 3, 4, -1, 0},
        {"n_q = 0", ok, 0, 0, 0, 4, 0, 0},
        {"n_kv < 0", ok, 0, 0, 3, -1, 0, 0},
        {"q_start = 2^53", {.q_start = (int64_t)1 << 53}, 0, 0, 3, 4, 0, 0},
        {"q_start = -2^53", {.q_start = -((int64_t)1 << 53)}, 0, 0, 3, 4, 0, 0},
        {"q_start = INT64_MAX", {.q_start = INT64_MAX}, 0, 0, 3, 4, 0, 0},
        {"kv_start = 2^53", {.kv_start = (int64_t)1 << 53}, 0, 0, 3, 4, 0, 0},
        {"kv_start = INT64_MIN", {.kv_start = INT64_MIN}, 0, 0, 3, 4, 0, 0},
        {"unknown mask", {.mask = (clattn_mask)7}, 0, 0, 3, 4, 0, 0},
        {"kv_lens[0] > n_kv", {.kv_lens = too_long}, 0, 0, 3, 4, 0, 0},
        {"kv_lens[0] < 0", {.kv_lens = negative}, 0, 0, 3, 4, 0, 0},
        {"q_lens[0] > n_q", {.q_lens = too_long}, 0, 0, 3, 4, 0, 0},
        {"q_lens[0] < 0", {.q_lens = negative}, 0, 0, 3, 4, 0, 0},
    };
    for (size_t c = 0; c < sizeof BAD / sizeof BAD[0]; c++) {
        memset(&r, 0x5a, sizeof r);
        const clattn_status st =
            clattn_visible_keys(BAD[c].null_desc ? NULL : &BAD[c].d, BAD[c].n_q, BAD[c].n_kv,
                                BAD[c].b, BAD[c].i, BAD[c].null_out ? NULL : &r);
        ck_assert_msg(st == CLATTN_ERROR_INVALID_ARGUMENT,
                      "clattn_visible_keys(%s): status %d (%s), expected %d (invalid argument)",
                      BAD[c].what, (int)st, clattn_status_string(st),
                      (int)CLATTN_ERROR_INVALID_ARGUMENT);
        ck_assert_msg(clattn_last_error_message(NULL)[0] != '\0',
                      "clattn_visible_keys(%s): no message", BAD[c].what);
    }
    /* the largest positions allowed are accepted */
    clattn_attention_desc edge = ok;
    edge.q_start = POS_MAX;
    edge.kv_start = -POS_MAX;
    ck_assert_int_eq(clattn_visible_keys(&edge, 3, 4, 0, 2, &r), CLATTN_SUCCESS);
}
END_TEST

/* ---- the device and the reference at the extremes --------------------------------------- */

#define P_B 2
#define P_HQ 2
#define P_HKV 1
#define P_NQ 3
#define P_NKV 7
#define P_D 4

typedef struct xconfig {
    clattn_attention_desc desc;
    int32_t kv_lens[P_B], q_lens[P_B];
    char text[400];
} xconfig;

static void xconfig_text(xconfig *c, const char *tag)
{
    const int pos = snprintf(c->text, sizeof c->text, "%s: ", tag);
    desc_text(&c->desc, P_NQ, P_NKV, P_B, c->text + pos, sizeof c->text - (size_t)pos);
}

/* A float64 attention of the problem whose visibility is exact_visible(): O, LSE. */
static void brute_attention(const tu_problem *p, const clattn_attention_desc *d, double *o,
                            double *lse)
{
    const double scale = 1.0 / sqrt((double)p->d_k);
    for (int64_t b = 0; b < p->b; b++)
        for (int64_t h = 0; h < p->h_q; h++) {
            const int64_t hk = h / (p->h_q / p->h_kv);
            for (int64_t i = 0; i < p->n_q; i++) {
                const int64_t row = (b * p->h_q + h) * p->n_q + i;
                double s[P_NKV], mx = -INFINITY;
                for (int64_t j = 0; j < p->n_kv; j++) {
                    s[j] = -INFINITY;
                    if (!exact_visible(d, p->n_q, p->n_kv, b, i, j))
                        continue;
                    double dot = 0;
                    for (int64_t c = 0; c < p->d_k; c++)
                        dot += (double)*tu_at(&p->tq, b, h, i, c) * *tu_at(&p->tk, b, hk, j, c);
                    s[j] = scale * dot;
                    mx = fmax(mx, s[j]);
                }
                double sum = 0;
                for (int64_t j = 0; j < p->n_kv; j++)
                    sum += isinf(s[j]) ? 0.0 : exp(s[j] - mx);
                lse[row] = sum > 0 ? mx + log(sum) : -INFINITY;
                for (int64_t c = 0; c < p->d_v; c++) {
                    double acc = 0;
                    for (int64_t j = 0; j < p->n_kv; j++)
                        if (!isinf(s[j]))
                            acc += exp(s[j] - mx) / sum * *tu_at(&p->tv, b, hk, j, c);
                    o[row * p->d_v + c] = acc;
                }
            }
        }
}

/* Whether every key of every row is visible under the exact rule. */
static bool all_visible(const clattn_attention_desc *d)
{
    for (int64_t b = 0; b < P_B; b++)
        for (int64_t i = 0; i < P_NQ; i++)
            for (int64_t j = 0; j < P_NKV; j++)
                if (!exact_visible(d, P_NQ, P_NKV, b, i, j))
                    return false;
    return true;
}

/* Device (both algorithms) against the reference, the reference against brute force.
 * `need_finite`: the LSE must be finite everywhere. */
static void check_extreme(const tu_problem *p, xconfig *c, bool weights, bool need_finite)
{
    const size_t rows = (size_t)(P_B * P_HQ * P_NQ), n_o = rows * P_D, n_w = rows * (size_t)P_NKV;
    float *ro = tu_alloc(n_o, NAN), *rl = tu_alloc(rows, NAN), *rw = tu_alloc(n_w, NAN);
    clattn_tensor tro = tu_problem_o(p, ro), trl = clattn_tensor_host(rl, P_B, P_HQ, P_NQ, 1),
                  trw = clattn_tensor_host(rw, P_B, P_HQ, P_NQ, P_NKV);
    clattn_attention_desc rd = c->desc;
    rd.lse = &trl;
    rd.weights = weights ? &trw : NULL;
    clattn_status st = clattn_reference_attention(&rd, &p->tq, &p->tk, &p->tv, &tro);
    ck_assert_msg(st == CLATTN_SUCCESS, "%s: reference: %s", c->text, clattn_status_string(st));

    double bo[P_B * P_HQ * P_NQ * P_D], bl[P_B * P_HQ * P_NQ];
    brute_attention(p, &c->desc, bo, bl);
    char name[600];
    snprintf(name, sizeof name, "%s [reference vs exact-rule float64] O", c->text);
    TU_ASSERT_CLOSE(name, &tro, bo, NULL, TU_TOL_DEFAULT);
    snprintf(name, sizeof name, "%s [reference vs exact-rule float64] LSE", c->text);
    TU_ASSERT_CLOSE(name, &trl, bl, NULL, TU_TOL_DEFAULT);

    for (int a = 0; a < 2; a++) {
        const char *alg = tu_algorithm_name(tu_algorithms[a]);
        float *o = tu_alloc(n_o + 4, 12345.0f), *l = tu_alloc(rows + 4, 12345.0f),
              *w = tu_alloc(n_w + 4, 12345.0f);
        clattn_tensor to = tu_problem_o(p, o), tl = clattn_tensor_host(l, P_B, P_HQ, P_NQ, 1),
                      tw = clattn_tensor_host(w, P_B, P_HQ, P_NQ, P_NKV);
        clattn_attention_desc d = c->desc;
        d.algorithm = tu_algorithms[a];
        d.lse = &tl;
        d.weights = weights ? &tw : NULL;
        TU_ASSERT_OK(clattn_attention(tu_ctx(), &d, &p->tq, &p->tk, &p->tv, &to), "%s [%s]",
                     c->text, alg);
        snprintf(name, sizeof name, "%s [%s] O", c->text, alg);
        TU_ASSERT_CLOSE(name, &to, NULL, ro, TU_TOL_DEFAULT);
        snprintf(name, sizeof name, "%s [%s] LSE", c->text, alg);
        TU_ASSERT_CLOSE(name, &tl, NULL, rl, TU_TOL_DEFAULT);
        if (weights) {
            snprintf(name, sizeof name, "%s [%s] weights", c->text, alg);
            TU_ASSERT_CLOSE(name, &tw, NULL, rw, TU_TOL_DEFAULT);
        }
        if (need_finite) {
            snprintf(name, sizeof name, "%s [%s] LSE (every key visible)", c->text, alg);
            tu_assert_finite(name, &tl);
        }
        tu_assert_untouched("O canary", o, n_o, n_o + 4, 12345.0f);
        tu_assert_untouched("LSE canary", l, rows, rows + 4, 12345.0f);
        tu_assert_untouched("weights canary", w, n_w, n_w + 4, 12345.0f);
        free(o);
        free(l);
        free(w);
    }
    free(ro);
    free(rl);
    free(rw);
}

#define N_EXTREME_SAMPLES 200

START_TEST(extremes_device_vs_reference)
{
    const uint32_t base = tu_seed() ^ 0x0016b0dau;
    tu_problem p;
    tu_problem_init(&p, P_B, P_HQ, P_HKV, P_NQ, P_NKV, P_D, P_D, base + 1, base + 2, base + 3, 8);

    /* Fixed: INT64_MAX (or INT64_MAX − 1) on each side and on both, no mask, no lengths;
     * the positions make the sum of a_i and the bound wrap in 64 bits (a_i + INT64_MAX
     * for a_i ≥ 0, a_i − INT64_MAX for a_i ≤ −2). Where the exact rule shows every key
     * to every row (all but fixed 1), the LSE must also be finite. */
    static const struct {
        int64_t wl, wr, q_start, kv_start;
    } FIXED[] = {
        {-1, INT64_MAX, 0, 0},       /* R16 itself */
        {0, INT64_MAX, 0, 0},        /* left 0 would hide keys: not all-visible */
        {INT64_MAX, -1, 0, 2},       /* R16's variant */
        {INT64_MAX, -1, 0, POS_MAX}, /* a_i ≈ −2^53 */
        {INT64_MAX, INT64_MAX, -POS_MAX, POS_MAX},
        {INT64_MAX, INT64_MAX, POS_MAX, -POS_MAX},
        {INT64_MAX, INT64_MAX, 0, 0},
        {-1, INT64_MAX, 100000000, 0},
        {INT64_MAX - 1, INT64_MAX - 1, POS_MAX, -POS_MAX},
    };
    int all_left = 0, all_right = 0, configs = 0;
    for (size_t f = 0; f < sizeof FIXED / sizeof FIXED[0]; f++) {
        xconfig c;
        memset(&c, 0, sizeof c);
        c.desc = clattn_attention_desc_default();
        c.desc.window = 1;
        c.desc.window_left = FIXED[f].wl;
        c.desc.window_right = FIXED[f].wr;
        c.desc.q_start = FIXED[f].q_start;
        c.desc.kv_start = FIXED[f].kv_start;
        char tag[32];
        snprintf(tag, sizeof tag, "fixed %zu", f);
        xconfig_text(&c, tag);
        const bool all = all_visible(&c.desc);
        if (all && FIXED[f].wl == INT64_MAX)
            all_left++;
        if (all && FIXED[f].wr == INT64_MAX)
            all_right++;
        check_extreme(&p, &c, f % 2 == 0, all);
        configs++;
    }
    ck_assert_msg(all_left > 0 && all_right > 0,
                  "the fixed configurations must include INT64_MAX on each side with every key "
                  "visible (left %d, right %d)",
                  all_left, all_right);

    /* A sample of the grid of visible_keys_exact (the window, mask and positions are
     * run-time arguments: one set of programs serves them all). */
    for (int s = 0; s < N_EXTREME_SAMPLES; s++) {
        rng_state = base + 0x1000u + (uint32_t)s;
        xconfig c;
        memset(&c, 0, sizeof c);
        c.desc = clattn_attention_desc_default();
        c.desc.mask = MASKS[rnd(4)];
        c.desc.window = rnd(6) != 0;
        c.desc.window_left = BOUNDS[rnd(N_BOUNDS)];
        c.desc.window_right = BOUNDS[rnd(N_BOUNDS)];
        c.desc.q_start = POSITIONS[rnd(N_POSITIONS)];
        c.desc.kv_start = rnd(3) == 0 ? c.desc.q_start : POSITIONS[rnd(N_POSITIONS)];
        if (rnd(3) == 0) {
            for (int b = 0; b < P_B; b++)
                c.kv_lens[b] = (int32_t)rnd(P_NKV + 1);
            c.desc.kv_lens = c.kv_lens;
        }
        if (rnd(3) == 0) {
            for (int b = 0; b < P_B; b++)
                c.q_lens[b] = (int32_t)rnd(P_NQ + 1);
            c.desc.q_lens = c.q_lens;
        }
        char tag[48];
        snprintf(tag, sizeof tag, "sample %d (seed 0x%08x)", s, base + 0x1000u + (uint32_t)s);
        xconfig_text(&c, tag);
        check_extreme(&p, &c, s % 4 == 0, false);
        configs++;
    }
    printf("extremes_device_vs_reference: %d configurations x 2 algorithms (all keys visible "
           "with INT64_MAX left: %d, right: %d), base seed 0x%08x\n",
           configs, all_left, all_right, base);
    tu_problem_free(&p);
}
END_TEST

int main(void)
{
    tu_seed_init(0x16u);
    Suite *s = suite_create("positions");
    TCase *tc_case = tcase_create("case"), *tc_rule = tcase_create("rule"),
          *tc_dev = tcase_create("device");
    tcase_set_timeout(tc_case, 300);
    tcase_set_timeout(tc_rule, 300);
    tcase_set_timeout(tc_dev, 900);
    tcase_add_test(tc_case, R16_case);
    tcase_add_test(tc_rule, visible_keys_exact);
    tcase_add_test(tc_rule, visible_keys_invalid_arguments);
    tcase_add_test(tc_dev, extremes_device_vs_reference);
    suite_add_tcase(s, tc_case);
    suite_add_tcase(s, tc_rule);
    suite_add_tcase(s, tc_dev);
    return tu_run_suite(s);
}
