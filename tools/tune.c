#define _POSIX_C_SOURCE 200809L
/* `clattn tune`: a search of the tiled kernels' blocking on one device, timed with
 * `clattn bench`'s code (bench.h), the fastest stored in the device's tuning file. */
#include "bench.h"
#include "commands.h"

#include <clattn.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static const char tune_usage[] =
    "Usage: clattn tune [--shapes LIST] [--reps N] [--dry-run] [--device SPEC]\n"
    "\n"
    "Searches the blocking of the tiled kernels (RQ queries per work-item, WG\n"
    "work-items per work-group, TILE_KV keys per local-memory tile) on one device:\n"
    "for every shape and algorithm it times the built-in choice and each candidate\n"
    "(RQ 1,2,4 x WG 4,8,16,32 x TILE_KV 32,64,128; a candidate the device refuses is\n"
    "skipped), prints them, and stores the fastest per kernel and head dims in the\n"
    "device's tuning file (clattn_context_tuning_file(): in the program-binary cache\n"
    "folder). Later contexts on the same device, driver and clattn version use it for\n"
    "problems with at least RQ x WG queries; CLATTN_TUNE=off ignores it. A candidate\n"
    "is stored only if it beats the built-in choice by more than 3%.\n"
    "\n"
    "Options:\n"
    "  --shapes LIST   as for `clattn bench` (b,h_q,h_kv,n_q,n_kv,d_k,d_v[,mask[,alg]]);\n"
    "                  default 1,8,8,2048,2048,64,64;1,8,8,2048,2048,128,128\n"
    "  --reps N        timed runs per candidate (default 3, after one warm-up)\n"
    "  --dry-run       print the results but do not write the tuning file\n"
    "  --device SPEC   \"P:D\" or a device-name substring\n"
    "  -h, --help      show this help\n";

typedef struct tune_line {
    char key[64];
    unsigned rq, wg, tile;
    double ms, default_ms;
} tune_line;

/* Times case c with CLATTN_BLOCKING set to the candidate (or unset for the built-in
 * choice); returns the median device ms, or a negative value if the device refused. */
static double time_blocking(clattn_context *ctx, const bench_case *c, int reps,
                            const char *blocking)
{
    if (blocking)
        setenv("CLATTN_BLOCKING", blocking, 1);
    else
        unsetenv("CLATTN_BLOCKING");
    result r = {0};
    char reason[256];
    bench_quiet = blocking != NULL; /* a refused candidate is skipped without a message */
    const int rc = time_case(ctx, c, 1, reps, &r, reason, sizeof reason);
    bench_quiet = 0;
    unsetenv("CLATTN_BLOCKING");
    return rc == 0 ? r.device_ms.median : -1.0;
}

/* Rewrites the tuning file with `lines` replacing entries of the same keys. */
static int store_tuning(const char *path, const tune_line *lines, int n)
{
    char *old = NULL;
    size_t old_len = 0;
    FILE *f = fopen(path, "r");
    if (f) {
        FILE *mem = open_memstream(&old, &old_len);
        char buf[256];
        while (mem && fgets(buf, sizeof buf, f)) {
            int replaced = 0;
            for (int i = 0; i < n; i++) {
                const size_t kl = strlen(lines[i].key);
                if (strncmp(buf, lines[i].key, kl) == 0 && buf[kl] == ' ')
                    replaced = 1;
            }
            if (!replaced)
                fputs(buf, mem);
        }
        if (mem)
            fclose(mem);
        fclose(f);
    }
    /* make the folder (one level: the cache folder itself) and write atomically */
    char dir[4096];
    snprintf(dir, sizeof dir, "%s", path);
    char *slash = strrchr(dir, '/');
    if (slash) {
        *slash = '\0';
        char cmd_dir[4096];
        snprintf(cmd_dir, sizeof cmd_dir, "%s", dir);
        for (char *p = cmd_dir + 1; *p; p++)
            if (*p == '/') {
                *p = '\0';
                mkdir(cmd_dir, 0755);
                *p = '/';
            }
        mkdir(cmd_dir, 0755);
    }
    char tmp[4200];
    snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid());
    FILE *out = fopen(tmp, "w");
    if (!out) {
        free(old);
        return bench_fail("cannot write %s", tmp);
    }
    if (old && old_len)
        fwrite(old, 1, old_len, out);
    else
        fputs("# clattn tune: <kernel> <d_k> <d_v> <rq> <wg> <tile_kv>\n", out);
    for (int i = 0; i < n; i++)
        fprintf(out, "%s %u %u %u  # %.3f ms, built-in %.3f ms\n", lines[i].key, lines[i].rq,
                lines[i].wg, lines[i].tile, lines[i].ms, lines[i].default_ms);
    free(old);
    if (fclose(out) != 0 || rename(tmp, path) != 0) {
        remove(tmp);
        return bench_fail("cannot write %s", path);
    }
    return 0;
}

int cmd_tune(int argc, char **argv)
{
    const char *shapes = "1,8,8,2048,2048,64,64;1,8,8,2048,2048,128,128", *device = NULL;
    int reps = 3, dry = 0;
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        const int has_value = i + 1 < argc;
        if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
            fputs(tune_usage, stdout);
            return 0;
        } else if (strcmp(a, "--dry-run") == 0) {
            dry = 1;
        } else if (strcmp(a, "--shapes") == 0 && has_value) {
            shapes = argv[++i];
        } else if (strcmp(a, "--device") == 0 && has_value) {
            device = argv[++i];
        } else if (strcmp(a, "--reps") == 0 && has_value) {
            char *end;
            long n = strtol(argv[++i], &end, 10);
            if (*end || n < 1 || n > 100) {
                fprintf(stderr, "clattn tune: bad --reps '%s'\n", argv[i]);
                return 2;
            }
            reps = (int)n;
        } else {
            fprintf(stderr, "clattn tune: unknown or incomplete option '%s'\n%s", a, tune_usage);
            return 2;
        }
    }
    bench_case cases[32];
    const int n_cases = parse_shapes(shapes, cases, 32);
    if (n_cases < 0)
        return 2;
    setenv("CLATTN_TUNE", "off", 1); /* time the built-in choice, not an older tuning */
    clattn_context_options opt = {0};
    opt.device = device;
    clattn_context *ctx;
    if (clattn_context_create(&opt, &ctx) != CLATTN_SUCCESS)
        return bench_fail("%s", clattn_last_error_message(NULL));
    const char *path = clattn_context_tuning_file(ctx);
    if (!path && !dry) {
        clattn_context_release(ctx);
        return bench_fail("the program-binary cache is disabled (CLATTN_CACHE_DIR=off), so there "
                          "is no tuning file; use --dry-run");
    }
    static const unsigned rqs[] = {1, 2, 4}, wgs[] = {4, 8, 16, 32}, tiles[] = {32, 64, 128};
    tune_line lines[64];
    int n_lines = 0, rc = 0;
    printf("%-28s %8s %12s %-12s %10s %8s\n", "case", "alg", "built-in ms", "best RQ,WG,T",
           "best ms", "speed-up");
    for (int i = 0; i < n_cases && n_lines + 2 <= 64; i++) {
        const bench_case *c = &cases[i];
        const int fused = c->algorithm == CLATTN_ALGORITHM_FUSED;
        double base = time_blocking(ctx, c, reps, NULL);
        if (base < 0) {
            rc = bench_fail("case %d: the built-in blocking fails", i + 1);
            continue;
        }
        double best = base;
        unsigned brq = 0, bwg = 0, btile = 0;
        int tried = 0;
        for (size_t a = 0; a < 3; a++)
            for (size_t w = 0; w < 4; w++)
                for (size_t t = 0; t < 3; t++) {
                    char spec[48];
                    snprintf(spec, sizeof spec, "%u,%u,%u", rqs[a], wgs[w], tiles[t]);
                    if (isatty(STDERR_FILENO))
                        fprintf(stderr, "\r[%d/%d] %s %s ...   ", i + 1, n_cases,
                                fused ? "fused" : "unfused", spec);
                    const double ms = time_blocking(ctx, c, reps, spec);
                    tried += ms >= 0;
                    if (ms >= 0 && ms < best) {
                        best = ms;
                        brq = rqs[a], bwg = wgs[w], btile = tiles[t];
                    }
                }
        if (isatty(STDERR_FILENO))
            fprintf(stderr, "\r%60s\r", "");
        /* the machine drifts: time the built-in choice and the winner again, alternately,
         * and keep the better of each */
        if (brq) {
            char spec[48];
            snprintf(spec, sizeof spec, "%u,%u,%u", brq, bwg, btile);
            for (int again = 0; again < 2; again++) {
                const double b2 = time_blocking(ctx, c, reps, NULL);
                const double w2 = time_blocking(ctx, c, reps, spec);
                if (b2 >= 0 && b2 < base)
                    base = b2;
                if (w2 >= 0 && w2 < best)
                    best = w2;
            }
        }
        char name[64], blk[32] = "built-in";
        snprintf(name, sizeof name, "%lldx%lldx%lldx%lld d=%lld,%lld", (long long)c->b,
                 (long long)c->h_q, (long long)c->n_q, (long long)c->n_kv, (long long)c->d_k,
                 (long long)c->d_v);
        const int better = brq && best < 0.97 * base;
        if (better)
            snprintf(blk, sizeof blk, "%u,%u,%u", brq, bwg, btile);
        printf("%-28s %8s %12.3f %-12s %10.3f %7.2fx  (%d candidates ran)\n", name,
               fused ? "fused" : "unfused", base, blk, best, base / best, tried);
        if (!better)
            continue;
        const char *kinds[2] = {fused ? "fused" : "scores", fused ? NULL : "weighted_sum"};
        for (int k = 0; k < 2 && kinds[k]; k++) {
            tune_line *l = &lines[n_lines++];
            const long long dk = strcmp(kinds[k], "weighted_sum") == 0 ? 0 : c->d_k;
            const long long dv = strcmp(kinds[k], "scores") == 0 ? 0 : c->d_v;
            snprintf(l->key, sizeof l->key, "%s %lld %lld", kinds[k], dk, dv);
            l->rq = brq, l->wg = bwg, l->tile = btile, l->ms = best, l->default_ms = base;
        }
    }
    if (!dry && n_lines > 0) {
        if (store_tuning(path, lines, n_lines) == 0)
            printf("stored %d entries in %s\n", n_lines, path);
        else
            rc = 1;
    } else if (!dry) {
        printf("nothing beat the built-in blocking by more than 3%%; %s unchanged\n", path);
    }
    clattn_context_release(ctx);
    return rc;
}
