#!/usr/bin/env python3
"""Text to a token file the training binaries read (--data).

    python3 examples/tokenize.py TEXT_FILE OUT.bin [--tokenizer T] [--bytes-per-token 2|4]

The tokenizer T, where one is installed:
  * a SentencePiece model (Debian's python3-sentencepiece): T ends in .model;
  * a Hugging Face tokenizer (the tokenizers or transformers package): T is
    a tokenizer.json file or a folder holding one (from a model's download);
  * none given: every byte of the text is a token (vocabulary 256).
The ids are written as raw little-endian uint16 (nanoGPT's train.bin) when
they fit, else (or with --bytes-per-token 4) as a Loom token file: the
16-byte header "LOOMTOKS", version 1 and 4 bytes a token (uint32 little
endian each), then uint32 ids. Compile the model with a vocabulary of at
least the size printed (a 128k-vocabulary Llama needs the 4-byte form; its
binary refuses a uint16 file).
"""
import argparse
import os
import struct
import sys


def encode(text, tokenizer):
    """Token ids and the vocabulary they come from."""
    if tokenizer is None:
        data = text.encode("utf-8")
        return list(data), 256
    if tokenizer.endswith(".model"):
        import sentencepiece as spm  # python3-sentencepiece
        sp = spm.SentencePieceProcessor(model_file=tokenizer)
        return sp.encode(text), sp.get_piece_size()
    path = tokenizer
    if os.path.isdir(path):
        path = os.path.join(path, "tokenizer.json")
    try:
        from tokenizers import Tokenizer
        tok = Tokenizer.from_file(path)
        return tok.encode(text).ids, tok.get_vocab_size()
    except ImportError:
        from transformers import AutoTokenizer
        tok = AutoTokenizer.from_pretrained(os.path.dirname(path) or ".")
        return tok(text)["input_ids"], len(tok)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("text")
    p.add_argument("out")
    p.add_argument("--tokenizer", help="a SentencePiece .model, or a tokenizer.json (or its folder)")
    p.add_argument("--bytes-per-token", type=int, choices=(2, 4),
                   help="2: raw uint16; 4: a Loom token file (default: 2 when the ids fit)")
    a = p.parse_args()
    try:
        text = open(a.text, encoding="utf-8", errors="replace").read()
    except OSError as e:
        sys.exit(f"tokenize.py: cannot read {a.text}: {e.strerror}")
    if not text:
        sys.exit(f"tokenize.py: {a.text} is empty")
    try:
        ids, vocab = encode(text, a.tokenizer)
    except ImportError as e:
        sys.exit(f"tokenize.py: {a.tokenizer} needs {e.name} (Debian: python3-sentencepiece for "
                 ".model files; pip: tokenizers for tokenizer.json)")
    width = a.bytes_per_token or (2 if max(ids) < 65536 and vocab <= 65536 else 4)
    if width == 2 and max(ids) >= 65536:
        sys.exit(f"tokenize.py: id {max(ids)} does not fit 2 bytes: use --bytes-per-token 4")
    with open(a.out, "wb") as f:
        if width == 2:
            f.write(struct.pack(f"<{len(ids)}H", *ids))
        else:
            f.write(b"LOOMTOKS" + struct.pack("<II", 1, 4) + struct.pack(f"<{len(ids)}I", *ids))
    form = "raw uint16" if width == 2 else "Loom token file, uint32"
    print(f"{len(ids)} tokens ({form}) from {a.text} -> {a.out}; vocabulary {vocab}: compile "
          f"with vocab={vocab} or more")


if __name__ == "__main__":
    main()
