#!/usr/bin/env python3
"""Loom's mixture-of-experts model against Hugging Face's own Mixtral
(transformers' MixtralForCausalLM, a reference no one here wrote), on a GPU
host that has transformers (issue 52).

bench/gen-moe-gpu.sh leaves in DIR (.carry/moe/hf) the weights a Loom CPU
binary had after one AdamW step (exported by loom-ckpt under Hugging Face's
Mixtral names), the generator's spec, and the binary's log with its second
step's loss. Here MixtralForCausalLM with the same shape (rope theta 10000,
RMS eps 1e-6, untied head, eager attention, output_router_logits) loads
those weights in float64 (float32 where its experts refuse float64) and
computes the second batch's loss: the mean
cross entropy plus router_aux_loss_coef times its aux_loss
(load_balancing_loss_func). Bound: 1e-5 relative to the binary's fp32 loss.

transformers 4.x names each expert's w1, w2, w3 under block_sparse_moe;
5.x calls the block `mlp` and stacks the experts (experts.gate_up_proj
[E, 2F, D] = [w1; w3], experts.down_proj [E, D, F]); both are handled and
the one used is printed.
   python3 bench/moe_hf_check.py .carry/moe/hf .carry/moe/gpl3.bin
"""
import json
import re
import sys

import numpy as np
import torch
import torch.nn.functional as F
import transformers
from safetensors.torch import load_file
from transformers import MixtralConfig, MixtralForCausalLM


def spec(text):
    ints, reals = {}, {"capacity": 0.0, "aux": 0.001}
    for kv in text.split(","):
        k, v = kv.split("=")
        if k in reals:
            reals[k] = float(v)
        else:
            ints[k] = int(v)
    return ints, reals


def load(model, weights, E):
    """Loom's names into the model's state dict (stacking experts for 5.x)."""
    want = model.state_dict()
    state, layout = {}, "per-expert w1/w2/w3"
    # (5.x calls the sparse block `mlp`, 4.x `block_sparse_moe`, as Loom.)
    for name in want:
        loom = name.replace(".mlp.", ".block_sparse_moe.")
        if loom in weights:
            state[name] = weights[loom]
    for name in want:
        m = re.match(r"(model\.layers\.\d+\.(?:block_sparse_moe|mlp)\.experts)\.(gate_up_proj|down_proj)$",
                     name)
        if not m:
            continue
        layout = "stacked gate_up_proj/down_proj"
        base = m.group(1).replace(".mlp.", ".block_sparse_moe.")
        ex = lambda e, w: weights[f"{base}.{e}.{w}.weight"]
        if m.group(2) == "gate_up_proj":
            t = torch.stack([torch.cat([ex(e, "w1"), ex(e, "w3")]) for e in range(E)])
        else:
            t = torch.stack([ex(e, "w2") for e in range(E)])
        if t.shape != want[name].shape:
            t = t.transpose(1, 2)
        state[name] = t
    missing = [n for n in want if n not in state]
    if missing:
        sys.exit(f"no Loom weight for {missing[:5]} ({len(missing)} in all)")
    model.load_state_dict({k: v.to(want[k].dtype) for k, v in state.items()})
    return layout


def main():
    folder, tokens_file = sys.argv[1], sys.argv[2]
    ints, reals = spec(json.load(open(f"{folder}/config.json"))["spec"])
    if reals["capacity"] > 0:
        sys.exit("Hugging Face's Mixtral is dropless: give a model without capacity")
    L, D, H, V, T, B = (ints[k] for k in ("layers", "d_model", "heads", "vocab", "seq", "batch"))
    E, K, Fd = ints["experts"], ints["top_k"], ints["ffn"]
    cfg = MixtralConfig(vocab_size=V, hidden_size=D, intermediate_size=Fd, num_hidden_layers=L,
                        num_attention_heads=H, num_key_value_heads=ints.get("kv_heads") or H,
                        num_local_experts=E, num_experts_per_tok=K, max_position_embeddings=T,
                        rms_norm_eps=1e-6, rope_theta=10000.0, tie_word_embeddings=False,
                        router_aux_loss_coef=reals["aux"], output_router_logits=True,
                        sliding_window=None, attention_dropout=0.0)
    cfg._attn_implementation = "eager"
    # 5.x runs the experts with torch's grouped GEMM (no float64) unless
    # asked for its loop; where that is refused, float32.
    cfg._experts_implementation = "eager"
    weights = load_file(f"{folder}/model.safetensors")
    tokens = np.fromfile(tokens_file, dtype=np.uint16).astype(np.int64)
    # The binary's second step reads B*T+1 tokens at (1*B*T) mod (N - B*T - 1).
    bt = B * T
    off = bt % (len(tokens) - bt - 1)
    chunk = torch.from_numpy(tokens[off:off + bt + 1])
    x, y = chunk[:-1].view(B, T), chunk[1:].view(B, T)
    for dtype in (torch.float64, torch.float32):
        model = MixtralForCausalLM(cfg).to(dtype).eval()
        layout = load(model, weights, E)
        try:
            with torch.no_grad():
                out = model(input_ids=x, output_router_logits=True)
            break
        except RuntimeError as e:
            print(f"float64 refused ({str(e)[:80]}); float32")
    ce = F.cross_entropy(out.logits.reshape(-1, V).double(), y.reshape(-1))
    loss = ce + reals["aux"] * out.aux_loss.double()
    ours = [json.loads(line)["loss"] for line in open(f"{folder}/two.json")][1]
    err = abs(ours - loss.item()) / abs(loss.item())
    print(f"transformers {transformers.__version__} MixtralForCausalLM ({layout}), {dtype}: "
          f"loss {loss.item():.7f} (cross entropy {ce.item():.7f} + {reals['aux']} x aux "
          f"{out.aux_loss.item():.6f}); Loom's binary {ours:.7f}; relative difference "
          f"{err:.2e} (bound 1e-5): {'ok' if err <= 1e-5 else 'FAILED'}")


if __name__ == "__main__":
    main()
