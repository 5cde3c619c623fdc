"""Embedding throughput of the ri-batch binary alone (no cargo, no Rust, no Python packages: the
standard library only), for a GPU machine that has the binary and its CUDA libraries.

It writes a random-weight model of the nomic-embed-text-v1.5 shape (12 layers, 768 wide, SwiGLU
3072, rotary, 30,528-word vocabulary) with candle's nomic_bert tensor names, a word-level
tokenizer over that vocabulary, and a generated corpus of TOKENS tokens (texts of 32 to 512
words, each word one token). Then, for each batch_tokens, one `ri-batch run --stages
scan,chunk,embed` with a fresh embedding cache (every text is embedded), and the embed stage's own
figures from its manifest: tokens embedded, seconds, tokens/s.

    python3 benches/gpu_embed.py BIN [--device cuda:0] [--dtype bf16] [--tokens 5000000]
        [--batch-tokens 8192,16384,32768] [--work DIR] [--layers 12 --width 768 --inner 3072]

The FLOP ratio printed beside the figures compares this shape with a BERT-base encoder (GELU MLP
of two 768x3072 matrices), the usual PyTorch peer: per token and layer, the projections cost
2 x (4 d^2 + 3 d f) here against 2 x (4 d^2 + 2 d f) there (attention scores are the same).
With `--peer PYTHON` (an interpreter that has torch), the same texts then go through
benches/torch_peer.py, a BERT-base-shaped encoder in the same dtype with SDPA and the same
length-sorted batching, and a second table sets ri-batch beside it: the plain ratio of tokens/s
and the ratio weighted by the FLOP ratio (ri-batch's shape does 1.33x the work per token).
"""
import argparse
import array
import json
import os
import random
import shutil
import struct
import subprocess
import sys
import time

p = argparse.ArgumentParser()
p.add_argument("binary")
p.add_argument("--device", default="cuda:0")
p.add_argument("--dtype", default="bf16")
p.add_argument("--tokens", type=int, default=5_000_000)
p.add_argument("--batch-tokens", default="8192,16384,32768")
p.add_argument("--work", default="gpu-embed-bench")
p.add_argument("--layers", type=int, default=12)
p.add_argument("--width", type=int, default=768)
p.add_argument("--inner", type=int, default=3072)
p.add_argument("--heads", type=int, default=12)
p.add_argument("--vocab", type=int, default=30528)
p.add_argument("--peer", metavar="PYTHON", help="an interpreter with torch: run the PyTorch peer")
a = p.parse_args()

rng = random.Random(7)
work = os.path.abspath(a.work)
model = os.path.join(work, "model")
os.makedirs(model, exist_ok=True)


def write_model():
    e, f, v, layers = a.width, a.inner, a.vocab, a.layers
    config = {
        "model_type": "nomic_bert", "architectures": ["NomicBertModel"], "vocab_size": v,
        "n_embd": e, "n_head": a.heads, "n_layer": layers, "n_inner": f, "n_positions": 8192,
        "type_vocab_size": 2, "layer_norm_epsilon": 1e-12, "rotary_emb_fraction": 1.0,
        "rotary_emb_base": 1000, "rotary_emb_interleaved": False, "qkv_proj_bias": False,
        "mlp_fc1_bias": False, "mlp_fc2_bias": False, "activation_function": "swiglu",
        "prenorm": False,
    }
    with open(os.path.join(model, "config.json"), "w") as out:
        json.dump(config, out)
    vocab = {"[UNK]": 0}
    vocab.update({f"w{i}": i for i in range(1, v)})
    tokenizer = {
        "version": "1.0", "truncation": None, "padding": None, "added_tokens": [],
        "normalizer": None, "pre_tokenizer": {"type": "Whitespace"}, "post_processor": None,
        "decoder": None, "model": {"type": "WordLevel", "vocab": vocab, "unk_token": "[UNK]"},
    }
    with open(os.path.join(model, "tokenizer.json"), "w") as out:
        json.dump(tokenizer, out)
    # candle's nomic_bert names. Random values from one block, repeated: the speed of a matrix
    # product does not depend on its values.
    s = e ** -0.5
    tensors = [("embeddings.word_embeddings.weight", [v, e], s, 0.0),
               ("embeddings.token_type_embeddings.weight", [2, e], s, 0.0),
               ("emb_ln.weight", [e], 0.1, 1.0), ("emb_ln.bias", [e], 0.1, 0.0)]
    for i in range(layers):
        q = f"encoder.layers.{i}."
        tensors += [(q + "attn.Wqkv.weight", [3 * e, e], s, 0.0),
                    (q + "attn.out_proj.weight", [e, e], s, 0.0),
                    (q + "mlp.fc11.weight", [f, e], s, 0.0),
                    (q + "mlp.fc12.weight", [f, e], s, 0.0),
                    (q + "mlp.fc2.weight", [e, f], f ** -0.5, 0.0)]
        for n in ("norm1", "norm2"):
            tensors += [(q + n + ".weight", [e], 0.1, 1.0), (q + n + ".bias", [e], 0.1, 0.0)]
    block = [rng.uniform(-1.0, 1.0) for _ in range(1 << 16)]
    header, offset = {}, 0
    for name, shape, _, _ in tensors:
        n = 1
        for d in shape:
            n *= d
        header[name] = {"dtype": "F32", "shape": shape, "data_offsets": [offset, offset + 4 * n]}
        offset += 4 * n
    head = json.dumps(header).encode()
    head += b" " * (-len(head) % 8)
    with open(os.path.join(model, "model.safetensors"), "wb") as out:
        out.write(struct.pack("<Q", len(head)))
        out.write(head)
        for name, shape, scale, shift in tensors:
            n = 1
            for d in shape:
                n *= d
            chunk = array.array("f", (shift + scale * x for x in block))
            full, rest = divmod(n, len(block))
            for _ in range(full):
                chunk.tofile(out)
            array.array("f", chunk[:rest]).tofile(out)
    return offset


def write_corpus():
    corpus = os.path.join(work, "corpus")
    shutil.rmtree(corpus, ignore_errors=True)
    os.makedirs(corpus)
    left, n = a.tokens, 0
    while left > 0:
        words = min(left, rng.randint(32, 512))
        text = " ".join(f"w{rng.randint(1, a.vocab - 1)}" for _ in range(words))
        # One text per file, a line of its own: the chunker keeps it whole (max_tokens below).
        with open(os.path.join(corpus, f"t{n:06}.txt"), "w") as out:
            out.write(text + "\n")
        left -= words
        n += 1
    return corpus, n


size = write_model()
corpus, texts = write_corpus()
e, f = a.width, a.inner
flops = 2 * (4 * e * e + 3 * e * f) / (2 * (4 * e * e + 2 * e * f))
print(f"model: {a.layers} layers, {e} wide, SwiGLU {f}: {size / 1e6:.0f} MB of f32 weights")
print(f"corpus: {a.tokens} tokens in {texts} texts of 32-512 tokens")
print(f"FLOPs per token of the projections, this shape / BERT-base: {flops:.2f}x")
print()
print("| batch_tokens | device | dtype | tokens | embed s | tokens/s | whole command s |")
print("|---|---|---|---|---|---|---|")
ours = {}
for b in [int(x) for x in a.batch_tokens.split(",")]:
    run = os.path.join(work, f"run-{b}")
    shutil.rmtree(run, ignore_errors=True)
    os.makedirs(run)
    pipeline = os.path.join(run, "pipeline.toml")
    with open(pipeline, "w") as out:
        out.write(
            f'[pipeline]\nname = "gpu-embed"\noutput_dir = "out"\n'
            f'[[repos]]\nname = "corpus"\ndir = "{corpus}"\n'
            f'[scan]\ninclude = ["*.txt"]\n[chunk]\nmax_tokens = 100000\n'
            # The text alone is embedded (no path line), as the torch peer embeds it.
            f'[index]\nwith_path = false\n'
            f'[embed]\nmodel = "{model}"\ndevice = "{a.device}"\ndtype = "{a.dtype}"\n'
            f'batch_tokens = {b}\nmax_length = 512\ncache_dir = "cache"\n'
        )
    t0 = time.time()
    r = subprocess.run([a.binary, "run", pipeline, "--stages", "scan,chunk,embed", "--quiet"],
                       capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"ri-batch failed at batch_tokens {b}:\n{r.stderr}")
    with open(os.path.join(run, "out", "embed", "manifest.json")) as m:
        stats = json.load(m)["stats"]
    errors = os.path.join(run, "out", "embed", "errors")
    tokens = stats.get("embedded_tokens", 0)
    if not tokens:
        sys.exit(f"nothing was embedded at batch_tokens {b} (see the errors table in {errors})")
    seconds = tokens / stats["tokens_per_second"]
    whole = time.time() - t0
    print(f"| {b} | {a.device} | {a.dtype} | {tokens} | {seconds:.1f} | "
          f"{stats['tokens_per_second']:,.0f} | {whole:.1f} |", flush=True)
    ours[b] = stats["tokens_per_second"]
    shutil.rmtree(os.path.join(run, "cache"), ignore_errors=True)

if a.peer:
    peer = os.path.join(os.path.dirname(os.path.abspath(__file__)), "torch_peer.py")
    r = subprocess.run([a.peer, peer, corpus, "--json", "--device", a.device, "--dtype", a.dtype,
                        "--batch-tokens", a.batch_tokens], capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"the torch peer failed:\n{r.stderr}")
    print()
    print("| batch_tokens | ri-batch tokens/s | torch peer tokens/s | ratio | ratio x FLOPs |")
    print("|---|---|---|---|---|")
    for line in r.stdout.splitlines():
        row = json.loads(line)
        b, theirs = row["batch_tokens"], row["tokens_per_second"]
        print(f"| {b} | {ours[b]:,.0f} | {theirs:,.0f} | {ours[b] / theirs:.2f} | "
              f"{ours[b] / theirs * flops:.2f} |", flush=True)
