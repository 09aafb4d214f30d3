"""Bad input gives an exception with a clear message and writes nothing; the process
never crashes."""

from __future__ import annotations

import numpy as np
import pytest

import clattn

Q = np.ones((1, 2, 3, 4), np.float32)


def sdpa(*a, **kw):
    return clattn.scaled_dot_product_attention(*a, **kw)


@pytest.mark.parametrize("dtype", [np.float64, np.int32, np.complex64])
def test_unsupported_dtypes(dtype):
    with pytest.raises(TypeError, match=r"query has dtype .*float32, float16 or bfloat16"):
        sdpa(Q.astype(dtype), Q, Q)


def test_causal_alignment_needs_is_causal():
    """(it was ignored without is_causal: a window or ALiBi stayed top-left, silently)"""
    with pytest.raises(ValueError, match="is_causal=True only"):
        sdpa(Q, Q, Q, window=(1, 0), causal_alignment="bottom_right")
    with pytest.raises(ValueError, match="causal_alignment"):
        sdpa(Q, Q, Q, is_causal=True, causal_alignment="diagonal")
    sdpa(Q, Q, Q, causal_alignment="top_left")  # the default, stated: fine


def test_shape_errors():
    with pytest.raises(ValueError, match="same number of dims"):
        sdpa(Q, Q[0], Q)
    with pytest.raises(ValueError, match="same number of dims"):
        sdpa(Q[0, 0, 0], Q[0, 0, 0], Q[0, 0, 0])
    with pytest.raises(ValueError, match="batch dims differ"):
        sdpa(np.ones((2, 2, 3, 4), np.float32), Q, Q)
    with pytest.raises(ValueError, match="enable_gqa=True"):
        sdpa(Q, Q[:, :1], Q[:, :1])
    # heads not a multiple: the library's own message, as a ValueError subclass
    q3 = np.ones((1, 3, 3, 4), np.float32)
    with pytest.raises(clattn.InvalidArgumentError, match="head") as e:
        sdpa(q3, Q, Q, enable_gqa=True)
    assert e.value.status == 2 and e.value.status_name == "invalid shape"
    with pytest.raises(clattn.InvalidArgumentError, match=r"(?i)d_k|dim"):
        sdpa(Q, Q[..., :3], Q)


def test_mask_errors():
    with pytest.raises(ValueError, match="does not broadcast"):
        sdpa(Q, Q, Q, attn_mask=np.ones((2, 3), bool))
    with pytest.raises(TypeError, match="attn_mask has dtype int64"):
        sdpa(Q, Q, Q, attn_mask=np.ones((3, 3), np.int64))
    with pytest.raises(ValueError, match="more than query"):
        sdpa(Q, Q, Q, attn_mask=np.ones((1, 1, 1, 3, 3), bool))


def test_option_errors():
    with pytest.raises(ValueError, match="scale=0"):
        sdpa(Q, Q, Q, scale=0.0)
    with pytest.raises(clattn.InvalidArgumentError, match="scale"):
        sdpa(Q, Q, Q, scale=float("nan"))
    with pytest.raises(ValueError, match=r"dropout_p must be within \[0, 1\)"):
        sdpa(Q, Q, Q, dropout_p=1.0)
    with pytest.raises(ValueError, match="algorithm must be one of"):
        sdpa(Q, Q, Q, algorithm="fast")
    with pytest.raises(ValueError, match="masked_rows"):
        sdpa(Q, Q, Q, masked_rows="inf")
    with pytest.raises(TypeError, match="unexpected keyword argument.*windw"):
        sdpa(Q, Q, Q, windw=(1, 1))
    with pytest.raises(ValueError, match="window must be"):
        sdpa(Q, Q, Q, window=3)
    with pytest.raises(ValueError, match="kv_lens must have 1 entries"):
        sdpa(Q, Q, Q, kv_lens=[1, 2])
    with pytest.raises(clattn.InvalidArgumentError, match="kv_lens"):
        sdpa(Q, Q, Q, kv_lens=[4])
    with pytest.raises(TypeError, match="kv_lens must hold integers"):
        sdpa(Q, Q, Q, kv_lens=[1.5])
    with pytest.raises(ValueError, match="alibi_slopes must have 2 entries"):
        sdpa(Q, Q, Q, alibi_slopes=[1.0])
    with pytest.raises(clattn.InvalidArgumentError, match="softcap"):
        sdpa(Q, Q, Q, softcap=-1.0)
    with pytest.raises(ValueError, match="cannot be combined"):
        sdpa(Q, Q, Q, is_causal=True, no_self=True)
    with pytest.raises(ValueError, match="weights_head_mean needs return_weights"):
        sdpa(Q, Q, Q, weights_head_mean=True)
    with pytest.raises(TypeError, match="q_start must be an integer"):
        sdpa(Q, Q, Q, q_start=1.5)


def test_sinks_errors():
    """sinks: one float per query head (the package's ValueError otherwise, like
    alibi_slopes); NaN and +inf are the library's InvalidArgumentError."""
    with pytest.raises(ValueError, match=r"sinks must have 2 entries, not shape \(1,\)"):
        sdpa(Q, Q, Q, sinks=[1.0])
    with pytest.raises(ValueError, match=r"sinks must have 2 entries, not shape \(3,\)"):
        sdpa(Q, Q, Q, sinks=[1.0, 2.0, 3.0])
    with pytest.raises(ValueError, match="sinks must have 2 entries"):
        sdpa(Q, Q, Q, sinks=np.zeros((2, 1), np.float32))
    with pytest.raises(ValueError, match="sinks must have 2 entries"):
        clattn.reference_attention(Q, Q, Q, sinks=[0.0])
    for bad in (float("nan"), float("inf")):
        with pytest.raises(clattn.InvalidArgumentError, match=r"sinks\[1\]") as e:
            sdpa(Q, Q, Q, sinks=[0.0, bad])
        assert e.value.status_name == "invalid argument"


def test_int8_scale_errors():
    """int8 key / value: the scales are needed with one (the library's
    InvalidArgumentError naming k_scale / v_scale) and refused with a float one; scales
    of another shape are the package's ValueError, of an integer dtype its TypeError; a
    query is never int8; the unfused algorithm, the weights and the backward pass are
    UnsupportedError."""
    k8 = np.ones((1, 2, 3, 4), np.int8)
    ks = np.full((1, 2, 3, 1), 0.5, np.float32)
    with pytest.raises(clattn.InvalidArgumentError, match="k_scale") as e:
        sdpa(Q, k8, Q)
    assert e.value.status_name == "invalid argument"
    with pytest.raises(clattn.InvalidArgumentError, match="v_scale"):
        sdpa(Q, k8, k8, k_scale=ks)
    with pytest.raises(clattn.InvalidArgumentError, match="k_scale"):
        sdpa(Q, Q, Q, k_scale=ks)
    with pytest.raises(clattn.InvalidArgumentError, match="v_scale"):
        clattn.reference_attention(Q, k8, Q, k_scale=ks, v_scale=ks)
    for bad in (ks[:, :1, :2], np.ones((1, 2, 3, 4), np.float32), np.ones((1, 1, 2, 3, 1))):
        with pytest.raises(ValueError, match=r"k_scale has shape .* does not broadcast to "
                                             r"key's shape with the last dim 1, \(1, 2, 3, 1\)"):
            sdpa(Q, k8, Q, k_scale=bad)
    with pytest.raises(TypeError, match="k_scale has dtype int32; scales are float32"):
        sdpa(Q, k8, Q, k_scale=ks.astype(np.int32))
    with pytest.raises(TypeError, match=r"query has dtype int8; .*float32, float16 or bfloat16"):
        sdpa(k8, k8, Q, k_scale=ks)
    with pytest.raises(clattn.UnsupportedError, match="fused"):
        sdpa(Q, k8, Q, k_scale=ks, algorithm="unfused")
    with pytest.raises(clattn.UnsupportedError, match="weights"):
        sdpa(Q, k8, Q, k_scale=ks, return_weights=True)
    with pytest.raises(clattn.UnsupportedError, match="int8"):
        clattn.reference_attention_backward(Q, k8, Q, Q, k_scale=ks)


def test_out_errors_write_nothing():
    out = np.full((1, 2, 3, 4), 5.0, np.float32)
    with pytest.raises(ValueError, match="out has shape"):
        sdpa(Q, Q, Q, out=out[..., :2])
    bc = np.lib.stride_tricks.as_strided(out, shape=out.shape,
                                         strides=(out.strides[0], 0) + out.strides[2:])
    with pytest.raises(ValueError, match="an output cannot broadcast"):
        sdpa(Q, Q, Q, out=bc)
    with pytest.raises(ValueError, match="out is read-only"):
        sdpa(Q, Q, Q, out=np.frombuffer(bytes(out.nbytes), np.float32).reshape(out.shape))
    # an output is never copied: one that would need a copy is refused, not left unwritten
    with pytest.raises(ValueError, match="out has negative strides"):
        sdpa(Q, Q, Q, out=out[..., ::-1])
    q5 = np.ones((3, 2, 1, 3, 4), np.float32)
    out5 = np.full((2, 3, 1, 3, 4), 5.0, np.float32).transpose(1, 0, 2, 3, 4)
    with pytest.raises(ValueError, match="cannot be folded"):
        sdpa(q5, q5, q5, out=out5)
    assert np.all(out5 == 5.0)
    # rejected by the library (kv_lens out of range) after the views were made: O untouched
    with pytest.raises(clattn.InvalidArgumentError):
        sdpa(Q, Q, Q, out=out, kv_lens=[-1])
    assert np.all(out == 5.0)


def test_bad_device():
    with pytest.raises(clattn.DeviceError, match="no-such-device") as e:
        clattn.Context("no-such-device")
    assert e.value.status == 7  # CLATTN_ERROR_NO_DEVICE


def test_not_arrays():
    with pytest.raises(TypeError, match="dtype"):
        sdpa("abc", Q, Q)
    # nested lists are read through np.asarray, their float64 as float32
    assert sdpa([[1.0, 2.0]], [[1.0, 2.0]], [[3.0, 4.0]]).tolist() == [[3.0, 4.0]]


def test_argument_types():
    with pytest.raises(TypeError, match="query has dtype bool"):
        sdpa(Q > 0, Q, Q)
    with pytest.raises(TypeError, match="context must be a clattn.Context"):
        sdpa(Q, Q, Q, context="0:0")
    with pytest.raises(TypeError, match="device must be a string"):
        clattn.Context(0)
    with pytest.raises(ValueError, match="scale = .* does not fit"):
        sdpa(Q, Q, Q, scale=10**400)
    with pytest.raises(ValueError, match="softcap = .* does not fit float32"):
        sdpa(Q, Q, Q, softcap=1e300)
    with pytest.raises(TypeError, match="softcap must be a number"):
        sdpa(Q, Q, Q, softcap="1")
    with pytest.raises(TypeError, match="q_start must be an integer"):
        sdpa(Q, Q, Q, q_start=float("inf"))
    with pytest.raises(TypeError, match=r"window\[0\] must be an integer"):
        sdpa(Q, Q, Q, window="ab")
    with pytest.raises(TypeError, match="is_causal must be True or False"):
        sdpa(Q, Q, Q, is_causal="no")
    with pytest.raises(TypeError, match="return_lse must be True or False"):
        sdpa(Q, Q, Q, return_lse=1)
    for bad in ("float16", "int32", np.float16, True, 8, "f64", np.longdouble):
        with pytest.raises(ValueError, match="lse_dtype must be float32 or float64"):
            sdpa(Q, Q, Q, return_lse=True, lse_dtype=bad)
    with pytest.raises(ValueError, match="lse_dtype float64 needs return_lse=True"):
        sdpa(Q, Q, Q, lse_dtype="float64")
    assert sdpa(Q, Q, Q, lse_dtype="float32").shape == Q.shape  # the default, unused
    if clattn.default_context().device.fp64:  # any byte order names float64
        assert sdpa(Q, Q, Q, return_lse=True, lse_dtype=">f8")[1].dtype == np.float64
    with pytest.raises(TypeError, match="lse_dtype"):
        clattn.reference_attention_backward(Q, Q, Q, Q, lse_dtype="float64")


@pytest.mark.parametrize("shape", [(0, 4), (1, 0, 3, 4), (2, 3, 0, 4)],
                         ids=["L0_2d", "H0", "L0"])
def test_empty_arrays(shape):
    """Empty inputs give empty outputs (NumPy gives empty arrays all-zero strides)."""
    q = np.zeros(shape, np.float32)
    kv = np.ones(shape[:-2] + (3, shape[-1]), np.float32)
    out = sdpa(q, kv, kv)
    assert out.shape == shape
    # no keys: every row sees nothing and outputs zeros, LSE -inf
    o, lse = sdpa(np.ones((2, 4), np.float32), np.ones((0, 4), np.float32),
                  np.ones((0, 3), np.float32), return_lse=True)
    assert np.all(o == 0) and o.shape == (2, 3) and np.all(lse == -np.inf)


def test_zero_head_dims_refused():
    """Head dims must be at least 1 (the library's rule), also for empty arrays."""
    with pytest.raises(clattn.InvalidArgumentError, match="d_k is 0"):
        sdpa(np.zeros((1, 2, 5, 0), np.float32), np.zeros((1, 2, 5, 0), np.float32),
             np.zeros((1, 2, 5, 1), np.float32))
    with pytest.raises(clattn.InvalidArgumentError, match="d_v is 0"):
        sdpa(Q, Q, np.zeros((1, 2, 3, 0), np.float32))


def test_out_must_be_an_array_and_tiny_scale():
    with pytest.raises(TypeError, match="out must be a NumPy array"):
        sdpa(Q, Q, Q, out=np.zeros((1, 2, 3, 4)).tolist())
    with pytest.raises(ValueError, match="underflows to 0 in float32"):
        sdpa(Q, Q, Q, scale=1e-46)
    with pytest.raises(ValueError, match="underflows to 0 in float32"):
        sdpa(Q, Q, Q, softcap=1e-46)


def test_plan_uses_out():
    out = np.zeros((1, 2, 3, 4), np.float32)
    with pytest.raises(ValueError, match="out is read-only"):
        out.flags.writeable = False
        clattn.plan(Q, Q, Q, out=out)


def test_default_context_is_default_device():
    assert clattn.default_context().device.is_default
