"""A random sweep (marked slow: `ctest -L slow` and CI run it): shapes, dtypes, layouts,
algorithms and every option at once, against the float64 oracle of conftest.py. Each
configuration prints its index; CLATTN_PY_SEED changes the sample."""

from __future__ import annotations

import numpy as np
import pytest

import clattn
from conftest import F16_TOL, F32_TOL, assert_close, oracle, rng

N = 40


def _config(i):
    r = rng(1000 + i)
    hkv = int(r.choice([1, 2]))
    hq = hkv * int(r.choice([1, 2, 4]))
    b = int(r.integers(1, 3))
    n_q = int(r.choice([1, 2, 7, 16, 17, 40]))
    n_kv = int(r.choice([0, 1, 5, 16, 33, 70]))
    d_k, d_v = int(r.choice([1, 3, 8, 64])), int(r.choice([1, 5, 8, 64]))
    dtype = np.float16 if r.random() < 0.3 else np.float32
    opts, okw = {}, {}
    if r.random() < 0.4:
        align = str(r.choice(["top_left", "bottom_right"]))
        opts.update(is_causal=True, causal_alignment=align)
        okw["causal"] = align
    if r.random() < 0.3:
        w = (int(r.integers(-1, 6)), int(r.integers(-1, 6)))
        opts["window"] = okw["window"] = w
    if r.random() < 0.3:
        s = list(r.uniform(0, 0.5, hq))
        opts["alibi_slopes"] = okw["alibi"] = s
    if r.random() < 0.3:
        opts["softcap"] = okw["softcap"] = float(r.uniform(0.5, 5))
    if r.random() < 0.3 and n_kv:
        kl = [int(x) for x in r.integers(0, n_kv + 1, b)]
        opts["kv_lens"] = okw["kv_lens"] = kl
    if r.random() < 0.3:
        mask = r.random((b, 1, n_q, n_kv)) < 0.8
        opts["attn_mask"] = okw["mask"] = mask
    if r.random() < 0.2:
        opts["q_start"] = okw["q_start"] = int(r.integers(0, 50))
        opts["kv_start"] = okw["kv_start"] = int(r.integers(0, 50))
    opts["algorithm"] = str(r.choice(["auto", "fused", "unfused"]))
    transposed = bool(r.random() < 0.5)
    return r, (b, hq, hkv, n_q, n_kv, d_k, d_v, dtype, transposed), opts, okw


@pytest.mark.slow
@pytest.mark.parametrize("i", range(N))
def test_random_configuration(ctx, i):
    r, (b, hq, hkv, n_q, n_kv, d_k, d_v, dtype, transposed), opts, okw = _config(i)

    def make(h, n, d):
        if transposed:  # (b, n, h, d) memory seen as (b, h, n, d)
            return r.standard_normal((b, n, h, d)).astype(dtype).transpose(0, 2, 1, 3)
        return r.standard_normal((b, h, n, d)).astype(dtype)

    q, k, v = make(hq, n_q, d_k), make(hkv, n_kv, d_k), make(hkv, n_kv, d_v)
    got, lse = clattn.scaled_dot_product_attention(q, k, v, enable_gqa=True, return_lse=True,
                                                   **opts)
    eo, el, _ = oracle(q, k, v, **okw)
    what = f"config {i}: {(b, hq, hkv, n_q, n_kv, d_k, d_v, np.dtype(dtype).name)} {opts}"
    assert_close(got, eo, **(F16_TOL if dtype == np.float16 else F32_TOL), what=what + " O")
    assert_close(lse, el, **F32_TOL, what=what + " LSE")
