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


# Issue 45's architectures, tiny as the rest: multi-query attention with a
# fused QKV (GPT-BigCode), local attention (GPT-Neo), DistilBERT, Starcoder2
# (biases everywhere), Helium, BLOOM (ALiBi, fused QKV split by a Gather on
# a head axis), Persimmon (q/k layer norms, partial rotary) and Mamba (the
# depthwise causal conv1d and the selective scan written out).
ARCHS["gpt-bigcode"] = (tf.GPTBigCodeConfig, dict(vocab_size=V, n_layer=2, n_embd=32, n_head=4,
                                                  n_positions=64, multi_query=True,
                                                  resid_pdrop=0.0, embd_pdrop=0.0,
                                                  attn_pdrop=0.0, use_cache=False))
ARCHS["gpt-neo"] = (tf.GPTNeoConfig, dict(vocab_size=V, num_layers=2, hidden_size=32, num_heads=4,
                                          intermediate_size=64, max_position_embeddings=64,
                                          attention_types=[[["global", "local"], 1]],
                                          window_size=8, embed_dropout=0.0, attention_dropout=0.0,
                                          resid_dropout=0.0, use_cache=False))
ARCHS["distilbert"] = (tf.DistilBertConfig, dict(vocab_size=V, n_layers=2, dim=32, n_heads=4,
                                                 hidden_dim=64, max_position_embeddings=64,
                                                 dropout=0.0, attention_dropout=0.0,
                                                 pad_token_id=None))
ARCHS["starcoder2"] = (tf.Starcoder2Config, dict(common, num_key_value_heads=2, use_bias=True,
                                                 residual_dropout=0.0, embedding_dropout=0.0,
                                                 attention_dropout=0.0))
ARCHS["helium"] = (tf.HeliumConfig, dict(common, num_key_value_heads=4, head_dim=8,
                                         pad_token_id=None))
ARCHS["bloom"] = (tf.BloomConfig, dict(vocab_size=V, n_layer=2, hidden_size=32, n_head=4,
                                       hidden_dropout=0.0, attention_dropout=0.0,
                                       use_cache=False, pad_token_id=None))
ARCHS["persimmon"] = (tf.PersimmonConfig, dict(common, qk_layernorm=True, partial_rotary_factor=0.5,
                                               hidden_dropout=0.0, attention_dropout=0.0,
                                               pad_token_id=None))
ARCHS["mamba"] = (tf.MambaConfig, dict(vocab_size=V, hidden_size=32, state_size=8,
                                       num_hidden_layers=2, expand=2, conv_kernel=4,
                                       use_cache=False, pad_token_id=None))
MASKED_LM.add("distilbert")
# Mixtures of experts (top-k routing): what today's exporter writes for
# them, if it can (issue 45).
moe = dict(common, num_key_value_heads=2, num_local_experts=4, num_experts_per_tok=2,
           router_aux_loss_coef=0.0, output_router_logits=False)
ARCHS["mixtral"] = (tf.MixtralConfig, moe)
ARCHS["qwen2-moe"] = (tf.Qwen2MoeConfig, dict(common, num_key_value_heads=2, num_experts=4,
                                              num_experts_per_tok=2, moe_intermediate_size=32,
                                              shared_expert_intermediate_size=32,
                                              output_router_logits=False))
ARCHS["olmoe"] = (tf.OlmoeConfig, dict(common, num_key_value_heads=4, num_experts=4,
                                       num_experts_per_tok=2, output_router_logits=False,
                                       pad_token_id=None))
ARCHS["granitemoe"] = (tf.GraniteMoeConfig, dict(common, num_key_value_heads=2,
                                                 num_local_experts=4, num_experts_per_tok=2,
                                                 output_router_logits=False))
MOE = {"mixtral", "qwen2-moe", "olmoe", "granitemoe"}
# NAME-wide: the shape (3 layers, width 96, 6 heads, vocabulary 160),
# random-initialised from the config as a user would (no perturbation: the
# exporter may merge equal initializers), weight decay 0, 5 steps.
WIDE = {
    "gpt2": dict(n_layer=3, n_embd=96, n_head=6, vocab_size=160),
    "gpt-bigcode": dict(n_layer=3, n_embd=96, n_head=6, vocab_size=160),
    "gpt-neo": dict(num_layers=3, hidden_size=96, num_heads=6, intermediate_size=384,
                    vocab_size=160, attention_types=[[["global", "local"], 1], [["global"], 1]]),
    "distilbert": dict(n_layers=3, dim=96, n_heads=6, hidden_dim=384, vocab_size=160),
    "starcoder2": dict(num_hidden_layers=3, hidden_size=96, num_attention_heads=6,
                       intermediate_size=384, vocab_size=160),
    "helium": dict(num_hidden_layers=3, hidden_size=96, num_attention_heads=6,
                   num_key_value_heads=6, head_dim=16, intermediate_size=384, vocab_size=160),
}
for _n, _kw in WIDE.items():
    ARCHS[_n + "-wide"] = (ARCHS[_n][0], dict(ARCHS[_n][1], **_kw))
    # NAME-fresh: the zoo's tiny shape, left as from_config made it (the
    # exporter merges its equal initializers: loomc splits them again).
    ARCHS[_n + "-fresh"] = ARCHS[_n]
# Vision classifiers (--task=classify): pixel arrays in, class logits out.
ARCHS["vit"] = (tf.ViTConfig, dict(image_size=16, patch_size=4, num_channels=3, hidden_size=32,
                                   num_hidden_layers=2, num_attention_heads=4,
                                   intermediate_size=64, num_labels=10, hidden_dropout_prob=0.0,
                                   attention_probs_dropout_prob=0.0))
ARCHS["resnet"] = (tf.ResNetConfig, dict(num_channels=3, embedding_size=16, hidden_sizes=[16, 32],
                                         depths=[1, 1], layer_type="basic", num_labels=10))
CLASSIFY = {"vit": (3, 16), "resnet": (3, 32)}


class LogitsOnly(torch.nn.Module):
    """input_ids -> logits: the graph loomc trains with --task=lm."""

    def __init__(self, m):
        super().__init__()
        self.m = m

    def forward(self, input_ids):
        if self.m.config.model_type in ("vit", "resnet"):
            return self.m(pixel_values=input_ids, return_dict=True).logits
        if self.m.config.model_type in MASKED_LM:
            return self.m(input_ids=input_ids, return_dict=True).logits
        return self.m(input_ids=input_ids, use_cache=False, return_dict=True).logits


def arch(name):
    """The ARCHS key of an export's name (NAME-raw, -sdpa, -opset23)."""
    for suffix in ("-raw", "-sdpa", "-opset23"):
        if name.endswith(suffix) and name[:-len(suffix)] in ARCHS:
            return name[:-len(suffix)]
    return name


def auto_model(name, cfg):
    base = arch(name)
    base = base[:-5] if base.endswith("-wide") else base[:-6] if base.endswith("-fresh") else base
    cls = (tf.AutoModelForImageClassification if base in CLASSIFY else
           tf.AutoModelForMaskedLM if base in MASKED_LM else tf.AutoModelForCausalLM)
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
    """The binary's order: step s reads rows at (s * B*T) % (n - B*T - 1);
    for a classifier's (pixels, labels) arrays, rows (s*B + r) % N."""
    if isinstance(tokens, tuple):
        px, lab = tokens
        for s in range(steps):
            rows = [(s * B + r) % len(lab) for r in range(B)]
            yield torch.tensor(px[rows]), torch.tensor(lab[rows])
        return
    n, gbt = len(tokens), B * T
    for s in range(steps):
        off = (s * gbt) % (n - gbt - 1)
        x = torch.tensor(tokens[off:off + gbt].astype(np.int64)).view(B, T)
        y = torch.tensor(tokens[off + 1:off + 1 + gbt].astype(np.int64)).view(B, T)
        yield x, y


def train_losses(model, tokens, steps=STEPS, dropout=False, wd=WD):
    """Per-step losses of AdamW steps on the binary's batches; with dropout
    off, the model's forward in eval mode (which only turns dropout off in
    these models)."""
    model.train(dropout)
    opt = torch.optim.AdamW(model.parameters(), lr=LR, betas=BETAS, eps=EPS, weight_decay=wd)
    losses = []
    for x, y in batches(tokens, steps):
        logits = model(x.to(next(model.parameters()).dtype) if x.is_floating_point() else x)
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


def build(name, attn):
    """The export's PyTorch model, seeded: the same weights on every call."""
    cls, kw = ARCHS[arch(name)]
    torch.manual_seed(0)
    cfg = cls(**kw)
    cfg._attn_implementation = attn
    if arch(name) in MOE:
        # transformers' default experts implementation is a custom op
        # (transformers.grouped_mm_fallback) the exporter cannot translate;
        # the eager one loops over the experts with index_add.
        cfg._experts_implementation = "eager"
    drop = name.endswith("-dropout")
    # A dropout model is exported in training mode, so its Dropout nodes
    # say training_mode = true, as a user exporting for training gets them.
    model = logits_model(name, cfg).train(drop)
    # A fresh model's norms are all ones and its biases all zeros, and the
    # exporter's optimizer merges identical initializers into one (which
    # would tie what PyTorch trains apart): perturb every parameter so each
    # is distinct, as trained weights are. NAME-wide models are left as a
    # user's fresh model is.
    if not arch(name).endswith(("-wide", "-fresh")):
        with torch.no_grad():
            for p in model.parameters():
                p.add_(0.02 * torch.randn_like(p))
    return cfg, model


def classify_data(name):
    """A classifier's pixels [N, C, S, S] and labels [N]: N = B * STEPS rows."""
    c, size = CLASSIFY[arch(name)]
    rng = np.random.default_rng(11)
    px = rng.standard_normal((B * STEPS, c, size, size)).astype(np.float32)
    return px, rng.integers(0, 10, B * STEPS).astype(np.int64)


def locate(a, pvals):
    """(parameter, "direct"|"transposed", flat start) of the parameter whose
    values (as they are or transposed) hold `a` contiguously, or None."""
    flat = a.ravel()
    for pname, p in pvals:
        for how, q in ([("direct", p), ("transposed", p.T)] if p.ndim == 2 else [("direct", p)]):
            qf = np.ascontiguousarray(q).ravel()
            if qf.size < flat.size or flat.size == 0:
                continue
            for start in np.flatnonzero(qf == flat[0]):
                if start + flat.size <= qf.size and np.array_equal(
                        qf[start:start + flat.size], flat):
                    return pname, how, int(start)
    return None


def step1_grads(model, data):
    """Loss and every parameter's gradient (by state_dict name: tied names
    share one) of the first batch, dropout off."""
    model.train(False)
    model.zero_grad()
    x, y = next(iter(batches(data)))
    logits = model(x.to(next(model.parameters()).dtype) if x.is_floating_point() else x)
    loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))
    loss.backward()
    return loss.item(), {k: (v.grad if v.grad is not None else torch.zeros_like(v))
                         .detach().double().numpy().copy()
                         for k, v in model.state_dict(keep_vars=True).items()
                         if isinstance(v, torch.nn.Parameter)}


def write_st(path, tensors, meta):
    """float32 safetensors (numpy arrays) with a string __metadata__."""
    header, blobs, off = {"__metadata__": meta}, [], 0
    for k, v in tensors.items():
        raw = np.ascontiguousarray(v, dtype=np.float32).tobytes()
        header[k] = {"dtype": "F32", "shape": list(v.shape), "data_offsets": [off, off + len(raw)]}
        blobs.append(raw)
        off += len(raw)
    h = json.dumps(header).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    with open(path, "wb") as f:
        f.write(len(h).to_bytes(8, "little") + h + b"".join(blobs))


def where_held(a, name, sd, pvals):
    """How initializer `a` (named `name`) holds a parameter: [parameter,
    "direct"|"transposed", flat start] (a transpose or slice the exporter
    folded), plus "sum0" for copies stacked on a leading axis (their
    gradients sum to the parameter's); None for a buffer or a value
    computed from parameters (under its own name or, as a ResNet export's
    convolution weights with the batch norm folded in, the parameter's)."""
    if name in sd and sd[name].shape == a.shape and np.array_equal(sd[name], a):
        return [name, "direct", 0]
    if a.size <= 1:
        return None
    where = locate(a, pvals)
    if where is not None:
        return list(where)
    if a.ndim >= 2:
        rows = [locate(r, pvals) for r in a]
        if rows[0] is not None and all(r == rows[0] for r in rows):
            return list(rows[0]) + ["sum0"]
    return None


def frozen_of(m, model):
    """The float initializers of export `m` that hold no parameter of
    `model` (where_held): buffers and values folded from them."""
    from onnx import numpy_helper
    sd = {k: p.detach().numpy() for k, p in model.named_parameters()}
    return [t.name for t in m.graph.initializer
            if (a := numpy_helper.to_array(t)).dtype.kind == "f" and a.size > 1 and
            where_held(a, t.name, sd, list(sd.items())) is None]


def held(g, where, size):
    """The part of gradient g[parameter] an initializer holding `size`
    elements (one copy, for sum0) the way `where` says sees."""
    q = g[where[0]].T if where[1] == "transposed" else g[where[0]]
    return np.ascontiguousarray(q).ravel()[where[2]:where[2] + size]


def reference_grads(name, out, m, model, model64, init, data):
    """PyTorch's step-1 gradients (fp32 autograd) of every parameter, into
    OUT/BASE.grads.safetensors by parameter name (BASE: the architecture;
    its -sdpa, -raw and -opset23 exports share the file), and for the
    export `m` the JSON summary: for each float initializer, how it holds a
    parameter (where_held: check_zoo.py derives its reference gradient from
    the parameter's), the fp64 gradient's norm and fp32's distance from it;
    parameters no initializer holds whole (merged by the exporter, split
    again by loomc under their PyTorch names) are listed as themselves."""
    from onnx import numpy_helper
    model.load_state_dict(init)
    model64.load_state_dict({k: v.double() if v.is_floating_point() else v
                             for k, v in init.items()})
    loss, g32 = step1_grads(model, data)
    loss64, g64 = step1_grads(model64, data)
    sd = {k: v.detach().numpy() for k, v in model.state_dict(keep_vars=True).items()
          if isinstance(v, torch.nn.Parameter)}
    pvals = list(sd.items())
    how, norms, rel32 = {}, {}, {}
    sizes = {}
    for t in m.graph.initializer:
        a = numpy_helper.to_array(t)
        if a.dtype.kind == "f":
            where = where_held(a, t.name, sd, pvals)
            if where is not None:
                how[t.name] = where
                sizes[t.name] = a[0].size if where[-1] == "sum0" else a.size
    whole = {w[0] for n, w in how.items() if w[2] == 0 and sizes[n] == sd[w[0]].size}
    names = {t.name for t in m.graph.initializer}
    for pname in sd:
        if pname not in whole and pname not in how:
            # Under its own name with other values: folded into (a ResNet
            # convolution's weight with its batch norm), not compared.
            how[pname] = [pname, "direct", 0] + (["folded"] if pname in names else [])
            sizes[pname] = sd[pname].size
    for n, w in how.items():
        r32, r64 = held(g32, w, sizes[n]), held(g64, w, sizes[n])
        norms[n] = float(np.linalg.norm(r64))
        rel32[n] = float(np.linalg.norm(r32 - r64) / max(norms[n], 1e-300))
    base = arch(name)
    if name == base:
        write_st(os.path.join(out, f"{base}.grads.safetensors"), g32,
                 {"loss": repr(loss), "loss_f64": repr(loss64)})
    return {"file": f"{base}.grads.safetensors", "loss": loss, "loss_f64": loss64,
            "where": how, "norm_f64": norms, "rel_f32_f64": rel32}


def make(name, out, tokens, attn):
    # NAME-raw: the same model exported with optimize=False (no graph
    # optimizer: weights stay named, nothing is folded or merged).
    raw = name.endswith("-raw")
    # NAME-opset23: exported at opset 23, where scaled_dot_product_attention
    # becomes ONNX's Attention operator.
    opset23 = name.endswith("-opset23")
    drop = name.endswith("-dropout")
    wide = arch(name).endswith("-wide")
    steps, wd = (5, 0.0) if wide else (STEPS, WD)
    if arch(name) in CLASSIFY:
        tokens = classify_data(name)
        np.save(os.path.join(out, f"{name}.pixel_values.npy"), tokens[0])
        np.save(os.path.join(out, f"{name}.labels.npy"), tokens[1])
    cfg, model = build(name, attn)
    init = {k: v.detach().clone() for k, v in model.state_dict().items()}
    path = os.path.join(out, f"{name}.onnx")
    x0 = next(iter(batches(tokens)))[0]
    t0 = time.time()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        prog = torch.onnx.export(model, (x0,), dynamo=True,
                                 input_names=["pixel_values" if arch(name) in CLASSIFY
                                              else "input_ids"],
                                 output_names=["logits"], external_data=False,
                                 optimize=not raw, **({"opset_version": 23} if opset23 else {}))
    prog.save(path, external_data=False)
    export_s = time.time() - t0
    return describe(name, out, attn, cfg, model, init, tokens, steps, wd,
                    {"export_s": round(export_s, 1), "optimize": not raw})


def describe(name, out, attn, cfg, model, init, tokens, steps, wd, extra):
    """NAME.json (and the gradients: reference_grads) for the export
    OUT/NAME.onnx of `model`, whose initial weights are `init`."""
    import onnx
    path = os.path.join(out, f"{name}.onnx")
    m = onnx.load(path)
    drop = name.endswith("-dropout")
    # The exporter's optimizer folds transposes of weights into new
    # initializers ("permute_3" = W^T): an initializer holding a parameter's
    # values (as they are, transposed, a contiguous slice: position
    # embeddings folded to the rows used, or copies of one: ViT's class
    # token expanded to the batch) is trained; any other float one is a
    # buffer or folded from buffers (rotary tables), which loomc must not
    # train (--frozen).
    frozen = frozen_of(m, model)
    # PyTorch's losses: the same initial weights, AdamW, fp32 on the CPU;
    # then the same steps in float64: how far float32 arithmetic alone moves
    # the losses (check_zoo.py's tolerance takes it into account).
    model.load_state_dict(init)
    losses = train_losses(model, tokens, steps, wd=wd)
    model64 = logits_model(name, cfg).double()
    model64.load_state_dict({k: v.double() if v.is_floating_point() else v
                             for k, v in init.items()})
    losses64 = train_losses(model64, tokens, steps, wd=wd)
    grads = reference_grads(name, out, m, model, model64, init, tokens)
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
    ref = {"name": name, "attention": attn, "torch": torch.__version__,
           "transformers": tf.__version__, "onnx_opsets": {o.domain or "ai.onnx": o.version
                                                           for o in m.opset_import},
           "bytes": os.path.getsize(path), "batch": B,
           "optimizer": {"lr": LR, "betas": BETAS, "eps": EPS, "weight_decay": wd},
           "steps": steps, "frozen": frozen, "ops": ops, "losses": losses,
           "losses_f64": losses64, "grads": grads, **extra}
    if arch(name) in CLASSIFY:
        ref.update({"task": "classify", "inputs": ["pixel_values", "labels"],
                    "classes": cfg.num_labels})
    else:
        ref.update({"seq": T, "vocab": cfg.vocab_size})
    if drop:
        ref.update({"dropout": {"p": DROPOUT_P, "steps": DROPOUT_STEPS, "seeds": SEEDS,
                                "onnx_dropout_nodes": ntrain},
                    "dropout_runs": runs, "losses_off_50": off50})
    with open(os.path.join(out, f"{name}.json"), "w") as f:
        json.dump(ref, f, indent=1)
    return ref


def grads_only(name, out, tokens):
    """Adds the step-1 gradients to an existing export (OUT/NAME.onnx and
    .json from an earlier run): the model rebuilt from its seed, whose
    weights must be the file's (reference_grads checks every named one) and
    whose first loss must be the recorded one."""
    import onnx
    path = os.path.join(out, f"{name}.json")
    ref = json.load(open(path))
    cfg, model = build(name, ref["attention"])
    if arch(name) in CLASSIFY:
        tokens = classify_data(name)
    init = {k: v.detach().clone() for k, v in model.state_dict().items()}
    model64 = logits_model(name, cfg).double()
    m = onnx.load(os.path.join(out, f"{name}.onnx"))
    g = reference_grads(name, out, m, model, model64, init, tokens)
    if abs(g["loss"] - ref["losses"][0]) > 1e-6:
        raise RuntimeError(f"the rebuilt model's first loss {g['loss']} is not the recorded "
                           f"{ref['losses'][0]}")
    ref["grads"] = g
    ref["frozen"] = frozen_of(m, model)
    with open(path, "w") as f:
        json.dump(ref, f, indent=1)
    return ref


def job(args):
    """One export (or, with grads_only, one existing export's gradients):
    its summary line, run in a worker process."""
    name, attn, out, tokens, only = args
    torch.set_num_threads(1)
    try:
        r = grads_only(name, out, tokens) if only else make(name, out, tokens, attn)
        return (f"{name:16} ok   {r['bytes']:8d} B  frozen {len(r['frozen'])}  loss "
                f"{r['losses'][0]:.4f} -> {r['losses'][-1]:.4f}  gradients "
                f"{len(r['grads']['where'])}  ops {' '.join(r['ops'])}")
    except Exception as e:  # noqa: BLE001 - one line per failure
        with open(os.path.join(out, f"{name}.err"), "w") as f:
            traceback.print_exc(file=f)
        return f"{name:16} FAIL {type(e).__name__}: {str(e).splitlines()[0][:300]}"


def main():
    """make_zoo.py OUT [--grads-only] [--jobs N] [NAME ...]: NAME is an
    ARCHS key (exported eager and, for language models, as NAME-sdpa) or
    NAME-raw / NAME-opset23; --grads-only adds gradients to OUT's exports."""
    args = sys.argv[1:]
    only = "--grads-only" in args
    jobs = int(args[args.index("--jobs") + 1]) if "--jobs" in args else 1
    args = [a for i, a in enumerate(args) if a != "--grads-only" and a != "--jobs" and
            (i == 0 or args[i - 1] != "--jobs")]
    out, names = args[0], args[1:]
    names = names or list(ARCHS) + [f"{a}-raw" for a in ("gpt2", "llama", "opt", "gemma2",
                                                         "olmo", "falcon", "bert",
                                                         "bart", "roberta")] + \
        [f"{a}-opset23" for a in ("llama", "llama-gqa")]
    os.makedirs(out, exist_ok=True)
    rng = np.random.default_rng(7)
    tokens = rng.integers(0, V, N_TOKENS, dtype=np.uint16)
    tokens.tofile(os.path.join(out, "tokens.bin"))
    print(f"torch {torch.__version__}, transformers {tf.__version__}", flush=True)
    todo = []
    for name in names:
        if only or name.endswith("-opset23"):
            todo.append((name, "sdpa" if name.endswith(("-opset23", "-sdpa")) else "eager"))
            continue
        one = name.endswith(("-raw", "-dropout", "-wide", "-fresh")) or arch(name) in CLASSIFY
        for attn in ("eager",) if one else ("eager", "sdpa"):
            tag = name if attn == "eager" else f"{name}-sdpa"
            todo.append((tag, attn))
    import multiprocessing as mp
    with mp.get_context("fork").Pool(jobs) as pool:
        for line in pool.imap(job, [(n, a, out, tokens, only) for n, a in todo]):
            print(line, flush=True)


if __name__ == "__main__":
    main()
