"""What the integration scripts share: their two flags (--bin: the built
tools, --tmp: a scratch folder, created) and a token file of a repeating
pattern below a vocabulary size."""
import argparse
import os


def setup(vocab, tokens, description=None):
    ap = argparse.ArgumentParser(description=description)
    ap.add_argument("--bin", required=True)
    ap.add_argument("--tmp", required=True)
    a = ap.parse_args()
    os.makedirs(a.tmp, exist_ok=True)
    a.data = os.path.join(a.tmp, "tokens.bin")
    with open(a.data, "wb") as f:
        f.write(b"".join(((i * 7 + i // 13) % vocab).to_bytes(2, "little") for i in range(tokens)))
    return a
