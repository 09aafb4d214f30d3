"""clattn — scaled dot-product attention on any OpenCL device, from Python.

    import clattn
    out = clattn.scaled_dot_product_attention(q, k, v, is_causal=True)

NumPy arrays and PyTorch CPU tensors are read in place (host memory; the call blocks);
``pyopencl.array.Array`` inputs stay on the device (the call enqueues). The arguments
and semantics are PyTorch's ``torch.nn.functional.scaled_dot_product_attention``, plus
clattn's options (window, ALiBi, softcap, lengths, LSE, weights, ...); ``dropout_p``
draws clattn's own Philox4x32-10 mask (``dropout_seed``, ``dropout_offset``;
:func:`dropout_mask` returns it). See :func:`scaled_dot_product_attention`,
:func:`plan`, :class:`Context`, :func:`devices`.
"""

from ._attention import (BlockMask, Plan, dropout_mask, plan, reference_attention,
                         reference_attention_backward, scaled_dot_product_attention)
from ._context import (Context, Device, DeviceError, Error, InvalidArgumentError,
                       UnsupportedError, default_context, devices)
from ._lib import lib as _clib

__version__: str = _clib.clattn_version().decode()
"""The C library's version (``clattn_version()``), which is the package's."""

__all__ = [
    "BlockMask", "Context", "Device", "DeviceError", "Error", "InvalidArgumentError", "Plan",
    "UnsupportedError", "default_context", "devices", "dropout_mask", "plan",
    "reference_attention", "reference_attention_backward",
    "scaled_dot_product_attention", "__version__",
]
