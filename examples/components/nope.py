"""NoPE: no position signal at all; the causal mask alone tells a token where it is.

Kazemnejad et al. (2023) found that a decoder without positions learns them from the causal mask and
extrapolates past its training length better than a learned table; SmolLM3 and Llama 4 leave RoPE out of
some layers. It fills the position slot (in place of the learned table, or of RoPE: switch rope off).
"""

import torch
import torch.nn as nn

from modern_gpt import Component


class NoPositions(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.dim = cfg.dim
        self.register_buffer("zero", torch.zeros(()), persistent=False)  # on the model's device; not a weight

    def forward(self, start, T):
        return self.zero.expand(T, self.dim)  # added to the embeddings: nothing, at any position (no context wall)


COMPONENTS = [Component("nope", "learned position table -> no positions (NoPE)", slot="position", factory=NoPositions)]
