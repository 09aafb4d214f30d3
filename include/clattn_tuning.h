/** @file
 * clattn's tuning and kernel-family calls: the blocking of the tiled kernels (overrides,
 * stored tuning), the kernel family and the split-KV count of a context. Included by
 * clattn.h (which declares clattn_context and clattn_status); the conventions of
 * clattn.h apply. docs/PERFORMANCE.md says how the choices are made.
 */
#ifndef CLATTN_TUNING_H
#define CLATTN_TUNING_H

#include "clattn.h"

/* ---- Tuning: the blocking of the tiled kernels ------------------------------------- */

/** The tiled kernels whose blocking can be tuned (see docs/PERFORMANCE.md). */
typedef enum clattn_kernel {
    CLATTN_KERNEL_FUSED = 0,       /**< fused.cl (head dims d_k, d_v) */
    CLATTN_KERNEL_SCORES = 1,      /**< scores.cl (head dim d_k; d_v is 0) */
    CLATTN_KERNEL_WEIGHTED_SUM = 2 /**< weighted_sum.cl (head dim d_v; d_k is 0) */
} clattn_kernel;

/** The blocking of one tiled kernel: compile-time constants of its program. */
typedef struct clattn_blocking {
    unsigned queries_per_work_item; /**< RQ: query rows each work-item holds, 1..6 */
    unsigned work_group_size;       /**< WG: work-items per work-group, 1..1024 */
    unsigned tile_kv; /**< TILE_KV: keys per local-memory tile, 16..512, multiple of 16 */
} clattn_blocking;

/**
 * Overrides the blocking of `kernel` for head dims (d_k, d_v) on this context, in the
 * manner of CLBlast's OverrideParameters: every later call on ctx that runs the kernel
 * with those dims uses it, ahead of stored tuning and the built-in choice. d_k = 0
 * (or d_v = 0) matches any d_k (d_v). `blocking` NULL removes the override for exactly
 * (kernel, d_k, d_v). The CLATTN_BLOCKING="RQ,WG,TILE_KV[,NV]" environment variable,
 * read once when a context is created, sets such an override for every kernel and dims
 * (NV, 1, 2 or 4: the CPU family's float16 vectors per micro-kernel step; by default
 * derived from the device's native vector width and RQ, docs/PERFORMANCE.md).
 * A blocking the device cannot run makes the later call fail with
 * CLATTN_ERROR_UNSUPPORTED naming the limit. The decode kernel (n_q ≤ 16) takes only
 * RQ of a CLATTN_KERNEL_FUSED override, as its query rows (of a KV head) per work-item.
 * @return CLATTN_SUCCESS; CLATTN_ERROR_INVALID_ARGUMENT for a NULL ctx, an unknown
 *         kernel, negative dims or values outside the ranges above;
 *         CLATTN_ERROR_OUT_OF_HOST_MEMORY.
 */
clattn_status clattn_context_set_blocking(clattn_context *ctx, clattn_kernel kernel, int64_t d_k,
                                          int64_t d_v, const clattn_blocking *blocking);

/** Whether calls on ctx use the blocking stored in the device's tuning file (on by
 *  default; CLATTN_TUNE=off, read when a context is created, turns it off). Overrides
 *  apply either way. @return CLATTN_SUCCESS, or CLATTN_ERROR_INVALID_ARGUMENT (NULL ctx). */
clattn_status clattn_context_use_stored_tuning(clattn_context *ctx, int use);

/**
 * Stores `blocking` as the tuned choice for (kernel, d_k, d_v) in the device's tuning
 * file, replacing an entry of the same key, and in ctx's loaded table (later contexts
 * on the same device, driver and clattn version read it; stored tuning applies to
 * problems with at least RQ × WG queries). `note` (may be NULL) is written as a comment
 * on the line. The file is rewritten atomically (a temporary file renamed over it);
 * its folder is created if needed. This is the library's one writer of the format
 * (`clattn tune` measures, then calls this).
 * @return CLATTN_SUCCESS; CLATTN_ERROR_INVALID_ARGUMENT as for
 *         clattn_context_set_blocking, or when the cache (and so the file) is disabled;
 *         CLATTN_ERROR_IO when the file cannot be written;
 *         CLATTN_ERROR_OUT_OF_HOST_MEMORY.
 */
clattn_status clattn_context_store_blocking(clattn_context *ctx, clattn_kernel kernel, int64_t d_k,
                                            int64_t d_v, const clattn_blocking *blocking,
                                            const char *note);

/** Kernel families: the same semantics, shaped for different devices. */
typedef enum clattn_kernel_family {
    /** GPUs and accelerators take the GPU family, CPUs the CPU family. */
    CLATTN_KERNEL_FAMILY_AUTO = 0,
    /** Work-items that each hold several queries and wide float16 vectors, tiles sized
     *  for caches (fused.cl, scores.cl, weighted_sum.cl); decoding (n_q <= 16) streams
     *  each KV head's K and V once for all its query rows (decode.cl), split-KV where
     *  the work-items are too few (split_merge.cl). */
    CLATTN_KERNEL_FAMILY_CPU = 1,
    /** The fused kernel as work-groups of cooperating work-items: a tile of query rows
     *  per group, K and V tiles in local memory, register micro-tiles of scores and of
     *  O per work-item (fused_gpu.cl; docs/PERFORMANCE.md), and split-KV decoding for
     *  n_q <= 16 (decode_gpu.cl, split_merge.cl). The unfused stages are shared by both
     *  families. */
    CLATTN_KERNEL_FAMILY_GPU = 2
} clattn_kernel_family;

/**
 * Forces a kernel family on ctx for later calls (plans already made keep theirs), or
 * CLATTN_KERNEL_FAMILY_AUTO to choose by device type. The environment variable
 * CLATTN_KERNEL_FAMILY=gpu|cpu, read once when a context is created, does the same.
 * Added in 0.3.
 * @return CLATTN_SUCCESS; CLATTN_ERROR_INVALID_ARGUMENT (NULL ctx, unknown family).
 */
clattn_status clattn_context_set_kernel_family(clattn_context *ctx, clattn_kernel_family family);

/**
 * Split-KV decoding (n_q <= 16, no weights, key weight sums or max logits requested): the
 * keys the rows see are cut into chunks, each taken by its own work-groups, and the
 * partial results are merged (Flash-Decoding; Dao, Haziza, Massa, Sizov 2023). The count
 * is planned over the span S of keys a work-group's rows may see together: n_kv, or with a
 * sliding window bounded on both sides (window_right taken as 0 under a causal mask)
 * window_left + window_right + n_q, at most n_kv.
 * Each chunk is a whole number of the decode kernel's steps (128 keys in the GPU family's
 * decode_gpu.cl, 16 in the CPU family's decode.cl), the fewest that make at most `splits`
 * chunks of S, so fewer than `splits` may run (7 asked of 1000 keys: 4 of 256 in the GPU
 * family). On the device each work-group cuts the keys its own rows see, from the first of
 * them, into at most that many chunks, so a window or a shorter kv_lens still spreads over
 * them (chunks of at least 512 keys in the GPU family, 2048 in the CPU family, or the
 * planned length where that is shorter). 0
 * (the default) chooses: enough work-groups for 16 per compute unit, in at most
 * ceil(S / 512) chunks (GPU family) or ceil(S / 2048) (CPU family, which therefore splits
 * only long spans on few work-items, rounded up to a multiple of the compute units); 1
 * chunk in the CPU family is decode.cl alone. clattn_attention_plan() reports the count
 * in its reason. The
 * CLATTN_DECODE_SPLITS environment variable, read once when a context is created, does the
 * same. Added in 0.3.
 * @return CLATTN_SUCCESS; CLATTN_ERROR_INVALID_ARGUMENT (NULL ctx, splits outside
 *         0..256).
 */
clattn_status clattn_context_set_decode_splits(clattn_context *ctx, int splits);

/**
 * KV heads per work-item of decode.cl (n_q <= 16: the CPU family's decode kernel, and the
 * GPU family's where decode_gpu.cl cannot run: weights, key sums, max logits): each
 * work-item takes the query rows of `heads` KV heads and reads their K and V rows step by
 * step together (16 keys of one head, then of the next). With a paged cache laid out
 * [num_pages, h_kv, page_size, d] (or [num_pages, page_size, h_kv, d]) a page's heads lie
 * next to each other, so the reads of a step become one stretch instead of `heads`
 * scattered pieces. 0 (the default) chooses: 1, except on a CPU device: for a paged cache
 * whose pages hold less than 32 KiB of a head's K rows, enough heads for about 32 KiB, or
 * 8 KiB where the device has 16 float lanes (AVX-512), which takes at least 2 for every
 * cache (on a 2-core Xeon, contiguous: 0.87-0.95x the time of one for GQA in f32 and f16
 * and MHA in f16, MHA in f32 level; pages of 16 keys at d 128: 0.85-0.93x the time of the
 * 4 or 8 heads of 32 KiB; two streams on a contiguous cache took 1.09x on an AVX2 Zen 3;
 * docs/BENCHMARKS.md); either with
 * at most 16 rows per work-item in all (heads × query rows of each: more would overflow
 * the L1 cache), while at least one work-item per compute unit remains. On CPU devices,
 * where K's heads interleave within its rows (each head's part of a row d contiguous
 * elements, and a head's stride below the row's:
 * FlashAttention's [b, n_kv, h_kv, d] cache and [num_pages, page_size, h_kv, d] pool),
 * every KV head, so that a work-item reads whole rows: up to 32 rows in all where a
 * head's part of a row is 256 bytes or more, else 16, and with split-KV decoding allowed
 * even below a work-item per compute unit (0.64-0.85x the time of 2 heads on a 2-core
 * Xeon; docs/BENCHMARKS.md). N > 0 takes the
 * largest divisor of h_kv up to N (h_kv itself for N ≥ h_kv) whose private arrays fit
 * (320 KiB per work-item), past the 16 rows of the choice if need be. For a given count of
 * key splits the results are the same bits whatever the count of heads (the same
 * arithmetic per row; test_paged checks it). The split count chosen by default
 * (clattn_context_set_decode_splits 0) follows the work-items, which the heads divide, so
 * with it unset another count of heads may split the keys differently: results within
 * float32 rounding of each other (merged partial sums), not the same bits; fix the splits
 * too where bits must match.
 * clattn_attention_plan()'s reason ends its decode.cl part in ", N KV heads in turn" when
 * the count N is above 1 (whether chosen or forced; nothing for 1), followed for such K by
 * " (K's heads interleave in its rows: N of its h_kv read together)", with ", whole
 * rows" before the ')' when N is h_kv. The
 * CLATTN_DECODE_HEADS environment variable, read once when a context is created, does the
 * same. Added in 0.3.
 * @return CLATTN_SUCCESS; CLATTN_ERROR_INVALID_ARGUMENT (NULL ctx, heads outside
 *         0..256).
 */
clattn_status clattn_context_set_decode_heads(clattn_context *ctx, int heads);

/** The family calls on ctx use: CLATTN_KERNEL_FAMILY_CPU or _GPU (AUTO resolved by the
 *  device type). @return that family; CLATTN_KERNEL_FAMILY_AUTO for a NULL ctx. Added
 *  in 0.3. */
clattn_kernel_family clattn_context_kernel_family(const clattn_context *ctx);

#endif
