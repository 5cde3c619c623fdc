"""llama.cpp (llama-cpp-python) as the reader's peer, on the prompts a ri-batch round cached.

    reader_peer.py MODEL.gguf CACHE_DIR THREADS   -> JSON on stdout: seconds (model load included,
        as ri-batch's are), prompt tokens, and P(NONE) per prompt
    reader_peer.py --report WORK ROUNDS           -> the comparison table of benches/reader_compare.sh

Each prompt is evaluated whole (n_batch 512), then the refusal probability is read from the first
reply token's logits over `NONE` and `E`, as the product does, and a few greedy reply tokens are
decoded (the product decodes its grammar-constrained IDs: a handful of steps)."""
import glob
import json
import math
import os
import statistics
import sys
import time


def readings(cache):
    out = {}
    for f in sorted(glob.glob(f"{cache}/*/*.json")):
        c = json.load(open(f))
        out[os.path.basename(f)] = c
    return out


def last_logits(llm):
    """The logits of the last evaluated token (without logits_all, the only row llama.cpp kept)."""
    import numpy as np

    return np.ctypeslib.as_array(llm._ctx.get_logits(), shape=(llm.n_vocab(),)).copy()


def peer(model, cache, threads):
    from llama_cpp import Llama

    cached = readings(cache)
    start = time.perf_counter()
    longest = max(c["reading"]["prompt_tokens"] for c in cached.values())
    # llama.cpp's default repacks weights for its CPU kernels (faster: 0.5B prompts 77-81 ->
    # 94-97 tokens/s on an AVX2 machine); PEER_REPACK=0 turns it off where it crashes (seen on a
    # CPU with AMX).
    repack = os.environ.get("PEER_REPACK", "1") != "0"
    llm = Llama(model_path=model, n_threads=threads, n_threads_batch=threads, n_ctx=longest + 64,
                n_batch=512, use_extra_bufts=repack, verbose=False)
    none = llm.tokenize(b"NONE", add_bos=False, special=False)
    e = llm.tokenize(b"E", add_bos=False, special=False)
    assert len(none) == 1 and len(e) == 1, (none, e)
    load = time.perf_counter() - start
    p, tokens = {}, 0
    for key, c in cached.items():
        ids = llm.tokenize(c["prompt"].encode(), add_bos=False, special=True)
        tokens += len(ids)
        llm.reset()
        llm.eval(ids)
        logits = last_logits(llm)
        ln, le = float(logits[none[0]]), float(logits[e[0]])
        m = max(ln, le)
        p[key] = math.exp(ln - m) / (math.exp(ln - m) + math.exp(le - m))
        for _ in range(4):
            llm.eval([int(logits.argmax())])
            logits = last_logits(llm)
    seconds = time.perf_counter() - start
    json.dump({"seconds": seconds, "load_seconds": load, "tokens": tokens, "questions": len(p),
               "p_none": p}, sys.stdout)


def report(work, rounds):
    rows, ratios, diffs, agree, n = [], [], [], 0, 0
    for r in range(1, rounds + 1):
        ours = json.load(open(f"{work}/ours-{r}.json"))
        theirs = json.load(open(f"{work}/peer-{r}.json"))
        cached = readings(f"{work}/cache-{r}")
        tokens = sum(c["reading"]["prompt_tokens"] for c in cached.values())
        assert tokens == theirs["tokens"], (tokens, theirs["tokens"])
        q = len(cached)
        ratio = theirs["seconds"] / ours["seconds"]
        ratios.append(ratio)
        rows.append((r, q, tokens, ours["seconds"], theirs["seconds"], ratio))
        for key, c in cached.items():
            a, b = c["reading"]["refusal_prob"], theirs["p_none"][key]
            diffs.append(abs(a - b))
            agree += (a >= 0.5) == (b >= 0.5)
            n += 1
    print("round  prompts  tokens   ri-batch run          llama.cpp             speed ratio")
    for r, q, t, a, b, ratio in rows:
        print(f"{r:>5}  {q:>7}  {t:>6}   {a:6.1f} s {t / a:6.1f} tok/s {a / q:5.1f} s/q"
              f"   {b:6.1f} s {t / b:6.1f} tok/s {b / q:5.1f} s/q   {ratio:.2f}x")
    print(f"median speed ratio (llama.cpp seconds / ri-batch seconds): {statistics.median(ratios):.2f}x")
    print(f"P(NONE) ri-batch vs llama.cpp: max |diff| {max(diffs):.4f}, median {statistics.median(diffs):.4f}; "
          f"same side of 0.5 on {agree}/{n}")


if __name__ == "__main__":
    if sys.argv[1] == "--report":
        report(sys.argv[2], int(sys.argv[3]))
    else:
        peer(sys.argv[1], sys.argv[2], int(sys.argv[3]))
