/* `clattn demo`: two worked examples through the library, compared with the CPU
 * reference. */
#include "check.h"
#include "clattn.h"
#include "cli.h"
#include "commands.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char demo_usage[] =
    "Usage: clattn demo [--device SPEC]\n"
    "\n"
    "Runs two worked examples through the library and prints their scores, weights\n"
    "and outputs:\n"
    "  Example 1: \"your journey starts with one step\", six words embedded as a 6x3\n"
    "             matrix X; Q = K = V = X, scale 1\n"
    "  Example 2: \"sat bank river\", 3x4 embeddings; scale 1/2, no word attends\n"
    "             itself; the output of \"bank\" is compared with \"river\" and \"money\"\n"
    "Compares both algorithms (unfused, fused) with the CPU reference and exits 1 if\n"
    "any value deviates by more than 1e-5.\n"
    "\n"
    "Options:\n"
    "  --device SPEC   \"P:D\" (see `clattn devices`) or a device-name substring;\n"
    "                  default: CLATTN_DEVICE, else the first GPU, else the first device\n"
    "  -h, --help      show this help\n";

/* Example 1: "Your journey starts with one step", 6 words × 3 dimensions. */
static const char *const journey_words[] = {"your", "journey", "starts", "with", "one", "step"};
static float journey_x[6 * 3] = {
    0.43f, 0.15f, 0.89f, /* your */
    0.55f, 0.87f, 0.66f, /* journey */
    0.57f, 0.85f, 0.64f, /* starts */
    0.22f, 0.58f, 0.33f, /* with */
    0.77f, 0.25f, 0.10f, /* one */
    0.05f, 0.80f, 0.55f, /* step */
};

/* Example 2: static embeddings of "sat bank river" (and "money" for comparison). */
static const char *const river_words[] = {"sat", "bank", "river"};
static float river_x[3 * 4] = {
    0.1f, 0.2f,  0.3f, 0.4f, /* sat */
    0.3f, -0.4f, 0.0f, 1.3f, /* bank */
    0.4f, -0.3f, 0.1f, 1.5f, /* river */
};
static const float money_embedding[4] = {0.2f, -0.5f, 0.1f, 1.2f};

typedef struct example {
    const char *title;
    const char *const *words; /* n row (and column) labels */
    float *x;                 /* n×d; Q = K = V = x */
    int64_t n, d;
    float scale;
    clattn_mask mask;
} example;

/* The results of one example: S, W and Z (unfused), and Z of the fused kernel. */
typedef struct example_result {
    float *scores, *weights, *z, *z_fused;
} example_result;

static void print_matrix(const char *title, const float *m, int64_t rows, int64_t cols,
                         const char *const *row_labels, const char *const *col_labels)
{
    printf("%s\n", title);
    if (col_labels != NULL) {
        printf("%-8s", "");
        for (int64_t c = 0; c < cols; ++c) {
            printf(" %8s", col_labels[c]);
        }
        printf("\n");
    }
    for (int64_t r = 0; r < rows; ++r) {
        printf("%-8s", row_labels[r]);
        for (int64_t c = 0; c < cols; ++c) {
            printf(" %8.4f", m[r * cols + c]);
        }
        printf("\n");
    }
}

/* Whether key j is visible to query i under `mask`: the library's rule. */
static int visible(clattn_mask mask, int64_t i, int64_t j, int64_t n)
{
    clattn_attention_desc desc = clattn_attention_desc_default();
    desc.mask = mask;
    clattn_key_range r;
    return clattn_visible_keys(&desc, n, n, 0, i, &r) == CLATTN_SUCCESS && r.valid && j >= r.lo &&
           j < r.hi && j != r.self;
}

/* S in double, rounded to float: the reference for clattn_scores. */
static void reference_scores(const example *ex, float *s)
{
    for (int64_t i = 0; i < ex->n; ++i) {
        for (int64_t j = 0; j < ex->n; ++j) {
            double dot = 0.0;
            for (int64_t c = 0; c < ex->d; ++c) {
                dot += (double)ex->x[i * ex->d + c] * ex->x[j * ex->d + c];
            }
            s[i * ex->n + j] =
                visible(ex->mask, i, j, ex->n) ? (float)(ex->scale * dot) : -INFINITY;
        }
    }
}

/* Runs the library's stages on one example. Returns 0, or an exit status. */
static int compute_example(clattn_context *ctx, const example *ex, const example_result *res)
{
    clattn_tensor x = clattn_tensor_host(ex->x, 1, 1, ex->n, ex->d);
    clattn_tensor s = clattn_tensor_host(res->scores, 1, 1, ex->n, ex->n);
    clattn_tensor w = clattn_tensor_host(res->weights, 1, 1, ex->n, ex->n);
    clattn_tensor z = clattn_tensor_host(res->z, 1, 1, ex->n, ex->d);
    clattn_tensor z_fused = clattn_tensor_host(res->z_fused, 1, 1, ex->n, ex->d);
    clattn_attention_desc desc = clattn_attention_desc_default();
    desc.scale = ex->scale;
    desc.mask = ex->mask;

    clattn_status status = clattn_scores(ctx, &desc, &x, &x, &s);
    if (status != CLATTN_SUCCESS) {
        return library_error("clattn_scores", status, ctx);
    }
    desc.algorithm = CLATTN_ALGORITHM_UNFUSED;
    desc.weights = &w;
    status = clattn_attention(ctx, &desc, &x, &x, &x, &z);
    if (status != CLATTN_SUCCESS) {
        return library_error("clattn_attention (unfused)", status, ctx);
    }
    desc.algorithm = CLATTN_ALGORITHM_FUSED;
    desc.weights = NULL;
    status = clattn_attention(ctx, &desc, &x, &x, &x, &z_fused);
    if (status != CLATTN_SUCCESS) {
        return library_error("clattn_attention (fused)", status, ctx);
    }
    return 0;
}

/* Prints one deviation line; returns 1 if it exceeds the demo's tolerance. */
static int report_deviation(const char *what, const float *got, const float *ref, size_t count)
{
    deviation dev = compare(got, ref, count);
    int bad = !(dev.max_abs <= CHECK_ATOL);
    printf("  max |%s - reference| = %.3g%s\n", what, dev.max_abs,
           bad ? "  ** exceeds 1e-5 **" : "");
    return bad;
}

/* Compares an example's results with the CPU reference; returns 0, or an exit status. */
static int check_example(const example *ex, const example_result *res, float *scratch)
{
    size_t nn = (size_t)(ex->n * ex->n), nd = (size_t)(ex->n * ex->d);
    float *ref_w = scratch, *ref_z = scratch + nn, *ref_s = scratch + nn + nd;
    clattn_tensor x = clattn_tensor_host(ex->x, 1, 1, ex->n, ex->d);
    clattn_tensor w = clattn_tensor_host(ref_w, 1, 1, ex->n, ex->n);
    clattn_tensor z = clattn_tensor_host(ref_z, 1, 1, ex->n, ex->d);
    clattn_attention_desc desc = clattn_attention_desc_default();
    desc.scale = ex->scale;
    desc.mask = ex->mask;
    desc.weights = &w;
    clattn_status status = clattn_reference_attention(&desc, &x, &x, &x, &z);
    if (status != CLATTN_SUCCESS) {
        return library_error("clattn_reference_attention", status, NULL);
    }
    reference_scores(ex, ref_s);

    printf("Deviation from the CPU reference (float64 accumulation):\n");
    int bad = report_deviation("S", res->scores, ref_s, nn);
    bad |= report_deviation("W", res->weights, ref_w, nn);
    bad |= report_deviation("Z unfused", res->z, ref_z, nd);
    bad |= report_deviation("Z fused", res->z_fused, ref_z, nd);
    return bad ? EXIT_FAILURE : 0;
}

/* Computes, prints and checks one example. `z_out` (n×d) receives Z if not NULL. */
static int run_example(clattn_context *ctx, const example *ex, float *z_out)
{
    size_t nn = (size_t)(ex->n * ex->n), nd = (size_t)(ex->n * ex->d);
    /* one block: S, W, Z, Z fused, then the reference's W, Z and S */
    float *block = calloc(4 * nn + 3 * nd, sizeof *block);
    if (block == NULL) {
        return cli_error("out of memory");
    }
    example_result res = {block, block + nn, block + 2 * nn, block + 2 * nn + nd};
    int rc = compute_example(ctx, ex, &res);
    if (rc == 0) {
        printf("\n%s\n\n", ex->title);
        print_matrix("Scores S = scale * X X^T (clattn_scores):", res.scores, ex->n, ex->n,
                     ex->words, ex->words);
        print_matrix("Weights W = softmax(S) (unfused):", res.weights, ex->n, ex->n, ex->words,
                     ex->words);
        print_matrix("Outputs Z = W X (unfused):", res.z, ex->n, ex->d, ex->words, NULL);
        print_matrix("Outputs Z (fused, online softmax):", res.z_fused, ex->n, ex->d, ex->words,
                     NULL);
        rc = check_example(ex, &res, block + 2 * nn + 2 * nd);
        if (z_out != NULL) {
            memcpy(z_out, res.z, nd * sizeof *z_out);
        }
    }
    free(block);
    return rc;
}

static double cosine(const float *a, const float *b, int64_t d)
{
    double dot = 0.0, na = 0.0, nb = 0.0;
    for (int64_t i = 0; i < d; ++i) {
        dot += (double)a[i] * b[i];
        na += (double)a[i] * a[i];
        nb += (double)b[i] * b[i];
    }
    return dot / (sqrt(na) * sqrt(nb));
}

int cmd_demo(int argc, char **argv)
{
    const char *device = NULL;
    const option options[] = {{"--device", &device, NULL}};
    int rc = parse_command_line("clattn demo", demo_usage, argc, argv, options, 1);
    if (rc >= 0) {
        return rc;
    }
    clattn_context *ctx = NULL;
    if (open_context(device, &ctx) != CLATTN_SUCCESS) {
        return EXIT_FAILURE;
    }
    cl_device_id device_id = NULL;
    char *device_name = NULL;
    if (clattn_context_get_cl(ctx, NULL, &device_id, NULL) == CLATTN_SUCCESS) {
        device_name = cl_info_string(NULL, device_id, CL_DEVICE_NAME);
    }
    printf("Device: %s\n", device_name != NULL ? device_name : "?");
    free(device_name);

    const example journey = {
        "Example 1: \"your journey starts with one step\", Q = K = V = X (6x3), scale 1",
        journey_words,
        journey_x,
        6,
        3,
        1.0f,
        CLATTN_MASK_NONE};
    const example river = {
        "Example 2: \"sat bank river\", Q = K = V (3x4), scale 1/sqrt(4) = 1/2, no self-attention",
        river_words,
        river_x,
        3,
        4,
        0.5f,
        CLATTN_MASK_NO_SELF};
    float river_z[3 * 4];

    int journey_rc = run_example(ctx, &journey, NULL);
    int river_rc = run_example(ctx, &river, river_z);
    if (river_rc == 0) {
        printf("cos(bank output, money) = %.6f\n", cosine(river_z + 4, money_embedding, 4));
        printf("cos(bank output, river) = %.6f\n", cosine(river_z + 4, river_x + 8, 4));
    }
    clattn_context_release(ctx);
    rc = journey_rc != 0 ? journey_rc : river_rc;
    printf("\n%s\n", rc == 0 ? "All values within 1e-5 of the reference."
                             : "FAILED: see the messages above.");
    return rc;
}
