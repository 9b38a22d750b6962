"""Text in, token ids out: corpora, tokenizers, the train/val split, the token cache and batches."""
