"""The PyTorch peer of benches/gpu_embed.py: the same texts through a BERT-base-shaped encoder
(12 layers, 768 wide, 12 heads, GELU MLP 3072, learned positions, random weights) in bf16 with
scaled_dot_product_attention, batched as ri-batch batches: texts sorted by length, longest first,
each batch's padded size (longest x count) within batch_tokens. Mean pooling over the real
tokens and L2 normalisation, vectors copied back to the host, as ri-batch does.

It reads the corpus gpu_embed.py wrote (one text per file, words `w<id>`, each word one token),
and prefixes each text with the two tokens ri-batch's nomic task prefix costs
(`search_document:` is two words to that word-level tokenizer), so both sides embed the same
number of tokens. The clock runs from the first batch to the last vector on the host; building
the model is not timed (ri-batch's figure excludes loading too).

    python benches/torch_peer.py CORPUS_DIR [--device cuda:0] [--dtype bf16]
        [--batch-tokens 8192,16384,32768] [--json]

Needs torch. Prints one table row (or one JSON object with --json) per batch_tokens.
"""
import argparse
import json
import os
import sys
import time

import torch
import torch.nn.functional as F
from torch import nn

PREFIX = 2  # `search_document:` under a whitespace word-level tokenizer: two tokens


class Layer(nn.Module):
    def __init__(self, d, heads, inner):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(d, 3 * d)
        self.out = nn.Linear(d, d)
        self.ln1 = nn.LayerNorm(d, eps=1e-12)
        self.fc1 = nn.Linear(d, inner)
        self.fc2 = nn.Linear(inner, d)
        self.ln2 = nn.LayerNorm(d, eps=1e-12)

    def forward(self, x, mask):
        b, n, d = x.shape
        q, k, v = self.qkv(x).view(b, n, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        a = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        x = self.ln1(x + self.out(a.transpose(1, 2).reshape(b, n, d)))
        return self.ln2(x + self.fc2(F.gelu(self.fc1(x))))


class BertBase(nn.Module):
    def __init__(self, vocab=30522, d=768, heads=12, layers=12, inner=3072, positions=512):
        super().__init__()
        self.words = nn.Embedding(vocab, d)
        self.positions = nn.Embedding(positions, d)
        self.types = nn.Embedding(2, d)
        self.ln = nn.LayerNorm(d, eps=1e-12)
        self.layers = nn.ModuleList(Layer(d, heads, inner) for _ in range(layers))

    def forward(self, ids, keep):
        pos = torch.arange(ids.shape[1], device=ids.device)
        x = self.ln(self.words(ids) + self.positions(pos)[None] + self.types.weight[0])
        # Additive mask over the keys: padded keys never attend.
        mask = torch.zeros(keep.shape, dtype=x.dtype, device=x.device)
        mask = mask.masked_fill(~keep, torch.finfo(x.dtype).min)[:, None, None, :]
        for layer in self.layers:
            x = layer(x, mask)
        w = keep[..., None].to(torch.float32)
        pooled = (x.float() * w).sum(1) / w.sum(1)
        return F.normalize(pooled, dim=-1)


def read_corpus(corpus, vocab):
    texts = []
    for name in sorted(os.listdir(corpus)):
        with open(os.path.join(corpus, name)) as f:
            ids = [int(w[1:]) % vocab for w in f.read().split()]
        texts.append([0] * PREFIX + ids[: 512 - PREFIX])
    return texts


def batches(lengths, budget):
    order = sorted(range(len(lengths)), key=lambda i: -lengths[i])
    out, cur = [], []
    for i in order:
        # Longest first: the batch's first text sets its padded length.
        if cur and lengths[cur[0]] * (len(cur) + 1) > budget:
            out.append(cur)
            cur = []
        cur.append(i)
    if cur:
        out.append(cur)
    return out


def main():
    p = argparse.ArgumentParser()
    p.add_argument("corpus")
    p.add_argument("--device", default="cuda:0")
    p.add_argument("--dtype", default="bf16", choices=["bf16", "f16", "f32"])
    p.add_argument("--batch-tokens", default="8192,16384,32768")
    p.add_argument("--json", action="store_true")
    a = p.parse_args()
    dtype = {"bf16": torch.bfloat16, "f16": torch.float16, "f32": torch.float32}[a.dtype]
    device = torch.device(a.device)
    torch.manual_seed(7)
    model = BertBase().to(device=device, dtype=dtype).eval()
    texts = read_corpus(a.corpus, 30522)
    lengths = [len(t) for t in texts]
    tokens = sum(lengths)
    for budget in [int(x) for x in a.batch_tokens.split(",")]:
        plan = batches(lengths, budget)
        vectors = [None] * len(texts)
        sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
        sync()
        t0 = time.perf_counter()
        with torch.inference_mode():
            for batch in plan:
                n = lengths[batch[0]]
                ids = torch.zeros((len(batch), n), dtype=torch.long)
                for row, i in enumerate(batch):
                    ids[row, : lengths[i]] = torch.tensor(texts[i])
                lens = torch.tensor([lengths[i] for i in batch])
                keep = torch.arange(n)[None, :] < lens[:, None]
                out = model(ids.to(device, non_blocking=True), keep.to(device)).cpu()
                for row, i in enumerate(batch):
                    vectors[i] = out[row]
        sync()
        secs = time.perf_counter() - t0
        bad = sum(1 for v in vectors if v is None or not torch.isfinite(v).all())
        if bad:
            sys.exit(f"torch peer: {bad} vectors missing or not finite at batch_tokens {budget}")
        row = {"batch_tokens": budget, "device": a.device, "dtype": a.dtype, "tokens": tokens,
               "texts": len(texts), "batches": len(plan), "seconds": secs,
               "tokens_per_second": tokens / secs}
        if a.json:
            print(json.dumps(row), flush=True)
        else:
            print(f"| {budget} | {a.device} | {a.dtype} | {tokens} | {secs:.1f} | "
                  f"{tokens / secs:,.0f} | torch peer |", flush=True)


if __name__ == "__main__":
    main()
