"""The anchor: nanoGPT's practice for preparing a corpus, about 50 lines, for bench_data.py to compare against.

    python bench/anchor_prepare.py TEXT OUT.bin {char,bpe} [--vocab-size 8192] [--sample-mb 64]

char: a first pass collects the characters, a second writes their ids. bpe: HF tokenizers trains byte-level BPE
on the first --sample-mb of the text, then encodes batches of lines into the memmap. Both stream the file in
blocks into a uint16 np.memmap, as nanoGPT's prepare.py scripts do.
"""

import argparse

import numpy as np

BLOCK = 1 << 23


def blocks(path):
    with open(path, encoding="utf-8", newline="") as f:
        while block := f.read(BLOCK):
            yield block


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("text")
    p.add_argument("out")
    p.add_argument("kind", choices=["char", "bpe"])
    p.add_argument("--vocab-size", type=int, default=8192)
    p.add_argument("--sample-mb", type=float, default=64)
    a = p.parse_args()
    n = 0
    with open(a.out, "wb") as out:  # a flat uint16 file, read back with np.memmap(out, dtype=np.uint16)
        if a.kind == "char":
            chars = sorted(set().union(*(set(b) for b in blocks(a.text))))
            table = np.zeros(max(map(ord, chars)) + 1, dtype=np.uint16)
            table[[ord(c) for c in chars]] = np.arange(len(chars))
            for b in blocks(a.text):
                ids = table[np.frombuffer(b.encode("utf-32-le"), dtype="<u4")]
                out.write(ids.tobytes())
                n += len(ids)
        else:
            from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

            tok = Tokenizer(models.BPE())
            tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
            tok.decoder = decoders.ByteLevel()
            alphabet = pre_tokenizers.ByteLevel.alphabet()
            trainer = trainers.BpeTrainer(vocab_size=a.vocab_size, initial_alphabet=alphabet, show_progress=False)
            sample, size = [], 0
            for b in blocks(a.text):
                if size >= a.sample_mb * (1 << 20):
                    break
                sample.append(b)
                size += len(b)
            tok.train_from_iterator("".join(sample).splitlines(keepends=True), trainer=trainer)
            del sample
            for b in blocks(a.text):
                lines = b.splitlines(keepends=True)
                for i in range(0, len(lines), 4096):
                    encs = tok.encode_batch(lines[i : i + 4096])
                    ids = np.fromiter((t for e in encs for t in e.ids), dtype=np.uint16)
                    out.write(ids.tobytes())
                    n += len(ids)
    print(n)


if __name__ == "__main__":
    main()
