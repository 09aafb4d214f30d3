/** @file
 * clattn's programmable attention (added in 0.3): OpenCL C snippets that modify the
 * scores or mask keys, compiled into the kernels (the idea of PyTorch's FlexAttention,
 * He et al. 2024, on any OpenCL device). clattn_attention_desc.mods points to a
 * clattn_mods. Included by clattn.h; its conventions apply. docs/SEMANTICS.md,
 * "Score and mask snippets", gives the exact semantics and examples.
 */
#ifndef CLATTN_MODS_H
#define CLATTN_MODS_H

#include "clattn.h"

/** Opaque: the flags of a mask_mod per 16×16 block (clattn_block_mask_create). */
typedef struct clattn_block_mask clattn_block_mask;

/** One read-only user buffer of the snippets (document ids per token, a per-head table,
 *  a relative-position bias table): passed to clattn_score_mod and clattn_mask_mod after
 *  k_pos, in the order of clattn_mods.buffers, as `__global const int *` (dtype
 *  CLATTN_INT32) or `__global const float *` (CLATTN_FLOAT32). The snippet indexes it;
 *  clattn cannot check its indices, so a snippet must stay within [0, count). */
typedef struct clattn_mod_buffer {
    clattn_dtype dtype; /**< CLATTN_INT32 or CLATTN_FLOAT32 */
    int64_t count;      /**< elements, ≥ 1 */
    /** Host array of `count` elements (copied to the device during the call; the blocking
     *  call reads it before it returns, the enqueue call before it returns too), or NULL
     *  with `buffer`. The float64 reference reads only this. */
    const void *host;
    /** Or a cl_mem of the context holding them from byte 0 (read by the kernels; not
     *  owned). Exactly one of host and buffer. */
    cl_mem buffer;
} clattn_mod_buffer;

/**
 * Score and mask snippets (clattn_attention_desc.mods).
 *
 * `score_mod` is OpenCL C source that defines
 * `float clattn_score_mod(float score, int b, int h, long q_pos, long k_pos, <buffers>)`;
 * `mask_mod` defines `bool clattn_mask_mod(int b, int h, long q_pos, long k_pos,
 * <buffers>)`; `<buffers>` are the user buffers' parameters (see clattn_mod_buffer).
 * Either may be NULL; both may define helper functions (one definition each in total).
 * b is the batch entry (the sequence of a packed batch), h the query head, and
 * q_pos = q_start + i, k_pos = kv_start + j the positions of query row i and key j
 * (within the sequence for a packed batch; logical keys for paged K/V).
 *
 * Order, for a key the built-in rules leave visible (lengths, causal, window, no-self,
 * bool mask): s = scale·q·k → softcap → − ALiBi bias → + float mask → clattn_score_mod(s)
 * → masked (−∞) where clattn_mask_mod returns false. The snippets are called only for
 * such keys (so they may index per-key tables up to kv_lens), in float32. A score_mod
 * returning −∞ masks the key too; NaN poisons the row, as a NaN score does.
 *
 * The snippets are compiled into every kernel that computes scores (both algorithms,
 * both kernel families, the decode kernels, split-KV, the weights and LSE outputs, key
 * weight sums; the backward pass with mask_mod only) and cached like any program, keyed
 * by their text. A compile error gives CLATTN_ERROR_BUILD_FAILED with the compiler's log,
 * whose lines name `score_mod:LINE` and `mask_mod:LINE` of the snippets' own text. Not
 * with the several-device layer or clattn-mpi (CLATTN_ERROR_UNSUPPORTED).
 *
 * The float64 reference (clattn_reference_attention) cannot run OpenCL C: it calls the
 * C twins below, and returns CLATTN_ERROR_UNSUPPORTED for a snippet without one.
 */
struct clattn_mods {
    const char *score_mod;            /**< OpenCL C source defining clattn_score_mod, or NULL */
    const char *mask_mod;             /**< OpenCL C source defining clattn_mask_mod, or NULL */
    const clattn_mod_buffer *buffers; /**< n_buffers user buffers, or NULL */
    int n_buffers;                    /**< 0 … 8 */
    /** The C twin of score_mod for the reference (float64): `buffers` are the host
     *  arrays in order; `user` is the field below. NULL: the reference refuses score_mod. */
    double (*score_mod_host)(double score, int b, int h, int64_t q_pos, int64_t k_pos,
                             const void *const *buffers, void *user);
    /** The C twin of mask_mod for the reference: nonzero = visible. */
    int (*mask_mod_host)(int b, int h, int64_t q_pos, int64_t k_pos, const void *const *buffers,
                         void *user);
    void *user; /**< passed to the twins */
    /** Optional: the block mask of this mask_mod (clattn_block_mask_create), so the fused
     *  algorithm skips key tiles that mask_mod masks for all of a work-group's rows and
     *  evaluates no snippet on tiles it leaves fully visible. It must have been built from
     *  the same mask_mod, buffers' contents, q_start, kv_start, n_q and n_kv
     *  (CLATTN_ERROR_INVALID_ARGUMENT when the text, positions or sizes differ; contents
     *  of the buffers are the caller's to keep). NULL: every tile evaluated. */
    const clattn_block_mask *block_mask;
};

/**
 * Build a block mask (FlexAttention's BlockMask) on the device: for every 16 query rows ×
 * 16 keys of every (batch entry, query head), whether desc->mods->mask_mod is false for
 * all of them (empty), true for all (full), or mixed, evaluated once with desc's q_start,
 * kv_start and user buffers. Rows i ≥ n_q and keys j ≥ n_kv do not count. Only the snippet
 * is evaluated: the built-in rules (lengths, causal, window, mask tensors) keep their own
 * skipping. `batch` and `heads` may be 1 when mask_mod does not depend on b or h (it is
 * then evaluated with b = 0 or h = 0, and the flags are shared), else the call's batch and
 * h_q. Blocking: returns when the flags are built (one byte per block on the device).
 * Used by the fused algorithm's tiled kernels (both families); the decode kernels, the
 * unfused algorithm and the backward pass evaluate mask_mod as without it.
 * @return CLATTN_SUCCESS; CLATTN_ERROR_INVALID_ARGUMENT (no mask_mod, out NULL, a bad
 *         buffer: as clattn_mods), CLATTN_ERROR_INVALID_SHAPE (negative sizes),
 *         CLATTN_ERROR_BUILD_FAILED, CLATTN_ERROR_OUT_OF_DEVICE_MEMORY, CLATTN_ERROR_OPENCL.
 */
clattn_status clattn_block_mask_create(clattn_context *ctx, const clattn_attention_desc *desc,
                                       int64_t batch, int64_t heads, int64_t n_q, int64_t n_kv,
                                       clattn_block_mask **out);

/** The number of empty, partial and full 16×16 blocks of a block mask (any pointer may be
 *  NULL): how much a call can skip. @return CLATTN_SUCCESS, CLATTN_ERROR_INVALID_ARGUMENT
 *  (mask NULL), CLATTN_ERROR_OPENCL (reading the flags back failed). Blocking. */
clattn_status clattn_block_mask_counts(const clattn_block_mask *mask, int64_t *empty,
                                       int64_t *partial, int64_t *full);

/** Release a block mask (NULL is ignored). Calls that use it must have been enqueued
 *  before; the runtime keeps its flags until they finish. */
void clattn_block_mask_release(clattn_block_mask *mask);

#endif
