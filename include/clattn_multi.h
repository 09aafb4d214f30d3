/** @file
 * clattn's several-device layer: one attention call split over several OpenCL devices
 * (or sub-devices) in one process, by heads or by keys, merged exactly. Included by
 * clattn.h; the conventions of clattn.h apply. docs/SCALING.md describes it.
 */
#ifndef CLATTN_MULTI_H
#define CLATTN_MULTI_H

#include "clattn.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- Several devices --------------------------------------------------------------- */

/** Opaque: several clattn contexts (one device, cl_context and in-order queue each)
 *  that one attention call is split across, with a speed weight per device and the
 *  last error. Owned by the caller; free with clattn_multi_release(). Like a context,
 *  used by one host thread at a time. docs/SCALING.md describes the splits. */
typedef struct clattn_multi clattn_multi;

/**
 * One context per device spec ("P:D" or a device-name substring, as
 * clattn_context_options.device); the same device may be named twice (two queues on
 * it). Weights start equal.
 *
 * @param devices    n_devices non-NULL specs (read during the call only).
 * @param n_devices  ≥ 1.
 * @param out        receives the object; NULL on failure.
 * @return CLATTN_SUCCESS, CLATTN_ERROR_INVALID_ARGUMENT (out or devices NULL,
 *         n_devices 0), or a status of clattn_context_create() (NO_DEVICE, ...). The
 *         message is in clattn_last_error_message(NULL) for this thread.
 */
clattn_status clattn_multi_create(const char *const *devices, size_t n_devices, clattn_multi **out);

/**
 * Partition one device with clCreateSubDevices (OpenCL 1.2) and make one context per
 * sub-device: CL_DEVICE_PARTITION_BY_COUNTS when `compute_units` is given (n_sub counts,
 * each ≥ 1, summing to at most the device's compute units), else
 * CL_DEVICE_PARTITION_EQUALLY with ⌊compute units / n_sub⌋ each. The sub-devices are
 * released with the object. On a CPU this runs n_sub queues on disjoint cores.
 *
 * @param device         a device spec as clattn_context_options.device (NULL: the default).
 * @param n_sub          ≥ 1 sub-devices (at most 64).
 * @param compute_units  NULL (equal parts) or n_sub compute-unit counts (read during the
 *                       call only).
 * @param out            receives the object; NULL on failure.
 * @return CLATTN_SUCCESS, CLATTN_ERROR_INVALID_ARGUMENT (out NULL, n_sub 0, a count
 *         of 0), CLATTN_ERROR_UNSUPPORTED (the device cannot be partitioned that way:
 *         too few compute units, or no support; the message names the OpenCL error),
 *         NO_PLATFORM, NO_DEVICE, OUT_OF_HOST_MEMORY or CLATTN_ERROR_OPENCL. The message
 *         is in clattn_last_error_message(NULL).
 */
clattn_status clattn_multi_create_sub_devices(const char *device, size_t n_sub,
                                              const unsigned *compute_units, clattn_multi **out);

/** Release the object, its contexts and its sub-devices (each context's queue is
 *  finished first). Accepts NULL. Returns nothing: it cannot fail. */
void clattn_multi_release(clattn_multi *multi);

/** @return the number of devices (0 for NULL). */
size_t clattn_multi_device_count(const clattn_multi *multi);

/** The context of device i. @return it (borrowed: do not release; valid until
 *  clattn_multi_release); NULL when multi is NULL or i is out of range. */
clattn_context *clattn_multi_context(const clattn_multi *multi, size_t i);

/** The message of the last failed call on multi, prefixed by the device it came from.
 *  @return e.g. "device 1 (cpu): ..."; "" when nothing failed. With multi NULL: as
 *  clattn_last_error_message(NULL). Valid until the next call on multi. */
const char *clattn_multi_last_error_message(const clattn_multi *multi);

/**
 * Set the relative speed of each device: device i receives a share weights[i] / Σ
 * weights of every split (0: nothing). NULL: equal weights.
 *
 * @param multi    the object.
 * @param weights  n = clattn_multi_device_count() finite values ≥ 0, at least one > 0.
 * @return CLATTN_SUCCESS or CLATTN_ERROR_INVALID_ARGUMENT (multi NULL, a bad value).
 */
clattn_status clattn_multi_set_weights(clattn_multi *multi, const double *weights);

/** Copy the current weights (normalised to sum to 1) into weights[0..n).
 *  @return CLATTN_SUCCESS, or CLATTN_ERROR_INVALID_ARGUMENT when an argument is NULL. */
clattn_status clattn_multi_get_weights(const clattn_multi *multi, double *weights);

/**
 * Measure each device's speed and set the weights to 1 / seconds. Blocking; runs the
 * devices one after the other, so each is timed alone: one warm-up (builds the
 * programs) and then `repeats` timed fused calls of [1, 8, 256, 64] × 256 keys (no
 * mask), wall-clock per device. Takes about a second on a 2-core CPU.
 *
 * @param multi    the object.
 * @param repeats  ≥ 1 (0 means 3).
 * @param seconds  optional: receives the mean seconds per call of each device.
 * @return CLATTN_SUCCESS or a status of clattn_attention() (message on multi).
 */
clattn_status clattn_multi_calibrate(clattn_multi *multi, unsigned repeats, double *seconds);

/** How clattn_multi_attention() divides the work. */
typedef enum clattn_split {
    /** By (batch, KV head): the b·h_kv units, in order b-major, are cut into
     *  contiguous runs, one per device, sized by the weights; each unit takes its
     *  h_q / h_kv query heads with it (grouped-query heads stay with their KV head).
     *  Each device computes its share of O exactly as one device would: no merge. */
    CLATTN_SPLIT_HEADS = 0,
    /** By keys of one sequence: keys [0, n_kv) are cut into contiguous blocks sized by
     *  the weights; device i attends every query to its block with kv_start moved to
     *  the block's first key (so causal masks, windows and ALiBi see absolute
     *  positions), returning a partial (O_i, LSE_i: float64 with cl_khr_fp64); the
     *  parts are merged on the host in float64 (log-sum-exp merge). A device whose block
     *  is masked for every query row (e.g. right of a causal diagonal) enqueues
     *  nothing. */
    CLATTN_SPLIT_KEYS = 1
} clattn_split;

/** What each device did in the last successful clattn_multi_attention(). */
typedef struct clattn_multi_part {
    /** First unit of b·h_kv (SPLIT_HEADS) or first key (SPLIT_KEYS) of the device's
     *  range [begin, end). */
    int64_t begin;
    /** One past the last unit or key of the range; begin == end: no share. */
    int64_t end;
    /** 1 when work was enqueued on the device; 0 when its range was empty or (keys)
     *  fully masked. */
    int ran;
    /** Attention calls enqueued (SPLIT_HEADS cuts a run into at most 3 rectangles). */
    int calls;
} clattn_multi_part;

/**
 * Blocking attention on host views, split across the devices. Shapes, semantics and
 * the desc as clattn_attention(); the result equals one device's within float32
 * rounding (SPLIT_HEADS: the same kernels on the same rows; SPLIT_KEYS: the merge
 * reorders the sum over keys). Every device's inputs are staged, its calls enqueued
 * with clattn_attention_enqueue() and its outputs read back without blocking; the
 * host waits for all devices' events once, at the end, so the queues run
 * concurrently. O may share storage with an input (inputs are staged first).
 *
 * Not supported (CLATTN_ERROR_UNSUPPORTED, before anything runs): desc->weights with
 * weights_head_mean under SPLIT_HEADS; under SPLIT_KEYS desc->weights,
 * masked_rows = CLATTN_MASKED_ROWS_NAN, and CAUSAL_BOTTOM_RIGHT together with
 * kv_lens or q_lens (its diagonal then depends on the batch entry; without lengths
 * it is run as top-left with q_start moved by n_kv − n_q).
 *
 * @param multi  the object.
 * @param split  CLATTN_SPLIT_HEADS or CLATTN_SPLIT_KEYS.
 * @param desc   as clattn_attention() (host views for its optional tensors).
 * @param q      host view [b, h_q, n_q, d_k].
 * @param k      host view [b, h_kv, n_kv, d_k].
 * @param v      host view [b, h_kv, n_kv, d_v].
 * @param o      host view [b, h_q, n_q, d_v].
 * @param parts  optional: receives clattn_multi_device_count() entries.
 * @return as clattn_attention(); CLATTN_ERROR_INVALID_ARGUMENT also for an unknown
 *         split. The message, naming the device, is in
 *         clattn_multi_last_error_message(multi).
 */
clattn_status clattn_multi_attention(clattn_multi *multi, clattn_split split,
                                     const clattn_attention_desc *desc, const clattn_tensor *q,
                                     const clattn_tensor *k, const clattn_tensor *v,
                                     const clattn_tensor *o, clattn_multi_part *parts);

#ifdef __cplusplus
}
#endif
#endif
