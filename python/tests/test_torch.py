"""Against torch.nn.functional.scaled_dot_product_attention (math backend, float64) on
PyTorch CPU tensors; runs where torch is installed (.ci/run installs it)."""

from __future__ import annotations

import numpy as np
import pytest

import clattn
from conftest import BF16_TOL, F16_TOL, F32_TOL, assert_close, rng

torch = pytest.importorskip("torch")
F = torch.nn.functional


def t(r, *shape, dtype=None):
    return torch.from_numpy(r.standard_normal(shape).astype(np.float32)).to(
        dtype or torch.float32)


def torch_ref(q, k, v, **kw):
    """PyTorch's math backend in float64 (NaN rows of a fully masked row → 0, clattn's
    convention, which PyTorch's fused CPU kernel follows too)."""
    with torch.nn.attention.sdpa_kernel(torch.nn.attention.SDPBackend.MATH):
        o = F.scaled_dot_product_attention(q.double(), k.double(), v.double(), **kw)
    return torch.nan_to_num(o, nan=0.0)


CASES = [
    ("plain", {}),
    ("causal", {"is_causal": True}),
    ("scale", {"scale": 0.3}),
    ("gqa", {"enable_gqa": True}),
    ("bool_mask", {"attn_mask": "bool"}),
    ("float_mask", {"attn_mask": "float"}),
]


@pytest.mark.parametrize("name,kw", CASES, ids=[c[0] for c in CASES])
@pytest.mark.parametrize("n_q", [1, 40], ids=["decode", "tiled"])
def test_matches_torch_float64(ctx, name, kw, n_q):
    r = rng(100 + n_q)
    hkv = 2 if name == "gqa" else 4
    q, k, v = t(r, 2, 4, n_q, 16), t(r, 2, hkv, 29, 16), t(r, 2, hkv, 29, 12)
    kw = dict(kw)
    if kw.get("attn_mask") == "bool":
        kw["attn_mask"] = torch.from_numpy(r.random((n_q, 29)) < 0.6)
    elif kw.get("attn_mask") == "float":
        kw["attn_mask"] = torch.from_numpy(r.standard_normal((2, 1, n_q, 29)).astype(np.float32))
    got = clattn.scaled_dot_product_attention(q, k, v, **kw)
    assert isinstance(got, torch.Tensor) and got.dtype == torch.float32
    assert got.shape == (2, 4, n_q, 12)
    assert_close(got.numpy(), torch_ref(q, k, v, **kw).numpy(), **F32_TOL, what=name)


def test_int8_kv_tensors(ctx):
    """torch.int8 key and value with float32 per-token scales (and a float16 v_scale,
    converted): against PyTorch's float64 math backend on the dequantized tensors."""
    r = rng(125)
    q, k, v = t(r, 2, 4, 9, 16), t(r, 2, 2, 21, 16), t(r, 2, 2, 21, 16)
    ks = k.abs().amax(-1, keepdim=True) / 127
    vs = (v.abs().amax(-1, keepdim=True) / 127).half()
    k8 = torch.round(k / ks).clamp(-127, 127).to(torch.int8)
    v8 = torch.round(v / vs.float()).clamp(-127, 127).to(torch.int8)
    got = clattn.scaled_dot_product_attention(q, k8, v8, enable_gqa=True, is_causal=True,
                                              k_scale=ks, v_scale=vs)
    assert isinstance(got, torch.Tensor) and got.dtype == torch.float32
    exp = torch_ref(q, k8.double() * ks.double(), v8.double() * vs.float().double(),
                    enable_gqa=True, is_causal=True)
    assert_close(got.numpy(), exp.numpy(), **F32_TOL, what="int8 K/V")


@pytest.mark.parametrize("dtype,tol", [("float16", F16_TOL), ("bfloat16", BF16_TOL)])
def test_16bit_tensors(ctx, dtype, tol):
    r = rng(110)
    dt = getattr(torch, dtype)
    q, k, v = (t(r, 1, 2, 7, 32, dtype=dt) for _ in range(3))
    got = clattn.scaled_dot_product_attention(q, k, v, is_causal=True)
    assert got.dtype == dt
    assert_close(got.float().numpy(), torch_ref(q, k, v, is_causal=True).numpy(), **tol,
                 what=dtype)


def test_non_contiguous_zero_copy(ctx):
    """(B, L, H, E) tensors transposed to (B, H, L, E): strides passed through."""
    r = rng(111)
    q, k, v = (t(r, 2, 9, 4, 16).transpose(1, 2) for _ in range(3))
    assert not q.is_contiguous()
    got = clattn.scaled_dot_product_attention(q, k, v, is_causal=True)
    assert_close(got.numpy(), torch_ref(q, k, v, is_causal=True).numpy(), **F32_TOL)


def test_negative_bit_views(ctx):
    """A view with PyTorch's negative bit set (z.conj().imag, torch._neg_view(x)) holds -x
    in its memory: read as its values (resolved into a copy), refused as an output."""
    r = rng(114)
    z = torch.complex(t(r, 1, 2, 5, 8), t(r, 1, 2, 5, 8))
    q = z.conj().imag  # float32, is_neg(): the values are -z.imag
    assert q.is_neg()
    k, v = t(r, 1, 2, 7, 8), t(r, 1, 2, 7, 8)
    got = clattn.scaled_dot_product_attention(q, k, v, kv_lens=z.real.new_tensor([5]).int())
    ref = torch_ref(q.resolve_neg(), k[:, :, :5], v[:, :, :5])
    assert_close(got.numpy(), ref.numpy(), **F32_TOL)
    out = torch.complex(torch.zeros(1, 2, 5, 8), torch.zeros(1, 2, 5, 8)).conj().imag
    with pytest.raises(ValueError, match="negated"):
        clattn.scaled_dot_product_attention(q, k, v, out=out)


def test_out_lse_and_expand(ctx):
    r = rng(112)
    q = t(r, 2, 4, 6, 8)
    k = t(r, 1, 4, 10, 8).expand(2, 4, 10, 8)  # stride 0 on batch: broadcast, no copy
    v = t(r, 1, 4, 10, 8).expand(2, 4, 10, 8)
    out = torch.empty(2, 4, 6, 8)
    res, lse = clattn.scaled_dot_product_attention(q, k, v, out=out, return_lse=True)
    assert res is out
    assert_close(out.numpy(), torch_ref(q, k, v).numpy(), **F32_TOL)
    s = (q.double() @ k.double().transpose(-1, -2)) / 8 ** 0.5
    assert_close(lse.numpy(), torch.logsumexp(s, -1).numpy(), **F32_TOL, what="LSE")
    if ctx.device.fp64:  # a float64 LSE needs cl_khr_fp64
        _, lse64 = clattn.scaled_dot_product_attention(q, k, v, return_lse=True,
                                                       lse_dtype=torch.float64)
        assert lse64.dtype == torch.float64 and lse64.shape == lse.shape
        assert_close(lse64.numpy(), torch.logsumexp(s, -1).numpy(), **F32_TOL,
                     what="LSE f64")


def test_requires_grad_refused(ctx):
    q = torch.ones(1, 1, 2, 4, requires_grad=True)
    with pytest.raises(NotImplementedError, match="no backward pass"):
        clattn.scaled_dot_product_attention(q, q, q)
    with torch.no_grad():
        clattn.scaled_dot_product_attention(q, q, q)


def test_grad_through_mask_or_out_refused(ctx):
    q = torch.ones(1, 1, 2, 4)
    m = torch.zeros(2, 2, requires_grad=True)
    with pytest.raises(NotImplementedError, match="attn_mask requires grad"):
        clattn.scaled_dot_product_attention(q, q, q, attn_mask=m)
    # the tensor options too (a trainer might learn only the sinks)
    for name, val in (("sinks", torch.zeros(1, requires_grad=True)),
                      ("alibi_slopes", torch.ones(1, requires_grad=True))):
        with pytest.raises(NotImplementedError, match=f"{name} requires grad"):
            clattn.scaled_dot_product_attention(q, q, q, **{name: val})
        with torch.no_grad():
            assert clattn.scaled_dot_product_attention(q, q, q, **{name: val}).shape == q.shape
    q8 = torch.ones(1, 1, 2, 4, dtype=torch.int8)
    with pytest.raises(NotImplementedError, match="k_scale requires grad"):
        clattn.scaled_dot_product_attention(q, q8, q8, k_scale=torch.ones(1, requires_grad=True),
                                            v_scale=torch.ones(1))
    with pytest.raises(NotImplementedError, match="no backward pass"):
        clattn.scaled_dot_product_attention(q, q, q, out=torch.zeros(1, 1, 2, 4,
                                                                      requires_grad=True))


def test_empty_and_sparse(ctx):
    q = torch.zeros(2, 3, 0, 8)
    assert clattn.scaled_dot_product_attention(q, torch.ones(2, 3, 5, 8),
                                               torch.ones(2, 3, 5, 8)).shape == (2, 3, 0, 8)
    with pytest.raises(TypeError, match="bool"):
        b = torch.ones(1, 1, 2, 4, dtype=torch.bool)
        clattn.scaled_dot_product_attention(b, b, b)
    s = torch.eye(4).to_sparse()
    with pytest.raises(TypeError, match="sparse"):
        clattn.scaled_dot_product_attention(s, s, s)


def test_float64_refused(ctx):
    q = torch.ones(1, 1, 2, 4, dtype=torch.float64)
    with pytest.raises(TypeError, match="torch.float64"):
        clattn.scaled_dot_product_attention(q, q, q)


BACKWARD_CASES = [
    ("plain", {}),
    ("causal_scale", {"is_causal": True, "scale": 0.4}),
    ("gqa_bool_mask", {"enable_gqa": True, "attn_mask": "bool"}),
    ("float_mask", {"attn_mask": "float"}),
]


@pytest.mark.parametrize("name,kw", BACKWARD_CASES, ids=[c[0] for c in BACKWARD_CASES])
def test_reference_backward_matches_torch_autograd(name, kw):
    """clattn.reference_attention_backward against torch.autograd through the math backend
    in float64, from the same float32 values; the reference rounds its float64 result to
    float32 once (F32_TOL)."""
    r = rng(120)
    hkv = 2 if kw.get("enable_gqa") else 4
    q, k, v = t(r, 2, 4, 6, 8), t(r, 2, hkv, 9, 8), t(r, 2, hkv, 9, 5)
    g = t(r, 2, 4, 6, 5)
    kw = dict(kw)
    if kw.get("attn_mask") == "bool":
        m = r.random((6, 9)) < 0.7
        m[:, 0] = True  # every row sees a key (torch's math backend gives NaN otherwise)
        kw["attn_mask"] = torch.from_numpy(m)
    elif kw.get("attn_mask") == "float":
        kw["attn_mask"] = torch.from_numpy(r.standard_normal((2, 1, 6, 9)).astype(np.float32))
    dq, dk, dv = clattn.reference_attention_backward(q, k, v, g, **kw)
    assert all(isinstance(x, torch.Tensor) for x in (dq, dk, dv))
    qd, kd, vd = (x.double().requires_grad_() for x in (q, k, v))
    with torch.nn.attention.sdpa_kernel(torch.nn.attention.SDPBackend.MATH):
        o = F.scaled_dot_product_attention(qd, kd, vd, **kw)
    o.backward(g.double())
    for got, ref, what in ((dq, qd.grad, "dQ"), (dk, kd.grad, "dK"), (dv, vd.grad, "dV")):
        assert_close(got.numpy(), ref.numpy(), **F32_TOL, what=f"{name} {what}")


def test_reference_backward_from_autograd_shapes():
    """grad_out as autograd hands it out for out.sum() (all strides 0), inputs that
    require grad (the reference functions build no graph), a list query."""
    r = rng(121)
    q, k, v = t(r, 2, 3, 5, 8), t(r, 2, 3, 6, 8), t(r, 2, 3, 6, 4)
    ones = torch.ones(()).expand(2, 3, 5, 4)
    dq, dk, dv = clattn.reference_attention_backward(q.requires_grad_(), k, v, ones)
    qd, kd, vd = (x.detach().double().requires_grad_() for x in (q, k, v))
    with torch.nn.attention.sdpa_kernel(torch.nn.attention.SDPBackend.MATH):
        F.scaled_dot_product_attention(qd, kd, vd).sum().backward()
    for got, ref, what in ((dq, qd.grad, "dQ"), (dk, kd.grad, "dK"), (dv, vd.grad, "dV")):
        assert_close(got.numpy(), ref.numpy(), **F32_TOL, what=what)
    assert clattn.reference_attention(q, k, v).requires_grad is False
    lq = clattn.reference_attention_backward(q.detach().numpy().tolist(), k.numpy(), v.numpy(),
                                             ones.numpy())
    assert_close(lq[0], dq.numpy(), atol=0, rtol=0, what="list query")
