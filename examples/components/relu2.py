"""Squared ReLU in the MLP: dim -> 4*dim -> relu(x)^2 -> dim.

Primer (So et al., 2021) found it by architecture search; the modded-nanogpt speedrun trains with it.
Two matrices at 4*dim, as GPT-2's GELU MLP: only the activation changes.

    modern-gpt ablate --smoke --plugin examples/components/relu2.py --plan custom --variants "modern;modern+relu2"
"""

import torch.nn as nn
import torch.nn.functional as F

from modern_gpt import Component
from modern_gpt.model.gpt import linear


class ReLU2(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.fc = linear(cfg, cfg.dim, cfg.mlp_width)  # cfg.mlp_width: 4*dim (or --mlp-hidden)
        self.proj = linear(cfg, cfg.mlp_width, cfg.dim)  # a name ending in proj gets GPT-2's residual init scaling

    def forward(self, x):
        return self.proj(F.relu(self.fc(x)).square())


COMPONENTS = [Component("relu2", "GELU MLP -> squared-ReLU MLP (Primer)", slot="mlp", factory=ReLU2)]
