"""clattn.scaled_dot_product_attention on NumPy arrays: the worked examples, every
option against the float64 oracle in conftest.py, layouts and dtypes."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

import clattn
from conftest import BF16_TOL, F16_TOL, F32_TOL, assert_close, oracle, randn, rng

CASES = Path(__file__).resolve().parents[2] / "tests" / "cases" / "seed_examples.json"

X000 = np.array([[0.43, 0.15, 0.89], [0.55, 0.87, 0.66], [0.57, 0.85, 0.64],
                 [0.22, 0.58, 0.33], [0.77, 0.25, 0.10], [0.05, 0.80, 0.55]], np.float32)


def _examples():
    return json.loads(CASES.read_text())["examples"]


@pytest.mark.parametrize("algorithm", ["fused", "unfused"])
def test_seed_000_journey(ctx, algorithm):
    """"Your journey starts with one step": Q = K = V = X (6×3), scale 1; W and Z as the
    seed's JSON gives them (10 decimals)."""
    ex = _examples()["6x3_unscaled"]
    o, w = clattn.scaled_dot_product_attention(X000, X000, X000, scale=1.0,
                                               return_weights=True, algorithm=algorithm)
    assert o.dtype == np.float32 and o.shape == (6, 3)
    assert_close(w, ex["W"], atol=1e-6, rtol=1e-6, what="W")
    assert_close(o, ex["Z"], atol=1e-6, rtol=1e-6, what="Z")


def test_seed_003_sat_bank_river(ctx):
    """"sat bank river": scale 1/2, no query attends itself; bank attends river 0.7027."""
    ex = _examples()["sat_bank_river_scale_half_self_excluded"]
    x = np.array([[0.1, 0.2, 0.3, 0.4], [0.3, -0.4, 0.0, 1.3], [0.4, -0.3, 0.1, 1.5]],
                 np.float32)
    o, lse, w = clattn.scaled_dot_product_attention(x, x, x, scale=0.5, no_self=True,
                                                    return_lse=True, return_weights=True)
    assert_close(w, ex["W"], atol=1e-6, rtol=1e-6, what="W")
    assert_close(o, ex["O"], atol=1e-6, rtol=1e-6, what="O")
    assert w[1, 2] == pytest.approx(0.7027, abs=5e-5)
    assert_close(lse, oracle(x[None, None], x[None, None], x[None, None], scale=0.5,
                             no_self=True)[1][0, 0], **F32_TOL, what="LSE")


# Options that each select a kernel variant; one problem per row keeps the number of
# programs PoCL builds small (about a second each, cold).
FEATURES = [
    ("causal_window_alibi_softcap_lengths",
     {"is_causal": True, "window": (3, 1), "alibi_slopes": [0.5, 0.25, 0.125, 0.0625],
      "softcap": 2.0, "kv_lens": [9, 0], "q_lens": [5, 2]},
     {"causal": "top_left", "window": (3, 1), "alibi": [0.5, 0.25, 0.125, 0.0625],
      "softcap": 2.0, "kv_lens": [9, 0], "q_lens": [5, 2]}),
    ("bottom_right_positions",
     {"is_causal": True, "causal_alignment": "bottom_right", "q_start": 4, "kv_start": 2},
     {"causal": "bottom_right", "q_start": 4, "kv_start": 2}),
    ("no_self", {"no_self": True}, {"no_self": True}),
]

@pytest.mark.parametrize("name,kw,okw", FEATURES, ids=[f[0] for f in FEATURES])
@pytest.mark.parametrize("n_q", [5, 37], ids=["decode", "tiled"])
def test_features_against_oracle(ctx, name, kw, okw, n_q):
    """GQA (4 query heads on 2 KV heads) with the options combined; O and the LSE against
    the oracle (the weights: the seeds and test_weights_head_mean; d_k ≠ d_v and each
    option alone: test_sweep.py). Head dim 8 throughout this file keeps the number of
    programs PoCL builds small."""
    r = rng(1 + n_q)
    q, k, v = randn(r, 2, 4, n_q, 8), randn(r, 2, 2, 11, 8), randn(r, 2, 2, 11, 8)
    o, lse = clattn.scaled_dot_product_attention(q, k, v, enable_gqa=True, return_lse=True,
                                                 **kw)
    eo, else_, _ = oracle(q, k, v, **okw)
    assert_close(o, eo, **F32_TOL, what=f"{name} O")
    assert_close(lse, else_, **F32_TOL, what=f"{name} LSE")


def test_flash_attention_diagonal_with_q_start(ctx):
    """FlashAttention's window_size and alibi_slopes measure from the bottom-right diagonal
    i + S - L also without a causal mask; docs/PYTHON.md maps them with q_start = S - L.
    Against FlashAttention's formula written out here (not the oracle, which is ours)."""
    r = rng(71)
    n_q, n_kv = 4, 9
    q, k, v = randn(r, 1, 2, n_q, 8), randn(r, 1, 2, n_kv, 8), randn(r, 1, 2, n_kv, 8)
    slopes = np.array([0.5, 0.25])
    i, j = np.arange(n_q)[:, None], np.arange(n_kv)[None, :]
    diag = i + n_kv - n_q
    s = np.einsum("bhid,bhjd->bhij", q.astype(np.float64), k.astype(np.float64)) / 8 ** 0.5
    for kw, bias, visible in (
            ({"window": (2, 0)}, 0.0, (j >= diag - 2) & (j <= diag)),
            ({"alibi_slopes": slopes}, -slopes[:, None, None] * np.abs(diag - j), True)):
        t = np.where(visible, s + bias, -np.inf)
        w = np.exp(t - t.max(-1, keepdims=True))
        want = (w / w.sum(-1, keepdims=True)) @ v.astype(np.float64)
        got = clattn.scaled_dot_product_attention(q, k, v, q_start=n_kv - n_q, **kw)
        assert_close(got, want, **F32_TOL, what=str(list(kw)))


def _sink_reference(q, k, v, sinks, kv_lens=None):
    """float64 attention with sinks, written out apart from the oracle: per batch entry,
    scores = scale·Q·Kᵀ (scale 1/sqrt(d_k); keys j ≥ kv_lens[b] masked), one more column
    of sinks[h], softmax over the n_kv + 1 columns, that last column dropped, times V.
    LSE = logsumexp over the n_kv + 1 columns. Returns (O, LSE, W)."""
    q, k, v = (np.asarray(x, dtype=np.float64) for x in (q, k, v))
    b, hq, n_q, dk = q.shape
    g = hq // k.shape[1]
    k, v = np.repeat(k, g, axis=1), np.repeat(v, g, axis=1)
    n_kv = k.shape[2]
    s = np.einsum("bhid,bhjd->bhij", q, k) / np.sqrt(dk)
    if kv_lens is not None:
        visible = np.arange(n_kv)[None, :] < np.asarray(kv_lens)[:, None]  # [b, n_kv]
        s = np.where(visible[:, None, None, :], s, -np.inf)
    sink = np.broadcast_to(np.asarray(sinks, np.float64)[None, :, None, None], (b, hq, n_q, 1))
    s = np.concatenate([s, sink], axis=-1)
    mx = s.max(axis=-1, keepdims=True)
    empty = mx == -np.inf  # no visible key and no sink: zeros, LSE -inf
    e = np.exp(s - np.where(empty, 0.0, mx))
    l = e.sum(axis=-1, keepdims=True)
    w = np.where(empty, 0.0, e / np.where(empty, 1.0, l))[..., :-1]
    o = np.einsum("bhij,bhjd->bhid", w, v)
    lse = np.where(empty, -np.inf, mx + np.log(np.where(empty, 1.0, l)))[..., 0]
    return o, lse, w


SINKS = [0.5, -np.inf, 3.0, -2.0]  # per query head; -inf = no sink for head 1


@pytest.mark.parametrize("algorithm", ["fused", "unfused"])
@pytest.mark.parametrize("n_q", [5, 37], ids=["decode", "tiled"])
def test_sinks_against_numpy(ctx, algorithm, n_q):
    """Attention sinks (gpt-oss): GQA (4 query heads on 2 KV heads), sinks finite and
    -inf; O, the LSE (which includes the sink) and the weights (which sum below 1 where
    a head has a sink) against _sink_reference. Batch entry 1 sees no key (kv_lens 0):
    its rows output zeros with LSE = the sink, or -inf where the head has none."""
    r = rng(60 + n_q)
    q, k, v = randn(r, 2, 4, n_q, 8), randn(r, 2, 2, 11, 8), randn(r, 2, 2, 11, 8)
    kv_lens = [9, 0]
    o, lse, w = clattn.scaled_dot_product_attention(
        q, k, v, enable_gqa=True, sinks=SINKS, kv_lens=kv_lens, return_lse=True,
        return_weights=True, algorithm=algorithm)
    eo, else_, ew = _sink_reference(q, k, v, SINKS, kv_lens)
    assert_close(o, eo, **F32_TOL, what="sinks O")
    assert_close(lse, else_, **F32_TOL, what="sinks LSE")
    assert_close(w, ew, **F32_TOL, what="sinks W")
    sums = w[0].sum(axis=-1)  # [h, n_q]
    assert np.all(sums[[0, 2, 3]] < 1 - 1e-3) and np.allclose(sums[1], 1.0, atol=1e-5)
    assert np.all(o[1] == 0)
    assert_close(lse[1], np.broadcast_to(np.array(SINKS)[:, None], (4, n_q)), atol=0, rtol=0,
                 what="LSE of rows without keys")
    # the float64 C reference agrees; a float64 array of sinks is taken as well
    ro, rlse = clattn.reference_attention(q, k, v, enable_gqa=True,
                                          sinks=np.array(SINKS, np.float64),
                                          kv_lens=kv_lens, return_lse=True)
    assert_close(ro, eo, **F32_TOL, what="reference_attention sinks O")
    assert_close(rlse, else_, **F32_TOL, what="reference_attention sinks LSE")


def test_sinks_of_minus_inf_change_nothing(ctx):
    r = rng(59)
    q, k, v = randn(r, 1, 2, 6, 8), randn(r, 1, 2, 10, 8), randn(r, 1, 2, 10, 8)
    o, lse = clattn.scaled_dot_product_attention(q, k, v, return_lse=True)
    so, slse = clattn.scaled_dot_product_attention(q, k, v, return_lse=True,
                                                   sinks=[-np.inf, -np.inf])
    assert_close(so, o, atol=0, rtol=0, what="O")
    assert_close(slse, lse, atol=0, rtol=0, what="LSE")


@pytest.mark.parametrize("lse_dtype", ["float64", np.float64])
def test_float64_lse_merges_a_split_exactly(ctx, lse_dtype):
    """Case R17 (tests/cases): keys far from the query under ALiBi (q_start 1e8) give
    LSEs near -5e7, where float32's spacing is 4, so float32 LSEs of the two key blocks
    round to one value and a merge weights them 50/50 (O 0.3558, 0.1442). lse_dtype
    float64 returns them exactly: the two parts, merged in NumPy, equal one call's O
    (0.28160775, 0.03861455) within 1e-5 (absolute), and each part's LSE equals the case's
    within 1e-6 relative."""
    if not ctx.device.fp64:
        pytest.skip(f"a float64 LSE needs cl_khr_fp64, which {ctx.device.name} lacks")
    case = json.loads((CASES.parent / "R17.json").read_text())
    q, k, v = (np.array(case["inputs"][n], np.float32) for n in ("q", "k", "v"))
    kw = dict(scale=1.0, alibi_slopes=[0.5], q_start=100_000_000, return_lse=True)
    parts = [clattn.scaled_dot_product_attention(q, k[a:a + 2], v[a:a + 2], kv_start=a,
                                                 lse_dtype=lse_dtype, **kw) for a in (0, 2)]
    exp = case["expected"]["parts"]
    for (o, lse), key in zip(parts, ("keys_0_1", "keys_2_3")):
        assert o.dtype == np.float32 and lse.dtype == np.float64 and lse.shape == (1,)
        assert_close(lse, [exp[key]["lse"]], atol=0, rtol=1e-6, what=f"LSE {key}")
    (o1, l1), (o2, l2) = parts
    top = np.logaddexp(l1, l2)[:, None]
    merged = np.exp(l1[:, None] - top) * o1 + np.exp(l2[:, None] - top) * o2
    assert_close(merged, case["expected"]["O"], atol=1e-5, rtol=0, what="merged O")
    o32, l32 = clattn.scaled_dot_product_attention(q, k, v, **kw)  # the default: float32
    assert l32.dtype == np.float32
    assert_close(o32, case["expected"]["O"], atol=1e-5, rtol=0, what="one call's O")


def _quantize(x, axis=-1):
    """Symmetric int8 quantization per row (the last axis): scale = max|x| / 127, integers
    round(x / scale) within ±127. Returns (int8 array, float32 scales with that axis 1)."""
    scale = (np.abs(x).max(axis=axis, keepdims=True) / 127).astype(np.float32)
    return np.clip(np.round(x / scale), -127, 127).astype(np.int8), scale


def _dequantize(x_int, scale):
    """The values an int8 K or V means, in float64: integers times their (broadcast)
    scale."""
    return x_int.astype(np.float64) * np.asarray(scale, np.float64)


@pytest.mark.parametrize("n_q", [5, 37], ids=["decode", "tiled"])
def test_int8_kv_per_token_scales_against_numpy(ctx, n_q):
    """An int8 K and V (a quantized cache) with float32 scales per token and head, GQA (4
    query heads on 2 KV heads), causal: O and the LSE against the float64 oracle on the
    dequantized K and V, which is also what the C reference computes; the quantization
    error against the float32 K and V stays small."""
    r = rng(70 + n_q)
    q, k, v = randn(r, 2, 4, n_q, 16), randn(r, 2, 2, 23, 16), randn(r, 2, 2, 23, 16)
    k8, ks = _quantize(k)
    v8, vs = _quantize(v)
    assert ks.shape == (2, 2, 23, 1) and k8.dtype == np.int8
    o, lse = clattn.scaled_dot_product_attention(q, k8, v8, is_causal=True, enable_gqa=True,
                                                 k_scale=ks, v_scale=vs, return_lse=True)
    eo, else_, _ = oracle(q, _dequantize(k8, ks), _dequantize(v8, vs), causal=True)
    assert o.dtype == np.float32 and o.shape == (2, 4, n_q, 16)
    assert_close(o, eo, **F32_TOL, what="int8 O")
    assert_close(lse, else_, **F32_TOL, what="int8 LSE")
    ro, rlse = clattn.reference_attention(q, k8, v8, is_causal=True, enable_gqa=True,
                                          k_scale=ks, v_scale=vs, return_lse=True)
    assert_close(ro, eo, **F32_TOL, what="reference_attention int8 O")
    assert_close(rlse, else_, **F32_TOL, what="reference_attention int8 LSE")
    fo = oracle(q, k, v, causal=True)[0]
    assert np.abs(o - fo).max() < 0.05, "int8 against float32 K/V: quantization error too big"


def test_int8_kv_per_head_scales(ctx):
    """One scale per KV head: (1, H_kv, 1, 1), or (H_kv, 1, 1) broadcast as in NumPy,
    give the same result; an int8 K with a float V needs only k_scale; 2-D inputs take
    (S or 1, 1) scales."""
    r = rng(75)
    q, k, v = randn(r, 1, 2, 9, 8), randn(r, 1, 2, 12, 8), randn(r, 1, 2, 12, 8)
    k8, ks = _quantize(k, axis=(0, 2, 3))  # one scale per head: (1, 2, 1, 1)
    v8, vs = _quantize(v, axis=(0, 2, 3))
    assert ks.shape == (1, 2, 1, 1)
    eo = oracle(q, _dequantize(k8, ks), _dequantize(v8, vs))[0]
    for kss, vss in ((ks, vs), (ks[0], vs[0]), (ks.astype(np.float64), vs[0, :, :, 0:1])):
        o = clattn.scaled_dot_product_attention(q, k8, v8, k_scale=kss, v_scale=vss)
        assert_close(o, eo, **F32_TOL, what=f"per-head scales {kss.shape}, {vss.shape}")
    o = clattn.scaled_dot_product_attention(q, k8, v, k_scale=ks)  # int8 K, float32 V
    assert_close(o, oracle(q, _dequantize(k8, ks), v)[0], **F32_TOL, what="int8 K, float V")
    k2, ks2 = _quantize(k[0, 0])  # 2-D: (S, E) with (S, 1) scales
    o = clattn.scaled_dot_product_attention(q[0, 0], k2, v[0, 0], k_scale=ks2)
    eo2 = oracle(q[:1, :1], _dequantize(k2, ks2)[None, None], v[:1, :1])[0][0, 0]
    assert_close(o, eo2, **F32_TOL, what="2-D int8 K")


def test_int8_kv_leading_dims(ctx):
    """Two leading (batch) dims: scales with the key's leading dims, with 1s (broadcast
    over them), or mixed (broadcast by a copy)."""
    r = rng(76)
    q, k, v = randn(r, 2, 3, 2, 4, 8), randn(r, 2, 3, 2, 10, 8), randn(r, 2, 3, 2, 10, 8)
    k8, ks = _quantize(k)
    v8 = np.clip(np.round(v * 40), -127, 127).astype(np.int8)
    for vs in (np.full((2, 3, 2, 10, 1), 0.025, np.float32),
               np.full((1, 1, 2, 1, 1), 0.025, np.float32),
               np.full((2, 1, 2, 10, 1), 0.025, np.float32)):
        o = clattn.scaled_dot_product_attention(q, k8, v8, k_scale=ks, v_scale=vs)
        eo = oracle(q.reshape(6, 2, 4, 8), _dequantize(k8, ks).reshape(6, 2, 10, 8),
                    _dequantize(v8, np.broadcast_to(vs, (2, 3, 2, 10, 1))).reshape(6, 2, 10, 8))[0]
        assert_close(o, eo.reshape(2, 3, 2, 4, 8), **F32_TOL, what=f"v_scale {vs.shape}")


@pytest.mark.parametrize("mask_shape", [(37, 11), (2, 1, 37, 11), (1, 4, 1, 11)],
                         ids=["LS", "B1LS", "1H1S"])
def test_masks_broadcast(ctx, mask_shape):
    """Boolean (True = attend) and float (added) masks, broadcast as PyTorch does."""
    r = rng(10)
    q, k, v = randn(r, 2, 4, 37, 8), randn(r, 2, 4, 11, 8), randn(r, 2, 4, 11, 8)
    keep = r.random(mask_shape) < 0.7
    add = np.where(keep, r.standard_normal(mask_shape), -np.inf).astype(np.float32)
    for m in (keep, add):
        got = clattn.scaled_dot_product_attention(q, k, v, attn_mask=m)
        assert_close(got, oracle(q, k, v, mask=m)[0], **F32_TOL, what=f"mask {m.dtype}")
    # float64 masks are converted to float32
    got = clattn.scaled_dot_product_attention(q, k, v, attn_mask=add.astype(np.float64))
    assert_close(got, oracle(q, k, v, mask=add)[0], **F32_TOL, what="float64 mask")


def test_masked_rows_nan_and_zero(ctx):
    r = rng(11)
    q, k, v = randn(r, 1, 2, 4, 8), randn(r, 1, 2, 6, 8), randn(r, 1, 2, 6, 8)
    m = np.ones((4, 6), bool)
    m[2] = False
    z = clattn.scaled_dot_product_attention(q, k, v, attn_mask=m)
    n = clattn.scaled_dot_product_attention(q, k, v, attn_mask=m, masked_rows="nan")
    assert np.all(z[:, :, 2] == 0) and np.all(np.isnan(n[:, :, 2]))
    assert_close(n, oracle(q, k, v, mask=m, masked_rows="nan")[0], **F32_TOL)


def test_layouts_without_copies(ctx):
    """(B, L, H, E) memory viewed as (B, H, L, E) by a transpose, a slice with a step,
    and K/V shared by every batch entry through stride 0 are read in place."""
    r = rng(12)
    qb = randn(r, 2, 37, 4, 8)
    q = qb.transpose(0, 2, 1, 3)  # (2, 4, 37, 16), non-contiguous
    kb = randn(r, 4, 22, 8)
    k = np.broadcast_to(kb[:, ::2, :], (2, 4, 11, 8))  # stride 0 on batch, step 2 on seq
    v = np.broadcast_to(randn(r, 4, 11, 8), (2, 4, 11, 8))
    got = clattn.scaled_dot_product_attention(q, k, v)
    assert_close(got, oracle(q, k, v)[0], **F32_TOL, what="strided")
    # negative strides are copied first
    got = clattn.scaled_dot_product_attention(q[:, :, ::-1], k, v)
    assert_close(got, oracle(q[:, :, ::-1], k, v)[0], **F32_TOL, what="reversed")


@pytest.mark.parametrize("shape", [(7, 8), (3, 7, 8), (2, 3, 2, 7, 8)], ids=["2d", "3d", "5d"])
def test_any_number_of_leading_dims(ctx, shape):
    r = rng(13)
    q, k, v = randn(r, *shape), randn(r, *shape), randn(r, *shape)
    got = clattn.scaled_dot_product_attention(q, k, v, is_causal=True)
    assert got.shape == shape
    q4, k4, v4 = (x.reshape((-1,) + shape[-3:]) if len(shape) > 3 else
                  x.reshape((1,) * (4 - len(shape)) + shape) for x in (q, k, v))
    assert_close(got.reshape(q4.shape), oracle(q4, k4, v4, causal="top_left")[0], **F32_TOL)


def test_float16_and_out_argument(ctx):
    """float16 storage in and out; out= receives the result in place (here a strided
    slice of a bigger array, whose other elements stay untouched)."""
    r = rng(14)
    q, k, v = (randn(r, 1, 2, 9, 8, dtype=np.float16) for _ in range(3))
    got = clattn.scaled_dot_product_attention(q, k, v)
    assert got.dtype == np.float16
    assert_close(got, oracle(q, k, v)[0], **F16_TOL, what="float16")
    big = np.full((1, 2, 9, 16), 7.0, np.float16)
    res = clattn.scaled_dot_product_attention(q, k, v, out=big[..., ::2])
    assert res.base is big or res is big[..., ::2] or np.shares_memory(res, big)
    assert_close(big[..., ::2], got, atol=0, rtol=0, what="out=")
    assert np.all(big[..., 1::2] == 7.0)


def test_weights_head_mean_and_reference(ctx):
    r = rng(15)
    q, k, v = randn(r, 2, 4, 6, 8), randn(r, 2, 4, 10, 8), randn(r, 2, 4, 10, 8)
    o, w = clattn.scaled_dot_product_attention(q, k, v, return_weights=True,
                                               weights_head_mean=True)
    assert w.shape == (2, 1, 6, 10)
    assert_close(w, oracle(q, k, v)[2].mean(axis=1, keepdims=True), **F32_TOL)
    ro = clattn.reference_attention(q, k, v)
    assert_close(o, ro, **F32_TOL, what="device vs reference")


def test_plan(ctx):
    r = rng(16)
    q, k, v = randn(r, 1, 8, 1, 8), randn(r, 1, 2, 128, 8), randn(r, 1, 2, 128, 8)
    p = clattn.plan(q, k, v, enable_gqa=True)
    assert p.algorithm == "fused" and p.kernels == "decode"
    assert "decode" in p.reason and p.queries_per_work_item == 4
    p = clattn.plan(q, k, v, enable_gqa=True, return_weights=True)
    assert p.algorithm == "unfused" and "softmax" in p.kernels


def test_devices_and_context():
    ds = clattn.devices()
    assert ds and sum(d.is_default for d in ds) == 1
    d = next(d for d in ds if d.is_default)
    with clattn.Context(d.spec) as c:
        assert c.device.spec == d.spec
        q = np.ones((1, 1, 2, 4), np.float32)
        out = clattn.scaled_dot_product_attention(q, q, q, context=c)
        assert_close(out, q, atol=0, rtol=0)
    assert "closed" in repr(c)
    with pytest.raises(ValueError, match="closed"):
        clattn.scaled_dot_product_attention(q, q, q, context=c)


def test_binary_cache_modes(tmp_path):
    """binary_cache="on" keeps program binaries in cache_dir, "off" none; others refused."""
    q = np.ones((1, 1, 2, 4), np.float32)
    for mode in ("on", "off"):
        folder = tmp_path / mode
        with clattn.Context(cache_dir=str(folder), binary_cache=mode) as c:
            assert_close(clattn.scaled_dot_product_attention(q, q, q, context=c), q,
                         atol=0, rtol=0)
        bins = list(folder.glob("*.bin")) if folder.exists() else []
        assert (len(bins) > 0) == (mode == "on"), (mode, bins)
    with pytest.raises(ValueError, match="binary_cache must be"):
        clattn.Context(binary_cache="sometimes")


def test_bfloat16_numpy(ctx):
    """bfloat16 NumPy arrays through ml_dtypes (where installed)."""
    ml_dtypes = pytest.importorskip("ml_dtypes")
    r = rng(17)
    q, k, v = (randn(r, 1, 2, 7, 8).astype(ml_dtypes.bfloat16) for _ in range(3))
    got = clattn.scaled_dot_product_attention(q, k, v)
    assert got.dtype == q.dtype
    f = [x.astype(np.float32) for x in (q, k, v)]
    assert_close(got.astype(np.float32), oracle(*f)[0], **BF16_TOL, what="bfloat16")


BACKWARD_FEATURES = [
    ("softcap_alibi_window", {"softcap": 1.5, "alibi_slopes": [0.3, 0.1], "window": (2, 1)},
     {"softcap": 1.5, "alibi": [0.3, 0.1], "window": (2, 1)}),
    ("bottom_right_lengths_positions",
     {"is_causal": True, "causal_alignment": "bottom_right", "kv_lens": [5, 7], "q_lens": [4, 3],
      "q_start": 2, "kv_start": 1},
     {"causal": "bottom_right", "kv_lens": [5, 7], "q_lens": [4, 3], "q_start": 2,
      "kv_start": 1}),
]


@pytest.mark.parametrize("name,kw,okw", BACKWARD_FEATURES, ids=[f[0] for f in BACKWARD_FEATURES])
def test_reference_backward_against_oracle_differences(name, kw, okw):
    """The options PyTorch lacks: clattn.reference_attention_backward against central
    differences (step 1e-6) of the float64 oracle's L = Σ dO·O, every element; the
    differences are accurate to ~1e-9, the reference rounds once to float32 (F32_TOL)."""
    r = rng(18)
    q, k, v = randn(r, 2, 2, 4, 3), randn(r, 2, 2, 7, 3), randn(r, 2, 2, 7, 2)
    g = randn(r, 2, 2, 4, 2)
    grads = clattn.reference_attention_backward(q, k, v, g, **kw)
    arrays = [q.astype(np.float64), k.astype(np.float64), v.astype(np.float64)]
    h = 1e-6
    for a, (got, what) in enumerate(zip(grads, ("dQ", "dK", "dV"))):
        fd = np.zeros(arrays[a].shape)
        for idx in np.ndindex(arrays[a].shape):
            x = arrays[a][idx]
            arrays[a][idx] = x + h
            lp = np.sum(g * oracle(*arrays, **okw)[0])
            arrays[a][idx] = x - h
            lm = np.sum(g * oracle(*arrays, **okw)[0])
            arrays[a][idx] = x
            fd[idx] = (lp - lm) / (2 * h)
        assert_close(got, fd, **F32_TOL, what=f"{name} {what}")


def test_batch_invariant_decode_row_equals_prefill_row(ctx):
    """``batch_invariant=True``: each of the last rows of a causal (bottom-right) prefill,
    recomputed as a one-row call (the decode shape) with the keys it sees, has the same
    bits; the oracle agrees within float32 tolerance. Without the flag the one-row calls
    take the decode kernels (other bits are allowed, and usual)."""
    r = rng(4242)
    q, k, v = randn(r, 1, 4, 12, 16), randn(r, 1, 2, 60, 16), randn(r, 1, 2, 60, 16)
    kw = dict(enable_gqa=True, is_causal=True, causal_alignment="bottom_right",
              batch_invariant=True)
    full = clattn.scaled_dot_product_attention(q, k, v, **kw)
    assert_close(full, oracle(q, k, v, causal="bottom_right")[0], **F32_TOL)
    for i in (9, 10, 11):
        keys = 60 - (11 - i)
        one = clattn.scaled_dot_product_attention(q[:, :, i:i + 1], k[:, :, :keys],
                                                  v[:, :, :keys], **kw)
        assert one.view(np.uint32).tolist() == full[:, :, i:i + 1].view(np.uint32).tolist(), i
    with pytest.raises(clattn.UnsupportedError):
        clattn.scaled_dot_product_attention(q, k, v, algorithm="unfused", **kw)


@pytest.mark.parametrize("heads", ["query_heads", "kv_heads"])
def test_key_weight_sums_against_oracle(ctx, heads):
    """``return_key_weight_sums``: each key's weights summed over the rows (and over each
    KV head's query heads for "kv_heads"), against the float64 oracle's weights; the
    reference gives the same within float32 tolerance; refused with return_weights."""
    r = rng(777)
    q, k, v = randn(r, 2, 4, 11, 8), randn(r, 2, 2, 23, 8), randn(r, 2, 2, 23, 8)
    kw = dict(enable_gqa=True, is_causal=True, causal_alignment="bottom_right",
              return_key_weight_sums=heads)
    out, ks = clattn.scaled_dot_product_attention(q, k, v, **kw)
    w = oracle(q, k, v, causal="bottom_right")[2]
    want = w.sum(axis=2)
    if heads == "kv_heads":
        want = want.reshape(2, 2, 2, 23).sum(axis=2)
    assert ks.shape == want.shape
    assert_close(ks, want, **F32_TOL)
    _, ks_ref = clattn.reference_attention(q, k, v, **kw)
    assert_close(ks_ref, want, **F32_TOL)
    with pytest.raises(clattn.UnsupportedError):
        clattn.scaled_dot_product_attention(q, k, v, return_weights=True, **kw)
    with pytest.raises(ValueError):
        clattn.scaled_dot_product_attention(q, k, v, return_key_weight_sums="rows")
    # 2-D inputs (one head): (S,), as the LSE is (L,)
    _, lse2, ks2 = clattn.scaled_dot_product_attention(q[0, 0], k[0, 0], v[0, 0], return_lse=True,
                                                       return_key_weight_sums=True)
    assert lse2.shape == (11,) and ks2.shape == (23,)
    assert_close(ks2, oracle(q[:1, :1], k[:1, :1], v[:1, :1])[2].sum(axis=2)[0, 0], **F32_TOL)


def test_max_logits_against_numpy(ctx):
    """``return_max_logits``: each row's largest score (softcap, ALiBi and a bool mask
    applied; sinks excluded), against NumPy's max over the scores in float64; -inf for a
    row with no visible key (row 0, masked); the reference agrees; refused with the
    unfused algorithm."""
    r = rng(778)
    q, k, v = randn(r, 2, 4, 11, 8) * 3, randn(r, 2, 2, 23, 8), randn(r, 2, 2, 23, 8)
    slopes = np.array([0.5, 0.25, 0.125, 0.0625], dtype=np.float32)
    i, j = np.arange(11)[:, None], np.arange(23)[None, :]
    see = (j <= i) & (i > 0)  # causal; row 0 sees nothing
    kw = dict(enable_gqa=True, softcap=5.0, alibi_slopes=slopes,
              sinks=np.full(4, 9.0, dtype=np.float32), return_lse=True, return_max_logits=True)
    out, lse, ml = clattn.scaled_dot_product_attention(q, k, v, see, **kw)
    kk = np.repeat(k.astype(np.float64), 2, axis=1)
    s = np.einsum("bhid,bhjd->bhij", q.astype(np.float64), kk) / np.sqrt(8)
    s = 5.0 * np.tanh(s / 5.0)
    s = s - slopes[None, :, None, None].astype(np.float64) * np.abs(i - j)
    s = np.where(see, s, -np.inf)
    assert ml.shape == lse.shape == (2, 4, 11)
    assert np.all(np.isneginf(ml[:, :, 0]))  # row 0 sees no key (the sink does not count)
    assert_close(ml, s.max(axis=-1), **F32_TOL)
    ref = clattn.reference_attention(q, k, v, see, **kw)[2]
    assert_close(ref, s.max(axis=-1), **F32_TOL)
    with pytest.raises(clattn.UnsupportedError):
        clattn.scaled_dot_product_attention(q, k, v, see, algorithm="unfused", **kw)
    with pytest.raises(TypeError):
        clattn.scaled_dot_product_attention(q, k, v, return_max_logits=1)


DOC_MASK = """bool clattn_mask_mod(int b, int h, long q, long k, __global const int *doc)
{
    return doc[q] == doc[k];
}
"""
REL_BIAS = """float clattn_score_mod(float s, int b, int h, long q, long k, __global const float *t)
{
    return s + t[h * 9 + clamp(k - q, -4L, 4L) + 4];
}
"""


def test_score_and_mask_snippets():
    """A document mask (int32 ids) and a relative bias from a per-head table against
    NumPy in float64 (atol 2e-5), in both algorithms; errors name the snippet's line."""
    rng = np.random.default_rng(20261201)
    q, k, v = (rng.standard_normal((2, 30, 8)).astype(np.float32) for _ in range(3))
    doc = np.arange(30) // 7
    table = rng.standard_normal((2, 9)).astype(np.float32)
    s = np.einsum("hid,hjd->hij", q.astype(np.float64), k.astype(np.float64)) / np.sqrt(8)
    dist = np.clip(np.arange(30)[None, :] - np.arange(30)[:, None], -4, 4) + 4
    s_doc = np.where(doc[:, None] == doc[None, :], s, -np.inf)
    s_rel = s + table.astype(np.float64)[:, dist]
    for mods, scores in (({"mask_mod": DOC_MASK, "mod_buffers": [doc]}, s_doc),
                         ({"score_mod": REL_BIAS, "mod_buffers": [table]}, s_rel)):
        p = np.exp(scores - scores.max(-1, keepdims=True))
        want = (p / p.sum(-1, keepdims=True)) @ v.astype(np.float64)
        for alg in ("fused", "unfused"):
            got = clattn.scaled_dot_product_attention(q, k, v, algorithm=alg, **mods)
            assert_close(got, want, atol=2e-5, rtol=2e-5)
    with pytest.raises(clattn.DeviceError, match="mask_mod:3"):
        clattn.scaled_dot_product_attention(
            q, k, v, mask_mod="bool clattn_mask_mod(int b, int h, long q, long k)\n{\n  x;\n}\n")
    with pytest.raises(TypeError, match="OpenCL C source"):
        clattn.scaled_dot_product_attention(q, k, v, mask_mod=lambda b, h, q, k: True)
    with pytest.raises(ValueError, match="needs score_mod or mask_mod"):
        clattn.scaled_dot_product_attention(q, k, v, mod_buffers=[doc])
    with pytest.raises(TypeError, match="list or tuple of arrays"):
        clattn.scaled_dot_product_attention(q, k, v, mask_mod=DOC_MASK, mod_buffers=doc)
    with pytest.raises(ValueError, match="NUL"):
        clattn.scaled_dot_product_attention(q, k, v, mask_mod=DOC_MASK + "\0x")
    # a float table where the snippet declares int: does not compile (clattn's prototypes)
    with pytest.raises(clattn.DeviceError, match="mask_mod:1"):
        clattn.scaled_dot_product_attention(q, k, v, mask_mod=DOC_MASK,
                                            mod_buffers=[doc.astype(np.float32)])
    with pytest.raises(clattn.UnsupportedError, match="mask_mod_host"):
        clattn.reference_attention(q, k, v, mask_mod=DOC_MASK, mod_buffers=[doc])


def test_block_mask():
    """A BlockMask of a document mask: the same bits as without it, its counts, and the
    statuses (another n_q, a closed mask, block_mask without mask_mod)."""
    rng = np.random.default_rng(20261202)
    q, k, v = (rng.standard_normal((2, 64, 8)).astype(np.float32) for _ in range(3))
    mm = ("bool clattn_mask_mod(int b, int h, long q, long k)\n"
          "{\n    return q / 32 == k / 32 && k <= q;\n}\n")
    plain = clattn.scaled_dot_product_attention(q, k, v, mask_mod=mm, algorithm="fused")
    with clattn.BlockMask(mm, 64, 64) as bm:
        assert bm.counts() == (10, 4, 2)  # 4 x 4 blocks: per document 2 mixed, 1 full
        got = clattn.scaled_dot_product_attention(q, k, v, mask_mod=mm, block_mask=bm,
                                                  algorithm="fused")
        assert got.tobytes() == plain.tobytes()
        with pytest.raises(clattn.InvalidArgumentError, match="another n_q"):
            clattn.scaled_dot_product_attention(q[:, :63], k, v, mask_mod=mm, block_mask=bm)
    with pytest.raises(ValueError, match="closed"):
        clattn.scaled_dot_product_attention(q, k, v, mask_mod=mm, block_mask=bm)
    with pytest.raises(ValueError, match="needs the mask_mod"):
        clattn.scaled_dot_product_attention(q, k, v, block_mask=bm)


def test_half_arithmetic_flag(ctx):
    """``half_arithmetic=True`` on float16 arrays: within the documented bound of the
    oracle (docs/SEMANTICS.md "Half arithmetic": 2·E·max|V| with E = 3·2⁻¹¹·scale·
    max Σ|q·k| + d_k·2⁻¹⁴·scale; where the path does not run, float32's tolerance holds
    anyway); the flag must be a bool."""
    r = rng(5151)
    q, k, v = (randn(r, 1, 2, 40, 32).astype(np.float16), randn(r, 1, 2, 50, 32).astype(np.float16),
               randn(r, 1, 2, 50, 32).astype(np.float16))
    out = clattn.scaled_dot_product_attention(q, k, v, half_arithmetic=True)
    q64, k64 = q.astype(np.float64), k.astype(np.float64)
    e = (3 * 2.0**-11 * np.einsum("bhid,bhjd->bhij", np.abs(q64), np.abs(k64)).max()
         + 32 * 2.0**-14) / np.sqrt(32)
    bound = 2 * e * np.abs(v.astype(np.float64)).max()
    ref = oracle(q.astype(np.float32), k.astype(np.float32), v.astype(np.float32))[0]
    assert np.abs(out.astype(np.float64) - ref).max() <= bound + 2e-3  # (+ O's float16 rounding)
    with pytest.raises(TypeError):
        clattn.scaled_dot_product_attention(q, k, v, half_arithmetic=1)
