"""CPU embeddings through `ri-batch run` against ONNX Runtime at its best, in alternating rounds.

    python embed_run.py RI_BATCH MODEL_DIR WORK_DIR [ROUNDS]

The texts are what users embed: the bundled multi-repo repositories chunked as
`pipelines/multi-repo.toml` chunks them (`[index] with_path = false`, so both sides embed the
same strings: every distinct chunk text and question). ri-batch is timed as users run it:
`ri-batch run P --stages embed --force` with an empty vector cache, f32 and int8; its tokens/s
are the embed manifest's (the stage's own clock: batching, model, cache and Parquet writes) and
the whole command's wall clock is shown beside them.

The peer is ONNX Runtime as its docs recommend for BERT on a CPU: the model exported once with
torch.onnx (transformers' BertModel, opset 17), then
- `f32`: ORT_ENABLE_ALL;
- `f32-fused`: also `onnxruntime.transformers.optimizer` (model_type bert: fused Attention,
  SkipLayerNormalization, BiasGelu), as ORT's transformer docs recommend;
- `int8-per-channel` / `int8-fused-per-channel`: `quantize_dynamic` (QInt8 weights, per channel)
  of the plain graph after the quantization docs' `quant_pre_process`, and of the fused graph;
each with intra_op_num_threads = the cores, inter_op 1, sequential execution, inputs sorted by
length and batched to a token budget (each round keeps the faster of 512 and 2,048 tokens: its
best batching), tokenization, pooling and normalisation inside the timed window.

Prints a table per round, medians, ratios, and vector agreement (mean and worst cosine).

A NomicBERT model directory (`benches/nomic_onnx.py` writes one of nomic-embed-text v1.5's shape
with random weights) is exported by that file's torch forward instead of BertModel; both sides
embed the texts with nomic's task prefixes (`search_document: `, `search_query: `), truncated at
512 tokens, and the transformer optimizer (whose fusions assume BERT's attention) is left out.
INCLUDE (a glob, e.g. `**/*.md`) limits the files scanned, to keep a larger model's rounds short.
"""
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

# The peer sessions, and the batch budgets each is tried at in every round (its best is kept):
# 256 and 4,096 and over were never its best here. Per-tensor int8 is left out: its vectors are
# far from f32's (mean cosine 0.93, worst 0.81 here), no fair stand-in for either int8.
BUDGETS = (512, 2048)
ri, model_dir, work = sys.argv[1], Path(sys.argv[2]).resolve(), Path(sys.argv[3]).resolve()
nomic = json.load(open(model_dir / "config.json")).get("model_type") == "nomic_bert"
PEERS = ("f32", "int8-per-channel") if nomic else ("f32", "f32-fused", "int8-per-channel", "int8-fused-per-channel")
PREFIX = ("search_document: ", "search_query: ") if nomic else ("", "")
rounds = int(sys.argv[4]) if len(sys.argv) > 4 else 3
threads = os.cpu_count() or 2
os.environ.setdefault("OMP_NUM_THREADS", str(threads))
repo = Path(__file__).resolve().parent.parent

import numpy as np  # noqa: E402
import onnxruntime as ort  # noqa: E402
import pyarrow.parquet as pq  # noqa: E402
from tokenizers import Tokenizer  # noqa: E402

work.mkdir(parents=True, exist_ok=True)


def pipeline(dtype):
    """The bench pipeline: multi-repo's repositories, scan and chunk settings, one dense variant."""
    src = (repo / "pipelines/multi-repo.toml").read_text()
    head = src.split("[scan]")[0]
    head = head.replace('root = ".."', f'root = "{repo}"').replace('name = "multi-repo"', f'name = "embed-bench-{dtype}"')
    head = head.replace("[pipeline]", f'[pipeline]\noutput_dir = "{work}/out-{dtype}"')
    scan = "[scan]" + src.split("[scan]")[1].split("[embed]")[0].split("[retrieve]")[0]
    if os.environ.get("INCLUDE"):
        scan = scan.replace("[scan]", f'[scan]\ninclude = ["{os.environ["INCLUDE"]}"]', 1)
    text = head + scan + f"""
[index]
with_path = false

[embed]
model = "{model_dir}"
device = "cpu"
dtype = "{dtype}"
cache_dir = "{work}/cache-{dtype}"

[[variants]]
name = "dense"
retriever = "dense"
packer = "rank"
budget = 1400
"""
    path = work / f"embed-{dtype}.toml"
    path.write_text(text)
    return path


def ri_run(pipe, stages, *more):
    """`ri-batch run` of `stages`; exit 1 (some questions failed) is fine under INCLUDE, whose
    files leave out the ones some questions cite."""
    r = subprocess.run([ri, "run", str(pipe), "--stages", stages, "--quiet", *more], stdout=subprocess.DEVNULL)
    if r.returncode not in ((0, 1) if os.environ.get("INCLUDE") else (0,)):
        raise SystemExit(f"ri-batch run {pipe} --stages {stages} exited {r.returncode}")


def run_ri(dtype):
    """One cold embed stage through `ri-batch run`: (manifest tokens/s, wall tokens/s, tokens)."""
    subprocess.run(["rm", "-rf", str(work / f"cache-{dtype}")], check=True)
    t = time.perf_counter()
    ri_run(pipes[dtype], "embed", "--force")
    wall = time.perf_counter() - t
    stats = json.load(open(work / f"out-{dtype}/embed/manifest.json"))["stats"]
    return stats["tokens_per_second"], stats["embedded_tokens"] / wall, stats["embedded_tokens"]


def ri_vectors(dtype):
    """text → vector of an ri-batch run."""
    out = work / f"out-{dtype}"
    text_of = {}
    for f in (out / "chunk/chunks").glob("*.parquet"):
        t = pq.read_table(f, columns=["chunk_id", "text"]).to_pydict()
        text_of.update((i, PREFIX[0] + x) for i, x in zip(t["chunk_id"], t["text"]))
    for f in (out / "questions/questions").glob("*.parquet"):
        t = pq.read_table(f, columns=["question_id", "question"]).to_pydict()
        text_of.update((i, PREFIX[1] + x) for i, x in zip(t["question_id"], t["question"]))
    vectors = {}
    for sub in ("embeddings", "question_embeddings"):
        for f in (out / "embed" / sub).glob("*.parquet"):
            t = pq.read_table(f, columns=["id", "vector"]).to_pydict()
            for i, v in zip(t["id"], t["vector"]):
                vectors[text_of[i]] = np.asarray(v, dtype=np.float64)
    return vectors


pipes = {d: pipeline(d) for d in ("f32", "int8")}
for d in pipes:
    ri_run(pipes[d], "scan,chunk,questions")
run_ri("f32")
ours = ri_vectors("f32")
texts = sorted(ours)
tokenizer = Tokenizer.from_file(str(model_dir / "tokenizer.json"))
tokenizer.no_padding()
st = model_dir / "sentence_bert_config.json"
max_len = json.load(open(st)).get("max_seq_length", 512) if st.exists() else 512
tokenizer.enable_truncation(max_len)
total_tokens = sum(len(e.ids) for e in tokenizer.encode_batch(texts))


def export():
    """ONNX files of the model (once per work dir): plain, fused, and their int8 quantizations."""
    onnx_dir = work / "onnx"
    files = {k: onnx_dir / f"{k}.onnx" for k in PEERS}
    if all(f.exists() for f in files.values()):
        return files
    onnx_dir.mkdir(exist_ok=True)
    if nomic:
        sys.path.insert(0, str(Path(__file__).resolve().parent))
        import nomic_onnx
        from onnxruntime.quantization import QuantType, quantize_dynamic
        from onnxruntime.quantization.shape_inference import quant_pre_process

        nomic_onnx.export(model_dir, files["f32"])
        pre = onnx_dir / "f32-pre.onnx"
        quant_pre_process(str(files["f32"]), str(pre), skip_symbolic_shape=True)
        quantize_dynamic(str(pre), str(files["int8-per-channel"]), weight_type=QuantType.QInt8, per_channel=True)
        return files
    import torch
    from transformers import AutoTokenizer, BertModel

    bert = BertModel.from_pretrained(str(model_dir)).eval()
    tok = AutoTokenizer.from_pretrained(str(model_dir))
    sample = tok(["an example text", "a second, longer example text"], padding=True, return_tensors="pt")
    names = ["input_ids", "attention_mask", "token_type_ids"]
    axes = {n: {0: "batch", 1: "seq"} for n in names}
    axes["last_hidden_state"] = {0: "batch", 1: "seq"}
    with torch.no_grad():
        torch.onnx.export(bert, tuple(sample[n] for n in names), str(files["f32"]), input_names=names,
                          output_names=["last_hidden_state"], dynamic_axes=axes, opset_version=17, dynamo=False)
    from onnxruntime.quantization import QuantType, quantize_dynamic
    from onnxruntime.transformers import optimizer

    cfg = bert.config
    fused = optimizer.optimize_model(str(files["f32"]), model_type="bert", num_heads=cfg.num_attention_heads,
                                     hidden_size=cfg.hidden_size)
    fused.save_model_to_file(str(files["f32-fused"]))
    # The quantization docs' pre-processing (shape inference and graph clean-up) first.
    import onnx
    from onnxruntime.quantization.shape_inference import quant_pre_process

    pre = onnx_dir / "f32-pre.onnx"
    quant_pre_process(str(files["f32"]), str(pre), skip_symbolic_shape=True)
    quantize_dynamic(str(pre), str(files["int8-per-channel"]), weight_type=QuantType.QInt8, per_channel=True)
    quantize_dynamic(str(files["f32-fused"]), str(files["int8-fused-per-channel"]), weight_type=QuantType.QInt8,
                     per_channel=True, extra_options={"DefaultTensorType": onnx.TensorProto.FLOAT})
    return files


def session(path):
    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    return ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])


def ort_embed(sess, items, budget):
    """Tokenize, sort by length, batch to `budget` padded tokens, run, mean-pool, normalise."""
    enc = tokenizer.encode_batch(items)
    order = sorted(range(len(items)), key=lambda i: -len(enc[i].ids))
    wanted = {i.name for i in sess.get_inputs()}
    out = [None] * len(items)
    at = 0
    while at < len(order):
        longest = len(enc[order[at]].ids)
        n = max(1, budget // longest)
        batch = order[at:at + n]
        at += n
        ids = np.zeros((len(batch), longest), dtype=np.int64)
        mask = np.zeros_like(ids)
        for r, i in enumerate(batch):
            e = enc[i].ids
            ids[r, :len(e)] = e
            mask[r, :len(e)] = 1
        feed = {"input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros_like(ids)}
        hidden = sess.run(None, {k: v for k, v in feed.items() if k in wanted})[0]
        m = mask[:, :, None].astype(np.float32)
        pooled = (hidden * m).sum(1) / np.clip(m.sum(1), 1e-9, None)
        pooled /= np.clip(np.linalg.norm(pooled, axis=1, keepdims=True), 1e-12, None)
        for r, i in enumerate(batch):
            out[i] = pooled[r]
    return out


def timed_ort(sess, budget):
    t = time.perf_counter()
    vectors = ort_embed(sess, texts, budget)
    return total_tokens / (time.perf_counter() - t), vectors


def agreement(a, b):
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    cos = (a * b).sum(1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))
    return float(cos.mean()), float(cos.min())


files = export()
sessions = {k: session(f) for k, f in files.items()}
for s in sessions.values():
    ort_embed(s, texts[:64], 512)  # warm-up
print(f"{len(texts)} distinct texts, {total_tokens} tokens (truncated at {max_len}); {threads} threads; "
      f"onnxruntime {ort.__version__}; each peer at the best of token budgets {BUDGETS} in each round")

results = {k: [] for k in ["ri f32", "ri f32 wall", "ri int8", "ri int8 wall", *sessions]}
peer_vectors = {}
for r in range(rounds):
    for d in ("f32", "int8"):
        tps, wall, tokens = run_ri(d)
        results[f"ri {d}"].append(tps)
        results[f"ri {d} wall"].append(wall)
    for k, s in sessions.items():
        runs = [timed_ort(s, b) for b in BUDGETS]
        tps, vec = max(runs, key=lambda r: r[0])
        results[k].append(tps)
        peer_vectors[k] = vec
    print(f"round {r}: " + ", ".join(f"{k} {v[-1]:,.0f}" for k, v in results.items()), flush=True)
med = {k: statistics.median(v) for k, v in results.items()}
print("\n| side | tokens/s (median of %d) | rounds |" % rounds)
print("|---|---|---|")
for k, v in results.items():
    print(f"| {k} | {med[k]:,.0f} | {', '.join(f'{x:,.0f}' for x in v)} |")
best_f32 = max((k for k in PEERS if k.startswith("f32")), key=med.get)
best_int8 = max((k for k in PEERS if k.startswith("int8")), key=med.get)
print(f"\nri-batch f32 ÷ ORT best f32 ({best_f32}): {med['ri f32'] / med[best_f32]:.2f}")
print(f"ri-batch int8 ÷ ORT best int8 ({best_int8}): {med['ri int8'] / med[best_int8]:.2f}")
print(f"ri-batch int8 ÷ ORT int8-per-channel: {med['ri int8'] / med['int8-per-channel']:.2f}")
ref = [ours[t] for t in texts]
q = ri_vectors("int8")
m, w = agreement([q[t] for t in texts], ref)
print(f"\nri-batch int8 against ri-batch f32: mean cosine {m:.5f}, worst {w:.5f}")
for k, vec in peer_vectors.items():
    m, w = agreement(vec, ref)
    print(f"ORT {k} against ri-batch f32: mean cosine {m:.5f}, worst {w:.5f}")
json.dump({"results": results, "medians": med, "budgets": BUDGETS, "texts": len(texts), "tokens": total_tokens},
          open(work / "embed_run.json", "w"), indent=1)
