/* `clattn run --score-mod FILE.cl --mask-mod FILE.cl --mod-buffer NAME=FILE.npy`: the
 * snippets of clattn_mods.h from files. The options are taken out of the command line
 * before the other options are parsed (--mod-buffer repeats: one per user buffer, in the
 * order the snippets' parameters take them); the sources and arrays are read with the
 * other inputs and point into clattn_mods in the run's desc. */
#define _POSIX_C_SOURCE 200809L
#include "cli.h"
#include "run_args.h"

#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

const char run_usage_mods[] =
    "  --score-mod FILE.cl  OpenCL C defining float clattn_score_mod(float score, int b,\n"
    "                    int h, long q_pos, long k_pos, <buffers>), applied to every\n"
    "                    visible score after softcap, ALiBi and --mask-file (clattn_mods.h;\n"
    "                    q_pos = q_start + i, k_pos = kv_start + j)\n"
    "  --mask-mod FILE.cl  OpenCL C defining bool clattn_mask_mod(int b, int h, long q_pos,\n"
    "                    long k_pos, <buffers>): false masks the key\n"
    "  --mod-buffer NAME=FILE.npy  a read-only int32 or float32 array (any shape, read\n"
    "                    flat) passed to the snippets after k_pos as __global const int *\n"
    "                    or float *, in the order given (up to 8; NAME is for messages).\n"
    "                    Compile errors name FILE.cl's own lines. Not with --check (the\n"
    "                    CPU reference cannot run OpenCL C) or --cu-seqlens\n"
    "  --block-mask      with --mask-mod: evaluate it once per 16x16 block first\n"
    "                    (clattn_block_mask_create) so the fused kernels skip the tiles it\n"
    "                    masks entirely (the same result, faster for causal or document\n"
    "                    masks)\n";

/* The snippet options, matched as every option is (cli_find_option: "--name" or
 * "--name=VALUE"); only their names are used here. */
enum { MOD_SCORE, MOD_MASK, MOD_BUFFER, MOD_BLOCK_MASK, N_MOD_OPTIONS };
static const option mod_options[N_MOD_OPTIONS] = {
    {"--score-mod", NULL, NULL},
    {"--mask-mod", NULL, NULL},
    {"--mod-buffer", NULL, NULL},
    {"--block-mask", NULL, NULL},
};

int run_take_mod_args(int *argc, char **argv, run_args *a)
{
    int out = 0;
    for (int i = 0; i < *argc; i++) {
        const option *o = cli_find_option(argv[i], mod_options, N_MOD_OPTIONS);
        if (o == NULL) {
            argv[out++] = argv[i];
            continue;
        }
        const char *eq = strchr(argv[i], '=');
        const char *v = eq != NULL ? eq + 1 : NULL;
        if (o == &mod_options[MOD_BLOCK_MASK]) {
            if (v != NULL) {
                return usage_error("clattn run", "option '--block-mask' takes no value");
            }
            if (a->block_mask) {
                return usage_error("clattn run", "option '--block-mask' is given more than once");
            }
            a->block_mask = 1;
            continue;
        }
        const bool score = o == &mod_options[MOD_SCORE], mask = o == &mod_options[MOD_MASK];
        const char *name = o->name;
        if (v == NULL) { /* "--name VALUE": the next argument, unless it is an option */
            if (i + 1 >= *argc) {
                return usage_error("clattn run", "option '%s' needs a value", name);
            }
            v = argv[++i];
            if (strncmp(v, "--", 2) == 0) {
                return usage_error("clattn run",
                                   "option '%s' needs a value before the next option (%s=VALUE "
                                   "passes a value that looks like an option)",
                                   name, name);
            }
        }
        if (v[0] == '\0') {
            return usage_error("clattn run", "option '%s' needs a non-empty value", name);
        }
        if (score || mask) {
            const char **slot = score ? &a->score_mod_file : &a->mask_mod_file;
            if (*slot != NULL) {
                return usage_error("clattn run", "option '%s' is given more than once", name);
            }
            *slot = v;
            continue;
        }
        const char *sep = strchr(v, '=');
        if (sep == NULL || sep == v || sep[1] == '\0') {
            return usage_error("clattn run", "--mod-buffer '%s' is not NAME=FILE.npy", v);
        }
        if (a->n_mod_bufs == CLATTN_RUN_MAX_MOD_BUFFERS) {
            return usage_error("clattn run", "more than %d --mod-buffer options",
                               CLATTN_RUN_MAX_MOD_BUFFERS);
        }
        a->mod_buf_args[a->n_mod_bufs++] = v;
    }
    *argc = out;
    argv[out] = NULL;
    if (a->n_mod_bufs > 0 && a->score_mod_file == NULL && a->mask_mod_file == NULL) {
        return usage_error("clattn run", "--mod-buffer needs --score-mod or --mask-mod");
    }
    if (a->block_mask && a->mask_mod_file == NULL) {
        return usage_error("clattn run", "--block-mask needs --mask-mod");
    }
    return -1;
}

/* A snippet file's text (NUL-terminated, malloc'd), or NULL after a message. */
static char *read_text(const char *option, const char *path)
{
    struct stat st;
    errno = 0;
    if (stat(path, &st) != 0 || !S_ISREG(st.st_mode)) {
        cli_error("%s %s: %s", option, path, errno ? strerror(errno) : "not a regular file");
        return NULL;
    }
    if (st.st_size == 0 || st.st_size > (1 << 20)) {
        cli_error("%s %s: %lld bytes (a snippet is 1 byte to 1 MiB)", option, path,
                  (long long)st.st_size);
        return NULL;
    }
    FILE *f = fopen(path, "rb");
    char *text = f ? malloc((size_t)st.st_size + 1) : NULL;
    const size_t n = text ? fread(text, 1, (size_t)st.st_size, f) : 0;
    if (f) {
        fclose(f);
    }
    if (text == NULL || n != (size_t)st.st_size || memchr(text, '\0', n) != NULL) {
        cli_error("%s %s: cannot read it as text", option, path);
        free(text);
        return NULL;
    }
    text[n] = '\0';
    return text;
}

int run_read_mods(const run_args *a, run_inputs *in)
{
    if (a->check && (a->score_mod_file || a->mask_mod_file)) {
        return usage_error("clattn run", "--check: the CPU reference cannot run the OpenCL C of "
                                         "--score-mod / --mask-mod (compare --algorithm fused "
                                         "with unfused instead)");
    }
    if (a->score_mod_file && !(in->score_mod = read_text("--score-mod", a->score_mod_file))) {
        return EXIT_FAILURE;
    }
    if (a->mask_mod_file && !(in->mask_mod = read_text("--mask-mod", a->mask_mod_file))) {
        return EXIT_FAILURE;
    }
    for (int i = 0; i < a->n_mod_bufs; i++) {
        const char *path = strchr(a->mod_buf_args[i], '=') + 1;
        char message[512];
        if (npy_read(path, NPY_ACCEPT(NPY_I32) | NPY_ACCEPT(NPY_F32), 1, NULL, &in->mod_bufs[i],
                     message, sizeof message) != 0) {
            return cli_error("--mod-buffer %.*s: %s",
                             (int)(strchr(a->mod_buf_args[i], '=') - a->mod_buf_args[i]),
                             a->mod_buf_args[i], message);
        }
    }
    return -1;
}

void run_mods_desc(const run_args *a, const run_inputs *in, run_desc *rd)
{
    if (in->score_mod == NULL && in->mask_mod == NULL) {
        return;
    }
    for (int i = 0; i < a->n_mod_bufs; i++) {
        const npy_data *d = &in->mod_bufs[i];
        rd->mod_bufs[i] = (clattn_mod_buffer){d->dtype == NPY_I32 ? CLATTN_INT32 : CLATTN_FLOAT32,
                                              (int64_t)d->count, d->data, NULL};
    }
    rd->mods = (clattn_mods){.score_mod = in->score_mod,
                             .mask_mod = in->mask_mod,
                             .buffers = rd->mod_bufs,
                             .n_buffers = a->n_mod_bufs};
    rd->desc.mods = &rd->mods;
}

void run_free_mods(run_inputs *in)
{
    free(in->score_mod);
    free(in->mask_mod);
    for (int i = 0; i < CLATTN_RUN_MAX_MOD_BUFFERS; i++) {
        npy_data_free(&in->mod_bufs[i]);
    }
}

clattn_status run_block_mask(const run_args *a, const run_inputs *in, clattn_context *ctx,
                             run_desc *rd)
{
    if (!a->block_mask) {
        return CLATTN_SUCCESS;
    }
    clattn_block_mask *bm = NULL;
    const clattn_status st =
        clattn_block_mask_create(ctx, &rd->desc, in->qs[0], in->qs[1], in->qs[2], in->n_kv, &bm);
    rd->mods.block_mask = bm;
    return st;
}
