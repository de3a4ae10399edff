#!/usr/bin/env python3
"""A Llama-3-shaped 1B model exported the way users export it, for the
tokens/s comparison with Loom's own generator (issue 16):
    python3 test/Zoo/make_llama1b.py OUT_DIR [BATCH SEQ]
Run on a GPU host (transformers). The model: Llama 3.2 1B's shape (16
layers, width 2048, 32 heads of 64, MLP 8192, vocabulary 128256) with
full multi-head attention and an untied head, the shape of
`loomc --model llama:layers=16,d_model=2048,heads=32,vocab=128256,ffn=8192`
(the generator has neither grouped-query attention nor tying), random
weights, SDPA attention, torch.onnx.export(dynamo=True) with its default
optimizer. The weights (6.4 GB) stay on the host: OUT_DIR/llama1b.onnx
keeps every tensor of 4 MB or more (the weights) in an external file that
is not copied back, and everything smaller inline, so loomc --init=random
compiles the graph from its shapes.
"""
import os
import sys
import time
import warnings

import onnx
import torch
import transformers as tf

out = sys.argv[1]
B, T = (int(sys.argv[2]), int(sys.argv[3])) if len(sys.argv) > 3 else (4, 1024)
os.makedirs(out, exist_ok=True)


class LogitsOnly(torch.nn.Module):
    def __init__(self, m):
        super().__init__()
        self.m = m

    def forward(self, input_ids):
        return self.m(input_ids=input_ids, use_cache=False, return_dict=True).logits


cfg = tf.LlamaConfig(vocab_size=128256, hidden_size=2048, intermediate_size=8192,
                     num_hidden_layers=16, num_attention_heads=32, num_key_value_heads=32,
                     max_position_embeddings=max(T, 2048), rope_theta=10000.0,
                     rms_norm_eps=1e-6, tie_word_embeddings=False, use_cache=False,
                     attention_dropout=0.0)
cfg._attn_implementation = "sdpa"
torch.manual_seed(0)
t0 = time.time()
model = LogitsOnly(tf.AutoModelForCausalLM.from_config(cfg)).eval()
n = sum(p.numel() for p in model.parameters())
print(f"torch {torch.__version__}, transformers {tf.__version__}: {n / 1e9:.3f} B parameters "
      f"({time.time() - t0:.0f} s)", flush=True)
full = os.path.join(out, "full", "llama1b.onnx")
os.makedirs(os.path.dirname(full), exist_ok=True)
t0 = time.time()
with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    prog = torch.onnx.export(model, (torch.zeros(B, T, dtype=torch.int64),), dynamo=True,
                             input_names=["input_ids"], output_names=["logits"])
prog.save(full, external_data=True)
print(f"exported in {time.time() - t0:.0f} s", flush=True)
m = onnx.load(full)  # with its data
path = os.path.join(out, "llama1b.onnx")
onnx.save_model(m, path, save_as_external_data=True, all_tensors_to_one_file=True,
                location="llama1b.weights", size_threshold=4 << 20)
inline = sum(1 for t in m.graph.initializer if not t.external_data)
print(f"{path}: {os.path.getsize(path) / 1e6:.1f} MB graph, {len(m.graph.initializer)} "
      f"initializers ({inline} inline), opset "
      f"{[o.version for o in m.opset_import if o.domain in ('', 'ai.onnx')]}", flush=True)
