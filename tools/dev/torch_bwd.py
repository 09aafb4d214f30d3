# PyTorch SDPA forward and backward timed apart on the CPU (2 threads), for
# docs/BENCHMARKS.md: python torch_bwd.py b,h,n,d,none|causal ...
import sys, time, torch
torch.set_num_threads(2)
F = torch.nn.functional
for spec in sys.argv[1:]:
    b, h, n, d, causal = spec.split(",")
    b, h, n, d, causal = int(b), int(h), int(n), int(d), causal == "causal"
    g = torch.Generator().manual_seed(1)
    q, k, v = (torch.randn(b, h, n, d, generator=g, requires_grad=True) for _ in range(3))
    do = torch.randn(b, h, n, d, generator=g)
    fw, bw = [], []
    for rep in range(4):
        t0 = time.perf_counter(); o = F.scaled_dot_product_attention(q, k, v, is_causal=causal); t1 = time.perf_counter()
        o.backward(do); t2 = time.perf_counter()
        q.grad = k.grad = v.grad = None
        if rep: fw.append(t1 - t0); bw.append(t2 - t1)
        time.sleep(1)
    fw.sort(); bw.sort()
    print(f"torch {torch.__version__} {spec}: forward {fw[1]*1e3:.1f} ms, backward {bw[1]*1e3:.1f} ms, ratio {bw[1]/fw[1]:.2f}", flush=True)
