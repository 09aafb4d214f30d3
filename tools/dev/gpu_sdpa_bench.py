#!/usr/bin/env python3
"""PyTorch's scaled_dot_product_attention on a CUDA GPU, float32, for the shapes given as
"b,h,n,d[,causal]; ..." — the GPU peer column of docs/BENCHMARKS.md (dev-time only) —
and decoding with grouped-query heads as "decode,b,h_q,h_kv,n_q,n_kv,d,dtype" (f16 or f32
storage; GB/s counts K and V read once).
Prints one JSON object per shape: median milliseconds over 10 runs (CUDA events), GFLOP/s
counted as 4*b*h*n*n*d (halved for causal), and the backend PyTorch chose."""
import json
import sys

import torch
import torch.nn.functional as F


def main():
    shapes = sys.argv[1] if len(sys.argv) > 1 else "1,16,4096,64"
    dev = torch.device("cuda")
    torch.backends.cuda.matmul.allow_tf32 = False  # true float32, as clattn computes
    for spec in shapes.split(";"):
        parts = [p.strip() for p in spec.split(",") if p.strip()]
        if not parts:
            continue
        decode = parts[0] == "decode"
        g = torch.Generator(device=dev).manual_seed(0)
        if decode:
            b, hq, hkv, nq, nkv, d = (int(x) for x in parts[1:7])
            dt = torch.float16 if parts[7] == "f16" else torch.float32
            q = (torch.rand(b, hq, nq, d, device=dev, generator=g) * 2 - 1).to(dt)
            k, v = ((torch.rand(b, hkv, nkv, d, device=dev, generator=g) * 2 - 1).to(dt)
                    for _ in range(2))
            run = lambda: F.scaled_dot_product_attention(q, k, v, enable_gqa=True)
        else:
            causal = parts[-1] == "causal"
            b, h, n, d = (int(x) for x in parts[:4])
            q, k, v = (torch.rand(b, h, n, d, device=dev, generator=g) * 2 - 1 for _ in range(3))
            run = lambda: F.scaled_dot_product_attention(q, k, v, is_causal=causal)
        times = []
        for r in range(13):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            run()
            end.record()
            torch.cuda.synchronize()
            if r >= 3:
                times.append(start.elapsed_time(end))
        times.sort()
        ms = times[len(times) // 2]
        if decode:
            nbytes = (q.numel() * 2 + k.numel() + v.numel()) * q.element_size()
            print(json.dumps({"peer": "torch-sdpa", "torch": torch.__version__,
                              "gpu": torch.cuda.get_device_name(), "decode": spec, "ms": ms,
                              "gbytes_per_s": nbytes / ms / 1e6}), flush=True)
            continue
        flop = 4.0 * b * h * n * n * d / (2 if causal else 1)
        print(json.dumps({"peer": "torch-sdpa-f32", "torch": torch.__version__,
                          "gpu": torch.cuda.get_device_name(), "b": b, "h": h, "n": n, "d": d,
                          "mask": "causal" if causal else "none", "ms": ms,
                          "gflops": flop / ms / 1e6}), flush=True)

if __name__ == "__main__":
    main()
