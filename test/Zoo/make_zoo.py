#!/usr/bin/env python3
"""The model zoo: tiny random-weight Hugging Face decoders exported to ONNX
the way users export them, with PyTorch's own training losses beside them.

Run on a machine with transformers (the GPU hosts; not CI):
    python3 test/Zoo/make_zoo.py OUT_DIR [NAME ...]
For each architecture it writes OUT_DIR/NAME.onnx (torch.onnx.export with
dynamo=True, PyTorch's default exporter, from the model in eval mode with
every dropout probability 0) and OUT_DIR/NAME.json: the exporter's versions,
the initializers that are buffers rather than parameters (loomc --frozen),
and PyTorch's per-step losses of 10 AdamW steps (fp32, CPU) on the tokens of
OUT_DIR/tokens.bin, read in the order the training binary reads them.
NAME-dropout models are exported in training mode with dropout probability
DROPOUT_P (embeddings, residual branches, attention probabilities): their
10-step losses are PyTorch's with dropout off (loomc --dropout=off), and
"dropout_runs" holds 50-step losses with dropout on for SEEDS seeds of
PyTorch's generator, with "losses_off_50" the same 50 steps without it.
test/Zoo/check_zoo.py compares loomc's binaries with them (zoo.test).
"""
import json
import os
import sys
import time
import traceback
import warnings

import numpy as np
import torch
import torch.nn.functional as F
import transformers as tf

B, T, V, STEPS = 2, 16, 128, 10
DROPOUT_P, DROPOUT_STEPS, SEEDS = 0.2, 50, 8
LR, BETAS, EPS, WD = 1e-3, (0.9, 0.999), 1e-8, 0.01
N_TOKENS = 4096

# Tiny configurations: 2 layers, width 32, 4 heads (2 key/value heads where
# the architecture has grouped-query attention), vocabulary 128: ~30k
# parameters, ~150 kB a file.
common = dict(vocab_size=V, num_hidden_layers=2, hidden_size=32, intermediate_size=64,
              num_attention_heads=4, max_position_embeddings=64, use_cache=False)
# pad_token_id=None: nn.Embedding(padding_idx=...) never updates its pad row,
# and the ONNX export loses padding_idx, so a model whose pad token appears
# in the data would differ for that reason alone (OLMo, OPT and Gemma 2
# default to pad ids 1, 1 and 0; the issue is recorded in docs/onnx.md).
ARCHS = {
    "gpt2": (tf.GPT2Config, dict(vocab_size=V, n_layer=2, n_embd=32, n_head=4, n_positions=64,
                                 resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0,
                                 use_cache=False)),
    "llama": (tf.LlamaConfig, dict(common, num_key_value_heads=4)),
    "llama-gqa": (tf.LlamaConfig, dict(common, num_key_value_heads=2)),
    "mistral": (tf.MistralConfig, dict(common, num_key_value_heads=2)),
    "qwen2": (tf.Qwen2Config, dict(common, num_key_value_heads=2)),
    "qwen3": (tf.Qwen3Config, dict(common, num_key_value_heads=2, head_dim=8)),
    # Phi-3's config defaults pad_token_id to 32000, past a tiny vocabulary.
    "phi3": (tf.Phi3Config, dict(common, num_key_value_heads=4, pad_token_id=None)),
    "gemma2": (tf.Gemma2Config, dict(common, num_key_value_heads=2, head_dim=8, pad_token_id=None)),
    "gpt-neox": (tf.GPTNeoXConfig, dict(common, hidden_dropout=0.0, attention_dropout=0.0)),
    "gptj": (tf.GPTJConfig, dict(vocab_size=V, n_layer=2, n_embd=32, n_head=4, n_positions=64,
                                 rotary_dim=8, resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0,
                                 use_cache=False)),
    "opt": (tf.OPTConfig, dict(vocab_size=V, num_hidden_layers=2, hidden_size=32, ffn_dim=64,
                               num_attention_heads=4, max_position_embeddings=64,
                               word_embed_proj_dim=32, dropout=0.0, attention_dropout=0.0,
                               use_cache=False, pad_token_id=None)),
    "falcon": (tf.FalconConfig, dict(vocab_size=V, num_hidden_layers=2, hidden_size=32,
                                     num_attention_heads=4, use_cache=False,
                                     hidden_dropout=0.0, attention_dropout=0.0)),
    "stablelm": (tf.StableLmConfig, dict(common, num_key_value_heads=4)),
    "olmo": (tf.OlmoConfig, dict(common, num_key_value_heads=4, pad_token_id=None)),
}
# Beyond decoders: BERT with its masked-LM head (bidirectional attention,
# token-type and position embeddings, the head's transform and tied
# decoder) and BART's decoder as a causal LM (learned positions with
# BART's offset of 2, post-norm). BERT is trained on the same next-token
# targets as the decoders: the objective only has to be the same on both
# sides to compare the arithmetic, and it needs no masking data.
ARCHS["bert"] = (tf.BertConfig, dict(vocab_size=V, num_hidden_layers=2, hidden_size=32,
                                     intermediate_size=64, num_attention_heads=4,
                                     max_position_embeddings=64, hidden_dropout_prob=0.0,
                                     attention_probs_dropout_prob=0.0, pad_token_id=None))
ARCHS["bart"] = (tf.BartConfig, dict(vocab_size=V, d_model=32, decoder_layers=2, encoder_layers=2,
                                     decoder_attention_heads=4, encoder_attention_heads=4,
                                     decoder_ffn_dim=64, encoder_ffn_dim=64,
                                     max_position_embeddings=64, dropout=0.0,
                                     attention_dropout=0.0, activation_dropout=0.0,
                                     use_cache=False, pad_token_id=None))
# RoBERTa: position ids computed from the input on the device
# (cumsum(input_ids != pad) * mask + pad: positions restart after pad
# tokens, and the random tokens hold the pad id 1 about once in 128).
ARCHS["roberta"] = (tf.RobertaConfig, dict(vocab_size=V, num_hidden_layers=2, hidden_size=32,
                                           intermediate_size=64, num_attention_heads=4,
                                           max_position_embeddings=64, type_vocab_size=1,
                                           hidden_dropout_prob=0.0,
                                           attention_probs_dropout_prob=0.0, pad_token_id=1))
MASKED_LM = {"bert", "roberta"}

# Dropout on: the same tiny models with every dropout probability DROPOUT_P.
ARCHS["gpt2-dropout"] = (tf.GPT2Config, dict(ARCHS["gpt2"][1], resid_pdrop=DROPOUT_P,
                                             embd_pdrop=DROPOUT_P, attn_pdrop=DROPOUT_P))
ARCHS["gpt-neox-dropout"] = (tf.GPTNeoXConfig, dict(common, hidden_dropout=DROPOUT_P,
                                                    attention_dropout=DROPOUT_P))


class LogitsOnly(torch.nn.Module):
    """input_ids -> logits: the graph loomc trains with --task=lm."""

    def __init__(self, m):
        super().__init__()
        self.m = m

    def forward(self, input_ids):
        if self.m.config.model_type in MASKED_LM:
            return self.m(input_ids=input_ids, return_dict=True).logits
        return self.m(input_ids=input_ids, use_cache=False, return_dict=True).logits


def auto_model(name, cfg):
    base = name[:-4] if name.endswith("-raw") else name
    base = base[:-5] if base.endswith("-sdpa") else base
    base = base[:-8] if base.endswith("-opset23") else base
    cls = tf.AutoModelForMaskedLM if base in MASKED_LM else tf.AutoModelForCausalLM
    return cls.from_config(cfg)


def logits_model(name, cfg):
    model = LogitsOnly(auto_model(name, cfg))
    # nn.Embedding(padding_idx=p) zeroes the gradient of row p; the ONNX
    # graph has no such attribute (a Gather), so the file trains that row.
    # The reference trains what the file describes (a no-op for the models
    # without a pad id).
    for mod in model.modules():
        if isinstance(mod, torch.nn.Embedding):
            mod.padding_idx = None
    return model


def batches(tokens, steps=STEPS):
    """The binary's order: step s reads rows at (s * B*T) % (n - B*T - 1)."""
    n, gbt = len(tokens), B * T
    for s in range(steps):
        off = (s * gbt) % (n - gbt - 1)
        x = torch.tensor(tokens[off:off + gbt].astype(np.int64)).view(B, T)
        y = torch.tensor(tokens[off + 1:off + 1 + gbt].astype(np.int64)).view(B, T)
        yield x, y


def train_losses(model, tokens, steps=STEPS, dropout=False):
    """Per-step losses of AdamW steps on the binary's batches; with dropout
    off, the model's forward in eval mode (which only turns dropout off in
    these models)."""
    model.train(dropout)
    opt = torch.optim.AdamW(model.parameters(), lr=LR, betas=BETAS, eps=EPS, weight_decay=WD)
    losses = []
    for x, y in batches(tokens, steps):
        logits = model(x)
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


def make(name, out, tokens, attn):
    # NAME-raw: the same model exported with optimize=False (no graph
    # optimizer: weights stay named, nothing is folded or merged).
    raw = name.endswith("-raw")
    # NAME-opset23: exported at opset 23, where scaled_dot_product_attention
    # becomes ONNX's Attention operator.
    opset23 = name.endswith("-opset23")
    cls, kw = ARCHS[name[:-4] if raw else name[:-8] if opset23 else name]
    torch.manual_seed(0)
    cfg = cls(**kw)
    cfg._attn_implementation = attn
    drop = name.endswith("-dropout")
    # A dropout model is exported in training mode, so its Dropout nodes
    # say training_mode = true, as a user exporting for training gets them.
    model = logits_model(name, cfg).train(drop)
    # A fresh model's norms are all ones and its biases all zeros, and the
    # exporter's optimizer merges identical initializers into one (which
    # would tie what PyTorch trains apart): perturb every parameter so each
    # is distinct, as trained weights are.
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.02 * torch.randn_like(p))
    init = {k: v.detach().clone() for k, v in model.state_dict().items()}
    path = os.path.join(out, f"{name}.onnx")
    x0 = next(iter(batches(tokens)))[0]
    t0 = time.time()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        prog = torch.onnx.export(model, (x0,), dynamo=True, input_names=["input_ids"],
                                 output_names=["logits"], external_data=False,
                                 optimize=not raw, **({"opset_version": 23} if opset23 else {}))
    prog.save(path, external_data=False)
    export_s = time.time() - t0
    import onnx
    m = onnx.load(path)
    # The exporter's optimizer folds transposes of weights into new
    # initializers ("permute_3" = W^T): an initializer holding a parameter's
    # values (as they are or transposed) is trained; any other float one is
    # a buffer or folded from buffers (rotary tables), which loomc must not
    # train (--frozen).
    from onnx import numpy_helper
    pvals = [p.detach().numpy() for p in model.parameters()]
    def trainable(a):
        # A parameter's values, as they are, transposed, or a contiguous
        # slice of them (position embeddings folded to the rows used).
        flat = a.ravel()
        for p in pvals:
            for q in ([p, p.T] if p.ndim == 2 else [p]):
                qf = np.ascontiguousarray(q).ravel()
                if qf.size < flat.size:
                    continue
                for start in np.flatnonzero(qf == flat[0]):
                    if start + flat.size <= qf.size and np.array_equal(
                            qf[start:start + flat.size], flat):
                        return True
        return False
    frozen = []
    for t in m.graph.initializer:
        a = numpy_helper.to_array(t)
        if a.dtype.kind == "f" and a.size > 1 and not trainable(a):
            frozen.append(t.name)
    # PyTorch's losses: the same initial weights, AdamW, fp32 on the CPU;
    # then the same steps in float64: how far float32 arithmetic alone moves
    # the losses (check_zoo.py's tolerance takes it into account).
    model.load_state_dict(init)
    losses = train_losses(model, tokens)
    model64 = logits_model(name, cfg).double()
    model64.load_state_dict({k: v.double() if v.is_floating_point() else v
                             for k, v in init.items()})
    losses64 = train_losses(model64, tokens)
    if drop:
        runs = []
        for seed in range(SEEDS):
            model.load_state_dict(init)
            torch.manual_seed(1000 + seed)
            runs.append(train_losses(model, tokens, DROPOUT_STEPS, dropout=True))
        model.load_state_dict(init)
        off50 = train_losses(model, tokens, DROPOUT_STEPS)
        ntrain = sum(1 for n in m.graph.node if n.op_type == "Dropout")
    ops = sorted({n.op_type for n in m.graph.node})
    ref = {"name": name, "attention": attn, "optimize": not raw, "torch": torch.__version__,
           "transformers": tf.__version__, "onnx_opsets": {o.domain or "ai.onnx": o.version
                                                           for o in m.opset_import},
           "export_s": round(export_s, 1), "bytes": os.path.getsize(path),
           "batch": B, "seq": T, "vocab": V, "steps": STEPS,
           "optimizer": {"lr": LR, "betas": BETAS, "eps": EPS, "weight_decay": WD},
           "frozen": frozen, "ops": ops, "losses": losses, "losses_f64": losses64}
    if drop:
        ref.update({"dropout": {"p": DROPOUT_P, "steps": DROPOUT_STEPS, "seeds": SEEDS,
                                "onnx_dropout_nodes": ntrain},
                    "dropout_runs": runs, "losses_off_50": off50})
    with open(os.path.join(out, f"{name}.json"), "w") as f:
        json.dump(ref, f, indent=1)
    return ref


def main():
    out = sys.argv[1]
    names = sys.argv[2:] or list(ARCHS) + [f"{a}-raw" for a in ("gpt2", "llama", "opt", "gemma2",
                                                                 "olmo", "falcon", "bert",
                                                                 "bart", "roberta")] + \
        [f"{a}-opset23" for a in ("llama", "llama-gqa")]
    os.makedirs(out, exist_ok=True)
    rng = np.random.default_rng(7)
    tokens = rng.integers(0, V, N_TOKENS, dtype=np.uint16)
    tokens.tofile(os.path.join(out, "tokens.bin"))
    print(f"torch {torch.__version__}, transformers {tf.__version__}")
    for name in names:
        if name.endswith("-opset23"):
            try:
                r = make(name, out, tokens, "sdpa")
                print(f"{name:16} ok   {r['bytes']:8d} B  opsets {r['onnx_opsets']}  "
                      f"ops {' '.join(r['ops'])}")
            except Exception as e:  # noqa: BLE001
                print(f"{name:16} FAIL {type(e).__name__}: {str(e).splitlines()[0][:300]}")
                traceback.print_exc(file=open(os.path.join(out, f"{name}.err"), "w"))
            continue
        for attn in ("eager",) if name.endswith(("-raw", "-dropout")) else ("eager", "sdpa"):
            tag = name if attn == "eager" else f"{name}-sdpa"
            try:
                r = make(name, out, tokens, attn) if attn == "eager" else None
                if attn == "sdpa":
                    # The SDPA export under its own name.
                    cls, kw = ARCHS[name]
                    ARCHS[tag] = (cls, kw)
                    r = make(tag, out, tokens, attn)
                print(f"{tag:16} ok   {r['bytes']:8d} B  export {r['export_s']:5.1f} s  "
                      f"frozen {len(r['frozen'])}  loss {r['losses'][0]:.4f} -> "
                      f"{r['losses'][-1]:.4f}  ops {' '.join(r['ops'])}")
            except Exception as e:  # noqa: BLE001 - one line per failure
                print(f"{tag:16} FAIL {type(e).__name__}: {str(e).splitlines()[0][:300]}")
                traceback.print_exc(file=open(os.path.join(out, f"{tag}.err"), "w"))


if __name__ == "__main__":
    main()
