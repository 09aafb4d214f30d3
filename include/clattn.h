/** @file
 * clattn — scaled dot-product attention on any OpenCL device.
 *
 *     O = softmax(scale · Q·Kᵀ + mask) · V      (softmax over keys, per query row)
 *
 * For every (batch, head): Q is n_q×d_k, K is n_kv×d_k, V is n_kv×d_v, O is n_q×d_v.
 * The default scale is 1/√d_k (Vaswani et al. 2017, "Attention Is All You Need").
 *
 * Conventions used throughout this header:
 *  - Sizes, strides and offsets are in ELEMENTS, never bytes, unless a name ends in
 *    `_bytes`.
 *  - Every fallible call returns a clattn_status; CLATTN_SUCCESS is 0. Results go to
 *    out-parameters. The library never aborts, exits or prints.
 *  - Arguments are validated before anything is enqueued: when a call fails
 *    validation, nothing is enqueued and no output byte is written.
 *  - A clattn_context is not thread-safe: use one context per host thread (contexts
 *    may share one OpenCL device).
 */
#ifndef CLATTN_H
#define CLATTN_H

#include <stddef.h>
#include <stdint.h>

/* clattn uses OpenCL 1.2 but leaves the includer's OpenCL API alone: define
 * CL_TARGET_OPENCL_VERSION before this header to choose it; undefined, it is 300. */
#ifndef CL_TARGET_OPENCL_VERSION
#define CL_TARGET_OPENCL_VERSION 300
#endif
#include <CL/cl.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The one place the version lives; CMake reads it from here. */
#define CLATTN_VERSION_MAJOR 0        /**< major version (incompatible API changes) */
#define CLATTN_VERSION_MINOR 3        /**< minor version */
#define CLATTN_VERSION_PATCH 0        /**< patch version */
#define CLATTN_VERSION_STRING "0.3.0" /**< "MAJOR.MINOR.PATCH" */
/** The library's version. @return "MAJOR.MINOR.PATCH" (static storage; never NULL). */
const char *clattn_version(void);

/**
 * Status codes. Values are explicit and append-only: a value never changes meaning.
 */
typedef enum clattn_status {
    CLATTN_SUCCESS = 0,
    /** A required pointer is NULL, or an enum value is unknown. */
    CLATTN_ERROR_INVALID_ARGUMENT = 1,
    /** Shapes disagree (e.g. "K has 5 rows, V has 6") or a size is negative. */
    CLATTN_ERROR_INVALID_SHAPE = 2,
    /** Strides/offsets are negative, make the output overlap itself, or a tensor
     *  has no storage of the kind the call needs (host pointer vs cl_mem). */
    CLATTN_ERROR_INVALID_LAYOUT = 3,
    /** A size, element count or byte count overflows 64-bit (or size_t) arithmetic. */
    CLATTN_ERROR_SIZE_OVERFLOW = 4,
    /** The request is valid but this algorithm or device cannot honour it. */
    CLATTN_ERROR_UNSUPPORTED = 5,
    /** No OpenCL platform is installed (install pocl-opencl-icd or a GPU driver). */
    CLATTN_ERROR_NO_PLATFORM = 6,
    /** A platform exists but has no device, or CLATTN_DEVICE / the device option
     *  matches no device. */
    CLATTN_ERROR_NO_DEVICE = 7,
    /** A kernel program failed to build; the build log is in the last-error text. */
    CLATTN_ERROR_BUILD_FAILED = 8,
    /** Host memory allocation failed. */
    CLATTN_ERROR_OUT_OF_HOST_MEMORY = 9,
    /** The device could not allocate a buffer or ran out of resources. */
    CLATTN_ERROR_OUT_OF_DEVICE_MEMORY = 10,
    /** A cl_mem is smaller than the view placed on it (CL_MEM_SIZE). */
    CLATTN_ERROR_BUFFER_TOO_SMALL = 11,
    /** Any other OpenCL failure; the raw cl_int is kept on the context. */
    CLATTN_ERROR_OPENCL = 12,
    /** Reading kernel sources from CLATTN_KERNEL_DIR failed. */
    CLATTN_ERROR_IO = 13
} clattn_status;

/** A short English name for a status. @return e.g. "invalid shape" (static storage;
 *  never NULL; unknown values give "unknown status"). */
const char *clattn_status_string(clattn_status status);

/* ---- Context ----------------------------------------------------------------------- */

/** Opaque: an OpenCL device, its context and in-order queue, the program cache and
 *  the last error. Owned by the caller; free with clattn_context_release(). */
typedef struct clattn_context clattn_context;

/** clattn_context_options.binary_cache: whether the program cache keeps binaries. */
typedef enum clattn_binary_cache {
    /** On, except where the OpenCL runtime keeps its own cache of builds by source and
     *  options: PoCL with its kernel cache on (the environment variable
     *  POCL_KERNEL_CACHE unset or not 0), whose rebuild of a program it has built
     *  before takes milliseconds, while handing clattn the binary (CL_PROGRAM_BINARIES)
     *  compiles every kernel of the program once more (about 3.5 s of a 5.7 s first
     *  build of the fused kernel on a 2-core Xeon). */
    CLATTN_BINARY_CACHE_AUTO = 0,
    CLATTN_BINARY_CACHE_ON = 1,  /**< always, on every runtime */
    CLATTN_BINARY_CACHE_OFF = 2, /**< never (the folder still keeps the tuning) */
} clattn_binary_cache;

/** Options of clattn_context_create(); zero-initialise, NULL fields take defaults. */
typedef struct clattn_context_options {
    /** Which device: "P:D" (platform index P, device index D, both from 0, as
     *  `clattn devices` lists them) or a case-insensitive substring of the device
     *  name. NULL: the CLATTN_DEVICE environment variable, else the first GPU of any
     *  platform, else the first device of any type; a simulator (oclgrind, which
     *  reports itself as a GPU) only when it is the one device, or named. */
    const char *device;
    /** Folder of .cl files to load instead of the sources embedded at build time
     *  (kernel development). NULL: the CLATTN_KERNEL_DIR environment variable, else
     *  the embedded sources. */
    const char *kernel_dir;
    /** Folder of the persistent program-binary cache: built kernels are saved there per
     *  (clattn version, device, driver, build options, sources) and reused by later
     *  processes; corrupt or foreign files are ignored and rebuilt. NULL: the
     *  CLATTN_CACHE_DIR environment variable, else $XDG_CACHE_HOME/clattn, else
     *  ~/.cache/clattn. "" or "off" disables it. Failures to read or write it are never
     *  errors. The folder also keeps the tuning `clattn tune` stores; whether it keeps
     *  program binaries is `binary_cache`. */
    const char *cache_dir;
    /** Whether built programs are saved to and loaded from `cache_dir` as binaries.
     *  Added in 0.3. */
    clattn_binary_cache binary_cache;
} clattn_context_options;

/**
 * Create a context on one device, with its own cl_context and an in-order command
 * queue with profiling enabled.
 *
 * @param options  may be NULL (all defaults).
 * @param out      receives the new context; set to NULL on failure.
 * @return CLATTN_SUCCESS, CLATTN_ERROR_INVALID_ARGUMENT (out is NULL, or an unknown
 *         options->binary_cache), CLATTN_ERROR_NO_PLATFORM, CLATTN_ERROR_NO_DEVICE,
 *         CLATTN_ERROR_OUT_OF_HOST_MEMORY or CLATTN_ERROR_OPENCL. On failure, a
 *         message is available from clattn_last_error_message(NULL) for this thread.
 */
clattn_status clattn_context_create(const clattn_context_options *options, clattn_context **out);

/**
 * Wrap an application's existing OpenCL objects. The context retains `context` and
 * `queue` and releases them in clattn_context_release(), which first waits for the
 * queue to finish (clFinish) — the caller's own commands on it included — and then
 * drops only clattn's references: the caller's queue and context stay valid. The caller
 * keeps its own references. The queue may be in-order or out-of-order: clattn orders
 * its own kernels with events. clattn never calls clFlush or clFinish on the queue
 * during a call of the *_enqueue family (the blocking calls wait for their own events
 * only); flush it yourself if another queue or the host waits on clattn's events. The
 * environment (CLATTN_KERNEL_DIR, CLATTN_CACHE_DIR, CLATTN_TUNE, CLATTN_BLOCKING) is
 * read once, here, as for clattn_context_create().
 *
 * @return CLATTN_SUCCESS; CLATTN_ERROR_INVALID_ARGUMENT (a NULL argument, or a queue
 *         of another device or context); CLATTN_ERROR_OUT_OF_HOST_MEMORY;
 *         CLATTN_ERROR_OPENCL (a query of the objects failed). The message is in
 *         clattn_last_error_message(NULL).
 */
clattn_status clattn_context_create_from_cl(cl_context context, cl_device_id device,
                                            cl_command_queue queue, clattn_context **out);

/**
 * clattn_context_create_from_cl() with the options of clattn_context_create():
 * `options->kernel_dir` and `options->cache_dir` apply as there (NULL fields, or NULL
 * options: the environment, then the defaults); `options->device` is ignored (the
 * device is given). Added in 0.3 (append-only: clattn_context_create_from_cl keeps its
 * signature).
 * @return as clattn_context_create_from_cl().
 */
clattn_status clattn_context_create_from_cl_with_options(const clattn_context_options *options,
                                                         cl_context context, cl_device_id device,
                                                         cl_command_queue queue,
                                                         clattn_context **out);

/** Release a context and all it owns (programs, the kept unfused workspace, references
 *  to the cl_context and queue). Accepts NULL. Blocks until the context's queue has
 *  finished (clFinish). Returns nothing: it cannot fail. */
void clattn_context_release(clattn_context *ctx);

/** The message of the last failed call on this context (or, with ctx NULL, of the
 *  last failed call without a context on this thread: context creation, the reference,
 *  clattn_visible_keys). Names the failing argument and the numbers; includes the build
 *  log when a program failed to build.
 *  @return the message; "" when nothing failed. Valid until the next call on the same
 *  context (or thread). */
const char *clattn_last_error_message(const clattn_context *ctx);

/** The raw OpenCL error code behind the last failure on ctx.
 *  @return that code; CL_SUCCESS if the last failure was not an OpenCL error, or ctx
 *  is NULL. */
cl_int clattn_last_cl_error(const clattn_context *ctx);

/** The file where clattn_context_store_blocking() (and so `clattn tune`) stores this
 *  device's measured blocking and from which contexts on the device read it when they
 *  are created (in the program-binary cache folder, named by a hash of the device,
 *  driver and clattn version). CLATTN_TUNE=off makes contexts ignore the file.
 *  @return the path (borrowed; valid until the context is released); NULL when the
 *  cache is disabled or ctx is NULL. */
const char *clattn_context_tuning_file(const clattn_context *ctx);

/** The OpenCL objects a context uses (borrowed: do not release them). Any out
 *  pointer may be NULL. @return CLATTN_SUCCESS, or CLATTN_ERROR_INVALID_ARGUMENT when
 *  ctx is NULL. */
clattn_status clattn_context_get_cl(const clattn_context *ctx, cl_context *context,
                                    cl_device_id *device, cl_command_queue *queue);

/** The status clattn returns for an OpenCL error code: CL_MEM_OBJECT_ALLOCATION_FAILURE,
 *  CL_OUT_OF_RESOURCES and CL_INVALID_BUFFER_SIZE → CLATTN_ERROR_OUT_OF_DEVICE_MEMORY,
 *  CL_OUT_OF_HOST_MEMORY → CLATTN_ERROR_OUT_OF_HOST_MEMORY, CL_SUCCESS →
 *  CLATTN_SUCCESS, anything else → CLATTN_ERROR_OPENCL. The one mapping every layer
 *  (the core, the several-device layer, clattn-mpi) uses.
 *  @return the mapped status. */
clattn_status clattn_status_from_cl(cl_int err);

/* ---- Tuning (the tiled kernels' blocking) and kernel families: clattn_tuning.h ---- */
#include "clattn_tuning.h"

/* ---- Tensors ----------------------------------------------------------------------- */

/** Storage types. Arithmetic is always float32 on the device (float64 in the
 *  reference); 16-bit types are converted on load and rounded to nearest-even on
 *  store. */
typedef enum clattn_dtype {
    /** IEEE binary32 (`float`). Q, K, V, O, scores, weights, LSE, float masks. */
    CLATTN_FLOAT32 = 0,
    /** IEEE binary16, 2 bytes per element (read with vload_half, core OpenCL 1.2).
     *  Q, K, V and O only. */
    CLATTN_FLOAT16 = 1,
    /** bfloat16: the high 16 bits of a float32, 2 bytes per element (uint16_t on the
     *  host). Q, K, V and O only. */
    CLATTN_BFLOAT16 = 2,
    /** One byte per element, nonzero = true (uint8_t / bool on the host). Boolean mask
     *  tensors only. */
    CLATTN_BOOL = 3,
    /** IEEE binary64 (`double`). LSE outputs and the LSE parts and output of
     *  clattn_merge only, on devices with cl_khr_fp64 (CLATTN_ERROR_UNSUPPORTED
     *  otherwise): the LSE of a row whose keys all lie far from it under ALiBi is about
     *  −slope·distance, where float32's spacing loses the differences a merge needs
     *  (case R17); in float64 a split equals one call. Added in 0.3. */
    CLATTN_FLOAT64 = 4,
    /** Signed 8-bit integers (int8_t): a quantized K or V cache only, each row's values
     *  times its float32 scale (clattn_attention_desc.k_scale, v_scale). Added in 0.3. */
    CLATTN_INT8 = 5,
    /** FP8 E4M3 (OCP 8-bit floating point, "e4m3fn": sign, 4 exponent bits of bias 7, 3
     *  mantissa bits; finite to ±448, no infinities, 0x7f/0xff NaN; uint8_t on the host):
     *  a K or V cache only, optionally times a float32 scale (k_scale, v_scale; usually one
     *  per head). Added in 0.3. */
    CLATTN_FLOAT8_E4M3 = 6,
    /** Signed 32-bit integers (int32_t): the snippets' user buffers only
     *  (clattn_mod_buffer). Added in 0.3. */
    CLATTN_INT32 = 7
} clattn_dtype;

/** Bytes per element of a dtype. @return 4, 2, 2, 1, 8, 1, 1 or 4; 0 for an unknown value. */
size_t clattn_dtype_size(clattn_dtype dtype);

/** Conversions between float32 and the 16-bit storage types, as the kernels do them:
 *  exact widening; narrowing rounds to nearest, ties to even, keeps NaN a NaN, and
 *  overflows to ±∞ (binary16 above 65504). @return the converted value (no failure). */
/** @{ */
float clattn_f16_to_f32(uint16_t h);
uint16_t clattn_f32_to_f16(float f);
float clattn_bf16_to_f32(uint16_t h);
uint16_t clattn_f32_to_bf16(float f);
/** @} */

/** FP8 E4M3 (CLATTN_FLOAT8_E4M3) to and from float32: exact widening (0x7f/0xff give
 *  NaN); narrowing rounds to nearest, ties to even, saturates to ±448 beyond the range
 *  (CUDA's __NV_SATFINITE) and keeps NaN a NaN. Added in 0.3. @return the value. */
/** @{ */
float clattn_fp8e4m3_to_f32(uint8_t x);
uint8_t clattn_f32_to_fp8e4m3(float f);
/** @} */

/**
 * A 4-D view [batch, heads, seq, dim] on host memory or on a cl_mem.
 *
 * Element (b, h, s, d) lives at index
 *     offset + b·strides[0] + h·strides[1] + s·strides[2] + d·strides[3]
 * of `host` or of `buffer`, in elements of `dtype` (so a byte offset is that index
 * times clattn_dtype_size(dtype)). strides all 0 means packed
 * row-major: {heads·seq·dim, seq·dim, dim, 1}. Strides must be ≥ 0. A stride of 0
 * on a dimension larger than 1 (reading one slice for every index of that dimension,
 * e.g. K/V shared by every batch entry, or a key-padding mask for every query) is an
 * explicit request: set CLATTN_BROADCAST(dim) in `broadcast`, otherwise the call
 * returns CLATTN_ERROR_INVALID_LAYOUT naming the tensor and dimension. Outputs never
 * broadcast.
 * Exactly one of `host` and `buffer` is set: the blocking calls take host views,
 * the *_enqueue calls take buffer views. The view does not own its storage.
 */
typedef struct clattn_tensor {
    int64_t shape[4];   /**< batch, heads, seq, dim (elements) */
    int64_t strides[4]; /**< elements; all 0 = packed */
    int64_t offset;     /**< elements from the start of host / buffer */
    clattn_dtype dtype; /**< storage type; 0 = CLATTN_FLOAT32 */
    void *host;         /**< host storage (blocking API) or NULL */
    cl_mem buffer;      /**< device storage (enqueue API) or NULL */
    /** Bit CLATTN_BROADCAST(d) set: dimension d (0 batch, 1 heads, 2 seq, 3 dim) may
     *  have stride 0 with extent > 1, an input read repeatedly. 0 (the default): none.
     *  Added in 0.3. */
    uint32_t broadcast;
} clattn_tensor;

#define CLATTN_BROADCAST(d) (1u << (d)) /**< clattn_tensor.broadcast bit of dimension d */

/** A packed float32 view on host memory (set .dtype afterwards for other types).
 *  @return the view (nothing is checked until a call uses it). */
clattn_tensor clattn_tensor_host(void *data, int64_t batch, int64_t heads, int64_t seq,
                                 int64_t dim);
/** A packed float32 view on a cl_mem (set .dtype afterwards for other types).
 *  @return the view (nothing is checked until a call uses it). */
clattn_tensor clattn_tensor_buffer(cl_mem buffer, int64_t batch, int64_t heads, int64_t seq,
                                   int64_t dim);

/* ---- Attention --------------------------------------------------------------------- */

/** Built-in masks: which keys each query sees. */
typedef enum clattn_mask {
    /** Every key visible. */
    CLATTN_MASK_NONE = 0,
    /** Key j visible to query i iff j ≤ i (PyTorch is_causal). */
    CLATTN_MASK_CAUSAL_TOP_LEFT = 1,
    /** Key j visible iff j ≤ i + n_kv − n_q (FlashAttention ≥ 2.1, KV-cache decode). */
    CLATTN_MASK_CAUSAL_BOTTOM_RIGHT = 2,
    /** Key j visible iff j ≠ i: no query attends its own position (seed 003). */
    CLATTN_MASK_NO_SELF = 3
} clattn_mask;

/** Which algorithm computes the attention. */
typedef enum clattn_algorithm {
    /** FUSED unless attention weights are requested (UNFUSED computes them once, FUSED
     *  would need a second pass) or the fused kernel cannot run the shape on this device
     *  (head dims above 4096, or 16 rows of K and V exceeding its local memory); then
     *  UNFUSED if its n_q×n_kv workspace fits. clattn_attention_plan() says which and
     *  why, and why the other was rejected. */
    CLATTN_ALGORITHM_AUTO = 0,
    /** Three kernels: scores (tiled Q·Kᵀ), softmax (row reduction), weighted sum
     *  (tiled W·V); needs an n_q×n_kv workspace per (batch, head). */
    CLATTN_ALGORITHM_UNFUSED = 1,
    /** One kernel with online softmax (Milakov & Gimelshein 2018; Dao et al. 2022);
     *  never stores the n_q×n_kv matrix. */
    CLATTN_ALGORITHM_FUSED = 2
} clattn_algorithm;

/** What a query row with no visible key outputs (clattn_attention_desc.masked_rows). */
typedef enum clattn_masked_rows {
    CLATTN_MASKED_ROWS_ZERO = 0, /**< O = 0, weights 0 (PyTorch from 2.5; its math backend
                                      gave NaN before) */
    CLATTN_MASKED_ROWS_NAN = 1   /**< O and weights NaN, to detect such rows */
} clattn_masked_rows;

/* The KV-cache options of a desc (added in 0.3), defined in clattn_kvcache.h: */
typedef struct clattn_paged_kv clattn_paged_kv; /**< paged K/V: pools and a block table */
typedef struct clattn_varlen clattn_varlen;     /**< packed variable-length batches */
typedef struct clattn_rotary clattn_rotary;     /**< rotary position embeddings */
typedef struct clattn_mods clattn_mods;         /**< score and mask snippets */

/** What to compute. Zero-initialise (or use clattn_attention_desc_default()) and set
 *  what you need; fields will only ever be appended. */
typedef struct clattn_attention_desc {
    /** Multiplies Q·Kᵀ. 0 means 1/√d_k. Must be finite. */
    float scale;
    clattn_mask mask;           /**< built-in mask; CLATTN_MASK_NONE by default */
    clattn_algorithm algorithm; /**< CLATTN_ALGORITHM_AUTO by default */
    /** Optional output: the attention weights W = softmax(...), float32, shape
     *  [batch, heads_q, n_q, n_kv] (or [batch, 1, n_q, n_kv] with weights_head_mean),
     *  same storage kind as O (host or buffer). Both algorithms return them: UNFUSED
     *  keeps its softmax output; FUSED runs a second pass W = exp(S − LSE) from its
     *  LSE. NULL: not computed. */
    const clattn_tensor *weights;
    /** Work-group size for the row-reduction (softmax) kernel and the number of queries
     *  per work-group of the fused kernel (its tiled kernel then runs even for n_q ≤ 16).
     *  0 = chosen from the device and kernel limits. A size above
     *  CL_KERNEL_WORK_GROUP_SIZE returns CLATTN_ERROR_UNSUPPORTED naming the limit. */
    size_t work_group_size;

    /* ---- Fields below were added in 0.2. Every term combines with every other: a key
     * is visible to a query only if every mask says so; the score of a visible key is
     *     s = softcap(scale · q·k) − alibi_slope·|a_i − j| + float_mask[i][j].
     * Positions: query i and key j of this call sit at absolute positions q_start + i
     * and kv_start + j. The key aligned with query i ("its diagonal") is the local key
     *     a_i = i + q_start − kv_start + (mask == CAUSAL_BOTTOM_RIGHT ? n_kv_b − n_q_b : 0)
     * where n_q_b and n_kv_b are this batch entry's valid lengths (q_lens, kv_lens, or
     * n_q and n_kv). Causal masks keep j ≤ a_i; NO_SELF keeps j ≠ a_i; the window keeps
     * a_i − window_left ≤ j ≤ a_i + window_right. See docs/SEMANTICS.md. */

    /** Optional mask tensor [b|1, h_q|1, n_q, n_kv], broadcast over batch and heads
     *  where its dimension is 1 (any strides). dtype CLATTN_BOOL: nonzero = visible.
     *  dtype CLATTN_FLOAT32: added to the score (−∞ = masked; NaN poisons the row).
     *  Same storage kind as Q (host or buffer). NULL: none. */
    const clattn_tensor *mask_tensor;
    /** Optional, host array of `batch` valid key counts: keys j ≥ kv_lens[b] of batch
     *  entry b are masked (key padding), 0 ≤ kv_lens[b] ≤ n_kv. Read during the call
     *  only. NULL: every key valid. */
    const int32_t *kv_lens;
    /** Optional, host array of `batch` valid query counts, 0 ≤ q_lens[b] ≤ n_q. Rows
     *  i ≥ q_lens[b] are written as zeros in O and the weights, and −∞ in the LSE
     *  (never left uninitialised). NULL: every row valid. */
    const int32_t *q_lens;
    /** Nonzero enables the sliding window: keys a_i − window_left … a_i + window_right
     *  are visible; a negative bound is unbounded on that side (FlashAttention's
     *  window_size = (left, right) with −1 = unbounded). Zero (the default) = no window,
     *  so a zero-initialised desc stays "no window". */
    int window;
    int64_t window_left;  /**< keys visible before the diagonal; < 0 = unbounded */
    int64_t window_right; /**< keys visible after the diagonal; < 0 = unbounded */
    /** Optional, host array of h_q ALiBi slopes (Press et al. 2022): the score of key
     *  j for query i of head h gets −alibi_slopes[h]·|a_i − j|. Finite. NULL: none. */
    const float *alibi_slopes;
    /** Logit softcap (Gemma 2): scaled scores s → softcap·tanh(s / softcap), before
     *  masks and biases. 0 = off; otherwise finite and > 0. */
    float softcap;
    /** What a query row with no visible key outputs: CLATTN_MASKED_ROWS_ZERO (O = 0,
     *  weights 0) or CLATTN_MASKED_ROWS_NAN (O and weights NaN, to detect them). Its
     *  LSE is −∞ either way. */
    clattn_masked_rows masked_rows;
    /** Optional output: per query row, LSE = log Σ_j exp(s_ij) over the visible keys
     *  (natural log, of the scaled, capped, biased, masked scores), float32 (or
     *  CLATTN_FLOAT64 on devices with cl_khr_fp64), shape
     *  [batch, heads_q, n_q, 1]; −∞ for a row with no visible key. Same storage kind
     *  as O. Both algorithms. NULL: not computed. */
    const clattn_tensor *lse;
    /** With `weights`: nonzero returns the weights averaged over the query heads,
     *  shape [batch, 1, n_q, n_kv] (PyTorch MultiheadAttention's average_attn_weights). */
    int weights_head_mean;
    /** Absolute positions of this call's first query and first key (see above), for a
     *  slice of a longer sequence: split-KV decoding, ring attention, a KV cache. 0, 0
     *  for a whole sequence. */
    int64_t q_start;
    int64_t kv_start; /**< absolute position of the first key (see q_start) */
    /** Optional: K and V are pools of pages read through a block table (see
     *  clattn_paged_kv). NULL: K and V are [batch, h_kv, n_kv, d] views. Added in 0.3. */
    const clattn_paged_kv *paged;
    /** Optional, the *_enqueue calls only: kv_lens in a cl_mem (int32 [batch] from byte
     *  0), read by the kernels, so a decode step whose lengths live on the device needs
     *  no host read-back. Not checked on the host: the kernels clamp each length into
     *  0..n_kv (a host kv_lens outside it is an error instead). With paged K/V the host
     *  then cannot know which table entries are read, so a host block_table is not
     *  checked either (its entries are clamped like a device table's). At most one of
     *  kv_lens and kv_lens_buffer. Added in 0.3. */
    cl_mem kv_lens_buffer;
    /** Optional, the *_enqueue calls only: q_lens in a cl_mem (int32 [batch]), clamped
     *  into 0..n_q by the kernels. At most one of q_lens and q_lens_buffer. Added in
     *  0.3. */
    cl_mem q_lens_buffer;
    /** Optional: append this step's K and V rows into the cache before attending
     *  (FlashAttention's `k`, `v` arguments of `flash_attn_with_kvcache`): k_new
     *  [batch, h_kv, n_new, d_k] and v_new [batch, h_kv, n_new, d_v] (any float
     *  storage, same storage kind as Q). The desc's kv_lens (or kv_lens_buffer) must
     *  give the cache's lengths before the call (cache_seqlens): row t is written to
     *  key kv_lens[b] + t of K and V (through the block table when paged; converted to
     *  the cache's storage type), and the attention then sees kv_lens[b] + n_new keys of
     *  entry b. So K and V are written by the call: they must be writable views (no
     *  broadcast, no self-overlap); the blocking call copies them back to the host.
     *  Updating the lengths stays the caller's. Host lengths need kv_lens[b] + n_new ≤
     *  n_kv (CLATTN_ERROR_INVALID_SHAPE); lengths in a cl_mem are clamped, and rows
     *  that would land past n_kv are not written. Paged: two appended rows in one slot
     *  of the pool (tables naming one page there) are CLATTN_ERROR_INVALID_ARGUMENT with
     *  a host table and host lengths, unspecified otherwise (docs/SEMANTICS.md). Both
     *  or neither. Added in 0.3. */
    const clattn_tensor *k_new;
    const clattn_tensor *v_new; /**< see k_new */
    /** Optional: rotary embeddings of Q and of the appended K rows (needs k_new; see
     *  clattn_rotary). The cache keeps rotated keys, as FlashAttention's does. NULL:
     *  none. Added in 0.3. */
    const clattn_rotary *rotary;
    /** Optional: a packed batch of variable-length sequences (see clattn_varlen). NULL:
     *  the tensors' batch dimension is the batch. Added in 0.3. */
    const clattn_varlen *varlen;
    /** Optional, host array of h_q attention-sink logits (gpt-oss; Xiao et al. 2024,
     *  "Efficient Streaming Language Models with Attention Sinks"): each query row of
     *  head h gets one more key, of logit sinks[h] (not scaled, capped or biased) and of
     *  value zero, so softmax's denominator gains exp(sinks[h]) and a row's weights sum
     *  to less than 1; the LSE includes it. Each entry finite, or −∞ (that head has no
     *  sink). A row whose keys are all masked then outputs zeros with LSE = sinks[h]
     *  (the sink is visible), not the masked_rows fill; padding rows stay padding. Read
     *  during the call only. NULL: none. Added in 0.3. */
    const float *sinks;
    /** Optional output of the backward pass (clattn_backward.h), ignored by forward
     *  calls: ∂L/∂sinks, float32 [1, h_q, 1, 1], same storage kind as the gradients.
     *  Needs sinks; a head whose sink is −∞ gets 0. Added in 0.3. */
    const clattn_tensor *d_sinks;
    /** A quantized K/V cache (added in 0.3): with K of dtype CLATTN_INT8 (or
     *  CLATTN_FLOAT8_E4M3), key row j of batch entry b, KV head h holds k_q and means
     *  k_scale[b, h, j]·k_q (symmetric quantization; vLLM's and FlashInfer's
     *  per-token-head scales). A float32 view [b or 1, h_kv, n_kv or 1, 1] (an extent 1
     *  broadcasts: [1, h_kv, 1, 1] is one scale per head), same storage kind as K; with
     *  paged K/V a pool [num_pages or 1, h_kv, page_size or 1, 1] read through the same
     *  block table. Required with an int8 K, optional with an FP8 K (NULL: scale 1),
     *  refused with a float K. The fused algorithm only (both kernel families); no
     *  weights, backward, append or varlen
     *  (CLATTN_ERROR_UNSUPPORTED). See docs/SEMANTICS.md. */
    const clattn_tensor *k_scale;
    const clattn_tensor *v_scale; /**< the same for V (an int8 or FP8 V) */
    /** Dropout on the attention weights (training; PyTorch's and FlashAttention's
     *  `dropout_p`): 0 (the default) is none, otherwise in (0, 1). Weight P_ij is kept
     *  with probability 1 − p and scaled by 1/(1 − p), or dropped; the softmax sum, the
     *  LSE and the sinks are those before dropout. The bit of (b, h, i, j) is word
     *  j mod 4 of Philox4x32-10 (Salmon et al. 2011) with counter (⌊j/4⌋, i, b·h_q + h,
     *  dropout_offset) and key dropout_seed, kept iff ≥ ⌊p·2^32⌋: the same on every
     *  device, kernel and pass (clattn_dropout_mask, clattn_backward.h, returns it); not
     *  PyTorch's stream. Tiled kernels only; varlen, the several-device split, clattn-mpi
     *  and the stages refuse it (CLATTN_ERROR_UNSUPPORTED). The weights output holds
     *  P·Z/(1 − p). docs/SEMANTICS.md, "Dropout". Added in 0.3. */
    float dropout_p;
    /** The generator's key (see dropout_p); any value. Added in 0.3. */
    uint64_t dropout_seed;
    /** The generator's counter word 3 (see dropout_p): below 2^32. Calls that share a
     *  seed draw independent masks when their offsets differ (advance it per call, as
     *  PyTorch's Philox offset). Added in 0.3. */
    uint64_t dropout_offset;
    /** 1: batch-invariant (the bits of a row do not depend on the batch, the chunking or
     *  n_q: no decode kernels or split-KV; docs/SEMANTICS.md). 0 (default) or 1. 0.3. */
    int batch_invariant;
    /** Optional output (added in 0.3): the attention each key receives, Σ_i P_ij over the
     *  query rows i (H2O / SnapKV KV-cache eviction scores), from the fused path with no
     *  n_q×n_kv matrix: float32 [b, h, 1, n_kv], h = h_q (per query head) or h = h_kv
     *  (summed over each KV head's query heads). P are the weights the weights output
     *  would hold (sinks take their share); rows with no visible key and padding rows add
     *  nothing; keys past kv_lens get 0. Fused algorithm (AUTO keeps it); not with
     *  weights, dropout, an append, varlen or an int8/FP8 K (CLATTN_ERROR_UNSUPPORTED).
     *  The stages and the backward pass ignore it. docs/SEMANTICS.md, "Key weight sums". */
    const clattn_tensor *key_weight_sums;
    /** Optional: OpenCL C snippets that modify scores and mask keys, with their user
     *  buffers (clattn_mods.h). NULL: none. Added in 0.3. */
    const clattn_mods *mods;
    /** Optional output (added in 0.3): each query row's largest logit, max_j s_ij over the
     *  keys it sees, with s_ij the score its softmax takes (scale·q·k after softcap, ALiBi,
     *  the float mask and score_mod; not the sink) — the "max logit" QK-clip (MuonClip,
     *  Kimi K2) monitors; a head's maximum is the max over its rows. float32
     *  [b, h_q, n_q, 1], shaped as the LSE. −∞ for a row with no visible key and for
     *  padding rows; NaN when a score is NaN. From the fused path with no n_q×n_kv
     *  matrix: fused algorithm (AUTO keeps it), not split-KV; not with varlen, the
     *  several-device split or clattn-mpi (CLATTN_ERROR_UNSUPPORTED). The stages and
     *  the backward pass ignore it. docs/SEMANTICS.md, "Max logits". */
    const clattn_tensor *max_logits;
    /** 1: allow half arithmetic (added in 0.3), as PyTorch's
     *  allow_fp16_reduced_precision_reduction allows it: where the GPU kernel family's
     *  fused kernel runs (n_q > 16, or any n_q with dropout, batch_invariant or a
     *  work_group_size), the device has cl_khr_fp16 and Q, K and V are all float16 (no
     *  rotary Q, no int8/FP8 scales), Q·Kᵀ sums groups of 4 columns in half
     *  (|Δs| ≤ 3·2⁻¹¹·scale·Σ_c|q_c·k_c| + d_k·2⁻¹⁴·scale; a group sum must stay below
     *  65504) and keeps Q, K and V half in local memory; the softmax, P·V and O stay
     *  float32. Elsewhere float32 arithmetic, as with 0 (default); clattn_plan.reason
     *  says which. The weights pass, the stages and the backward pass compute in float32.
     *  docs/SEMANTICS.md, "Half arithmetic". 0 or 1. */
    int half_arithmetic;
} clattn_attention_desc;

/** The keys one query row sees under the positional terms of a desc (lengths, causal
 *  masks, window, NO_SELF): the one statement of that rule, shared by the kernels'
 *  host side, the CPU reference, the several-device layer, clattn-mpi and the CLI. */
typedef struct clattn_key_range {
    int64_t lo;   /**< first visible key (local index, 0 ≤ lo ≤ n_kv_b) */
    int64_t hi;   /**< one past the last visible key (lo ≤ hi ≤ n_kv_b) */
    int64_t self; /**< CLATTN_MASK_NO_SELF: the excluded key a_i (may lie outside
                       [lo, hi)); otherwise −1 */
    int64_t diag; /**< a_i, the key aligned with the query (see the desc) */
    int valid;    /**< 0 for a padding row (i ≥ q_lens[b]): it sees nothing */
} clattn_key_range;

/**
 * Which keys query row i of batch entry b sees: key j is visible iff valid, lo ≤ j <
 * hi and j ≠ self, and the mask tensor (if any) lets it through. Every sum of a
 * position and a bound saturates, so window bounds up to INT64_MAX (the usual "no
 * limit") and any q_start/kv_start within ±2^53 give the mathematically right range.
 * n_q and n_kv are the call's (unpadded) sizes; desc's kv_lens / q_lens, if set, are
 * read for entry b. @return CLATTN_SUCCESS; CLATTN_ERROR_INVALID_ARGUMENT for NULL
 * desc or out, b or i negative, i ≥ n_q, or desc terms clattn_attention() would
 * reject (q_start, kv_start, mask, lengths of entry b out of range), or lengths in a
 * cl_mem (kv_lens_buffer, q_lens_buffer).
 */
clattn_status clattn_visible_keys(const clattn_attention_desc *desc, int64_t n_q, int64_t n_kv,
                                  int64_t b, int64_t i, clattn_key_range *out);

/** A desc with every field at its default: scale 0 → 1/√d_k, no mask, AUTO, no
 *  window, no optional inputs or outputs (the same as zero-initialised).
 *  @return the desc. */
clattn_attention_desc clattn_attention_desc_default(void);

/**
 * Blocking attention on host memory: copies Q, K, V to the device, computes O (and
 * the weights if desc->weights is set), copies the result back and returns when it
 * is in host memory.
 *
 * Shapes: q [b, h_q, n_q, d_k], k [b, h_kv, n_kv, d_k], v [b, h_kv, n_kv, d_v],
 * o [b, h_q, n_q, d_v]; h_q must be a multiple of h_kv (MHA, GQA, MQA): query head h
 * reads key/value head h / (h_q / h_kv). n_q = 0 is a no-op; n_kv = 0 writes zero
 * rows. A query row with no visible key outputs zeros (and zero weights). Only the
 * elements of the O view are written; other elements of o->host are untouched.
 * Inputs are copied to the device first, so O may share storage with Q, K or V
 * (in place); O and the weights must not overlap each other (CLATTN_ERROR_INVALID_LAYOUT).
 * A score that overflows to −∞ in float32 counts as masked.
 *
 * @return CLATTN_SUCCESS, CLATTN_ERROR_INVALID_ARGUMENT, CLATTN_ERROR_INVALID_SHAPE,
 *         CLATTN_ERROR_INVALID_LAYOUT, CLATTN_ERROR_SIZE_OVERFLOW,
 *         CLATTN_ERROR_UNSUPPORTED, CLATTN_ERROR_BUILD_FAILED,
 *         CLATTN_ERROR_OUT_OF_HOST_MEMORY, CLATTN_ERROR_OUT_OF_DEVICE_MEMORY or
 *         CLATTN_ERROR_OPENCL. The message is in clattn_last_error_message(ctx).
 */
clattn_status clattn_attention(clattn_context *ctx, const clattn_attention_desc *desc,
                               const clattn_tensor *q, const clattn_tensor *k,
                               const clattn_tensor *v, const clattn_tensor *o);

/**
 * Asynchronous attention on the caller's cl_mem buffers (all views `buffer` views,
 * in the context's cl_context). Waits for `wait` (n_wait events) before starting;
 * if `done` is not NULL it receives an event that completes when O (and the
 * weights) are written; the caller releases it. Does not block; temporary device
 * buffers are released by the runtime once the kernels finish. The output views must
 * not overlap any input view or each other on the same cl_mem
 * (CLATTN_ERROR_INVALID_LAYOUT): the kernels read inputs while writing outputs.
 *
 * Build time: "does not block" is about the device. The first call that needs a
 * program (a new combination of head dims, dtypes, score terms and blocking) builds it
 * on the host, which takes about a second per program on PoCL (less from the
 * program-binary cache of an earlier process). To keep that out of a latency-critical
 * loop, call clattn_attention_plan() with the same views and desc first: it builds (or
 * loads) every program the call will need and enqueues nothing.
 *
 * @return as clattn_attention(); also CLATTN_ERROR_BUFFER_TOO_SMALL (a view reaches
 *         past its cl_mem).
 */
clattn_status clattn_attention_enqueue(clattn_context *ctx, const clattn_attention_desc *desc,
                                       const clattn_tensor *q, const clattn_tensor *k,
                                       const clattn_tensor *v, const clattn_tensor *o,
                                       cl_uint n_wait, const cl_event *wait, cl_event *done);

/* The three stages of the unfused algorithm on their own, as in the three lines
   S = Q·Kᵀ; W = softmax(S); O = W·V. Blocking forms take host views, *_enqueue forms
   take buffer views with the same event semantics as clattn_attention_enqueue().
   Each returns the statuses of clattn_attention() (and, enqueued,
   CLATTN_ERROR_BUFFER_TOO_SMALL). */

/** S = the scores of clattn_attention (scale·Q·Kᵀ, softcap, ALiBi, float mask) with
 *  masked entries set to −∞. q [b, h_q, n_q, d_k] and k [b, h_kv, n_kv, d_k] of any
 *  float dtype, scores float32 [b, h_q, n_q, n_kv]. Uses every score term and mask of
 *  the desc (mask, mask_tensor, kv_lens, q_lens, window, alibi_slopes, softcap,
 *  q_start, kv_start); its outputs (weights, lse) are ignored. */
/** @{ */
clattn_status clattn_scores(clattn_context *ctx, const clattn_attention_desc *desc,
                            const clattn_tensor *q, const clattn_tensor *k,
                            const clattn_tensor *scores);
clattn_status clattn_scores_enqueue(clattn_context *ctx, const clattn_attention_desc *desc,
                                    const clattn_tensor *q, const clattn_tensor *k,
                                    const clattn_tensor *scores, cl_uint n_wait,
                                    const cl_event *wait, cl_event *done);
/** @} */

/** W = softmax over the last dimension, subtracting the true row maximum. A row whose
 *  entries are all −∞ gives zeros; NaN propagates to its own row only; +∞ entries
 *  follow IEEE arithmetic (the row becomes NaN, as numpy and PyTorch do).
 *  scores and weights have the same shape [b, h, rows, width]; they may be the same
 *  view (in place). desc may be NULL; only desc->work_group_size is used. */
/** @{ */
clattn_status clattn_softmax(clattn_context *ctx, const clattn_attention_desc *desc,
                             const clattn_tensor *scores, const clattn_tensor *weights);
clattn_status clattn_softmax_enqueue(clattn_context *ctx, const clattn_attention_desc *desc,
                                     const clattn_tensor *scores, const clattn_tensor *weights,
                                     cl_uint n_wait, const cl_event *wait, cl_event *done);
/** @} */

/** O = W·V. weights [b, h_q, n_q, n_kv], v [b, h_kv, n_kv, d_v], o [b, h_q, n_q, d_v].
 *  Keys whose weight is exactly 0 contribute nothing, whatever their V values.
 *  desc may be NULL. */
/** @{ */
clattn_status clattn_weighted_sum(clattn_context *ctx, const clattn_attention_desc *desc,
                                  const clattn_tensor *weights, const clattn_tensor *v,
                                  const clattn_tensor *o);
clattn_status clattn_weighted_sum_enqueue(clattn_context *ctx, const clattn_attention_desc *desc,
                                          const clattn_tensor *weights, const clattn_tensor *v,
                                          const clattn_tensor *o, cl_uint n_wait,
                                          const cl_event *wait, cl_event *done);
/** @} */

/** What clattn_attention would run, and why. */
typedef struct clattn_plan {
    clattn_algorithm algorithm; /**< UNFUSED or FUSED: what will run */
    size_t workspace_bytes;     /**< device memory clattn allocates besides the operands */
    size_t work_group_size;     /**< softmax (unfused), fused or decode work-group size */
    /** rows per work-item (unfused: scores; decode.cl: of a KV head; the GPU family's
     *  split-KV decode: 1, its rows per work-group are in `reason`) */
    size_t queries_per_work_item;
    /** keys per tile (unfused: scores; decode.cl: per step, 16; split-KV decode: per
     *  step of its work-group) */
    size_t tile_kv;
    char reason[512]; /**< one line: why this algorithm (past 511 characters cut, ending "...") */
    /** The kernels that will run, in order, e.g. "scores, softmax, weighted_sum",
     *  "fused, scores, weights_from_lse" or "decode" (the fused algorithm for n_q <= 16);
     *  with no query rows "" (the call enqueues nothing but a marker) or "key_sums" (the
     *  key weight sums' zeros), as `reason` says, and work_group_size,
     *  queries_per_work_item and tile_kv 0. */
    char kernels[128];
    /** For each algorithm not chosen, why ("unfused: ...; fused: ..."); "" if the other
     *  algorithm could run too but was not preferred, as stated in `reason`. */
    char rejected[512];
} clattn_plan;

/** Plan without running: the named warm-up of a call. Same validation as
 *  clattn_attention (views may be host or buffer views); builds (or finds cached)
 *  every program the call will run, so a later call with the same shapes, dtypes and
 *  desc terms starts without a build. Enqueues nothing.
 *  @return the statuses of clattn_attention(), and CLATTN_ERROR_INVALID_ARGUMENT when
 *  out is NULL. */
clattn_status clattn_attention_plan(clattn_context *ctx, const clattn_attention_desc *desc,
                                    const clattn_tensor *q, const clattn_tensor *k,
                                    const clattn_tensor *v, const clattn_tensor *o,
                                    clattn_plan *out);

/**
 * Merge partial attention results computed over disjoint key ranges of the same
 * queries (split-KV decoding, several devices, ring attention) into the exact result
 * over all the keys:
 *     LSE = log Σ_p exp(LSE_p),   O = Σ_p exp(LSE_p − LSE) · O_p
 * Parts whose LSE is −∞ (no visible key in that range) contribute nothing, even if
 * their O rows hold NaN; a row with LSE −∞ in every part outputs zeros (LSE −∞).
 *
 * @param ctx        the context.
 * @param n_parts    number of parts, ≥ 1.
 * @param o_parts    n_parts views [b, h, n_q, d_v] (float32, float16 or bfloat16).
 * @param lse_parts  n_parts float32 or float64 views [b, h, n_q, 1], the parts' LSEs.
 * @param o          output [b, h, n_q, d_v], any of the three float types. It may be
 *                   the view of o_parts[0] (in place) and nothing else of the inputs.
 * @param lse        optional float32/float64 output [b, h, n_q, 1], may be lse_parts[0]; NULL:
 *                   not written.
 * Blocking on host views; clattn_merge_enqueue takes buffer views with the event
 * semantics of clattn_attention_enqueue().
 * @return the statuses of clattn_attention(); CLATTN_ERROR_INVALID_ARGUMENT also for
 *         n_parts outside 1..4096 or NULL part arrays.
 */
clattn_status clattn_merge(clattn_context *ctx, size_t n_parts, const clattn_tensor *o_parts,
                           const clattn_tensor *lse_parts, const clattn_tensor *o,
                           const clattn_tensor *lse);
/** clattn_merge() on buffer views: waits for the n_wait events of `wait`; `done`, if not
 *  NULL, receives an event that completes when O and the LSE are written.
 *  @return as clattn_merge(); also CLATTN_ERROR_BUFFER_TOO_SMALL. */
clattn_status clattn_merge_enqueue(clattn_context *ctx, size_t n_parts,
                                   const clattn_tensor *o_parts, const clattn_tensor *lse_parts,
                                   const clattn_tensor *o, const clattn_tensor *lse, cl_uint n_wait,
                                   const cl_event *wait, cl_event *done);

/**
 * The CPU reference: the same semantics as clattn_attention (masks, GQA, empty rows,
 * strides, every field of the desc, every dtype) on host views, accumulating every
 * sum in double and rounding only the stored results to their dtype. Single-threaded;
 * no OpenCL needed. desc->weights, desc->lse and desc->mask_tensor, if set, must be
 * host views. desc->algorithm and work_group_size are ignored.
 * @return CLATTN_SUCCESS or a validation status (no context: no message).
 */
clattn_status clattn_reference_attention(const clattn_attention_desc *desc, const clattn_tensor *q,
                                         const clattn_tensor *k, const clattn_tensor *v,
                                         const clattn_tensor *o);

/**
 * The CPU reference of clattn_scores(): S = softcap(scale·Q·Kᵀ) − slope·|a_i − j| + float
 * mask for the visible keys, −∞ for the others (every mask term of the desc, padding
 * rows included), each element computed in double and rounded once to float32. q
 * [b, h_q, n_q, d_k] and k [b, h_kv, n_kv, d_k] of any float dtype, scores float32
 * [b, h_q, n_q, n_kv]; host views. Added in 0.3.
 * @return CLATTN_SUCCESS or a validation status (message: clattn_last_error_message(NULL)).
 */
clattn_status clattn_reference_scores(const clattn_attention_desc *desc, const clattn_tensor *q,
                                      const clattn_tensor *k, const clattn_tensor *scores);

#ifdef __cplusplus
}
#endif
#include "clattn_backward.h" /* the backward pass: gradients for training */
#include "clattn_kvcache.h"  /* paged K/V, varlen batches, rotary embeddings */
#include "clattn_mods.h"     /* score and mask snippets */
#include "clattn_multi.h"    /* several devices in one process */
#endif                       /* CLATTN_H */
