"""Hugging Face: a config.json explained in terms of the components. A checkpoint exported as a transformers model."""
