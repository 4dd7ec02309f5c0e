#!/usr/bin/env python3
"""attention_bench's CUDA rows (its last line, JSON) beside PyTorch's F.scaled_dot_product_attention
on the same GPU, shapes and dtype, timed as attention_bench times (best of REPS after a warm-up,
synchronized), with the peak memory of one step above the inputs. argv: LOG REPS."""
import json
import sys
import time

import torch
import torch.nn.functional as F

kiln = json.loads([l for l in open(sys.argv[1]) if l.startswith("{")][-1])
reps = int(sys.argv[2])
dt = {"f32": torch.float32, "bf16": torch.bfloat16, "f16": torch.float16}[kiln["dtype"]]
B, H, D = kiln["B"], kiln["H"], kiln["D"]
torch.manual_seed(0)
print(f"attention on {torch.cuda.get_device_name()}, {kiln['dtype']}, causal, B={B} H={H} D={D}, best of {reps};"
      f" PyTorch {torch.__version__}")
print(f"{'T':>6} {'':>20} {'Kiln fused':>11} {'Kiln comp.':>11} {'PyTorch':>11} {'PyTorch/fused':>14}")
rows = []
for kr in kiln["rows"]:
    T = kr["T"]
    q, k, v = (torch.randn(B, H, T, D, device="cuda", dtype=dt, requires_grad=True) for _ in range(3))
    g = torch.randn(B, H, T, D, device="cuda", dtype=dt)

    def step():
        F.scaled_dot_product_attention(q, k, v, is_causal=True).backward(g)
        q.grad = k.grad = v.grad = None
        torch.cuda.synchronize()

    step()
    before = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    step()
    peak = (torch.cuda.max_memory_allocated() - before) / 2**20
    fwd = st = 1e30
    for _ in range(reps):
        t0 = time.perf_counter()
        with torch.no_grad():
            F.scaled_dot_product_attention(q, k, v, is_causal=True)
        torch.cuda.synchronize()
        fwd = min(fwd, time.perf_counter() - t0)
        t0 = time.perf_counter()
        step()
        st = min(st, time.perf_counter() - t0)
    for what, kf, kc, t in (("forward ms", kr["fused_fwd_ms"], kr["composite_fwd_ms"], fwd * 1e3),
                            ("forward+backward ms", kr["fused_step_ms"], kr["composite_step_ms"], st * 1e3),
                            ("peak MiB", kr["fused_peak_mib"], kr["composite_peak_mib"], peak)):
        print(f"{T:>6} {what:>20} {kf:>11.2f} {kc:>11.2f} {t:>11.2f} {t / kf:>13.2f}x")
    rows.append({**kr, "torch_fwd_ms": fwd * 1e3, "torch_step_ms": st * 1e3, "torch_peak_mib": peak})
print(json.dumps({"bench": "attention_vs_pytorch", "device": "cuda", "dtype": kiln["dtype"],
                  "torch": torch.__version__, "rows": rows}))
