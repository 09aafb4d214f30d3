/* The command line of `clattn run`, parsed and checked; see tools/run_args.c. */
#ifndef CLATTN_TOOLS_RUN_ARGS_H
#define CLATTN_TOOLS_RUN_ARGS_H

#include "clattn.h"
#include "layout.h" /* shape4, host_view: the --layout rule */
#include "npy.h"

#include <stddef.h>
#include <stdint.h>

/* --scores-stage: which scores --scores writes (ONNX Attention's modes 0, 1, 2) */
enum { RUN_SCORES_RAW, RUN_SCORES_SOFTCAP, RUN_SCORES_MASKED };

enum { CLATTN_RUN_MAX_MOD_BUFFERS = 8 };

typedef struct run_args {
    const char *q, *k, *v, *out, *weights, *lse, *scores, *mask_file, *device;
    const char *scores_stage_text;
    int scores_stage; /* RUN_SCORES_* */
    const char *scale_text, *mask_text, *algorithm_text, *kv_lens_text, *q_lens_text;
    const char *window_text, *alibi_text, *softcap_text, *masked_rows_text;
    const char *q_start_text, *kv_start_text, *dtype_text, *out_dtype_text, *lse_dtype_text;
    int check, head_mean, batch_invariant;
    float scale, softcap;
    clattn_mask mask;
    clattn_algorithm algorithm;
    int masked_rows;
    int window;
    int64_t window_left, window_right, q_start, kv_start;
    int bf16; /* --dtype bf16: '<u2' inputs are bfloat16 */
    /* --layout: bshd 1 where Q, K, V, O and their kin are (b, n, h, d) (FlashAttention's
     * order), 0 for (b, h, n, d); layout.c layout_dim is the rule */
    const char *layout_text;
    int bshd;
    int out_dtype; /* a clattn_dtype, or -1: Q's */
    int lse_dtype; /* a clattn_dtype: the forward's --lse, float32 (0) or float64 */
    /* --kv-lens / --q-lens given as lists (malloc'd), or as int32 .npy files */
    int32_t *kv_lens, *q_lens;
    size_t n_kv_lens, n_q_lens;
    const char *kv_lens_file, *q_lens_file;
    float *alibi; /* malloc'd */
    size_t n_alibi;
    const char *sinks_file; /* --sinks: a float32 .npy of h_q sink logits */
    /* --k-scale / --v-scale: float32 .npy files of an int8 K's / V's scales */
    const char *k_scale_file, *v_scale_file;
    /* --cache-seqlens: the text of --kv-lens under its other name; kv_lens_option is
     * the name given ("--kv-lens" or "--cache-seqlens") */
    const char *cache_seqlens_text, *kv_lens_option;
    /* --block-table: an int32 .npy [b, max_pages]; K and V are then page pools */
    const char *block_table_file;
    /* --k-new / --v-new: rows appended into the caches; --k-cache-out / --v-cache-out:
     * the caches after the append */
    const char *k_new_file, *v_new_file, *k_cache_out, *v_cache_out;
    /* --rotary DIM,INTERLEAVED,BASE and its optional float32 tables */
    const char *rotary_text, *rotary_cos_file, *rotary_sin_file;
    int rotary;
    int64_t rotary_dim;
    int rotary_interleaved;
    float rotary_base;
    /* --cu-seqlens-q / --cu-seqlens-k given as lists (malloc'd), or as int32 .npy files */
    const char *cu_q_text, *cu_k_text, *cu_q_file, *cu_k_file;
    int32_t *cu_q, *cu_k;
    size_t n_cu_q, n_cu_k;
    /* --backward (tools/run_backward.c): the gradients instead of O. --do: dO (input);
     * --o: the forward's O (input; with --lse, which then names the forward's LSE, an
     * input too); --dq, --dk, --dv, --dsinks: the gradients (outputs) */
    int backward;
    const char *d_out, *o_in, *dq, *dk, *dv, *dsinks;
    /* --dropout P, --dropout-seed N, --dropout-offset N: the desc's dropout_p,
     * dropout_seed and dropout_offset (both passes of --backward) */
    const char *dropout_text, *dropout_seed_text, *dropout_offset_text;
    float dropout_p;
    uint64_t dropout_seed, dropout_offset;
    /* --score-mod / --mask-mod FILE.cl and --mod-buffer NAME=FILE.npy (tools/run_mods.c) */
    const char *score_mod_file, *mask_mod_file;
    const char *mod_buf_args[CLATTN_RUN_MAX_MOD_BUFFERS]; /* "NAME=FILE.npy" */
    int n_mod_bufs;
    int block_mask; /* --block-mask: build the mask_mod's block mask first */
} run_args;

/* Parses and checks the command line (argv after "run") into `a`, which starts zeroed;
 * -h/--help prints the help text. Returns -1 to go on, or an exit status. Either way,
 * free_run_args() releases what it allocated. */
int parse_run_args(int argc, char **argv, run_args *a);

void free_run_args(run_args *a);

/* ---- tools/run.c and tools/run_kv.c ---- */
/* The inputs of a run after reading: Q, K, V and the optional mask, lengths, sinks and
 * the scales of an int8 K and V. */
typedef struct run_inputs {
    npy_data q, k, v, mask, kv_lens, q_lens, sinks, k_scale, v_scale;
    /* --block-table, --k-new, --v-new, --rotary-cos, --rotary-sin, --cu-seqlens-q/k */
    npy_data block_table, k_new, v_new, rotary_cos, rotary_sin, cu_q, cu_k;
    clattn_dtype dq, dk, dv, dk_new, dv_new;
    int64_t qs[4], ks[4], vs[4]; /* 4-D shapes */
    int64_t n_kv;                /* keys per batch entry: ks[2], or max_pages*page_size */
    char *score_mod, *mask_mod;  /* the snippets' sources (malloc'd), or NULL */
    npy_data mod_bufs[CLATTN_RUN_MAX_MOD_BUFFERS];
} run_inputs;

/* The .npy dtype a library dtype is written as (bfloat16 as uint16 words). */
npy_dtype npy_of(clattn_dtype dtype);
/* Element count of a shape; *ok becomes 0 if it (times esize bytes) overflows size_t. */
size_t count_of(const int64_t *shape, int ndim, size_t esize, int *ok);
/* The library dtype of input `path`, read as `d`; 0 if it has none (after a message). */
int input_dtype(const run_args *a, const char *path, const npy_data *d, clattn_dtype *out);

/* The desc of a run's options and inputs, without outputs (weights, LSE), and the
 * views and structures it points to: rd->desc points into rd and into `in`, so rd is
 * used where it was made, never copied (a copy of rd->desc is fine). */
typedef struct run_desc {
    clattn_attention_desc desc;
    clattn_tensor mask, k_scale, v_scale, k_new, v_new;
    clattn_paged_kv paged;
    clattn_rotary rotary;
    clattn_varlen varlen;
    clattn_mods mods;
    clattn_mod_buffer mod_bufs[CLATTN_RUN_MAX_MOD_BUFFERS];
} run_desc;
/* Fills rd from the options and the inputs read, checking the inputs against each other
 * (mask shape, block table, new rows, rotary tables, cu_seqlens, lengths, ALiBi slopes,
 * sinks). Returns -1 to go on, or an exit status. */
int run_make_desc(const run_args *a, const run_inputs *in, run_desc *rd);

/* ---- tools/run_mods.c: --score-mod, --mask-mod, --mod-buffer ---- */
extern const char run_usage_mods[];
/* Takes the options out of argv (argc updated); -1 to go on, or an exit status. */
int run_take_mod_args(int *argc, char **argv, run_args *a);
/* Reads the snippets and buffers into `in`; -1 to go on, or an exit status. */
int run_read_mods(const run_args *a, run_inputs *in);
/* Points rd->desc.mods at them (nothing without snippets). */
void run_mods_desc(const run_args *a, const run_inputs *in, run_desc *rd);
void run_free_mods(run_inputs *in);
/* --block-mask: rd->mods.block_mask built on ctx (released by the caller); a status. */
clattn_status run_block_mask(const run_args *a, const run_inputs *in, clattn_context *ctx,
                             run_desc *rd);

/* "(a, b, …)" of an array's shape into buf. */
const char *shape_text(const npy_data *d, char *buf, size_t size);
/* The KV-cache inputs' checks (run_kv.c): -1 to go on, or an exit status. */
int run_check_sinks(const char *path, const npy_data *sinks, int64_t h_q);
int run_check_scale(const char *option, const char *path, const npy_data *scale,
                    const char *kv_path, const npy_data *kv, int paged, int bshd);
int run_check_block_table(const char *path, const npy_data *table, int64_t batch);
int run_check_new_rows(const run_args *a, const run_inputs *in);
int run_check_rotary_tables(const run_args *a, const run_inputs *in);
int run_check_cu_seqlens(const run_args *a, const run_inputs *in, const int32_t **cu_q,
                         const int32_t **cu_k, size_t *count);

/* ---- tools/run_backward.c ---- */
/* The checks of --backward and its options after parsing: -1 to go on, or an exit
 * status. */
int check_backward_args(const run_args *a);
/* `clattn run --backward` after reading Q, K, V and the other inputs of the forward call
 * into `in`: reads dO (and O, LSE), computes and writes the gradients. An exit status. */
int run_backward(const run_args *a, run_inputs *in);

#endif
