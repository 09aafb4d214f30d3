#!/usr/bin/env python3
"""Writes tests/data/paged/*.npy: one decode step over a small paged K/V cache, the inputs
of the README's "A paged decode step" command (dev-time only; the tests need no Python).

Two sequences, 4 query heads over 2 KV heads (GQA), head dim 16, pages of 4 keys in a
pool of 8 pages laid out [num_pages, h_kv, page_size, d]; the sequences hold 5 and 7 keys
before the step and each appends one. Their pages are scattered over the pool (table
rows [6, 1, 3] and [2, 7, 0]; a table's entries past a sequence's pages are never read),
and every slot no sequence uses holds NaN, so a read outside the sequences would show.
The same arrays are also written in FlashAttention's layout, as *_bshd.npy (`clattn run
--layout bshd`): Q and the new rows (b, n, h, d), the pools (num_pages, page_size, h_kv, d).

    /usr/bin/python3 tools/dev/make_paged_fixtures.py     # seed 20261205, printed
"""
import os

import numpy as np

SEED = 20261205
B, H_Q, H_KV, D, PAGE, PAGES = 2, 4, 2, 16, 4, 8
LENS = [5, 7]  # keys before the step; one is appended to each
TABLE = np.array([[6, 1, 3], [2, 7, 0]], dtype="<i4")


def main():
    print("seed", SEED)
    rng = np.random.default_rng(SEED)
    out = os.path.join(os.path.dirname(__file__), "..", "..", "tests", "data", "paged")
    k = np.full((PAGES, H_KV, PAGE, D), np.nan, dtype="<f4")
    v = np.full((PAGES, H_KV, PAGE, D), np.nan, dtype="<f4")
    for b, n in enumerate(LENS):
        for j in range(n):
            page, slot = TABLE[b, j // PAGE], j % PAGE
            k[page, :, slot] = rng.standard_normal((H_KV, D))
            v[page, :, slot] = rng.standard_normal((H_KV, D))
    arrays = {
        "q": rng.standard_normal((B, H_Q, 1, D)).astype("<f4"),
        "k_pool": k,
        "v_pool": v,
        "block_table": TABLE,
        "k_new": rng.standard_normal((B, H_KV, 1, D)).astype("<f4"),
        "v_new": rng.standard_normal((B, H_KV, 1, D)).astype("<f4"),
    }
    # the same arrays in FlashAttention's layout (`clattn run --layout bshd`): heads after
    # tokens, (b, n, h, d), and pools (num_pages, page_size, h_kv, d); no new draws
    for name in ["q", "k_pool", "v_pool", "k_new", "v_new"]:
        arrays[name + "_bshd"] = np.ascontiguousarray(arrays[name].swapaxes(1, 2))
    for name, a in arrays.items():
        np.save(os.path.join(out, name + ".npy"), a)
        print(name, a.dtype.str, a.shape)


if __name__ == "__main__":
    main()
