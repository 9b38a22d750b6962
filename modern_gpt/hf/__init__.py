"""Hugging Face: a config.json explained in terms of the components, and a checkpoint exported as a transformers model."""
