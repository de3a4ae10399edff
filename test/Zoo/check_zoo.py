#!/usr/bin/env python3
"""Checks the model zoo (make_zoo.py's exports): each model is compiled by
loomc for the CPU, trained by its binary for the recorded number of steps on
the recorded tokens, and its per-step losses compared with PyTorch's
(fp32 AdamW on the CPU) to an absolute 1e-5. Standard library only (CI has
no transformers).

A model exported with dropout (its JSON has "dropout") is compared with
--dropout=off as above, then compiled with dropout on and trained 50 steps
once per seed (--seed 0..SEEDS-1), as PyTorch's runs with SEEDS seeds of
its generator are. Two statistics must agree:
  * the mean loss of a run (one sample per seed): the two means within 3
    standard errors of their difference (Welch);
  * the spread the masks cause: at each step the standard deviation of the
    loss across seeds, averaged over the steps; Loom's within a factor 1.33
    of PyTorch's (8 seeds estimate a deviation to about 25% at one step,
    better over 50). Without dropout it is 0, so this one would catch
    dropout ignored, and a mask of the wrong ratio moves it.

Exports whose graph optimizer folded arithmetic on parameters into new
initializers (FOLDED below: OPT's and Gemma 2's default exports) describe
other trainable tensors than the PyTorch module's, so PyTorch's losses are
not theirs after the first update. For them: loomc must warn about the
folding; the first loss (the forward, before any update) must match
PyTorch's to 1e-5; every loss must be finite and within the deviation the
folding was measured to cause; and where the folding is a shift that Adam
cannot see (Gemma's 1 + w: same gradient, same moments) the export must
train exactly as its optimize=False twin when weight decay (the one term
that sees the shift) is 0. docs/onnx.md records the choice.
    check_zoo.py --bin BIN_DIR --zoo ZOO_DIR --tmp TMP [NAME ...]
Prints one line per model and exits non-zero if any fails.
"""
import argparse
import array
import ast
import glob
import json
import math
import os
import re
import struct
import subprocess
import sys

TOL = 1e-5
GRAD_TOL, ZERO_REL = 1e-5, 1e-6  # check_grads

# name: (what the exporter folded, the bound on the loss deviation from
# PyTorch over the steps, the optimize=False twin that must train
# identically with weight decay 0 (or None), what loomc's warning says,
# and the bound on the step-1 gradients of the tensors both sides have).
# Gemma's shift only changes what weight decay (lr 1e-3 x 0.01) removes:
# it stays within 1e-5 (6e-6 measured). Helium's RMS norms lose their
# epsilon 1e-8 (the exporter rewrites x + c as x for |c| <= 1e-8): 2.5e-5
# on the gradients. Mamba's A = -exp(A_log) is folded to a tensor of its
# own, so Adam moves A instead of A_log. A ResNet's batch norms are
# folded into its convolutions: what PyTorch trains is not in the file. (A
# fresh GPT-2's zero biases, which the exporter removes as x + 0, loomc
# adds back from the FX lines: gpt2-fresh trains exactly.) The deviations
# were measured on 2026-11-29 and bounded with room; the exact exports
# are their optimize=False twins (NAME-raw) or trained weights (the zoo's
# perturbed ones).
FOLDED = {
    "gemma2": ("1 + weight of every RMSNorm", TOL, "gemma2-raw",
               "computed by the exporter's optimizer", GRAD_TOL),
    "gemma2-sdpa": ("1 + weight of every RMSNorm", TOL, "gemma2-raw",
                    "computed by the exporter's optimizer", GRAD_TOL),
    "helium": ("RMSNorm's epsilon 1e-8, removed", 1e-4, None, "no epsilon added", 1e-4),
    "helium-sdpa": ("RMSNorm's epsilon 1e-8, removed", 1e-4, None, "no epsilon added", 1e-4),
    "helium-fresh": ("RMSNorm's epsilon 1e-8, removed", 1e-4, None, "no epsilon added", 1e-4),
    "mamba": ("A = -exp(A_log) of every layer", 1e-4, None,
              "computed by the exporter's optimizer", GRAD_TOL),
    # Its gradients are not compared: the folded convolutions, and the
    # batch-norm weights the exporter left in place with new roles, are
    # not PyTorch's tensors (resnet-raw is compared).
    "resnet": ("batch norms, into the convolutions", 1e-2, None, "are not in the file", None),
}


# Step-1 gradients: each against PyTorch's autograd in fp32 (make_zoo.py's
# reference, transformed as the initializer holds its parameter), relative
# to the reference's norm, within GRAD_TOL. Parameters whose gradient is
# zero in theory are named here, not hidden by a tolerance: a key bias
# adds q.b_k to every score of a query, which the softmax ignores, so its
# gradient is rounding noise on both sides (1e-10 of the largest tensor's).
# For them both sides must stay below ZERO_REL of the largest gradient; a
# tensor listed here whose float64 gradient is not that small, or one not
# listed whose float64 gradient is, fails the check.
ZERO = [
    r"\.attention\.self\.key\.bias$",   # BERT, RoBERTa
    r"\.attention\.k_lin\.bias$",        # DistilBERT
    r"\.attention\.k_proj\.bias$",       # ViT
    r"decoder\.layers\.\d+\.self_attn\.k_proj\.bias$",  # BART (Qwen 2's and Starcoder2's
]                                        # are rotated: not zero)


def read_st(path):
    """A safetensors file's float32 tensors: name -> (shape, array('f'))."""
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    header.pop("__metadata__", None)
    out = {}
    for name, e in header.items():
        if e["dtype"] != "F32":
            continue
        b, end = e["data_offsets"]
        out[name] = (e["shape"], array.array("f", data[8 + n + b:8 + n + end]))
    return out


def read_npy_rows(path, rows):
    """The first `rows` rows of a .npy file: (dtype descr, shape, bytes)."""
    with open(path, "rb") as f:
        data = f.read()
    hlen = struct.unpack("<H", data[8:10])[0]
    h = ast.literal_eval(data[10:10 + hlen].decode())
    shape = [rows] + list(h["shape"][1:])
    itemsize = int(h["descr"][2:])
    count = math.prod(shape)
    return h["descr"], shape, data[10 + hlen:10 + hlen + count * itemsize]


def write_inputs(path, tensors):
    """A safetensors file of (dtype, shape, bytes) tensors (loom-run's inputs)."""
    header, off, blobs = {}, 0, []
    for name, (dtype, shape, raw) in tensors.items():
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [off, off + len(raw)]}
        off += len(raw)
        blobs.append(raw)
    h = json.dumps(header).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))


def norm(xs):
    return math.sqrt(math.fsum(x * x for x in xs))


def reference(grads, where, size):
    """The part of a parameter's reference gradient an initializer holds."""
    shape, data = grads[where[0]]
    if where[1] == "transposed":
        r, c = shape
        data = [data[i * c + j] for j in range(c) for i in range(r)]
    return data[where[2]:where[2] + size]


def check_grads(a, name, ref, frozen):
    """Step-1 gradients of the export against the reference: a line."""
    tag = f"{name + ' grads':16}"
    mlir, out = (os.path.join(a.tmp, name + x) for x in (".ad.mlir", ".grads.st"))
    rc, err = run(compile_cmd(a, name, ref, frozen=frozen) +
                  ["--dropout=off", "--compile-to=autodiff", "-o", mlir])
    if rc:
        return f"{tag} FAIL compile: {err}"
    if ref.get("task") == "classify":
        inputs = os.path.join(a.tmp, name + ".inputs.st")
        px = read_npy_rows(os.path.join(a.zoo, f"{name}.pixel_values.npy"), ref["batch"])
        lab = read_npy_rows(os.path.join(a.zoo, f"{name}.labels.npy"), ref["batch"])
        write_inputs(inputs, {"arg0": ("F32",) + px[1:], "arg1": ("I64",) + lab[1:]})
        data = [f"--inputs={inputs}"]
    else:
        data = ["--data", os.path.join(a.zoo, "tokens.bin")]
    rc, err = run([os.path.join(a.bin, "loom-run"), mlir, "--function=forward_backward", *data,
                   f"--outputs={out}"])
    if rc:
        return f"{tag} FAIL loom-run: {err}"
    got = read_st(out)
    g = ref["grads"]
    grads = read_st(os.path.join(a.zoo, g["file"]))
    where, norms = g["where"], g["norm_f64"]
    top = max(norms.values())
    bound = FOLDED[name][4] if name in FOLDED else GRAD_TOL
    worst, zeros, folded, bad, covered = 0.0, 0, 0, [], set()
    for key, (shape, data) in got.items():
        if not key.startswith("grad."):
            continue
        n = key[5:]
        w = where.get(n)
        if w is None or w[-1] == "folded":
            if name in FOLDED:  # a tensor the exporter computed from parameters
                folded += 1
                continue
            bad.append(f"{n}: no PyTorch parameter holds it")
            continue
        covered.add(w[0])
        rows = shape[0] if w[-1] == "sum0" else 1
        size = len(data) // rows
        mine = [math.fsum(data[r * size + i] for r in range(rows)) for i in range(size)]
        want = reference(grads, w, size)
        listed = any(re.search(z, n) or re.search(z, w[0]) for z in ZERO)
        if listed or norms[n] <= ZERO_REL * top:
            if not listed:
                bad.append(f"{n}: its gradient is {norms[n] / top:.0e} of the largest in float64; "
                           "zero in theory? name it in ZERO")
            elif norms[n] > ZERO_REL * top or norm(mine) > ZERO_REL * top:
                bad.append(f"{n}: listed as zero in theory, but |torch64| {norms[n]:.1e} and "
                           f"|loom| {norm(mine):.1e} against {top:.1e}")
            zeros += 1
            continue
        rel = norm([x - y for x, y in zip(mine, want)]) / norm(want)
        worst = max(worst, rel)
        if rel > bound:
            bad.append(f"{n}: {rel:.1e} from autograd")
    # Every parameter PyTorch trains has its gradient (a tied name counts
    # as its tensor; folded exports train other tensors instead).
    seen = {bytes(grads[p][1]) for p in covered if p in grads}
    missing = [p for p, (_, d) in grads.items()
               if p not in covered and bytes(d) not in seen and norm(d) > 0]
    if missing and name not in FOLDED:
        bad.append(f"no gradient for {', '.join(missing[:3])}")
    line = (f"{tag} {'ok  ' if not bad else 'FAIL'} {len(covered)} parameters, worst "
            f"{worst:.1e} of the norm (bound {bound:.0e}), {zeros} zero in theory"
            + (f", {folded} folded not compared" if folded else ""))
    return line + "".join(f"\n    {b}" for b in bad[:6])


def run(cmd, full=False):
    p = subprocess.run(cmd, capture_output=True, text=True)
    return p.returncode, p.stderr if full else (p.stderr.strip().splitlines() or [""])[-1]


def compile_cmd(a, name, ref, weight_decay=None, frozen=True):
    wd = ref["optimizer"]["weight_decay"] if weight_decay is None else weight_decay
    cmd = [os.path.join(a.bin, "loomc"), os.path.join(a.zoo, f"{name}.onnx"),
           "--lr", str(ref["optimizer"]["lr"]), "--beta1", str(ref["optimizer"]["betas"][0]),
           "--beta2", str(ref["optimizer"]["betas"][1]), "--eps", str(ref["optimizer"]["eps"]),
           "--weight-decay", str(wd)]
    if ref["frozen"] and frozen:
        cmd.append("--frozen=" + ",".join(ref["frozen"]))
    return cmd


def check_folded(a, name, ref):
    what, bound, twin, warning, _ = FOLDED[name]
    exe = os.path.join(a.tmp, name)
    # No --frozen: make_zoo.py lists every initializer that holds no
    # parameter's values, the folded ones included; loomc itself leaves the
    # buffers out (the exporter's metadata) and trains the folded tensors.
    rc, err = run(compile_cmd(a, name, ref, frozen=False) + ["-o", exe], full=True)
    if rc:
        return f"{name:16} FAIL compile: {err.strip().splitlines()[-1:]}"
    if warning not in err:
        return f"{name:16} FAIL loomc did not warn that the exporter folded {what}"
    got, err = train(a, exe, ref["steps"], ref=ref)
    if err or len(got) != len(ref["losses"]) or not all(math.isfinite(g) for g in got):
        return f"{name:16} FAIL run: {err or got}"
    first = abs(got[0] - ref["losses"][0])
    diff = max(abs(g - w) for g, w in zip(got, ref["losses"]))
    ok = first <= TOL and diff <= bound
    line = (f"{name:16} {'ok  ' if ok else 'FAIL'} folded ({what}): first loss "
            f"{first:.1e} from torch32 (bound 1e-5), max {diff:.1e} (bound {bound:.0e})")
    if twin:
        # Weight decay 0: Adam sees the same gradients in both files.
        runs = []
        for n in (name, twin):
            r = json.load(open(os.path.join(a.zoo, f"{n}.json")))
            e = os.path.join(a.tmp, n + "-wd0")
            rc, err = run(compile_cmd(a, n, r, weight_decay=0, frozen=n == twin) + ["-o", e])
            losses, err = train(a, e, ref["steps"], ref=r) if not rc else (None, err)
            if err:
                return line + f"\n{name + ' wd 0':16} FAIL {n}: {err}"
            runs.append(losses)
        d = max(abs(x - y) for x, y in zip(*runs))
        line += (f"\n{name + ' wd 0':16} {'ok  ' if d <= TOL else 'FAIL'} as {twin} to "
                 f"{d:.1e} (bound 1e-5)")
    if FOLDED[name][4] is None:
        return line
    return line + "\n" + check_grads(a, name, ref, frozen=False)


def check(a, name):
    ref = json.load(open(os.path.join(a.zoo, f"{name}.json")))
    if name in FOLDED:
        return check_folded(a, name, ref)
    exe = os.path.join(a.tmp, name)
    cmd = compile_cmd(a, name, ref)
    drop = "dropout" in ref
    rc, err = run(cmd + ["-o", exe] + (["--dropout=off"] if drop else []))
    if rc:
        return f"{name:16} FAIL compile: {err}"
    got, err = train(a, exe, ref["steps"], ref=ref)
    if err:
        return f"{name:16} FAIL run: {err}"
    want = ref["losses"]
    if len(got) != len(want) or any(g is None for g in got):
        return f"{name:16} FAIL losses {got}"
    # Each step within 1e-5 of PyTorch's float32 loss, or (where float32
    # arithmetic alone moves PyTorch further: Adam amplifies rounding) within
    # twice the distance of PyTorch float32 from PyTorch float64.
    f64 = ref.get("losses_f64", want)
    bounds = [max(TOL, 2 * abs(w - d)) for w, d in zip(want, f64)]
    worst = max(abs(g - w) / b for g, w, b in zip(got, want, bounds))
    diff = max(abs(g - w) for g, w in zip(got, want))
    verdict = "ok  " if worst <= 1 and all(math.isfinite(g) for g in got) else "FAIL"
    line = (f"{name:16} {verdict} {len(got)} steps  loss {got[0]:.5f} -> {got[-1]:.5f}  "
            f"max |loom - torch32| {diff:.1e}, {worst:.2f} of the bound "
            f"(max(1e-5, 2 |torch32 - torch64|))")
    line += "\n" + check_grads(a, name, ref, frozen=True)
    return line + ("\n" + dropout_stats(a, name, ref, cmd, exe) if drop else "")


def train(a, exe, steps, seed=0, ref=None):
    """The binary's per-step losses (None for a failed run) and its error;
    a classifier (ref's task) reads its .npy inputs."""
    log = exe + ".jsonl"
    if os.path.exists(log):
        os.remove(log)
    if ref is not None and ref.get("task") == "classify":
        data = [x for i in ref["inputs"] for x in
                ("--input", f"{i}={os.path.join(a.zoo, ref['name'] + '.' + i + '.npy')}")]
    else:
        data = ["--data", os.path.join(a.zoo, "tokens.bin")]
    rc, err = run([exe, *data, "--steps", str(steps), "--seed", str(seed), "--log-json", log])
    if rc:
        return None, err
    return [json.loads(line)["loss"] for line in open(log)], ""


def mean_sd(xs):
    m = sum(xs) / len(xs)
    return m, math.sqrt(sum((x - m) ** 2 for x in xs) / (len(xs) - 1))


def dropout_stats(a, name, ref, cmd, exe):
    d = ref["dropout"]
    tag = f"{name + ' p=' + str(d['p']):16}"
    rc, err = run(cmd + ["-o", exe + "-on"])
    if rc:
        return f"{tag} FAIL compile with dropout: {err}"
    runs = []
    for seed in range(d["seeds"]):
        losses, err = train(a, exe + "-on", d["steps"], seed)
        if err or len(losses) != d["steps"] or not all(math.isfinite(x) for x in losses):
            return f"{tag} FAIL run with --seed {seed}: {err or losses}"
        runs.append(losses)
    mt, st = mean_sd([sum(r) / len(r) for r in ref["dropout_runs"]])
    ml, sl = mean_sd([sum(r) / len(r) for r in runs])
    se = math.sqrt(st ** 2 / len(ref["dropout_runs"]) + sl ** 2 / len(runs))
    z = abs(ml - mt) / se
    spread = lambda rs: sum(mean_sd(col)[1] for col in zip(*rs)) / len(rs[0])
    sd_t, sd_l = spread(ref["dropout_runs"]), spread(runs)
    ok = z <= 3 and 0.75 <= sd_l / sd_t <= 1.33
    return (f"{tag} {'ok  ' if ok else 'FAIL'} {d['steps']} steps x {len(runs)} seeds  mean loss "
            f"loom {ml:.4f} torch {mt:.4f}: {z:.1f} standard errors apart (bound 3); spread "
            f"across seeds loom {sd_l:.4f} torch {sd_t:.4f}: ratio {sd_l / sd_t:.2f} "
            f"(bounds 0.75-1.33)")


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--bin", required=True)
    p.add_argument("--zoo", required=True)
    p.add_argument("--tmp", required=True)
    p.add_argument("names", nargs="*")
    a = p.parse_args()
    os.makedirs(a.tmp, exist_ok=True)
    names = a.names or sorted(os.path.basename(f)[:-5]
                              for f in glob.glob(os.path.join(a.zoo, "*.json")))
    lines = [check(a, n) for n in names]
    print("\n".join(lines))
    sys.exit(1 if any(" FAIL " in l for l in lines) else 0)


if __name__ == "__main__":
    main()
