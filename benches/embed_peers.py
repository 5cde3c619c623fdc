"""One round of the CPU embedding peers on the texts of the ri-batch embedding benchmark
(`benches/embed.rs` calls it between its own rounds, so that the rounds alternate):
sentence-transformers (PyTorch, f32), ONNX Runtime f32 and ONNX Runtime int8 (dynamic quantization
of the same weights, `onnxruntime.quantization.quantize_dynamic`, int8 weights), each on the same
model directory, texts and thread count. The ONNX files are exported once (torch.onnx) into
`<bench dir>/onnx/` and reused by later rounds.

    python embed_peers.py BENCH_DIR MODEL_DIR THREADS OUT_JSON

BENCH_DIR holds `texts.json` and `ri_batch_vectors.json` (ri-batch's f32 vectors, in text order);
OUT_JSON gets each peer's tokens/s (median of 3 timed runs after a warm-up) and its vectors' mean and
minimum cosine to ri-batch's f32 vectors.
"""
import json
import os
import statistics
import sys
import time

bench_dir, model_dir, threads, out_path = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
os.environ.setdefault("OMP_NUM_THREADS", str(threads))

import numpy as np  # noqa: E402
import onnxruntime as ort  # noqa: E402
import torch  # noqa: E402
from sentence_transformers import SentenceTransformer  # noqa: E402

torch.set_num_threads(threads)
texts = json.load(open(f"{bench_dir}/texts.json"))
ours = np.array(json.load(open(f"{bench_dir}/ri_batch_vectors.json")), dtype=np.float64)
st = SentenceTransformer(model_dir, device="cpu")
max_len = st.max_seq_length
tokenizer = st.tokenizer
encoded = [tokenizer(t, truncation=True, max_length=max_len) for t in texts]
tokens = sum(len(e["input_ids"]) for e in encoded)


def agreement(vectors):
    v = np.asarray(vectors, dtype=np.float64)
    cos = (v * ours).sum(1) / (np.linalg.norm(v, axis=1) * np.linalg.norm(ours, axis=1))
    return float(cos.mean()), float(cos.min())


def timed(run):
    run()
    runs = []
    for _ in range(3):
        t = time.perf_counter()
        run()
        runs.append(time.perf_counter() - t)
    return tokens / statistics.median(runs)


def export(onnx_dir):
    """The model's encoder as ONNX (f32), and its int8 dynamic quantization; once per bench dir."""
    f32, int8 = f"{onnx_dir}/model.onnx", f"{onnx_dir}/model_int8.onnx"
    if os.path.exists(f32) and os.path.exists(int8):
        return f32, int8
    os.makedirs(onnx_dir, exist_ok=True)
    bert = st[0].auto_model.eval()
    sample = tokenizer(["an example text", "a second, longer example text"], padding=True, return_tensors="pt")
    args = (sample["input_ids"], sample["attention_mask"], sample["token_type_ids"])
    names = ["input_ids", "attention_mask", "token_type_ids"]
    axes = {n: {0: "batch", 1: "seq"} for n in names}
    axes["last_hidden_state"] = {0: "batch", 1: "seq"}
    kwargs = dict(input_names=names, output_names=["last_hidden_state"], dynamic_axes=axes, opset_version=17)
    with torch.no_grad():
        try:
            torch.onnx.export(bert, args, f32, dynamo=False, **kwargs)
        except TypeError:
            torch.onnx.export(bert, args, f32, **kwargs)
    from onnxruntime.quantization import QuantType, quantize_dynamic

    quantize_dynamic(f32, int8, weight_type=QuantType.QInt8)
    return f32, int8


def ort_embed(session):
    """Length-sorted batches of 32, each padded to its longest text; mean pooling; normalised."""
    order = sorted(range(len(encoded)), key=lambda i: len(encoded[i]["input_ids"]))
    out = [None] * len(encoded)
    for s in range(0, len(order), 32):
        batch = order[s : s + 32]
        width = max(len(encoded[i]["input_ids"]) for i in batch)
        ids = np.zeros((len(batch), width), dtype=np.int64)
        mask = np.zeros((len(batch), width), dtype=np.int64)
        for r, i in enumerate(batch):
            n = len(encoded[i]["input_ids"])
            ids[r, :n] = encoded[i]["input_ids"]
            mask[r, :n] = 1
        hidden = session.run(None, {"input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros_like(ids)})[0]
        pooled = (hidden * mask[:, :, None]).sum(1) / mask.sum(1, keepdims=True)
        pooled /= np.linalg.norm(pooled, axis=1, keepdims=True)
        for r, i in enumerate(batch):
            out[i] = pooled[r]
    return out


def session(path):
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = threads
    opts.inter_op_num_threads = 1
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    return ort.InferenceSession(path, opts, providers=["CPUExecutionProvider"])


f32_path, int8_path = export(f"{bench_dir}/onnx")
result = {"tokens": tokens, "threads": threads, "torch": torch.__version__, "onnxruntime": ort.__version__}
peers = {
    "sentence_transformers_f32": lambda: st.encode(texts, batch_size=32),
    "onnxruntime_f32": (lambda s: lambda: ort_embed(s))(session(f32_path)),
    "onnxruntime_int8": (lambda s: lambda: ort_embed(s))(session(int8_path)),
}
for name, run in peers.items():
    tps = timed(run)
    mean_cos, min_cos = agreement(run())
    result[name] = {"tokens_per_second": tps, "mean_cosine": mean_cos, "min_cosine": min_cos}
json.dump(result, open(out_path, "w"))
