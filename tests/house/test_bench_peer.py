"""bench/bench_peer.py's pairs: each modern-gpt model and its transformers peer have the same parameter count, and
each computes a finite loss on the same tokens (a mis-built peer would make the side-by-side times meaningless).
No timing is asserted."""

import pytest
import torch

from tests.benchload import load

pytest.importorskip("transformers")
bench_peer = load("bench_peer")


@pytest.mark.parametrize("pair", ["gpt2", "llama", "qwen3"])
def test_each_pair_has_equal_parameters_and_a_finite_loss(pair):
    (components, _), (_, peer_build) = bench_peer.PAIRS[pair]
    ours, peer = bench_peer.ours(components), peer_build()
    assert sum(p.numel() for p in ours.parameters()) == sum(p.numel() for p in peer.parameters())
    x = torch.randint(bench_peer.V, (2, bench_peer.T), generator=torch.Generator().manual_seed(0))
    for model in (ours, peer):
        loss = bench_peer.loss_of(model, x, torch.roll(x, -1, 1))
        assert torch.isfinite(loss) and abs(loss.item() - torch.log(torch.tensor(float(bench_peer.V)))) < 1.0


def test_all_six_against_llama_differs_by_qk_norm_s_gains_alone():
    """The one unequal pair, and a negative control: Llama has no QK-norm, whose gains (2 x head_dim a layer) are
    the whole difference."""
    six, llama = bench_peer.ours(bench_peer.SIX), bench_peer.llama()
    assert sum(p.numel() for p in six.parameters()) - sum(p.numel() for p in llama.parameters()) == 4 * 2 * 32
