#!/usr/bin/env python3
"""Hugging Face side of tests/examples:gpt_hf_parity_test (CPU, f32, nothing downloaded).

  make DIR    a randomly initialised GPT2LMHeadModel from a small GPT2Config, saved with
              save_pretrained (safetensors) in DIR, and DIR/expected.json: fixed tokens, their
              logits and the loss of predicting each next token.
  check DIR EXPECTED
              loads DIR (written by Kiln) with from_pretrained and compares its logits and loss
              with EXPECTED's; exits 1 when they differ by more than 1e-4.
  load DIR    loads DIR with from_pretrained and prints the loss on a fixed text's bytes."""
import json
import sys

import torch
from transformers import GPT2Config, GPT2LMHeadModel

TOL = 1e-4


def logits_and_loss(model, tokens):
    with torch.no_grad():
        out = model(input_ids=tokens, labels=tokens)  # HF shifts the labels by one itself
    return out.logits, out.loss.item()


def make(d):
    torch.manual_seed(0)
    cfg = GPT2Config(vocab_size=300, n_positions=16, n_embd=32, n_layer=2, n_head=4, activation_function="gelu_new",
                     resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, bos_token_id=0, eos_token_id=0)
    model = GPT2LMHeadModel(cfg).eval()
    with torch.no_grad():  # every tensor non-trivial: LayerNorms and biases start at ones/zeros
        for name, p in model.named_parameters():
            if "ln_" in name or name.endswith(".bias"):
                p.add_(0.1 * torch.randn_like(p))
    model.save_pretrained(d, safe_serialization=True)
    tokens = torch.randint(0, cfg.vocab_size, (2, 16), generator=torch.Generator().manual_seed(1))
    logits, loss = logits_and_loss(model, tokens)
    with open(f"{d}/expected.json", "w") as f:
        json.dump({"tokens": tokens.tolist(), "shape": list(logits.shape), "logits": logits.flatten().tolist(),
                   "loss": loss}, f)
    print(f"hf fixture: {sum(p.numel() for p in model.parameters())} parameters, loss {loss:.6f}")


def check(d, expected_path):
    with open(expected_path) as f:
        e = json.load(f)
    model = GPT2LMHeadModel.from_pretrained(d).eval()
    logits, loss = logits_and_loss(model, torch.tensor(e["tokens"]))
    diff = (logits.flatten() - torch.tensor(e["logits"])).abs().max().item()
    print(f"hf reload of kiln's save: max |logit diff| {diff:.3g}, loss {loss:.6f} vs {e['loss']:.6f}")
    if diff > TOL or abs(loss - e["loss"]) > TOL:
        print("hf reload: MISMATCH", file=sys.stderr)
        sys.exit(1)


def load(d):
    model = GPT2LMHeadModel.from_pretrained(d).eval()
    tokens = torch.tensor([list(range(16))])
    _, loss = logits_and_loss(model, tokens)
    print(f"hf loaded {d}: {sum(p.numel() for p in model.parameters())} parameters, loss {loss:.4f}")


if __name__ == "__main__":
    if sys.argv[1] == "make":
        make(sys.argv[2])
    elif sys.argv[1] == "load":
        load(sys.argv[2])
    else:
        check(sys.argv[2], sys.argv[3])
