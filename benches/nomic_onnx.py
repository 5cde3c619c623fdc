"""NomicBERT for the ONNX Runtime peer of `benches/embed_run.py`: a model directory of
nomic-embed-text v1.5's shape with random weights, and the same forward in torch for torch.onnx.

    python nomic_onnx.py MODEL_DIR MINILM_DIR     (writes the model directory)

The directory holds v1.5's configuration (768 wide, 12 layers of 12 heads, 3,072 inner, post-norm,
no biases, rotate-half rotary at base 1,000, SwiGLU), `model.safetensors` with random f32 weights
drawn as `tests/common/nomic_model.rs` scales them, and MiniLM's `tokenizer.json` (the same BERT
uncased vocabulary): no nomic weights can be fetched here, and a forward's time does not depend on
the weights' values. `NomicBert` is the forward of `tests/nomic_reference.py` (which the tests
check ri-batch against) in torch, batched with an attention mask, returning the last hidden state
as transformers' BertModel does, so the bench pools and normalises both models alike.
"""
import json
import math
import shutil
import struct
import sys
from pathlib import Path

import numpy as np

VOCAB, WIDTH, HEADS, LAYERS, INNER = 30528, 768, 12, 12, 3072
CONFIG = {
    "model_type": "nomic_bert", "architectures": ["NomicBertModel"], "vocab_size": VOCAB,
    "n_embd": WIDTH, "n_head": HEADS, "n_layer": LAYERS, "n_inner": INNER,
    "n_positions": 8192, "type_vocab_size": 2, "layer_norm_epsilon": 1e-12,
    "rotary_emb_fraction": 1.0, "rotary_emb_base": 1000.0, "rotary_emb_interleaved": False,
    "qkv_proj_bias": False, "mlp_fc1_bias": False, "mlp_fc2_bias": False,
    "activation_function": "swiglu", "prenorm": False,
}


def tensors(seed=7):
    """Every tensor, scaled as the tests' model is (word embeddings at 0.5)."""
    rng = np.random.default_rng(seed)
    u = lambda shape, scale, offset=0.0: (offset + scale * rng.uniform(-1, 1, shape)).astype("<f4")
    e, w = WIDTH, 1.0 / math.sqrt(WIDTH)
    t = {
        "embeddings.word_embeddings.weight": u((VOCAB, e), 0.5),
        "embeddings.token_type_embeddings.weight": u((2, e), 0.05),
        "emb_ln.weight": u((e,), 0.1, 1.0),
        "emb_ln.bias": u((e,), 0.1),
    }
    for i in range(LAYERS):
        p = f"encoder.layers.{i}."
        t[p + "attn.Wqkv.weight"] = u((3 * e, e), w)
        t[p + "attn.out_proj.weight"] = u((e, e), w)
        t[p + "mlp.fc11.weight"] = u((INNER, e), w)
        t[p + "mlp.fc12.weight"] = u((INNER, e), w)
        t[p + "mlp.fc2.weight"] = u((e, INNER), 1.0 / math.sqrt(INNER))
        for n in ("norm1", "norm2"):
            t[p + n + ".weight"] = u((e,), 0.1, 1.0)
            t[p + n + ".bias"] = u((e,), 0.1)
    return t


def write_model(out, minilm):
    """The model directory (once: kept when its config is already there)."""
    out, minilm = Path(out), Path(minilm)
    if (out / "config.json").exists() and json.loads((out / "config.json").read_text()) == CONFIG:
        return out
    out.mkdir(parents=True, exist_ok=True)
    t = tensors()
    header, at = {}, 0
    for name, a in t.items():
        header[name] = {"dtype": "F32", "shape": list(a.shape), "data_offsets": [at, at + a.nbytes]}
        at += a.nbytes
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    with open(out / "model.safetensors", "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for a in t.values():
            f.write(a.tobytes())
    shutil.copy(minilm / "tokenizer.json", out / "tokenizer.json")
    (out / "config.json").write_text(json.dumps(CONFIG))
    return out


def load(model_dir):
    """The weights of `model_dir/model.safetensors` as numpy arrays."""
    with open(Path(model_dir) / "model.safetensors", "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    return {k: np.frombuffer(data[m["data_offsets"][0]:m["data_offsets"][1]], dtype="<f4").reshape(m["shape"])
            for k, m in header.items() if k != "__metadata__"}


def torch_model(model_dir):
    """`NomicBert` with the weights of `model_dir`."""
    import torch
    import torch.nn.functional as F

    w = {k: torch.from_numpy(v.copy()) for k, v in load(model_dir).items()}
    cfg = json.loads((Path(model_dir) / "config.json").read_text())
    e, nh = cfg["n_embd"], cfg["n_head"]
    hd, eps, base = e // nh, cfg["layer_norm_epsilon"], cfg["rotary_emb_base"]

    class NomicBert(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.p = torch.nn.ParameterDict({k.replace(".", "__"): torch.nn.Parameter(v, requires_grad=False)
                                             for k, v in w.items()})
            self.register_buffer("inv", 1.0 / (base ** (torch.arange(0, hd // 2).float() * 2.0 / hd)))

        def g(self, name):
            return self.p[name.replace(".", "__")]

        def ln(self, x, name):
            return F.layer_norm(x, (e,), self.g(name + ".weight"), self.g(name + ".bias"), eps)

        def forward(self, input_ids, attention_mask):
            b, t = input_ids.shape
            x = F.embedding(input_ids, self.g("embeddings.word_embeddings.weight"))
            x = self.ln(x + self.g("embeddings.token_type_embeddings.weight")[0], "emb_ln")
            ang = torch.arange(t, dtype=torch.float32)[:, None] * self.inv[None, :]
            cos, sin = ang.cos(), ang.sin()
            bias = (1.0 - attention_mask[:, None, None, :].float()) * -1e4

            def rope(z):
                z1, z2 = z[..., : hd // 2], z[..., hd // 2:]
                return torch.cat([z1 * cos - z2 * sin, z2 * cos + z1 * sin], dim=-1)

            for i in range(LAYERS):
                p = f"encoder.layers.{i}."
                qkv = x @ self.g(p + "attn.Wqkv.weight").T
                q, k, v = (z.reshape(b, t, nh, hd).transpose(1, 2) for z in qkv.split(e, dim=-1))
                q, k = rope(q), rope(k)
                a = torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(hd) + bias, dim=-1) @ v
                a = a.transpose(1, 2).reshape(b, t, e) @ self.g(p + "attn.out_proj.weight").T
                x = self.ln(x + a, p + "norm1")
                y = x @ self.g(p + "mlp.fc11.weight").T
                gate = x @ self.g(p + "mlp.fc12.weight").T
                x = self.ln(x + (y * F.silu(gate)) @ self.g(p + "mlp.fc2.weight").T, p + "norm2")
            return x

    return NomicBert().eval()


def export(model_dir, path):
    """torch.onnx of `NomicBert` (opset 17; inputs input_ids and attention_mask)."""
    import torch

    m = torch_model(model_dir)
    ids = torch.tensor([[101, 2019, 2742, 102], [101, 2117, 102, 0]])
    mask = (ids != 0).long()
    axes = {"input_ids": {0: "batch", 1: "seq"}, "attention_mask": {0: "batch", 1: "seq"},
            "last_hidden_state": {0: "batch", 1: "seq"}}
    with torch.no_grad():
        torch.onnx.export(m, (ids, mask), str(path), input_names=["input_ids", "attention_mask"],
                          output_names=["last_hidden_state"], dynamic_axes=axes, opset_version=17, dynamo=False)


if __name__ == "__main__":
    print(write_model(sys.argv[1], sys.argv[2]))
