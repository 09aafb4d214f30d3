#!/usr/bin/env python3
"""Decoding benchmark: clattn against torch SDPA in one run, as a fraction of the
machine's read bandwidth (dev-time only).

Decoding one token is a stream over the KV cache: its ceiling is the read bandwidth,
which `clattn bench --peak` measures in the same process (a streaming loop over 256
MiB, run just before and just after the case: bw_gbytes_per_s is their mean). For each case, interleaved round by round so drift hits both alike:
  clattn      `clattn bench --json --peak` (fused: the decode kernel; device time)
  torch-sdpa  torch.nn.functional.scaled_dot_product_attention(..., enable_gqa=True)
              on the CPU, in the case's dtype (float32 or float16)
torch's output is checked against a float64 numpy reference first, and clattn's
(`clattn run`, float32 cases) too. K/V GB/s count each K and V byte once. A shape's
`bshd` token lays K and V out [b, n_kv, h_kv, d] (FlashAttention's cache) for both:
clattn bench's bshd, and torch given the [b, h_kv, n_kv, d] views (transpose(1, 2)) of
that memory, as an engine with such a cache would call SDPA.

Usage: python3 tools/dev/bench_decode.py [--build build] [--rounds 3]
           [--shapes "b,h_q,h_kv,n_q,n_kv,d[,f16][,bshd]; ..."]
Needs numpy and torch: pip install numpy torch
"""
import os
import subprocess
import sys
import tempfile
import time

import numpy as np

from bench_peers import SETTLE_S, parse_args, run_json  # the same script folder

DEFAULT_SHAPES = ("1,32,32,1,8192,128; 1,32,8,1,32768,128; 1,32,8,1,32768,128,f16; "
                  "8,32,8,1,8192,128,f16")


def parse_shapes(text):
    shapes = []
    for spec in text.split(";"):
        parts = [p.strip() for p in spec.split(",") if p.strip()]
        if not parts:
            continue
        bshd = "bshd" in parts[6:]
        rest = [p for p in parts[6:] if p != "bshd"]
        dtype = rest[0] if rest else "f32"
        b, h_q, h_kv, n_q, n_kv, d = (int(x) for x in parts[:6])
        shapes.append(dict(b=b, h_q=h_q, h_kv=h_kv, n_q=n_q, n_kv=n_kv, d=d, dtype=dtype,
                           bshd=bshd))
    return shapes


def reference(q, k, v):
    """float64 attention with grouped heads (query head h reads KV head h / group)."""
    group = q.shape[1] // k.shape[1]
    k = np.repeat(k.astype(np.float64), group, axis=1)
    v = np.repeat(v.astype(np.float64), group, axis=1)
    s = np.matmul(q.astype(np.float64), np.swapaxes(k, -1, -2)) / np.sqrt(q.shape[-1])
    s -= s.max(axis=-1, keepdims=True)
    w = np.exp(s)
    w /= w.sum(axis=-1, keepdims=True)
    return np.matmul(w, v)


def main():
    args, clattn = parse_args(__doc__, DEFAULT_SHAPES)
    import torch
    torch.set_num_threads(os.cpu_count())
    print(f"torch {torch.__version__} ({torch.get_num_threads()} threads), numpy "
          f"{np.__version__}, cores {os.cpu_count()}")
    rows = []
    tmp = tempfile.mkdtemp(prefix="clattn-decode-")
    rng = np.random.default_rng(0)
    device = cpu = "?"
    for s in parse_shapes(args.shapes):
        b, h_q, h_kv, n_q, n_kv, d, dt = (s[x] for x in ("b", "h_q", "h_kv", "n_q", "n_kv", "d",
                                                         "dtype"))
        np_dt = np.float16 if dt == "f16" else np.float32
        q = rng.uniform(-1, 1, (b, h_q, n_q, d)).astype(np_dt)
        k = rng.uniform(-1, 1, (b, h_kv, n_kv, d)).astype(np_dt)
        v = rng.uniform(-1, 1, (b, h_kv, n_kv, d)).astype(np_dt)
        ref = reference(q, k, v)
        tol = 2e-3 if dt == "f16" else 1e-4
        tq, tk, tv = (torch.from_numpy(x) for x in (q, k, v))
        if s["bshd"]:  # [b, n_kv, h_kv, d] memory, passed as [b, h_kv, n_kv, d] views
            tk, tv = (torch.from_numpy(np.ascontiguousarray(x.transpose(0, 2, 1, 3)))
                      .transpose(1, 2) for x in (k, v))

        def sdpa():
            with torch.no_grad():
                return torch.nn.functional.scaled_dot_product_attention(tq, tk, tv,
                                                                        enable_gqa=True)
        err = float(np.max(np.abs(sdpa().float().numpy() - ref)))
        if not err <= tol:
            sys.exit(f"torch-sdpa disagrees with the reference on {s}: max abs diff {err}")
        if dt == "f32":
            paths = {}
            for name, arr in (("q", q), ("k", k), ("v", v)):
                paths[name] = os.path.join(tmp, name + ".npy")
                np.save(paths[name], arr)
            out = os.path.join(tmp, "o.npy")
            subprocess.run([clattn, "run", "--q", paths["q"], "--k", paths["k"], "--v",
                            paths["v"], "--out", out, "--algorithm", "fused"], check=True)
            err = float(np.max(np.abs(np.load(out) - ref)))
            if not err <= tol:
                sys.exit(f"clattn disagrees with the reference on {s}: max abs diff {err}")
        shape_arg = f"{b},{h_q},{h_kv},{n_q},{n_kv},{d},{d},none,fused,{dt}" + (
            ",bshd" if s["bshd"] else "")
        times = {"clattn": [], "torch": [], "bw": []}
        for _ in range(args.rounds):
            case = run_json([clattn, "bench", "--json", "--peak", "--reps", "5", "--shapes",
                             shape_arg])[0]
            device, cpu = case["device"], case.get("host_cpu", "?")
            times["clattn"].append(case["device_ms"]["median"])
            times["bw"].append(case["bw_gbytes_per_s"])  # measured around the case
            time.sleep(SETTLE_S)
            reps = []
            for _ in range(5):
                t0 = time.perf_counter()
                sdpa()
                reps.append(1e3 * (time.perf_counter() - t0))
            times["torch"].append(float(np.median(reps)))
            time.sleep(SETTLE_S)
        med = {key: float(np.median(t)) for key, t in times.items()}
        kv_bytes = 2 * b * h_kv * n_kv * d * np.dtype(np_dt).itemsize
        rows.append((s, med, kv_bytes))
        print(f"done {s}: " + ", ".join(f"{key} {x:.2f}" for key, x in med.items()),
              file=sys.stderr)

    print(f"clattn device: {device}; host CPU: {cpu}")
    print()
    print("| b, h_q, h_kv, n_q, n_kv, d | dtype | clattn ms | K/V GB/s | of read bandwidth "
          "(GB/s) | torch SDPA ms | K/V GB/s | clattn vs torch |")
    print("|---|---|---|---|---|---|---|---|")
    for s, med, kv in rows:
        c_gbs, t_gbs = kv / med["clattn"] / 1e6, kv / med["torch"] / 1e6
        print(f"| {s['b']}, {s['h_q']}, {s['h_kv']}, {s['n_q']}, {s['n_kv']}, {s['d']} | "
              f"{s['dtype']}{', bshd' if s['bshd'] else ''} | {med['clattn']:.1f} | {c_gbs:.1f} | "
              f"{100 * c_gbs / med['bw']:.0f} % ({med['bw']:.1f}) | {med['torch']:.1f} | "
              f"{t_gbs:.1f} | {med['torch'] / med['clattn']:.2f}x |")


if __name__ == "__main__":
    main()
