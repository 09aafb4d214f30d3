"""PyOpenCL arrays in and out: no host copies, events respected; runs where pyopencl is
installed (.ci/run installs it)."""

from __future__ import annotations

import numpy as np
import pytest

import clattn
from conftest import F32_TOL, assert_close, oracle, randn, rng

cl = pytest.importorskip("pyopencl")
cl_array = pytest.importorskip("pyopencl.array")


@pytest.fixture(scope="module")
def queue():
    default = next(d for d in clattn.devices() if d.is_default)
    p, d = (int(x) for x in default.spec.split(":"))
    dev = cl.get_platforms()[p].get_devices()[d]
    ctx = cl.Context([dev])
    return cl.CommandQueue(ctx)


def test_device_arrays_in_and_out(queue):
    r = rng(200)
    q, k, v = randn(r, 2, 4, 5, 8), randn(r, 2, 2, 11, 8), randn(r, 2, 2, 11, 6)
    dq, dk, dv = (cl_array.to_device(queue, x) for x in (q, k, v))
    out, lse = clattn.scaled_dot_product_attention(dq, dk, dv, enable_gqa=True, is_causal=True,
                                                   return_lse=True)
    assert isinstance(out, cl_array.Array) and out.shape == (2, 4, 5, 6)
    assert out.events, "the output carries clattn's completion event"
    eo, else_, _ = oracle(q, k, v, causal="top_left")
    assert_close(out.get(), eo, **F32_TOL, what="O")
    assert_close(lse.get(), else_, **F32_TOL, what="LSE")
    if queue.device.double_fp_config:  # a float64 LSE needs cl_khr_fp64
        _, lse64 = clattn.scaled_dot_product_attention(dq, dk, dv, enable_gqa=True,
                                                       is_causal=True, return_lse=True,
                                                       lse_dtype="float64")
        assert isinstance(lse64, cl_array.Array) and lse64.dtype == np.float64
        assert_close(lse64.get(), else_, **F32_TOL, what="LSE float64")


def test_events_and_device_mask(queue):
    """Inputs produced by a kernel still running (their events) are waited for; a
    device mask and out= on a device array."""
    r = rng(201)
    q, k, v = randn(r, 1, 2, 40, 16), randn(r, 1, 2, 30, 16), randn(r, 1, 2, 30, 16)
    dq = cl_array.to_device(queue, q)
    dq2 = dq * 2  # an elementwise kernel: dq2 carries its event
    keep = r.random((1, 1, 40, 30)) < 0.5
    dm = cl_array.to_device(queue, keep)
    dout = cl_array.zeros(queue, (1, 2, 40, 16), np.float32)
    res = clattn.scaled_dot_product_attention(dq2, cl_array.to_device(queue, k),
                                              cl_array.to_device(queue, v), attn_mask=dm,
                                              out=dout)
    assert res is dout
    assert_close(dout.get(), oracle(2 * q, k, v, mask=keep)[0], **F32_TOL)


def test_explicit_context_and_mixed_kinds(queue):
    r = rng(202)
    q = randn(r, 1, 1, 3, 4)
    dq = cl_array.to_device(queue, q)
    c = clattn.Context.from_pyopencl(queue)
    out = clattn.scaled_dot_product_attention(dq, dq, dq, context=c)
    assert_close(out.get(), oracle(q, q, q)[0], **F32_TOL)
    with pytest.raises(TypeError, match="all be host arrays .* or all PyOpenCL"):
        clattn.scaled_dot_product_attention(dq, q, q)
    other = cl.CommandQueue(cl.Context([queue.device]))
    with pytest.raises(clattn.InvalidArgumentError, match="context"):
        clattn.scaled_dot_product_attention(dq, dq, dq, context=clattn.Context.from_pyopencl(other))
    c.close()


def test_empty_device_arrays(queue):
    """Empty PyOpenCL arrays (which have no buffer): no batch, no keys."""
    q = cl_array.to_device(queue, np.ones((2, 3, 4, 8), np.float32))
    kv0 = cl_array.empty(queue, (2, 3, 0, 8), np.float32)
    o, lse = clattn.scaled_dot_product_attention(q, kv0, kv0, return_lse=True)
    assert np.all(o.get() == 0) and np.all(lse.get() == -np.inf)
    e = cl_array.empty(queue, (0, 3, 4, 8), np.float32)
    assert clattn.scaled_dot_product_attention(e, e, e).shape == (0, 3, 4, 8)
