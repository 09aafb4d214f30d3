/* The cases R01–R14 of tests/cases/ (real failures turned into inputs with the right
 * answers) as one Check test per subcase, named <case>_<subcase>; R16 and R17, in a
 * simpler layout, are test_positions' and test_split's. The JSON is read at test time,
 * so the expected numbers and tolerances are the files' own. Attention runs both
 * algorithms; softmax-only subcases run clattn_softmax on [1, 1, rows, width].
 * Subcases that need features the API does not have yet are listed in SUBCASES with
 * the reason and printed as skipped (issue: features). */
#include "testutil.h"

#include <ctype.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

static const char *const CASE_IDS[] = {"R01", "R03", "R06", "R07", "R08",
                                       "R09", "R10", "R11", "R12", "R14"};
#define N_CASE_IDS ((int)(sizeof CASE_IDS / sizeof CASE_IDS[0]))

/* ---- shared helpers ------------------------------------------------------------------ */

static clattn_tensor mat_view(float *data, int64_t rows, int64_t cols)
{
    return clattn_tensor_host(data, 1, 1, rows, cols);
}

/* Q, K, V of one head from generator seeds. */
static void problem_1head(tu_problem *p, int64_t n_q, int64_t n_kv, int64_t d_k, int64_t d_v,
                          uint32_t sq, uint32_t sk, uint32_t sv)
{
    tu_problem_init(p, 1, 1, 1, n_q, n_kv, d_k, d_v, sq, sk, sv, 0);
}

/* An operand as a case file words it: {"gen_seed": N}, or a string such as
 * "gen(6001, Nq x 8)", "Q[r][c] = 1024*gen(3001, r*16+c)" or "gen(14001) * 2^-126". */
static void operand(const cJSON *in, const char *name, uint32_t *seed, float *factor)
{
    const cJSON *o = tu_jget(in, name);
    *factor = 1.0f;
    if (cJSON_IsObject(o)) {
        *seed = (uint32_t)tu_jnum(tu_jget(o, "gen_seed"));
        return;
    }
    const char *s = cJSON_IsString(o) ? o->valuestring : "";
    const char *g = strstr(s, "gen(");
    ck_assert_msg(g != NULL, "cannot read operand %s: %s", name, s);
    *seed = (uint32_t)strtoul(g + 4, NULL, 10);
    if (g > s && g[-1] == '*') { /* "<factor>*gen(" */
        const char *b = g - 1;
        while (b > s && (isdigit((unsigned char)b[-1]) || b[-1] == '.'))
            b--;
        *factor = strtof(b, NULL);
    }
    if (strstr(s, "2^-126"))
        *factor *= ldexpf(1.0f, -126);
}

/* One head with Q, K, V as the case's inputs describe them, `tail` NaN floats after
 * each (see tu_problem). */
static void problem_from(tu_problem *p, const cJSON *in, int64_t n_q, int64_t n_kv, int64_t d_k,
                         int64_t d_v, size_t tail)
{
    uint32_t seed[3];
    float factor[3];
    operand(in, "Q", &seed[0], &factor[0]);
    operand(in, "K", &seed[1], &factor[1]);
    operand(in, "V", &seed[2], &factor[2]);
    tu_problem_init(p, 1, 1, 1, n_q, n_kv, d_k, d_v, seed[0], seed[1], seed[2], tail);
    float *m[3] = {p->q, p->k, p->v};
    const int64_t n[3] = {n_q * d_k, n_kv * d_k, n_kv * d_v};
    for (int t = 0; t < 3; t++)
        for (int64_t i = 0; i < n[t]; i++)
            m[t][i] *= factor[t];
}

/* The same with the sizes of the inputs' Nq, Nk, dk, dv. */
static void problem_sized(tu_problem *p, const cJSON *in)
{
    problem_from(p, in, (int64_t)tu_jnum(tu_jget(in, "Nq")), (int64_t)tu_jnum(tu_jget(in, "Nk")),
                 (int64_t)tu_jnum(tu_jget(in, "dk")), (int64_t)tu_jnum(tu_jget(in, "dv")), 0);
}

/* Both algorithms; O must match `expected` (a nested JSON array) within tol. */
static void expect_o(const char *what, const tu_problem *p, const clattn_attention_desc *desc,
                     const cJSON *expected, tu_tol tol)
{
    size_t n = 0;
    double *e = tu_jarray(expected, &n);
    ck_assert_msg(n == (size_t)(p->b * p->h_q * p->n_q * p->d_v),
                  "%s: the case file has %zu expected values for a %lldx%lld O", what, n,
                  (long long)p->n_q, (long long)p->d_v);
    for (int a = 0; a < 2; a++) {
        float *o = tu_run(p, desc, tu_algorithms[a]);
        clattn_tensor to = tu_problem_o(p, o);
        char name[256];
        snprintf(name, sizeof name, "%s [%s]", what, tu_algorithm_name(tu_algorithms[a]));
        TU_ASSERT_CLOSE(name, &to, e, NULL, tol);
        free(o);
    }
    free(e);
}

/* Checks a packed [1,1,n,d] O against whichever of O, first_row, last_row,
 * first_row_first4, last_col, sum, sum_abs and sum_sq `exp` lists. Elements within
 * tol; sum within sum_rtol·(expected sum_abs), sum_abs and sum_sq within
 * sum_rtol·|expected|. */
static void check_aggregates(const char *what, float *o, int64_t n, int64_t d, const cJSON *exp,
                             tu_tol tol, double sum_rtol)
{
    char name[256];
    int checks = 0;
    const struct {
        const char *key;
        int64_t rows, cols, offset, row_stride;
    } parts[] = {
        {"O", n, d, 0, d},
        {"first_row", 1, d, 0, d},
        {"last_row", 1, d, (n - 1) * d, d},
        {"first_row_first4", 1, d < 4 ? d : 4, 0, d},
        {"last_col", n, 1, d - 1, d},
    };
    for (size_t i = 0; i < sizeof parts / sizeof parts[0]; i++) {
        const cJSON *e = tu_jfind(exp, parts[i].key);
        if (!e)
            continue;
        size_t count = 0;
        double *ev = tu_jarray(e, &count);
        ck_assert_msg(count == (size_t)(parts[i].rows * parts[i].cols), "%s: %s has %zu values",
                      what, parts[i].key, count);
        const int64_t shape[4] = {1, 1, parts[i].rows, parts[i].cols};
        const int64_t strides[4] = {n * d, n * d, parts[i].row_stride, 1};
        clattn_tensor v = tu_view(o, shape, strides, parts[i].offset);
        snprintf(name, sizeof name, "%s %s", what, parts[i].key);
        TU_ASSERT_CLOSE(name, &v, ev, NULL, tol);
        free(ev);
        checks++;
    }
    double sum = 0, sum_abs = 0, sum_sq = 0;
    for (int64_t i = 0; i < n * d; i++)
        sum += o[i], sum_abs += fabs(o[i]), sum_sq += (double)o[i] * o[i];
    const cJSON *es = tu_jfind(exp, "sum"), *ea = tu_jfind(exp, "sum_abs"),
                *eq = tu_jfind(exp, "sum_sq");
    if (ea) {
        double x = tu_jnum(ea);
        ck_assert_msg(fabs(sum_abs - x) <= sum_rtol * fabs(x), "%s: sum_abs %.10g, expected %.10g",
                      what, sum_abs, x);
        checks++;
    }
    if (es) {
        double x = tu_jnum(es), scale_abs = ea ? tu_jnum(ea) : fabs(x);
        ck_assert_msg(fabs(sum - x) <= sum_rtol * scale_abs, "%s: sum %.10g, expected %.10g", what,
                      sum, x);
        checks++;
    }
    if (eq) {
        double x = tu_jnum(eq);
        ck_assert_msg(fabs(sum_sq - x) <= sum_rtol * fabs(x), "%s: sum_sq %.10g, expected %.10g",
                      what, sum_sq, x);
        checks++;
    }
    ck_assert_msg(checks > 0, "%s: the case file lists no expected values", what);
}

static int parse_shape(const char *s, int64_t *a, int64_t *b)
{
    long long x = 0, y = 0;
    int n = sscanf(s, "%lldx%lld", &x, &y);
    *a = x, *b = y;
    return n;
}

/* Softmax of rows given as JSON arrays (rows of one width run together in one
 * [1,1,rows,width] call, so a NaN row sits next to finite ones), each compared with
 * its expected row. */
static void softmax_rows(const char *what, const cJSON *rows, const cJSON *expected, tu_tol tol)
{
    const int n_rows = cJSON_GetArraySize(rows);
    ck_assert_int_eq(n_rows, cJSON_GetArraySize(expected));
    bool *done = calloc((size_t)n_rows, sizeof(bool));
    ck_assert_ptr_nonnull(done);
    for (int r0 = 0; r0 < n_rows; r0++) {
        if (done[r0])
            continue;
        const int width = cJSON_GetArraySize(cJSON_GetArrayItem(rows, r0));
        int idx[64], m = 0;
        for (int r = r0; r < n_rows && m < 64; r++)
            if (!done[r] && cJSON_GetArraySize(cJSON_GetArrayItem(rows, r)) == width)
                idx[m++] = r, done[r] = true;
        float *in = tu_alloc((size_t)(m * width), 0.0f),
              *out = tu_alloc((size_t)(m * width), 12345.0f);
        for (int i = 0; i < m; i++)
            for (int j = 0; j < width; j++)
                in[i * width + j] =
                    (float)tu_jnum(cJSON_GetArrayItem(cJSON_GetArrayItem(rows, idx[i]), j));
        clattn_tensor ti = mat_view(in, m, width), to = mat_view(out, m, width);
        TU_ASSERT_OK(clattn_softmax(tu_ctx(), NULL, &ti, &to), "%s: clattn_softmax(%dx%d)", what, m,
                     width);
        for (int i = 0; i < m; i++) {
            size_t count = 0;
            double *e = tu_jarray(cJSON_GetArrayItem(expected, idx[i]), &count);
            ck_assert_int_eq((int)count, width);
            const int64_t shape[4] = {1, 1, 1, width}, strides[4] = {0, 0, width, 1};
            clattn_tensor row = tu_view(out, shape, strides, (int64_t)i * width);
            char name[160];
            snprintf(name, sizeof name, "%s row %d", what, idx[i]);
            TU_ASSERT_CLOSE(name, &row, e, NULL, tol);
            free(e);
        }
        free(in);
        free(out);
    }
    free(done);
}

/* ---- the generator ------------------------------------------------------------------- */

START_TEST(generator_check_values)
{
    static const char *const c_source =
        "uint32_t lowbias32(uint32_t x){x^=x>>16;x*=0x7feb352dU;x^=x>>15;x*=0x846ca68bU;"
        "x^=x>>16;return x;} float gen(uint32_t seed,uint32_t i){uint32_t "
        "h=lowbias32(i+seed*0x9E3779B9U);return (float)((int32_t)(h>>8)-8388608)/8388608.0f;}";
    for (int c = 0; c < N_CASE_IDS; c++) {
        cJSON *root = tu_case_load(CASE_IDS[c]);
        const cJSON *g = tu_jget(root, "generator");
        ck_assert_str_eq(tu_jget(g, "c_source")->valuestring, c_source);
        int checked = 0;
        const cJSON *cv;
        cJSON_ArrayForEach(cv, tu_jget(g, "check_values"))
        {
            unsigned seed = 0, i = 0;
            ck_assert_int_eq(sscanf(cv->string, "gen(%u,%u)", &seed, &i), 2);
            float want = (float)tu_jnum(cv), got = tu_gen(seed, i);
            ck_assert_msg(got == want, "%s: %s = %.9g, tu_gen gives %.9g", CASE_IDS[c], cv->string,
                          (double)want, (double)got);
            checked++;
        }
        ck_assert_int_ge(checked, 3);
        cJSON_Delete(root);
    }
}
END_TEST

/* ---- R01: fully masked rows ----------------------------------------------------------- */

START_TEST(R01_C_softmax_stage_all_minus_inf_rows)
{
    cJSON *root = tu_case_load("R01");
    const cJSON *sub = tu_subcase(root, "C_softmax_stage_all_minus_inf_rows");
    const tu_tol tol = tu_jtol(tu_jget(sub, "tolerance"));
    const cJSON *w;
    cJSON_ArrayForEach(w, tu_jget(sub, "inputs/row_widths"))
    {
        const int width = (int)tu_jnum(w), rows = 3;
        float *in = tu_alloc((size_t)(rows * width), -INFINITY);
        float *out = tu_alloc((size_t)(rows * width), NAN);
        double *zeros = calloc((size_t)(rows * width), sizeof(double));
        clattn_tensor ti = mat_view(in, rows, width), to = mat_view(out, rows, width);
        TU_ASSERT_OK(clattn_softmax(tu_ctx(), NULL, &ti, &to), "clattn_softmax(3x%d of -inf)",
                     width);
        char name[96];
        snprintf(name, sizeof name, "R01-C softmax of -inf rows, width %d", width);
        TU_ASSERT_CLOSE(name, &to, zeros, NULL, tol);
        free(in);
        free(out);
        free(zeros);
    }
    cJSON_Delete(root);
}
END_TEST

/* R01-A/B: keep[i][j] = (i < 4 && j < 4) as a bool mask tensor (A) and as an additive
 * 0 / −inf float mask (B), broadcast over batch and heads ([1, 1, 8, 8]); rows 4..7
 * see no key and output zeros (LSE −∞), rows 0..3 match the case file. Both also with
 * the masked keys' K and V rows poisoned with NaN: masked keys contribute nothing. */
static void r01_mask_tensor(const char *what, bool additive)
{
    cJSON *root = tu_case_load("R01");
    const cJSON *sub = tu_subcase(root, "A_bool_mask_rows4to7_empty");
    const cJSON *in = tu_jget(sub, "inputs");
    tu_problem p;
    problem_sized(&p, in);
    const int64_t n_q = p.n_q, n_kv = p.n_kv;
    uint8_t keep[64];
    float add[64];
    ck_assert_int_le(n_q * n_kv, 64);
    for (int64_t i = 0; i < n_q; i++)
        for (int64_t j = 0; j < n_kv; j++) {
            keep[i * n_kv + j] = i < 4 && j < 4;
            add[i * n_kv + j] = keep[i * n_kv + j] ? 0.0f : -INFINITY;
        }
    clattn_tensor mt = clattn_tensor_host(additive ? (void *)add : (void *)keep, 1, 1, n_q, n_kv);
    mt.dtype = additive ? CLATTN_FLOAT32 : CLATTN_BOOL;
    clattn_attention_desc desc = clattn_attention_desc_default();
    desc.mask_tensor = &mt;
    printf("%s: keep[i][j] = (i<4 && j<4) as a %s mask tensor [1, 1, %lld, %lld]\n", what,
           additive ? "float32 additive (0 / -inf)" : "bool", (long long)n_q, (long long)n_kv);
    expect_o(what, &p, &desc, tu_jget(sub, "expected/O"), tu_jtol(tu_jget(sub, "tolerance")));
    /* poison the masked keys (4..7): the result must not change */
    for (int64_t j = 4; j < n_kv; j++) {
        tu_fill_value(p.k + j * p.d_k, (size_t)p.d_k, NAN);
        tu_fill_value(p.v + j * p.d_v, (size_t)p.d_v, 1e30f);
    }
    char name[96];
    snprintf(name, sizeof name, "%s, masked keys NaN / 1e30", what);
    expect_o(name, &p, &desc, tu_jget(sub, "expected/O"), tu_jtol(tu_jget(sub, "tolerance")));
    tu_problem_free(&p);
    cJSON_Delete(root);
}

START_TEST(R01_A_bool_mask_rows4to7_empty)
{
    r01_mask_tensor("R01-A", false);
}
END_TEST

START_TEST(R01_B_additive_minus_inf_mask_same_pattern)
{
    r01_mask_tensor("R01-B", true);
}
END_TEST

/* Causal top-left with key 0 as padding: key j visible iff 1 ≤ j ≤ i. Without a mask
 * tensor this is exactly the view of keys 1..5 (K and V offset by one row) under
 * CAUSAL_BOTTOM_RIGHT: key j' = j − 1 visible iff j' ≤ i + 5 − 6. Row 0 sees no key.
 * The padding row itself is NaN: it must contribute nothing. */
START_TEST(R01_D_causal_plus_padding_combination)
{
    cJSON *root = tu_case_load("R01");
    const cJSON *sub = tu_subcase(root, "D_causal_plus_padding_combination");
    const cJSON *in = tu_jget(sub, "inputs");
    tu_problem p;
    problem_sized(&p, in);
    const int64_t n = p.n_q, d = p.d_k;
    ck_assert_int_eq(p.n_kv, n);
    tu_fill_value(p.k, (size_t)d, NAN); /* key 0: padding */
    tu_fill_value(p.v, (size_t)p.d_v, NAN);
    p.n_kv = n - 1;
    p.tk = clattn_tensor_host(p.k, 1, 1, n - 1, d);
    p.tk.offset = d;
    p.tv = clattn_tensor_host(p.v, 1, 1, n - 1, p.d_v);
    p.tv.offset = p.d_v;
    printf("R01_D: causal + padding key 0 expressed as keys 1..%lld (offset views) under "
           "causal_bottom_right; padding row set to NaN\n",
           (long long)(n - 1));
    clattn_attention_desc desc = clattn_attention_desc_default();
    desc.mask = CLATTN_MASK_CAUSAL_BOTTOM_RIGHT;
    expect_o("R01-D", &p, &desc, tu_jget(sub, "expected/O"), tu_jtol(tu_jget(sub, "tolerance")));
    /* as the case states it: all 6 keys, causal top-left, a bool mask hiding key 0 */
    uint8_t keep[64];
    ck_assert_int_le(n * n, 64);
    for (int64_t i = 0; i < n; i++)
        for (int64_t j = 0; j < n; j++)
            keep[i * n + j] = j != 0;
    clattn_tensor mt = clattn_tensor_host(keep, 1, 1, n, n);
    mt.dtype = CLATTN_BOOL;
    p.n_kv = n;
    p.tk = clattn_tensor_host(p.k, 1, 1, n, d);
    p.tv = clattn_tensor_host(p.v, 1, 1, n, p.d_v);
    desc.mask = CLATTN_MASK_CAUSAL_TOP_LEFT;
    desc.mask_tensor = &mt;
    expect_o("R01-D (bool mask tensor + causal)", &p, &desc, tu_jget(sub, "expected/O"),
             tu_jtol(tu_jget(sub, "tolerance")));
    tu_problem_free(&p);
    cJSON_Delete(root);
}
END_TEST

START_TEST(R01_E_empty_key_or_query_set)
{
    cJSON *root = tu_case_load("R01");
    const cJSON *sub = tu_subcase(root, "E_empty_key_or_query_set");
    const cJSON *in = tu_jget(sub, "inputs");
    const cJSON *shapes = tu_jget(in, "shapes");
    ck_assert_str_eq(cJSON_GetArrayItem(shapes, 0)->valuestring, "Nq=3, Nk=0, dk=dv=4");
    ck_assert_str_eq(cJSON_GetArrayItem(shapes, 1)->valuestring, "Nq=0, Nk=5, dk=dv=4");
    const tu_tol tol = tu_jtol(tu_jget(sub, "tolerance"));
    clattn_attention_desc desc = clattn_attention_desc_default();

    /* Nq=3, Nk=0: 3x4 zeros */
    tu_problem p;
    problem_from(&p, in, 3, 0, 4, 4, 0);
    double zeros[12] = {0};
    for (int a = 0; a < 2; a++) {
        float *o = tu_run(&p, &desc, tu_algorithms[a]);
        clattn_tensor to = tu_problem_o(&p, o);
        char name[96];
        snprintf(name, sizeof name, "R01-E Nk=0 [%s]", tu_algorithm_name(tu_algorithms[a]));
        TU_ASSERT_CLOSE(name, &to, zeros, NULL, tol);
        free(o);
    }
    tu_problem_free(&p);

    /* Nq=0, Nk=5: success, output untouched */
    problem_from(&p, in, 0, 5, 4, 4, 0);
    float obuf[16];
    for (int a = 0; a < 2; a++) {
        tu_fill_value(obuf, 16, -7.0f);
        clattn_tensor to = tu_problem_o(&p, obuf);
        desc.algorithm = tu_algorithms[a];
        TU_ASSERT_OK(clattn_attention(tu_ctx(), &desc, &p.tq, &p.tk, &p.tv, &to), "R01-E Nq=0 [%s]",
                     tu_algorithm_name(desc.algorithm));
        tu_assert_untouched("R01-E Nq=0: output buffer", obuf, 0, 16, -7.0f);
    }
    tu_problem_free(&p);
    cJSON_Delete(root);
}
END_TEST

/* ---- R03: large logits ----------------------------------------------------------------- */

START_TEST(R03_A_softmax_rows)
{
    cJSON *root = tu_case_load("R03");
    const cJSON *sub = tu_subcase(root, "A_softmax_rows");
    softmax_rows("R03-A", tu_jget(sub, "inputs/rows"), tu_jget(sub, "expected/weights"),
                 tu_jtol(tu_jget(sub, "tolerance")));
    cJSON_Delete(root);
}
END_TEST

START_TEST(R03_B_attention_scores_around_1e6)
{
    cJSON *root = tu_case_load("R03");
    const cJSON *sub = tu_subcase(root, "B_attention_scores_around_1e6");
    const cJSON *in = tu_jget(sub, "inputs");
    tu_problem p;
    problem_sized(&p, in); /* Q, K = 1024·gen(...) */
    clattn_attention_desc desc = clattn_attention_desc_default();
    desc.scale = (float)tu_jnum(tu_jget(in, "scale"));
    expect_o("R03-B", &p, &desc, tu_jget(sub, "expected/O"), tu_jtol(tu_jget(sub, "tolerance")));
    tu_problem_free(&p);
    cJSON_Delete(root);
}
END_TEST

/* ---- R06: lengths off the tile grid, poison, canaries ------------------------------------- */

#define R06_EXTRA_ROWS 64
#define R06_CANARIES 64

START_TEST(R06_A_size_sweep)
{
    cJSON *root = tu_case_load("R06");
    const cJSON *sub = tu_subcase(root, "A_size_sweep");
    const cJSON *in = tu_jget(sub, "inputs");
    const tu_tol tol = tu_jtol(tu_jget(sub, "tolerance"));
    const double sum_rtol = tu_jnum(tu_jget(sub, "tolerance/sum_checks_rtol"));
    const int64_t dk = (int64_t)tu_jnum(tu_jget(in, "dk")),
                  dv = (int64_t)tu_jnum(tu_jget(in, "dv"));
    const cJSON *size;
    cJSON_ArrayForEach(size, tu_jget(in, "sizes_NqxNk"))
    {
        int64_t nq, nk;
        ck_assert_int_eq(parse_shape(size->valuestring, &nq, &nk), 2);
        for (int variant = 0; variant < 3; variant++) { /* plain, negbias, ones */
            static const char *const names[] = {"plain", "negbias", "ones"};
            tu_problem p; /* Q, K, V followed by 64 rows of NaN */
            problem_from(&p, in, nq, nk, dk, dv, (size_t)(R06_EXTRA_ROWS * (dk > dv ? dk : dv)));
            if (variant == 1) {
                for (int64_t i = 0; i < nq; i++)
                    p.q[i * dk] = 8.0f;
                for (int64_t j = 0; j < nk; j++)
                    p.k[j * dk] = -8.0f;
            } else if (variant == 2) {
                tu_fill_value(p.v, (size_t)(nk * dv), 1.0f);
            }
            clattn_attention_desc desc = clattn_attention_desc_default();
            float *ref = tu_reference(&p, &desc, NULL);
            const size_t len[5] = {(size_t)(nq * dk) + p.tail, (size_t)(nk * dk) + p.tail,
                                   (size_t)(nk * dv) + p.tail, (size_t)(nq * dv) + R06_CANARIES, 0};
            for (int a = 0; a < 2; a++) {
                float *host_o = NULL;
                for (int via_buffers = 0; via_buffers < 2; via_buffers++) {
                    char what[160];
                    snprintf(what, sizeof what, "R06 %s %s [%s, %s]", size->valuestring,
                             names[variant], tu_algorithm_name(tu_algorithms[a]),
                             via_buffers ? "poisoned cl_mem, enqueue" : "host");
                    float *o = tu_alloc(len[3], 12345.0f);
                    clattn_tensor to = tu_problem_o(&p, o);
                    clattn_attention_desc d = desc;
                    d.algorithm = tu_algorithms[a];
                    clattn_status st =
                        via_buffers
                            ? tu_attention_via_buffers(tu_ctx(), &d, &p.tq, &p.tk, &p.tv, &to, len)
                            : clattn_attention(tu_ctx(), &d, &p.tq, &p.tk, &p.tv, &to);
                    TU_ASSERT_OK(st, "%s", what);
                    tu_assert_untouched(what, o, (size_t)(nq * dv), len[3], 12345.0f);
                    if (variant == 2) {
                        double *ones = malloc(sizeof(double) * (size_t)(nq * dv));
                        for (int64_t i = 0; i < nq * dv; i++)
                            ones[i] = 1.0;
                        TU_ASSERT_CLOSE(what, &to, ones, NULL, ((tu_tol){1e-6, 0.0}));
                        free(ones);
                    } else {
                        char key[64];
                        snprintf(key, sizeof key, "expected/by_size/%s/%s", size->valuestring,
                                 names[variant]);
                        check_aggregates(what, o, nq, dv, tu_jget(sub, key), tol, sum_rtol);
                        TU_ASSERT_CLOSE(what, &to, NULL, ref, tol);
                    }
                    if (!via_buffers) {
                        host_o = o;
                        continue;
                    }
                    /* the poison past the ends must change nothing, not one bit */
                    ck_assert_msg(memcmp(o, host_o, sizeof(float) * (size_t)(nq * dv)) == 0,
                                  "%s: differs from the host run on unpoisoned copies", what);
                    free(o);
                }
                free(host_o);
            }
            free(ref);
            tu_problem_free(&p);
        }
    }
    cJSON_Delete(root);
}
END_TEST

/* ---- R07: n_q != n_kv with causal masks ------------------------------------------------ */

START_TEST(R07_A_shapes_both_conventions)
{
    cJSON *root = tu_case_load("R07");
    const cJSON *sub = tu_subcase(root, "A_shapes_both_conventions");
    const tu_tol tol = tu_jtol(tu_jget(sub, "tolerance"));
    const int64_t dk = (int64_t)tu_jnum(tu_jget(sub, "inputs/dk")),
                  dv = (int64_t)tu_jnum(tu_jget(sub, "inputs/dv"));
    static const struct {
        const char *key;
        clattn_mask mask;
    } masks[] = {{"top_left", CLATTN_MASK_CAUSAL_TOP_LEFT},
                 {"bottom_right", CLATTN_MASK_CAUSAL_BOTTOM_RIGHT},
                 {"no_mask", CLATTN_MASK_NONE}};
    const cJSON *shape;
    cJSON_ArrayForEach(shape, tu_jget(sub, "inputs/shapes_NqxNk"))
    {
        int64_t nq, nk;
        ck_assert_int_eq(parse_shape(shape->valuestring, &nq, &nk), 2);
        tu_problem p;
        problem_from(&p, tu_jget(sub, "inputs"), nq, nk, dk, dv, 0);
        for (int m = 0; m < 3; m++) {
            char key[96], what[96];
            snprintf(key, sizeof key, "expected/by_shape/%s/%s", shape->valuestring, masks[m].key);
            snprintf(what, sizeof what, "R07 %s %s", shape->valuestring, masks[m].key);
            clattn_attention_desc desc = clattn_attention_desc_default();
            desc.mask = masks[m].mask;
            expect_o(what, &p, &desc, tu_jget(sub, key), tol);
        }
        tu_problem_free(&p);
    }
    cJSON_Delete(root);
}
END_TEST

/* ---- R08: head dimensions off the grid ------------------------------------------------- */

START_TEST(R08_A_head_dim_sweep)
{
    cJSON *root = tu_case_load("R08");
    const cJSON *sub = tu_subcase(root, "A_head_dim_sweep");
    const tu_tol tol = tu_jtol(tu_jget(sub, "tolerance"));
    const int64_t n = (int64_t)tu_jnum(tu_jget(sub, "inputs/Nq"));
    ck_assert_int_eq(n, (int64_t)tu_jnum(tu_jget(sub, "inputs/Nk")));
    const cJSON *dj;
    cJSON_ArrayForEach(dj, tu_jget(sub, "inputs/dk=dv"))
    {
        const int64_t d = (int64_t)tu_jnum(dj);
        tu_problem p;
        problem_from(&p, tu_jget(sub, "inputs"), n, n, d, d, 0);
        for (int64_t i = 0; i < n; i++) { /* the last column decides */
            p.q[i * d + d - 1] = 1.0f + (float)i / 4.0f;
            p.k[i * d + d - 1] = 2.0f * (float)(i - 2);
            p.v[i * d + d - 1] = (float)i;
        }
        clattn_attention_desc desc = clattn_attention_desc_default(); /* scale 1/sqrt(d) */
        float *ref = tu_reference(&p, &desc, NULL);
        char key[64], what[96];
        snprintf(key, sizeof key, "expected/by_d/d=%lld", (long long)d);
        for (int a = 0; a < 2; a++) {
            snprintf(what, sizeof what, "R08 d=%lld [%s]", (long long)d,
                     tu_algorithm_name(tu_algorithms[a]));
            float *o = tu_run(&p, &desc, tu_algorithms[a]);
            clattn_tensor to = tu_problem_o(&p, o);
            check_aggregates(what, o, n, d, tu_jget(sub, key), tol, tol.rtol);
            TU_ASSERT_CLOSE(what, &to, NULL, ref, tol);
            free(o);
        }
        free(ref);
        tu_problem_free(&p);
    }
    cJSON_Delete(root);
}
END_TEST

START_TEST(R08_B_dk65_dv3)
{
    cJSON *root = tu_case_load("R08");
    const cJSON *sub = tu_subcase(root, "B_dk65_dv3");
    const cJSON *in = tu_jget(sub, "inputs");
    tu_problem p;
    problem_sized(&p, in);
    clattn_attention_desc desc = clattn_attention_desc_default();
    expect_o("R08-B", &p, &desc, tu_jget(sub, "expected/O"), tu_jtol(tu_jget(sub, "tolerance")));
    tu_problem_free(&p);
    cJSON_Delete(root);
}
END_TEST

/* ---- R09: strided, offset and column-major operands -------------------------------------- */

static void r09(const char *subcase, float scale)
{
    cJSON *root = tu_case_load("R09");
    const cJSON *sub = tu_subcase(root, subcase);
    const cJSON *A = tu_subcase(root, "A_unscaled_as_in_text");
    size_t nx = 0;
    double *x = tu_jarray(tu_jget(A, "inputs/X"), &nx);
    ck_assert_int_eq((int)nx, 18);
    size_t ne = 0;
    double *e = tu_jarray(tu_jget(sub, "expected/O"), &ne);
    ck_assert_int_eq((int)ne, 18);
    const tu_tol tol = tu_jtol(tu_jget(sub, "tolerance"));

    /* one 220-float buffer, NaN except the three views */
    float buf[220], xp[18];
    tu_fill_value(buf, 220, NAN);
    for (int r = 0; r < 6; r++)
        for (int c = 0; c < 3; c++) {
            const float v = (float)x[r * 3 + c];
            xp[r * 3 + c] = v;
            buf[5 + 7 * r + c] = v;   /* Q: offset 5, row stride 7 */
            buf[61 + 4 * r + c] = v;  /* K: offset 61, row stride 4 */
            buf[101 + 8 * c + r] = v; /* V: offset 101, column-major, column stride 8 */
        }
    const int64_t shape[4] = {1, 1, 6, 3};
    const int64_t sq[4] = {42, 42, 7, 1}, sk[4] = {24, 24, 4, 1}, sv[4] = {24, 24, 1, 8},
                  so[4] = {30, 30, 5, 1};
    clattn_tensor q = tu_view(buf, shape, sq, 5), k = tu_view(buf, shape, sk, 61),
                  v = tu_view(buf, shape, sv, 101);
    clattn_tensor packed = mat_view(xp, 6, 3);
    clattn_attention_desc desc = clattn_attention_desc_default();
    desc.scale = scale;
    const size_t len[5] = {220, 220, 220, 40, 0};
    for (int a = 0; a < 2; a++) {
        desc.algorithm = tu_algorithms[a];
        float packed_o[18];
        clattn_tensor tp = mat_view(packed_o, 6, 3);
        TU_ASSERT_OK(clattn_attention(tu_ctx(), &desc, &packed, &packed, &packed, &tp),
                     "R09 packed run");
        for (int via_buffers = 0; via_buffers < 2; via_buffers++) {
            char what[128];
            snprintf(what, sizeof what, "R09 %s [%s, %s]", subcase,
                     tu_algorithm_name(desc.algorithm), via_buffers ? "cl_mem, enqueue" : "host");
            float obuf[40];
            tu_fill_value(obuf, 40, -7.0f);
            clattn_tensor o = tu_view(obuf, shape, so, 3); /* offset 3, row stride 5 */
            TU_ASSERT_OK(via_buffers
                             ? tu_attention_via_buffers(tu_ctx(), &desc, &q, &k, &v, &o, len)
                             : clattn_attention(tu_ctx(), &desc, &q, &k, &v, &o),
                         "%s", what);
            TU_ASSERT_CLOSE(what, &o, e, NULL, tol);
            char name[160];
            snprintf(name, sizeof name, "%s vs the packed run", what);
            TU_ASSERT_CLOSE(name, &o, NULL, packed_o, tol);
            for (int i = 0; i < 40; i++) {
                const int r = (i - 3) / 5, c = (i - 3) % 5;
                const bool inside = i >= 3 && r < 6 && c < 3;
                ck_assert_msg(inside || obuf[i] == -7.0f,
                              "%s: O buffer element %d outside the window was written (%g)", what,
                              i, (double)obuf[i]);
            }
        }
    }
    free(x);
    free(e);
    cJSON_Delete(root);
}

START_TEST(R09_A_unscaled_as_in_text)
{
    r09("A_unscaled_as_in_text", 1.0f);
}
END_TEST

START_TEST(R09_B_scaled_1_over_sqrt3)
{
    r09("B_scaled_1_over_sqrt3", (float)(1.0 / sqrt(3.0)));
}
END_TEST

/* ---- R10: row widths around work-group sizes ---------------------------------------------- */

/* Softmax of one [1,1,rows,width] array into a new array (caller frees). */
static float *softmax_of(const float *in, int rows, int width, size_t work_group_size)
{
    float *out = tu_alloc((size_t)rows * (size_t)width, 12345.0f);
    clattn_tensor ti = mat_view((float *)in, rows, width), to = mat_view(out, rows, width);
    clattn_attention_desc desc = clattn_attention_desc_default();
    desc.work_group_size = work_group_size;
    TU_ASSERT_OK(clattn_softmax(tu_ctx(), &desc, &ti, &to), "clattn_softmax(%dx%d, wgs %zu)", rows,
                 width, work_group_size);
    return out;
}

/* w_first, w_last, w_min, w_max, w0, sum and the argmax of one row. */
static void check_row_stats(const char *what, const float *w, int width, const cJSON *exp,
                            tu_tol tol, int want_argmax)
{
    double sum = 0, mn = INFINITY, mx = -INFINITY;
    int argmax = 0;
    for (int j = 0; j < width; j++) {
        ck_assert_msg(isfinite(w[j]), "%s: weight %d is %g", what, j, (double)w[j]);
        sum += w[j];
        mn = w[j] < mn ? w[j] : mn;
        if (w[j] > mx)
            mx = w[j], argmax = j;
    }
    const struct {
        const char *key;
        double got;
    } stats[] = {{"w_first", w[0]}, {"w0", w[0]},  {"w_last", w[width - 1]},
                 {"w_min", mn},     {"w_max", mx}, {"sum", sum}};
    for (size_t i = 0; i < sizeof stats / sizeof stats[0]; i++) {
        const cJSON *e = tu_jfind(exp, stats[i].key);
        if (e)
            ck_assert_msg(tu_within(stats[i].got, tu_jnum(e), tol),
                          "%s: %s = %.10g, expected %.10g", what, stats[i].key, stats[i].got,
                          tu_jnum(e));
    }
    ck_assert_msg(argmax == want_argmax, "%s: argmax %d, expected %d", what, argmax, want_argmax);
}

START_TEST(R10_A_width_sweep_all_negative_max_at_end)
{
    cJSON *root = tu_case_load("R10");
    const cJSON *sub = tu_subcase(root, "A_width_sweep_all_negative_max_at_end");
    const tu_tol tol = tu_jtol(tu_jget(sub, "tolerance"));
    const cJSON *wj;
    cJSON_ArrayForEach(wj, tu_jget(sub, "inputs/widths"))
    {
        const int width = (int)tu_jnum(wj);
        float *x = tu_alloc((size_t)width, 0.0f);
        for (int j = 0; j < width - 1; j++)
            x[j] = -4.0f - (float)((j * 37) % 23) / 8.0f;
        x[width - 1] = -1.5f;
        float *w = softmax_of(x, 1, width, 0);
        char key[64], what[64];
        snprintf(key, sizeof key, "expected/by_width/%d", width);
        snprintf(what, sizeof what, "R10-A width %d", width);
        const cJSON *exp = tu_jget(sub, key);
        check_row_stats(what, w, width, exp, tol, width - 1);
        const cJSON *all = tu_jfind(exp, "weights");
        if (all) {
            double *e = tu_jarray(all, NULL);
            clattn_tensor tw = mat_view(w, 1, width);
            TU_ASSERT_CLOSE(what, &tw, e, NULL, tol);
            free(e);
        }
        free(x);
        free(w);
    }
    cJSON_Delete(root);
}
END_TEST

START_TEST(R10_B_single_finite_logit_among_minus_inf)
{
    cJSON *root = tu_case_load("R10");
    const cJSON *sub = tu_subcase(root, "B_single_finite_logit_among_minus_inf");
    const double atol = tu_jnum(tu_jget(sub, "tolerance/atol"));
    ck_assert_str_eq(tu_jget(sub, "tolerance/zeros")->valuestring, "exact");
    ck_assert_int_eq(cJSON_GetArraySize(tu_jget(sub, "inputs/finite_position")), 3);
    const cJSON *wj;
    cJSON_ArrayForEach(wj, tu_jget(sub, "inputs/widths"))
    {
        const int width = (int)tu_jnum(wj);
        const int pos[3] = {0, width / 2, width - 1}; /* "0", "W//2", "W-1": one row each */
        float *x = tu_alloc((size_t)(3 * width), -INFINITY);
        for (int r = 0; r < 3; r++)
            x[r * width + pos[r]] = 10.0f;
        float *w = softmax_of(x, 3, width, 0);
        for (int r = 0; r < 3; r++)
            for (int j = 0; j < width; j++) {
                const float got = w[r * width + j];
                if (j == pos[r])
                    ck_assert_msg(fabs(got - 1.0) <= atol,
                                  "R10-B width %d row %d: weight at the finite position %d is %.9g",
                                  width, r, j, (double)got);
                else
                    ck_assert_msg(got == 0.0f,
                                  "R10-B width %d row %d (finite at %d): weight %d is %.9g, not 0",
                                  width, r, pos[r], j, (double)got);
            }
        free(x);
        free(w);
    }
    cJSON_Delete(root);
}
END_TEST

START_TEST(R10_C_five_rows_width_257)
{
    cJSON *root = tu_case_load("R10");
    const cJSON *sub = tu_subcase(root, "C_five_rows_width_257");
    const tu_tol tol = tu_jtol(tu_jget(sub, "tolerance"));
    const int rows = (int)tu_jnum(tu_jget(sub, "inputs/M")),
              width = (int)tu_jnum(tu_jget(sub, "inputs/W"));
    float *x = tu_alloc((size_t)(rows * width), 0.0f);
    for (int r = 0; r < rows; r++)
        for (int j = 0; j < width; j++)
            x[r * width + j] = -(float)((j * (r + 3) * 7) % 29) / 4.0f;
    float *w = softmax_of(x, rows, width, 0);
    const cJSON *per_row = tu_jget(sub, "expected/per_row");
    ck_assert_int_eq(cJSON_GetArraySize(per_row), rows);
    for (int r = 0; r < rows; r++) {
        char what[48];
        snprintf(what, sizeof what, "R10-C row %d", r);
        const cJSON *exp = cJSON_GetArrayItem(per_row, r);
        check_row_stats(what, &w[r * width], width, exp, tol,
                        (int)tu_jnum(tu_jget(exp, "argmax_first")));
    }
    free(x);
    free(w);
    cJSON_Delete(root);
}
END_TEST

/* ---- R11: work-group sizes; event ordering ------------------------------------------------ */

static size_t device_max_wg(void)
{
    cl_device_id dev = NULL;
    size_t max = 0;
    ck_assert_int_eq(clattn_context_get_cl(tu_ctx(), NULL, &dev, NULL), CLATTN_SUCCESS);
    ck_assert_int_eq(clGetDeviceInfo(dev, CL_DEVICE_MAX_WORK_GROUP_SIZE, sizeof max, &max, NULL),
                     CL_SUCCESS);
    return max;
}

static clattn_status plan_with(const tu_problem *p, clattn_attention_desc desc, size_t wgs)
{
    float dummy = 0.0f; /* plan only validates: O's storage is never written */
    clattn_tensor o = tu_problem_o(p, &dummy);
    clattn_plan plan;
    desc.work_group_size = wgs;
    return clattn_attention_plan(tu_ctx(), &desc, &p->tq, &p->tk, &p->tv, &o, &plan);
}

/* The largest work-group size clattn_attention_plan accepts (the kernel's
 * CL_KERNEL_WORK_GROUP_SIZE as the library sees it): the case's sizes ≤ it must all
 * be accepted, the ones above refused. */
static size_t kernel_wg_limit(const tu_problem *p, const clattn_attention_desc *desc, size_t hi)
{
    TU_ASSERT_OK(plan_with(p, *desc, 1), "clattn_attention_plan(work_group_size 1)");
    size_t lo = 1; /* accepted */
    while (lo + 1 < hi) {
        size_t mid = lo + (hi - lo) / 2;
        clattn_status st = plan_with(p, *desc, mid);
        ck_assert_msg(st == CLATTN_SUCCESS || st == CLATTN_ERROR_UNSUPPORTED,
                      "plan(work_group_size %zu): status %s", mid, clattn_status_string(st));
        if (st == CLATTN_SUCCESS)
            lo = mid;
        else
            hi = mid;
    }
    return lo;
}

/* problem 1: the 6x3 X of R09 (Q = K = V); problem 2 as the case file words it. */
static void r11_problems(const cJSON *root, tu_problem *p1, tu_problem *p2)
{
    cJSON *ex = tu_case_load("R09");
    double *x = tu_jarray(tu_jget(tu_subcase(ex, "A_unscaled_as_in_text"), "inputs/X"), NULL);
    problem_1head(p1, 6, 6, 3, 3, 0, 0, 0);
    for (int i = 0; i < 18; i++)
        p1->q[i] = p1->k[i] = p1->v[i] = (float)x[i];
    free(x);
    cJSON_Delete(ex);
    const char *spec =
        tu_jget(tu_subcase(root, "A_same_result_for_every_legal_local_size"), "inputs/problem_2")
            ->valuestring;
    long long n = 0, d = 0;
    unsigned sq = 0, sk = 0, sv = 0;
    ck_assert_msg(
        sscanf(spec, "Nq=Nk=%lld, dk=dv=%lld, gen seeds %u/%u/%u", &n, &d, &sq, &sk, &sv) == 5,
        "R11: cannot read problem_2: %s", spec);
    problem_1head(p2, n, n, d, d, sq, sk, sv);
}

START_TEST(R11_A_same_result_for_every_legal_local_size)
{
    cJSON *root = tu_case_load("R11");
    const cJSON *sub = tu_subcase(root, "A_same_result_for_every_legal_local_size");
    const tu_tol tol = tu_jtol(tu_jget(sub, "tolerance"));
    tu_problem p[2];
    r11_problems(root, &p[0], &p[1]);
    const size_t dev_max = device_max_wg();
    double *e1 = tu_jarray(tu_jget(sub, "expected/problem_1_O"), NULL);

    for (int a = 0; a < 2; a++)
        for (int pi = 0; pi < 2; pi++) {
            clattn_attention_desc desc = clattn_attention_desc_default();
            desc.algorithm = tu_algorithms[a];
            if (pi == 0)
                desc.scale = (float)(1.0 / sqrt(3.0));
            const size_t k_max = kernel_wg_limit(&p[pi], &desc, 2 * dev_max + 1);
            printf("R11-A [%s] problem_%d: CL_DEVICE_MAX_WORK_GROUP_SIZE %zu, largest size "
                   "accepted %zu\n",
                   tu_algorithm_name(desc.algorithm), pi + 1, dev_max, k_max);
            ck_assert_msg(k_max <= dev_max, "[%s] work_group_size %zu > device max %zu accepted",
                          tu_algorithm_name(desc.algorithm), k_max, dev_max);
            const cJSON *sj;
            cJSON_ArrayForEach(sj, tu_jget(sub, "inputs/local_sizes"))
            {
                const char *s = sj->valuestring;
                size_t wgs = strcmp(s, "CL_KERNEL_WORK_GROUP_SIZE") == 0         ? k_max
                             : strcmp(s, "CL_DEVICE_MAX_WORK_GROUP_SIZE") == 0   ? dev_max
                             : strcmp(s, "CL_DEVICE_MAX_WORK_GROUP_SIZE+1") == 0 ? dev_max + 1
                             : strcmp(s, "2*CL_DEVICE_MAX_WORK_GROUP_SIZE") == 0 ? 2 * dev_max
                                                                                 : (size_t)atol(s);
                ck_assert_msg(wgs > 0, "R11: unknown local size %s", s);
                char what[160];
                snprintf(what, sizeof what, "R11-A problem_%d [%s] work_group_size %zu (%s)",
                         pi + 1, tu_algorithm_name(desc.algorithm), wgs, s);
                const size_t n_o = (size_t)(p[pi].n_q * p[pi].d_v);
                float *o = tu_alloc(n_o, 12345.0f);
                clattn_tensor to = tu_problem_o(&p[pi], o);
                desc.work_group_size = wgs;
                printf("%s\n", what); /* before the call: a crash names its size */
                clattn_status st =
                    clattn_attention(tu_ctx(), &desc, &p[pi].tq, &p[pi].tk, &p[pi].tv, &to);
                if (wgs > k_max) {
                    ck_assert_msg(st == CLATTN_ERROR_UNSUPPORTED,
                                  "%s: above the limit %zu, expected 'unsupported', got %s", what,
                                  k_max, clattn_status_string(st));
                    ck_assert_msg(strlen(clattn_last_error_message(tu_ctx())) > 0,
                                  "%s: refused without a message", what);
                    tu_assert_untouched(what, o, 0, n_o, 12345.0f);
                } else {
                    TU_ASSERT_OK(st, "%s", what);
                    if (pi == 0)
                        TU_ASSERT_CLOSE(what, &to, e1, NULL, tol);
                    else
                        check_aggregates(what, o, p[1].n_q, p[1].d_v,
                                         tu_jget(sub, "expected/problem_2"), tol, tol.rtol);
                }
                free(o);
            }
        }
    /* the softmax stage takes the same sizes: rows of width 257 */
    clattn_attention_desc desc = clattn_attention_desc_default();
    desc.algorithm = CLATTN_ALGORITHM_UNFUSED;
    const size_t k_soft = kernel_wg_limit(&p[1], &desc, 2 * dev_max + 1);
    enum { ROWS = 5, WIDTH = 257 };
    float x[ROWS * WIDTH];
    double e[ROWS * WIDTH];
    tu_fill_gen(x, ROWS * WIDTH, 11004, 6.0f);
    for (int r = 0; r < ROWS; r++) {
        double m = -INFINITY, l = 0;
        for (int j = 0; j < WIDTH; j++)
            m = fmax(m, x[r * WIDTH + j]);
        for (int j = 0; j < WIDTH; j++)
            l += (e[r * WIDTH + j] = exp(x[r * WIDTH + j] - m));
        for (int j = 0; j < WIDTH; j++)
            e[r * WIDTH + j] /= l;
    }
    const size_t sizes[] = {1, 2, 3, 7, 13, 64, k_soft, dev_max + 1, 2 * dev_max};
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        float out[ROWS * WIDTH];
        tu_fill_value(out, ROWS * WIDTH, 12345.0f);
        clattn_tensor ti = mat_view(x, ROWS, WIDTH), to = mat_view(out, ROWS, WIDTH);
        desc.work_group_size = sizes[i];
        clattn_status st = clattn_softmax(tu_ctx(), &desc, &ti, &to);
        char what[96];
        snprintf(what, sizeof what, "R11-A clattn_softmax(5x257) work_group_size %zu", sizes[i]);
        if (sizes[i] > k_soft) {
            ck_assert_msg(st == CLATTN_ERROR_UNSUPPORTED, "%s: expected 'unsupported', got %s",
                          what, clattn_status_string(st));
            tu_assert_untouched(what, out, 0, ROWS * WIDTH, 12345.0f);
        } else {
            TU_ASSERT_OK(st, "%s", what);
            TU_ASSERT_CLOSE(what, &to, e, NULL, TU_TOL_DEFAULT);
        }
    }
    free(e1);
    tu_problem_free(&p[0]);
    tu_problem_free(&p[1]);
    cJSON_Delete(root);
}
END_TEST

/* 50 unfused runs back to back, alternating problem_2 and a second input of the same
 * shape (so stale intermediates from the previous run cannot pass): host API on the
 * in-order context, host API and enqueue API (all 50 in flight at once) on a context
 * wrapping an out-of-order queue where the device has one. */
START_TEST(R11_B_pipeline_ordering)
{
    cJSON *root = tu_case_load("R11");
    const cJSON *sub = tu_subcase(root, "B_pipeline_ordering");
    const cJSON *exp2 =
        tu_jget(tu_subcase(root, "A_same_result_for_every_legal_local_size"), "expected/problem_2");
    const tu_tol tol = tu_jtol(tu_jget(sub, "tolerance"));
    enum { RUNS = 50 };
    tu_problem p[2], unused;
    r11_problems(root, &unused, &p[0]);
    tu_problem_free(&unused);
    problem_1head(&p[1], p[0].n_q, p[0].n_kv, p[0].d_k, p[0].d_v, 11011, 11012, 11013);
    clattn_attention_desc desc = clattn_attention_desc_default();
    desc.algorithm = CLATTN_ALGORITHM_UNFUSED;
    float *ref1 = tu_reference(&p[1], &desc, NULL);
    const int64_t n = p[0].n_q, d = p[0].d_v;
    const size_t n_o = (size_t)(n * d);

    cl_context clc = NULL;
    cl_device_id dev = NULL;
    ck_assert_int_eq(clattn_context_get_cl(tu_ctx(), &clc, &dev, NULL), CLATTN_SUCCESS);
    cl_command_queue_properties props = 0;
    ck_assert_int_eq(clGetDeviceInfo(dev, CL_DEVICE_QUEUE_PROPERTIES, sizeof props, &props, NULL),
                     CL_SUCCESS);
    const bool ooo = (props & CL_QUEUE_OUT_OF_ORDER_EXEC_MODE_ENABLE) != 0;
    printf("R11-B: %s queue for the wrapped context\n",
           ooo ? "out-of-order" : "in-order (the device has no out-of-order queues)");
    cl_int err = CL_SUCCESS;
    cl_command_queue queue =
        clCreateCommandQueue(clc, dev, ooo ? CL_QUEUE_OUT_OF_ORDER_EXEC_MODE_ENABLE : 0, &err);
    ck_assert_int_eq(err, CL_SUCCESS);
    clattn_context *wrapped = NULL;
    TU_ASSERT_OK(clattn_context_create_from_cl(clc, dev, queue, &wrapped),
                 "clattn_context_create_from_cl");
    clReleaseCommandQueue(queue); /* the wrapped context keeps its own reference */

    float *o = tu_alloc(n_o, 12345.0f);
    for (int ci = 0; ci < 2; ci++) {
        clattn_context *ctx = ci == 0 ? tu_ctx() : wrapped;
        for (int r = 0; r < RUNS; r++) {
            const tu_problem *pp = &p[r % 2];
            tu_fill_value(o, n_o, 12345.0f);
            clattn_tensor to = tu_problem_o(pp, o);
            char what[96];
            snprintf(what, sizeof what, "R11-B host API, %s context, run %d",
                     ci == 0 ? "in-order" : "wrapped", r);
            clattn_status st = clattn_attention(ctx, &desc, &pp->tq, &pp->tk, &pp->tv, &to);
            ck_assert_msg(st == CLATTN_SUCCESS, "%s: %s: %s", what, clattn_status_string(st),
                          clattn_last_error_message(ctx));
            if (r % 2 == 0)
                check_aggregates(what, o, n, d, exp2, tol, tol.rtol);
            else
                TU_ASSERT_CLOSE(what, &to, NULL, ref1, tol);
        }
    }

    /* enqueue API: every run in flight at once, each with its own O buffer */
    cl_mem in[2][3], outs[RUNS];
    cl_event done[RUNS];
    for (int i = 0; i < 2; i++) {
        float *src[3] = {p[i].q, p[i].k, p[i].v};
        for (int t = 0; t < 3; t++) {
            in[i][t] = clCreateBuffer(clc, CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR,
                                      sizeof(float) * n_o, src[t], &err);
            ck_assert_int_eq(err, CL_SUCCESS);
        }
    }
    for (int r = 0; r < RUNS; r++) {
        outs[r] = clCreateBuffer(clc, CL_MEM_READ_WRITE, sizeof(float) * n_o, NULL, &err);
        ck_assert_int_eq(err, CL_SUCCESS);
        clattn_tensor q = clattn_tensor_buffer(in[r % 2][0], 1, 1, n, d);
        clattn_tensor k = clattn_tensor_buffer(in[r % 2][1], 1, 1, n, d);
        clattn_tensor v = clattn_tensor_buffer(in[r % 2][2], 1, 1, n, d);
        clattn_tensor ob = clattn_tensor_buffer(outs[r], 1, 1, n, d);
        clattn_status st =
            clattn_attention_enqueue(wrapped, &desc, &q, &k, &v, &ob, 0, NULL, &done[r]);
        ck_assert_msg(st == CLATTN_SUCCESS, "R11-B enqueue run %d: %s: %s", r,
                      clattn_status_string(st), clattn_last_error_message(wrapped));
    }
    cl_command_queue wq = NULL;
    TU_ASSERT_OK(clattn_context_get_cl(wrapped, NULL, NULL, &wq), "clattn_context_get_cl");
    for (int r = 0; r < RUNS; r++) {
        tu_fill_value(o, n_o, 12345.0f);
        ck_assert_int_eq(
            clEnqueueReadBuffer(wq, outs[r], CL_TRUE, 0, sizeof(float) * n_o, o, 1, &done[r], NULL),
            CL_SUCCESS);
        char what[64];
        snprintf(what, sizeof what, "R11-B enqueue API, run %d of %d in flight", r, RUNS);
        clattn_tensor to = tu_problem_o(&p[r % 2], o);
        if (r % 2 == 0)
            check_aggregates(what, o, n, d, exp2, tol, tol.rtol);
        else
            TU_ASSERT_CLOSE(what, &to, NULL, ref1, tol);
        clReleaseEvent(done[r]);
        clReleaseMemObject(outs[r]);
    }
    for (int i = 0; i < 2; i++)
        for (int t = 0; t < 3; t++)
            clReleaseMemObject(in[i][t]);
    clattn_context_release(wrapped);
    free(o);
    free(ref1);
    tu_problem_free(&p[0]);
    tu_problem_free(&p[1]);
    cJSON_Delete(root);
}
END_TEST

/* ---- R12: NaN and +inf stay in their row -------------------------------------------------- */

START_TEST(R12_A_softmax_rows)
{
    cJSON *root = tu_case_load("R12");
    const cJSON *sub = tu_subcase(root, "A_softmax_rows");
    softmax_rows("R12-A", tu_jget(sub, "inputs/rows"), tu_jget(sub, "expected/weights"),
                 tu_jtol(tu_jget(sub, "tolerance")));
    cJSON_Delete(root);
}
END_TEST

START_TEST(R12_B_attention_pokes)
{
    cJSON *root = tu_case_load("R12");
    const cJSON *sub = tu_subcase(root, "B_attention_pokes");
    const cJSON *in = tu_jget(sub, "inputs");
    const tu_tol tol = tu_jtol(tu_jget(sub, "tolerance"));
    static const char *const pokes[] = {"baseline", "a", "b", "c"};
    for (int i = 0; i < 4; i++) {
        tu_problem p;
        problem_sized(&p, in);
        if (i > 0) { /* the poke as the case file words it */
            char key[32];
            snprintf(key, sizeof key, "pokes/%s", pokes[i]);
            const char *s = tu_jget(in, key)->valuestring;
            char m = 0, val[16] = "";
            int r = 0, c = 0;
            ck_assert_int_eq(sscanf(s, "%c[%d][%d] = %15s", &m, &r, &c, val), 4);
            float *base = m == 'Q' ? p.q : m == 'K' ? p.k : p.v;
            const int64_t cols = m == 'V' ? p.d_v : p.d_k;
            ck_assert_msg(m == 'Q' || m == 'K' || m == 'V', "R12: cannot parse poke %s", s);
            base[r * cols + c] = strcmp(val, "NaN") == 0    ? NAN
                                 : strcmp(val, "+inf") == 0 ? INFINITY
                                                            : 0.0f;
            ck_assert_msg(!isfinite(base[r * cols + c]), "R12: cannot parse poke value %s", val);
        }
        char key[48], what[48];
        snprintf(key, sizeof key, "expected/%s", pokes[i]);
        snprintf(what, sizeof what, "R12-B poke %s", pokes[i]);
        clattn_attention_desc desc = clattn_attention_desc_default();
        expect_o(what, &p, &desc, tu_jget(sub, key), tol);
        tu_problem_free(&p);
    }
    cJSON_Delete(root);
}
END_TEST

/* ---- R14: subnormals and flush-to-zero ---------------------------------------------------- */

START_TEST(R14_A_softmax_weights_in_subnormal_range)
{
    cJSON *root = tu_case_load("R14");
    const cJSON *sub = tu_subcase(root, "A_softmax_weights_in_subnormal_range");
    size_t width = 0, ne = 0;
    double *row = tu_jarray(tu_jget(sub, "inputs/row"), &width);
    double *e = tu_jarray(tu_jget(sub, "expected/weights"), &ne);
    ck_assert_int_eq((int)width, (int)ne);
    ck_assert(cJSON_IsTrue(tu_jget(sub, "tolerance/no_nan")));
    float x[16];
    ck_assert_int_le((int)width, 16);
    for (size_t j = 0; j < width; j++)
        x[j] = (float)row[j];
    float *w = softmax_of(x, 1, (int)width, 0);
    const int64_t shape[4] = {1, 1, 1, 1}, one[4] = {0, 0, 1, 1};
    const int64_t rest_shape[4] = {1, 1, 1, (int64_t)width - 1};
    clattn_tensor w0 = tu_view(w, shape, one, 0), rest = tu_view(w, rest_shape, one, 1);
    TU_ASSERT_CLOSE("R14-A w0", &w0, e, NULL, tu_jtol(tu_jget(sub, "tolerance/w0")));
    TU_ASSERT_CLOSE("R14-A others (flushed or subnormal)", &rest, e + 1, NULL,
                    tu_jtol(tu_jget(sub, "tolerance/others")));
    clattn_tensor all = mat_view(w, 1, (int64_t)width);
    tu_assert_finite("R14-A weights", &all);
    free(row);
    free(e);
    free(w);
    cJSON_Delete(root);
}
END_TEST

/* B and C: one operand is gen(seed) · 2^-126 (subnormal, exact). */
static void r14_subnormal_operand(const char *subcase, char operand)
{
    cJSON *root = tu_case_load("R14");
    const cJSON *sub = tu_subcase(root, subcase);
    const cJSON *in = tu_jget(sub, "inputs");
    tu_problem p;
    problem_sized(&p, in); /* the operand is gen(seed) * 2^-126 */
    const float *m = operand == 'Q' ? p.q : p.v;
    const size_t n = (size_t)tu_count(operand == 'Q' ? &p.tq : &p.tv);
    for (size_t i = 0; i < n; i++)
        ck_assert_msg(m[i] == 0.0f || fpclassify(m[i]) == FP_SUBNORMAL,
                      "R14: %c[%zu] = %g is not subnormal", operand, i, (double)m[i]);
    clattn_attention_desc desc = clattn_attention_desc_default();
    char what[64];
    snprintf(what, sizeof what, "R14 %s", subcase);
    expect_o(what, &p, &desc, tu_jget(sub, "expected/O"), tu_jtol(tu_jget(sub, "tolerance")));
    tu_problem_free(&p);
    cJSON_Delete(root);
}

START_TEST(R14_B_subnormal_queries)
{
    r14_subnormal_operand("B_subnormal_queries", 'Q');
}
END_TEST

START_TEST(R14_C_subnormal_values)
{
    r14_subnormal_operand("C_subnormal_values", 'V');
}
END_TEST

START_TEST(R14_D_informational_ftz_visible_in_output)
{
    cJSON *root = tu_case_load("R14");
    const cJSON *sub = tu_subcase(root, "D_informational_ftz_visible_in_output");
    const cJSON *in = tu_jget(sub, "inputs");
    double *q = tu_jarray(tu_jget(in, "Q"), NULL), *k = tu_jarray(tu_jget(in, "K"), NULL),
           *v = tu_jarray(tu_jget(in, "V"), NULL);
    float qf[1] = {(float)q[0]}, kf[2] = {(float)k[0], (float)k[1]},
          vf[2] = {(float)v[0], (float)v[1]};
    clattn_tensor tq = mat_view(qf, 1, 1), tk = mat_view(kf, 2, 1), tv = mat_view(vf, 2, 1);
    const double ieee = tu_jnum(tu_jget(sub, "expected/O_ieee")),
                 ftz = tu_jnum(tu_jget(sub, "expected/O_ftz")),
                 rtol = tu_jnum(tu_jget(sub, "tolerance/rtol"));
    clattn_attention_desc desc = clattn_attention_desc_default();
    desc.scale = (float)tu_jnum(tu_jget(in, "scale"));
    for (int a = 0; a < 2; a++) {
        float o = 12345.0f;
        clattn_tensor to = mat_view(&o, 1, 1);
        desc.algorithm = tu_algorithms[a];
        TU_ASSERT_OK(clattn_attention(tu_ctx(), &desc, &tq, &tk, &tv, &to), "R14-D [%s]",
                     tu_algorithm_name(desc.algorithm));
        const bool is_ieee = fabs(o - ieee) <= rtol * fabs(ieee), is_ftz = o == ftz;
        printf("R14_D [%s]: O = %.9g: %s\n", tu_algorithm_name(desc.algorithm), (double)o,
               is_ieee  ? "IEEE (subnormal weight kept)"
               : is_ftz ? "flush-to-zero (subnormal weight flushed)"
                        : "NEITHER");
        ck_assert_msg(is_ieee || is_ftz, "R14-D [%s]: O = %.9g, expected %.10g (IEEE) or %g (FTZ)",
                      tu_algorithm_name(desc.algorithm), (double)o, ieee, ftz);
    }
    free(q);
    free(k);
    free(v);
    cJSON_Delete(root);
}
END_TEST

/* ---- every subcase of every case file is a test or a listed skip ------------------------------
 */

typedef struct subcase_entry {
    const char *case_id, *subcase;
    const TTest *test; /* NULL: skipped */
    const char *skip_reason;
} subcase_entry;

#define MAX_SUBCASES 32

/* The table lives in a function: Check's test handles are static variables, usable in
 * an automatic initializer only. */
static int subcase_table(subcase_entry out[MAX_SUBCASES])
{
    const subcase_entry table[] = {
        {"R01", "A_bool_mask_rows4to7_empty", R01_A_bool_mask_rows4to7_empty, NULL},
        {"R01", "B_additive_minus_inf_mask_same_pattern",
         R01_B_additive_minus_inf_mask_same_pattern, NULL},
        {"R01", "C_softmax_stage_all_minus_inf_rows", R01_C_softmax_stage_all_minus_inf_rows, NULL},
        {"R01", "D_causal_plus_padding_combination", R01_D_causal_plus_padding_combination, NULL},
        {"R01", "E_empty_key_or_query_set", R01_E_empty_key_or_query_set, NULL},
        {"R03", "A_softmax_rows", R03_A_softmax_rows, NULL},
        {"R03", "B_attention_scores_around_1e6", R03_B_attention_scores_around_1e6, NULL},
        {"R06", "A_size_sweep", R06_A_size_sweep, NULL},
        {"R07", "A_shapes_both_conventions", R07_A_shapes_both_conventions, NULL},
        {"R08", "A_head_dim_sweep", R08_A_head_dim_sweep, NULL},
        {"R08", "B_dk65_dv3", R08_B_dk65_dv3, NULL},
        {"R09", "A_unscaled_as_in_text", R09_A_unscaled_as_in_text, NULL},
        {"R09", "B_scaled_1_over_sqrt3", R09_B_scaled_1_over_sqrt3, NULL},
        {"R10", "A_width_sweep_all_negative_max_at_end", R10_A_width_sweep_all_negative_max_at_end,
         NULL},
        {"R10", "B_single_finite_logit_among_minus_inf", R10_B_single_finite_logit_among_minus_inf,
         NULL},
        {"R10", "C_five_rows_width_257", R10_C_five_rows_width_257, NULL},
        {"R11", "A_same_result_for_every_legal_local_size",
         R11_A_same_result_for_every_legal_local_size, NULL},
        {"R11", "B_pipeline_ordering", R11_B_pipeline_ordering, NULL},
        {"R12", "A_softmax_rows", R12_A_softmax_rows, NULL},
        {"R12", "B_attention_pokes", R12_B_attention_pokes, NULL},
        {"R14", "A_softmax_weights_in_subnormal_range", R14_A_softmax_weights_in_subnormal_range,
         NULL},
        {"R14", "B_subnormal_queries", R14_B_subnormal_queries, NULL},
        {"R14", "C_subnormal_values", R14_C_subnormal_values, NULL},
        {"R14", "D_informational_ftz_visible_in_output", R14_D_informational_ftz_visible_in_output,
         NULL},
    };
    _Static_assert(sizeof table / sizeof table[0] <= MAX_SUBCASES, "raise MAX_SUBCASES");
    const int n = (int)(sizeof table / sizeof table[0]);
    memcpy(out, table, sizeof table);
    return n;
}

START_TEST(every_subcase_is_a_test_or_a_listed_skip)
{
    subcase_entry SUBCASES[MAX_SUBCASES];
    const int N_SUBCASES = subcase_table(SUBCASES);
    int seen = 0;
    for (int c = 0; c < N_CASE_IDS; c++) {
        cJSON *root = tu_case_load(CASE_IDS[c]);
        ck_assert_str_eq(tu_jget(root, "id")->valuestring, CASE_IDS[c]);
        const cJSON *s;
        cJSON_ArrayForEach(s, tu_jget(root, "subcases"))
        {
            const char *name = tu_jget(s, "name")->valuestring;
            int found = -1;
            for (int i = 0; i < N_SUBCASES; i++)
                if (strcmp(SUBCASES[i].case_id, CASE_IDS[c]) == 0 &&
                    strcmp(SUBCASES[i].subcase, name) == 0)
                    found = i;
            ck_assert_msg(found >= 0, "%s subcase %s has no test", CASE_IDS[c], name);
            if (SUBCASES[found].test) {
                char want[160];
                snprintf(want, sizeof want, "%s_%s", CASE_IDS[c], name);
                ck_assert_str_eq(SUBCASES[found].test->name, want);
            }
            seen++;
        }
        cJSON_Delete(root);
    }
    ck_assert_int_eq(seen, N_SUBCASES);
}
END_TEST

int main(void)
{
    tu_seed_init(0); /* the cases carry their own generator seeds */
    Suite *s = suite_create("cases");
    TCase *tc = tcase_create("meta");
    tcase_add_test(tc, generator_check_values);
    tcase_add_test(tc, every_subcase_is_a_test_or_a_listed_skip);
    suite_add_tcase(s, tc);
    TCase *by_case[N_CASE_IDS] = {NULL};
    subcase_entry SUBCASES[MAX_SUBCASES];
    const int N_SUBCASES = subcase_table(SUBCASES);
    for (int i = 0; i < N_SUBCASES; i++) {
        int c = 0;
        while (strcmp(CASE_IDS[c], SUBCASES[i].case_id) != 0)
            c++;
        if (!SUBCASES[i].test) {
            printf("SKIP %s_%s: %s (issue: features)\n", SUBCASES[i].case_id, SUBCASES[i].subcase,
                   SUBCASES[i].skip_reason);
            continue;
        }
        if (!by_case[c]) {
            by_case[c] = tcase_create(CASE_IDS[c]);
            suite_add_tcase(s, by_case[c]);
        }
        tcase_add_test(by_case[c], SUBCASES[i].test);
    }
    return tu_run_suite(s);
}
