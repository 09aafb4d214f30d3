#define _POSIX_C_SOURCE 200809L
/* `clattn heatmap`: the attention weights W = softmax(scale·Q·Kᵀ + mask) of one
 * (batch, head), computed by the library (unfused algorithm, which returns W) or read
 * from a .npy file, drawn as a self-contained SVG (svg.c): queries as rows, keys as
 * columns, token labels on both axes, a viridis colour scale with its legend, and the
 * value of every cell when the matrix is small. */
#include "cli.h" /* cli_error, cli_lookup, library_error, open_context */
#include "commands.h"
#include "layout.h"
#include "npy.h"
#include "outfile.h"
#include "parse_text.h"
#include "svg.h"

#include <clattn.h>

#include <ctype.h>
#include <errno.h>
#include <float.h>
#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char heatmap_usage[] =
    "Usage: clattn heatmap --q Q.npy --k K.npy --out W.svg [options]\n"
    "       clattn heatmap --from-weights W.npy --out W.svg [options]\n"
    "\n"
    "Draws the attention weights W = softmax(scale*Q*K^T + mask) of one (batch, head) as\n"
    "an SVG heatmap: queries are rows, keys are columns, colours follow the viridis\n"
    "scale between the smallest and the largest visible weight (masked cells are grey),\n"
    "and each cell shows its value when the matrix is at most 16 x 16. The weights are\n"
    "computed on the device by the library (unfused algorithm), or read from a .npy file\n"
    "(e.g. `clattn run --weights`). Inputs: float32 .npy files shaped (n, d), (h, n, d)\n"
    "or (b, h, n, d) like `clattn run`'s; Q and K of the same rank, h_q a multiple of\n"
    "h_kv (query head H reads key head H / (h_q / h_kv)). The SVG is written only on\n"
    "success (an existing file is otherwise kept).\n"
    "\n"
    "Options:\n"
    "  --q FILE            queries\n"
    "  --k FILE            keys\n"
    "  --from-weights FILE draw these weights (n_q, n_kv), (h, n_q, n_kv) or\n"
    "                      (b, h, n_q, n_kv) instead of computing them\n"
    "  --out FILE          the SVG to write\n"
    "  --scale X           multiplies Q*K^T (finite, non-zero; default 1/sqrt(d_k))\n"
    "  --mask M            none (default), causal, causal-bottom-right, no-self\n"
    "  --tokens \"A B ..\"   key labels, separated by spaces (n_kv of them); they label\n"
    "                      the queries too when n_q = n_kv (default: 0 .. n-1)\n"
    "  --q-tokens \"A ..\"   query labels (n_q of them)\n"
    "  --layout L          bhsd (default) or bshd: Q and K in FlashAttention's order,\n"
    "                      (b, n, h, d) or (n, h, d), as `clattn run --layout bshd`\n"
    "  --head H            query head to draw (default 0)\n"
    "  --batch B           batch entry to draw (default 0)\n"
    "  --title TEXT        the title line (default: \"Attention weights\")\n"
    "  --max-side N        at most N cells per side (default 256): a larger matrix is\n"
    "                      drawn in blocks of queries x keys, each cell the largest\n"
    "                      visible weight of its block (NaN if any is NaN; grey only\n"
    "                      when all are masked), labelled by its first and last\n"
    "                      query or key; the subtitle gives the block size\n"
    "  --device SPEC       \"P:D\" or a device-name substring (default: CLATTN_DEVICE,\n"
    "                      else the first GPU, else the first device)\n"
    "  -h, --help          show this help\n";

#define WEIGHTS_RANKS "(n_q, n_kv), (h, n_q, n_kv) or (b, h, n_q, n_kv)"

/* a usage error (exit status 2), in the words every subcommand uses */
#define usage(...) usage_error("clattn heatmap", __VA_ARGS__)

/* ---- arguments -------------------------------------------------------------------- */

typedef struct heatmap_args {
    const char *q, *k, *weights, *out, *scale_text, *mask_text, *tokens, *q_tokens, *head_text,
        *batch_text, *title, *device, *max_side_text, *layout_text;
    int bshd;    /* --layout bshd (layout.h) */
    float scale; /* 0: 1/sqrt(d_k) */
    clattn_mask mask;
    int64_t head, batch, max_side;
} heatmap_args;

/* Cells per side drawn by default (--max-side): 256 cells of the 4 px minimum are
 * 1024 px, and 256² cells about 10 MB of SVG (a 3000² matrix cell by cell was 1.1 GB,
 * more than a browser opens). */
enum { DEFAULT_MAX_SIDE = 256 };

/* A non-negative decimal integer written with digits only (no sign, no spaces). */
static int parse_index(const char *name, const char *text, int64_t *out)
{
    uint64_t v = 0;
    if (parse_unsigned(text, INT64_MAX, &v)) {
        *out = (int64_t)v;
        return -1;
    }
    if (isdigit((unsigned char)text[0]) && integer_out_of_range(text, strlen(text))) {
        return usage("%s '%s' is out of range (at most %lld)", name, text, LLONG_MAX);
    }
    return usage("%s '%s' is not a non-negative integer", name, text);
}

/* -1 to go on, or an exit status. */
static int parse_args(int argc, char **argv, heatmap_args *a)
{
    const option options[] = {
        {"--q", &a->q, NULL},
        {"--k", &a->k, NULL},
        {"--from-weights", &a->weights, NULL},
        {"--out", &a->out, NULL},
        {"--scale", &a->scale_text, NULL},
        {"--mask", &a->mask_text, NULL},
        {"--tokens", &a->tokens, NULL},
        {"--q-tokens", &a->q_tokens, NULL},
        {"--head", &a->head_text, NULL},
        {"--batch", &a->batch_text, NULL},
        {"--title", &a->title, NULL},
        {"--device", &a->device, NULL},
        {"--max-side", &a->max_side_text, NULL},
        {"--layout", &a->layout_text, NULL},
    };
    const int rc = parse_command_line("clattn heatmap", heatmap_usage, argc, argv, options,
                                      sizeof options / sizeof options[0]);
    if (rc != -1) {
        return rc;
    }
    if (a->out == NULL) {
        return usage("missing --out FILE");
    }
    if (a->weights != NULL) {
        const char *const conflicting[] = {a->q,         a->k,      a->scale_text,
                                           a->mask_text, a->device, a->layout_text};
        const char *const names[] = {"--q", "--k", "--scale", "--mask", "--device", "--layout"};
        for (int i = 0; i < 6; ++i) {
            if (conflicting[i] != NULL) {
                return usage("%s does not go with --from-weights (the weights are already "
                             "computed)",
                             names[i]);
            }
        }
    } else if (a->q == NULL || a->k == NULL) {
        return usage("give --q FILE and --k FILE, or --from-weights FILE");
    }
    if (a->scale_text != NULL) {
        char *end;
        double scale = strtod(a->scale_text, &end);
        if (end == a->scale_text || *end != '\0' || !isfinite(scale) || fabs(scale) > FLT_MAX ||
            (float)scale == 0.0f) {
            return usage("--scale '%s' is not a finite, non-zero float32 number", a->scale_text);
        }
        a->scale = (float)scale;
    }
    if (a->mask_text != NULL) {
        const int m = cli_lookup(a->mask_text, cli_mask_names);
        if (m < 0) {
            return usage("unknown --mask '%s' (none, causal, causal-bottom-right, no-self)",
                         a->mask_text);
        }
        a->mask = (clattn_mask)m;
    }
    const int layout = a->layout_text != NULL ? layout_parse(a->layout_text) : 0;
    if (layout < 0) {
        return usage("unknown --layout '%s' (" LAYOUT_CHOICES ")", a->layout_text);
    }
    a->bshd = layout == 1;
    int index_rc = -1;
    if ((a->head_text != NULL && (index_rc = parse_index("--head", a->head_text, &a->head)) >= 0) ||
        (a->batch_text != NULL &&
         (index_rc = parse_index("--batch", a->batch_text, &a->batch)) >= 0)) {
        return index_rc;
    }
    a->max_side = DEFAULT_MAX_SIDE;
    if (a->max_side_text != NULL &&
        ((index_rc = parse_index("--max-side", a->max_side_text, &a->max_side)) >= 0 ||
         a->max_side < 1)) {
        return index_rc >= 0 ? index_rc : usage("--max-side must be at least 1");
    }
    const char *const ins[] = {a->q, a->k, a->weights};
    for (int i = 0; i < 3; ++i) {
        if (ins[i] != NULL && same_file(a->out, ins[i])) {
            return usage("--out '%s' is the same file as the input '%s'", a->out, ins[i]);
        }
    }
    return check_output_file(a->out) != 0 ? EXIT_FAILURE : -1;
}

/* ---- labels ------------------------------------------------------------------------ */

static void labels_free(labels *l)
{
    for (int64_t i = 0; l->text != NULL && i < l->count; ++i) {
        free(l->text[i]);
    }
    free(l->text);
    memset(l, 0, sizeof *l);
}

/* The words of `text` (split on white space), or the numbers 0..count-1 if text is
 * NULL. Returns 0, or an exit status when the count is not `count`. */
static int labels_make(labels *l, const char *text, int64_t count, const char *option)
{
    memset(l, 0, sizeof *l);
    l->text = calloc(count > 0 ? (size_t)count : 1, sizeof *l->text);
    if (l->text == NULL) {
        return cli_error("out of memory");
    }
    l->count = count;
    int64_t n = 0;
    const char *p = text;
    for (;;) {
        char buf[32];
        const char *word = buf;
        size_t len;
        if (text == NULL) {
            if (n == count) {
                break;
            }
            len = (size_t)snprintf(buf, sizeof buf, "%lld", (long long)n);
        } else {
            while (*p == ' ' || *p == '\t' || *p == '\n') {
                ++p;
            }
            if (*p == '\0') {
                break;
            }
            word = p;
            while (*p != '\0' && *p != ' ' && *p != '\t' && *p != '\n') {
                ++p;
            }
            len = (size_t)(p - word);
        }
        if (n < count) {
            l->text[n] = malloc(len + 1);
            if (l->text[n] == NULL) {
                labels_free(l);
                return cli_error("out of memory");
            }
            memcpy(l->text[n], word, len);
            l->text[n][len] = '\0';
            size_t chars = utf8_chars(l->text[n]);
            l->max_chars = chars > l->max_chars ? chars : l->max_chars;
        }
        ++n;
    }
    if (n != count) {
        labels_free(l);
        return usage("%s has %lld word%s but %lld are needed (one per %s)", option, (long long)n,
                     n == 1 ? "" : "s", (long long)count,
                     strcmp(option, "--q-tokens") == 0 ? "query" : "key");
    }
    return 0;
}

/* ---- writing ----------------------------------------------------------------------- */

/* create_next_to() callback: a new file holding the text `arg`. */
static int create_svg(const char *name, void *arg)
{
    const text *t = arg;
    FILE *f = fopen(name, "wbx"); /* C11 exclusive create: never clobbers a file */
    if (f == NULL) {
        return -1;
    }
    int ok = fwrite(t->data, 1, t->len, f) == t->len;
    int saved = errno;
    if (fclose(f) != 0) {
        ok = 0, saved = errno;
    }
    if (!ok) {
        remove(name);
        errno = saved != EEXIST ? saved : EIO; /* not EEXIST: stop trying other names */
        return -1;
    }
    return 0;
}

static int write_atomically(const char *path, const text *t)
{
    char *tmp = NULL;
    if (create_next_to(path, create_svg, (void *)t, &tmp) != 0) {
        return cli_error("%s: cannot write a temporary file next to it: %s", path, strerror(errno));
    }
    int rc = replace_file(tmp, path, NULL);
    if (rc != 0) {
        remove(tmp);
    }
    free(tmp);
    return rc;
}

/* ---- computing or reading the weights ---------------------------------------------- */

static const char *base_name(const char *path)
{
    const char *slash = strrchr(path, '/');
    return slash != NULL ? slash + 1 : path;
}

/* Checks --batch and --head against a [b, h, ...] shape of `path`. */
static int check_indices(const heatmap_args *a, const char *path, const int64_t s[4])
{
    if (a->batch >= s[0]) { /* (a usage error, as a negative index is) */
        return usage("--batch %lld is out of range: %s has %lld batch entr%s", (long long)a->batch,
                     path, (long long)s[0], s[0] == 1 ? "y" : "ies");
    }
    if (a->head >= s[1]) {
        return usage("--head %lld is out of range: %s has %lld head%s", (long long)a->head, path,
                     (long long)s[1], s[1] == 1 ? "" : "s");
    }
    return 0;
}

/* Whether key j is visible to query i under `mask`: the library's rule. */
static int visible(clattn_mask mask, int64_t i, int64_t j, int64_t n_q, int64_t n_kv)
{
    clattn_attention_desc desc = clattn_attention_desc_default();
    desc.mask = mask;
    clattn_key_range r;
    return clattn_visible_keys(&desc, n_q, n_kv, 0, i, &r) == CLATTN_SUCCESS && r.valid &&
           j >= r.lo && j < r.hi && j != r.self;
}

/* Computes W [n_q, n_kv] of (batch, head) with the library; *w is malloc'd. */
static int compute_weights(const heatmap_args *a, float **w, unsigned char **masked,
                           int64_t *n_q_out, int64_t *n_kv_out, char *subtitle, size_t cap)
{
    npy_array q = {0}, k = {0};
    char message[512], ranks[128];
    int rc = EXIT_FAILURE;
    float *zeros = NULL, *o = NULL;
    clattn_context *ctx = NULL;
    *w = NULL;
    *masked = NULL;
    layout_ranks(a->bshd, ranks, sizeof ranks);
    if (npy_read_f32_rank(a->q, 2, ranks, &q, message, sizeof message) != 0 ||
        npy_read_f32_rank(a->k, 2, ranks, &k, message, sizeof message) != 0) {
        cli_error("%s", message);
        goto done;
    }
    int64_t qs[4], ks[4];
    shape4(q.shape, q.ndim, a->bshd, qs);
    shape4(k.shape, k.ndim, a->bshd, ks);
    if (q.ndim != k.ndim) {
        cli_error("%s has rank %d but %s has rank %d (Q and K must have the same rank)", a->k,
                  k.ndim, a->q, q.ndim);
        goto done;
    }
    if (ks[3] != qs[3]) {
        cli_error("%s: d_k (last dimension) is %lld but %s has %lld", a->k, (long long)ks[3], a->q,
                  (long long)qs[3]);
        goto done;
    }
    if (ks[0] != qs[0]) {
        cli_error("%s: the batch size is %lld but %s has %lld", a->k, (long long)ks[0], a->q,
                  (long long)qs[0]);
        goto done;
    }
    if (!layout_check_heads(a->q, qs[1], a->k, ks[1], a->bshd)) {
        goto done;
    }
    if (qs[3] < 1) {
        cli_error("%s: d_k is 0; head dims must be at least 1", a->q);
        goto done;
    }
    if ((rc = check_indices(a, a->q, qs)) != 0) {
        goto done;
    }
    rc = EXIT_FAILURE;
    const int64_t n_q = qs[2], n_kv = ks[2], d = qs[3];
    if (n_q < 1 || n_kv < 1) {
        cli_error("nothing to draw: n_q is %lld and n_kv is %lld", (long long)n_q, (long long)n_kv);
        goto done;
    }
    const int64_t kv_head = a->head / (qs[1] / ks[1]);
    const size_t cells = (size_t)n_q * (size_t)n_kv;
    zeros = calloc((size_t)n_kv, sizeof *zeros);
    o = calloc((size_t)n_q, sizeof *o);
    *w = calloc(cells, sizeof **w);
    *masked = calloc(cells, 1);
    if (zeros == NULL || o == NULL || *w == NULL || *masked == NULL) {
        cli_error("out of memory for a %lld x %lld heatmap", (long long)n_q, (long long)n_kv);
        goto done;
    }
    /* one (batch, head): views into Q and K; V is a dummy column of zeros (d_v = 1) */
    const clattn_tensor tq =
        view_slice(host_view(q.data, q.shape, q.ndim, CLATTN_FLOAT32, a->bshd), a->batch, a->head);
    const clattn_tensor tk =
        view_slice(host_view(k.data, k.shape, k.ndim, CLATTN_FLOAT32, a->bshd), a->batch, kv_head);
    clattn_tensor tv = clattn_tensor_host(zeros, 1, 1, n_kv, 1);
    clattn_tensor to = clattn_tensor_host(o, 1, 1, n_q, 1);
    clattn_tensor tw = clattn_tensor_host(*w, 1, 1, n_q, n_kv);
    clattn_attention_desc desc = clattn_attention_desc_default();
    desc.scale = a->scale;
    desc.mask = a->mask;
    desc.algorithm = CLATTN_ALGORITHM_UNFUSED;
    desc.weights = &tw;
    if (open_context(a->device, &ctx) != CLATTN_SUCCESS) {
        goto done;
    }
    const clattn_status st = clattn_attention(ctx, &desc, &tq, &tk, &tv, &to);
    if (st != CLATTN_SUCCESS) {
        library_error("clattn_attention", st, ctx);
        goto done;
    }
    for (int64_t i = 0; i < n_q; ++i) {
        for (int64_t j = 0; j < n_kv; ++j) {
            (*masked)[i * n_kv + j] = !visible(a->mask, i, j, n_q, n_kv);
        }
    }
    const double scale = a->scale != 0.0f ? a->scale : 1.0 / sqrt((double)d);
    char scale_text[64];
    if (a->scale == 0.0f) {
        snprintf(scale_text, sizeof scale_text, "1/\xE2\x88\x9A%lld = %.4g", (long long)d, scale);
    } else {
        snprintf(scale_text, sizeof scale_text, "%.6g", scale);
    }
    snprintf(subtitle, cap,
             "softmax(scale\xC2\xB7Q\xC2\xB7K\xE1\xB5\x80) \xC2\xB7 %lld\xC3\x97%lld (n_q\xC3\x97"
             "n_kv), d_k %lld \xC2\xB7 scale %s \xC2\xB7 mask %s \xC2\xB7 batch %lld, head %lld "
             "\xC2\xB7 %s, %s",
             (long long)n_q, (long long)n_kv, (long long)d, scale_text, cli_mask_names[a->mask],
             (long long)a->batch, (long long)a->head, base_name(a->q), base_name(a->k));
    *n_q_out = n_q;
    *n_kv_out = n_kv;
    rc = 0;
done:
    if (rc != 0) {
        free(*w);
        free(*masked);
        *w = NULL;
        *masked = NULL;
    }
    clattn_context_release(ctx);
    free(zeros);
    free(o);
    npy_free(&q);
    npy_free(&k);
    return rc;
}

/* Reads W [n_q, n_kv] of (batch, head) from --from-weights; *w is malloc'd. */
static int read_weights(const heatmap_args *a, float **w, int64_t *n_q_out, int64_t *n_kv_out,
                        char *subtitle, size_t cap)
{
    npy_array wa = {0};
    char message[512];
    *w = NULL;
    if (npy_read_f32_rank(a->weights, 2, WEIGHTS_RANKS, &wa, message, sizeof message) != 0) {
        return cli_error("%s", message);
    }
    int64_t s[4];
    shape4(wa.shape, wa.ndim, 0, s); /* (b, h, n_q, n_kv) in either layout */
    int rc = check_indices(a, a->weights, s);
    if (rc == 0 && (s[2] < 1 || s[3] < 1)) {
        rc = cli_error("%s: nothing to draw: n_q is %lld and n_kv is %lld", a->weights,
                       (long long)s[2], (long long)s[3]);
    }
    if (rc == 0) {
        size_t cells = (size_t)s[2] * (size_t)s[3];
        *w = malloc(cells * sizeof **w);
        if (*w == NULL) {
            rc = cli_error("out of memory");
        } else {
            memcpy(*w, wa.data + (size_t)((a->batch * s[1] + a->head) * s[2] * s[3]),
                   cells * sizeof **w);
            *n_q_out = s[2];
            *n_kv_out = s[3];
            snprintf(subtitle, cap,
                     "%lld\xC3\x97%lld (n_q\xC3\x97n_kv) \xC2\xB7 batch %lld, head %lld \xC2\xB7 "
                     "from %s",
                     (long long)s[2], (long long)s[3], (long long)a->batch, (long long)a->head,
                     base_name(a->weights));
        }
    }
    npy_free(&wa);
    return rc;
}

/* ---- blocks of cells (--max-side) ---------------------------------------------------- */

/* Pools w [n_q, n_kv] (and masked, if any) into blocks of bq queries × bk keys, in place
 * of the caller's arrays: a block's cell is the largest visible weight of the block (NaN
 * if any visible weight is NaN, so no NaN is hidden; infinities order as numbers) and is
 * masked only when every cell of the block is. Returns 0, or an exit status. */
static int pool_weights(float **w, unsigned char **masked, int64_t n_q, int64_t n_kv, int64_t bq,
                        int64_t bk)
{
    const int64_t pq = (n_q + bq - 1) / bq, pk = (n_kv + bk - 1) / bk;
    float *pw = malloc((size_t)(pq * pk) * sizeof *pw);
    unsigned char *pm = *masked != NULL ? malloc((size_t)(pq * pk)) : NULL;
    if (pw == NULL || (*masked != NULL && pm == NULL)) {
        free(pw);
        free(pm);
        return cli_error("out of memory");
    }
    for (int64_t r = 0; r < pq; ++r) {
        for (int64_t c = 0; c < pk; ++c) {
            float best = -INFINITY;
            int seen = 0, nan = 0;
            for (int64_t i = r * bq; i < n_q && i < (r + 1) * bq; ++i) {
                for (int64_t j = c * bk; j < n_kv && j < (c + 1) * bk; ++j) {
                    if (*masked != NULL && (*masked)[i * n_kv + j]) {
                        continue;
                    }
                    const float v = (*w)[i * n_kv + j];
                    nan |= isnan(v);
                    best = seen++ == 0 || v > best ? v : best;
                }
            }
            pw[r * pk + c] = nan ? NAN : seen ? best : 0.0f;
            if (pm != NULL) {
                pm[r * pk + c] = !seen;
            }
        }
    }
    free(*w);
    free(*masked);
    *w = pw;
    *masked = pm;
    return 0;
}

/* Labels of blocks of `block` rows or columns: "first–last" of the members' labels (the
 * one label for a block of one). Returns 0, or an exit status (l is then freed). */
static int pool_labels(labels *l, int64_t block)
{
    const int64_t count = (l->count + block - 1) / block;
    labels pooled = {calloc((size_t)count, sizeof(char *)), count, 0};
    if (pooled.text == NULL) {
        labels_free(l);
        return cli_error("out of memory");
    }
    for (int64_t b = 0; b < count; ++b) {
        const char *first = l->text[b * block];
        const int64_t last_i = (b + 1) * block - 1 < l->count ? (b + 1) * block - 1 : l->count - 1;
        const char *last = l->text[last_i];
        const size_t len = strlen(first) + strlen(last) + 4;
        pooled.text[b] = malloc(len);
        if (pooled.text[b] == NULL) {
            labels_free(&pooled);
            labels_free(l);
            return cli_error("out of memory");
        }
        if (last_i == b * block) {
            snprintf(pooled.text[b], len, "%s", first);
        } else {
            snprintf(pooled.text[b], len, "%s\xE2\x80\x93%s", first, last); /* – */
        }
        const size_t chars = utf8_chars(pooled.text[b]);
        pooled.max_chars = chars > pooled.max_chars ? chars : pooled.max_chars;
    }
    labels_free(l);
    *l = pooled;
    return 0;
}

int cmd_heatmap(int argc, char **argv)
{
    heatmap_args a = {0};
    int rc = parse_args(argc, argv, &a);
    if (rc >= 0) {
        return rc;
    }
    float *w = NULL;
    unsigned char *masked = NULL;
    int64_t n_q = 0, n_kv = 0;
    heatmap h = {0};
    labels rows = {0}, cols = {0};
    text svg = {0};
    rc = a.weights != NULL
             ? read_weights(&a, &w, &n_q, &n_kv, h.subtitle, sizeof h.subtitle)
             : compute_weights(&a, &w, &masked, &n_q, &n_kv, h.subtitle, sizeof h.subtitle);
    if (rc != 0) {
        goto done;
    }
    if ((rc = labels_make(&cols, a.tokens, n_kv, "--tokens")) != 0) {
        goto done;
    }
    const char *row_text = a.q_tokens != NULL ? a.q_tokens : n_q == n_kv ? a.tokens : NULL;
    if ((rc = labels_make(&rows, row_text, n_q, a.q_tokens != NULL ? "--q-tokens" : "--tokens")) !=
        0) {
        goto done;
    }
    /* beyond --max-side cells per side: blocks of bq queries × bk keys */
    const int64_t bq = 1 + (n_q - 1) / a.max_side, bk = 1 + (n_kv - 1) / a.max_side; /* n ≥ 1 */
    if (bq > 1 || bk > 1) {
        if ((rc = pool_weights(&w, &masked, n_q, n_kv, bq, bk)) != 0 ||
            (rc = pool_labels(&rows, bq)) != 0 || (rc = pool_labels(&cols, bk)) != 0) {
            goto done;
        }
        const size_t used = strlen(h.subtitle);
        snprintf(h.subtitle + used, sizeof h.subtitle - used,
                 " \xC2\xB7 each cell the largest weight of %lld\xC3\x97%lld (queries\xC3\x97keys)",
                 (long long)bq, (long long)bk);
    }
    h.w = w;
    h.masked = masked;
    h.n_q = rows.count; /* the pooled blocks' count, or n_q */
    h.n_kv = cols.count;
    h.rows = &rows;
    h.cols = &cols;
    h.title = a.title != NULL ? a.title : "Attention weights";
    render(&h, &svg);
    if (svg.failed) {
        rc = cli_error("out of memory for the SVG");
        goto done;
    }
    rc = write_atomically(a.out, &svg);
    if (rc == 0) {
        if (bq > 1 || bk > 1) {
            printf("wrote %s: %lld x %lld heatmap in %lld x %lld cells (blocks of %lld x %lld)\n",
                   a.out, (long long)n_q, (long long)n_kv, (long long)h.n_q, (long long)h.n_kv,
                   (long long)bq, (long long)bk);
        } else {
            printf("wrote %s: %lld x %lld heatmap\n", a.out, (long long)n_q, (long long)n_kv);
        }
    }
done:
    labels_free(&rows);
    labels_free(&cols);
    free(svg.data);
    free(w);
    free(masked);
    return rc;
}
