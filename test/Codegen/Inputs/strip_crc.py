"""Rewrites a safetensors file without its crc32c: metadata keys (standard
library only): a Loom checkpoint part someone edited (hostile-files.test)."""
import json
import struct
import sys

path = sys.argv[1]
data = open(path, "rb").read()
n = struct.unpack("<Q", data[:8])[0]
header = json.loads(data[8:8 + n])
meta = header.get("__metadata__", {})
for key in [k for k in meta if k.startswith("crc32c:")]:
    del meta[key]
text = json.dumps(header).encode()
text += b" " * (-len(text) % 8)
open(path, "wb").write(struct.pack("<Q", len(text)) + text + data[8 + n:])
