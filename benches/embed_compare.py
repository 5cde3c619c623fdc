"""sentence-transformers (PyTorch, CPU, all threads) on the texts the ri-batch embedding benchmark
used, same model directory; median of 5 timed runs after a warm-up."""
import json
import statistics
import sys
import time

import torch
from sentence_transformers import SentenceTransformer

d, model_dir = sys.argv[1], sys.argv[2]
texts = json.load(open(f"{d}/texts.json"))
ours = json.load(open(f"{d}/ri_batch.json"))
model = SentenceTransformer(model_dir, device="cpu")
tokens = sum(len(model.tokenizer(t, truncation=True, max_length=model.max_seq_length)["input_ids"]) for t in texts)
model.encode(texts, batch_size=32)
runs = []
for _ in range(5):
    t = time.perf_counter()
    model.encode(texts, batch_size=32)
    runs.append(time.perf_counter() - t)
s = statistics.median(runs)
print(f"torch {torch.__version__}, {torch.get_num_threads()} threads; {len(texts)} texts, {tokens} tokens")
print(f"sentence-transformers: {tokens / s:.0f} tokens/s")
print(f"ri-batch (candle):     {ours['tokens_per_second']:.0f} tokens/s  -> ratio {ours['tokens_per_second'] / (tokens / s):.2f}x")
print(f"GEMM {ours['gemm_gflops']:.1f} GFLOP/s, {ours['flops_per_token'] / 1e6:.1f} MFLOP/token, efficiency {ours['efficiency']:.1%}")
