#!/usr/bin/env python3
"""GatherND at indices computed on the device (an input, negative ones
included) against PyTorch's advanced indexing: the ONNX model is written in
text form (protoc), its loss and the gradient of the gathered parameter run
by loom-run and compared with autograd in float64 (relative error <= 1e-6).
"""
import os
import subprocess
import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(__file__))
from loomtest import parse_args, read_st, rel, tool, write_st  # noqa: E402

W_SHAPE, IDS = (3, 4, 2), [[0, 1], [2, 3], [-1, 0], [1, -2], [2, 2]]
PROTO = "/usr/include/onnx"


def model_text(w):
    dims = " ".join(f"dims: {d}" for d in W_SHAPE)
    data = " ".join(f"float_data: {v:.8f}" for v in w.flatten().tolist())
    return f'''ir_version: 8 opset_import {{ version: 17 }} graph {{ name: "g"
      node {{ input: "w" input: "ids" output: "logits" name: "gnd" op_type: "GatherND" }}
      initializer {{ name: "w" {dims} data_type: 1 {data} }}
      input {{ name: "ids" type {{ tensor_type {{ elem_type: 7 shape {{
        dim {{ dim_value: {len(IDS)} }} dim {{ dim_value: 2 }} }} }} }} }}
      output {{ name: "logits" type {{ tensor_type {{ elem_type: 1 shape {{
        dim {{ dim_value: {len(IDS)} }} dim {{ dim_value: {W_SHAPE[2]} }} }} }} }} }} }}'''


def main():
    a = parse_args()
    torch.manual_seed(0)
    w = torch.randn(*W_SHAPE)
    path = os.path.join(a.tmp, "gathernd.onnx")
    out = subprocess.run(["protoc", "--encode=onnx.ModelProto", "-I", PROTO, "onnx.proto"],
                         input=model_text(w).encode(), capture_output=True, check=True)
    with open(path, "wb") as f:
        f.write(out.stdout)
    mlir = os.path.join(a.tmp, "gathernd.mlir")
    tool(a.bin, "loomc", path, "--task=classify", "--compile-to=autodiff", "-o", mlir)
    ids, labels = torch.tensor(IDS), torch.tensor([0, 1, 1, 0, 1])
    fin, fout = (os.path.join(a.tmp, f"gathernd.{n}.safetensors") for n in ("in", "out"))
    write_st(fin, {"arg0": ids, "arg1": labels})
    tool(a.bin, "loom-run", mlir, "--function=forward_backward", f"--inputs={fin}",
         f"--outputs={fout}")
    got = read_st(fout)
    ref = w.double().requires_grad_()
    loss = F.cross_entropy(ref[ids[:, 0], ids[:, 1]], labels)
    loss.backward()
    errs = [rel(got["out0"].double(), loss.detach()), rel(got["grad.w"].double(), ref.grad)]
    print(f"gathernd loss {loss.item():.6f}  max rel error {max(errs):.2e} (bound 1e-6)")
    if max(errs) > 1e-6:
        sys.exit(1)


if __name__ == "__main__":
    main()
