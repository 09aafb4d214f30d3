"""Errors, devices and contexts."""

from __future__ import annotations

import ctypes
import os
import threading
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Tuple

from . import _lib
from ._lib import lib


class Error(Exception):
    """A clattn call failed. ``status`` is the C library's ``clattn_status`` value,
    ``status_name`` its short name (``clattn_status_string``), ``message`` the library's
    message (``clattn_last_error_message``: names the argument and the numbers) and
    ``cl_error`` the raw OpenCL error code behind it (0 when there is none)."""

    def __init__(self, status: int, message: str, cl_error: int = 0) -> None:
        self.status = status
        self.status_name = lib.clattn_status_string(status).decode()
        self.message = message
        self.cl_error = cl_error
        super().__init__(f"{self.status_name}: {message}" if message else self.status_name)


class InvalidArgumentError(Error, ValueError):
    """Bad argument, shape, layout or size (statuses 1–4): the call enqueued nothing."""


class UnsupportedError(Error):
    """Valid, but this algorithm or device cannot do it (status 5); the message says why."""


class DeviceError(Error):
    """No OpenCL platform or device, a failed build, out of memory or another OpenCL
    failure (statuses 6–13)."""


def _error_class(status: int) -> type:
    if status in (_lib.INVALID_ARGUMENT, _lib.INVALID_SHAPE, _lib.INVALID_LAYOUT,
                  _lib.SIZE_OVERFLOW):
        return InvalidArgumentError
    if status == _lib.UNSUPPORTED:
        return UnsupportedError
    return DeviceError


def raise_status(status: int, ctx: Optional[int]) -> None:
    """Raise the Error for a non-zero status, with the message of ``ctx`` (a
    ``clattn_context *`` as int) or, for None, of this thread's context-less calls."""
    if status == _lib.SUCCESS:
        return
    msg = lib.clattn_last_error_message(ctx)
    cl_err = lib.clattn_last_cl_error(ctx) if ctx else 0
    raise _error_class(status)(status, (msg or b"").decode(errors="replace"), cl_err)


def _str_or_none(s: Optional[str], name: str) -> Optional[bytes]:
    if s is not None and not isinstance(s, str):
        raise TypeError(f"{name} must be a string or None, not {s!r}")
    return None if s is None else s.encode()


_BINARY_CACHE = {"auto": 0, "on": 1, "off": 2}  # clattn_binary_cache


def _binary_cache(mode: str) -> int:
    if not isinstance(mode, str) or mode not in _BINARY_CACHE:
        raise ValueError(f"binary_cache must be 'auto', 'on' or 'off', not {mode!r}")
    return _BINARY_CACHE[mode]


class Context:
    """One OpenCL device, its cl_context and in-order queue, and clattn's program cache
    (``clattn_context``).

    ``device``: ``"P:D"`` (platform and device index, as :func:`devices` lists them) or a
    case-insensitive substring of the device name; None: the ``CLATTN_DEVICE``
    environment variable, else the first GPU, else the first device. ``cache_dir``: the
    program-binary cache and tuning folder (None: ``CLATTN_CACHE_DIR``, else
    ``~/.cache/clattn``; ``"off"`` disables it). ``binary_cache``: ``"auto"`` keeps
    program binaries there unless the OpenCL runtime caches its own builds (PoCL),
    ``"on"`` always, ``"off"`` never (``clattn_binary_cache``). ``kernel_dir``: load .cl
    sources from there instead of the embedded ones (kernel development).

    A C context serves one host thread at a time; this object holds a lock, so sharing
    it between Python threads is safe but serialises their calls (use one per thread to
    run them side by side). :func:`scaled_dot_product_attention` without ``context``
    uses a default context per thread.

    Raises :class:`DeviceError` (no platform, no device matching ``device``).
    """

    def __init__(self, device: Optional[str] = None, *, cache_dir: Optional[str] = None,
                 kernel_dir: Optional[str] = None, binary_cache: str = "auto") -> None:
        opts = _lib.ContextOptions(_str_or_none(device, "device"),
                                   _str_or_none(kernel_dir, "kernel_dir"),
                                   _str_or_none(cache_dir, "cache_dir"),
                                   _binary_cache(binary_cache))
        handle = ctypes.c_void_p()
        status = lib.clattn_context_create(ctypes.byref(opts), ctypes.byref(handle))
        raise_status(status, None)
        self._init(handle.value, None)

    def _init(self, handle: Optional[int], keep: Any) -> None:
        self._handle = handle
        self._keep = keep  # PyOpenCL objects that must outlive the context
        self._lock = threading.Lock()

    @classmethod
    def from_cl(cls, context: int, device: int, queue: int, *,
                cache_dir: Optional[str] = None, kernel_dir: Optional[str] = None,
                binary_cache: str = "auto", keep: Any = None) -> "Context":
        """Wrap an application's OpenCL objects, given as integer handles
        (``cl_context``, ``cl_device_id``, ``cl_command_queue``): clattn retains them and
        releases its references when this context closes (after finishing the queue).
        ``keep``: any Python object to hold on to for as long as the context lives."""
        opts = _lib.ContextOptions(None, _str_or_none(kernel_dir, "kernel_dir"),
                                   _str_or_none(cache_dir, "cache_dir"),
                                   _binary_cache(binary_cache))
        handle = ctypes.c_void_p()
        status = lib.clattn_context_create_from_cl_with_options(
            ctypes.byref(opts), context, device, queue, ctypes.byref(handle))
        raise_status(status, None)
        self = cls.__new__(cls)
        self._init(handle.value, keep)
        return self

    @classmethod
    def from_pyopencl(cls, queue: Any, **kwargs: Any) -> "Context":
        """A context on a ``pyopencl.CommandQueue`` (its context and device): calls then
        take and return ``pyopencl.array.Array`` objects on that context without a host
        copy. Keyword arguments as :meth:`from_cl`."""
        return cls.from_cl(queue.context.int_ptr, queue.device.int_ptr, queue.int_ptr,
                           keep=queue, **kwargs)

    @property
    def handle(self) -> int:
        """The ``clattn_context *`` as an integer (for other ctypes users)."""
        if not self._handle:
            raise ValueError("clattn.Context is closed")
        return self._handle

    def _cl_objects(self) -> Tuple[Optional[int], Optional[int], Optional[int]]:
        cl_ctx, dev, queue = ctypes.c_void_p(), ctypes.c_void_p(), ctypes.c_void_p()
        raise_status(lib.clattn_context_get_cl(self.handle, ctypes.byref(cl_ctx),
                                               ctypes.byref(dev), ctypes.byref(queue)),
                     self.handle)
        return cl_ctx.value, dev.value, queue.value

    @property
    def device(self) -> "Device":
        """The device this context runs on."""
        dev = self._cl_objects()[1]
        for d in devices():
            if d._id == dev:
                return d
        raise DeviceError(_lib.NO_DEVICE, "the context's device is not among the listed devices")

    def close(self) -> None:
        """Release the context (waits for its queue to finish). Idempotent."""
        lock = getattr(self, "_lock", None)
        if lock is None:  # __init__ failed before _init
            return
        with lock:  # not while another thread is inside a call on this context
            handle, self._handle = self._handle, None
            if handle:
                lib.clattn_context_release(handle)

    def __enter__(self) -> "Context":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __del__(self) -> None:
        self.close()

    def __repr__(self) -> str:
        if not self._handle:
            return "<clattn.Context closed>"
        return f"<clattn.Context on {self.device.name!r}>"


_thread = threading.local()


def default_context() -> Context:
    """This thread's default context (created on first use, on the default device)."""
    ctx = getattr(_thread, "context", None)
    if ctx is None:
        ctx = _thread.context = Context()
    return ctx


_pyopencl_contexts: Dict[Tuple[int, int], Context] = {}
_pyopencl_lock = threading.Lock()


def context_for_queue(queue: Any) -> Context:
    """The context clattn keeps for a PyOpenCL queue (created on first use)."""
    key = (queue.int_ptr, threading.get_ident())
    with _pyopencl_lock:
        ctx = _pyopencl_contexts.get(key)
        if ctx is None:
            ctx = _pyopencl_contexts[key] = Context.from_pyopencl(queue)
        return ctx


# ---- devices (OpenCL queries through the ICD loader) ----------------------------------

_CL_PLATFORM_NAME = 0x0902
_CL_DEVICE_TYPE = 0x1000
_CL_DEVICE_MAX_COMPUTE_UNITS = 0x1002
_CL_DEVICE_GLOBAL_MEM_SIZE = 0x101F
_CL_DEVICE_LOCAL_MEM_SIZE = 0x1023
_CL_DEVICE_NAME = 0x102B
_CL_DRIVER_VERSION = 0x102D
_CL_DEVICE_EXTENSIONS = 0x1030
_CL_DEVICE_TYPE_ALL = 0xFFFFFFFF


@dataclass(frozen=True)
class Device:
    """An OpenCL device as clattn sees it. ``spec`` (``"P:D"``) selects it in
    :class:`Context` and ``CLATTN_DEVICE``."""

    spec: str
    name: str
    platform: str
    type: str  # "GPU", "CPU", "accelerator" or "other"
    compute_units: int
    global_memory_bytes: int
    local_memory_bytes: int
    driver_version: str
    fp16: bool
    fp64: bool
    is_default: bool
    _id: int = field(default=0, repr=False, compare=False)


def _info_str(fn: Any, obj: int, param: int) -> str:
    size = ctypes.c_size_t()
    if fn(obj, param, 0, None, ctypes.byref(size)) != 0:
        return ""
    buf = ctypes.create_string_buffer(size.value)
    if fn(obj, param, size.value, buf, None) != 0:
        return ""
    return buf.value.decode(errors="replace").strip()


def _info_int(obj: int, param: int, ctype: Any) -> int:
    v = ctype()
    if _lib.opencl.clGetDeviceInfo(obj, param, ctypes.sizeof(v), ctypes.byref(v), None) != 0:
        return 0
    return int(v.value)


def _type_name(t: int) -> str:
    for bit, name in ((4, "GPU"), (2, "CPU"), (8, "accelerator")):
        if t & bit:
            return name
    return "other"


_default_ids: Dict[Optional[str], Optional[int]] = {}


def _default_device_id() -> Optional[int]:
    """The device a Context without ``device`` gets: found once per value of
    CLATTN_DEVICE (by creating such a context), not on every call."""
    env = os.environ.get("CLATTN_DEVICE")
    if env not in _default_ids:
        try:
            with Context(cache_dir="off") as ctx:
                _default_ids[env] = ctx._cl_objects()[1]
        except Error:
            _default_ids[env] = None
    return _default_ids[env]


def devices() -> List[Device]:
    """Every OpenCL device of every platform, indexed ``"P:D"`` as clattn's device
    option and the ``clattn devices`` command index them; ``is_default`` marks the one a
    :class:`Context` without ``device`` gets. An empty list when no platform is
    installed."""
    cl = _lib.opencl
    n = ctypes.c_uint32()
    if cl.clGetPlatformIDs(0, None, ctypes.byref(n)) != 0 or n.value == 0:
        return []
    plats = (ctypes.c_void_p * n.value)()
    cl.clGetPlatformIDs(n.value, plats, None)
    default_id = _default_device_id()
    out = []
    for p, plat in enumerate(plats):
        pname = _info_str(cl.clGetPlatformInfo, plat, _CL_PLATFORM_NAME)
        nd = ctypes.c_uint32()
        if cl.clGetDeviceIDs(plat, _CL_DEVICE_TYPE_ALL, 0, None, ctypes.byref(nd)) != 0:
            continue
        devs = (ctypes.c_void_p * nd.value)()
        cl.clGetDeviceIDs(plat, _CL_DEVICE_TYPE_ALL, nd.value, devs, None)
        for d, dev in enumerate(devs):
            ext = _info_str(cl.clGetDeviceInfo, dev, _CL_DEVICE_EXTENSIONS).split()
            out.append(Device(
                spec=f"{p}:{d}",
                name=_info_str(cl.clGetDeviceInfo, dev, _CL_DEVICE_NAME),
                platform=pname,
                type=_type_name(_info_int(dev, _CL_DEVICE_TYPE, ctypes.c_uint64)),
                compute_units=_info_int(dev, _CL_DEVICE_MAX_COMPUTE_UNITS, ctypes.c_uint32),
                global_memory_bytes=_info_int(dev, _CL_DEVICE_GLOBAL_MEM_SIZE, ctypes.c_uint64),
                local_memory_bytes=_info_int(dev, _CL_DEVICE_LOCAL_MEM_SIZE, ctypes.c_uint64),
                driver_version=_info_str(cl.clGetDeviceInfo, dev, _CL_DRIVER_VERSION),
                fp16="cl_khr_fp16" in ext,
                fp64="cl_khr_fp64" in ext,
                is_default=dev == default_id,
                _id=dev,
            ))
    return out
