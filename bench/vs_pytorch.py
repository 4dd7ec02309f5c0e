#!/usr/bin/env python3
"""Kiln vs PyTorch on the Fashion-MNIST MLP and CNN, side by side in one run on this machine.

Runs examples/mnist (Kiln) and bench/pytorch_mnist.py (PyTorch) with the same model, data,
batch size, optimizer and thread count, prints samples/s and test accuracy for each with the
ratio, and ends with one JSON line. The PyTorch baseline is PyTorch 2.x from PyPI in a virtual
environment set up on first use ($KILN_TORCH_VENV, default ~/.cache/kiln/torch-venv); if that
cannot be installed, Debian's python3-torch is used and labelled as a fallback. Refuses to run on
a loaded machine unless --allow-load (bench/host_check.py)."""
import argparse
import json
import os
import statistics
import subprocess
import sys

from host_check import HostCheck, add_allow_load

VENV = os.environ.get("KILN_TORCH_VENV", os.path.expanduser("~/.cache/kiln/torch-venv"))


def torch_python():
    """(python, label): $KILN_TORCH_PYTHON when set (a GPU host's own PyTorch), else the venv's
    PyTorch 2.x, installed on first use, else Debian's."""
    given = os.environ.get("KILN_TORCH_PYTHON")
    if given:
        version = subprocess.run([given, "-c", "import torch; print(torch.__version__)"], capture_output=True,
                                 text=True, check=True).stdout.strip()
        return given, f"torch {version} ({given})"
    py = os.path.join(VENV, "bin", "python3")
    check = [py, "-c", "import torch, numpy; print(torch.__version__)"]
    if not os.path.exists(py) or subprocess.run(check, capture_output=True).returncode != 0:
        print(f"vs_pytorch: setting up PyTorch from PyPI in {VENV} (first use; a few GB)", file=sys.stderr)
        try:
            subprocess.run([sys.executable, "-m", "venv", VENV], check=True)
            subprocess.run([py, "-m", "pip", "install", "-q", "torch", "numpy"], check=True)
        except (subprocess.CalledProcessError, OSError) as e:
            print(f"vs_pytorch: PyPI install failed ({e}); falling back to Debian's python3-torch", file=sys.stderr)
            return "/usr/bin/python3", "fallback: Debian python3-torch"
    version = subprocess.run(check, capture_output=True, text=True).stdout.strip()
    return py, f"PyPI torch {version}"


def last_json(cmd):
    print("+ " + " ".join(cmd), file=sys.stderr)
    out = subprocess.run(cmd, stdout=subprocess.PIPE, text=True)
    if out.returncode != 0:
        raise SystemExit(f"vs_pytorch: {cmd[0]} exited with {out.returncode}")
    line = [l for l in out.stdout.splitlines() if "{" in l][-1]
    return json.loads(line[line.index("{"):])  # the launcher prefixes "[rank 0] "


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--kiln-bin", required=True)
    p.add_argument("--pytorch-script", required=True)
    p.add_argument("--models", default="mlp,cnn")
    p.add_argument("--epochs", type=int, default=1)
    p.add_argument("--threads", type=int, default=os.cpu_count())
    p.add_argument("--data-dir", default="/usr/share/datasets/fashion-mnist")
    p.add_argument("--limit-train", type=int, default=0)
    p.add_argument("--device", default="cpu", help="cpu, or cuda (both sides; Kiln needs a CUDA build)")
    p.add_argument("--launch", help="Kiln's //distributed/launch binary (for --ddp)")
    p.add_argument("--ddp", type=int, default=0,
                   help="data parallel with this many ranks on this machine (Kiln: launch + --ddp; PyTorch: "
                        "torchrun + DistributedDataParallel, Gloo); --threads is split among them")
    p.add_argument("--repeats", type=int, default=3,
                   help="runs per framework, interleaved (kiln, torch, kiln, ...); medians are reported")
    add_allow_load(p)
    a = p.parse_args()

    py, label = torch_python()
    host = HostCheck("vs_pytorch", a.allow_load)  # after PyTorch's set-up, right before the runs
    threads = max(1, a.threads // a.ddp) if a.ddp else a.threads
    kiln_cmd, torch_cmd = [a.kiln_bin], [py, a.pytorch_script]
    if a.ddp:
        kiln_cmd = [a.launch, "--nproc-per-node", str(a.ddp), "--", a.kiln_bin, "--ddp"]
        torch_cmd = [py, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", str(a.ddp),
                     a.pytorch_script, "--ddp"]
    common = ["--epochs", str(a.epochs), "--threads", str(threads), "--data-dir", a.data_dir,
              "--batch-size", "128", "--lr", "0.05", "--seed", "0"]
    if a.limit_train:
        common += ["--limit-train", str(a.limit_train)]
    rows = []
    for model in a.models.split(","):
        # Interleaved repeats: slow drifts of the machine (frequency, neighbours) hit both alike.
        kilns, torches = [], []
        for _ in range(a.repeats):
            kilns.append(last_json(kiln_cmd + ["--model", model, "--optimizer", "sgd", "--schedule", "constant",
                                    "--device", a.device] + common))
            torches.append(last_json(torch_cmd + ["--model", model, "--device", a.device] + common))
        k_sps = statistics.median(r["samples_per_sec"] for r in kilns)
        t_sps = statistics.median(r["samples_per_sec"] for r in torches)
        rows.append({"model": model, "kiln_samples_per_sec": k_sps, "pytorch_samples_per_sec": t_sps,
                     "ratio": k_sps / t_sps,
                     "kiln_runs": [round(r["samples_per_sec"]) for r in kilns],
                     "pytorch_runs": [round(r["samples_per_sec"]) for r in torches],
                     "kiln_test_accuracy": kilns[0]["test_accuracy"],
                     "pytorch_test_accuracy": torches[0]["test_accuracy"]})

    mode = f"DDP {a.ddp} ranks x {threads} thread(s), Gloo" if a.ddp else f"{a.threads} threads"
    print(f"\nKiln vs {label}, {mode}, batch 128 per rank, SGD momentum 0.9, {a.epochs} epoch(s), "
          f"median of {a.repeats} interleaved runs")
    print(f"{'model':6} {'kiln samples/s':>15} {'torch samples/s':>16} {'ratio':>6} {'kiln acc':>9} {'torch acc':>10}")
    for r in rows:
        print(f"{r['model']:6} {r['kiln_samples_per_sec']:15.0f} {r['pytorch_samples_per_sec']:16.0f} "
              f"{r['ratio']:6.2f} {r['kiln_test_accuracy']:9.4f} {r['pytorch_test_accuracy']:10.4f}")
    print(json.dumps(host.finish({"benchmark": "vs_pytorch", "baseline": label, "threads": a.threads,
                                  "ddp_ranks": a.ddp, "epochs": a.epochs, "repeats": a.repeats, "results": rows})))


if __name__ == "__main__":
    main()
