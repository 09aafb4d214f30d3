/* Score and mask snippets (clattn_mods.h): their checks, the source the host splices in
 * before common.cl (the snippets and the macros that give common.cl's score_terms16 their
 * user buffers), and those buffers on the device. A program built with snippets names
 * them in its options by the hash of that source (-DMOD_ID=…), so the context's program
 * table and the binary cache keep one program per snippet text; the context keeps each
 * source for program.c (clattn_mods_source). */
#include "internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct clattn_mod_source {
    uint64_t id;
    char *text;
    clattn_mod_source *next;
};

clattn_status clattn_mods_check(clattn_context *ctx, const clattn_attention_desc *desc)
{
    const clattn_mods *m = desc->mods;
    if (!m)
        return CLATTN_SUCCESS;
    if (!m->score_mod && !m->mask_mod)
        return clattn_fail(ctx, CLATTN_ERROR_INVALID_ARGUMENT,
                           "mods: neither score_mod nor mask_mod is set");
    if ((m->score_mod && !*m->score_mod) || (m->mask_mod && !*m->mask_mod))
        return clattn_fail(ctx, CLATTN_ERROR_INVALID_ARGUMENT,
                           "mods: %s is an empty string (NULL for none)",
                           m->score_mod && !*m->score_mod ? "score_mod" : "mask_mod");
    if (m->n_buffers < 0 || m->n_buffers > CLATTN_MAX_MOD_BUFFERS ||
        (m->n_buffers > 0 && !m->buffers))
        return clattn_fail(ctx, CLATTN_ERROR_INVALID_ARGUMENT,
                           "mods: n_buffers %d must be 0 … %d, with buffers non-NULL", m->n_buffers,
                           CLATTN_MAX_MOD_BUFFERS);
    for (int i = 0; i < m->n_buffers; i++) {
        const clattn_mod_buffer *u = &m->buffers[i];
        char name[32];
        snprintf(name, sizeof name, "mods.buffers[%d]", i);
        if (u->dtype != CLATTN_INT32 && u->dtype != CLATTN_FLOAT32)
            return clattn_fail(ctx, CLATTN_ERROR_INVALID_ARGUMENT,
                               "%s: dtype %d; it must be CLATTN_INT32 or CLATTN_FLOAT32", name,
                               (int)u->dtype);
        if (u->count < 1 || u->count > ((int64_t)1 << 40))
            return clattn_fail(ctx, CLATTN_ERROR_INVALID_ARGUMENT,
                               "%s: count %lld must be 1 … 2^40", name, (long long)u->count);
        if (!u->host == !u->buffer)
            return clattn_fail(ctx, CLATTN_ERROR_INVALID_ARGUMENT,
                               "%s: exactly one of host and buffer must be set", name);
        if (u->buffer) {
            clattn_view v = clattn_view_packed(1, 1, 1, u->count);
            v.buffer = u->buffer;
            v.dtype = u->dtype;
            v.esize = 4;
            v.span = u->count;
            clattn_status st = clattn_view_check_buffer(ctx, name, &v);
            if (st != CLATTN_SUCCESS)
                return st;
        }
    }
    return CLATTN_SUCCESS;
}

clattn_status clattn_mods_check_twins(const clattn_attention_desc *desc)
{
    const clattn_mods *m = desc ? desc->mods : NULL;
    if (!m)
        return CLATTN_SUCCESS;
    const char *no = m->score_mod && !m->score_mod_host ? "score_mod without score_mod_host"
                     : m->mask_mod && !m->mask_mod_host ? "mask_mod without mask_mod_host"
                                                        : NULL;
    for (int i = 0; !no && m->buffers && i < m->n_buffers && i < CLATTN_MAX_MOD_BUFFERS; i++)
        if (!m->buffers[i].host)
            no = "a user buffer without a host array";
    if (no)
        return clattn_fail(NULL, CLATTN_ERROR_UNSUPPORTED,
                           "mods: %s (the reference runs the snippets' C twins on host arrays)",
                           no);
    return CLATTN_SUCCESS;
}

static uint64_t fnv1a(const char *s)
{
    uint64_t h = 0xcbf29ce484222325ULL;
    for (; *s; s++) {
        h ^= (unsigned char)*s;
        h *= 0x100000001b3ULL;
    }
    return h;
}

/* The source spliced in before common.cl: the switches, the buffers' parameters and
 * arguments, then each snippet from its own line 1 (the compiler's log names
 * score_mod:LINE and mask_mod:LINE), then common.cl's own numbering. */
static char *prelude(const clattn_mods *m)
{
    size_t len = 1024 + (size_t)m->n_buffers * 96;
    len += m->score_mod ? strlen(m->score_mod) : 0;
    len += m->mask_mod ? strlen(m->mask_mod) : 0;
    char *s = malloc(len);
    if (!s)
        return NULL;
    size_t at =
        (size_t)snprintf(s, len, "#define MODS 1\n#define MOD_SCORE %d\n#define MOD_MASK %d\n",
                         m->score_mod != NULL, m->mask_mod != NULL);
    at += (size_t)snprintf(s + at, len - at, "#define MOD_BUF_PARAMS");
    for (int i = 0; i < m->n_buffers; i++)
        at += (size_t)snprintf(s + at, len - at, " , __global const %s *clattn_buf%d",
                               m->buffers[i].dtype == CLATTN_INT32 ? "int" : "float", i);
    at += (size_t)snprintf(s + at, len - at, "\n#define MOD_BUF_ARGS");
    for (int i = 0; i < m->n_buffers; i++)
        at += (size_t)snprintf(s + at, len - at, " , clattn_buf%d", i);
    at += (size_t)snprintf(s + at, len - at, "\n");
    if (m->score_mod)
        at += (size_t)snprintf(s + at, len - at, "#line 1 \"score_mod\"\n%s\n", m->score_mod);
    if (m->mask_mod)
        at += (size_t)snprintf(s + at, len - at, "#line 1 \"mask_mod\"\n%s\n", m->mask_mod);
    snprintf(s + at, len - at, "#line 1 \"common.cl\"\n");
    return s;
}

clattn_status clattn_mods_options(clattn_context *ctx, const clattn_attention_desc *desc, char *out,
                                  size_t len)
{
    out[0] = '\0';
    if (!desc || !desc->mods)
        return CLATTN_SUCCESS;
    char *text = prelude(desc->mods);
    if (!text)
        return clattn_fail(ctx, CLATTN_ERROR_OUT_OF_HOST_MEMORY, "mods: the snippets' source");
    const uint64_t id = fnv1a(text);
    snprintf(out, len, " -DMOD_ID=%016llx", (unsigned long long)id);
    for (clattn_mod_source *e = ctx->mod_sources; e; e = e->next)
        if (e->id == id && strcmp(e->text, text) == 0) {
            free(text);
            return CLATTN_SUCCESS;
        }
    clattn_mod_source *e = malloc(sizeof *e);
    if (!e) {
        free(text);
        return clattn_fail(ctx, CLATTN_ERROR_OUT_OF_HOST_MEMORY, "mods: the snippets' source");
    }
    e->id = id;
    e->text = text;
    e->next = ctx->mod_sources;
    ctx->mod_sources = e;
    return CLATTN_SUCCESS;
}

const char *clattn_mods_source(const clattn_context *ctx, const char *options)
{
    const char *at = strstr(options, "-DMOD_ID=");
    if (!at)
        return NULL;
    const uint64_t id = strtoull(at + 9, NULL, 16);
    for (const clattn_mod_source *e = ctx->mod_sources; e; e = e->next)
        if (e->id == id)
            return e->text;
    return NULL;
}

void clattn_mods_release(clattn_context *ctx)
{
    while (ctx->mod_sources) {
        clattn_mod_source *next = ctx->mod_sources->next;
        free(ctx->mod_sources->text);
        free(ctx->mod_sources);
        ctx->mod_sources = next;
    }
}

clattn_status clattn_mods_buffers(clattn_context *ctx, const clattn_attention_desc *desc,
                                  cl_mem out[CLATTN_MAX_MOD_BUFFERS],
                                  bool owned[CLATTN_MAX_MOD_BUFFERS], int *n)
{
    *n = 0;
    const clattn_mods *m = desc ? desc->mods : NULL;
    for (int i = 0; m && i < m->n_buffers; i++) {
        const clattn_mod_buffer *u = &m->buffers[i];
        owned[i] = u->buffer == NULL;
        out[i] = u->buffer;
        if (owned[i]) {
            clattn_status st = clattn_create_buffer(ctx, CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR,
                                                    u->count * 4, (void *)u->host, &out[i]);
            if (st != CLATTN_SUCCESS)
                return st;
        }
        *n = i + 1;
    }
    return CLATTN_SUCCESS;
}
