/* Stored tuning results: the blocking (RQ, WG, TILE_KV) `clattn tune` measured best per
 * kernel and head dims on one device, used by later contexts on that device.
 *
 * File: <cache folder>/tune-<16 hex digits>.txt, the digits hashing the device name,
 * driver version, device version and the clattn version (a new driver or clattn starts
 * untuned). Lines: "<kernel> <d_k> <d_v> <rq> <wg> <tile_kv>", kernel one of fused,
 * scores (d_v 0), weighted_sum (d_k 0); '#' starts a comment. Unreadable or malformed
 * lines are ignored: tuning is an optimisation, never an error. CLATTN_TUNE=off ignores
 * the file. */
#include "internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_TUNE_ENTRIES 256

void clattn_tune_load(clattn_context *ctx)
{
    if (!ctx->cache_dir)
        return;
    const uint64_t h = clattn_device_hash(ctx);
    const size_t len = strlen(ctx->cache_dir) + 32;
    ctx->tune_path = malloc(len);
    if (!ctx->tune_path)
        return;
    snprintf(ctx->tune_path, len, "%s/tune-%016llx.txt", ctx->cache_dir, (unsigned long long)h);
    const char *env = getenv("CLATTN_TUNE");
    if (env && strcmp(env, "off") == 0)
        return;
    FILE *f = fopen(ctx->tune_path, "r");
    if (!f)
        return;
    ctx->tune = calloc(MAX_TUNE_ENTRIES, sizeof *ctx->tune);
    char line[256];
    while (ctx->tune && ctx->n_tune < MAX_TUNE_ENTRIES && fgets(line, sizeof line, f)) {
        clattn_tune_entry e;
        char kernel[32];
        long long d_k, d_v;
        unsigned rq, wg, tile;
        if (line[0] == '#' ||
            sscanf(line, "%31s %lld %lld %u %u %u", kernel, &d_k, &d_v, &rq, &wg, &tile) != 6)
            continue;
        if (rq < 1 || rq > 8 || wg < 1 || wg > 1024 || tile < 16 || tile > 512 || tile % 16)
            continue;
        snprintf(e.key, sizeof e.key, "%s %lld %lld", kernel, d_k, d_v);
        e.rq = rq;
        e.wg = wg;
        e.tile_kv = tile;
        ctx->tune[ctx->n_tune++] = e;
    }
    fclose(f);
}

const clattn_tune_entry *clattn_tune_find(const clattn_context *ctx, const char *key)
{
    for (int i = ctx->n_tune - 1; i >= 0; i--) /* the last line for a key wins */
        if (strcmp(ctx->tune[i].key, key) == 0)
            return &ctx->tune[i];
    return NULL;
}

const char *clattn_context_tuning_file(const clattn_context *ctx)
{
    return ctx ? ctx->tune_path : NULL;
}
