#!/usr/bin/env python3
"""Replays every op database row (dumped by op_dump) in PyTorch and compares the output and the
gradient of every input with Kiln's, in f64. Prints one line per difference and a summary; exits
1 on any difference. Usage: torch_compare.py DUMP_FILE"""
import math
import sys

import torch
import torch.nn.functional as F


def ints(values, shape=None):
    t = torch.tensor(values, dtype=torch.int64)
    return t.reshape(shape) if shape is not None else t


def ce_weight_grad(x, target, weight, label_smoothing=0.0, ignore_index=-100):
    """F.cross_entropy with class weights, differentiable in the weights too (torch's nll_loss is
    not; Kiln's is): torch's own value and input gradient, plus the weights' gradient from the same
    formula (mean reduction: sum_i w[y_i] loss_i / sum_i w[y_i], smoothing over w[c] (-log p_c))."""
    value = F.cross_entropy(x, target, weight=weight.detach(), label_smoothing=label_smoothing,
                            ignore_index=ignore_index)
    lp = torch.log_softmax(x.detach(), 1).movedim(1, -1).reshape(-1, x.shape[1])
    t = target.reshape(-1)
    keep = t != ignore_index
    lp, t = lp[keep], t[keep]
    denom = weight[t].sum()
    nll = -(weight[t] * lp.gather(1, t[:, None])[:, 0]).sum() / denom
    smooth = -(lp * weight[None, :]).sum() / denom
    formula = (1 - label_smoothing) * nll + label_smoothing / x.shape[1] * smooth
    return value + (formula - formula.detach())


DTYPES = {"bool": torch.bool, "i32": torch.int32, "i64": torch.int64, "f16": torch.float16,
          "bf16": torch.bfloat16, "f32": torch.float32, "f64": torch.float64}


def compare_ints(row, env):
    """The row's integer passes: PyTorch's result dtype and values on the same integer inputs.
    Returns the number of differences (printed). Run at torch's default dtype, f32, which is what
    an integer input meeting a float op or number becomes."""
    failures = 0
    saved = torch.get_default_dtype()
    torch.set_default_dtype(torch.float32)
    for case in row["ints"]:
        try:
            y = eval(row["torch"], dict(env, v=case["in"]))
        except Exception as e:
            print(f"DIFF {row['name']} ({case['dtype']}): torch raised {type(e).__name__}: {e}")
            failures += 1
            continue
        if y.dtype != case["result"]:
            print(f"DIFF {row['name']} ({case['dtype']}): torch gives {y.dtype}, kiln {case['result']}")
            failures += 1
        elif max_diff(y.to(torch.float64), case["out"], 1e-6, 1e-6) > 0:
            print(f"DIFF {row['name']} ({case['dtype']}): values\n  torch {y.flatten()[:8].tolist()}\n"
                  f"  kiln  {case['out'].flatten()[:8].tolist()}")
            failures += 1
    torch.set_default_dtype(saved)
    return failures


def parse(path):
    rows, row = [], None
    with open(path) as f:
        for line in f:
            line = line.rstrip("\n")
            key, _, rest = line.partition(" ")
            if key == "row":
                row = {"name": rest, "in": [], "grad": [], "ints": []}
            elif key == "int":
                dtype, result = rest.split()
                row["ints"].append({"dtype": DTYPES[dtype], "result": DTYPES[result], "in": []})
            elif key == "torch":
                row["torch"] = rest
            elif key == "flags":
                row["differentiable"] = rest.strip() == "1"
            elif key in ("in", "out", "w", "grad", "iin", "iout"):
                parts = rest.split()
                ndim = int(parts[0])
                shape = [int(p) for p in parts[1:1 + ndim]]
                values = [float(p) for p in parts[1 + ndim:]]
                t = torch.tensor(values, dtype=torch.float64).reshape(shape)
                if key == "iin":
                    row["ints"][-1]["in"].append(t.to(row["ints"][-1]["dtype"]))
                elif key == "iout":
                    row["ints"][-1]["out"] = t
                elif key in ("in", "grad"):
                    row[key].append(t)
                else:
                    row[key] = t
            elif key == "end":
                rows.append(row)
    return rows


def max_diff(a, b, rtol, atol):
    """The largest excess of |a - b| over atol + rtol |b| (<= 0: close); NaN matches NaN."""
    if a.shape != b.shape:
        return math.inf
    if a.numel() == 0:
        return 0.0
    both_nan = torch.isnan(a) & torch.isnan(b)
    same = (a == b) | both_nan
    excess = (a - b).abs() - (atol + rtol * b.abs())
    excess = torch.where(same, torch.zeros_like(excess), excess)
    excess = torch.where(torch.isnan(excess), torch.full_like(excess, math.inf), excess)
    return excess.max().item()


def main():
    torch.set_default_dtype(torch.float64)
    rows = parse(sys.argv[1])
    rtol, atol = 1e-7, 1e-9
    failures, compared = 0, 0
    for row in rows:
        name = row["name"]
        if not row.get("torch"):
            print(f"DIFF {name}: no torch expression")
            failures += 1
            continue
        v = [t.clone().requires_grad_(row["differentiable"]) for t in row["in"]]
        env = {"torch": torch, "F": F, "ints": ints, "ce_weight_grad": ce_weight_grad}
        failures += compare_ints(row, env)
        try:
            y = eval(row["torch"], dict(env, v=v))
        except Exception as e:  # a row PyTorch refuses is a difference too
            print(f"DIFF {name}: torch raised {type(e).__name__}: {e}")
            failures += 1
            continue
        compared += 1
        out = y.detach().to(torch.float64)
        d = max_diff(out, row["out"], rtol, atol)
        if d > 0:
            print(f"DIFF {name}: output, excess {d:.3g}\n  torch {out.flatten()[:8].tolist()}\n"
                  f"  kiln  {row['out'].flatten()[:8].tolist()}")
            failures += 1
            continue
        if not row["differentiable"]:
            continue
        if y.requires_grad:
            try:
                (y * row["w"]).sum().backward()
            except Exception as e:
                print(f"DIFF {name}: torch's backward raised {type(e).__name__}: {e}")
                failures += 1
                continue
        for k, (t, g) in enumerate(zip(v, row["grad"])):
            tg = t.grad if t.grad is not None else torch.zeros_like(t)
            d = max_diff(tg, g, rtol, atol)
            if d > 0:
                print(f"DIFF {name}: gradient of input {k}, excess {d:.3g}\n  torch {tg.flatten()[:8].tolist()}\n"
                      f"  kiln  {g.flatten()[:8].tolist()}")
                failures += 1
    int_passes = sum(len(r["ints"]) for r in rows)
    print(f"torch {torch.__version__}: {len(rows)} rows, {compared} compared (and {int_passes} integer passes), "
          f"{failures} differences")
    return 1 if failures or not rows else 0


if __name__ == "__main__":
    sys.exit(main())
