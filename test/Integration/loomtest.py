"""Shared pieces of the numerical tests: safetensors I/O (the format, so no
package is needed), the tools' command lines, inputs for the built-in
models, and independent PyTorch implementations of those models."""
import json
import math
import os
import struct
import subprocess
import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(__file__))
from mpitest import parse_args  # noqa: E402,F401 (the tests import it from here)

DTYPES = {"F32": (torch.float32, 4), "I64": (torch.int64, 8)}


def write_st(path, tensors):
    header, blobs, offset = {}, [], 0
    for name, t in tensors.items():
        t = t.contiguous()
        kind = "F32" if t.dtype == torch.float32 else "I64"
        raw = t.numpy().tobytes()
        header[name] = {"dtype": kind, "shape": list(t.shape),
                        "data_offsets": [offset, offset + len(raw)]}
        blobs.append(raw)
        offset += len(raw)
    h = json.dumps(header).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))


def read_st(path):
    data = open(path, "rb").read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    header.pop("__metadata__", None)
    out = {}
    for name, e in header.items():
        dtype, size = DTYPES[e["dtype"]]
        b, end = e["data_offsets"]
        buf = bytearray(data[8 + n + b:8 + n + end])
        out[name] = torch.frombuffer(buf, dtype=dtype).reshape(e["shape"]).clone()
    return out


def attention(q, k, v):
    t = q.shape[-2]
    s = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    mask = torch.ones(t, t, dtype=torch.bool).tril()
    s = s.masked_fill(~mask, float("-inf"))
    return torch.softmax(s, dim=-1) @ v


def heads(x, h):
    b, t, d = x.shape
    return x.reshape(b, t, h, d // h).transpose(1, 2)


def merge(x):
    b, h, t, dh = x.shape
    return x.transpose(1, 2).reshape(b, t, h * dh)


def gpt(p, tok, tgt, cfg):
    L, D, H = cfg["layers"], cfg["d_model"], cfg["heads"]
    T = tok.shape[1]
    x = p["transformer.wte.weight"][tok] + p["transformer.wpe.weight"][:T]
    for i in range(L):
        g = lambda n: p[f"transformer.h.{i}.{n}"]
        h = F.layer_norm(x, (D,), g("ln_1.weight"), g("ln_1.bias"), 1e-5)
        qkv = h @ g("attn.c_attn.weight").T + g("attn.c_attn.bias")
        q, k, v = qkv.split(D, dim=-1)
        a = merge(attention(heads(q, H), heads(k, H), heads(v, H)))
        x = x + a @ g("attn.c_proj.weight").T + g("attn.c_proj.bias")
        h2 = F.layer_norm(x, (D,), g("ln_2.weight"), g("ln_2.bias"), 1e-5)
        m = F.gelu(h2 @ g("mlp.c_fc.weight").T + g("mlp.c_fc.bias"), approximate="tanh")
        x = x + m @ g("mlp.c_proj.weight").T + g("mlp.c_proj.bias")
    x = F.layer_norm(x, (D,), p["transformer.ln_f.weight"], p["transformer.ln_f.bias"], 1e-5)
    logits = x @ p["transformer.wte.weight"].T
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), tgt.reshape(-1))


def llama(p, tok, tgt, cfg, ffn=None):
    """The Llama reference; `ffn(i, h)` replaces layer i's MLP (a mixture of
    experts) on its normed input h [B, T, D]."""
    L, H = cfg["layers"], cfg["heads"]
    KV = cfg.get("kv_heads", 0) or H  # grouped-query attention: fewer k/v heads
    T = tok.shape[1]
    D = p["model.embed_tokens.weight"].shape[1]
    dh = D // H
    pos = torch.arange(T, dtype=torch.float64)[:, None]
    freq = 10000.0 ** (-2.0 * torch.arange(dh // 2, dtype=torch.float64) / dh)
    ang = torch.cat([pos * freq, pos * freq], dim=-1)
    dtype = p["model.embed_tokens.weight"].dtype
    cos, sin = ang.cos().to(dtype), ang.sin().to(dtype)

    def rms(x, w):
        return x * torch.rsqrt((x * x).mean(-1, keepdim=True) + 1e-6) * w

    def rope(x):
        x1, x2 = x[..., : dh // 2], x[..., dh // 2:]
        return x * cos + torch.cat([-x2, x1], dim=-1) * sin

    x = p["model.embed_tokens.weight"][tok]
    for i in range(L):
        g = lambda n: p[f"model.layers.{i}.{n}"]
        h = rms(x, g("input_layernorm.weight"))
        q = heads(h @ g("self_attn.q_proj.weight").T, H)
        k = heads(h @ g("self_attn.k_proj.weight").T, KV)
        v = heads(h @ g("self_attn.v_proj.weight").T, KV)
        # Hugging Face's repeat_kv: query head j reads key/value head j // (H / KV).
        k, v = (t.repeat_interleave(H // KV, dim=1) for t in (rope(k), v))
        x = x + merge(attention(rope(q), k, v)) @ g("self_attn.o_proj.weight").T
        h2 = rms(x, g("post_attention_layernorm.weight"))
        if ffn:
            x = x + ffn(i, h2)
            continue
        m = F.silu(h2 @ g("mlp.gate_proj.weight").T) * (h2 @ g("mlp.up_proj.weight").T)
        x = x + m @ g("mlp.down_proj.weight").T
    x = rms(x, p["model.norm.weight"])
    logits = x @ p["lm_head.weight"].T
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), tgt.reshape(-1))


def mlp(p, x, y, cfg):
    for i in range(cfg["layers"]):
        x = F.gelu(x @ p[f"layers.{i}.weight"].T + p[f"layers.{i}.bias"])
    L = cfg["layers"]
    return F.cross_entropy(x @ p[f"layers.{L}.weight"].T + p[f"layers.{L}.bias"], y)


MODELS = [
    ("mlp", "layers=2,in=8,hidden=16,classes=3,batch=4", mlp),
    ("gpt", "layers=2,d_model=16,heads=2,vocab=50,seq=8,batch=2", gpt),
    ("llama", "layers=2,d_model=16,heads=2,vocab=50,seq=8,batch=2,ffn=24", llama),
]
# Grouped-query attention (Llama 2 70B, Llama 3): 4 query heads over 2
# key/value heads.
LLAMA_GQA = ("llama", "layers=2,d_model=16,heads=4,kv_heads=2,vocab=50,seq=8,batch=2,ffn=24", llama)


def rel(a, b):
    return ((a - b).norm() / b.norm().clamp_min(1e-30)).item()


def compare_losses(name, ours, ref32, ref64, steps):
    """Prints one model's per-step loss errors against PyTorch in float32
    and float64, exits unless there are `steps` decreasing losses, and
    returns the float32 error (the bound applies to it)."""
    e32 = max(abs(o - r) / abs(r) for o, r in zip(ours, ref32))
    e64 = max(abs(o - r) / abs(r) for o, r in zip(ours, ref64))
    print(f"{name:6} loss {ours[0]:.5f} -> {ours[-1]:.5f} over {len(ours)} steps; "
          f"max rel error vs torch fp32 {e32:.1e}, vs fp64 {e64:.1e}")
    if len(ours) != steps or not ours[-1] < ours[0]:
        sys.exit(f"{name}: expected {steps} decreasing losses, got {ours}")
    return e32




def pattern_tokens(path, vocab, n):
    """A token file (uint16) of a repeating pattern below `vocab`."""
    with open(path, "wb") as f:
        f.write(b"".join(((i * 7 + i // 13) % vocab).to_bytes(2, "little") for i in range(n)))


def binary_losses(train, data, log, *flags):
    """Per-step losses of a training binary, from its --log-json `log`."""
    if os.path.exists(log):
        os.remove(log)
    subprocess.run([train, "--data", data, "--log-json", log, *flags], check=True,
                   stdout=subprocess.DEVNULL)
    return [json.loads(line)["loss"] for line in open(log)]


def spec_config(keys):
    return {k: int(v) for k, v in (kv.split("=") for kv in keys.split(","))}


def gpt_run_setup(keys, *switches):
    """The start of the multi-rank GPT tests: --bin, --tmp (and boolean
    --SWITCHES) parsed, the noisy token file written in --tmp, the
    generator's initial weights. Returns (args, config, token file, tokens,
    parameters)."""
    from mpitest import noisy_pattern
    a = parse_args(*switches)
    cfg = spec_config(keys)
    data = os.path.join(a.tmp, "tokens.bin")
    tokens = noisy_pattern(data, cfg["vocab"], 6000)
    return a, cfg, data, tokens, generator_params(a.bin, a.tmp, keys)


def generator_params(bin_dir, tmp, keys):
    """The initial weights of `loomc --model gpt:KEYS` (--seed 0), as loom-run
    draws them: the same stream as the binary's (loomrt.h)."""
    mlir = os.path.join(tmp, "model.mlir")
    tool(bin_dir, "loomc", "--model", f"gpt:{keys}", "--compile-to=optimizer", "-o", mlir)
    cfg = spec_config(keys)
    fin, fpar = (os.path.join(tmp, f) for f in ("in.safetensors", "params.safetensors"))
    shape = (cfg["batch"], cfg["seq"])
    write_st(fin, {"arg0": torch.zeros(shape, dtype=torch.int64),
                   "arg1": torch.zeros(shape, dtype=torch.int64)})
    tool(bin_dir, "loom-run", mlir, "--function=train_step", f"--inputs={fin}", "--seed=0",
         f"--dump-params={fpar}", "--steps=1")
    return read_st(fpar)


def run_binary(args, check=True):
    """Runs a training binary, its output captured; exits with its message
    when it fails and `check` is set. Returns the CompletedProcess."""
    p = subprocess.run(args, capture_output=True, text=True)
    if check and p.returncode:
        sys.exit(f"{args[0]} failed: {p.stderr.strip()}")
    return p


def tool(bin_dir, name, *args, capture=False):
    """Runs loomc or loom-run; raises on failure."""
    return subprocess.run([os.path.join(bin_dir, name), *args], check=True,
                          capture_output=capture, text=True,
                          stdout=None if capture else subprocess.DEVNULL)


def model_inputs(family, cfg):
    """(inputs, labels) of a built-in model, as arg0 and arg1."""
    if family == "mlp":
        return {"arg0": torch.randn(cfg["batch"], cfg["in"]),
                "arg1": torch.randint(0, cfg["classes"], (cfg["batch"],))}
    shape = (cfg["batch"], cfg["seq"])
    return {"arg0": torch.randint(0, cfg["vocab"], shape),
            "arg1": torch.randint(0, cfg["vocab"], shape)}
