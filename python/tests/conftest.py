"""Shared helpers: a float64 NumPy oracle of clattn's semantics (written here, apart from
the C reference), seeded generators and a closeness check that shows the worst element.

Every test draws from numpy.random.default_rng(SEED + a per-test offset); SEED is printed
in the pytest header. Tolerances are stated where used: float32 storage is compared at
atol 2e-5 + rtol 2e-5 against the float64 oracle (the kernels accumulate in float32 over
at most a few hundred keys); 16-bit storage at the rounding of one stored element.
"""

from __future__ import annotations

import os

import numpy as np
import pytest

SEED = int(os.environ.get("CLATTN_PY_SEED", "20261130"))

F32_TOL = dict(atol=2e-5, rtol=2e-5)
F16_TOL = dict(atol=2e-3, rtol=2e-3)  # binary16 stores 11 significant bits
BF16_TOL = dict(atol=1.6e-2, rtol=1.6e-2)  # bfloat16 stores 8


def pytest_report_header(config):
    import clattn

    return (f"clattn python tests: SEED={SEED} (CLATTN_PY_SEED to change); clattn "
            f"{clattn.__version__} from {clattn.__file__}")


def rng(offset: int) -> np.random.Generator:
    return np.random.default_rng(SEED + offset)


def assert_close(got, exp, atol, rtol, what="result"):
    """|got - exp| <= atol + rtol*|exp| everywhere, NaN matching NaN; on failure the
    message names the worst element and both values."""
    got = np.asarray(got, dtype=np.float64)
    exp = np.asarray(exp, dtype=np.float64)
    assert got.shape == exp.shape, f"{what}: shape {got.shape}, expected {exp.shape}"
    nan_g, nan_e = np.isnan(got), np.isnan(exp)
    assert np.array_equal(nan_g, nan_e), (
        f"{what}: NaN at {np.argwhere(nan_g != nan_e)[0].tolist()} differs "
        f"(got {got[tuple(np.argwhere(nan_g != nan_e)[0])]}, "
        f"expected {exp[tuple(np.argwhere(nan_g != nan_e)[0])]})")
    g, e = np.where(nan_g, 0, got), np.where(nan_e, 0, exp)
    with np.errstate(invalid="ignore"):
        excess = np.abs(g - e) - (atol + rtol * np.abs(e))
    excess = np.where(g == e, -1.0, excess)  # equal infinities
    worst = np.unravel_index(np.argmax(excess), excess.shape) if excess.size else None
    assert worst is None or excess[worst] <= 0, (
        f"{what}: worst element {tuple(int(i) for i in worst)}: got {float(g[worst])!r}, "
        f"expected {float(e[worst])!r} (|diff| {abs(g[worst] - e[worst]):.3g} > atol {atol} + rtol {rtol})")


def oracle(q, k, v, mask=None, causal=None, scale=None, softcap=None, alibi=None,
           window=None, kv_lens=None, q_lens=None, no_self=False, q_start=0, kv_start=0,
           masked_rows="zero"):
    """float64 attention on 4-D arrays [b, h, n, d] (k, v with h_kv heads dividing h_q).

    s_ij = softcap(scale·q·k) - alibi[h]·|a_i - j| + float mask; a key is visible when
    every term lets it through; the diagonal a_i = i + q_start - kv_start (+ n_kv_b -
    n_q_b when causal == "bottom_right"). Returns (O, LSE, W)."""
    q, k, v = (np.asarray(x, dtype=np.float64) for x in (q, k, v))
    b, hq, n_q, dk = q.shape
    hkv, n_kv = k.shape[1], k.shape[2]
    g = hq // hkv
    k = np.repeat(k, g, axis=1)
    v = np.repeat(v, g, axis=1)
    sc = 1.0 / np.sqrt(dk) if scale is None else scale
    s = sc * np.einsum("bhid,bhjd->bhij", q, k)
    if softcap:
        s = softcap * np.tanh(s / softcap)
    keep = np.ones((b, hq, n_q, n_kv), dtype=bool)
    bias = np.zeros((b, hq, n_q, n_kv))
    i = np.arange(n_q)[:, None]
    j = np.arange(n_kv)[None, :]
    for bb in range(b):
        nkb = n_kv if kv_lens is None else int(kv_lens[bb])
        nqb = n_q if q_lens is None else int(q_lens[bb])
        a = i + q_start - kv_start + (nkb - nqb if causal == "bottom_right" else 0)
        kb = j < nkb
        kb = kb & (i < nqb)
        if causal:
            kb = kb & (j <= a)
        if no_self:
            kb = kb & (j != a)
        if window is not None:
            left, right = window
            if left is not None and left >= 0:
                kb = kb & (j >= a - left)
            if right is not None and right >= 0:
                kb = kb & (j <= a + right)
        keep[bb] &= kb
        if alibi is not None:
            bias[bb] = -np.asarray(alibi, dtype=np.float64)[:, None, None] * np.abs(a - j)
    s = s + bias
    if mask is not None:
        m = np.broadcast_to(np.asarray(mask), (b, hq, n_q, n_kv))
        if m.dtype == bool:
            keep &= m
        else:
            s = s + m.astype(np.float64)
    s = np.where(keep, s, -np.inf)
    mx = s.max(axis=-1, keepdims=True, initial=-np.inf)
    empty = ~np.isfinite(mx)
    p = np.where(keep, np.exp(s - np.where(empty, 0, mx)), 0.0)
    l = p.sum(axis=-1, keepdims=True)
    w = np.where(empty, 0.0, p / np.where(empty, 1, l))
    o = np.einsum("bhij,bhjd->bhid", w, v)
    lse = np.where(empty[..., 0], -np.inf, (mx + np.log(np.where(empty, 1, l)))[..., 0])
    if masked_rows == "nan":
        o = np.where(empty, np.nan, o)
        w = np.where(empty, np.nan, w)
    return o, lse, w


def randn(r: np.random.Generator, *shape, dtype=np.float32):
    return r.standard_normal(shape).astype(dtype)


@pytest.fixture(scope="session")
def ctx():
    import clattn

    c = clattn.default_context()
    print(f"\nclattn device: {c.device.name}")
    return c
