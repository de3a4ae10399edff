#!/usr/bin/env python3
"""Moves the raw data of one initializer of an ONNX model into an external
file, with protoc's text format (no onnx package needed):

    externalize.py IN.onnx OUT.onnx NAME LOCATION
"""
import codecs
import os
import re
import subprocess
import sys

src, dst, name, location = sys.argv[1:5]
proto = "/usr/include/onnx"
text = subprocess.run(["protoc", "--decode=onnx.ModelProto", "-I", proto, "onnx.proto"],
                      stdin=open(src, "rb"), capture_output=True, check=True).stdout.decode()
pattern = re.compile(r'(name: "' + re.escape(name) + r'"\n\s*)raw_data: "((?:[^"\\]|\\.)*)"')
m = pattern.search(text)
if not m:
    sys.exit(f"no initializer {name} with raw_data")
raw = codecs.escape_decode(m.group(2).encode())[0]
out_dir = os.path.dirname(os.path.abspath(dst))
if not location.startswith("/") and ".." not in location:
    with open(os.path.join(out_dir, location), "wb") as f:
        f.write(b"\0" * 16 + raw)  # at offset 16, to exercise the offset
external = (f'data_location: EXTERNAL\n    external_data {{ key: "location" value: "{location}" }}\n'
            f'    external_data {{ key: "offset" value: "16" }}\n'
            f'    external_data {{ key: "length" value: "{len(raw)}" }}')
text = text[:m.start()] + m.group(1) + external + text[m.end():]
encoded = subprocess.run(["protoc", "--encode=onnx.ModelProto", "-I", proto, "onnx.proto"],
                         input=text.encode(), capture_output=True, check=True).stdout
open(dst, "wb").write(encoded)
