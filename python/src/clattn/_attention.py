"""scaled_dot_product_attention, plan and the float64 reference."""

from __future__ import annotations

import ctypes
import math
import operator
from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Sequence, Tuple, Union

import numpy as np
import numpy.typing as npt

from . import _arrays, _lib
from ._arrays import DEVICE, HOST, View
from ._context import Context, context_for_queue, default_context, raise_status

_ALGORITHMS = {"auto": _lib.ALGORITHM_AUTO, "fused": _lib.ALGORITHM_FUSED,
               "unfused": _lib.ALGORITHM_UNFUSED}
_ALGORITHM_NAMES = {v: k for k, v in _ALGORITHMS.items()}
_MASKED_ROWS = {"zero": _lib.MASKED_ROWS_ZERO, "nan": _lib.MASKED_ROWS_NAN}
_ALIGNMENTS = {"top_left": _lib.MASK_CAUSAL_TOP_LEFT,
               "bottom_right": _lib.MASK_CAUSAL_BOTTOM_RIGHT}


@dataclass(frozen=True)
class Plan:
    """What a call would run (``clattn_plan``): ``algorithm`` ("fused" or "unfused"),
    ``kernels`` in order (e.g. "decode", "fused", "scores, softmax, weighted_sum"),
    ``reason`` (why this algorithm), ``rejected`` (why not the other; "" if it could run
    too), ``workspace_bytes`` (device memory clattn allocates besides the operands), and
    the blocking: ``work_group_size``, ``queries_per_work_item``, ``tile_kv``."""

    algorithm: str
    kernels: str
    reason: str
    rejected: str
    workspace_bytes: int
    work_group_size: int
    queries_per_work_item: int
    tile_kv: int


def _empty(like: Any, shape: Sequence[int], dtype_code: int, kind: str,
           np_only: bool = False) -> Any:
    """A new array of the caller's type (``like``'s), shape and clattn dtype."""
    if _arrays.is_torch(like) and not np_only:
        import torch

        tdt = {_lib.FLOAT32: torch.float32, _lib.FLOAT16: torch.float16,
               _lib.BFLOAT16: torch.bfloat16, _lib.FLOAT64: torch.float64}[dtype_code]
        return torch.empty(tuple(shape), dtype=tdt)
    if kind == DEVICE:
        import pyopencl.array as cl_array

        return cl_array.empty(like.queue, tuple(shape), _np_dtype(like, dtype_code))
    return np.empty(tuple(shape), dtype=_np_dtype(like, dtype_code))


def _np_dtype(like: Any, code: int) -> np.dtype:
    if code == _lib.FLOAT32:
        return np.dtype(np.float32)
    if code == _lib.FLOAT16:
        return np.dtype(np.float16)
    if code == _lib.FLOAT64:
        return np.dtype(np.float64)
    if code == _lib.BFLOAT16 and not _arrays.is_torch(like):
        dt: np.dtype = np.dtype(like.dtype)  # ml_dtypes.bfloat16
        return dt
    raise TypeError("a bfloat16 output needs PyTorch or ml_dtypes")


def _make_mods(score_mod: Any, mask_mod: Any, buffers: Any, keep: List[Any]) -> Any:
    """clattn_mods from OpenCL C source strings and host arrays (kept alive in keep)."""
    srcs = []
    for name, src in (("score_mod", score_mod), ("mask_mod", mask_mod)):
        if src is not None and not isinstance(src, str):
            raise TypeError(f"{name} must be OpenCL C source (a str), not "
                            f"{type(src).__name__}")
        if src is not None and "\0" in src:
            raise ValueError(f"{name} holds a NUL character")
        srcs.append(None if src is None else src.encode())
    if srcs == [None, None]:
        raise ValueError("mod_buffers needs score_mod or mask_mod")
    if buffers is None:
        buffers = ()
    if not isinstance(buffers, (list, tuple)):
        raise TypeError(f"mod_buffers must be a list or tuple of arrays, not "
                        f"{type(buffers).__name__}")
    bufs = list(buffers)
    if len(bufs) > 8:
        raise ValueError(f"mod_buffers: {len(bufs)} arrays, at most 8")
    arr = (_lib.ModBuffer * max(1, len(bufs)))()
    for i, x in enumerate(bufs):
        if _arrays.is_torch(x):
            x = _arrays.resolved(x.detach().cpu()).numpy()
        a = np.asarray(x)
        if a.dtype.kind in "iub":
            if a.size and (a.min() < -(2**31) or a.max() > 2**31 - 1):
                raise ValueError(f"mod_buffers[{i}] holds values outside int32")
            a, dt = np.ascontiguousarray(a, dtype=np.int32).ravel(), _lib.INT32
        elif a.dtype.kind == "f":
            a, dt = np.ascontiguousarray(a, dtype=np.float32).ravel(), _lib.FLOAT32
        else:
            raise TypeError(f"mod_buffers[{i}] must hold integers or floats, not {a.dtype}")
        keep.append(a)
        arr[i].dtype, arr[i].count, arr[i].host = dt, a.size, a.ctypes.data
    mods = _lib.Mods(srcs[0], srcs[1], arr, len(bufs))
    keep += [srcs, arr, mods]
    return mods


class _Call:
    """One call's views and desc, built from the Python arguments."""

    def __init__(self, query: Any, key: Any, value: Any, attn_mask: Any, dropout_p: float,
                 is_causal: bool, scale: Optional[float], enable_gqa: bool,
                 opts: Dict[str, Any], for_plan: bool = False,
                 check_grad: bool = True) -> None:
        unknown = set(opts) - _OPTION_NAMES
        if unknown:
            raise TypeError(f"unexpected keyword argument(s): {', '.join(sorted(unknown))}")
        o = dict(_OPTION_DEFAULTS, **opts)
        for flag, val in (("is_causal", is_causal), ("enable_gqa", enable_gqa),
                          *((f, o[f]) for f in _FLAGS)):
            if not isinstance(val, (bool, np.bool_)):
                raise TypeError(f"{flag} must be True or False, not {val!r}")
        p = _dropout_p(dropout_p)
        seed = _uint(o["dropout_seed"], "dropout_seed", 64)
        offset = _uint(o["dropout_offset"], "dropout_offset", 32)
        q, k, v = (_arrays.to_numpy_like(x, n) for x, n in
                   ((query, "query"), (key, "key"), (value, "value")))
        codes = [_arrays.dtype_code(x, n, allow_int8=n != "query")  # int8: a quantized K/V
                 for x, n in ((q, "query"), (k, "key"), (v, "value"))]
        self.like = query if _arrays.is_torch(query) else q
        if check_grad:
            mb = o["mod_buffers"]
            _check_no_grad(query=q, key=k, value=v, attn_mask=attn_mask, out=o["out"],
                           scale=scale, sinks=o["sinks"], alibi_slopes=o["alibi_slopes"],
                           softcap=o["softcap"], k_scale=o["k_scale"], v_scale=o["v_scale"],
                           **{f"mod_buffers[{i}]": b for i, b in
                              enumerate(mb if isinstance(mb, (list, tuple)) else ())})
        self.inputs = (q, k, v)
        kinds = {_arrays.kind_of(x) for x in (q, k, v)}
        if len(kinds) != 1:
            raise TypeError("query, key and value must all be host arrays (NumPy, PyTorch "
                            "CPU) or all PyOpenCL arrays")
        self.kind = kinds.pop()
        if q.ndim < 2 or k.ndim != q.ndim or v.ndim != q.ndim:
            raise ValueError(f"query, key and value need the same number of dims (≥ 2): "
                             f"(..., heads, seq, dim); got {q.ndim}, {k.ndim}, {v.ndim}")
        nb = max(0, q.ndim - 3)
        if tuple(q.shape[:nb]) != tuple(k.shape[:nb]) or tuple(k.shape[:nb]) != tuple(v.shape[:nb]):
            raise ValueError(f"batch dims differ: query {tuple(q.shape)}, key {tuple(k.shape)}, "
                             f"value {tuple(v.shape)}")
        if q.ndim >= 3 and q.shape[-3] != k.shape[-3] and not enable_gqa:
            raise ValueError(f"query has {q.shape[-3]} heads and key {k.shape[-3]}: pass "
                             "enable_gqa=True for grouped-query attention (as in PyTorch)")
        self.q = _arrays.view4(q, "query", batch_dims=nb, code=codes[0])
        self.k = _arrays.view4(k, "key", batch_dims=nb, code=codes[1])
        self.v = _arrays.view4(v, "value", batch_dims=nb, code=codes[2])
        b, hq, n_q, _ = self.q.tensor.shape
        n_kv, d_v = self.k.tensor.shape[2], self.v.tensor.shape[3]
        self.lead = tuple(q.shape[:-1])  # the caller's shape without the head dim

        d = _lib.Desc()
        self.desc = d
        self.keep: List[Any] = []
        if scale is not None:
            if scale == 0.0:
                raise ValueError("scale=0 is not supported (clattn reads 0 as the default "
                                 "1/sqrt(d_k)); pass None for the default")
            d.scale = _float(scale, "scale")
        d.algorithm = _lookup(_ALGORITHMS, o["algorithm"], "algorithm")
        d.batch_invariant = 1 if o["batch_invariant"] else 0
        d.half_arithmetic = 1 if o["half_arithmetic"] else 0
        d.masked_rows = _lookup(_MASKED_ROWS, o["masked_rows"], "masked_rows")
        if is_causal and o["no_self"]:
            raise ValueError("is_causal and no_self cannot be combined")
        alignment = _lookup(_ALIGNMENTS, o["causal_alignment"], "causal_alignment")
        if not is_causal and o["causal_alignment"] != "top_left":
            raise ValueError("causal_alignment applies to is_causal=True only; without a causal "
                             "mask, q_start=S - L aligns the window's and ALiBi's diagonal "
                             "bottom-right (FlashAttention's window_size, alibi_slopes)")
        if is_causal:
            d.mask = alignment
        elif o["no_self"]:
            d.mask = _lib.MASK_NO_SELF
        if o["window"] is not None:
            left, right = _window(o["window"])
            d.window, d.window_left, d.window_right = 1, left, right
        if o["softcap"]:
            d.softcap = _float(o["softcap"], "softcap")
        d.q_start, d.kv_start = _int64(o["q_start"], "q_start"), _int64(o["kv_start"], "kv_start")
        d.dropout_p, d.dropout_seed, d.dropout_offset = p, seed, offset
        if o["kv_lens"] is not None:
            arr, d.kv_lens = _arrays.host_int32(o["kv_lens"], "kv_lens", b)
            self.keep.append(arr)
        if o["q_lens"] is not None:
            arr, d.q_lens = _arrays.host_int32(o["q_lens"], "q_lens", b)
            self.keep.append(arr)
        if o["alibi_slopes"] is not None:
            arr, d.alibi_slopes = _arrays.host_float32(o["alibi_slopes"], "alibi_slopes", hq)
            self.keep.append(arr)
        if o["sinks"] is not None:
            arr, d.sinks = _arrays.host_float32(o["sinks"], "sinks", hq)
            self.keep.append(arr)
        mb = o["mod_buffers"]
        if o["score_mod"] is not None or o["mask_mod"] is not None or not (
                mb is None or (isinstance(mb, (list, tuple)) and len(mb) == 0)):
            mods = self._mods(o["score_mod"], o["mask_mod"], o["mod_buffers"])
            if o["block_mask"] is not None:
                if not isinstance(o["block_mask"], BlockMask):
                    raise TypeError(f"block_mask must be a clattn.BlockMask, not "
                                    f"{type(o['block_mask']).__name__}")
                mods.block_mask = o["block_mask"].handle
            d.mods = ctypes.pointer(mods)
        elif o["block_mask"] is not None:
            raise ValueError("block_mask needs the mask_mod it was built from")
        self.mask: Optional[View] = None
        if attn_mask is not None:
            self.mask = self._mask(attn_mask, q, (b, hq, n_q, n_kv), nb)
            d.mask_tensor = ctypes.pointer(self.mask.tensor)
        # an int8 key / value: float32 scales, views [b, h_kv, n_kv, 1] (the library
        # checks that they come with an int8 K / V and only then)
        hkv = self.k.tensor.shape[1]
        self.k_scale = self._scale(o["k_scale"], "k_scale", k, nb, (b, hkv, n_kv, 1))
        self.v_scale = self._scale(o["v_scale"], "v_scale", v, nb, (b, hkv, n_kv, 1))
        if self.k_scale is not None:
            d.k_scale = ctypes.pointer(self.k_scale.tensor)
        if self.v_scale is not None:
            d.v_scale = ctypes.pointer(self.v_scale.tensor)

        # outputs: the caller's array type (NumPy for a plan on host views)
        np_only = for_plan and self.kind == HOST
        out = o["out"]
        if out is not None:
            if _arrays.family(out) == "other" and not hasattr(out, "__dlpack__"):
                raise TypeError(f"out must be a NumPy array, PyTorch tensor, PyOpenCL array "
                                f"or DLPack producer written in place, not {type(out).__name__}")
            out = _arrays.to_numpy_like(out, "out")
            if tuple(out.shape) != self.lead + (d_v,):
                raise ValueError(f"out has shape {tuple(out.shape)}, expected "
                                 f"{self.lead + (d_v,)}")
            if _arrays.kind_of(out) != self.kind:
                raise TypeError("out must be the same kind of array as query")
            self.out_obj = out
        else:
            self.out_obj = _empty(self.like, self.lead + (d_v,), self.q.dtype, self.kind, np_only)
        self.o = _arrays.view4(self.out_obj, "out", output=True, batch_dims=nb)
        self.lse_obj: Any = None
        self.weights_obj: Any = None
        self.lse = self.weights = None
        lse_code = _lse_dtype(o["lse_dtype"])  # a bad value is an error even when unused
        if lse_code != _lib.FLOAT32 and not o["return_lse"]:
            raise ValueError("lse_dtype float64 needs return_lse=True")
        if o["return_lse"]:
            self.lse_obj = _empty(self.like, self.lead + (1,), lse_code, self.kind, np_only)
            self.lse = _arrays.view4(self.lse_obj, "lse", output=True, batch_dims=nb,
                                     code=lse_code)
            d.lse = ctypes.pointer(self.lse.tensor)
        if o["return_weights"]:
            wshape = (self.lead[:-2] + (1, n_q, n_kv) if o["weights_head_mean"] and q.ndim >= 3
                      else self.lead + (n_kv,))
            self.weights_obj = _empty(self.like, wshape, _lib.FLOAT32, self.kind, np_only)
            self.weights = _arrays.view4(self.weights_obj, "weights", output=True,
                                         batch_dims=nb)
            d.weights = ctypes.pointer(self.weights.tensor)
            d.weights_head_mean = 1 if o["weights_head_mean"] else 0
        elif o["weights_head_mean"]:
            raise ValueError("weights_head_mean needs return_weights=True")
        self.return_lse, self.return_weights = o["return_lse"], o["return_weights"]
        # each key's total weight over the query rows, per query head or per KV head
        self.ksum_obj: Any = None
        self.ksum: Any = None
        rk = o["return_key_weight_sums"]
        if rk not in (False, None, True, "query_heads", "kv_heads"):
            raise ValueError(f"return_key_weight_sums must be False, True, 'query_heads' or "
                             f"'kv_heads', not {rk!r}")
        if rk:
            heads = hkv if rk == "kv_heads" else hq
            self.ksum_obj = _empty(self.like, self.lead[:-2] + (heads, 1, n_kv), _lib.FLOAT32,
                                   self.kind, np_only)
            self.ksum = _arrays.view4(self.ksum_obj, "key_weight_sums", output=True,
                                      batch_dims=nb)
            d.key_weight_sums = ctypes.pointer(self.ksum.tensor)
        # each query row's largest logit (QK-clip's max logit), shaped as the LSE
        self.mlog_obj: Any = None
        self.mlog: Any = None
        if o["return_max_logits"]:
            self.mlog_obj = _empty(self.like, self.lead + (1,), _lib.FLOAT32, self.kind, np_only)
            self.mlog = _arrays.view4(self.mlog_obj, "max_logits", output=True, batch_dims=nb)
            d.max_logits = ctypes.pointer(self.mlog.tensor)

    def _mods(self, score_mod: Any, mask_mod: Any, buffers: Any) -> Any:
        """clattn_mods from OpenCL C source strings and host arrays (kept alive)."""
        return _make_mods(score_mod, mask_mod, buffers, self.keep)

    def _mask(self, attn_mask: Any, q: Any, target4: Tuple[int, ...], nb: int) -> View:
        m = _arrays.to_numpy_like(attn_mask, "attn_mask")
        if _arrays.kind_of(m) != self.kind:
            raise TypeError("attn_mask must be the same kind of array as query")
        code = (_arrays.dtype_code(m, "attn_mask", allow_bool=True) if not _is_float_mask(m)
                else None)
        if code is None:  # float masks are float32 on the device; other widths converted
            if _arrays.is_torch(m):
                import torch

                m = m if m.dtype == torch.float32 else m.float()
            elif str(np.dtype(m.dtype)) != "float32":
                m = m.astype(np.float32)
        if m.ndim > q.ndim:
            raise ValueError(f"attn_mask has {m.ndim} dims, more than query's {q.ndim}")
        mb = max(0, m.ndim - 3)
        m_lead, q_lead = tuple(m.shape[:mb]), tuple(q.shape[:nb])
        if not (all(n == 1 for n in m_lead) or m_lead == q_lead):
            if self.kind == DEVICE:
                raise ValueError(f"attn_mask's batch dims {m_lead} must be 1 or equal query's "
                                 f"{q_lead} for PyOpenCL arrays")
            last3 = tuple(m.shape[mb:])
            full = q_lead + last3
            try:
                m = m.expand(full) if _arrays.is_torch(m) else np.broadcast_to(m, full)
            except (ValueError, RuntimeError):
                raise ValueError(f"attn_mask of shape {tuple(attn_mask.shape)} does not "
                                 f"broadcast to {q_lead + target4[1:]}") from None
            mb = nb
        return _arrays.view4(m, "attn_mask", target4=target4, batch_dims=mb)

    def _scale(self, x: Any, name: str, kv: Any, nb: int,
               target4: Tuple[int, int, int, int]) -> Optional[View]:
        """k_scale / v_scale: float32 scales (other float dtypes converted) broadcast as in
        NumPy to ``kv``'s shape with the last dim 1, ``(..., H_kv, S, 1)``."""
        if x is None:
            return None
        what = "key" if name == "k_scale" else "value"
        sc = _arrays.to_numpy_like(x, name)
        if _arrays.kind_of(sc) != self.kind:
            raise TypeError(f"{name} must be the same kind of array as {what}")
        if not _is_float_mask(sc):
            raise TypeError(f"{name} has dtype {sc.dtype}; scales are float32 (other float "
                            "dtypes are converted)")
        if _arrays.is_torch(sc):
            import torch

            sc = sc if sc.dtype == torch.float32 else sc.float()
        elif str(np.dtype(sc.dtype)) != "float32":
            sc = sc.astype(np.float32)
        full = tuple(kv.shape[:-1]) + (1,)
        shape = tuple(sc.shape)
        if len(shape) > len(full) or any(n not in (1, f) for n, f in
                                         zip(reversed(shape), reversed(full))):
            raise ValueError(f"{name} has shape {shape}, which does not broadcast to {what}'s "
                             f"shape with the last dim 1, {full}: one scale per token and head "
                             "(1s broadcast; (..., H_kv, 1, 1) is one scale per head)")
        sb = max(0, sc.ndim - 3)
        s_lead, k_lead = shape[:sb], tuple(kv.shape[:nb])
        if not (all(n == 1 for n in s_lead) or s_lead == k_lead):
            if self.kind == DEVICE:
                raise ValueError(f"{name}'s leading dims {s_lead} must be 1 or equal {what}'s "
                                 f"{k_lead} for PyOpenCL arrays")
            full_lead = k_lead + shape[sb:]
            sc = sc.expand(full_lead) if _arrays.is_torch(sc) else np.broadcast_to(sc, full_lead)
            sb = nb
        return _arrays.view4(sc, name, target4=target4, batch_dims=sb, code=_lib.FLOAT32)

    def context(self, ctx: Optional[Context]) -> Context:
        if ctx is not None:
            if not isinstance(ctx, Context):
                raise TypeError(f"context must be a clattn.Context (e.g. clattn.Context("
                                f"{ctx!r}) for a device spec), not {type(ctx).__name__}")
            return ctx
        if self.kind == DEVICE:
            return context_for_queue(self.q.obj.queue)
        return default_context()

    def tensors(self) -> Tuple[Any, ...]:
        return tuple(ctypes.byref(x.tensor) for x in (self.q, self.k, self.v, self.o))

    def result(self) -> Any:
        if not (self.return_lse or self.return_weights or self.ksum_obj is not None or
                self.mlog_obj is not None):
            return self.out_obj
        res = [self.out_obj]
        if self.lse_obj is not None:
            res.append(self.lse_obj[..., 0])
        if self.weights_obj is not None:
            res.append(self.weights_obj)
        if self.ksum_obj is not None:  # (..., H, S); 2-D inputs (one head): (S,)
            res.append(self.ksum_obj[..., 0, :] if len(self.lead) > 1 else
                       self.ksum_obj[0, 0])
        if self.mlog_obj is not None:  # shaped as the LSE
            res.append(self.mlog_obj[..., 0])
        return tuple(res)


def _lse_dtype(x: Any) -> int:
    """The clattn dtype code of the ``lse_dtype`` option: float32 (None, the default) or
    float64, given as a string, a NumPy dtype or a PyTorch dtype."""
    if x is None:
        return _lib.FLOAT32
    name = str(x)  # PyTorch's dtypes print as "torch.float64"
    try:
        dt = np.dtype(name[len("torch."):] if name.startswith("torch.") else x)
    except (TypeError, ValueError):
        dt = None
    dt = dt.newbyteorder("=") if dt is not None else None  # (">f8" is float64 too)
    if dt == np.float32:
        return _lib.FLOAT32
    if dt == np.float64:
        return _lib.FLOAT64
    raise ValueError(f"lse_dtype must be float32 or float64, not {x!r}")


def _is_float_mask(m: Any) -> bool:
    if _arrays.is_torch(m):
        return bool(m.dtype.is_floating_point)
    dt = np.dtype(m.dtype)
    return bool(dt.kind == "f" or dt.name == "bfloat16")


def _lookup(table: Dict[str, int], value: str, name: str) -> int:
    try:
        return table[value]
    except (KeyError, TypeError):
        raise ValueError(f"{name} must be one of {', '.join(map(repr, table))}, not "
                         f"{value!r}") from None


def _index(x: Any, name: str) -> int:
    """A Python int from an integer (not a bool), or TypeError."""
    try:
        if isinstance(x, (bool, np.bool_)):
            raise TypeError
        return operator.index(x)
    except TypeError:
        raise TypeError(f"{name} must be an integer, not {x!r}") from None


def _int64(x: Any, name: str) -> int:
    v = _index(x, name)
    if not -(2**63) <= v < 2**63:
        raise ValueError(f"{name} = {v} does not fit int64")
    return v


def _float(x: Any, name: str) -> float:
    """A float32 argument (its finiteness is the library's check)."""
    if isinstance(x, (bool, np.bool_, str, bytes)):
        raise TypeError(f"{name} must be a number, not {x!r}")
    try:
        v = float(x)
    except (TypeError, ValueError):
        raise TypeError(f"{name} must be a number, not {x!r}") from None
    except OverflowError:
        raise ValueError(f"{name} = {x} does not fit a float") from None
    if math.isfinite(v) and abs(v) > 3.4028234663852886e38:
        raise ValueError(f"{name} = {x} does not fit float32")
    if v != 0.0 and float(np.float32(v)) == 0.0:
        raise ValueError(f"{name} = {x} underflows to 0 in float32, which clattn reads as "
                         "its default")
    return v


def _dropout_p(x: Any, name: str = "dropout_p") -> float:
    """A dropout probability: a number within [0, 1) whose float32 (the desc's field) is
    below 1 too."""
    if isinstance(x, (bool, np.bool_, str, bytes)):
        raise TypeError(f"{name} must be a number, not {x!r}")
    try:
        v = float(x)
    except (TypeError, ValueError, OverflowError):
        raise TypeError(f"{name} must be a number, not {x!r}") from None
    if not 0.0 <= v < 1.0:
        raise ValueError(f"{name} must be within [0, 1) (the probability of dropping a "
                         f"weight; 0 = no dropout), not {x!r}")
    if float(np.float32(v)) >= 1.0:
        raise ValueError(f"{name} = {x!r} rounds to 1 in float32; it must stay below 1")
    return v


def _uint(x: Any, name: str, bits: int) -> int:
    """An integer within [0, 2**bits): dropout_seed (64) and dropout_offset (32)."""
    v = _index(x, name)
    if not 0 <= v < 2**bits:
        what = ("the Philox key" if bits == 64 else
                "the generator's counter word: advance it per call for a new mask")
        raise ValueError(f"{name} = {v} is not within [0, 2**{bits}) ({what})")
    return v


def _window(w: Any) -> Tuple[int, int]:
    try:
        left, right = w
    except (TypeError, ValueError):
        raise ValueError(f"window must be (left, right), FlashAttention's window_size "
                         f"(None or -1 = unbounded), not {w!r}") from None
    left = -1 if left is None else _int64(left, "window[0]")
    right = -1 if right is None else _int64(right, "window[1]")
    return left, right


def _check_no_grad(**xs: Any) -> None:
    """No tensor argument that requires grad: the inputs and the tensor options (sinks,
    ALiBi slopes, scales, ...) would get no gradient, and an `out` leaf would be
    overwritten in place (PyTorch refuses both)."""
    grads = [n for n, x in xs.items() if _arrays.is_torch(x) and x.requires_grad]
    if not grads:
        return
    import torch

    if torch.is_grad_enabled():
        raise NotImplementedError(
            f"clattn has no backward pass yet: {grads[0]} requires grad and would silently "
            "get no gradient (no tensor argument may: query, key, value, attn_mask, out, "
            "scale, sinks, alibi_slopes, softcap, k_scale, v_scale, mod_buffers). Call under "
            "torch.no_grad() or pass detached tensors")


_OPTION_DEFAULTS: Dict[str, Any] = dict(
    causal_alignment="top_left", no_self=False, window=None, alibi_slopes=None, sinks=None,
    softcap=None, kv_lens=None, q_lens=None, q_start=0, kv_start=0, return_lse=False,
    lse_dtype=None, return_weights=False, weights_head_mean=False, masked_rows="zero",
    algorithm="auto", out=None, k_scale=None, v_scale=None, dropout_seed=0, dropout_offset=0,
    batch_invariant=False, return_key_weight_sums=False, score_mod=None, mask_mod=None,
    mod_buffers=(), block_mask=None, return_max_logits=False, half_arithmetic=False)
_OPTION_NAMES = set(_OPTION_DEFAULTS)
_FLAGS = ("no_self", "return_lse", "return_weights", "weights_head_mean", "batch_invariant",
          "return_max_logits", "half_arithmetic")

Result = Union[Any, Tuple[Any, ...]]


def scaled_dot_product_attention(query: Any, key: Any, value: Any, attn_mask: Any = None,
                                 dropout_p: float = 0.0, is_causal: bool = False,
                                 scale: Optional[float] = None, enable_gqa: bool = False, *,
                                 context: Optional[Context] = None, **options: Any) -> Result:
    """``softmax(scale · Q·Kᵀ + mask) · V`` on an OpenCL device, with the arguments and
    semantics of ``torch.nn.functional.scaled_dot_product_attention``.

    Shapes (PyTorch's): query ``(..., H_q, L, E)``, key ``(..., H_kv, S, E)``, value
    ``(..., H_kv, S, E_v)``; leading dims (any number, equal in all three) form the batch,
    and 2-D inputs are one head. Returns ``(..., H_q, L, E_v)``, the same array type as
    query (NumPy array, PyTorch CPU tensor or ``pyopencl.array.Array``; other DLPack
    producers give NumPy) and its dtype. dtypes: float32, float16, bfloat16 (PyTorch, or
    ``ml_dtypes`` for NumPy), and int8 for key and value (a quantized cache, with
    ``k_scale`` / ``v_scale``); arithmetic is float32. Any strides are passed through
    (stride 0 broadcasts an input); a copy is made only for negative strides or leading
    dims that cannot fold into one batch dim.

    ``attn_mask``: bool (True = attend) or float (added to the scores; converted to
    float32), broadcastable to ``(..., H_q, L, S)``. ``is_causal``: keys ``j ≤ i``
    (PyTorch's top-left alignment; ``causal_alignment="bottom_right"`` for
    FlashAttention's). Unlike PyTorch, ``attn_mask`` and ``is_causal`` combine (a key
    must pass both). ``scale``: None = ``1/sqrt(E)``. ``enable_gqa``: H_q a multiple of
    H_kv; query head h reads key head ``h // (H_q/H_kv)``.

    ``dropout_p`` (PyTorch's; FlashAttention's): dropout on the attention weights, a
    probability within [0, 1), 0 = none. Each weight is kept with probability
    ``1 - dropout_p`` and scaled by ``1/(1 - dropout_p)``, or dropped (0); the softmax
    and the LSE are those before dropout, ``return_weights`` gives the weights after it.
    As with PyTorch's functional SDPA it applies whenever ``dropout_p > 0`` (there is
    no training flag). The mask is clattn's own Philox4x32-10 stream (Salmon et al.
    2011), not PyTorch's generator: ``torch.manual_seed`` does not affect it, and the
    same seed gives other masks than PyTorch or FlashAttention. It is keyed by the
    keyword options ``dropout_seed`` (an integer within [0, 2**64), default 0) and
    ``dropout_offset`` (within [0, 2**32), default 0) and by (batch, head, row, key), so
    it is the same on every device, algorithm and tiling, and :func:`dropout_mask`
    returns it. The same seed and offset draw the same mask in every call: advance
    ``dropout_offset`` (or change the seed) per call, as PyTorch advances its Philox
    offset. Dropout runs the tiled kernels (no decode kernel). A ``dropout_p`` outside
    [0, 1), or a seed / offset out of range, raises ``ValueError``; a non-number
    ``TypeError``.

    A query row that sees no key outputs zeros (as PyTorch does from 2.5; its math backend
    gave NaN before);
    ``masked_rows="nan"`` gives NaN.

    Keyword options (clattn's additions; docs/SEMANTICS.md states each):
      ``window=(left, right)``: sliding window around the diagonal, FlashAttention's
      ``window_size`` (-1 or None = unbounded); ``alibi_slopes`` (H_q floats);
      ``sinks`` (H_q attention-sink logits, gpt-oss: each row's softmax gains one more
      key of that logit and value zero, so its weights sum below 1 and the LSE includes
      it; -inf = no sink for that head; NaN and +inf are refused); ``softcap`` (logit
      softcap, Gemma 2); ``k_scale`` / ``v_scale`` (the float32 scales of an int8 key /
      value, a quantized K/V cache: key row j of head h means ``k_scale[..., h, j, 0] ·
      key[..., h, j, :]``, symmetric per token and head as vLLM's and FlashInfer's int8
      caches; shape ``(..., H_kv, S, 1)`` or anything that broadcasts to it as in NumPy,
      e.g. ``(B..., H_kv, S, 1)`` per token and head or ``(H_kv, 1, 1)`` one scale per
      head; other float dtypes are converted; required with an int8 key / value and
      refused otherwise (:class:`InvalidArgumentError`). Quantizing is the caller's, e.g.
      ``scale = abs(x).max(-1, keepdims=True) / 127``, ``round(x / scale)`` clipped to
      ±127. int8 runs the fused algorithm only: ``algorithm="unfused"``,
      ``return_weights`` and :func:`reference_attention_backward` raise
      :class:`UnsupportedError`); ``kv_lens`` / ``q_lens`` (valid key / query counts per
      batch entry, batch = the leading dims flattened); ``no_self`` (no query
      sees its own position); ``q_start`` / ``kv_start`` (absolute positions of the first
      query and key); ``return_lse`` (also return the log-sum-exp, float32
      ``(..., H_q, L)``, natural log, FlashAttention's ``softmax_lse``; ``lse_dtype``
      "float64" (or ``np.float64`` / ``torch.float64``; NumPy's names, so "float" is
      float64) returns it as float64: the arithmetic stays float32, but ALiBi's row
      constant at far positions (``q_start`` ~1e8) stays whole, so split-KV parts merge
      as one call (case R17), except with sinks there, whose sum is float32; needs
      cl_khr_fp64 (``Context().device.fp64``), else :class:`UnsupportedError`; default
      float32);
      ``return_weights`` (also return the attention weights, float32
      ``(..., H_q, L, S)``; with ``weights_head_mean=True`` averaged over heads,
      ``(..., 1, L, S)``); ``algorithm`` ("auto", "fused", "unfused");
      ``batch_invariant`` (True: a row's bits do not depend on the batch, the chunking
      or L, e.g. a decode step equals that row of a prefill; fused only, no decode
      kernels; docs/SEMANTICS.md "Batch invariance"); ``half_arithmetic`` (True: allow
      Q·Kᵀ in half precision where the GPU kernel family's fused kernel runs on a device
      with cl_khr_fp16 and Q, K, V are float16; docs/SEMANTICS.md "Half arithmetic");
      ``out`` (write
      the result into this array: strides >= 0, no broadcast, writeable); ``context``
      (a :class:`Context`; default: this thread's, or the one kept for a PyOpenCL
      array's queue).
    ``return_key_weight_sums`` (True or "query_heads": also return each key's total
    attention over the query rows, float32 ``(..., H_q, S)``; "kv_heads": summed over each
    KV head's query heads, ``(..., H_kv, S)``; H2O / SnapKV eviction scores, computed
    without the weights matrix; fused only, not with ``return_weights`` or dropout;
    docs/SEMANTICS.md "Key weight sums").
    ``return_max_logits`` (also return each query row's largest logit, float32
    ``(..., H_q, L)`` like the LSE: the max over the keys the row sees of the score its
    softmax takes, after softcap, ALiBi, attn_mask and score_mod, not the sink; -inf for a
    row that sees no key; the "max logit" QK-clip / MuonClip monitors, a head's is
    ``.max(-1)``; fused only; docs/SEMANTICS.md "Max logits").
    ``score_mod`` / ``mask_mod`` (OpenCL C source defining ``float clattn_score_mod(float
    score, int b, int h, long q_pos, long k_pos, ...)`` / ``bool clattn_mask_mod(int b, int
    h, long q_pos, long k_pos, ...)``, compiled into the kernels: FlexAttention's idea;
    ``...`` are ``mod_buffers``, a list of up to 8 read-only arrays passed flat as
    ``__global const int *`` (integer and bool arrays, converted to int32) or ``__global
    const float *`` (float arrays, converted to float32), in order; the snippet must
    declare exactly these parameter types (clattn declares the prototypes: other types do
    not compile); b is the batch entry
    (the leading dims flattened), h the query head, q_pos = q_start + i, k_pos = kv_start + j;
    applied after softcap, ALiBi and attn_mask to visible keys; a compile error raises
    :class:`DeviceError` (status_name "kernel build failed") whose message names the
    snippet's line, e.g. ``mask_mod:3``;
    :func:`reference_attention` raises :class:`UnsupportedError` for them (it cannot run
    OpenCL C); ``block_mask`` (a :class:`BlockMask` of this ``mask_mod``: the fused kernels
    skip the tiles it masks entirely; the same result); docs/SEMANTICS.md "Score and mask
    snippets").
    With ``return_lse``, ``return_weights``, ``return_key_weight_sums`` and/or
    ``return_max_logits`` the result is a tuple ``(out, lse?, weights?, key_weight_sums?,
    max_logits?)`` in that order.

    Host arrays: blocks until the result is in host memory (the GIL is released during
    the call). PyOpenCL arrays: enqueues on query's queue (or the context's), after the
    events of the inputs, and adds its completion event to the outputs; returns at once.

    Raises ``TypeError`` / ``ValueError`` for arguments that are wrong before clattn
    sees them (dtype, dims, mixed array kinds), :class:`InvalidArgumentError` (also a
    ValueError) for what the library refuses (its message names the argument and
    sizes), :class:`UnsupportedError` and :class:`DeviceError`.
    """
    call = _Call(query, key, value, attn_mask, dropout_p, is_causal, scale, enable_gqa, options)
    ctx = call.context(context)
    with ctx._lock:
        h = ctx.handle
        if call.kind == HOST:
            status = _lib.lib.clattn_attention(h, ctypes.byref(call.desc), *call.tensors())
            raise_status(status, h)
        else:
            _enqueue(call, h)
    return call.result()


def _enqueue(call: _Call, handle: int) -> None:
    import pyopencl as cl

    outs = [call.o, call.lse, call.weights, call.ksum, call.mlog]
    views = [call.q, call.k, call.v, call.mask, call.k_scale, call.v_scale, *outs]
    events = [e for view in views if view is not None for e in view.events]
    wait = (ctypes.c_void_p * max(1, len(events)))(*[e.int_ptr for e in events])
    done = ctypes.c_void_p()
    status = _lib.lib.clattn_attention_enqueue(handle, ctypes.byref(call.desc), *call.tensors(),
                                               len(events), wait if events else None,
                                               ctypes.byref(done))
    raise_status(status, handle)
    if done.value:
        event = cl.Event.from_int_ptr(done.value, retain=False)
        for view in outs:  # every output: a later read waits for the kernels
            if view is not None:
                view.obj.add_event(event)


def plan(query: Any, key: Any, value: Any, attn_mask: Any = None, dropout_p: float = 0.0,
         is_causal: bool = False, scale: Optional[float] = None, enable_gqa: bool = False, *,
         context: Optional[Context] = None, **options: Any) -> Plan:
    """What :func:`scaled_dot_product_attention` with these arguments would run, and why
    (``clattn_attention_plan``). Builds, or finds cached, every program the call needs, so
    the call that follows starts without a build; computes nothing. Raises as the call."""
    call = _Call(query, key, value, attn_mask, dropout_p, is_causal, scale, enable_gqa,
                 options, for_plan=True)
    ctx = call.context(context)
    p = _lib.Plan()
    with ctx._lock:
        status = _lib.lib.clattn_attention_plan(ctx.handle, ctypes.byref(call.desc),
                                                *call.tensors(), ctypes.byref(p))
        raise_status(status, ctx.handle)
    return Plan(algorithm=_ALGORITHM_NAMES.get(p.algorithm, str(p.algorithm)),
                kernels=p.kernels.decode(), reason=p.reason.decode(),
                rejected=p.rejected.decode(), workspace_bytes=p.workspace_bytes,
                work_group_size=p.work_group_size,
                queries_per_work_item=p.queries_per_work_item, tile_kv=p.tile_kv)


def reference_attention(query: Any, key: Any, value: Any, attn_mask: Any = None,
                        dropout_p: float = 0.0, is_causal: bool = False,
                        scale: Optional[float] = None, enable_gqa: bool = False,
                        **options: Any) -> Result:
    """The CPU reference (``clattn_reference_attention``): the same arguments, semantics
    and results as :func:`scaled_dot_product_attention`, on host arrays only, every sum
    in float64 and only the stored results rounded to their dtype. Single-threaded; needs
    no OpenCL device. ``algorithm`` is ignored. With ``dropout_p`` it draws the same
    mask as the device (``dropout_seed``, ``dropout_offset``)."""
    call = _Call(query, key, value, attn_mask, dropout_p, is_causal, scale, enable_gqa, options,
                 check_grad=False)
    if call.kind != HOST:
        raise TypeError("reference_attention takes host arrays (NumPy, PyTorch CPU)")
    status = _lib.lib.clattn_reference_attention(ctypes.byref(call.desc), *call.tensors())
    raise_status(status, None)
    return call.result()


def reference_attention_backward(query: Any, key: Any, value: Any, grad_out: Any,
                                 attn_mask: Any = None, dropout_p: float = 0.0,
                                 is_causal: bool = False, scale: Optional[float] = None,
                                 enable_gqa: bool = False,
                                 **options: Any) -> Tuple[Any, Any, Any]:
    """The gradients of :func:`reference_attention` (``clattn_reference_attention_backward``,
    include/clattn_backward.h): for ``out = reference_attention(query, key, value, ...)``
    and ``grad_out`` = ∂L/∂out, returns ``(grad_query, grad_key, grad_value)`` shaped
    and typed like the inputs. FlashAttention-2's backward (Dao 2023, Algorithm 2) in
    float64 on the CPU, every option of the forward call (softcap through tanh; ALiBi and
    masks take no gradient; with ``enable_gqa`` the key and value gradients sum over each
    group). A row that sees no key contributes nothing. With ``dropout_p``, the same
    ``dropout_seed`` and ``dropout_offset`` as the forward call regenerate its mask: the
    gradients of ``O = (softmax(S)·Z/(1 - p))·V`` (no gradient into the mask). Host
    arrays only; no device."""
    if (options.get("return_lse") or options.get("return_weights") or "out" in options or
            options.get("return_key_weight_sums") or options.get("return_max_logits") or
            options.get("lse_dtype") is not None):
        raise TypeError("reference_attention_backward returns the three gradients only "
                        "(no out, return_lse, lse_dtype, return_weights, "
                        "return_key_weight_sums or return_max_logits)")
    call = _Call(query, key, value, attn_mask, dropout_p, is_causal, scale, enable_gqa, options,
                 check_grad=False)
    if call.kind != HOST:
        raise TypeError("reference_attention_backward takes host arrays (NumPy, PyTorch CPU)")
    g = _arrays.to_numpy_like(grad_out, "grad_out")
    if _arrays.kind_of(g) != HOST:
        raise TypeError("grad_out must be a host array (NumPy, PyTorch CPU) like query")
    if tuple(g.shape) != tuple(call.out_obj.shape):
        raise ValueError(f"grad_out has shape {tuple(g.shape)}, expected {tuple(call.out_obj.shape)}")
    nb = max(0, len(call.lead) - 2)
    if _arrays.is_torch(g):
        g = g.detach()
    # the library checks dO with O's rules (no stride 0), so a broadcast grad_out, which
    # autograd hands out for out.sum().backward(), is made contiguous first
    if 0 in _arrays.element_layout(g, "grad_out")[1]:
        g = _arrays.contiguous_copy(g)
    d_o = _arrays.view4(g, "grad_out", batch_dims=nb)
    grads, views = [], []
    for view, x, name in ((call.q, call.inputs[0], "grad_query"),
                          (call.k, call.inputs[1], "grad_key"),
                          (call.v, call.inputs[2], "grad_value")):
        # (an int8 key or value: float32 gradients, for the library to refuse the call)
        arr = _empty(call.like, tuple(x.shape),
                     _lib.FLOAT32 if view.dtype == _lib.INT8 else view.dtype, HOST)
        grads.append(arr)
        views.append(_arrays.view4(arr, name, output=True, batch_dims=nb))
    status = _lib.lib.clattn_reference_attention_backward(
        ctypes.byref(call.desc), *call.tensors()[:3], ctypes.byref(d_o.tensor),
        *(ctypes.byref(v.tensor) for v in views))
    raise_status(status, None)
    return grads[0], grads[1], grads[2]


def dropout_mask(batch: int, h_q: int, n_q: int, n_kv: int, p: float, seed: int = 0,
                 offset: int = 0) -> npt.NDArray[np.uint8]:
    """The dropout mask that a call with ``dropout_p=p``, ``dropout_seed=seed`` and
    ``dropout_offset=offset`` draws (``clattn_dropout_mask``): a NumPy ``uint8`` array
    ``[batch, h_q, n_q, n_kv]``, 1 where weight ``(b, h, i, j)`` is kept and 0 where it is
    dropped (whatever the masks: a masked weight is 0 either way). ``batch`` is the
    leading dims of query flattened, ``h_q`` its heads; ``i`` and ``j`` count from the
    call's first query and key. So, for a call without masks,
    ``out == (softmax(scale·Q·Kᵀ) * mask / (1 - p)) @ V``. ``p = 0``: all ones.

    Weight ``(b, h, i, j)`` is kept iff word ``j % 4`` of Philox4x32-10 with counter
    ``(j // 4, i, b·h_q + h, offset)`` and key ``(seed mod 2**32, seed >> 32)`` is at
    least ``floor(p·2**32)`` — clattn's own stream, not PyTorch's. Computed on the host,
    single-threaded; needs no OpenCL device.

    Raises ``TypeError`` / ``ValueError`` as the attention call does for ``p``, ``seed``
    and ``offset``, ``ValueError`` for a negative extent, and
    :class:`UnsupportedError` for a shape past the generator's counter.
    """
    dims = []
    for x, name in ((batch, "batch"), (h_q, "h_q"), (n_q, "n_q"), (n_kv, "n_kv")):
        v = _int64(x, name)
        if v < 0:
            raise ValueError(f"{name} = {v} is negative")
        dims.append(v)
    d = _lib.Desc()
    d.dropout_p = _dropout_p(p, "p")
    d.dropout_seed = _uint(seed, "seed", 64)
    d.dropout_offset = _uint(offset, "offset", 32)
    keep = np.empty(tuple(dims), dtype=np.uint8)
    status = _lib.lib.clattn_dropout_mask(ctypes.byref(d), *dims,
                                          keep.ctypes.data_as(ctypes.c_void_p))
    raise_status(status, None)
    return keep


__all__ = ["Plan", "dropout_mask", "plan", "reference_attention",
           "reference_attention_backward", "scaled_dot_product_attention"]



class BlockMask:
    """The block mask of a ``mask_mod`` (``clattn_block_mask_create``; FlexAttention's
    BlockMask): the snippet evaluated once on the device for every 16 query rows × 16 keys
    and flagged empty, full or mixed, so that calls with ``block_mask=`` skip the key tiles
    it masks entirely. Build it for the calls' ``n_q``, ``n_kv``, ``q_start``, ``kv_start``
    and the same ``mask_mod`` and ``mod_buffers`` (their contents must not change);
    ``batch`` and ``heads`` are 1 when the snippet does not depend on b or h (the flags are
    then shared), else the calls' batch (leading dims flattened) and query heads. Blocks
    until built. ``context``: the calls' context (default: this thread's). ``counts()``:
    the numbers of (empty, mixed, full) blocks. Close it (or use ``with``) to free the
    flags; calls already made keep them alive."""

    def __init__(self, mask_mod: str, n_q: int, n_kv: int, *, mod_buffers: Any = (),
                 batch: int = 1, heads: int = 1, q_start: int = 0, kv_start: int = 0,
                 context: Optional[Context] = None) -> None:
        self._keep: List[Any] = []
        d = _lib.Desc()
        d.mods = ctypes.pointer(_make_mods(None, mask_mod, mod_buffers, self._keep))
        d.q_start, d.kv_start = _int64(q_start, "q_start"), _int64(kv_start, "kv_start")
        self._ctx = context if context is not None else default_context()
        out = ctypes.c_void_p()
        with self._ctx._lock:
            status = _lib.lib.clattn_block_mask_create(self._ctx.handle, ctypes.byref(d),
                                                  _int64(batch, "batch"), _int64(heads, "heads"),
                                                  _int64(n_q, "n_q"), _int64(n_kv, "n_kv"),
                                                  ctypes.byref(out))
            raise_status(status, self._ctx.handle)
        self._handle: Optional[int] = out.value

    @property
    def handle(self) -> int:
        """The ``clattn_block_mask *`` as an integer."""
        if self._handle is None:
            raise ValueError("this BlockMask is closed")
        return self._handle

    def counts(self) -> Tuple[int, int, int]:
        e, p, f = ctypes.c_int64(), ctypes.c_int64(), ctypes.c_int64()
        with self._ctx._lock:
            raise_status(_lib.lib.clattn_block_mask_counts(self.handle, ctypes.byref(e),
                                                      ctypes.byref(p), ctypes.byref(f)), None)
        return e.value, p.value, f.value

    def close(self) -> None:
        if self._handle is not None:
            _lib.lib.clattn_block_mask_release(self._handle)
            self._handle = None

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:  # interpreter shutdown: the library may be gone
            pass

    def __enter__(self) -> "BlockMask":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
