#!/usr/bin/env python3
"""Writes the reference fixtures that the CPU backend tests compare against.

1. Small random LLaMA-family models (fixed seeds) as GGUF files, written with gguf-py's
   GGUFWriter: several shapes (multi-head and grouped-query attention, head_dim 64 and 128,
   tied and untied output, qwen2 with attention biases and NeoX RoPE, linear and llama3 RoPE
   scaling) and tensor types (F16, BF16, Q8_0, Q4_K, Q6_K). K-quant blocks are random valid
   bytes, so every bit of the layout is exercised.
2. Hugging Face transformers (CPU torch, float32), loading each GGUF through `gguf_file=`,
   runs a few prompts (token id lists) and records the full logits of the last three prompt
   positions and 32 greedy tokens per prompt. The same for the SmolLM2 model in models/
   when it is present.

Outputs, in tests/fixtures/reference/ (committed; CI has no torch):
  <name>.gguf          the random models
  <name>.json          per prompt: tokens, logit positions, greedy tokens, and per greedy step
                       the runner-up token and the top-1 minus runner-up logit margin
  <name>.logits.bin    float32 little-endian, [prompt][position][n_vocab]

Usage: python3 scripts/make_reference.py [--models-only] [--skip-smollm2]
Needs: numpy, gguf, torch, transformers, accelerate (pip install torch transformers accelerate).
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import gguf
from gguf import GGMLQuantizationType as QT

ROOT = Path(__file__).resolve().parent.parent
OUT_DIR = ROOT / "tests" / "fixtures" / "reference"
SMOLLM2 = ROOT / "models" / "SmolLM2-135M-Instruct.Q4_1.gguf"
N_GREEDY = 32
N_LOGIT_POSITIONS = 3


@dataclass
class ModelSpec:
    name: str
    arch: str
    seed: int
    n_vocab: int
    n_embd: int
    n_layer: int
    n_head: int
    n_head_kv: int
    n_ff: int
    matrix_type: QT
    embd_type: QT
    output_type: QT | None  # None: tied to token_embd
    rope_theta: float = 10000.0
    norm_eps: float = 1e-5
    n_ctx_train: int = 512
    # GGUF rope scaling metadata and the matching transformers rope_parameters (or None).
    rope_scaling: dict | None = None
    # Per-tensor type overrides (GGUF name suffix -> type), e.g. {"attn_v.weight": QT.Q6_K}.
    overrides: dict = field(default_factory=dict)


SPECS = [
    # Multi-head attention, head_dim 64, untied F16 output, three layers.
    ModelSpec("tiny-llama-f16", "llama", seed=1, n_vocab=384, n_embd=128, n_layer=3, n_head=2, n_head_kv=2,
              n_ff=320, matrix_type=QT.F16, embd_type=QT.F16, output_type=QT.F16,
              overrides={"ffn_up.weight": QT.BF16}),
    # Grouped-query attention (2 query heads per KV head), head_dim 128, tied Q8_0 embeddings.
    ModelSpec("tiny-gqa-q8_0", "llama", seed=2, n_vocab=384, n_embd=256, n_layer=2, n_head=2, n_head_kv=1,
              n_ff=512, matrix_type=QT.Q8_0, embd_type=QT.Q8_0, output_type=None, rope_theta=500000.0),
    # Q4_K matrices with a Q6_K output and V projection (a Q4_K_M-like mix), GQA, llama3
    # RoPE scaling with a short original context so that it changes the frequencies in use.
    ModelSpec("tiny-gqa-q4_k", "llama", seed=3, n_vocab=512, n_embd=256, n_layer=2, n_head=4, n_head_kv=2,
              n_ff=768, matrix_type=QT.Q4_K, embd_type=QT.Q4_K, output_type=QT.Q6_K,
              overrides={"attn_v.weight": QT.Q6_K},
              rope_scaling={"type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                            "original_context_length": 64}),
    # qwen2: q/k/v biases, NeoX RoPE, linear RoPE scaling, GQA.
    ModelSpec("tiny-qwen2-q8_0", "qwen2", seed=4, n_vocab=384, n_embd=128, n_layer=2, n_head=2, n_head_kv=1,
              n_ff=256, matrix_type=QT.Q8_0, embd_type=QT.F16, output_type=QT.Q8_0, norm_eps=1e-6,
              rope_scaling={"type": "linear", "factor": 2.0}),
]


# ----------------------------------------------------------------------------------------
# Random tensors in each storage type.

def f16_bytes(values: np.ndarray) -> np.ndarray:
    return np.asarray(values, dtype=np.float16).view(np.uint8).reshape(values.shape[0], -1)


def random_q4_k(rng: np.random.Generator, rows: int, cols: int, std: float) -> np.ndarray:
    """Random valid Q4_K super-blocks: x = d*sc*q - dmin*m, centred near zero."""
    n_blocks = rows * cols // 256
    out = np.zeros((n_blocks, 144), dtype=np.uint8)
    sc = rng.integers(24, 64, size=(n_blocks, 8))
    mins = np.clip(sc + rng.integers(-6, 7, size=(n_blocks, 8)), 0, 63)
    d = std / (np.mean(sc) * 4.6)
    d_arr = (d * rng.uniform(0.7, 1.3, size=n_blocks)).astype(np.float16)
    dmin_arr = (d_arr.astype(np.float32) * 7.5).astype(np.float16)
    out[:, 0:2] = d_arr.view(np.uint8).reshape(n_blocks, 2)
    out[:, 2:4] = dmin_arr.view(np.uint8).reshape(n_blocks, 2)
    packed = np.zeros((n_blocks, 12), dtype=np.uint8)
    packed[:, 0:4] = (sc[:, 0:4] & 63) | ((sc[:, 4:8] >> 4) << 6)
    packed[:, 4:8] = (mins[:, 0:4] & 63) | ((mins[:, 4:8] >> 4) << 6)
    packed[:, 8:12] = (sc[:, 4:8] & 15) | ((mins[:, 4:8] & 15) << 4)
    out[:, 4:16] = packed
    out[:, 16:144] = rng.integers(0, 256, size=(n_blocks, 128), dtype=np.uint8)
    return out.reshape(rows, -1)


def random_q6_k(rng: np.random.Generator, rows: int, cols: int, std: float) -> np.ndarray:
    """Random valid Q6_K super-blocks: x = d*scale*(q - 32)."""
    n_blocks = rows * cols // 256
    out = np.zeros((n_blocks, 210), dtype=np.uint8)
    out[:, 0:192] = rng.integers(0, 256, size=(n_blocks, 192), dtype=np.uint8)  # ql, qh
    scales = rng.integers(-16, 17, size=(n_blocks, 16)).astype(np.int8)
    out[:, 192:208] = scales.view(np.uint8)
    d = (std / (10.0 * 18.5) * rng.uniform(0.7, 1.3, size=n_blocks)).astype(np.float16)
    out[:, 208:210] = d.view(np.uint8).reshape(n_blocks, 2)
    return out.reshape(rows, -1)


def make_matrix(rng: np.random.Generator, qtype: QT, rows: int, cols: int, std: float) -> np.ndarray:
    """Bytes (or floats) of a (rows, cols) matrix stored as qtype."""
    if qtype == QT.Q4_K:
        return random_q4_k(rng, rows, cols, std)
    if qtype == QT.Q6_K:
        return random_q6_k(rng, rows, cols, std)
    values = rng.normal(0.0, std, size=(rows, cols)).astype(np.float32)
    if qtype == QT.F32:
        return values
    if qtype == QT.F16:
        return values.astype(np.float16)
    return gguf.quants.quantize(values, qtype)


# ----------------------------------------------------------------------------------------
# GGUF writing.

def write_model(spec: ModelSpec, path: Path) -> None:
    rng = np.random.default_rng(spec.seed)
    head_dim = spec.n_embd // spec.n_head
    kv_dim = spec.n_head_kv * head_dim
    a = spec.arch
    w = gguf.GGUFWriter(str(path), a)
    w.add_string("general.name", spec.name)
    w.add_uint32(f"{a}.context_length", spec.n_ctx_train)
    w.add_uint32(f"{a}.embedding_length", spec.n_embd)
    w.add_uint32(f"{a}.block_count", spec.n_layer)
    w.add_uint32(f"{a}.feed_forward_length", spec.n_ff)
    w.add_uint32(f"{a}.attention.head_count", spec.n_head)
    w.add_uint32(f"{a}.attention.head_count_kv", spec.n_head_kv)
    w.add_uint32(f"{a}.rope.dimension_count", head_dim)
    w.add_float32(f"{a}.rope.freq_base", spec.rope_theta)
    w.add_float32(f"{a}.attention.layer_norm_rms_epsilon", spec.norm_eps)
    w.add_uint32(f"{a}.vocab_size", spec.n_vocab)
    if spec.rope_scaling:
        s = spec.rope_scaling
        w.add_string(f"{a}.rope.scaling.type", s["type"])
        w.add_float32(f"{a}.rope.scaling.factor", s["factor"])
        if s["type"] == "llama3":
            w.add_float32(f"{a}.rope.scaling.low_freq_factor", s["low_freq_factor"])
            w.add_float32(f"{a}.rope.scaling.high_freq_factor", s["high_freq_factor"])
            w.add_uint32(f"{a}.rope.scaling.original_context_length", s["original_context_length"])
    # A minimal tokenizer section (byte-level BPE over the ids of this vocabulary); the
    # weights are what is tested, the tokens only have to exist.
    w.add_string("tokenizer.ggml.model", "gpt2")
    w.add_string("tokenizer.ggml.pre", "default")
    w.add_array("tokenizer.ggml.tokens", [f"<t{i}>" for i in range(spec.n_vocab)])
    w.add_array("tokenizer.ggml.token_type", [1] * spec.n_vocab)
    w.add_array("tokenizer.ggml.merges", [])
    w.add_uint32("tokenizer.ggml.bos_token_id", 1)
    w.add_uint32("tokenizer.ggml.eos_token_id", 2)

    def typed(name: str, default: QT) -> QT:
        for suffix, qtype in spec.overrides.items():
            if name.endswith(suffix):
                return qtype
        return default

    def add_matrix(name: str, default: QT, rows: int, cols: int, std: float) -> None:
        qtype = typed(name, default)
        data = make_matrix(rng, qtype, rows, cols, std)
        raw = None if qtype in (QT.F32, QT.F16) else qtype
        w.add_tensor(name, data, raw_dtype=raw)

    def add_vector(name: str, values: np.ndarray) -> None:
        w.add_tensor(name, values.astype(np.float32))

    add_matrix("token_embd.weight", spec.embd_type, spec.n_vocab, spec.n_embd, 1.0)
    for layer in range(spec.n_layer):
        p = f"blk.{layer}."
        add_vector(p + "attn_norm.weight", 1.0 + 0.1 * rng.normal(size=spec.n_embd))
        add_matrix(p + "attn_q.weight", spec.matrix_type, spec.n_embd, spec.n_embd, 1.5 / np.sqrt(spec.n_embd))
        add_matrix(p + "attn_k.weight", spec.matrix_type, kv_dim, spec.n_embd, 1.5 / np.sqrt(spec.n_embd))
        add_matrix(p + "attn_v.weight", spec.matrix_type, kv_dim, spec.n_embd, 1.0 / np.sqrt(spec.n_embd))
        add_matrix(p + "attn_output.weight", spec.matrix_type, spec.n_embd, spec.n_embd, 1.0 / np.sqrt(spec.n_embd))
        if spec.arch == "qwen2":
            add_vector(p + "attn_q.bias", 0.2 * rng.normal(size=spec.n_embd))
            add_vector(p + "attn_k.bias", 0.2 * rng.normal(size=kv_dim))
            add_vector(p + "attn_v.bias", 0.2 * rng.normal(size=kv_dim))
        add_vector(p + "ffn_norm.weight", 1.0 + 0.1 * rng.normal(size=spec.n_embd))
        add_matrix(p + "ffn_gate.weight", spec.matrix_type, spec.n_ff, spec.n_embd, 1.0 / np.sqrt(spec.n_embd))
        add_matrix(p + "ffn_up.weight", spec.matrix_type, spec.n_ff, spec.n_embd, 1.0 / np.sqrt(spec.n_embd))
        add_matrix(p + "ffn_down.weight", spec.matrix_type, spec.n_embd, spec.n_ff, 1.0 / np.sqrt(spec.n_ff))
    add_vector("output_norm.weight", 1.0 + 0.1 * rng.normal(size=spec.n_embd))
    if spec.output_type is not None:
        # Large output weights make the logits spread out (a few units apart), so that greedy
        # decoding does not hinge on rounding.
        add_matrix("output.weight", spec.output_type, spec.n_vocab, spec.n_embd, 4.0 / np.sqrt(spec.n_embd))

    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


# ----------------------------------------------------------------------------------------
# Reference runs with transformers.

def hf_rope_parameters(spec: ModelSpec | None, rope_theta: float) -> dict:
    params = {"rope_type": "default", "rope_theta": rope_theta}
    s = spec.rope_scaling if spec else None
    if s and s["type"] == "linear":
        params.update(rope_type="linear", factor=s["factor"])
    elif s and s["type"] == "llama3":
        params.update(rope_type="llama3", factor=s["factor"], low_freq_factor=s["low_freq_factor"],
                      high_freq_factor=s["high_freq_factor"],
                      original_max_position_embeddings=s["original_context_length"])
    return params


def load_hf(path: Path, spec: ModelSpec | None):
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    config = AutoConfig.from_pretrained(str(path.parent), gguf_file=path.name)
    rope_theta = config.rope_parameters["rope_theta"] if getattr(config, "rope_parameters", None) else 10000.0
    config.rope_parameters = hf_rope_parameters(spec, rope_theta)
    model = AutoModelForCausalLM.from_pretrained(str(path.parent), gguf_file=path.name, config=config,
                                                 dtype=torch.float32)
    model.eval()
    return model


def run_prompts(model, prompts: list[list[int]]) -> tuple[list[dict], np.ndarray]:
    import torch

    records = []
    logits_out = []
    for tokens in prompts:
        with torch.no_grad():
            logits = model(torch.tensor([tokens])).logits[0].float().numpy()
        positions = list(range(len(tokens) - N_LOGIT_POSITIONS, len(tokens)))
        logits_out.append(logits[positions])
        # Greedy decoding, one token at a time over the full sequence (no cache tricks).
        seq = list(tokens)
        greedy, runner_up, margins = [], [], []
        with torch.no_grad():
            past = None
            step_input = torch.tensor([seq])
            for _ in range(N_GREEDY):
                out = model(step_input, past_key_values=past, use_cache=True)
                past = out.past_key_values
                last = out.logits[0, -1].float()
                top = torch.topk(last, 2)
                token = int(top.indices[0])
                greedy.append(token)
                runner_up.append(int(top.indices[1]))
                margins.append(float(top.values[0] - top.values[1]))
                step_input = torch.tensor([[token]])
        records.append({"tokens": tokens, "logit_positions": positions, "greedy": greedy,
                        "greedy_runner_up": runner_up, "greedy_margins": [float(m) for m in margins]})
    return records, np.stack(logits_out).astype("<f4")


def save(name: str, model_file: str, n_vocab: int, records: list[dict], logits: np.ndarray, notes: str) -> None:
    logits.tofile(OUT_DIR / f"{name}.logits.bin")
    meta = {
        "model": model_file,
        "n_vocab": n_vocab,
        "logits_file": f"{name}.logits.bin",
        "logits_layout": "float32 [prompt][position][n_vocab]",
        "reference": notes,
        "prompts": records,
    }
    with open(OUT_DIR / f"{name}.json", "w") as f:
        json.dump(meta, f, indent=1)
        f.write("\n")


def random_prompts(seed: int, n_vocab: int) -> list[list[int]]:
    rng = np.random.default_rng(1000 + seed)
    # Lengths that end inside, at, and past the 16-token KV blocks.
    return [[int(t) for t in rng.integers(3, n_vocab, size=n)] for n in (5, 16, 41)]


def smollm2_prompts() -> list[list[int]]:
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(SMOLLM2.parent), gguf_file=SMOLLM2.name)
    chat = tok.apply_chat_template([{"role": "user", "content": "What is the capital of France?"}],
                                   tokenize=False, add_generation_prompt=True)
    texts = [
        chat,
        "The quick brown fox jumps over the lazy dog. The quick brown fox",
        "In a distant galaxy, a small robot named Pip discovered an old map. The map showed a path "
        "through the asteroid fields to a planet covered in crystal forests. Pip packed its tools, "
        "charged its batteries, and set off before dawn. On the way,",
    ]
    return [tok(t, add_special_tokens=False)["input_ids"] for t in texts]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models-only", action="store_true", help="write the GGUF files, run nothing")
    parser.add_argument("--skip-smollm2", action="store_true")
    args = parser.parse_args()
    OUT_DIR.mkdir(parents=True, exist_ok=True)

    import transformers
    import torch

    notes = f"transformers {transformers.__version__}, torch {torch.__version__}, float32 on CPU"
    for spec in SPECS:
        path = OUT_DIR / f"{spec.name}.gguf"
        write_model(spec, path)
        print(f"wrote {path} ({path.stat().st_size} bytes)")
        if args.models_only:
            continue
        model = load_hf(path, spec)
        records, logits = run_prompts(model, random_prompts(spec.seed, spec.n_vocab))
        save(spec.name, path.name, spec.n_vocab, records, logits, notes)
        print(f"  greedy margins (min per prompt): {[min(r['greedy_margins']) for r in records]}")

    if not args.models_only and not args.skip_smollm2:
        if not SMOLLM2.exists():
            print(f"{SMOLLM2} is missing (scripts/fetch_model.sh fetches it); skipped", file=sys.stderr)
        else:
            model = load_hf(SMOLLM2, None)
            records, logits = run_prompts(model, smollm2_prompts())
            save("smollm2-135m-q4_1", "models/" + SMOLLM2.name, int(model.config.vocab_size), records, logits, notes)
            print(f"  greedy margins (min per prompt): {[min(r['greedy_margins']) for r in records]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
