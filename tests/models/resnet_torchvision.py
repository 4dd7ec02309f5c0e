"""torchvision side of tests/models:resnet_torchvision_test: builds torchvision's resnet18 (the
ImageNet stem, or the small-input stem Kiln's ResNetOptions.small_input names: conv1 3x3 stride 1,
no max-pool), gives its BatchNorms non-trivial weights and running statistics, and writes
  DIR/weights.safetensors   the state_dict, torchvision's names
  DIR/expected.safetensors  input, target, eval_logits, train_logits, loss, grad/<param>, and
                            after/<buffer> (the BatchNorm buffers after the train-mode forward);
                            the model's options in the metadata
    python resnet_torchvision.py imagenet|small DIR
"""
import os
import sys

import torch
import torch.nn.functional as F
import torchvision
from safetensors.torch import save_file


def build(kind):
    torch.manual_seed(0)
    if kind == "imagenet":
        model = torchvision.models.resnet18()
        x = torch.randn(2, 3, 64, 64)
        options = {"num_classes": "1000", "in_channels": "3", "small_input": "0"}
    else:
        model = torchvision.models.resnet18(num_classes=10)
        model.conv1 = torch.nn.Conv2d(1, 64, 3, stride=1, padding=1, bias=False)
        torch.nn.init.kaiming_normal_(model.conv1.weight, mode="fan_out", nonlinearity="relu")
        model.maxpool = torch.nn.Identity()
        x = torch.randn(4, 1, 32, 32)
        options = {"num_classes": "10", "in_channels": "1", "small_input": "1"}
    with torch.no_grad():  # BatchNorm away from weight 1, bias 0, mean 0, var 1
        for m in model.modules():
            if isinstance(m, torch.nn.BatchNorm2d):
                m.weight.uniform_(0.5, 1.5)
                m.bias.uniform_(-0.2, 0.2)
                m.running_mean.uniform_(-0.2, 0.2)
                m.running_var.uniform_(0.5, 1.5)
                m.num_batches_tracked.fill_(3)
    y = torch.randint(0, int(options["num_classes"]), (x.shape[0],))
    return model, x, y, options


def main():
    kind, out = sys.argv[1], sys.argv[2]
    os.makedirs(out, exist_ok=True)
    torch.set_num_threads(1)
    model, x, y, options = build(kind)
    save_file({k: v.contiguous() for k, v in model.state_dict().items()}, os.path.join(out, "weights.safetensors"))
    expected = {"input": x, "target": y}
    model.eval()
    with torch.no_grad():
        expected["eval_logits"] = model(x)
    model.train()
    logits = model(x)
    loss = F.cross_entropy(logits, y)
    loss.backward()
    expected["train_logits"] = logits.detach()
    expected["loss"] = loss.detach().reshape(1)
    for name, p in model.named_parameters():
        expected["grad/" + name] = p.grad
    for name, b in model.named_buffers():
        expected["after/" + name] = b
    save_file({k: v.contiguous() for k, v in expected.items()}, os.path.join(out, "expected.safetensors"),
              metadata=dict(options, torchvision=torchvision.__version__, torch=torch.__version__))
    print(f"{kind}: torchvision {torchvision.__version__} resnet18, "
          f"{sum(p.numel() for p in model.parameters())} parameters, input {list(x.shape)}")


if __name__ == "__main__":
    main()
