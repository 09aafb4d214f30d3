"""The C library through ctypes: loading libclattn, the public structs of
include/clattn.h, and the prototypes of the functions the package calls.

Nothing here is public. The structs mirror clattn.h field by field (ctypes applies the
platform's C alignment rules); python/tests/test_abi.py compiles a C program that
prints the C offsets and compares them with these.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
from pathlib import Path

c_int64 = ctypes.c_int64
c_void_p = ctypes.c_void_p

# clattn_status values (clattn.h)
SUCCESS = 0
INVALID_ARGUMENT = 1
INVALID_SHAPE = 2
INVALID_LAYOUT = 3
SIZE_OVERFLOW = 4
UNSUPPORTED = 5
NO_PLATFORM = 6
NO_DEVICE = 7
BUILD_FAILED = 8
OUT_OF_HOST_MEMORY = 9
OUT_OF_DEVICE_MEMORY = 10
BUFFER_TOO_SMALL = 11
OPENCL = 12
IO = 13

# clattn_dtype (INT8: a quantized K or V, with the desc's k_scale / v_scale)
FLOAT32, FLOAT16, BFLOAT16, BOOL, FLOAT64, INT8 = 0, 1, 2, 3, 4, 5
INT32 = 7  # the snippets' user buffers only
# clattn_mask
MASK_NONE, MASK_CAUSAL_TOP_LEFT, MASK_CAUSAL_BOTTOM_RIGHT, MASK_NO_SELF = 0, 1, 2, 3
# clattn_algorithm
ALGORITHM_AUTO, ALGORITHM_UNFUSED, ALGORITHM_FUSED = 0, 1, 2
# clattn_masked_rows
MASKED_ROWS_ZERO, MASKED_ROWS_NAN = 0, 1


class Tensor(ctypes.Structure):
    """clattn_tensor: a 4-D view [batch, heads, seq, dim], sizes in elements."""

    _fields_ = [
        ("shape", c_int64 * 4),
        ("strides", c_int64 * 4),
        ("offset", c_int64),
        ("dtype", ctypes.c_int),
        ("host", c_void_p),
        ("buffer", c_void_p),
        ("broadcast", ctypes.c_uint32),
    ]


class ModBuffer(ctypes.Structure):
    """clattn_mod_buffer."""

    _fields_ = [
        ("dtype", ctypes.c_int),
        ("count", ctypes.c_int64),
        ("host", ctypes.c_void_p),
        ("buffer", ctypes.c_void_p),
    ]


# the C twins of the snippets, for the reference (the package leaves them NULL)
SCORE_MOD_HOST = ctypes.CFUNCTYPE(ctypes.c_double, ctypes.c_double, ctypes.c_int, ctypes.c_int,
                                  ctypes.c_int64, ctypes.c_int64,
                                  ctypes.POINTER(ctypes.c_void_p), ctypes.c_void_p)
MASK_MOD_HOST = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_int64,
                                 ctypes.c_int64, ctypes.POINTER(ctypes.c_void_p), ctypes.c_void_p)


class Mods(ctypes.Structure):
    """clattn_mods."""

    _fields_ = [
        ("score_mod", ctypes.c_char_p),
        ("mask_mod", ctypes.c_char_p),
        ("buffers", ctypes.POINTER(ModBuffer)),
        ("n_buffers", ctypes.c_int),
        ("score_mod_host", SCORE_MOD_HOST),
        ("mask_mod_host", MASK_MOD_HOST),
        ("user", ctypes.c_void_p),
        ("block_mask", ctypes.c_void_p),  # clattn_block_mask * (the package leaves it NULL)
    ]


class Desc(ctypes.Structure):
    """clattn_attention_desc."""

    _fields_ = [
        ("scale", ctypes.c_float),
        ("mask", ctypes.c_int),
        ("algorithm", ctypes.c_int),
        ("weights", ctypes.POINTER(Tensor)),
        ("work_group_size", ctypes.c_size_t),
        ("mask_tensor", ctypes.POINTER(Tensor)),
        ("kv_lens", ctypes.POINTER(ctypes.c_int32)),
        ("q_lens", ctypes.POINTER(ctypes.c_int32)),
        ("window", ctypes.c_int),
        ("window_left", c_int64),
        ("window_right", c_int64),
        ("alibi_slopes", ctypes.POINTER(ctypes.c_float)),
        ("softcap", ctypes.c_float),
        ("masked_rows", ctypes.c_int),
        ("lse", ctypes.POINTER(Tensor)),
        ("weights_head_mean", ctypes.c_int),
        ("q_start", c_int64),
        ("kv_start", c_int64),
        # 0.3's KV-cache fields (clattn_paged_kv *, cl_mem, cl_mem, clattn_tensor *,
        # clattn_tensor *, clattn_rotary *, clattn_varlen *); the package does not set
        # them yet
        ("paged", ctypes.c_void_p),
        ("kv_lens_buffer", ctypes.c_void_p),
        ("q_lens_buffer", ctypes.c_void_p),
        ("k_new", ctypes.POINTER(Tensor)),
        ("v_new", ctypes.POINTER(Tensor)),
        ("rotary", ctypes.c_void_p),
        ("varlen", ctypes.c_void_p),
        # attention sinks: h_q float32 logits (host), and the backward pass's optional
        # output d_sinks (clattn_backward.h; the package leaves it NULL)
        ("sinks", ctypes.POINTER(ctypes.c_float)),
        ("d_sinks", ctypes.POINTER(Tensor)),
        # the float32 scales of an int8 K and V (a quantized cache), [b or 1, h_kv,
        # n_kv or 1, 1] views of K's storage kind
        ("k_scale", ctypes.POINTER(Tensor)),
        ("v_scale", ctypes.POINTER(Tensor)),
        # dropout on the weights: p (0: none), the Philox key and counter word 3
        ("dropout_p", ctypes.c_float),
        ("dropout_seed", ctypes.c_uint64),
        ("dropout_offset", ctypes.c_uint64),
        ("batch_invariant", ctypes.c_int),
        # optional output: each key's summed weight (the package leaves it NULL)
        ("key_weight_sums", ctypes.POINTER(Tensor)),
        # score / mask snippets (clattn_mods.h)
        ("mods", ctypes.POINTER(Mods)),
        # each row's largest logit (QK-clip's max logit)
        ("max_logits", ctypes.POINTER(Tensor)),
        # 1: allow half arithmetic (the GPU family's fused kernel, float16 Q, K, V)
        ("half_arithmetic", ctypes.c_int),
    ]


class Plan(ctypes.Structure):
    """clattn_plan."""

    _fields_ = [
        ("algorithm", ctypes.c_int),
        ("workspace_bytes", ctypes.c_size_t),
        ("work_group_size", ctypes.c_size_t),
        ("queries_per_work_item", ctypes.c_size_t),
        ("tile_kv", ctypes.c_size_t),
        ("reason", ctypes.c_char * 512),
        ("kernels", ctypes.c_char * 128),
        ("rejected", ctypes.c_char * 512),
    ]


class ContextOptions(ctypes.Structure):
    """clattn_context_options."""

    _fields_ = [
        ("device", ctypes.c_char_p),
        ("kernel_dir", ctypes.c_char_p),
        ("cache_dir", ctypes.c_char_p),
        ("binary_cache", ctypes.c_int),  # clattn_binary_cache; 0 = AUTO
    ]


def _library_path() -> str:
    """CLATTN_LIBRARY (a build tree's libclattn.so, for development), else the copy the
    wheel installed next to this file."""
    env = os.environ.get("CLATTN_LIBRARY")
    if env:
        return env
    here = Path(__file__).resolve().parent
    for name in ("libclattn.so", "libclattn.dylib", "clattn.dll"):
        if (here / name).exists():
            return str(here / name)
    raise ImportError(
        f"clattn: the shared library is not in {here} (install the package with "
        "`pip install ./python`, or set CLATTN_LIBRARY to a built libclattn.so)"
    )


lib = ctypes.CDLL(_library_path())

_P = ctypes.POINTER
_T = _P(Tensor)
_CTX = c_void_p  # clattn_context *

_PROTOTYPES = {
    "clattn_version": (ctypes.c_char_p, []),
    "clattn_status_string": (ctypes.c_char_p, [ctypes.c_int]),
    "clattn_context_create": (ctypes.c_int, [_P(ContextOptions), _P(_CTX)]),
    "clattn_context_create_from_cl_with_options": (
        ctypes.c_int,
        [_P(ContextOptions), c_void_p, c_void_p, c_void_p, _P(_CTX)],
    ),
    "clattn_context_release": (None, [_CTX]),
    "clattn_last_error_message": (ctypes.c_char_p, [_CTX]),
    "clattn_last_cl_error": (ctypes.c_int32, [_CTX]),
    "clattn_context_get_cl": (ctypes.c_int, [_CTX, _P(c_void_p), _P(c_void_p), _P(c_void_p)]),
    "clattn_attention": (ctypes.c_int, [_CTX, _P(Desc), _T, _T, _T, _T]),
    "clattn_attention_enqueue": (
        ctypes.c_int,
        [_CTX, _P(Desc), _T, _T, _T, _T, ctypes.c_uint32, _P(c_void_p), _P(c_void_p)],
    ),
    "clattn_attention_plan": (ctypes.c_int, [_CTX, _P(Desc), _T, _T, _T, _T, _P(Plan)]),
    "clattn_reference_attention": (ctypes.c_int, [_P(Desc), _T, _T, _T, _T]),
    "clattn_reference_attention_backward": (ctypes.c_int, [_P(Desc), _T, _T, _T, _T, _T, _T, _T]),
    # (ctx, desc, batch, heads, n_q, n_kv, clattn_block_mask **out)
    "clattn_block_mask_create": (ctypes.c_int, [_CTX, _P(Desc), c_int64, c_int64, c_int64,
                                                c_int64, _P(c_void_p)]),
    "clattn_block_mask_counts": (ctypes.c_int, [c_void_p, _P(c_int64), _P(c_int64),
                                                _P(c_int64)]),
    "clattn_block_mask_release": (None, [c_void_p]),
    # (desc, batch, h_q, n_q, n_kv, uint8_t *keep)
    "clattn_dropout_mask": (ctypes.c_int, [_P(Desc), c_int64, c_int64, c_int64, c_int64,
                                           c_void_p]),
}
for _name, (_res, _args) in _PROTOTYPES.items():
    _fn = getattr(lib, _name)
    _fn.restype = _res
    _fn.argtypes = _args


def _opencl() -> ctypes.CDLL:
    """The OpenCL ICD loader libclattn links (already in the process)."""
    name = ctypes.util.find_library("OpenCL") or "libOpenCL.so.1"
    cl = ctypes.CDLL(name)
    cl.clGetPlatformIDs.argtypes = [ctypes.c_uint32, _P(c_void_p), _P(ctypes.c_uint32)]
    cl.clGetPlatformInfo.argtypes = [c_void_p, ctypes.c_uint32, ctypes.c_size_t, c_void_p,
                                     _P(ctypes.c_size_t)]
    cl.clGetDeviceIDs.argtypes = [c_void_p, ctypes.c_uint64, ctypes.c_uint32, _P(c_void_p),
                                  _P(ctypes.c_uint32)]
    cl.clGetDeviceInfo.argtypes = [c_void_p, ctypes.c_uint32, ctypes.c_size_t, c_void_p,
                                   _P(ctypes.c_size_t)]
    cl.clWaitForEvents.argtypes = [ctypes.c_uint32, _P(c_void_p)]
    cl.clReleaseEvent.argtypes = [c_void_p]
    for fn in ("clGetPlatformIDs", "clGetPlatformInfo", "clGetDeviceIDs", "clGetDeviceInfo",
               "clWaitForEvents", "clReleaseEvent"):
        getattr(cl, fn).restype = ctypes.c_int32
    return cl


opencl = _opencl()
