/* The dimension order of the command line's Q, K, V, O and their kin (`--layout` of
 * `clattn run` and `clattn heatmap`): bhsd, (b, h, n, d) as PyTorch SDPA, or bshd,
 * (b, n, h, d) as FlashAttention. The rule lives in layout_dim; the rest derive from it. */
#ifndef CLATTN_TOOLS_LAYOUT_H
#define CLATTN_TOOLS_LAYOUT_H

#include "clattn.h"

#include <stddef.h>
#include <stdint.h>

/* The help's and messages' description of the names. */
#define LAYOUT_CHOICES "bhsd: (b, h, n, d), PyTorch's; bshd: (b, n, h, d), FlashAttention's"

/* 0 for "bhsd", 1 for "bshd", -1 for any other text. */
int layout_parse(const char *text);
/* The dimension of [b, h, n, d] (0..3) that axis `axis` of an array of rank ndim holds.
 * bhsd (bshd 0): the last ndim of (b, h, n, d); bshd: (b, n, h, d) and (n, h, d) at
 * ranks 4 and 3, (n, d) at rank 2. */
int layout_dim(int bshd, int ndim, int axis);
/* "(x, y, …)": the last ndim of names[4] ([b, h, n, d] order) in the layout's order,
 * into buf (its size `size`); returns buf. */
const char *layout_text(int bshd, int ndim, const char *const names[4], char *buf, size_t size);
/* "(n, d), (h, n, d) or (b, h, n, d)" in the layout's order, into buf; returns buf. */
const char *layout_ranks(int bshd, char *buf, size_t size);
/* The end of a shape message: how bshd read the heads, or "" for bhsd. */
const char *layout_hint(int bshd);
/* Q's and K's head counts (from their [b, h, n, d] shapes) as attention needs them: each
 * at least 1, h_q a multiple of h_kv. 1, or 0 after a message (cli_error) naming the
 * files, and for bshd how the layout read them. */
int layout_check_heads(const char *q_path, int64_t h_q, const char *k_path, int64_t h_kv, int bshd);
/* The 4-D shape [b, h, n, d] of an array of rank ndim laid out as `bshd` says
 * (dimensions it lacks are 1). */
void shape4(const int64_t *shape, int ndim, int bshd, int64_t out[4]);
/* A host view [b, h, n, d] on packed data of a shape of rank 1..4 laid out as `bshd`
 * says (strides where bshd; packed, strides 0, otherwise). */
clattn_tensor host_view(void *data, const int64_t *shape, int ndim, clattn_dtype dtype, int bshd);
/* View t narrowed to batch entry b and head h: shape [1, 1, n, d], strides explicit. */
clattn_tensor view_slice(clattn_tensor t, int64_t b, int64_t h);

#endif
