/* The seed texts' worked examples.
 *
 * 000 ("Your journey starts with one step", 6×3 X, Q = K = V = X, scale 1): S, W and Z
 * as printed in the text to 4 decimals (within 5e-5, the printing's rounding) and in
 * float64 (tests/cases/seed_examples.json, within 1e-5); also the 1/√3-scaled variant.
 * 003 ("sat bank river", scale 1/2, no query attends itself): weights, outputs and
 * the cosines of bank's output with "money" and "river". */
#include "testutil.h"

#include <math.h>
#include <stdlib.h>

static const float X000[6][3] = {{0.43f, 0.15f, 0.89f}, {0.55f, 0.87f, 0.66f},
                                 {0.57f, 0.85f, 0.64f}, {0.22f, 0.58f, 0.33f},
                                 {0.77f, 0.25f, 0.10f}, {0.05f, 0.80f, 0.55f}};

/* As printed in seeds/000 (4 decimals). */
static const double S000_TEXT[36] = {
    0.9995, 0.9544, 0.9422, 0.4753, 0.4576, 0.6310, 0.9544, 1.4950, 1.4754, 0.8434, 0.7070, 1.0865,
    0.9422, 1.4754, 1.4570, 0.8296, 0.7154, 1.0605, 0.4753, 0.8434, 0.8296, 0.4937, 0.3474, 0.6565,
    0.4576, 0.7070, 0.7154, 0.3474, 0.6654, 0.2935, 0.6310, 1.0865, 1.0605, 0.6565, 0.2935, 0.9450};
static const double W000_TEXT[36] = {
    0.2098, 0.2006, 0.1981, 0.1242, 0.1220, 0.1452, 0.1385, 0.2379, 0.2333, 0.1240, 0.1082, 0.1581,
    0.1390, 0.2369, 0.2326, 0.1242, 0.1108, 0.1565, 0.1435, 0.2074, 0.2046, 0.1462, 0.1263, 0.1720,
    0.1526, 0.1958, 0.1975, 0.1367, 0.1879, 0.1295, 0.1385, 0.2184, 0.2128, 0.1420, 0.0988, 0.1896};
static const double Z000_TEXT[18] = {0.4421, 0.5931, 0.5790, 0.4419, 0.6515, 0.5683,
                                     0.4431, 0.6496, 0.5671, 0.4304, 0.6298, 0.5510,
                                     0.4671, 0.5910, 0.5266, 0.4177, 0.6503, 0.5645};

static const tu_tol TEXT_TOL = {5e-5, 0.0};
static const tu_tol F64_TOL = {1e-5, 0.0};

/* The float64 values of seed_examples.json: examples/<example>/<key>. */
static double *example(cJSON **root, const char *example_name, const char *key, size_t want)
{
    char path[256];
    snprintf(path, sizeof path, "examples/%s/%s", example_name, key);
    if (!*root)
        *root = tu_case_load("seed_examples");
    size_t n = 0;
    double *v = tu_jarray(tu_jget(*root, path), &n);
    ck_assert_msg(n == want, "%s has %zu values, expected %zu", path, n, want);
    return v;
}

/* Q = K = V = X: one 6×3 host array used as all three (read-only). */
typedef struct seed000 {
    float x[18];
    clattn_tensor t;
} seed000;

static void seed000_init(seed000 *s)
{
    for (int i = 0; i < 18; i++)
        s->x[i] = X000[i / 3][i % 3];
    s->t = clattn_tensor_host(s->x, 1, 1, 6, 3);
}

/* Compare a 6×n result with the text's table (if any) and the float64 values. */
static void check_both(const char *what, const clattn_tensor *got, const double *text,
                       const double *f64)
{
    char name[160];
    if (text) {
        snprintf(name, sizeof name, "%s vs the text's 4-decimal table", what);
        TU_ASSERT_CLOSE(name, got, text, NULL, TEXT_TOL);
    }
    snprintf(name, sizeof name, "%s vs float64 (seed_examples.json)", what);
    TU_ASSERT_CLOSE(name, got, f64, NULL, F64_TOL);
}

/* S, W (desc.weights, unfused), Z (both algorithms) for one scale. */
static void run_000(float scale, const char *example_name, bool with_text)
{
    cJSON *root = NULL;
    double *S = example(&root, example_name, "S", 36);
    double *W = example(&root, example_name, "W", 36);
    double *Z = example(&root, example_name, "Z", 18);
    seed000 s;
    seed000_init(&s);
    clattn_attention_desc desc = clattn_attention_desc_default();
    desc.scale = scale;
    char what[160];

    float sbuf[36], wbuf[36], zbuf[18];
    clattn_tensor ts = clattn_tensor_host(sbuf, 1, 1, 6, 6);
    clattn_tensor tw = clattn_tensor_host(wbuf, 1, 1, 6, 6);
    clattn_tensor tz = clattn_tensor_host(zbuf, 1, 1, 6, 3);

    tu_fill_value(sbuf, 36, NAN);
    TU_ASSERT_OK(clattn_scores(tu_ctx(), &desc, &s.t, &s.t, &ts), "clattn_scores");
    snprintf(what, sizeof what, "%s S (clattn_scores, scale %g)", example_name, (double)scale);
    check_both(what, &ts, with_text ? S000_TEXT : NULL, S);

    for (int a = 0; a < 2; a++) {
        desc.algorithm = tu_algorithms[a];
        desc.weights = desc.algorithm == CLATTN_ALGORITHM_UNFUSED ? &tw : NULL;
        tu_fill_value(wbuf, 36, NAN);
        tu_fill_value(zbuf, 18, NAN);
        TU_ASSERT_OK(clattn_attention(tu_ctx(), &desc, &s.t, &s.t, &s.t, &tz),
                     "clattn_attention(%s)", tu_algorithm_name(desc.algorithm));
        snprintf(what, sizeof what, "%s Z (%s, scale %g)", example_name,
                 tu_algorithm_name(desc.algorithm), (double)scale);
        check_both(what, &tz, with_text ? Z000_TEXT : NULL, Z);
        if (desc.weights) {
            snprintf(what, sizeof what, "%s W (desc.weights, unfused, scale %g)", example_name,
                     (double)scale);
            check_both(what, &tw, with_text ? W000_TEXT : NULL, W);
        }
    }
    free(S);
    free(W);
    free(Z);
    cJSON_Delete(root);
}

START_TEST(seed000_unscaled_S_W_Z)
{
    run_000(1.0f, "6x3_unscaled", true);
}
END_TEST

START_TEST(seed000_scaled_1_over_sqrt3)
{
    run_000((float)(1.0 / sqrt(3.0)), "6x3_scaled_1_over_sqrt3", false);
}
END_TEST

/* scale 0 means 1/√d_k = 1/√3: must give the scaled example, not the unscaled one. */
START_TEST(seed000_default_scale_is_1_over_sqrt_dk)
{
    run_000(0.0f, "6x3_scaled_1_over_sqrt3", false);
}
END_TEST

/* The text's three lines as the three stages: S = X·Xᵀ; W = softmax(S) (also in
 * place); Z = W·X. */
START_TEST(seed000_three_stages)
{
    cJSON *root = NULL;
    double *W = example(&root, "6x3_unscaled", "W", 36);
    double *Z = example(&root, "6x3_unscaled", "Z", 18);
    seed000 s;
    seed000_init(&s);
    clattn_attention_desc desc = clattn_attention_desc_default();
    desc.scale = 1.0f;
    float sbuf[36], wbuf[36], zbuf[18];
    clattn_tensor ts = clattn_tensor_host(sbuf, 1, 1, 6, 6);
    clattn_tensor tw = clattn_tensor_host(wbuf, 1, 1, 6, 6);
    clattn_tensor tz = clattn_tensor_host(zbuf, 1, 1, 6, 3);

    TU_ASSERT_OK(clattn_scores(tu_ctx(), &desc, &s.t, &s.t, &ts), "clattn_scores");
    tu_fill_value(wbuf, 36, NAN);
    TU_ASSERT_OK(clattn_softmax(tu_ctx(), NULL, &ts, &tw), "clattn_softmax");
    check_both("6x3_unscaled W (clattn_softmax of clattn_scores)", &tw, W000_TEXT, W);

    tu_fill_value(zbuf, 18, NAN);
    TU_ASSERT_OK(clattn_weighted_sum(tu_ctx(), NULL, &tw, &s.t, &tz), "clattn_weighted_sum");
    check_both("6x3_unscaled Z (clattn_weighted_sum of that W)", &tz, Z000_TEXT, Z);

    /* in place: scores and weights the same view */
    TU_ASSERT_OK(clattn_softmax(tu_ctx(), NULL, &ts, &ts), "clattn_softmax in place");
    check_both("6x3_unscaled W (clattn_softmax in place)", &ts, W000_TEXT, W);
    free(W);
    free(Z);
    cJSON_Delete(root);
}
END_TEST

/* ---- 003: sat bank river ----------------------------------------------------------- */

static const float SAT[4] = {0.1f, 0.2f, 0.3f, 0.4f};
static const float BANK[4] = {0.3f, -0.4f, 0.0f, 1.3f};
static const float RIVER[4] = {0.4f, -0.3f, 0.1f, 1.5f};
static const float MONEY[4] = {0.2f, -0.5f, 0.1f, 1.2f};

static double cosine(const float *a, const float *b, int n)
{
    double ab = 0, aa = 0, bb = 0;
    for (int i = 0; i < n; i++) {
        ab += (double)a[i] * b[i];
        aa += (double)a[i] * a[i];
        bb += (double)b[i] * b[i];
    }
    return ab / sqrt(aa * bb);
}

START_TEST(seed003_sat_bank_river_no_self)
{
    const char *ex = "sat_bank_river_scale_half_self_excluded";
    cJSON *root = NULL;
    double *S = example(&root, ex, "scores_scaled", 9);
    double *W = example(&root, ex, "W", 9);
    double *O = example(&root, ex, "O", 12);
    const cJSON *exj = tu_jget(tu_jget(root, "examples"), ex);
    const double cos_money = tu_jnum(tu_jget(exj, "cos_bank_money"));
    const double cos_river = tu_jnum(tu_jget(exj, "cos_bank_river"));

    float x[12];
    for (int c = 0; c < 4; c++)
        x[c] = SAT[c], x[4 + c] = BANK[c], x[8 + c] = RIVER[c];
    clattn_tensor tx = clattn_tensor_host(x, 1, 1, 3, 4);
    clattn_attention_desc desc = clattn_attention_desc_default();
    desc.scale = 0.5f;
    desc.mask = CLATTN_MASK_NO_SELF;

    /* scores: the diagonal is masked (−inf), the rest scale·X·Xᵀ */
    float sbuf[9];
    clattn_tensor ts = clattn_tensor_host(sbuf, 1, 1, 3, 3);
    TU_ASSERT_OK(clattn_scores(tu_ctx(), &desc, &tx, &tx, &ts), "clattn_scores(no_self)");
    for (int i = 0; i < 3; i++)
        S[i * 3 + i] = -INFINITY;
    TU_ASSERT_CLOSE("003 scores (no_self: diagonal -inf)", &ts, S, NULL, F64_TOL);

    float wbuf[9], obuf[12];
    clattn_tensor tw = clattn_tensor_host(wbuf, 1, 1, 3, 3);
    clattn_tensor to = clattn_tensor_host(obuf, 1, 1, 3, 4);
    for (int a = 0; a < 2; a++) {
        desc.algorithm = tu_algorithms[a];
        desc.weights = desc.algorithm == CLATTN_ALGORITHM_UNFUSED ? &tw : NULL;
        tu_fill_value(wbuf, 9, NAN);
        tu_fill_value(obuf, 12, NAN);
        TU_ASSERT_OK(clattn_attention(tu_ctx(), &desc, &tx, &tx, &tx, &to),
                     "clattn_attention(%s, no_self)", tu_algorithm_name(desc.algorithm));
        char what[128];
        snprintf(what, sizeof what, "003 O (%s)", tu_algorithm_name(desc.algorithm));
        TU_ASSERT_CLOSE(what, &to, O, NULL, F64_TOL);
        if (desc.weights) {
            TU_ASSERT_CLOSE("003 W (desc.weights, unfused)", &tw, W, NULL, F64_TOL);
            /* the text's table: bank attends sat 0.297339 and river 0.702661 */
            ck_assert_msg(fabs(wbuf[3] - 0.297339) <= 1e-5,
                          "bank->sat weight %.9g, expected 0.297339", (double)wbuf[3]);
            ck_assert_msg(fabs(wbuf[5] - 0.702661) <= 1e-5,
                          "bank->river weight %.9g, expected 0.702661", (double)wbuf[5]);
            ck_assert_msg(wbuf[4] == 0.0f, "bank->bank weight %.9g, expected exactly 0",
                          (double)wbuf[4]);
        }
        const float *bank_out = &obuf[4];
        double cm = cosine(bank_out, MONEY, 4), cr = cosine(bank_out, RIVER, 4);
        ck_assert_msg(fabs(cm - cos_money) <= 1e-5 && fabs(cm - 0.959816) <= 1e-5,
                      "%s: cosine(bank output, money) = %.9g, expected %.9g (0.959816)",
                      tu_algorithm_name(desc.algorithm), cm, cos_money);
        ck_assert_msg(fabs(cr - cos_river) <= 1e-5 && fabs(cr - 0.995579) <= 1e-5,
                      "%s: cosine(bank output, river) = %.9g, expected %.9g (0.995579)",
                      tu_algorithm_name(desc.algorithm), cr, cos_river);
    }
    free(S);
    free(W);
    free(O);
    cJSON_Delete(root);
}
END_TEST

int main(void)
{
    tu_seed_init(0); /* these examples are fixed inputs; the seed is printed for uniformity */
    Suite *s = suite_create("seeds");
    TCase *tc = tcase_create("seed000");
    tcase_add_test(tc, seed000_unscaled_S_W_Z);
    tcase_add_test(tc, seed000_scaled_1_over_sqrt3);
    tcase_add_test(tc, seed000_default_scale_is_1_over_sqrt_dk);
    tcase_add_test(tc, seed000_three_stages);
    suite_add_tcase(s, tc);
    tc = tcase_create("seed003");
    tcase_add_test(tc, seed003_sat_bank_river_no_self);
    suite_add_tcase(s, tc);
    return tu_run_suite(s);
}
