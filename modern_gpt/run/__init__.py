"""One run: the training loop, checkpoints, the context wall, and when torch.compile pays."""
