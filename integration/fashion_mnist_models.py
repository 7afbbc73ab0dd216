"""The Fashion-MNIST networks the integration programs share (torch).

    from fashion_mnist_models import build_model, Net
    model = build_model("cnn")   # or "mlp"

- "mlp": 784-1024-1024-10 (1.86 M parameters), the slow-network experiment's
  model (integration/slow_network_mlp.py).
- "cnn": Net, the README demo's small CNN (integration/torch_fashion_mnist.py).
Both take images shaped (N, 1, 28, 28), as fashion_mnist_data.load() gives.
"""

import torch.nn as nn
import torch.nn.functional as F

MODELS = ("mlp", "cnn")


class Net(nn.Module):
    """Two 3x3 conv layers (16, 32 channels) with pooling, then 128 -> 10:
    206,922 parameters, about 90% test accuracy after 3 epochs."""

    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 16, 3, padding=1)
        self.conv2 = nn.Conv2d(16, 32, 3, padding=1)
        self.fc1 = nn.Linear(32 * 7 * 7, 128)
        self.fc2 = nn.Linear(128, 10)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.conv1(x)), 2)
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        return self.fc2(F.relu(self.fc1(x.flatten(1))))


def build_mlp():
    return nn.Sequential(nn.Flatten(), nn.Linear(784, 1024), nn.ReLU(),
                         nn.Linear(1024, 1024), nn.ReLU(), nn.Linear(1024, 10))


def build_model(name="mlp"):
    if name == "mlp":
        return build_mlp()
    if name == "cnn":
        return Net()
    raise ValueError(f"unknown model {name!r}; known: {MODELS}")
