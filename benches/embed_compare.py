"""Summary of the embedding benchmark's alternating rounds (`<target>/embed-bench/ri_batch.json`,
written by `cargo bench --bench embed` with RI_EMBED_PEERS set): tokens/s of ri-batch f32 and int8
and of each peer per round, the ratios the targets are stated in, and the peers' vector agreement."""
import json
import sys

d = sys.argv[1]
ours = json.load(open(f"{d}/ri_batch.json"))
rounds = [r for r in ours["rounds"] if r.get("peers")]
print(f"{ours['tokens']} tokens; GEMM {ours['gemm_gflops']:.1f} GFLOP/s, efficiency {ours['efficiency']:.1%}")
if not rounds:
    sys.exit("no peer rounds: run with RI_EMBED_PEERS=<python> (benches/embed_compare.sh does)")
p0 = rounds[0]["peers"]
print(f"torch {p0['torch']}, onnxruntime {p0['onnxruntime']}, {p0['threads']} threads")
print("| round | ri-batch f32 | ri-batch int8 | sentence-transformers | ORT f32 | ORT int8 | f32 ÷ ST | f32 ÷ ORT f32 | int8 ÷ ORT int8 |")
print("|---|---|---|---|---|---|---|---|---|")
for i, r in enumerate(rounds):
    p = r["peers"]
    st, of, oq = (p[k]["tokens_per_second"] for k in ("sentence_transformers_f32", "onnxruntime_f32", "onnxruntime_int8"))
    print(f"| {i} | {r['f32']:.0f} | {r['int8']:.0f} | {st:.0f} | {of:.0f} | {oq:.0f} | {r['f32'] / st:.2f} | {r['f32'] / of:.2f} | {r['int8'] / oq:.2f} |")
for k in ("sentence_transformers_f32", "onnxruntime_f32", "onnxruntime_int8"):
    print(f"{k}: mean cosine to ri-batch f32 {p0[k]['mean_cosine']:.5f}, minimum {p0[k]['min_cosine']:.5f}")
print(f"ri-batch int8: mean cosine to f32 {ours['int8_mean_cosine']:.5f}, minimum {ours['int8_min_cosine']:.5f}")
