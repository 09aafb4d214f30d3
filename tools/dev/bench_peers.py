#!/usr/bin/env python3
"""Benchmark clattn against its peers on this machine, in one run (dev-time only).

For each shape it runs, interleaved round by round so drift hits everyone alike:
  clattn        `clattn bench --json` (fused and unfused; device time, OpenCL events)
  numpy         the seeds' three lines: S = Q K^T * scale; W = softmax(S); O = W V
  torch-sdpa    torch.nn.functional.scaled_dot_product_attention on the CPU
  clblast       CLBlast strided-batched SGEMM + clattn's softmax on the same OpenCL
                device (build/clattn_peer_clblast; skipped if it was not built)
Each peer's output is checked against clattn's (`clattn run`) before it is timed.
Prints a markdown table of median milliseconds, GFLOP/s and clattn/peer speed ratios.

Usage: python3 tools/dev/bench_peers.py [--build build] [--rounds 3] [--shapes "b,h,n_q,n_kv,d[,causal]; ..."]
Needs numpy (and torch for the SDPA column): pip install numpy torch
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

import numpy as np

DEFAULT_SHAPES = "1,8,1024,1024,64; 1,8,4096,4096,64; 1,1,4096,4096,128; " \
                 "1,8,4096,4096,64,causal; 1,32,1,8192,128"


# After a peer's call its thread pool (OpenMP in torch, OpenBLAS in numpy) keeps spinning
# for a while; on a 2-core machine that spinning halves the next timed run (clattn's,
# in a subprocess). Each peer gets this long to go idle before anything else is timed.
SETTLE_S = 1.0


def parse_shapes(text):
    shapes = []
    for spec in text.split(";"):
        parts = [p.strip() for p in spec.split(",") if p.strip()]
        if not parts:
            continue
        causal = parts[-1] == "causal"
        b, h, n_q, n_kv, d = (int(x) for x in parts[:5])
        shapes.append(dict(b=b, h=h, n_q=n_q, n_kv=n_kv, d=d, causal=causal))
    return shapes


def flop(s):
    f = 2.0 * s["b"] * s["h"] * s["n_q"] * s["n_kv"] * (2 * s["d"])
    return f / 2 if s["causal"] else f


def numpy_attention(q, k, v, causal):
    scale = 1.0 / np.sqrt(q.shape[-1])
    s = np.matmul(q, np.swapaxes(k, -1, -2)) * np.float32(scale)
    if causal:
        n_q, n_kv = s.shape[-2:]
        s = np.where(np.tril(np.ones((n_q, n_kv), dtype=bool)), s, np.float32(-np.inf))
    s -= s.max(axis=-1, keepdims=True)
    np.exp(s, out=s)
    s /= s.sum(axis=-1, keepdims=True)
    return np.matmul(s, v)


def timed(fn):
    t0 = time.perf_counter()
    out = fn()
    return out, 1e3 * (time.perf_counter() - t0)


def run_json(cmd):
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    return json.loads(out)


def parse_args(doc, default_shapes):
    """The options every peers script takes (--build, --rounds, --shapes) and the path
    of the clattn program in the build folder."""
    ap = argparse.ArgumentParser(description=doc.split("\n")[0])
    ap.add_argument("--build", default="build", help="CMake build folder (default: build)")
    ap.add_argument("--rounds", type=int, default=3, help="interleaved rounds (default 3)")
    ap.add_argument("--shapes", default=default_shapes)
    args = ap.parse_args()
    return args, os.path.join(args.build, "clattn")


def main():
    args, clattn = parse_args(__doc__, DEFAULT_SHAPES)
    peer = os.path.join(args.build, "clattn_peer_clblast")
    try:
        import torch
        torch.set_num_threads(os.cpu_count())
    except ImportError:
        torch = None
        print("torch not installed: skipping the torch-sdpa column", file=sys.stderr)
    have_clblast = os.path.exists(peer)
    blas = np.__config__.CONFIG.get("Build Dependencies", {}).get("blas", {}).get("name", "?") \
        if hasattr(np.__config__, "CONFIG") else "?"
    print(f"numpy {np.__version__} (BLAS: {blas}), torch {torch.__version__ if torch else '-'}"
          f" ({torch.get_num_threads() if torch else 0} threads), cores {os.cpu_count()}")

    dev = run_json([clattn, "bench", "--json", "--reps", "1", "--warmup", "0", "--shapes",
                    "1,1,1,16,16,16,16,none,fused"])[0]
    print(f"clattn device: {dev['device']}; host CPU: {dev.get('host_cpu', '?')}")

    rows = []
    tmp = tempfile.mkdtemp(prefix="clattn-peers-")
    rng = np.random.default_rng(0)
    for s in parse_shapes(args.shapes):
        b, h, n_q, n_kv, d, causal = s["b"], s["h"], s["n_q"], s["n_kv"], s["d"], s["causal"]
        q = rng.uniform(-1, 1, (b, h, n_q, d)).astype(np.float32)
        k = rng.uniform(-1, 1, (b, h, n_kv, d)).astype(np.float32)
        v = rng.uniform(-1, 1, (b, h, n_kv, d)).astype(np.float32)
        mask = "causal" if causal else "none"
        # clattn's answer, the yardstick for every peer
        paths = {}
        for name, arr in (("q", q), ("k", k), ("v", v)):
            paths[name] = os.path.join(tmp, name + ".npy")
            np.save(paths[name], arr)
        out_path = os.path.join(tmp, "o.npy")
        subprocess.run([clattn, "run", "--q", paths["q"], "--k", paths["k"], "--v", paths["v"],
                        "--out", out_path, "--mask", mask], check=True)
        ref = np.load(out_path)

        def check(name, got):
            err = float(np.max(np.abs(got.astype(np.float64) - ref)))
            if not err <= 1e-4:
                sys.exit(f"{name} disagrees with clattn on {s}: max abs diff {err}")

        check("numpy", numpy_attention(q, k, v, causal))
        tq = tk = tv = None
        if torch is not None:
            tq, tk, tv = (torch.from_numpy(x) for x in (q, k, v))
            with torch.no_grad():
                check("torch-sdpa", torch.nn.functional.scaled_dot_product_attention(
                    tq, tk, tv, is_causal=causal).numpy())
        times = {key: [] for key in ("fused", "unfused", "numpy", "torch-sdpa", "clblast")}
        shape_arg = f"{b},{h},{h},{n_q},{n_kv},{d},{d},{mask}"
        for _ in range(args.rounds):
            for case in run_json([clattn, "bench", "--json", "--reps", "3", "--shapes", shape_arg]):
                times[case["algorithm"]].append(case["device_ms"]["median"])
            times["numpy"].append(timed(lambda: numpy_attention(q, k, v, causal))[1])
            time.sleep(SETTLE_S)
            if torch is not None:
                with torch.no_grad():
                    times["torch-sdpa"].append(timed(
                        lambda: torch.nn.functional.scaled_dot_product_attention(
                            tq, tk, tv, is_causal=causal))[1])
                time.sleep(SETTLE_S)
            if have_clblast and not causal:
                r = run_json([peer, str(b), str(h), str(n_q), str(n_kv), str(d), str(d), "3"])
                if r["max_abs_diff_vs_clattn"] > 1e-4:
                    sys.exit(f"clblast peer disagrees with clattn on {s}")
                times["clblast"].append(r["ms"])
        med = {key: float(np.median(t)) for key, t in times.items() if t}
        rows.append((s, med))
        print(f"done {s}: " + ", ".join(f"{key} {ms:.1f} ms" for key, ms in med.items()),
              file=sys.stderr)

    print()
    print("| b, h, n_q, n_kv, d | mask | clattn fused ms (GFLOP/s) | clattn unfused ms (GFLOP/s) "
          "| numpy ms (GFLOP/s) | torch SDPA ms (GFLOP/s) | CLBlast+softmax ms (GFLOP/s) "
          "| fused vs numpy | fused vs torch | unfused vs CLBlast |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for s, med in rows:
        def cell(key):
            if key not in med:
                return "-"
            return f"{med[key]:.1f} ({flop(s) / med[key] / 1e6:.1f})"

        def ratio(a, b):
            return f"{med[b] / med[a]:.2f}x" if a in med and b in med else "-"
        print(f"| {s['b']}, {s['h']}, {s['n_q']}, {s['n_kv']}, {s['d']} | "
              f"{'causal' if s['causal'] else 'none'} | {cell('fused')} | {cell('unfused')} | "
              f"{cell('numpy')} | {cell('torch-sdpa')} | {cell('clblast')} | "
              f"{ratio('fused', 'numpy')} | {ratio('fused', 'torch-sdpa')} | "
              f"{ratio('unfused', 'clblast')} |")


if __name__ == "__main__":
    main()
