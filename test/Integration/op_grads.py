#!/usr/bin/env python3
"""Every op's gradient rule against central finite differences in float64.

For each differentiable op, a one-op loss L = sum(op(params...) * R) (R a
fixed random tensor, so no gradient is trivially zero) is written as loom IR,
differentiated by loom-autodiff (loomc --compile-to=autodiff) and executed in
fp32 by loom-run; the reference is the central difference
(L(p + h e_i) - L(p - h e_i)) / 2h of the same op written with PyTorch in
float64 (h = 1e-6), at the parameters loom-run drew.

Tolerance: relative L2 error <= 1e-4 per gradient, and for the loss itself
|loss - ref| / max(|ref|, 1) <= 1e-4 (fp32 arithmetic against a float64
reference whose own error is ~1e-9).
"""
import os
import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(__file__))
from loomtest import parse_args, read_st, rel, tool, write_st  # noqa: E402


def ty(shape, elt="f32"):
    return "tensor<" + "".join(f"{d}x" for d in shape) + elt + ">"


# name, params {name: (shape, init)}, args {name: (shape, dtype, high)},
# result shape, MLIR body (uses %<param> and %<arg>, defines %y), torch fn.
N = "#loom.init<normal(0.0, 1.0)>"
POS = "#loom.init<uniform(0.5, 2.0)>"
E3 = [2, 3]


def unary(name, torch_fn, init=N):
    return (name, {"a": (E3, init)}, {}, E3,
            f"%y = loom.{name} %a : {ty(E3)}", lambda p, a: torch_fn(p["a"]))


def binary(name, torch_fn, init_b=N):
    # lhs [2, 3], rhs broadcast [3]: the rule must also undo broadcasting.
    return (name, {"a": ([2, 3], N if name != "pow" else POS), "b": ([3], init_b)}, {}, [2, 3],
            f"%y = loom.{name} %a, %b : {ty([2, 3])}, {ty([3])} -> {ty([2, 3])}",
            lambda p, a: torch_fn(p["a"], p["b"]))


M64 = (1 << 64) - 1


def splitmix64(x):
    x = (x + 0x9E3779B97F4A7C15) & M64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & M64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & M64
    return x ^ (x >> 31)


def dropout_mask(shape, ratio, key_op, seed=3, step=0):
    """loomrt_dropout's mask as runtime/include/loomrt/loomrt.h specifies it
    (loomrt_random_key of loom-run's --seed, step 0 and the op's key; one
    splitmix64 draw per element), written again here from that text."""
    key = splitmix64((splitmix64((splitmix64(seed ^ 0x64726F706F7574) + step) & M64) + key_op) & M64)
    n = 1
    for d in shape:
        n *= d
    keep = [((splitmix64(key ^ splitmix64(i)) >> 11) + 1) / 2.0 ** 53 > ratio for i in range(n)]
    return torch.tensor(keep, dtype=torch.float64).reshape(shape)


def attention_ref(q, k, v, causal, scale):
    s = q @ k.transpose(-2, -1) * scale
    if causal:
        t = q.shape[-2]
        s = s.masked_fill(~torch.ones(t, t, dtype=torch.bool).tril(), float("-inf"))
    return torch.softmax(s, -1) @ v


OPS = [
    binary("add", torch.add), binary("sub", torch.sub), binary("mul", torch.mul),
    binary("div", torch.div, POS), binary("pow", torch.pow),
    unary("neg", torch.neg), unary("exp", torch.exp), unary("log", torch.log, POS),
    unary("sqrt", torch.sqrt, POS), unary("rsqrt", torch.rsqrt, POS),
    unary("tanh", torch.tanh), unary("sigmoid", torch.sigmoid), unary("erf", torch.erf),
    unary("sin", torch.sin), unary("cos", torch.cos), unary("relu", torch.relu),
    unary("silu", F.silu), unary("gelu", F.gelu),
    ("gelu_tanh", {"a": (E3, N)}, {}, E3, f"%y = loom.gelu %a approximate : {ty(E3)}",
     lambda p, a: F.gelu(p["a"], approximate="tanh")),
    # The mask drawn again in the backward must be the forward's: the
    # reference applies the mask loomrt.h specifies to both.
    ("dropout", {"a": ([4, 8], N)}, {}, [4, 8], f"%y = loom.dropout %a ratio 0.25 key 5 : {ty([4, 8])}",
     lambda p, a: p["a"] * dropout_mask([4, 8], 0.25, 5) / 0.75),
    ("select", {"a": ([2, 3], N), "b": ([], N)}, {}, [2, 3],
     f"%c = arith.constant dense<[[true, false, true], [false, true, true]]> : {ty([2, 3], 'i1')}\n"
     f"  %y = loom.select %c, %a, %b : {ty([2, 3], 'i1')}, {ty([2, 3])}, {ty([])} -> {ty([2, 3])}",
     lambda p, a: torch.where(torch.tensor([[True, False, True], [False, True, True]]), p["a"], p["b"])),
    ("matmul_nn", {"a": ([2, 3, 4], N), "b": ([4, 5], N)}, {}, [2, 3, 5],
     f"%y = loom.matmul %a, %b : {ty([2, 3, 4])}, {ty([4, 5])} -> {ty([2, 3, 5])}",
     lambda p, a: p["a"] @ p["b"]),
    ("matmul_nt", {"a": ([2, 3, 4], N), "b": ([5, 4], N)}, {}, [2, 3, 5],
     f"%y = loom.matmul %a, %b transpose_rhs : {ty([2, 3, 4])}, {ty([5, 4])} -> {ty([2, 3, 5])}",
     lambda p, a: p["a"] @ p["b"].T),
    ("matmul_tn", {"a": ([4, 3], N), "b": ([4, 5], N)}, {}, [3, 5],
     f"%y = loom.matmul %a, %b transpose_lhs : {ty([4, 3])}, {ty([4, 5])} -> {ty([3, 5])}",
     lambda p, a: p["a"].T @ p["b"]),
    ("matmul_tt_batched", {"a": ([2, 4, 3], N), "b": ([2, 5, 4], N)}, {}, [2, 3, 5],
     f"%y = loom.matmul %a, %b transpose_lhs transpose_rhs : {ty([2, 4, 3])}, {ty([2, 5, 4])} -> {ty([2, 3, 5])}",
     lambda p, a: p["a"].transpose(-1, -2) @ p["b"].transpose(-1, -2)),
    ("layer_norm", {"x": ([3, 6], N), "w": ([6], N), "b": ([6], N)}, {}, [3, 6],
     f"%y = loom.layer_norm %x, %w, %b eps 1.0e-05 : {ty([3, 6])}, {ty([6])}, {ty([6])} -> {ty([3, 6])}",
     lambda p, a: F.layer_norm(p["x"], (6,), p["w"], p["b"], 1e-5)),
    ("rms_norm", {"x": ([3, 6], N), "w": ([6], N)}, {}, [3, 6],
     f"%y = loom.rms_norm %x, %w eps 1.0e-06 : {ty([3, 6])}, {ty([6])} -> {ty([3, 6])}",
     lambda p, a: p["x"] * torch.rsqrt((p["x"] ** 2).mean(-1, keepdim=True) + 1e-6) * p["w"]),
    ("softmax", {"a": ([3, 5], N)}, {}, [3, 5], f"%y = loom.softmax %a dim 1 : {ty([3, 5])}",
     lambda p, a: torch.softmax(p["a"], -1)),
    ("log_softmax", {"a": ([3, 5], N)}, {}, [3, 5], f"%y = loom.softmax %a dim -1 log : {ty([3, 5])}",
     lambda p, a: torch.log_softmax(p["a"], -1)),
    ("embedding", {"t": ([7, 3], N)}, {"i": ([2, 4], "i64", 7)}, [2, 4, 3],
     f"%y = loom.embedding %t[%i] : {ty([7, 3])}, {ty([2, 4], 'i64')} -> {ty([2, 4, 3])}",
     lambda p, a: p["t"][a["i"]]),
    ("attention", {"q": ([1, 2, 4, 3], N), "k": ([1, 2, 4, 3], N), "v": ([1, 2, 4, 3], N)}, {},
     [1, 2, 4, 3],
     f"%y = loom.attention %q, %k, %v causal scale 0.5 : {ty([1, 2, 4, 3])}, {ty([1, 2, 4, 3])}, {ty([1, 2, 4, 3])} -> {ty([1, 2, 4, 3])}",
     lambda p, a: attention_ref(p["q"], p["k"], p["v"], True, 0.5)),
    ("cross_entropy", {"l": ([2, 3, 5], N)}, {"t": ([2, 3], "i64", 5)}, [],
     f"%y = loom.cross_entropy %l, %t : {ty([2, 3, 5])}, {ty([2, 3], 'i64')} -> {ty([])}",
     lambda p, a: F.cross_entropy(p["l"].reshape(6, 5), a["t"].reshape(6))),
    ("lerp", {"a": ([3, 5], N), "b": ([3, 5], N)}, {}, [3, 5],
     f"%y = loom.lerp %a, %b weight 3.0e-01 : {ty([3, 5])}",
     lambda p, a: torch.lerp(p["a"], p["b"], 0.3)),
    ("lerp_high", {"a": ([3, 5], N), "b": ([3, 5], N)}, {}, [3, 5],
     f"%y = loom.lerp %a, %b weight 9.0e-01 : {ty([3, 5])}",
     lambda p, a: torch.lerp(p["a"], p["b"], 0.9)),
    ("cumsum", {"a": ([3, 5], N)}, {}, [3, 5], f"%y = loom.cumsum %a dim 1 : {ty([3, 5])}",
     lambda p, a: torch.cumsum(p["a"], 1)),
    ("cumsum_exclusive_reverse", {"a": ([3, 5], N)}, {}, [3, 5],
     f"%y = loom.cumsum %a dim 0 exclusive reverse : {ty([3, 5])}",
     lambda p, a: torch.flip(torch.cumsum(torch.flip(p["a"], [0]), 0), [0]) - p["a"]),
    # RoBERTa's position ids, computed on the device from integer inputs
    # (pad id 1): cumsum(ids != 1) * (ids != 1) + 1, then the lookup.
    ("position_ids", {"t": ([7, 3], N)}, {"i": ([2, 4], "i64", 4)}, [2, 4, 3],
     f"%c1 = arith.constant dense<1> : {ty([], 'i64')}\n"
     f"  %m = loom.ne %i, %c1 : {ty([2, 4], 'i64')}, {ty([], 'i64')} -> {ty([2, 4], 'i64')}\n"
     f"  %s = loom.cumsum %m dim 1 : {ty([2, 4], 'i64')}\n"
     f"  %k = loom.mul %s, %m : {ty([2, 4], 'i64')}, {ty([2, 4], 'i64')} -> {ty([2, 4], 'i64')}\n"
     f"  %q = loom.add %k, %c1 : {ty([2, 4], 'i64')}, {ty([], 'i64')} -> {ty([2, 4], 'i64')}\n"
     f"  %y = loom.embedding %t[%q] : {ty([7, 3])}, {ty([2, 4], 'i64')} -> {ty([2, 4, 3])}",
     lambda p, a: p["t"][torch.cumsum((a["i"] != 1).long(), 1) * (a["i"] != 1).long() + 1]),
    ("reshape", {"a": ([2, 6], N)}, {}, [3, 4], f"%y = loom.reshape %a : {ty([2, 6])} to {ty([3, 4])}",
     lambda p, a: p["a"].reshape(3, 4)),
    ("transpose", {"a": ([2, 3, 4], N)}, {}, [4, 2, 3],
     f"%y = loom.transpose %a [2, 0, 1] : {ty([2, 3, 4])} to {ty([4, 2, 3])}",
     lambda p, a: p["a"].permute(2, 0, 1)),
    ("slice", {"a": ([4, 6], N)}, {}, [2, 3],
     f"%y = loom.slice %a [1, 2] [3, 5] [1, 1] : {ty([4, 6])} to {ty([2, 3])}",
     lambda p, a: p["a"][1:3, 2:5]),
    # Strided slices (GPT-J's rotate_every_two: x[..., ::2], x[..., 1::2]),
    # one where the last group runs past the end (7 = 2*3 + 1).
    ("slice_strided", {"a": ([3, 8], N)}, {}, [3, 4],
     f"%y = loom.slice %a [0, 1] [3, 8] [1, 2] : {ty([3, 8])} to {ty([3, 4])}",
     lambda p, a: p["a"][:, 1::2]),
    ("slice_strided_tail", {"a": ([7, 4], N)}, {}, [2, 2],
     f"%y = loom.slice %a [1, 0] [7, 4] [3, 3] : {ty([7, 4])} to {ty([2, 2])}",
     lambda p, a: p["a"][1::3, ::3]),
    ("concat", {"a": ([2, 3], N), "b": ([2, 2], N)}, {}, [2, 5],
     f"%y = loom.concat %a, %b dim -1 : {ty([2, 3])}, {ty([2, 2])} -> {ty([2, 5])}",
     lambda p, a: torch.cat([p["a"], p["b"]], -1)),
    ("broadcast_to", {"a": ([1, 3], N)}, {}, [2, 4, 3],
     f"%y = loom.broadcast_to %a : {ty([1, 3])} to {ty([2, 4, 3])}",
     lambda p, a: p["a"].expand(2, 4, 3)),
    ("reduce_sum", {"a": ([2, 3, 4], N)}, {}, [3],
     f"%y = loom.reduce sum %a [0, 2] : {ty([2, 3, 4])} to {ty([3])}",
     lambda p, a: p["a"].sum((0, 2))),
    ("reduce_mean", {"a": ([2, 3, 4], N)}, {}, [2, 1, 4],
     f"%y = loom.reduce mean %a [1] keepdim : {ty([2, 3, 4])} to {ty([2, 1, 4])}",
     lambda p, a: p["a"].mean(1, keepdim=True)),
]


def module(name, params, args, out_shape, body):
    lines = [f"loom.param @{n} : {ty(s)} init {init}" for n, (s, init) in params.items()]
    sig = [f"%{n}: {ty(s, dt)}" for n, (s, dt, hi) in args.items()] + [f"%r: {ty(out_shape)}"]
    lines.append(f"func.func @forward({', '.join(sig)}) -> tensor<f32> {{")
    for n, (s, _) in params.items():
        lines.append(f"  %{n} = loom.load @{n} : {ty(s)}")
    lines.append("  " + body)
    lines.append(f"  %z = loom.mul %y, %r : {ty(out_shape)}, {ty(out_shape)} -> {ty(out_shape)}")
    dims = ", ".join(str(d) for d in range(len(out_shape)))
    if out_shape:
        lines.append(f"  %loss = loom.reduce sum %z [{dims}] : {ty(out_shape)} to tensor<f32>")
    else:
        lines.append("  %loss = loom.reshape %z : tensor<f32> to tensor<f32>")
    lines.append("  return %loss : tensor<f32>\n}")
    return "\n".join(lines) + "\n"


def central(fn, params, name, h=1e-6):
    p = params[name]
    g = torch.zeros_like(p)
    flat = p.view(-1)
    for i in range(flat.numel()):
        old = flat[i].item()
        flat[i] = old + h
        lp = fn()
        flat[i] = old - h
        lm = fn()
        flat[i] = old
        g.view(-1)[i] = (lp - lm) / (2 * h)
    return g


def main():
    a = parse_args()
    torch.manual_seed(1)
    worst, failures = 0.0, []
    for name, params, args, out_shape, body, fn in OPS:
        src = os.path.join(a.tmp, f"{name}.mlir")
        open(src, "w").write(module(name, params, args, out_shape, body))
        grad_mlir = os.path.join(a.tmp, f"{name}.grad.mlir")
        tool(a.bin, "loomc", src, "--compile-to=autodiff", "-o", grad_mlir)
        inputs = {}
        for i, (n, (s, dt, hi)) in enumerate(args.items()):
            inputs[f"arg{i}"] = torch.randint(0, hi, s)
        inputs[f"arg{len(args)}"] = torch.randn(out_shape)
        fin, fpar, fout = (os.path.join(a.tmp, f"{name}.{k}.safetensors")
                           for k in ("in", "params", "out"))
        write_st(fin, inputs)
        tool(a.bin, "loom-run", grad_mlir, "--function=forward_backward", f"--inputs={fin}",
             "--seed=3", f"--dump-params={fpar}", f"--outputs={fout}")
        ps = {k: v.double() for k, v in read_st(fpar).items()}
        named_args = {n: inputs[f"arg{i}"] for i, n in enumerate(args)}
        r = inputs[f"arg{len(args)}"].double()
        loss = lambda: (fn(ps, named_args) * r).sum().item()
        out = read_st(fout)
        # The forward too (the loss, out0): dropout's mask must be the
        # reference's in both directions.
        want = loss()
        errs = [abs(out["out0"].double().item() - want) / max(abs(want), 1.0)]
        errs += [rel(out[f"grad.{p}"].double(), central(loss, ps, p)) for p in params]
        err = max(errs)
        worst = max(worst, err)
        print(f"{name:18} {err:.2e}")
        if err > 1e-4:
            failures.append(name)
    print(f"{len(OPS)} ops, worst relative error {worst:.2e} (bound 1e-4)")
    if failures:
        sys.exit("gradients off for: " + ", ".join(failures))


if __name__ == "__main__":
    main()
