#!/usr/bin/env python3
"""GPT-2 124M training on one GPU: Kiln's examples/gpt beside the same model in PyTorch eager and
torch.compile (bench/gpt_pytorch.py), from the same initial weights (written once in Hugging Face's
layout by the PyTorch twin, read by both through --init-from-hf), on the same batches of the same
corpus, with bf16 autocast and fused AdamW on both sides. Runs are interleaved (kiln, eager,
compile, kiln, ...) for --rounds rounds, or fewer when the next run would pass --budget-s.

Per run: the mean step time over the steps after --warmup (each step ends on a device sync),
tokens/s, MFU against --peak-tflops (the GPU's bf16 dense peak; by default 989 for an H100/H200
SXM), peak GPU memory, and the loss of every step. Per framework, the median over rounds; then
Kiln's ratios and the loss agreement (Kiln's last-step loss against each PyTorch run's: the same
weights and batches, so they must agree to --loss-tol). After every run the whole result so far is
written to --json (temporary name, then renamed), so a run cut off by a time limit keeps what it
measured. Exit status: 0 when every run finished, 1 when one failed (its error is in the JSON)."""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time


def write_json(path, obj):
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(obj, f, indent=1)
        f.write("\n")
    os.replace(tmp, path)


def run(cmd, log, timeout, env=None):
    """(the command's last JSON line or None, an error string or None); its output appended to log."""
    with open(log, "a") as f:
        f.write("+ " + " ".join(cmd) + "\n")
        f.flush()
        try:
            p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=timeout,
                               env=env)
        except subprocess.TimeoutExpired as e:
            out = e.stdout.decode() if isinstance(e.stdout, bytes) else (e.stdout or "")
            f.write(out)
            return None, f"timed out after {timeout} s"
        f.write(p.stdout)
    lines = [l for l in p.stdout.splitlines() if l.startswith("{")]
    if p.returncode != 0 or not lines:
        tail = " | ".join(p.stdout.strip().splitlines()[-3:])
        return None, f"exit {p.returncode}: {tail}"
    return json.loads(lines[-1]), None


def gpu_name():
    try:
        return subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"], capture_output=True,
                              text=True, timeout=30).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return ""


def summarize(r, warmup, tokens_per_step, flops_per_token, peak_flops):
    timed = r["step_ms"][warmup:]
    ms = sum(timed) / len(timed) if timed else float("nan")
    tok_s = tokens_per_step / (ms / 1e3)
    return {"step_ms": ms, "tokens_per_sec": tok_s, "mfu": tok_s * flops_per_token / peak_flops,
            "peak_device_mb": r.get("peak_device_mb", 0.0), "timed_steps": len(timed),
            "first_loss": r["step_losses"][0], "last_loss": r["step_losses"][-1]}


def main():
    if len(sys.argv) == 3 and sys.argv[1] == "--print-summary":  # the table of a result written earlier
        print_summary(json.load(open(sys.argv[2])).get("summary", {}))
        return 0
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--kiln-bin", required=True)
    p.add_argument("--pytorch-script", required=True)
    p.add_argument("--python", default=os.environ.get("KILN_TORCH_PYTHON", sys.executable))
    p.add_argument("--data", required=True, help="a text corpus (bytes) both sides read")
    p.add_argument("--workdir", required=True, help="initial weights and logs go here")
    p.add_argument("--json", required=True, help="the result, rewritten after every run")
    p.add_argument("--model", default="d12", help="bench/gpt_pytorch.py's shape name (d12: GPT-2 124M)")
    p.add_argument("--vocab-size", type=int, default=50304, help="GPT-2's 50257 padded to a multiple of 64")
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--seq-len", type=int, default=1024)
    p.add_argument("--steps", type=int, default=25)
    p.add_argument("--warmup", type=int, default=5, help="steps left out of the timing")
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--device", default="cuda")
    p.add_argument("--amp", default="bf16")
    p.add_argument("--peak-tflops", type=float, default=989.0)
    p.add_argument("--frameworks", default="kiln,eager,compile")
    p.add_argument("--budget-s", type=float, default=1e9, help="start no run after this many seconds")
    p.add_argument("--run-timeout", type=int, default=300)
    p.add_argument("--loss-tol", type=float, default=1e-2)
    a = p.parse_args()
    t0 = time.monotonic()
    os.makedirs(a.workdir, exist_ok=True)
    log = os.path.join(a.workdir, "gpt_runs.log")
    init = os.path.join(a.workdir, "init_hf")
    result = {"bench": "gpt_gpu_vs_pytorch", "model": a.model, "vocab_size": a.vocab_size, "batch_size": a.batch_size,
              "seq_len": a.seq_len, "steps": a.steps, "warmup": a.warmup, "amp": a.amp, "device": a.device,
              "peak_tflops": a.peak_tflops, "gpu": gpu_name(), "runs": [], "errors": [], "summary": {}}
    write_json(a.json, result)
    _, err = run([a.python, a.pytorch_script, "--model", a.model, "--vocab-size", str(a.vocab_size), "--seed", "1337",
                  "--write-hf-init", init], log, a.run_timeout)
    if err:
        result["errors"].append({"framework": "init", "error": err})
        write_json(a.json, result)
        print(f"gpt_gpu_vs_pytorch: writing the initial weights failed: {err}", file=sys.stderr)
        return 1
    common = ["--init-from-hf", init, "--data", a.data, "--batch-size", str(a.batch_size), "--seq-len", str(a.seq_len),
              "--max-steps", str(a.steps), "--warmup-steps", "10", "--lr", "6e-4", "--min-lr", "6e-5",
              "--eval-every", "0", "--eval-batches", "1", "--log-every", "5", "--seed", "1337",
              "--device", a.device, "--amp", a.amp]
    cmds = {"kiln": [a.kiln_bin] + common + ["--sample-tokens", "0", "--peak-tflops", str(a.peak_tflops)],
            "eager": [a.python, a.pytorch_script] + common + ["--fused-adamw"],
            "compile": [a.python, a.pytorch_script] + common + ["--fused-adamw", "--compile"]}
    frameworks = a.frameworks.split(",")
    tokens_per_step = a.batch_size * a.seq_len
    failed = False
    for rnd in range(a.rounds):
        for fw in frameworks:
            if time.monotonic() - t0 > a.budget_s:
                result["cut"] = f"budget of {a.budget_s:.0f} s reached before round {rnd + 1} {fw}"
                write_json(a.json, result)
                print(f"gpt_gpu_vs_pytorch: {result['cut']}", file=sys.stderr)
                return 1 if failed else 0
            start = time.monotonic()
            r, err = run(cmds[fw], log, a.run_timeout)
            if err:
                failed = True
                result["errors"].append({"framework": fw, "round": rnd + 1, "error": err})
                print(f"{fw} round {rnd + 1}: {err}", file=sys.stderr, flush=True)
                write_json(a.json, result)
                continue
            # The model FLOPs per token (6 N + 12 L T C, N without the position table), from the shape.
            c = r["n_embd"]
            flops_per_token = 6 * (r["params"] - r["block_size"] * c) + 12 * r["n_layer"] * a.seq_len * c
            s = summarize(r, a.warmup, tokens_per_step, flops_per_token, a.peak_tflops * 1e12)
            s.update({"framework": fw, "round": rnd + 1, "wall_s": time.monotonic() - start,
                      "step_ms_all": r["step_ms"], "step_losses": r["step_losses"]})
            result["runs"].append(s)
            print(f"{fw:8s} round {rnd + 1}: {s['step_ms']:8.1f} ms/step {s['tokens_per_sec']:9.0f} tok/s "
                  f"MFU {100 * s['mfu']:5.1f}% peak {s['peak_device_mb']:7.0f} MiB loss {s['first_loss']:.4f} -> "
                  f"{s['last_loss']:.4f} ({s['wall_s']:.0f} s)", flush=True)
            result["summary"] = summary(result["runs"], a.loss_tol)
            write_json(a.json, result)
    print_summary(result["summary"])
    return 1 if failed else 0


def summary(runs, tol):
    out = {}
    by = {}
    for r in runs:
        by.setdefault(r["framework"], []).append(r)
    for fw, rs in by.items():
        out[fw] = {k: statistics.median(r[k] for r in rs) for k in ("step_ms", "tokens_per_sec", "mfu", "peak_device_mb")}
        out[fw]["rounds"] = len(rs)
        out[fw]["last_loss"] = rs[0]["last_loss"]
        out[fw]["first_loss"] = rs[0]["first_loss"]
    if "kiln" in out:
        for fw in [f for f in by if f != "kiln"]:
            out[f"kiln_vs_{fw}"] = out["kiln"]["tokens_per_sec"] / out[fw]["tokens_per_sec"]
            out[f"kiln_memory_vs_{fw}"] = out["kiln"]["peak_device_mb"] / max(out[fw]["peak_device_mb"], 1e-9)
            d = abs(out["kiln"]["last_loss"] - out[fw]["last_loss"])
            out[f"loss_diff_vs_{fw}"] = d
            out[f"losses_agree_vs_{fw}"] = d <= tol
    return out


def print_summary(s):
    print(f"{'':8s} {'step ms':>9s} {'tok/s':>9s} {'MFU':>6s} {'peak MiB':>9s} {'loss@1':>8s} {'loss@end':>8s}")
    for fw in ("kiln", "eager", "compile"):
        if fw in s:
            r = s[fw]
            print(f"{fw:8s} {r['step_ms']:9.1f} {r['tokens_per_sec']:9.0f} {100 * r['mfu']:5.1f}% "
                  f"{r['peak_device_mb']:9.0f} {r['first_loss']:8.4f} {r['last_loss']:8.4f}")
    for fw in ("eager", "compile"):
        if f"kiln_vs_{fw}" in s:
            print(f"kiln vs {fw}: x{s[f'kiln_vs_{fw}']:.2f} tokens/s, memory x{s[f'kiln_memory_vs_{fw}']:.2f}, "
                  f"last loss differs by {s[f'loss_diff_vs_{fw}']:.4f} ({'agree' if s[f'losses_agree_vs_{fw}'] else 'DISAGREE'})")


if __name__ == "__main__":
    sys.exit(main())
