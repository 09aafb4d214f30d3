#define _POSIX_C_SOURCE 200809L
/* `clattn tune`: a search of the tiled kernels' blocking on one device, timed with
 * `clattn bench`'s code (bench.h), the fastest stored in the device's tuning file. */
#include "bench.h"
#include "cli.h"
#include "commands.h"
#include "progress.h"

#include <clattn.h>

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* tune's --shapes entries: bench's without its timing-only tokens (help and messages) */
#define TUNE_SHAPES_GRAMMAR "b,h_q,h_kv,n_q,n_kv,d_k,d_v[,mask[,alg[,dtype[,winL]]]]"

static const char tune_usage[] =
    "Usage: clattn tune [--shapes LIST] [--reps N] [--rq LIST] [--wg LIST]\n"
    "                   [--tile LIST] [--dry-run] [--quiet] [--device SPEC]\n"
    "\n"
    "Searches the blocking of the tiled kernels (RQ queries per work-item, WG\n"
    "work-items per work-group, TILE_KV keys per local-memory tile) on one device:\n"
    "for every shape and algorithm it times the built-in choice and each candidate\n"
    "(by default RQ 1,2,4,6 x WG 4,8,16,32 x TILE_KV 32,64,128 for the CPU kernel\n"
    "family, RQ 2,4,6 x WG 64,128,256 x TILE_KV 16,32,64 for the GPU family; a\n"
    "candidate the device refuses is skipped), prints the best per case, and stores it per kernel\n"
    "and head dims in the device's tuning file (clattn_context_tuning_file(): in the\n"
    "program-binary cache folder). Later contexts on the same device, driver and\n"
    "clattn version use it for problems with at least RQ x WG queries; CLATTN_TUNE=off\n"
    "ignores it. A candidate is stored only if it beats the built-in choice by more\n"
    "than 3%.\n"
    "\n"
    "Options:\n"
    "  --shapes LIST   as for `clattn bench`, forward only:\n"
    "                  " TUNE_SHAPES_GRAMMAR "\n"
    "                  (winL: a sliding window, as for bench; the blocking is stored\n"
    "                  per kernel and head dims, for every dtype; a fused case with\n"
    "                  n_q <= 16 runs the decode kernel, which has none: reported, not\n"
    "                  tuned); default 1,8,8,2048,2048,64,64;1,8,8,2048,2048,128,128\n"
    "  --reps N        timed runs per candidate (default 3, after one warm-up)\n"
    "  --rq LIST       the RQ values to try, comma-separated, each 1..6 (default\n"
    "                  1,2,4,6)\n"
    "  --wg LIST       the WG values, each 1..1024 (default 4,8,16,32; GPU family\n"
    "                  64,128,256)\n"
    "  --tile LIST     the TILE_KV values, multiples of 16 within 16..512 (default\n"
    "                  32,64,128)\n"
    "  --dry-run       print the results but do not write the tuning file\n"
    "  --quiet         no progress on standard error (by default: the case and candidate\n"
    "                  being timed, of how many, elapsed time and an estimate of what is\n"
    "                  left; one line rewritten in place on a terminal, plain lines\n"
    "                  otherwise)\n"
    "  --device SPEC   \"P:D\" or a device-name substring\n"
    "  -h, --help      show this help\n";

/* A candidate blocking: 0 fields = the built-in choice. */
typedef struct candidate {
    unsigned rq, wg, tile;
} candidate;

/* Times case c with the candidate as the context's override of its kernels (or none:
 * the built-in choice); returns the median device ms, or a negative value if the
 * device refused. plan_kernels (if not NULL, 128 bytes) receives the plan's kernels. */
static double time_blocking(clattn_context *ctx, const bench_case *c, int reps, candidate cand,
                            char *plan_kernels)
{
    static const clattn_kernel kernels[3] = {CLATTN_KERNEL_FUSED, CLATTN_KERNEL_SCORES,
                                             CLATTN_KERNEL_WEIGHTED_SUM};
    const clattn_blocking b = {cand.rq, cand.wg, cand.tile};
    for (int k = 0; k < 3; k++)
        if (clattn_context_set_blocking(ctx, kernels[k], 0, 0, cand.rq ? &b : NULL) !=
            CLATTN_SUCCESS)
            return -1.0;
    result r = {0};
    char reason[sizeof((clattn_plan *)0)->reason];
    bench_quiet = cand.rq != 0; /* a refused candidate is skipped without a message */
    const int rc = time_case(ctx, c, 1, reps, &r, reason, sizeof reason);
    bench_quiet = 0;
    for (int k = 0; k < 3; k++)
        (void)clattn_context_set_blocking(ctx, kernels[k], 0, 0, NULL);
    if (plan_kernels && rc == 0)
        snprintf(plan_kernels, 128, "%s", r.kernels);
    return rc == 0 ? r.device_ms.median : -1.0;
}

/* Stores the winner for the case's kernels (fused, or scores and weighted sum) through
 * the library, which owns the tuning file. 0, or an exit status. */
static int store(clattn_context *ctx, const bench_case *c, candidate best, double ms,
                 double default_ms, int *n_stored)
{
    const clattn_blocking b = {best.rq, best.wg, best.tile};
    char note[96];
    snprintf(note, sizeof note, "%.3f ms, built-in %.3f ms", ms, default_ms);
    const int fused = c->algorithm == CLATTN_ALGORITHM_FUSED;
    const clattn_kernel kinds[2] = {fused ? CLATTN_KERNEL_FUSED : CLATTN_KERNEL_SCORES,
                                    CLATTN_KERNEL_WEIGHTED_SUM};
    for (int k = 0; k < (fused ? 1 : 2); k++) {
        const int64_t dk = kinds[k] == CLATTN_KERNEL_WEIGHTED_SUM ? 0 : c->d_k;
        const int64_t dv = kinds[k] == CLATTN_KERNEL_SCORES ? 0 : c->d_v;
        const clattn_status st = clattn_context_store_blocking(ctx, kinds[k], dk, dv, &b, note);
        if (st != CLATTN_SUCCESS)
            return bench_fail("%s", clattn_last_error_message(ctx));
        (*n_stored)++;
    }
    return 0;
}

/* A comma-separated list of at most `max` integers within lo..hi (and multiples of
 * `multiple`) into out[]; the count, or -1 after a usage message. */
static int parse_list(const char *option, const char *text, unsigned lo, unsigned hi,
                      unsigned multiple, unsigned *out, int max)
{
    int n = 0;
    const char *p = text;
    while (*p) {
        char *end;
        const long v = strtol(p, &end, 10);
        if (!isdigit((unsigned char)*p) || end == p || (*end && (*end != ',' || !end[1])) ||
            v < (long)lo || v > (long)hi || v % (long)multiple != 0 || n == max)
            return usage_error("clattn tune",
                               "%s '%s': expected up to %d comma-separated integers within "
                               "%u..%u%s",
                               option, text, max, lo, hi, multiple > 1 ? ", multiples of 16" : ""),
                   -1;
        out[n++] = (unsigned)v;
        p = *end ? end + 1 : end;
    }
    if (n == 0)
        return usage_error("clattn tune", "%s is empty", option), -1;
    return n;
}

int cmd_tune(int argc, char **argv)
{
    const char *shapes = "1,8,8,2048,2048,64,64;1,8,8,2048,2048,128,128", *device = NULL;
    const char *reps_text = NULL, *rq_text = NULL, *wg_text = NULL, *tile_text = NULL;
    int reps = 3, dry = 0, quiet = 0;
    const option options[] = {
        {"--shapes", &shapes, NULL}, {"--device", &device, NULL},  {"--reps", &reps_text, NULL},
        {"--dry-run", NULL, &dry},   {"--quiet", NULL, &quiet},    {"--rq", &rq_text, NULL},
        {"--wg", &wg_text, NULL},    {"--tile", &tile_text, NULL},
    };
    const int prc = parse_command_line("clattn tune", tune_usage, argc, argv, options,
                                       sizeof options / sizeof options[0]);
    if (prc >= 0)
        return prc;
    if (reps_text && bench_count("clattn tune", "--reps", reps_text, 1, 100, &reps))
        return 2;
    unsigned rqs[8] = {1, 2, 4, 6}, wgs[8] = {4, 8, 16, 32}, tiles[8] = {32, 64, 128};
    int n_rq = 4, n_wg = 4, n_tile = 3;
    if ((rq_text && (n_rq = parse_list("--rq", rq_text, 1, 6, 1, rqs, 8)) < 0) ||
        (wg_text && (n_wg = parse_list("--wg", wg_text, 1, 1024, 1, wgs, 8)) < 0) ||
        (tile_text && (n_tile = parse_list("--tile", tile_text, 16, 512, 16, tiles, 8)) < 0))
        return 2;
    bench_case cases[32];
    bench_command = "clattn tune";
    bench_shapes_grammar = TUNE_SHAPES_GRAMMAR;
    const int n_cases = parse_shapes(shapes, cases, 32);
    if (n_cases < 0)
        return 2;
    for (int i = 0; i < n_cases; i++) /* the blocking tuned is the forward kernels' */
        if (cases[i].backward || cases[i].page_size || cases[i].int8_kv || cases[i].ragged ||
            cases[i].half || cases[i].dropout > 0.0f || cases[i].bshd)
            return usage_error(
                "clattn tune",
                "--shapes entry %d: tune times the forward kernels on plain K/V "
                "(%s); backward, pageN, int8, half, varlen, padded, dropP and bshd are "
                "bench's",
                cases[i].entry, bench_shapes_grammar);
    clattn_context_options opt = {0};
    opt.device = device;
    clattn_context *ctx;
    if (clattn_context_create(&opt, &ctx) != CLATTN_SUCCESS)
        return bench_fail("%s", clattn_last_error_message(NULL));
    if (clattn_context_kernel_family(ctx) == CLATTN_KERNEL_FAMILY_GPU) {
        /* the GPU family: work-groups of cooperating work-items (16 per row block), tiles
         * that local memory holds; what does not fit is refused and skipped */
        static const unsigned g_rq[3] = {2, 4, 6}, g_wg[3] = {64, 128, 256},
                              g_tile[3] = {16, 32, 64};
        if (!rq_text)
            n_rq = 3, memcpy(rqs, g_rq, sizeof g_rq);
        if (!wg_text)
            n_wg = 3, memcpy(wgs, g_wg, sizeof g_wg);
        if (!tile_text)
            n_tile = 3, memcpy(tiles, g_tile, sizeof g_tile);
    }
    const int n_cand = n_rq * n_wg * n_tile;
    (void)clattn_context_use_stored_tuning(ctx,
                                           0); /* time the built-in choice, not an older tuning */
    const char *path = clattn_context_tuning_file(ctx);
    if (!path && !dry) {
        clattn_context_release(ctx);
        return bench_fail("the program-binary cache is disabled (CLATTN_CACHE_DIR=off), so there "
                          "is no tuning file; use --dry-run");
    }
    int n_stored = 0, rc = 0;
    const candidate builtin = {0, 0, 0};
    printf("%-28s %8s %12s %-12s %10s %8s\n", "case", "alg", "built-in ms", "best RQ,WG,T",
           "best ms", "speed-up");
    /* per case: the built-in choice, the candidates, then 2 x 2 re-timings of the winner */
    const int steps_per_case = 1 + n_cand + 4;
    progress pr;
    progress_start(&pr, "clattn tune", (long)n_cases * steps_per_case, quiet);
    for (int i = 0; i < n_cases; i++) {
        const bench_case *c = &cases[i];
        const int fused = c->algorithm == CLATTN_ALGORITHM_FUSED;
        char name[80], what[128], blk[32] = "built-in";
        snprintf(name, sizeof name, "%lldx%lldx%lldx%lld d=%lld,%lld%s%s%s%s", (long long)c->b,
                 (long long)c->h_q, (long long)c->n_q, (long long)c->n_kv, (long long)c->d_k,
                 (long long)c->d_v, c->mask == CLATTN_MASK_NONE ? "" : " ",
                 c->mask == CLATTN_MASK_NONE                  ? ""
                 : c->mask == CLATTN_MASK_CAUSAL_BOTTOM_RIGHT ? "causal-br"
                                                              : cli_mask_names[c->mask],
                 c->dtype == CLATTN_FLOAT32 ? "" : " ",
                 c->dtype == CLATTN_FLOAT32 ? "" : bench_dtype_name(c->dtype));
        snprintf(what, sizeof what, "case %d/%d (%s %s)", i + 1, n_cases, name,
                 fused ? "fused" : "unfused");
        progress_step(&pr, "%s: the built-in blocking", what);
        char kernels[128] = "";
        double base = time_blocking(ctx, c, reps, builtin, kernels);
        if (base < 0) {
            progress_skip(&pr, steps_per_case - 1);
            progress_clear(&pr);
            rc = bench_fail("case %d: the built-in blocking fails", i + 1);
            continue;
        }
        /* the plan's words: only the tiled kernels (fused.cl or fused_gpu.cl; scores.cl
         * and weighted_sum.cl) take the blocking; decoding, n_kv 0 and no query rows do not */
        if (strncmp(kernels, "fused", 5) != 0 && strncmp(kernels, "scores", 6) != 0) {
            progress_skip(&pr, steps_per_case - 1);
            progress_clear(&pr);
            printf("%-28s %8s %12.3f %-12s (%s: no blocking to tune)\n", name, "-", base, "-",
                   c->n_q == 0    ? "no query rows"
                   : c->n_kv == 0 ? "n_kv 0, the decode kernel writes the rows"
                                  : "the decode kernel, n_q <= 16");
            continue;
        }
        double best = base;
        unsigned brq = 0, bwg = 0, btile = 0;
        int tried = 0;
        for (int a = 0; a < n_rq; a++)
            for (int w = 0; w < n_wg; w++)
                for (int t = 0; t < n_tile; t++) {
                    progress_step(&pr, "%s: candidate %d/%d, RQ,WG,TILE %u,%u,%u", what,
                                  (a * n_wg + w) * n_tile + t + 1, n_cand, rqs[a], wgs[w],
                                  tiles[t]);
                    const candidate cand = {rqs[a], wgs[w], tiles[t]};
                    const double ms = time_blocking(ctx, c, reps, cand, NULL);
                    tried += ms >= 0;
                    if (ms >= 0 && ms < best) {
                        best = ms;
                        brq = rqs[a], bwg = wgs[w], btile = tiles[t];
                    }
                }
        /* the machine drifts: time the built-in choice and the winner again, alternately,
         * and keep the better of each */
        const candidate win = {brq, bwg, btile};
        if (brq) {
            for (int again = 0; again < 2; again++) {
                progress_step(&pr, "%s: the built-in blocking again", what);
                const double b2 = time_blocking(ctx, c, reps, builtin, NULL);
                progress_step(&pr, "%s: the winner %u,%u,%u again", what, brq, bwg, btile);
                const double w2 = time_blocking(ctx, c, reps, win, NULL);
                if (b2 >= 0 && b2 < base)
                    base = b2;
                if (w2 >= 0 && w2 < best)
                    best = w2;
            }
        }
        if (!brq)
            progress_skip(&pr, 4); /* no winner to time again */
        progress_clear(&pr);
        const int better = brq && best < 0.97 * base;
        if (better)
            snprintf(blk, sizeof blk, "%u,%u,%u", brq, bwg, btile);
        printf("%-28s %8s %12.3f %-12s %10.3f %7.2fx  (%d candidate%s ran)\n", name,
               fused ? "fused" : "unfused", base, blk, best, base / best, tried,
               tried == 1 ? "" : "s");
        if (!better)
            continue;
        if (!dry && store(ctx, c, win, best, base, &n_stored) != 0)
            rc = 1;
    }
    if (!dry && n_stored > 0)
        printf("stored %d entries in %s\n", n_stored, path);
    else if (!dry && rc == 0)
        printf("nothing beat the built-in blocking by more than 3%%; %s unchanged\n", path);
    clattn_context_release(ctx);
    return rc;
}
