"""Dropout (``dropout_p``, ``dropout_seed``, ``dropout_offset``) and
:func:`clattn.dropout_mask`: the device's output against NumPy written from the mask,
``O = (softmax(scale·Q·Kᵀ) · Z / (1 - p)) · V``; the reference forward and backward;
determinism in the seed and offset; the argument checks."""

from __future__ import annotations

import numpy as np
import pytest

import clattn
from conftest import F32_TOL, assert_close, oracle, randn, rng

TOL = dict(atol=1e-5, rtol=1e-5)


def _problem(offset, b=2, hq=4, hkv=2, n_q=9, n_kv=37, d=8, d_v=6):
    r = rng(offset)
    return randn(r, b, hq, n_q, d), randn(r, b, hkv, n_kv, d), randn(r, b, hkv, n_kv, d_v)


def _expected(q, k, v, p, seed, offset, **okw):
    """float64 O and weights after dropout, from the oracle's weights and the mask."""
    b, hq, n_q, _ = q.shape
    n_kv = k.shape[2]
    _, lse, w = oracle(q, k, v, **okw)
    z = clattn.dropout_mask(b, hq, n_q, n_kv, p, seed=seed, offset=offset)
    wd = w * z / (1.0 - p)
    vv = np.repeat(np.asarray(v, np.float64), hq // v.shape[1], axis=1)
    return np.einsum("bhij,bhjd->bhid", wd, vv), lse, wd


@pytest.mark.parametrize("algorithm", ["fused", "unfused"])
@pytest.mark.parametrize("n_q", [9, 3])  # 3 queries: the tiled kernel, not the decode one
def test_output_from_the_mask(ctx, algorithm, n_q):
    """The device's O equals (softmax(QKᵀ·scale) * mask / (1 - p)) @ V within 1e-5,
    GQA heads; the weights returned are those after dropout, the LSE that before."""
    q, k, v = _problem(300, n_q=n_q)
    p, seed, offset = 0.3, 1234, 5
    o, lse, w = clattn.scaled_dot_product_attention(
        q, k, v, dropout_p=p, enable_gqa=True, algorithm=algorithm, return_lse=True,
        return_weights=True, dropout_seed=seed, dropout_offset=offset)
    eo, e_lse, ew = _expected(q, k, v, p, seed, offset)
    assert_close(o, eo, **TOL, what="O")
    assert_close(w, ew, **TOL, what="weights")
    assert_close(lse, e_lse, **TOL, what="LSE (before dropout)")
    plain = clattn.scaled_dot_product_attention(q, k, v, enable_gqa=True, algorithm=algorithm)
    assert not np.allclose(o, plain), "dropout changed nothing"


def test_output_from_the_mask_with_masks(ctx):
    """Every term that masks or biases: a masked weight is 0 either way, the mask of the
    visible ones is the same stream (keyed by the call's own row and key indices)."""
    q, k, v = _problem(301, b=2, hq=2, hkv=2, n_q=7, n_kv=11)
    kw = dict(is_causal=True, causal_alignment="bottom_right", window=(4, 1),
              softcap=2.0, alibi_slopes=[0.5, 0.25], kv_lens=[11, 6], q_start=3)
    okw = dict(causal="bottom_right", window=(4, 1), softcap=2.0, alibi=[0.5, 0.25],
               kv_lens=[11, 6], q_start=3)
    p, seed, offset = 0.5, 2**64 - 1, 2**32 - 1
    o = clattn.scaled_dot_product_attention(q, k, v, dropout_p=p, dropout_seed=seed,
                                            dropout_offset=offset, **kw)
    assert_close(o, _expected(q, k, v, p, seed, offset, **okw)[0], **TOL, what="O")
    assert not np.allclose(o, clattn.scaled_dot_product_attention(q, k, v, **kw))


def test_reference_forward_and_backward(ctx):
    """The float64 reference draws the same mask as the device; its gradients are those
    of O = (P·Z/(1 - p))·V, written out here in NumPy from the mask."""
    q, k, v = _problem(302, b=1, hq=2, hkv=1, n_q=6, n_kv=10, d=4, d_v=3)
    g = randn(rng(303), 1, 2, 6, 3)
    p, seed, offset = 0.25, 99, 3
    kw = dict(enable_gqa=True, dropout_seed=seed, dropout_offset=offset)
    o = clattn.scaled_dot_product_attention(q, k, v, dropout_p=p, **kw)
    ro = clattn.reference_attention(q, k, v, dropout_p=p, **kw)
    assert_close(o, ro, **TOL, what="device vs reference")
    assert_close(ro, _expected(q, k, v, p, seed, offset)[0], **F32_TOL, what="reference O")

    dq, dk, dv = clattn.reference_attention_backward(q, k, v, g, dropout_p=p, **kw)
    z = clattn.dropout_mask(1, 2, 6, 10, p, seed=seed, offset=offset) / (1.0 - p)
    q64, g64 = q.astype(np.float64), g.astype(np.float64)
    k64, v64 = (np.repeat(x.astype(np.float64), 2, axis=1) for x in (k, v))
    scale = 1.0 / np.sqrt(4)
    w = oracle(q, k, v)[2]
    e_dv = np.einsum("bhij,bhid->bhjd", w * z, g64).sum(axis=1, keepdims=True)
    dp = np.einsum("bhid,bhjd->bhij", g64, v64) * z
    ds = w * (dp - (dp * w).sum(axis=-1, keepdims=True))
    e_dq = scale * np.einsum("bhij,bhjd->bhid", ds, k64)
    e_dk = (scale * np.einsum("bhij,bhid->bhjd", ds, q64)).sum(axis=1, keepdims=True)
    for got, exp, what in ((dq, e_dq, "dQ"), (dk, e_dk, "dK"), (dv, e_dv, "dV")):
        assert_close(got, exp, **F32_TOL, what=what)
    plain = clattn.reference_attention_backward(q, k, v, g, enable_gqa=True)
    assert not np.allclose(dv, plain[2]), "dropout changed nothing in dV"


def test_seed_and_offset(ctx):
    """The same seed and offset: the same output, bit for bit; another offset or seed:
    another mask; dropout_p 0: no dropout, whatever the seed."""
    q, k, v = _problem(304, b=1, hq=2, hkv=2, n_q=8, n_kv=16)

    def run(**kw):
        return clattn.scaled_dot_product_attention(q, k, v, **kw)

    a = run(dropout_p=0.2, dropout_seed=7, dropout_offset=1)
    assert np.array_equal(a, run(dropout_p=0.2, dropout_seed=7, dropout_offset=1))
    assert not np.array_equal(a, run(dropout_p=0.2, dropout_seed=7, dropout_offset=2))
    assert not np.array_equal(a, run(dropout_p=0.2, dropout_seed=8, dropout_offset=1))
    assert np.array_equal(run(dropout_p=0.2), run(dropout_p=0.2, dropout_seed=0,
                                                  dropout_offset=0))
    assert np.array_equal(run(), run(dropout_p=0.0, dropout_seed=5, dropout_offset=9))
    m1 = clattn.dropout_mask(1, 2, 8, 16, 0.2, seed=7, offset=1)
    assert np.array_equal(m1, clattn.dropout_mask(1, 2, 8, 16, 0.2, seed=7, offset=1))
    assert not np.array_equal(m1, clattn.dropout_mask(1, 2, 8, 16, 0.2, seed=7, offset=2))
    assert not np.array_equal(m1, clattn.dropout_mask(1, 2, 8, 16, 0.2, seed=8, offset=1))


def test_plan_takes_the_tiled_kernel(ctx):
    """A decoding shape runs the tiled kernel with dropout (the decode kernel draws no
    mask), and plan() says so."""
    q, k = np.ones((1, 8, 1, 8), np.float32), np.ones((1, 2, 128, 8), np.float32)
    assert clattn.plan(q, k, k, enable_gqa=True).kernels == "decode"
    p = clattn.plan(q, k, k, dropout_p=0.1, enable_gqa=True, dropout_seed=1)
    assert p.kernels == "fused" and "dropout" in p.reason


def test_dropout_mask():
    """Shape, dtype and values; Philox4x32-10's known answer for counter 0 and key 0
    (Random123's kat_vectors: 6627e8d5 e169c58d bc57ac4c 9b00dbd8), word j of key j's
    bit: kept iff word >= floor(p·2**32); the keep rate over 64K weights."""
    m = clattn.dropout_mask(2, 3, 4, 5, 0.5, seed=1, offset=2)
    assert m.dtype == np.uint8 and m.shape == (2, 3, 4, 5)
    assert set(np.unique(m)) <= {0, 1}
    assert np.all(clattn.dropout_mask(1, 2, 3, 4, 0.0) == 1)
    assert clattn.dropout_mask(0, 2, 3, 4, 0.5).shape == (0, 2, 3, 4)
    words = [0x6627E8D5, 0xE169C58D, 0xBC57AC4C, 0x9B00DBD8]
    for p in (0.39, 0.4, 0.5, 0.7, 0.9):
        want = [int(w >= int(p * 2**32)) for w in words]
        assert clattn.dropout_mask(1, 1, 1, 4, p)[0, 0, 0].tolist() == want, p
    big = clattn.dropout_mask(1, 4, 128, 128, 0.25, seed=2024)
    assert abs(big.mean() - 0.75) < 0.01
    # numpy integers are integers
    assert np.array_equal(clattn.dropout_mask(np.int64(1), 1, 2, 3, np.float32(0.5),
                                              seed=np.uint64(2**64 - 1)),
                          clattn.dropout_mask(1, 1, 2, 3, 0.5, seed=2**64 - 1))


Q = np.ones((1, 2, 3, 4), np.float32)


@pytest.mark.parametrize("fn", ["scaled_dot_product_attention", "reference_attention", "plan"])
def test_bad_arguments(fn):
    call = getattr(clattn, fn)
    for p in (1.0, 1.5, -0.1, float("nan"), float("inf")):
        with pytest.raises(ValueError, match=r"dropout_p must be within \[0, 1\)"):
            call(Q, Q, Q, dropout_p=p)
    with pytest.raises(ValueError, match="rounds to 1 in float32"):
        call(Q, Q, Q, dropout_p=0.99999999)
    for p in ("0.1", True, None, [0.1]):
        with pytest.raises(TypeError, match="dropout_p must be a number"):
            call(Q, Q, Q, dropout_p=p)
    for seed in (-1, 2**64):
        with pytest.raises(ValueError, match=r"dropout_seed = .* is not within \[0, 2\*\*64\)"):
            call(Q, Q, Q, dropout_p=0.1, dropout_seed=seed)
    for offset in (-1, 2**32):
        with pytest.raises(ValueError,
                           match=r"dropout_offset = .* is not within \[0, 2\*\*32\)"):
            call(Q, Q, Q, dropout_p=0.1, dropout_offset=offset)
    for bad in (1.5, "3", True):
        with pytest.raises(TypeError, match="dropout_seed must be an integer"):
            call(Q, Q, Q, dropout_p=0.1, dropout_seed=bad)
        with pytest.raises(TypeError, match="dropout_offset must be an integer"):
            call(Q, Q, Q, dropout_p=0.1, dropout_offset=bad)


def test_bad_arguments_backward_and_mask():
    with pytest.raises(ValueError, match="dropout_p must be within"):
        clattn.reference_attention_backward(Q, Q, Q, Q, dropout_p=1.0)
    with pytest.raises(ValueError, match="dropout_offset"):
        clattn.reference_attention_backward(Q, Q, Q, Q, dropout_p=0.5, dropout_offset=2**32)
    with pytest.raises(ValueError, match=r"p must be within \[0, 1\)"):
        clattn.dropout_mask(1, 1, 2, 2, 1.0)
    with pytest.raises(TypeError, match="p must be a number"):
        clattn.dropout_mask(1, 1, 2, 2, "0.5")
    with pytest.raises(ValueError, match=r"seed = -1 is not within \[0, 2\*\*64\)"):
        clattn.dropout_mask(1, 1, 2, 2, 0.5, seed=-1)
    with pytest.raises(ValueError, match=r"offset = 4294967296 is not within \[0, 2\*\*32\)"):
        clattn.dropout_mask(1, 1, 2, 2, 0.5, offset=2**32)
    with pytest.raises(ValueError, match="n_q = -1 is negative"):
        clattn.dropout_mask(1, 1, -1, 2, 0.5)
    with pytest.raises(TypeError, match="n_kv must be an integer"):
        clattn.dropout_mask(1, 1, 2, 2.0, 0.5)
    # past the generator's counter (n_q above 2**32): the library's refusal
    with pytest.raises(clattn.UnsupportedError, match="dropout"):
        clattn.dropout_mask(0, 1, 2**32 + 1, 1, 0.5)
