"""Independent numpy forward pass of a NomicBERT encoder (nomic-embed-text architecture): token and
token-type embeddings, embedding LayerNorm, post-norm (or pre-norm) blocks with fused QKV, rotary
position embeddings (rotate-half, GPT-NeoX style, or interleaved, GPT-J style), optional biases,
softmax attention, SwiGLU MLP, then
mean pooling, optional Matryoshka (LayerNorm without affine, truncate) and L2 normalisation.

usage: nomic_reference.py MODEL_DIR IDS_JSON [DIMS]   (prints a JSON list of vectors)
Reads model.safetensors directly (8-byte header length, JSON header, little-endian f32 data).
"""
import json
import struct
import sys

import numpy as np


def load_safetensors(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    out = {}
    for name, meta in header.items():
        if name == "__metadata__":
            continue
        assert meta["dtype"] == "F32", meta
        a, b = meta["data_offsets"]
        out[name] = np.frombuffer(data[a:b], dtype="<f4").reshape(meta["shape"]).astype(np.float64)
    return out


def layer_norm(x, w, b, eps):
    mu = x.mean(-1, keepdims=True)
    var = ((x - mu) ** 2).mean(-1, keepdims=True)
    y = (x - mu) / np.sqrt(var + eps)
    return y * w + b if w is not None else y


def rope(x, base, interleaved):
    # x: (heads, seq, dim); frequencies base^(-2i/dim); rotate-half (GPT-NeoX) pairs i and i + d/2,
    # interleaved (GPT-J) pairs 2i and 2i + 1
    h, t, d = x.shape
    inv = 1.0 / (base ** (np.arange(0, d // 2) * 2.0 / d))
    ang = np.arange(t)[:, None] * inv[None, :]
    cos, sin = np.cos(ang), np.sin(ang)
    if interleaved:
        x1, x2 = x[..., 0::2], x[..., 1::2]
        out = np.empty_like(x)
        out[..., 0::2], out[..., 1::2] = x1 * cos - x2 * sin, x2 * cos + x1 * sin
        return out
    x1, x2 = x[..., : d // 2], x[..., d // 2 :]
    return np.concatenate([x1 * cos - x2 * sin, x2 * cos + x1 * sin], axis=-1)


def linear(w, x, name, biased):
    y = x @ w[name + ".weight"].T
    return y + w[name + ".bias"] if biased else y


def embed(w, cfg, ids, dims):
    e, nh = cfg["n_embd"], cfg["n_head"]
    hd = e // nh
    eps = cfg["layer_norm_epsilon"]
    x = w["embeddings.word_embeddings.weight"][ids] + w["embeddings.token_type_embeddings.weight"][0]
    x = layer_norm(x, w["emb_ln.weight"], w["emb_ln.bias"], eps)
    t = len(ids)
    base, inter = cfg["rotary_emb_base"], cfg["rotary_emb_interleaved"]
    qb, b1, b2 = cfg["qkv_proj_bias"], cfg["mlp_fc1_bias"], cfg["mlp_fc2_bias"]
    for i in range(cfg["n_layer"]):
        p = f"encoder.layers.{i}."
        norm = lambda x, n: layer_norm(x, w[p + n + ".weight"], w[p + n + ".bias"], eps)

        def attn(x):
            qkv = linear(w, x, p + "attn.Wqkv", qb)
            q, k, v = (qkv[:, j * e : (j + 1) * e].reshape(t, nh, hd).transpose(1, 0, 2) for j in range(3))
            q, k = rope(q, base, inter), rope(k, base, inter)
            s = q @ k.transpose(0, 2, 1) / np.sqrt(hd)
            s = np.exp(s - s.max(-1, keepdims=True))
            s /= s.sum(-1, keepdims=True)
            return linear(w, (s @ v).transpose(1, 0, 2).reshape(t, e), p + "attn.out_proj", qb)

        def mlp(x):
            y = linear(w, x, p + "mlp.fc11", b1)
            g = linear(w, x, p + "mlp.fc12", b1)
            return linear(w, y * (g / (1.0 + np.exp(-g))), p + "mlp.fc2", b2)

        if cfg["prenorm"]:
            x = x + attn(norm(x, "norm1"))
            x = x + mlp(norm(x, "norm2"))
        else:
            x = norm(x + attn(x), "norm1")
            x = norm(x + mlp(x), "norm2")
    pooled = x.mean(0)
    if dims and dims < e:
        pooled = layer_norm(pooled, None, None, 1e-5)[:dims]
    return pooled / np.linalg.norm(pooled)


model_dir, ids = sys.argv[1], json.loads(sys.argv[2])
dims = int(sys.argv[3]) if len(sys.argv) > 3 else None
cfg = json.load(open(f"{model_dir}/config.json"))
weights = load_safetensors(f"{model_dir}/model.safetensors")
print(json.dumps([embed(weights, cfg, np.array(seq), dims).tolist() for seq in ids]))
