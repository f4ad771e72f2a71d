#!/usr/bin/env python3
"""Writes the embedding reference that tests/e2e/test_embeddings.py compares /v1/embeddings
against.

Hugging Face transformers (CPU torch, float32) loads the SmolLM2 model in models/ through
`gguf_file=` as the base model (AutoModel), runs a handful of texts as one padded batch, and
pools `last_hidden_state` (the final norm applied) two ways: the mean over every token of a
text, and the text's last token; each vector is L2-normalized. The texts cover a short one, a
long one (about 300 tokens, more than one prefill chunk of a small --max-batch-tokens), non-ASCII
text, and several in one batch. Each text is also run alone, and the script refuses to write
when the batched vectors differ from those (padding must not leak into the pooling).

Output (committed; CI has no torch): tests/fixtures/reference/smollm2-embeddings.json with,
per text, its token ids (HF's tokenizer with its special tokens, as a completion prompt is
encoded) and the two unit vectors.

Usage: python3 scripts/make_embedding_reference.py   (after scripts/fetch_model.sh)
Needs: numpy, gguf, torch, transformers, accelerate.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
SMOLLM2 = ROOT / "models" / "SmolLM2-135M-Instruct.Q4_1.gguf"
OUT = ROOT / "tests" / "fixtures" / "reference" / "smollm2-embeddings.json"

LONG_TEXT = " ".join([
    "The lighthouse keeper of the northern island kept a journal for forty years.",
    "Every morning he wrote down the colour of the sea, the direction of the wind and the ships",
    "that passed on the horizon, and every evening he trimmed the wick and polished the great lens",
    "until it shone like a second moon. Visitors were rare: a supply boat came once a month, and",
    "sometimes a scientist arrived to count the seabirds that nested on the cliffs. In the winter",
    "storms the waves climbed the rocks and struck the windows of the tower, and the keeper would",
    "sit by the stove with a cup of tea, listening to the roar and checking the clock so that the",
    "light never failed. When the harbour authority finally replaced him with an automatic lamp,",
    "he packed the journals into a wooden chest and carried them to the mainland library, where",
    "they are still read by sailors, historians and children who want to know what the ocean was",
    "like on a particular Tuesday in March many decades ago. Some pages record nothing but fog;",
    "others describe whales, shipwrecks, rescues in the dark, a comet seen low over the water, and",
    "the quiet satisfaction of a lamp that burned all night. The last entry says only that the sea",
    "was calm, the wind was from the west, and the light, as always, was lit at dusk.",
])

TEXTS = [
    "Hello, world!",
    "The quick brown fox jumps over the lazy dog.",
    "What is the capital of France?",
    "Größe, naïve café — 東京は日本の首都です。 Привет, мир! 😀",
    LONG_TEXT,
]


def pool(hidden: np.ndarray, n_tokens: int) -> tuple[np.ndarray, np.ndarray]:
    """Mean- and last-pooled unit vectors of the first n_tokens rows of `hidden`."""
    rows = hidden[:n_tokens].astype(np.float64)
    mean = rows.mean(axis=0)
    last = rows[-1]
    return mean / np.linalg.norm(mean), last / np.linalg.norm(last)


def cosine(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.dot(a, b) / (np.linalg.norm(a) * np.linalg.norm(b)))


def main() -> int:
    if not SMOLLM2.exists():
        print(f"missing {SMOLLM2}: run scripts/fetch_model.sh", file=sys.stderr)
        return 1
    import torch
    import transformers
    from transformers import AutoModel, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(SMOLLM2.parent), gguf_file=SMOLLM2.name)
    model = AutoModel.from_pretrained(str(SMOLLM2.parent), gguf_file=SMOLLM2.name,
                                      dtype=torch.float32)
    model.eval()

    ids = [tok(text)["input_ids"] for text in TEXTS]
    # One right-padded batch; the pad id is irrelevant under the attention mask.
    width = max(len(t) for t in ids)
    input_ids = torch.tensor([t + [0] * (width - len(t)) for t in ids])
    mask = torch.tensor([[1] * len(t) + [0] * (width - len(t)) for t in ids])
    with torch.no_grad():
        batched = model(input_ids=input_ids, attention_mask=mask).last_hidden_state.float().numpy()

    records = []
    worst = 1.0
    for i, tokens in enumerate(ids):
        mean, last = pool(batched[i], len(tokens))
        with torch.no_grad():
            alone = model(input_ids=torch.tensor([tokens])).last_hidden_state[0].float().numpy()
        alone_mean, alone_last = pool(alone, len(tokens))
        worst = min(worst, cosine(mean, alone_mean), cosine(last, alone_last))
        records.append({
            "text": TEXTS[i],
            "tokens": tokens,
            "mean": [float(f"{v:.7g}") for v in mean],
            "last": [float(f"{v:.7g}") for v in last],
        })
        print(f"text {i}: {len(tokens)} tokens")
    print(f"batched against alone: worst cosine {worst:.6f}")
    if worst < 0.9999:
        print("the padded batch changed the vectors; not written", file=sys.stderr)
        return 1

    meta = {
        "model": SMOLLM2.name,
        "n_embd": int(batched.shape[-1]),
        "reference": (f"transformers {transformers.__version__}, torch {torch.__version__}, "
                      "float32 on CPU; AutoModel last_hidden_state, mean and last-token pooling, "
                      "L2-normalized"),
        "texts": records,
    }
    with open(OUT, "w", encoding="utf-8") as f:
        json.dump(meta, f, indent=1, ensure_ascii=False)
        f.write("\n")
    print(f"wrote {OUT}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
