/* What `clattn bench` shares with `clattn tune`: the --shapes list and the timing of one
 * attention call on device buffers; see tools/bench.c. */
#ifndef CLATTN_TOOLS_BENCH_H
#define CLATTN_TOOLS_BENCH_H

#include <clattn.h>

#include <stddef.h>
#include <stdint.h>

enum { PAGES_SHUFFLED, PAGES_INORDER, PAGES_ROUNDROBIN };

typedef struct bench_case {
    int64_t b, h_q, h_kv, n_q, n_kv, d_k, d_v;
    clattn_mask mask;
    clattn_algorithm algorithm;
    clattn_dtype dtype; /* storage of Q, K, V and O */
    int backward;       /* time clattn_attention_backward_enqueue (after one forward) */
    int64_t page_size;  /* > 0: K and V in a paged pool of this page size (fused only) */
    int int8_kv;        /* K and V int8 with float32 scales per token and head (fused only) */
    /* 1 varlen: b sequences of lengths n·(i + 1)/b packed (cu_seqlens); 2 padded: the same
     * lengths as q_lens and kv_lens of a padded [b, h, n, d] batch (n_q = n_kv) */
    int ragged;
    float dropout; /* > 0: dropout_p of the call (dropP; seed 1, offset 0) */
    int half;      /* desc.half_arithmetic (half; fused only) */
    /* winL: a sliding window of window_left keys before each row's diagonal and none after
     * (desc.window; any algorithm, not varlen or padded); -1: none. K/V bytes then count
     * the rows of the keys the rows see */
    int64_t window_left;
    /* bshd: K and V laid out [b, n_kv, h_kv, d] (FlashAttention's cache; a pool's pages
     * [num_pages, page_size, h_kv, d]) instead of [b, h_kv, n_kv, d] */
    int bshd;
    /* the order of each sequence's pages in the pool (with pageN): PAGES_SHUFFLED (the
     * default), PAGES_INORDER (inorder: the block table 0, 1, 2, …; with bshd, a contiguous
     * cache's memory order; clattn's pool [num_pages, h_kv, page_size, d] still interleaves
     * the heads' pieces) or PAGES_ROUNDROBIN (roundrobin: the pages handed out to the
     * sequences in turn, as a fresh pool gives them to sequences that grow side by side:
     * sequence b's page p at p·b_total + b) */
    int page_order;
    int entry; /* its --shapes entry, from 1 ("both" makes two cases of one entry) */
} bench_case;

typedef struct stats {
    double median, min, max;
} stats;

/* The timing of one case. */
typedef struct result {
    stats device_ms, wall_ms;
    double gflops, gbytes_per_s;
    size_t workspace_bytes;
    char kernels[128]; /* the plan's kernels (clattn_plan.kernels), e.g. "decode" */
} result;

/* While non-zero, bench_fail() prints nothing (tune: candidates the device refuses are
 * expected, not reported). */
extern int bench_quiet;

/* While non-zero, time_case() puts its operands in host memory advised for transparent
 * huge pages (bench --huge-pages). */
extern int bench_huge_pages;

/* "f32", "f16" or "bf16": a case's storage as --shapes names it. */
const char *bench_dtype_name(clattn_dtype dtype);

/* The command bench_fail() names and the --shapes grammar parse_shapes() quotes: bench's
 * by default; tune sets its own (its cases take no pageN, int8 and the other tokens). */
extern const char *bench_command, *bench_shapes_grammar;

/* Prints "<bench_command>: MESSAGE" to stderr unless bench_quiet; returns 1. */
int bench_fail(const char *fmt, ...);

/* Parses LIST (`bench --shapes`) into at most `max` cases (an algorithm "both" gives
 * two cases). Returns the count, or -1 with a message. */
int parse_shapes(const char *list, bench_case *cases, int max);

/* A case's algorithm as the table and --json show it: "fused", "unfused", "backward",
 * "pagedN", "fused/varlen", "unfused/padded", "fused/bshd", "pagedN/bshd", "pagedN/inorder",
 * "pagedN/roundrobin/bshd"; buf holds the built ones. */
enum { BENCH_CASE_NAME = 32 }; /* "paged2147483648/roundrobin/bshd" and its NUL: 32 */
const char *bench_case_name(const bench_case *c, char buf[BENCH_CASE_NAME]);

/* The block table of case c's pool of pages ([b, max_pages] int32, at least one entry):
 * each sequence's pages at shuffled places (seed 5), in order (inorder) or handed out in
 * turn (roundrobin), as c->page_order says. malloc'd (the caller frees), NULL when out of
 * memory. */
int32_t *bench_page_table(const bench_case *c, int64_t max_pages);

/* Times case c on random device buffers: `warmup` untimed runs, then `reps` timed ones;
 * plan_reason receives the plan's reason. Returns 0, or 1 with a message. */
int time_case(clattn_context *ctx, const bench_case *c, int warmup, int reps, result *res,
              char *plan_reason, size_t reason_len);

/* An integer option value within lo..hi into *out; else a usage error (exit status 2). */
int bench_count(const char *command, const char *option, const char *text, long lo, long hi,
                int *out);

/* Median, minimum and maximum of v[0 … n − 1] (sorts v). */
stats bench_summarize(double *v, int n);

/* An event's profiling timestamp `what`, in ns (0 when the runtime gives none). */
double bench_event_ns(cl_event e, cl_profiling_info what);

/* The device's f32 FMA throughput in GFLOP/s (the fastest of the probe's forms; `form`
 * receives its name, e.g. "float8 x 12 accumulators"), the median of 5 timed runs of a
 * kernel built on the context's device (tools/probes.c). 0 on failure. */
double measure_peak(clattn_context *ctx, char *form, size_t form_len);

/* The streaming-read probe kept open (its program and 256 MiB buffer built once):
 * bw_probe_open returns NULL on failure; bw_probe_measure gives GB/s, the median of 5
 * timed runs (0 on failure or for NULL); bw_probe_close releases it (NULL allowed). */
typedef struct bw_probe bw_probe;
bw_probe *bw_probe_open(clattn_context *ctx);
double bw_probe_measure(bw_probe *p);
void bw_probe_close(bw_probe *p);

#endif
