#!/usr/bin/env python3
"""Malformed and hostile ONNX models, written with protoc's text format (no
onnx package needed), and what loomc must say about each.

    hostile.py run LOOMC WORKDIR      # every case: loomc must exit 1 with a
                                      # one-line error (never 0, never a signal)
    hostile.py model NAME OUT.onnx    # write one model (the injection tests)
    hostile.py seeds DIR              # every model, as fuzzing seeds

`run` prints one line per case, `NAME: <loomc's error line>`, for FileCheck,
and exits non-zero if any case crashed, hung, succeeded or printed no error.
"""
import os
import subprocess
import sys

PROTO = "/usr/include/onnx"

# A valid classifier: x [2, 4] @ w [4, 3] -> logits [2, 3]; cases edit it.
W = "initializer { name: \"w\" dims: 4 dims: 3 data_type: 1 " + \
    " ".join(f"float_data: {i * 0.1:.1f}" for i in range(12)) + " }"
X = 'input { name: "x" type { tensor_type { elem_type: 1 shape { dim { dim_value: 2 } dim { dim_value: 4 } } } } }'
OUT = 'output { name: "y" type { tensor_type { elem_type: 1 shape { dim { dim_value: 2 } dim { dim_value: 3 } } } } }'
MATMUL = 'node { input: "x" input: "w" output: "y" name: "mm" op_type: "MatMul" }'
IDS = 'input { name: "ids" type { tensor_type { elem_type: 7 shape { dim { dim_value: 2 } dim { dim_value: 4 } } } } }'


def model(nodes=(MATMUL,), inits=(W,), inputs=(X,), outputs=(OUT,), opset="opset_import { version: 17 }"):
    graph = " ".join(list(nodes) + list(inits) + list(inputs) + list(outputs))
    return f'ir_version: 8 {opset} graph {{ name: "g" {graph} }}'


def i64(name, dims, values=None, raw=None):
    d = " ".join(f"dims: {x}" for x in dims)
    data = "" if values is None else " ".join(f"int64_data: {v}" for v in values)
    if raw is not None:
        data = f'raw_data: "{raw}"'
    return f'initializer {{ name: "{name}" {d} data_type: 7 {data} }}'


def node(op, ins, outs, name="n", attrs=""):
    i = " ".join(f'input: "{x}"' for x in ins)
    o = " ".join(f'output: "{x}"' for x in outs)
    return f'node {{ {i} {o} name: "{name}" op_type: "{op}" {attrs} }}'


def ints_attr(name, values):
    return f'attribute {{ name: "{name}" type: INTS ' + " ".join(f"ints: {v}" for v in values) + " }"


def int_attr(name, v):
    return f'attribute {{ name: "{name}" type: INT i: {v} }}'


def then(*nodes):
    """`nodes` compute a constant `c`; y = x @ w + (c folded into nothing):
    the folding runs, its result is unused."""
    return list(nodes) + [MATMUL]


def external(location, offset="0", length=None):
    kv = f'external_data {{ key: "location" value: "{location}" }} external_data {{ key: "offset" value: "{offset}" }}'
    if length is not None:
        kv += f' external_data {{ key: "length" value: "{length}" }}'
    return f'initializer {{ name: "w" dims: 4 dims: 3 data_type: 1 data_location: EXTERNAL {kv} }}'


INJECTED = 'w\\" + (system(\\"touch PWNED\\") & 0) + sizeof \\"'

CASES = {
    # Arity: inputs and outputs are counted before they are read.
    "add_one_input": model(then(node("Add", ["x"], ["c"]))),
    "range_one_input": model(then(node("Range", ["s"], ["c"])), inits=(W, i64("s", [], [0]))),
    "concat_no_input": model(then(node("Concat", [], ["c"], attrs=int_attr("axis", 0)))),
    "node_without_outputs": model(then(node("Relu", ["x"], []))),
    "split_no_outputs": model(then(node("Split", ["x"], []))),
    "empty_required_input": model(then(node("Mul", ["", "x"], ["c"]))),
    # Data that is not there, or not as much as the shape says.
    "int64_init_no_data": model(then(node("Identity", ["s"], ["c"])), inits=(W, i64("s", [3]))),
    "int64_init_short": model(then(node("Identity", ["s"], ["c"])), inits=(W, i64("s", [4], [1, 2]))),
    "int64_raw_short": model(then(node("Identity", ["s"], ["c"])), inits=(W, i64("s", [4], raw="\\001\\000"))),
    "float_init_huge": model(inits=('initializer { name: "w" dims: 1000000 dims: 1000000 data_type: 1 }',)),
    "float_init_negative_dim": model(inits=('initializer { name: "w" dims: -3 dims: 3 data_type: 1 }',)),
    "dims_overflow": model(inits=('initializer { name: "w" dims: 4294967296 dims: 4294967296 dims: 4294967296 data_type: 1 }',)),
    "constantofshape_no_value_data": model(then(
        node("ConstantOfShape", ["s"], ["c"], attrs='attribute { name: "value" type: TENSOR t { dims: 1 data_type: 7 } }')),
        inits=(W, i64("s", [1], [4]))),
    "constantofshape_huge": model(then(node("ConstantOfShape", ["s"], ["c"])),
                                  inits=(W, i64("s", [2], [1000000, 1000000]))),
    "range_delta_zero": model(then(node("Range", ["a", "b", "d"], ["c"])),
                              inits=(W, i64("a", [], [0]), i64("b", [], [10]), i64("d", [], [0]))),
    "range_huge": model(then(node("Range", ["a", "b", "d"], ["c"])),
                        inits=(W, i64("a", [], [0]), i64("b", [], [4000000000000]), i64("d", [], [1]))),
    # Indices and axes out of range.
    "gather_index_past_end": model(then(node("Gather", ["t", "i"], ["c"])),
                                   inits=(W, i64("t", [3], [1, 2, 3]), i64("i", [1], [5]))),
    "gather_index_negative": model(then(node("Gather", ["t", "i"], ["c"])),
                                   inits=(W, i64("t", [3], [1, 2, 3]), i64("i", [1], [-7]))),
    "gather_empty_table": model(then(node("Gather", ["t", "i"], ["c"])),
                                inits=(W, i64("t", [0, 2]), i64("i", [1], [0]))),
    "slice_axis_out_of_range": model(then(node("Slice", ["t", "s", "e", "a"], ["c"])),
                                     inits=(W, i64("t", [3], [1, 2, 3]), i64("s", [1], [0]),
                                            i64("e", [1], [2]), i64("a", [1], [5]))),
    # A step of INT64_MAX is legal ONNX (one element); the size arithmetic
    # must not overflow (fuzz-onnx-proto found it). The Reshape then fails
    # on purpose and its message shows the slice kept exactly one element.
    "slice_step_int64_max": model(then(node("Slice", ["t", "s", "e", "a", "p"], ["u"]),
                                       node("Reshape", ["u", "r"], ["c"])),
                                  inits=(W, i64("t", [3], [1, 2, 3]), i64("s", [1], [0]),
                                         i64("e", [1], [3]), i64("a", [1], [0]),
                                         i64("p", [1], [9223372036854775807]), i64("r", [1], [3]))),
    "unsqueeze_axis_out_of_range": model(then(node("Unsqueeze", ["t", "a"], ["c"])),
                                         inits=(W, i64("t", [3], [1, 2, 3]), i64("a", [1], [10]))),
    "unsqueeze_axes_undefined": model([node("Unsqueeze", ["x", "nope"], ["u"]),
                                       node("Reshape", ["u", "s"], ["r"]),
                                       node("MatMul", ["r", "w"], ["y"], name="mm")],
                                      inits=(W, i64("s", [2], [2, 4]))),
    "squeeze_not_one": model(then(node("Squeeze", ["t", "a"], ["c"])),
                             inits=(W, i64("t", [3], [1, 2, 3]), i64("a", [1], [0]))),
    "reshape_zero_and_infer": model(then(node("Reshape", ["t", "s"], ["c"])),
                                    inits=(W, i64("t", [0]), i64("s", [2], [0, -1]))),
    "reshape_wrong_count": model([node("Reshape", ["x", "s"], ["r"]), node("MatMul", ["r", "w"], ["y"], name="mm")],
                                 inits=(W, i64("s", [2], [3, 3]))),
    "transpose_bad_perm": model([node("Transpose", ["x"], ["t"], attrs=ints_attr("perm", [0, 5])),
                                 node("MatMul", ["t", "w"], ["y"], name="mm")]),
    "softmax_axis_out_of_range": model([node("MatMul", ["x", "w"], ["m"], name="mm"),
                                        node("Softmax", ["m"], ["y"], attrs=int_attr("axis", 7))]),
    "concat_mismatched": model([node("Concat", ["x", "w"], ["c"], attrs=int_attr("axis", 0)), MATMUL]),
    "split_sizes_do_not_add_up": model([node("Split", ["x", "s"], ["a", "b"], attrs=int_attr("axis", 1)), MATMUL],
                                       inits=(W, i64("s", [2], [3, 3]))),
    # SSA and opsets.
    "output_defined_twice": model([MATMUL, node("Relu", ["x"], ["y"], name="again")]),
    "output_shadows_initializer": model([node("Relu", ["x"], ["w"], name="shadow"), MATMUL]),
    "initializer_twice": model(inits=(W, W)),
    "opset_11": model(opset="opset_import { version: 11 }"),
    "opset_999": model(opset="opset_import { version: 999 }"),
    "no_opset": model(opset=""),
    # External data: only regular files inside the model's folder.
    "external_offset_not_a_number": model(inits=(external("w.bin", offset="abc"),)),
    "external_offset_past_end": model(inits=(external("w.bin", offset="9223372036854775807", length="48"),)),
    "external_length_overflow": model(inits=(external("w.bin", offset="16", length="9223372036854775800"),)),
    "external_length_too_many_digits": model(inits=(external("w.bin", offset="16", length="18446744073709551600"),)),
    "external_symlink_out": model(inits=(external("passwd.bin", offset="0", length="48"),)),
    "external_through_linked_dir": model(inits=(external("linked/passwd", offset="0", length="48"),)),
    "external_directory": model(inits=(external("adir", length="48"),)),
    "external_wrong_length": model(inits=(external("w.bin", offset="0", length="40"),)),
    "classifier_scalar_input": model([node("Relu", ["s"], ["y"])],
                                     inputs=('input { name: "s" type { tensor_type { elem_type: 1 shape { } } } }',),
                                     outputs=('output { name: "y" type { tensor_type { elem_type: 1 } } }',), inits=()),
    # Operators the dynamo exporter brought (issue 16): refused, not guessed.
    "expand_computed_shape": model([node("Expand", ["x", "x"], ["e"]), node("MatMul", ["e", "w"], ["y"], name="mm")]),
    "isnan_used_as_a_value": model([node("IsNaN", ["x"], ["n"]), node("MatMul", ["n", "w"], ["y"], name="mm")]),
    "dropout_mask_used": model([node("Dropout", ["x"], ["d", "m"], name="drop"),
                                node("MatMul", ["m", "w"], ["y"], name="mm")]),
    "dropout_ratio_one": model([node("Dropout", ["x", "r", "t"], ["d"], name="drop"),
                                node("MatMul", ["d", "w"], ["y"], name="mm")],
                               inits=(W, 'initializer { name: "r" data_type: 1 float_data: 1.0 }',
                                      'initializer { name: "t" data_type: 9 int32_data: 1 }')),
    "gathernd_batch_dims_too_large": model(then(node("GatherND", ["t", "i"], ["c"], attrs=int_attr("batch_dims", 3))),
                                           inits=(W, i64("t", [2, 2], [1, 2, 3, 4]), i64("i", [2, 1], [0, 1]))),
    "gather_elements_index_out_of_range": model(then(node("GatherElements", ["t", "i"], ["c"])),
                                                inits=(W, i64("t", [3], [1, 2, 3]), i64("i", [2], [0, 7]))),
    "cumsum_axis_out_of_range": model(then(node("CumSum", ["t", "a"], ["c"])),
                                      inits=(W, i64("t", [3], [1, 2, 3]), i64("a", [1], [4]))),
    # Integer tensors computed on the device (RoBERTa's position ids):
    # integer arithmetic, comparisons, casts and CumSum only.
    "where_computed_condition": model([node("Equal", ["ids", "p"], ["e"], name="eq"),
                                       node("Where", ["e", "x", "x"], ["c"], name="where"), MATMUL],
                                      inits=(W, i64("p", [], [1])), inputs=(X, IDS)),
    # A comparison of computed floats is a mask only Where takes (as a
    # blend of finite branches): used otherwise, refused.
    "equal_on_computed_floats": model([node("Equal", ["x", "x"], ["c"], name="eq"),
                                       node("Mul", ["c", "x"], ["cx"], name="use"),
                                       'node { input: "cx" input: "w" output: "y" name: "mm" '
                                       'op_type: "MatMul" }']),
    # nanoGPT's causal mask: a float buffer written as an initializer,
    # transposed (any chain of nodes), compared and used by masked_fill
    # with -inf: the error names it and --frozen.
    "equal_on_a_float_buffer": model(
        [node("Transpose", ["w"], ["wt"], name="tr"),
         node("Equal", ["wt", "wt"], ["c"], name="eq"),
         node("Where", ["c", "ninf", "wt"], ["m"], name="where"),
         node("Transpose", ["m"], ["mt"], name="tr2"),
         'node { input: "x" input: "mt" output: "y" name: "mm" op_type: "MatMul" }'],
        inits=(W, 'initializer { name: "ninf" data_type: 1 float_data: -inf }')),
    "cumsum_computed_axis": model(then(node("CumSum", ["ids", "a"], ["c"], name="cs"),
                                       node("CumSum", ["ids", "c"], ["d"], name="cs2")),
                                  inits=(W, i64("a", [], [1])), inputs=(X, IDS)),
    "cast_computed_float_to_bool": model(then(node("Cast", ["x"], ["c"], name="cast",
                                                   attrs=int_attr("to", 9)))),
    "gather_elements_computed_indices": model(then(node("GatherElements", ["t", "ids"], ["c"], name="ge")),
                                              inits=(W, i64("t", [2, 4], [0, 1, 2, 3, 4, 5, 6, 7])),
                                              inputs=(X, IDS)),
    "integer_div_on_device": model([node("Div", ["ids", "ids"], ["q"], name="div"),
                                    node("Cast", ["q"], ["f"], name="cast", attrs=int_attr("to", 1)),
                                    node("Add", ["x", "f"], ["s"], name="add"),
                                    node("MatMul", ["s", "w"], ["y"], name="mm")],
                                   inputs=(X, IDS)),
    # SplitToSequence's sequence: read only by SequenceAt, at a position
    # inside it.
    "sequence_read_as_a_tensor": model([node("SplitToSequence", ["x"], ["s"], name="sp",
                                             attrs=int_attr("axis", 1)),
                                        node("MatMul", ["s", "w"], ["y"], name="mm")]),
    "sequence_position_out_of_range": model([node("SplitToSequence", ["x"], ["s"], name="sp",
                                                  attrs=int_attr("axis", 1)),
                                             node("SequenceAt", ["s", "p"], ["e"], name="at"),
                                             MATMUL], inits=(W, i64("p", [], [4]))),
    # A declared dimension of 2^32 split into pieces of one: refused, not
    # four billion slices (found by fuzz-onnx-proto).
    "sequence_of_billions": model([node("SplitToSequence", ["x"], ["s"], name="sp",
                                        attrs=int_attr("axis", 1)), MATMUL],
                                  inputs=('input { name: "x" type { tensor_type { elem_type: 1 shape { dim { dim_value: 2 } dim { dim_value: 4294967296 } } } } }',)),
    # ONNX's Attention exists from opset 23; 4-D inputs only.
    "attention_below_opset_23": model([node("Attention", ["x", "x", "x"], ["y"], name="att")]),
    # So does RMSNormalization: each row of the operator table says since
    # when, and checkNode refuses a node newer than the model's opset.
    "rms_norm_below_opset_23": model([node("RMSNormalization", ["x", "w"], ["y"], name="rms")]),
    "attention_2d": model([node("Attention", ["x", "x", "x"], ["y"], name="att")],
                          opset="opset_import { version: 23 }"),
    # Not protobuf at all.
    "garbage": None,
}


def encode(text, dst):
    out = subprocess.run(["protoc", "--encode=onnx.ModelProto", "-I", PROTO, "onnx.proto"],
                         input=text.encode(), capture_output=True)
    if out.returncode:
        sys.exit(f"protoc could not encode:\n{text}\n{out.stderr.decode()}")
    with open(dst, "wb") as f:
        f.write(out.stdout)


def run(loomc, work):
    os.makedirs(work, exist_ok=True)
    with open(os.path.join(work, "w.bin"), "wb") as f:
        f.write(b"\0" * 48)
    for link, target in (("passwd.bin", "/etc/passwd"), ("linked", "/etc")):
        path = os.path.join(work, link)
        if not os.path.lexists(path):
            os.symlink(target, path)
    os.makedirs(os.path.join(work, "adir"), exist_ok=True)
    bad = 0
    for name, text in CASES.items():
        path = os.path.join(work, name + ".onnx")
        if text is None:
            with open(path, "wb") as f:
                f.write(b"\x0a\xff\xff\xff\xff\x0f not a model")
        else:
            encode(text, path)
        try:
            p = subprocess.run([loomc, path, "--compile-to=import", "-o", os.devnull],
                               capture_output=True, timeout=60)
        except subprocess.TimeoutExpired:
            print(f"{name}: FAIL: hung")
            bad += 1
            continue
        err = p.stderr.decode(errors="replace").strip().splitlines()
        line = next((l for l in err if "error" in l), "")
        if p.returncode != 1 or not line:
            print(f"{name}: FAIL: exit {p.returncode}: {' | '.join(err[-3:])}")
            bad += 1
        else:
            print(f"{name}: {line}")
    print(f"{len(CASES) - bad} of {len(CASES)} malformed models refused cleanly")
    return 1 if bad else 0


# A language model (the binary trains on tokens): tokens [1, 4] -> an
# embedding table [8, 4] -> a head [4, 8] -> logits [1, 4, 8]; its table is
# named `table`.
def lm(table):
    tok = 'input { name: "t" type { tensor_type { elem_type: 7 shape { dim { dim_value: 1 } dim { dim_value: 4 } } } } }'
    out = 'output { name: "y" type { tensor_type { elem_type: 1 shape { dim { dim_value: 1 } dim { dim_value: 4 } dim { dim_value: 8 } } } } }'
    emb = f'initializer {{ name: "{table}" dims: 8 dims: 4 data_type: 1 ' + \
        " ".join(f"float_data: {i * 0.01:.2f}" for i in range(32)) + " }"
    head = 'initializer { name: "head" dims: 4 dims: 8 data_type: 1 ' + \
        " ".join(f"float_data: {i * -0.01:.2f}" for i in range(32)) + " }"
    nodes = [f'node {{ input: "{table}" input: "t" output: "e" name: "emb" op_type: "Gather" }}',
             'node { input: "e" input: "head" output: "y" name: "mm" op_type: "MatMul" }']
    return model(nodes=nodes, inits=(emb, head), inputs=(tok,), outputs=(out,))


INJECTION_MODELS = {
    # An initializer whose name closes the string literal it is written
    # into and calls system(); and one with a newline and a backslash.
    "name_injection": lm(INJECTED),
    "name_newline": lm("a\\nb?\\\\"),
}

if __name__ == "__main__":
    if sys.argv[1] == "run":
        sys.exit(run(sys.argv[2], sys.argv[3]))
    if sys.argv[1] == "seeds":
        os.makedirs(sys.argv[2], exist_ok=True)
        for name, text in list(CASES.items()) + list(INJECTION_MODELS.items()) + [("base", model()), ("lm", lm("table"))]:
            if text is not None:
                encode(text, os.path.join(sys.argv[2], name + ".onnx"))
        sys.exit(0)
    if sys.argv[1] == "model":
        encode(INJECTION_MODELS[sys.argv[2]], sys.argv[3])
        sys.exit(0)
    sys.exit(__doc__)
