"""Array adapters: NumPy arrays, PyTorch CPU tensors, PyOpenCL arrays and other DLPack
producers as clattn_tensor views, without copies where the layout allows."""

from __future__ import annotations

import ctypes
from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np

from . import _lib

HOST, DEVICE = "host", "device"

# An empty array may have no storage (PyTorch: data_ptr() 0); clattn reads nothing of it
# but needs a host pointer, so empty views point here.
_EMPTY_BUF = ctypes.create_string_buffer(16)
_EMPTY = ctypes.addressof(_EMPTY_BUF)


_FAMILY: Dict[type, str] = {np.ndarray: "numpy"}


def family(x: Any) -> str:
    """"numpy", "torch", "pyopencl" or "other", by type (cached: calls ask often)."""
    t = type(x)
    fam = _FAMILY.get(t)
    if fam is None:
        mod = t.__module__.partition(".")[0]
        if mod == "torch" and hasattr(x, "data_ptr"):
            fam = "torch"
        elif mod == "pyopencl" and hasattr(x, "base_data") and hasattr(x, "queue"):
            fam = "pyopencl"
        else:
            fam = "numpy" if isinstance(x, np.ndarray) else "other"
        _FAMILY[t] = fam
    return fam


def is_torch(x: Any) -> bool:
    return family(x) == "torch"


def is_pyopencl(x: Any) -> bool:
    return family(x) == "pyopencl"


def kind_of(x: Any) -> str:
    return DEVICE if is_pyopencl(x) else HOST


_TORCH_CODES: Dict[Any, int] = {}


def _torch_dtype_code(x: Any) -> Optional[int]:
    if not _TORCH_CODES:
        import torch

        _TORCH_CODES.update({torch.float32: _lib.FLOAT32, torch.float16: _lib.FLOAT16,
                             torch.bfloat16: _lib.BFLOAT16, torch.bool: _lib.BOOL,
                             torch.int8: _lib.INT8})
    return _TORCH_CODES.get(x.dtype)


def _torch_strided() -> Any:
    import torch

    return torch.strided


_NP_CODES = {np.dtype(np.float32): _lib.FLOAT32, np.dtype(np.float16): _lib.FLOAT16,
             np.dtype(np.bool_): _lib.BOOL, np.dtype(np.int8): _lib.INT8}


def _np_dtype_code(dt: np.dtype) -> Optional[int]:
    code = _NP_CODES.get(dt)
    if code is None and dt.itemsize == 2 and dt.name == "bfloat16":  # ml_dtypes.bfloat16
        code = _lib.BFLOAT16
    return code


class View:
    """One tensor as a clattn_tensor: ``tensor`` is the 4-D view [batch, heads, seq, dim];
    ``obj`` the array behind it (kept alive; a copy where one was needed)."""

    def __init__(self, obj: Any, kind: str, dtype: int, shape4: Sequence[int],
                 strides4: Sequence[int], offset: int, ptr: int, broadcast: int = 0) -> None:
        self.obj = obj
        self.kind = kind
        self.dtype = dtype
        t = _lib.Tensor()
        t.shape[:] = list(shape4)
        t.strides[:] = list(strides4)
        t.offset = offset
        t.dtype = dtype
        if kind == HOST:
            t.host = ptr
        else:
            t.buffer = ptr
        t.broadcast = broadcast
        self.tensor = t

    @property
    def events(self) -> List[Any]:
        return list(getattr(self.obj, "events", [])) if self.kind == DEVICE else []


def _fold(shape: Sequence[int], strides: Sequence[int], name: str,
          batch_dims: int) -> Optional[Tuple[int, int]]:
    """Folds the leading ``batch_dims`` dims into one (extent, stride), or None when
    their strides do not allow it without a copy."""
    if batch_dims == 0:
        return 1, 0
    ext, stride = 1, 0
    for n, s in zip(reversed(shape[:batch_dims]), reversed(strides[:batch_dims])):
        if n == 1:
            continue
        if ext == 1:
            ext, stride = n, s
        elif s == stride * ext:
            ext *= n
        else:
            return None
    return ext, stride


def to_numpy_like(x: Any, name: str) -> Any:
    """Inputs that are neither NumPy, PyTorch nor PyOpenCL: DLPack producers through
    np.from_dlpack (zero-copy), anything else (lists) through np.asarray, float64 as
    float32."""
    if family(x) != "other":
        return x
    if hasattr(x, "__dlpack__"):
        try:
            return np.from_dlpack(x)
        except (TypeError, RuntimeError, BufferError) as e:
            raise TypeError(f"{name}: cannot read this array through DLPack ({e})") from None
    a = np.asarray(x)
    # Python numbers become float64 by default; nobody chose that precision for a list
    return a.astype(np.float32) if a.dtype == np.float64 else a


def dtype_code(x: Any, name: str, allow_bool: bool = False, allow_int8: bool = False) -> int:
    if is_torch(x) and x.layout != _torch_strided():
        raise TypeError(f"{name} is a {x.layout} tensor; clattn reads strided (dense) tensors")
    code = _torch_dtype_code(x) if is_torch(x) else _np_dtype_code(np.dtype(x.dtype))
    if (code == _lib.BOOL and not allow_bool) or (code == _lib.INT8 and not allow_int8):
        code = None
    if code is None:
        raise TypeError(f"{name} has dtype {x.dtype}; clattn stores float32, float16 or bfloat16 "
                        "(bool for masks; int8 for key and value with k_scale and v_scale) "
                        "and computes in float32: cast it first (float64 would be rounded to "
                        "float32 anyway)")
    return code


def _lazy_bits(x: Any) -> bool:
    """Whether a torch tensor's memory is not its values (negative or conjugate bit;
    PyTorch >= 1.10 has them)."""
    return bool(getattr(x, "is_neg", lambda: False)() or getattr(x, "is_conj", lambda: False)())


def resolved(x: Any) -> Any:
    """x with its negative and conjugate bits resolved into memory (a copy if set)."""
    return x.resolve_neg().resolve_conj() if _lazy_bits(x) else x


def element_layout(x: Any, name: str) -> Tuple[List[int], List[int], int, int, str]:
    """(shape, strides in elements, element offset, pointer, kind) of x as it is."""
    if is_torch(x):
        if x.device.type != "cpu":
            raise TypeError(f"{name} is on {x.device}; clattn reads host memory (NumPy, "
                            "PyTorch CPU tensors) or PyOpenCL arrays")
        return list(x.shape), list(x.stride()), 0, x.data_ptr() or _EMPTY, HOST
    item = np.dtype(x.dtype).itemsize
    if is_pyopencl(x):
        strides = list(x.strides)
        if any(s % item for s in strides) or x.offset % item:
            raise ValueError(f"{name}: strides and offset must be whole elements")
        buf = x.base_data if x.base_data is not None else _empty_buffer(x.context)
        return (list(x.shape), [s // item for s in strides], x.offset // item, buf.int_ptr,
                DEVICE)
    strides = list(x.strides)
    if any(s % item for s in strides):
        raise ValueError(f"{name}: strides {tuple(strides)} bytes are not whole elements")
    return list(x.shape), [s // item for s in strides], 0, x.ctypes.data or _EMPTY, HOST


_EMPTY_CL: Dict[int, Any] = {}


def _empty_buffer(context: Any) -> Any:
    """A small buffer for empty PyOpenCL arrays (which have none): clattn reads nothing
    of an empty view but needs a cl_mem of the right context. One per context."""
    key = context.int_ptr
    if key not in _EMPTY_CL:
        import pyopencl as cl

        _EMPTY_CL[key] = (context, cl.Buffer(context, cl.mem_flags.READ_WRITE, 16))
    return _EMPTY_CL[key][1]


def contiguous_copy(x: Any) -> Any:
    if is_torch(x):
        return x.contiguous()
    if is_pyopencl(x):
        return x.copy() if not x.flags.forc else x
    return np.ascontiguousarray(x)


def view4(x: Any, name: str, *, output: bool = False,
          target4: Optional[Sequence[int]] = None, batch_dims: int = 0,
          code: Optional[int] = None) -> View:
    """x as a 4-D view. x has ``batch_dims`` leading dims folded into the batch, then
    [heads, seq, dim] (missing ones are 1). With ``target4`` (masks), extent-1 dims
    broadcast to it (stride 0 and the CLATTN_BROADCAST bit). An input that needs a copy
    (negative strides, leading dims that do not fold) is copied; an ``output`` never is:
    it must be writeable and foldable as it is. A PyTorch view with its negative (or
    conjugate) bit set (``z.conj().imag`` of a complex z, ``torch._neg_view(x)``) is lazily
    negated: its memory holds -x, so an input is resolved into a copy and an output
    refused."""
    if is_torch(x) and _lazy_bits(x):
        if output:
            raise ValueError(f"{name} is a lazily negated or conjugated PyTorch view "
                             "(is_neg() / is_conj()): its memory does not hold its values, "
                             "so clattn cannot write it; pass a plain tensor")
        x = resolved(x)
    if code is None:
        code = dtype_code(x, name, allow_bool=target4 is not None)
    if output and isinstance(x, np.ndarray) and not x.flags.writeable:
        raise ValueError(f"{name} is read-only")
    shape, strides, offset, ptr, kind = element_layout(x, name)
    if any(s < 0 for s in strides) and 0 not in shape:
        if kind == DEVICE or output:
            raise ValueError(f"{name} has negative strides {tuple(strides)}: clattn writes "
                             "and reads views with strides >= 0 only" if output else
                             f"{name}: negative strides are not supported on PyOpenCL arrays")
        x = contiguous_copy(x)
        shape, strides, offset, ptr, kind = element_layout(x, name)
    tail = min(3, len(shape) - batch_dims)
    lead = _fold(shape, strides, name, batch_dims)
    if lead is None and 0 not in shape:
        if kind == DEVICE or output:
            raise ValueError(f"{name}: its leading dims cannot be folded into one batch "
                             "dimension without a copy; pass a contiguous array")
        x = contiguous_copy(x)
        shape, strides, offset, ptr, kind = element_layout(x, name)
        lead = _fold(shape, strides, name, batch_dims)
    if lead is None:  # an empty array: nothing is read or written
        lead = (int(np.prod(shape[:batch_dims])), 0)
    s3 = [1] * (3 - tail) + shape[batch_dims:]
    st3 = [0] * (3 - tail) + strides[batch_dims:]
    shape4, strides4 = [lead[0]] + s3, [lead[1]] + st3
    bits = 0
    if target4 is not None:
        for d in range(4):
            if shape4[d] == target4[d]:
                continue
            if shape4[d] != 1:
                raise ValueError(f"{name} has shape {tuple(shape)}, which does not broadcast "
                                 f"to [batch, heads, n_q, n_kv] = {tuple(target4)}")
            shape4[d], strides4[d] = target4[d], 0
    if 0 in shape4:  # empty: any valid layout (NumPy gives such arrays zero strides)
        strides4 = [int(np.prod([max(n, 1) for n in shape4[d + 1:]])) for d in range(4)]
    for d in range(4):
        if strides4[d] == 0 and shape4[d] > 1:
            if output:
                raise ValueError(f"{name} has stride 0 on a dimension of extent "
                                 f"{shape4[d]}: an output cannot broadcast")
            bits |= 1 << d
    return View(x, kind, code, shape4, strides4, offset, ptr, bits)


def host_int32(x: Any, name: str, n: int) -> Tuple[Any, Any]:
    """A host int32 array of n entries (lengths): (array, ctypes pointer)."""
    if is_torch(x):
        x = resolved(x.detach().cpu()).numpy()
    elif is_pyopencl(x):
        x = x.get()
    a = np.asarray(x)
    if a.shape != (n,):
        raise ValueError(f"{name} must have {n} entries (one per batch entry), not shape "
                         f"{a.shape}")
    if a.dtype.kind not in "iu" and not (a.dtype.kind == "f" and np.all(a == np.round(a))):
        raise TypeError(f"{name} must hold integers, not {a.dtype}")
    if a.size and (a.min() < -(2**31) or a.max() > 2**31 - 1):
        raise ValueError(f"{name} does not fit int32")
    a = np.ascontiguousarray(a, dtype=np.int32)
    return a, a.ctypes.data_as(ctypes.POINTER(ctypes.c_int32))


def host_float32(x: Any, name: str, n: int) -> Tuple[Any, Any]:
    if is_torch(x):
        x = resolved(x.detach().cpu().float()).numpy()
    a = np.ascontiguousarray(np.asarray(x, dtype=np.float32))
    if a.shape != (n,):
        raise ValueError(f"{name} must have {n} entries, not shape {a.shape}")
    return a, a.ctypes.data_as(ctypes.POINTER(ctypes.c_float))
