/* `clattn run`: its help text, and the parsing and checking of its command line; see
 * run_args.h. */
#include "run_args.h"
#include "cli.h"
#include "parse_text.h"

#include <errno.h>
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* In parts: ISO C compilers need only support string literals of 4095 bytes. */
static const char run_usage_1[] =
    "Usage: clattn run --q Q.npy --k K.npy --v V.npy --out O.npy [options]\n"
    "       clattn run --backward --q Q.npy --k K.npy --v V.npy --do dO.npy --dq dQ.npy\n"
    "                  --dk dK.npy --dv dV.npy [--o O.npy --lse LSE.npy] [options]\n"
    "\n"
    "Computes O = softmax(scale*Q*K^T + bias + mask)*V. Inputs are C-order little-endian\n"
    ".npy files shaped (n, d), (h, n, d) or (b, h, n, d) (with --layout bshd: (n, d),\n"
    "(n, h, d) or (b, n, h, d)), all of the same rank:\n"
    "Q [b, h_q, n_q, d_k], K [b, h_kv, n_kv, d_k], V [b, h_kv, n_kv, d_v], with h_q a\n"
    "multiple of h_kv. Each of Q, K and V is float32 ('<f4'), float16 ('<f2') or, with\n"
    "--dtype bf16, bfloat16 stored as uint16 words ('<u2'); K and V may also be int8\n"
    "('|i1', a quantized cache) with their scales in --k-scale and --v-scale. O gets Q's\n"
    "rank and shape with the last dimension d_v, and Q's dtype unless --out-dtype says\n"
    "otherwise.\n"
    "Output files are written only on success (an existing file is otherwise kept);\n"
    "an output must not name an input or another output, and an existing output must\n"
    "be a regular file (not a directory, symbolic link, device or FIFO).\n"
    "\n"
    "Options:\n"
    "  --q FILE          queries\n"
    "  --k FILE          keys\n"
    "  --v FILE          values\n"
    "  --out FILE        output O\n"
    "  --scale X         multiplies Q*K^T (finite, non-zero; default 1/sqrt(d_k))\n"
    "  --mask M          none (default), causal (key j visible to query i iff j <= a_i),\n"
    "                    causal-bottom-right (the same, with a_i aligned to the bottom\n"
    "                    right: j <= i + n_kv - n_q), no-self (iff j != a_i)\n"
    "  --mask-file FILE  a mask array broadcast as in NumPy to (b, h_q, n_q, n_kv), e.g.\n"
    "                    (n_q, n_kv), (h_q|1, n_q, n_kv) or (b|1, h_q|1, n_q, n_kv): bool\n"
    "                    ('|b1'; or '|u1', nonzero = true) where true = key visible, or\n"
    "                    float32 ('<f4') added to the scores (-inf = masked)\n"
    "  --kv-lens L,...   valid keys per batch entry (b integers, 0..n_kv; or an int32 .npy\n"
    "                    file of b values): keys j >= L are masked (padding)\n"
    "  --cache-seqlens L,...  another name for --kv-lens (FlashAttention's cache_seqlens)\n"
    "  --q-lens L,...    valid queries per batch entry (b integers, 0..n_q; or an int32\n"
    "                    .npy file): rows i >= L output zeros (weights 0, LSE -inf)\n"
    "  --window L,R      sliding window: key j visible iff a_i - L <= j <= a_i + R\n"
    "                    (integers; -1 = unbounded on that side)\n"
    "  --alibi S,...     ALiBi slopes, one per query head (h_q finite numbers): the score\n"
    "                    of key j for query i of head h gets -S_h*|a_i - j|\n"
    "  --sinks FILE      attention-sink logits (gpt-oss): a float32 ('<f4') .npy of\n"
    "                    shape (h_q,), entry h finite or -inf (= no sink for head h);\n"
    "                    each query row of head h gets one more key, of logit L_h (not\n"
    "                    scaled, capped or biased) and value 0: its weights sum below 1,\n"
    "                    and a row with no visible key outputs zeros with LSE L_h\n"
    "  --k-scale FILE    the scales of an int8 ('|i1') K, needed with one and refused\n"
    "                    otherwise: a float32 ('<f4') .npy shaped like K with the last\n"
    "                    dimension 1, its b and n_kv each as in K or 1 (broadcast):\n"
    "                    (b|1, h_kv, n_kv|1, 1), (h_kv, n_kv|1, 1) or (n_kv|1, 1); key j\n"
    "                    of head h of batch entry b is scale[b, h, j] * K[b, h, j, :]\n"
    "                    (per token and head; (1, h_kv, 1, 1): one scale per head);\n"
    "                    with --block-table shaped like the pool, read through the same\n"
    "                    table: (num_pages|1, h_kv, page_size|1, 1)\n"
    "  --v-scale FILE    the same for an int8 V (value rows); int8 K/V run with the\n"
    "                    fused algorithm only, without --weights or --scores\n"
    "  --softcap C       logit softcap (Gemma 2): scaled scores s -> C*tanh(s/C), before\n"
    "                    masks and biases (finite, > 0; default off)\n"
    "  --q-start N       absolute position of the first query (default 0)\n"
    "  --kv-start N      absolute position of the first key (default 0)\n";
static const char run_usage_kv[] =
    "  --layout L        the order of the dimensions of Q, K, V and O, and of --k-new,\n"
    "                    --v-new, --k-scale, --v-scale, the cache outputs, --do, --o and\n"
    "                    the gradients: bhsd (default; (b, h, n, d), PyTorch SDPA's) or\n"
    "                    bshd ((b, n, h, d) or (n, h, d): FlashAttention's q, k, v and\n"
    "                    out, its packed (total, h, d) and its page pools (num_pages,\n"
    "                    page_size, h_kv, d)). This help gives bhsd's shapes. In both,\n"
    "                    --lse is (b, h_q, n_q) and --weights and --scores (b, h_q, n_q,\n"
    "                    n_kv), in Q's rank (the LSE one less), and --mask-file\n"
    "                    broadcasts to (b, h_q, n_q, n_kv)\n"
    "  --block-table FILE  a paged K/V cache (vLLM; FlashAttention's block_table): an\n"
    "                    int32 ('<i4') .npy of shape (b, max_pages), b as in Q; K and V\n"
    "                    are then page pools (num_pages, h_kv, page_size, d), rank 4 only\n"
    "                    (Q too). Key j of batch entry b is slot j % page_size of page\n"
    "                    table[b, j / page_size], n_kv is max_pages*page_size and --kv-lens\n"
    "                    gives the sequences' lengths (default: full); the table entries\n"
    "                    read must be pages of the pool. Fused only, no --weights, --scores\n"
    "  --k-new FILE      K rows appended to the cache before attending (FlashAttention's\n"
    "                    k): (b, h_kv, n_new, d_k) in Q's rank, a float dtype of Q's kind;\n"
    "                    needs --v-new and --kv-lens (the lengths before the append): row t\n"
    "                    goes to key kv_lens[b] + t (through --block-table if given) and\n"
    "                    the attention sees kv_lens[b] + n_new keys of entry b\n"
    "  --v-new FILE      the V rows appended, (b, h_kv, n_new, d_v)\n"
    "  --k-cache-out FILE  with --k-new: also write K after the append (K's dtype, shape)\n"
    "  --v-cache-out FILE  with --k-new: also write V after the append (a run writes at\n"
    "                    most 4 output files)\n"
    "  --rotary D,I,B    rotary embeddings (RoPE) of Q and the appended keys (needs\n"
    "                    --k-new): D rotated columns (even; 0 = d_k), I 0 for GPT-NeoX /\n"
    "                    Llama pairs (c, c + D/2) or 1 for GPT-J pairs (2c, 2c + 1), B the\n"
    "                    base (0 = 10000). Appended key t sits at kv_start + kv_lens[b] + t,\n"
    "                    the queries at kv_start + kv_lens[b] (+ i with a causal mask or a\n"
    "                    window); the cache keeps the rotated keys\n"
    "  --rotary-cos FILE  with --rotary: the angles' cosines instead of a base, a float32\n"
    "                    ('<f4') .npy of shape (table_len, D/2), row t for position t\n"
    "  --rotary-sin FILE  the sines, shaped like --rotary-cos (both or neither)\n"
    "  --cu-seqlens-q L,...  packed variable-length sequences (FlashAttention's varlen):\n"
    "                    b + 1 query offsets (non-decreasing integers >= 0, or an int32\n"
    "                    .npy file); Q, K, V and O then hold the sequences one after\n"
    "                    another with a batch of 1, (1, h, total, d) or (h, total, d):\n"
    "                    sequence b is query rows cu_q[b] .. cu_q[b + 1] - 1; rows\n"
    "                    outside every sequence are written as zeros (O and --lse)\n"
    "  --cu-seqlens-k L,...  the b + 1 key offsets (both or neither); not with --kv-lens,\n"
    "                    --q-lens, --mask-file, --weights, --block-table or --k-new\n";
static const char run_usage_drop[] =
    "  --dropout P       dropout on the attention weights (training; PyTorch SDPA's and\n"
    "                    FlashAttention's dropout_p): P in [0, 1), default 0 (none). Each\n"
    "                    weight is kept with probability 1 - P and scaled by 1/(1 - P), or\n"
    "                    dropped (0): O_i = sum_j P_ij*Z_ij*V_j/(1 - P). The softmax, the\n"
    "                    LSE and the sinks are those before dropout; --weights writes the\n"
    "                    weights after it (P*Z/(1 - P)), --scores the scores (unchanged).\n"
    "                    The keep bit Z of weight (b, h, i, j) is clattn's own\n"
    "                    Philox4x32-10 stream, not PyTorch's: kept iff word j % 4 of\n"
    "                    Philox(counter (j/4, i, b*h_q + h, offset), key seed) >=\n"
    "                    floor(P*2^32), whatever the device, algorithm or tiling (so\n"
    "                    --check's reference draws the same mask). The library refuses\n"
    "                    it with --cu-seqlens (exit status 1 and its message)\n"
    "  --dropout-seed N  with --dropout: the generator's key, an integer 0 .. 2^64 - 1\n"
    "                    (default 0)\n"
    "  --dropout-offset N  with --dropout: its counter word, an integer 0 .. 2^32 - 1\n"
    "                    (default 0); runs with one seed draw independent masks when\n"
    "                    their offsets differ (advance it per step, as PyTorch's Philox\n"
    "                    offset). The same P, seed and offset give the same mask: pass\n"
    "                    the forward's to --backward, which regenerates it\n";
static const char run_usage_2[] =
    "  --masked-rows R   what a query row with no visible key outputs: zero (default; O\n"
    "                    and its weights 0) or nan (O and its weights NaN); LSE -inf\n"
    "  --algorithm A     auto (default), fused, unfused\n"
    "  --batch-invariant  a row's bits do not depend on the batch, chunking or n_q (the\n"
    "                    fused tiled kernel for every shape; docs/SEMANTICS.md)\n"
    "  --weights FILE    also write the attention weights (float32), (b, h_q, n_q, n_kv)\n"
    "                    in Q's rank (either algorithm)\n"
    "  --weights-head-mean  with --weights: write the weights averaged over the query\n"
    "                    heads; the file keeps the head dimension, as 1: (b, 1, n_q,\n"
    "                    n_kv) for rank 4, (1, n_q, n_kv) for rank 3 (PyTorch drops it:\n"
    "                    w[:, 0] in NumPy)\n"
    "  --lse FILE        also write each query row's log-sum-exp of its visible scores\n"
    "                    and its sink (float32 unless --lse-dtype f64; natural log; -inf\n"
    "                    for a row with no visible key and no sink), (b, h_q, n_q) in\n"
    "                    Q's rank less one (with --backward: the forward's LSE, an\n"
    "                    input, '<f4' or '<f8')\n"
    "  --lse-dtype T     f32 (default) or f64 ('<f8'): the LSE's dtype. A float64 LSE\n"
    "                    keeps the digits a far ALiBi position or an exact merge of\n"
    "                    parts computed apart needs (the device needs cl_khr_fp64)\n"
    "  --scores FILE     also write the score matrix (float32, shaped like the weights),\n"
    "                    whichever algorithm runs, at the stage --scores-stage names:\n"
    "  --scores-stage S  raw (scale*Q*K^T), softcap (after the softcap) or masked (the\n"
    "                    default: after every mask and bias, before the softmax; masked\n"
    "                    entries -inf) - ONNX Attention's modes 0, 1 and 2\n"
    "  --dtype D         auto (default: '<u2' inputs are refused) or bf16 ('<u2' inputs\n"
    "                    hold bfloat16 bit patterns)\n"
    "  --out-dtype T     the dtype of O: f32 ('<f4'), f16 ('<f2') or bf16 (bfloat16 bit\n"
    "                    patterns as '<u2'); default: Q's dtype\n"
    "  --check           also run the CPU reference with the same inputs and options and\n"
    "                    fail unless every element of O, the weights, the LSE and the\n"
    "                    scores is within 1e-5 + 1e-5*|reference|; a float16 or bfloat16 O is\n"
    "                    compared with the reference rounded to its dtype, within one\n"
    "                    unit in the last place of that dtype (plus the same 1e-5 +\n"
    "                    1e-5*|reference|, which matters only near zero); scores above\n"
    "                    float32's range (NaN rows on the device) fail it\n"
    "  --device SPEC     \"P:D\" (see `clattn devices`) or a device-name substring;\n"
    "                    default: CLATTN_DEVICE, else the first GPU, else the first device\n"
    "  -h, --help        show this help\n"
    "\n"
    "Positions: query i and key j sit at q_start + i and kv_start + j. The key aligned\n"
    "with query i is a_i = i + q_start - kv_start (top-left), plus n_kv - n_q with --mask\n"
    "causal-bottom-right, where n_q and n_kv are the batch entry's valid lengths (after\n"
    "--q-lens and --kv-lens). A key is visible only if every mask lets it through; the\n"
    "score of a visible key is softcap(scale*q.k) - alibi_slope*|a_i - j| + float mask.\n"
    "With --sinks, the softmax of a row of head h also counts exp(L_h), a key of value 0.\n"
    "\n"
    "Exit status: 0 success, 1 failure (a file, the library or --check), 2 usage error\n"
    "(including --kv-lens, --q-lens and --alibi lists that do not fit the inputs, and\n"
    "--cu-seqlens lists of different counts; offsets past the inputs are the library's\n"
    "error: 1).\n";
static const char run_usage_bwd[] =
    "\n"
    "Backward pass (training): --backward writes the gradients of a loss L with respect\n"
    "to Q, K and V instead of O, by clattn_attention_backward (FlashAttention-2's\n"
    "backward; PyTorch: q.grad, k.grad, v.grad after out.backward(grad_out), or\n"
    "grad_query, grad_key, grad_value of SDPA's backward; FlashAttention: dq, dk, dv):\n"
    "  --backward        compute the gradients (needs --do, --dq, --dk, --dv; refuses\n"
    "                    --out, --weights, --scores, --out-dtype and the cache outputs)\n"
    "  --do FILE         dO = dL/dO (PyTorch's grad_out, FlashAttention's dout), shaped\n"
    "                    like O: Q's shape with the last dimension d_v; a float dtype\n"
    "  --o FILE          the forward's O, as its --out wrote it (PyTorch's out), with\n"
    "  --lse FILE        the forward's LSE, as its --lse wrote it (PyTorch's logsumexp,\n"
    "                    FlashAttention's softmax_lse): float32 or float64 (as\n"
    "                    --lse-dtype wrote it), (b, h_q, n_q) in Q's rank less\n"
    "                    one. Both or neither: without them the forward is\n"
    "                    run first (O in float32, the LSE) with the same options\n"
    "  --dq FILE         dQ, in Q's shape and dtype\n"
    "  --dk FILE         dK, in K's shape and dtype (grouped-query heads: summed over\n"
    "                    each KV head's query heads)\n"
    "  --dv FILE         dV, in V's shape and dtype\n"
    "  --dsinks FILE     with --sinks: also write dL/dsinks, float32 of shape (h_q,)\n"
    "                    (0 for a head whose sink is -inf)\n"
    "  --check           compare dQ, dK, dV (and dL/dsinks with --sinks) with the\n"
    "                    float64 reference (clattn_reference_attention_backward): each\n"
    "                    element within 2e-4*s + 2e-3*|reference|, s = max(1, the largest\n"
    "                    |reference| of that gradient), plus one unit in the last place\n"
    "                    of a float16 or bfloat16 gradient\n"
    "Every option of the forward call applies to both passes: masks, --mask-file (no\n"
    "gradient into the mask), lengths, --window, --alibi, --softcap, --sinks, positions,\n"
    "--masked-rows, --dropout (the same mask, regenerated), grouped-query heads, dtypes;\n"
    "--algorithm to the forward run only. A row with no visible key gets dQ = 0. The\n"
    "backward pass does not take paged or int8 K/V, --k-new, --rotary or --cu-seqlens:\n"
    "the library refuses them, exit status 1 and its message\n"
    "(\"clattn_attention_backward failed: unsupported: ...\").\n";
/* parse_run_args joins them */
static char run_usage[sizeof run_usage_1 + sizeof run_usage_kv + sizeof run_usage_drop +
                      sizeof run_usage_2 + sizeof run_usage_bwd + 2048];

void free_run_args(run_args *a)
{
    free(a->kv_lens);
    free(a->q_lens);
    free(a->alibi);
    free(a->cu_q);
    free(a->cu_k);
}

typedef struct list_parse {
    const char *option, *text;
    int32_t *ints;
    float *floats;
} list_parse;

static int length_item(const char *item, size_t len, size_t index, void *arg)
{
    list_parse *l = arg;
    long long value;
    if (!parse_integer(item, len, &value)) {
        return usage_error(
            "clattn run", "%s '%s': '%.*s' is %s", l->option, l->text, (int)len, item,
            integer_out_of_range(item, len) ? "out of range (lengths are 0 to 2^31 - 1)"
                                            : "not an integer");
    }
    if (value < 0) {
        return usage_error("clattn run", "%s '%s': %lld is negative (lengths are 0 or more)",
                           l->option, l->text, value);
    }
    if (value > INT32_MAX) {
        return usage_error("clattn run", "%s '%s': %lld is too large (at most %d)", l->option,
                           l->text, value, INT32_MAX);
    }
    l->ints[index] = (int32_t)value;
    return 0;
}

static int slope_item(const char *item, size_t len, size_t index, void *arg)
{
    list_parse *l = arg;
    if (!parse_float(item, len, &l->floats[index])) {
        return usage_error("clattn run", "%s '%s': '%.*s' is not a finite float32 number",
                           l->option, l->text, (int)len, item);
    }
    return 0;
}

/* --kv-lens / --q-lens: a list of lengths, or the name of an int32 .npy file (read
 * later, once the batch size is known). Returns -1 to go on, or an exit status. */
static int parse_lengths(const char *option, const char *text, int32_t **list, size_t *count,
                         const char **file)
{
    size_t len = strlen(text);
    if (len > 4 && strcmp(text + len - 4, ".npy") == 0) {
        *file = text;
        return -1;
    }
    *count = count_items(text);
    *list = malloc(*count * sizeof **list);
    if (*list == NULL) {
        return cli_error("out of memory");
    }
    list_parse l = {option, text, *list, NULL};
    int rc = for_each_item(text, length_item, &l);
    return rc != 0 ? rc : -1;
}

static int window_item(const char *item, size_t len, size_t index, void *arg)
{
    int64_t *bounds = arg;
    long long value;
    if (index < 2 && integer_out_of_range(item, len)) {
        return item[0] == '-' ? 2 : 3; /* below -1, or above 2^63 - 1 */
    }
    if (index >= 2 || !parse_integer(item, len, &value)) {
        return 1;
    }
    if (value < -1) {
        return 2;
    }
    bounds[index] = (int64_t)value;
    return 0;
}

/* parse_command_line() takes at most 32 options: the KV-cache options and those of
 * --backward and dropout go through a second call. Splits argv into the arguments of
 * `kv` options (with their values) and the others, in order; `main` tells which of the
 * others take a value. */
static void split_kv_arguments(int argc, char **argv, const option *main, size_t n_main,
                               const option *kv, size_t n_kv, char **rest, int *n_rest,
                               char **kv_args, int *n_kv_args)
{
    *n_rest = *n_kv_args = 0;
    for (int i = 0; i < argc; ++i) {
        const option *o = cli_find_option(argv[i], kv, n_kv);
        char **to = o != NULL ? kv_args : rest;
        int *n = o != NULL ? n_kv_args : n_rest;
        if (o == NULL) {
            o = cli_find_option(argv[i], main, n_main);
        }
        to[(*n)++] = argv[i];
        if (o != NULL && o->value != NULL && strchr(argv[i], '=') == NULL && i + 1 < argc &&
            cli_find_option(argv[i + 1], kv, n_kv) == NULL &&
            cli_find_option(argv[i + 1], main, n_main) == NULL) {
            to[(*n)++] = argv[++i]; /* its value (an option next: none, which parsing says) */
        }
    }
}

/* --rotary D,I,B: the rotated columns, the pairing and the base. */
static int parse_rotary(const char *text, run_args *a)
{
    const char *c1 = strchr(text, ','), *c2 = c1 != NULL ? strchr(c1 + 1, ',') : NULL;
    long long dim, interleaved;
    if (c2 == NULL || strchr(c2 + 1, ',') != NULL ||
        !parse_integer(text, (size_t)(c1 - text), &dim) ||
        !parse_integer(c1 + 1, (size_t)(c2 - c1 - 1), &interleaved) ||
        !parse_float(c2 + 1, strlen(c2 + 1), &a->rotary_base)) {
        return usage_error("clattn run",
                           "--rotary '%s' is not DIM,INTERLEAVED,BASE (e.g. 0,0,10000)", text);
    }
    if (dim < 0 || dim % 2 != 0 || dim > INT32_MAX) {
        return usage_error("clattn run",
                           "--rotary '%s': the rotated columns %lld are not even and >= 0 "
                           "(0 = d_k)",
                           text, dim);
    }
    if (interleaved != 0 && interleaved != 1) {
        return usage_error("clattn run",
                           "--rotary '%s': INTERLEAVED is %lld, not 0 (GPT-NeoX) or 1 (GPT-J)",
                           text, interleaved);
    }
    if (a->rotary_base < 0.0f) {
        return usage_error("clattn run", "--rotary '%s': the base is negative (0 = 10000)", text);
    }
    a->rotary = 1;
    a->rotary_dim = dim;
    a->rotary_interleaved = (int)interleaved;
    return -1;
}

/* --dropout P, --dropout-seed N, --dropout-offset N: the desc's dropout fields, checked
 * as the library checks them (P 0 or within (0, 1), the offset below 2^32), so that a
 * bad value is a usage error. -1 to go on, or an exit status. */
static int parse_dropout(run_args *a)
{
    static const char command[] = "clattn run";
    const char *const names[2] = {"--dropout-seed", "--dropout-offset"};
    const char *const texts[2] = {a->dropout_seed_text, a->dropout_offset_text};
    uint64_t *const values[2] = {&a->dropout_seed, &a->dropout_offset};
    const uint64_t max[2] = {UINT64_MAX, UINT32_MAX};
    const char *const range[2] = {"0 .. 18446744073709551615 (2^64 - 1)",
                                  "0 .. 4294967295 (below 2^32: the generator's counter word)"};
    if (a->dropout_text == NULL) {
        for (int i = 0; i < 2; ++i) {
            if (texts[i] != NULL) {
                return usage_error(command, "%s needs --dropout P (the dropout probability)",
                                   names[i]);
            }
        }
        return -1;
    }
    if (!parse_float(a->dropout_text, strlen(a->dropout_text), &a->dropout_p) ||
        !(a->dropout_p >= 0.0f && a->dropout_p < 1.0f)) {
        return usage_error(command,
                           "--dropout '%s' is not a probability within [0, 1) in float32 (the "
                           "chance of dropping a weight; 0 = no dropout)",
                           a->dropout_text);
    }
    for (int i = 0; i < 2; ++i) {
        if (texts[i] != NULL && !parse_unsigned(texts[i], max[i], values[i])) {
            return usage_error(command, "%s '%s' is not an integer within %s", names[i], texts[i],
                               range[i]);
        }
    }
    return -1;
}

/* Checks the KV-cache options (--cache-seqlens, --block-table, --k-new, --v-new,
 * --k-cache-out, --v-cache-out, --rotary*, --cu-seqlens-*); -1 to go on, or an exit
 * status. */
static int check_kv_args(run_args *a)
{
    static const char command[] = "clattn run";
    a->kv_lens_option = "--kv-lens";
    if (a->cache_seqlens_text != NULL) {
        if (a->kv_lens_text != NULL) {
            return usage_error(command, "--cache-seqlens is another name for --kv-lens: give one");
        }
        a->kv_lens_text = a->cache_seqlens_text;
        a->kv_lens_option = "--cache-seqlens";
    }
    if ((a->k_new_file != NULL) != (a->v_new_file != NULL)) {
        return usage_error(command, "%s needs %s FILE (both or neither)",
                           a->k_new_file != NULL ? "--k-new" : "--v-new",
                           a->k_new_file != NULL ? "--v-new" : "--k-new");
    }
    if (a->k_new_file != NULL && a->kv_lens_text == NULL) {
        return usage_error(command, "--k-new needs --kv-lens (or --cache-seqlens): the cache's "
                                    "lengths before the append");
    }
    if (a->k_new_file == NULL && (a->k_cache_out != NULL || a->v_cache_out != NULL)) {
        return usage_error(command, "%s needs --k-new and --v-new (the rows to append)",
                           a->k_cache_out != NULL ? "--k-cache-out" : "--v-cache-out");
    }
    if (a->rotary_text != NULL) {
        if (a->k_new_file == NULL) {
            return usage_error(command, "--rotary needs --k-new and --v-new (it rotates Q and the "
                                        "appended keys)");
        }
        int rc = parse_rotary(a->rotary_text, a);
        if (rc >= 0) {
            return rc;
        }
    }
    if ((a->rotary_cos_file != NULL || a->rotary_sin_file != NULL) && a->rotary_text == NULL) {
        return usage_error(command, "%s needs --rotary",
                           a->rotary_cos_file != NULL ? "--rotary-cos" : "--rotary-sin");
    }
    if ((a->rotary_cos_file != NULL) != (a->rotary_sin_file != NULL)) {
        return usage_error(command, "%s needs %s FILE (both or neither)",
                           a->rotary_cos_file != NULL ? "--rotary-cos" : "--rotary-sin",
                           a->rotary_cos_file != NULL ? "--rotary-sin" : "--rotary-cos");
    }
    if ((a->cu_q_text != NULL) != (a->cu_k_text != NULL)) {
        return usage_error(command, "%s needs %s (both or neither)",
                           a->cu_q_text != NULL ? "--cu-seqlens-q" : "--cu-seqlens-k",
                           a->cu_q_text != NULL ? "--cu-seqlens-k" : "--cu-seqlens-q");
    }
    if (a->cu_q_text != NULL) {
        int rc = parse_lengths("--cu-seqlens-q", a->cu_q_text, &a->cu_q, &a->n_cu_q, &a->cu_q_file);
        if (rc < 0) {
            rc = parse_lengths("--cu-seqlens-k", a->cu_k_text, &a->cu_k, &a->n_cu_k, &a->cu_k_file);
        }
        if (rc >= 0) {
            return rc;
        }
        if (a->cu_q_file == NULL && a->cu_k_file == NULL && a->n_cu_q != a->n_cu_k) {
            return usage_error(command,
                               "--cu-seqlens-q has %zu offsets but --cu-seqlens-k %zu (b + 1 "
                               "each)",
                               a->n_cu_q, a->n_cu_k);
        }
    }
    return -1;
}

/* Parses and checks the command line; returns -1 to go on, or an exit status. */
int parse_run_args(int argc, char **argv, run_args *a)
{
    static const char command[] = "clattn run";
    static const char *const algorithms[] = {"auto", "unfused", "fused", NULL};
    static const char *const masked_rows[] = {"zero", "nan", NULL}; /* CLATTN_MASKED_ROWS_* */
    static const char *const dtypes[] = {"auto", "bf16", NULL};
    static const char *const out_dtypes[] = {"f32", "f16", "bf16", NULL}; /* clattn_dtype */
    const option options[] = {
        {"--q", &a->q, NULL},
        {"--k", &a->k, NULL},
        {"--v", &a->v, NULL},
        {"--out", &a->out, NULL},
        {"--scale", &a->scale_text, NULL},
        {"--mask", &a->mask_text, NULL},
        {"--mask-file", &a->mask_file, NULL},
        {"--kv-lens", &a->kv_lens_text, NULL},
        {"--q-lens", &a->q_lens_text, NULL},
        {"--window", &a->window_text, NULL},
        {"--alibi", &a->alibi_text, NULL},
        {"--sinks", &a->sinks_file, NULL},
        {"--k-scale", &a->k_scale_file, NULL},
        {"--v-scale", &a->v_scale_file, NULL},
        {"--softcap", &a->softcap_text, NULL},
        {"--q-start", &a->q_start_text, NULL},
        {"--kv-start", &a->kv_start_text, NULL},
        {"--masked-rows", &a->masked_rows_text, NULL},
        {"--algorithm", &a->algorithm_text, NULL},
        {"--weights", &a->weights, NULL},
        {"--weights-head-mean", NULL, &a->head_mean},
        {"--batch-invariant", NULL, &a->batch_invariant},
        {"--lse", &a->lse, NULL},
        {"--scores", &a->scores, NULL},
        {"--scores-stage", &a->scores_stage_text, NULL},
        {"--dtype", &a->dtype_text, NULL},
        {"--out-dtype", &a->out_dtype_text, NULL},
        {"--lse-dtype", &a->lse_dtype_text, NULL},
        {"--check", NULL, &a->check},
        {"--device", &a->device, NULL},
    };
    const option kv_options[] = {
        {"--layout", &a->layout_text, NULL},
        {"--cache-seqlens", &a->cache_seqlens_text, NULL},
        {"--block-table", &a->block_table_file, NULL},
        {"--k-new", &a->k_new_file, NULL},
        {"--v-new", &a->v_new_file, NULL},
        {"--k-cache-out", &a->k_cache_out, NULL},
        {"--v-cache-out", &a->v_cache_out, NULL},
        {"--rotary", &a->rotary_text, NULL},
        {"--rotary-cos", &a->rotary_cos_file, NULL},
        {"--rotary-sin", &a->rotary_sin_file, NULL},
        {"--cu-seqlens-q", &a->cu_q_text, NULL},
        {"--cu-seqlens-k", &a->cu_k_text, NULL},
        {"--backward", NULL, &a->backward},
        {"--do", &a->d_out, NULL},
        {"--o", &a->o_in, NULL},
        {"--dq", &a->dq, NULL},
        {"--dk", &a->dk, NULL},
        {"--dv", &a->dv, NULL},
        {"--dsinks", &a->dsinks, NULL},
        {"--dropout", &a->dropout_text, NULL},
        {"--dropout-seed", &a->dropout_seed_text, NULL},
        {"--dropout-offset", &a->dropout_offset_text, NULL},
    };
    snprintf(run_usage, sizeof run_usage, "%s%s%s%s%s%s", run_usage_1, run_usage_kv, run_usage_drop,
             run_usage_mods, run_usage_2, run_usage_bwd);
    int rc = run_take_mod_args(&argc, argv, a); /* tools/run_mods.c */
    if (rc >= 0) {
        return rc;
    }
    a->out_dtype = -1;
    a->lse_dtype = CLATTN_FLOAT32;
    char **rest = malloc((size_t)(argc + 1) * 2 * sizeof *rest);
    if (rest == NULL) {
        return cli_error("out of memory");
    }
    char **kv_args = rest + argc + 1;
    int n_rest, n_kv_args;
    split_kv_arguments(argc, argv, options, sizeof options / sizeof options[0], kv_options,
                       sizeof kv_options / sizeof kv_options[0], rest, &n_rest, kv_args,
                       &n_kv_args);
    rc = parse_command_line(command, run_usage, n_rest, rest, options,
                            sizeof options / sizeof options[0]);
    if (rc < 0) {
        rc = parse_command_line(command, run_usage, n_kv_args, kv_args, kv_options,
                                sizeof kv_options / sizeof kv_options[0]);
    }
    free(rest);
    if (rc >= 0) {
        return rc;
    }
    const char *const required[] = {"--q", "--k", "--v"};
    const char *const values[] = {a->q, a->k, a->v};
    for (int i = 0; i < 3; ++i) {
        if (values[i] == NULL || values[i][0] == '\0') {
            return usage_error(command, "missing %s FILE", required[i]);
        }
    }
    rc = check_backward_args(a); /* run_backward.c; --backward writes no O */
    if (rc >= 0) {
        return rc;
    }
    if (!a->backward && (a->out == NULL || a->out[0] == '\0')) {
        return usage_error(command, "missing --out FILE");
    }
    if (a->scale_text != NULL) {
        char *end;
        errno = 0;
        double scale = strtod(a->scale_text, &end);
        if (end == a->scale_text || *end != '\0' || !isfinite(scale) || fabs(scale) > FLT_MAX) {
            return usage_error(command, "--scale '%s' is not a finite float32 number",
                               a->scale_text);
        }
        a->scale = (float)scale;
        if (a->scale == 0.0f) {
            return usage_error(command,
                               "--scale '%s' is zero in float32 (the library reads 0 as the "
                               "default 1/sqrt(d_k)); omit --scale for that",
                               a->scale_text);
        }
    }
    int mask = a->mask_text != NULL ? cli_lookup(a->mask_text, cli_mask_names) : 0;
    if (mask < 0) {
        return usage_error(command,
                           "unknown --mask '%s' (none, causal, causal-bottom-right, no-self)",
                           a->mask_text);
    }
    int algorithm = a->algorithm_text != NULL ? cli_lookup(a->algorithm_text, algorithms) : 0;
    if (algorithm < 0) {
        return usage_error(command, "unknown --algorithm '%s' (auto, fused, unfused)",
                           a->algorithm_text);
    }
    a->mask = (clattn_mask)mask;
    a->algorithm = (clattn_algorithm)algorithm;
    int rows = a->masked_rows_text != NULL ? cli_lookup(a->masked_rows_text, masked_rows) : 0;
    if (rows < 0) {
        return usage_error(command, "unknown --masked-rows '%s' (zero, nan)", a->masked_rows_text);
    }
    a->masked_rows = rows;
    int dtype = a->dtype_text != NULL ? cli_lookup(a->dtype_text, dtypes) : 0;
    if (dtype < 0) {
        return usage_error(command,
                           "unknown --dtype '%s' (auto, bf16: read '<u2' inputs as bfloat16)",
                           a->dtype_text);
    }
    a->bf16 = dtype == 1;
    const int layout = a->layout_text != NULL ? layout_parse(a->layout_text) : 0;
    if (layout < 0) {
        return usage_error(command, "unknown --layout '%s' (" LAYOUT_CHOICES ")", a->layout_text);
    }
    a->bshd = layout == 1;
    if (a->out_dtype_text != NULL) {
        a->out_dtype = cli_lookup(a->out_dtype_text, out_dtypes);
        if (a->out_dtype < 0) {
            return usage_error(command, "unknown --out-dtype '%s' (f32, f16, bf16)",
                               a->out_dtype_text);
        }
    }
    if (a->lse_dtype_text != NULL) {
        static const char *const lse_dtypes[] = {"f32", "f64", NULL};
        const int t = cli_lookup(a->lse_dtype_text, lse_dtypes);
        if (t < 0) {
            return usage_error(command, "unknown --lse-dtype '%s' (f32, f64)", a->lse_dtype_text);
        }
        if (a->backward) {
            return usage_error(command, "--lse-dtype is the forward pass's: --backward reads "
                                        "--lse in its file's dtype ('<f4' or '<f8')");
        }
        if (a->lse == NULL) {
            return usage_error(command, "--lse-dtype needs --lse FILE");
        }
        a->lse_dtype = t == 1 ? CLATTN_FLOAT64 : CLATTN_FLOAT32;
    }
    if (a->head_mean && a->weights == NULL) {
        return usage_error(command, "--weights-head-mean needs --weights FILE");
    }
    static const char *const stages[] = {"raw", "softcap", "masked", NULL};
    a->scores_stage = RUN_SCORES_MASKED;
    if (a->scores_stage_text != NULL) {
        a->scores_stage = cli_lookup(a->scores_stage_text, stages);
        if (a->scores_stage < 0) {
            return usage_error(command, "unknown --scores-stage '%s' (raw, softcap, masked)",
                               a->scores_stage_text);
        }
        if (a->scores == NULL) {
            return usage_error(command, "--scores-stage needs --scores FILE");
        }
    }
    if (a->softcap_text != NULL &&
        (!parse_float(a->softcap_text, strlen(a->softcap_text), &a->softcap) ||
         !(a->softcap > 0.0f))) {
        return usage_error(command,
                           "--softcap '%s' is not a finite float32 number above 0 (omit it for "
                           "no softcap)",
                           a->softcap_text);
    }
    if (a->window_text != NULL) {
        int64_t bounds[2] = {0, 0};
        int bad = count_items(a->window_text) != 2
                      ? 1
                      : for_each_item(a->window_text, window_item, bounds);
        if (bad == 2) {
            return usage_error(command,
                               "--window '%s': a bound below -1 (-1 means unbounded on that "
                               "side)",
                               a->window_text);
        }
        if (bad == 3) {
            return usage_error(command,
                               "--window '%s': a bound beyond 2^63 - 1 (-1 means unbounded on "
                               "that side)",
                               a->window_text);
        }
        if (bad != 0) {
            return usage_error(command,
                               "--window '%s' is not L,R (two integers >= -1, -1 = unbounded)",
                               a->window_text);
        }
        a->window = 1;
        a->window_left = bounds[0];
        a->window_right = bounds[1];
    }
    const char *const start_names[] = {"--q-start", "--kv-start"};
    const char *const start_texts[] = {a->q_start_text, a->kv_start_text};
    int64_t *const starts[] = {&a->q_start, &a->kv_start};
    for (int i = 0; i < 2; ++i) {
        long long value;
        if (start_texts[i] == NULL) {
            continue;
        }
        if (!parse_integer(start_texts[i], strlen(start_texts[i]), &value) ||
            value <= -(1ll << 53) || value >= 1ll << 53) {
            return usage_error(command, "%s '%s' is not an integer within +-(2^53 - 1)",
                               start_names[i], start_texts[i]);
        }
        *starts[i] = (int64_t)value;
    }
    rc = check_kv_args(a);
    if (rc < 0) {
        rc = parse_dropout(a);
    }
    if (rc >= 0) {
        return rc;
    }
    if (a->kv_lens_text != NULL) {
        rc = parse_lengths(a->kv_lens_option, a->kv_lens_text, &a->kv_lens, &a->n_kv_lens,
                           &a->kv_lens_file);
        if (rc >= 0) {
            return rc;
        }
    }
    if (a->q_lens_text != NULL) {
        rc = parse_lengths("--q-lens", a->q_lens_text, &a->q_lens, &a->n_q_lens, &a->q_lens_file);
        if (rc >= 0) {
            return rc;
        }
    }
    if (a->alibi_text != NULL) {
        a->n_alibi = count_items(a->alibi_text);
        a->alibi = malloc(a->n_alibi * sizeof *a->alibi);
        if (a->alibi == NULL) {
            return cli_error("out of memory");
        }
        list_parse l = {"--alibi", a->alibi_text, NULL, a->alibi};
        rc = for_each_item(a->alibi_text, slope_item, &l);
        if (rc != 0) {
            return rc;
        }
    }
    return -1;
}
