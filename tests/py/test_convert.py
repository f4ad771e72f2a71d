"""`llamaserve convert`: Hugging Face and llama2.c checkpoints to GGUF, checked by logits.

Small random models are made in the tests, converted with our binary, and run by our engine
(the logits_tool test helper, reference CPU kernels) to compare every position's logits with
an independent implementation of the original model:
  * without torch (always runs): a numpy forward pass in Hugging Face's convention
    (rotate_half RoPE, so the Q/K row permutation is exercised) over a safetensors file
    written here, and a numpy port of llama2.c's run.c over a llama2.c checkpoint;
  * with torch + transformers (skipped when they are not importable): LlamaForCausalLM and
    MistralForCausalLM models saved with save_pretrained — a LLaMA 2 style model with the
    SentencePiece tokenizer, a LLaMA 3.1 style one (grouped-query attention, llama3 RoPE
    scaling, byte-level tokenizer.json built from the vocabulary GGUF), Mistral, and a
    SmolLM2 style one with tied embeddings.
The gguf package reads every file we write; bad inputs fail with exit status 1, a message,
and no output file.

Binaries: LLAMASERVE_BIN (default build/cpu/src/cli/llamaserve) and logits_tool under
LLAMASERVE_BUILD_DIR (default build/cpu) at tests/unit/tools/logits_tool.
"""

from __future__ import annotations

import functools
import importlib
import json
import os
import shutil
import struct
import subprocess
from pathlib import Path

import numpy as np
import pytest

gguf = pytest.importorskip("gguf")

REPO_ROOT = Path(__file__).resolve().parents[2]
FIXTURES = REPO_ROOT / "tests" / "fixtures"
BIN = Path(os.environ.get("LLAMASERVE_BIN", REPO_ROOT / "build" / "cpu" / "src" / "cli" / "llamaserve"))
_BUILD = Path(os.environ.get("LLAMASERVE_BUILD_DIR", "build/cpu"))
BUILD_DIR = _BUILD if _BUILD.is_absolute() else REPO_ROOT / _BUILD
LOGITS_TOOL = BUILD_DIR / "tests" / "unit" / "tools" / "logits_tool"
SPM_MODEL = FIXTURES / "llama2-tokenizer.model"
LLAMA2_VOCAB = FIXTURES / "vocab-llama2-spm.gguf"
LLAMA3_VOCAB = FIXTURES / "vocab-llama3-bpe.gguf"
SMOLLM2 = REPO_ROOT / "models" / "SmolLM2-135M-Instruct.Q4_1.gguf"

pytestmark = [
    pytest.mark.skipif(not BIN.exists(), reason=f"llamaserve binary not built: {BIN}"),
    pytest.mark.skipif(not LOGITS_TOOL.exists(), reason=f"logits_tool not built: {LOGITS_TOOL}"),
]

PROMPT = [1, 450, 7483, 310, 3444, 338, 3681, 29889, 13, 1576, 4799, 18, 29871, 2, 100, 31999, 7, 42,
          1000, 22]


def llamaserve(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([str(BIN), *args], capture_output=True, text=True, timeout=timeout, check=False)


def convert(*args: str) -> subprocess.CompletedProcess:
    return llamaserve("convert", "--threads", "2", "--progress", "none", *args)


def our_logits(model: Path, tokens: list[int], tmp: Path) -> np.ndarray:
    out = tmp / "logits.f32"
    proc = subprocess.run([str(LOGITS_TOOL), "--reference", str(model), str(out), *map(str, tokens)],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return np.fromfile(out, dtype="<f4").reshape(len(tokens), -1)


def assert_logits_close(ours: np.ndarray, ref: np.ndarray, rel: float = 1e-4) -> None:
    """F32 weights: both sides compute the same function in float32 / float64, so anything
    beyond rounding is a conversion error (a misplaced row alone moves logits by O(1))."""
    assert ours.shape == ref.shape
    scale = float(np.abs(ref).max())
    worst = float(np.abs(ours - ref).max())
    assert worst <= rel * scale, f"max |ours - reference| = {worst} for logits up to {scale}"
    # The comparison is not vacuous: the positions disagree with each other.
    assert float(np.abs(ref[0] - ref[-1]).max()) > 10 * worst + 1e-6


# ------------------------------------------------------------------ numpy reference models

def rms_norm(x: np.ndarray, w: np.ndarray, eps: float) -> np.ndarray:
    return x / np.sqrt((x * x).mean(-1, keepdims=True) + eps) * w


def silu(x: np.ndarray) -> np.ndarray:
    return x / (1.0 + np.exp(-x))


def attention(q: np.ndarray, k: np.ndarray, v: np.ndarray) -> np.ndarray:
    """q [T, H, D], k/v [T, Hkv, D]: causal attention with grouped KV heads."""
    n_tokens, n_head, head_dim = q.shape
    group = n_head // k.shape[1]
    k = np.repeat(k, group, axis=1)
    v = np.repeat(v, group, axis=1)
    scores = np.einsum("thd,shd->hts", q, k) / np.sqrt(head_dim)
    scores = scores + np.triu(np.full((n_tokens, n_tokens), -np.inf), 1)
    scores = np.exp(scores - scores.max(-1, keepdims=True))
    scores /= scores.sum(-1, keepdims=True)
    return np.einsum("hts,shd->thd", scores, v).reshape(n_tokens, n_head * head_dim)


def hf_forward(w: dict, cfg: dict, tokens: list[int]) -> np.ndarray:
    """Hugging Face LlamaForCausalLM in float64: RoPE with rotate_half over (i, i + d/2)."""
    n_head, n_kv, n_embd = cfg["num_attention_heads"], cfg["num_key_value_heads"], cfg["hidden_size"]
    d = n_embd // n_head
    eps = cfg["rms_norm_eps"]
    inv_freq = 1.0 / cfg["rope_theta"] ** (np.arange(0, d, 2) / d)
    angles = np.arange(len(tokens))[:, None] * inv_freq[None, :]
    cos = np.cos(np.concatenate([angles, angles], -1))[:, None, :]
    sin = np.sin(np.concatenate([angles, angles], -1))[:, None, :]

    def rope(x):
        rotated = np.concatenate([-x[..., d // 2:], x[..., :d // 2]], -1)
        return x * cos + rotated * sin

    h = w["model.embed_tokens.weight"][tokens]
    for layer in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{layer}."
        x = rms_norm(h, w[p + "input_layernorm.weight"], eps)
        q = rope((x @ w[p + "self_attn.q_proj.weight"].T).reshape(len(tokens), n_head, d))
        k = rope((x @ w[p + "self_attn.k_proj.weight"].T).reshape(len(tokens), n_kv, d))
        v = (x @ w[p + "self_attn.v_proj.weight"].T).reshape(len(tokens), n_kv, d)
        h = h + attention(q, k, v) @ w[p + "self_attn.o_proj.weight"].T
        x = rms_norm(h, w[p + "post_attention_layernorm.weight"], eps)
        gate = silu(x @ w[p + "mlp.gate_proj.weight"].T)
        h = h + (gate * (x @ w[p + "mlp.up_proj.weight"].T)) @ w[p + "mlp.down_proj.weight"].T
    head = w.get("lm_head.weight", w["model.embed_tokens.weight"])
    return rms_norm(h, w["model.norm.weight"], eps) @ head.T


def llama2c_forward(c: dict, arrays: dict, tokens: list[int]) -> np.ndarray:
    """llama2.c's run.c in float64: RoPE over the pairs (2i, 2i+1) of each head."""
    dim, n_head, n_kv = c["dim"], c["n_heads"], c["n_kv_heads"]
    d = dim // n_head
    pos = np.arange(len(tokens))[:, None]
    freq = 1.0 / 10000.0 ** (np.arange(0, d, 2) / d)
    cos, sin = np.cos(pos * freq)[:, None, :], np.sin(pos * freq)[:, None, :]

    def rope(x):
        a, b = x[..., 0::2], x[..., 1::2]
        out = np.empty_like(x)
        out[..., 0::2] = a * cos - b * sin
        out[..., 1::2] = a * sin + b * cos
        return out

    h = arrays["embd"][tokens]
    for l in range(c["n_layers"]):
        x = rms_norm(h, arrays["rms_att"][l], 1e-5)
        q = rope((x @ arrays["wq"][l].T).reshape(len(tokens), n_head, d))
        k = rope((x @ arrays["wk"][l].T).reshape(len(tokens), n_kv, d))
        v = (x @ arrays["wv"][l].T).reshape(len(tokens), n_kv, d)
        h = h + attention(q, k, v) @ arrays["wo"][l].T
        x = rms_norm(h, arrays["rms_ffn"][l], 1e-5)
        h = h + (silu(x @ arrays["w1"][l].T) * (x @ arrays["w3"][l].T)) @ arrays["w2"][l].T
    head = arrays.get("wcls", arrays["embd"])
    return rms_norm(h, arrays["rms_final"], 1e-5) @ head.T


# ------------------------------------------------------------------ checkpoint writers

def bf16_round(x: np.ndarray) -> np.ndarray:
    """float32 values exactly representable in bfloat16 (truncated mantissa)."""
    return (x.astype("<f4").view("<u4") & 0xFFFF0000).view("<f4")


def write_safetensors(path: Path, tensors: dict[str, tuple[str, np.ndarray]]) -> None:
    """The safetensors format by its description: u64 header size, JSON header, data."""
    header, blobs, offset = {}, [], 0
    for name, (dtype, values) in tensors.items():
        if dtype == "BF16":
            blob = (bf16_round(values).view("<u4") >> 16).astype("<u2").tobytes()
        elif dtype == "F16":
            blob = values.astype("<f2").tobytes()
        else:
            blob = values.astype("<f4").tobytes()
        header[name] = {"dtype": dtype, "shape": list(values.shape), "data_offsets": [offset, offset + len(blob)]}
        blobs.append(blob)
        offset += len(blob)
    text = json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(text)) + text + b"".join(blobs))


def numpy_hf_model(directory: Path, seed: int = 5) -> tuple[dict, dict]:
    """A random 2-layer LLaMA (GQA) in safetensors with the LLaMA 2 tokenizer. Returns the
    config and the float64 weights as stored (F16 / BF16 tensors rounded)."""
    rng = np.random.default_rng(seed)
    cfg = {"architectures": ["LlamaForCausalLM"], "hidden_size": 64, "intermediate_size": 96,
           "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 32000,
           "max_position_embeddings": 512, "rms_norm_eps": 1e-5, "rope_theta": 10000.0,
           "tie_word_embeddings": False, "hidden_act": "silu"}
    shapes = {"model.embed_tokens.weight": (32000, 64), "model.norm.weight": (64,), "lm_head.weight": (32000, 64)}
    for layer in range(2):
        p = f"model.layers.{layer}."
        shapes |= {p + "input_layernorm.weight": (64,), p + "post_attention_layernorm.weight": (64,),
                   p + "self_attn.q_proj.weight": (64, 64), p + "self_attn.k_proj.weight": (32, 64),
                   p + "self_attn.v_proj.weight": (32, 64), p + "self_attn.o_proj.weight": (64, 64),
                   p + "mlp.gate_proj.weight": (96, 64), p + "mlp.up_proj.weight": (96, 64),
                   p + "mlp.down_proj.weight": (64, 96)}
    tensors, weights = {}, {}
    for i, (name, shape) in enumerate(shapes.items()):
        values = (1.0 + rng.normal(0, 0.1, shape) if len(shape) == 1 else rng.normal(0, 0.08, shape)).astype(np.float32)
        dtype = "BF16" if "embed" in name else ("F16" if "q_proj" in name else "F32")
        tensors[name] = (dtype, values)
        stored = bf16_round(values) if dtype == "BF16" else values.astype(np.float16) if dtype == "F16" else values
        weights[name] = stored.astype(np.float64)
    directory.mkdir(parents=True, exist_ok=True)
    write_safetensors(directory / "model.safetensors", tensors)
    (directory / "config.json").write_text(json.dumps(cfg))
    shutil.copy(SPM_MODEL, directory / "tokenizer.model")
    (directory / "tokenizer_config.json").write_text(json.dumps(
        {"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>", "add_bos_token": True}))
    return cfg, weights


def gguf_strings(reader, key: str) -> list[str]:
    field = reader.fields[key]
    return [bytes(field.parts[i]).decode("utf-8") for i in field.data]


def gguf_scalar(reader, key: str):
    return reader.fields[key].contents()


# ------------------------------------------------------------------ tests without torch

def test_numpy_hf_model_logits_and_gguf_py(tmp_path):
    cfg, weights = numpy_hf_model(tmp_path / "hf")
    out = tmp_path / "model.gguf"
    proc = convert(str(tmp_path / "hf"), "-o", str(out), "--type", "f32")
    assert proc.returncode == 0, proc.stderr
    assert "tokenizer: llama" in proc.stdout
    assert_logits_close(our_logits(out, PROMPT, tmp_path), hf_forward(weights, cfg, PROMPT))

    reader = gguf.GGUFReader(str(out))
    assert gguf_scalar(reader, "general.architecture") == "llama"
    assert gguf_scalar(reader, "llama.attention.head_count_kv") == 2
    assert gguf_scalar(reader, "llama.block_count") == 2
    tensors = {t.name: t for t in reader.tensors}
    assert tensors["blk.0.attn_k.weight"].shape.tolist() == [64, 32]
    assert tensors["output.weight"].tensor_type == gguf.GGMLQuantizationType.F32
    # The tokenizer as the vocabulary GGUF made from the same tokenizer.model has it.
    vocab = gguf.GGUFReader(str(LLAMA2_VOCAB))
    assert gguf_strings(reader, "tokenizer.ggml.tokens") == gguf_strings(vocab, "tokenizer.ggml.tokens")
    assert gguf_scalar(reader, "tokenizer.ggml.model") == "llama"
    assert gguf_scalar(reader, "tokenizer.ggml.bos_token_id") == 1


def test_numpy_hf_model_quantized_types(tmp_path):
    cfg, weights = numpy_hf_model(tmp_path / "hf", seed=6)
    reference = hf_forward(weights, cfg, PROMPT)
    # Bounds about 4x the errors these roundings give on this model.
    for type_name, qtype, rel in (("f16", gguf.GGMLQuantizationType.F16, 3e-3),
                                  ("bf16", gguf.GGMLQuantizationType.BF16, 3e-2),
                                  ("q8_0", gguf.GGMLQuantizationType.Q8_0, 0.1)):
        out = tmp_path / f"model-{type_name}.gguf"
        proc = convert(str(tmp_path / "hf"), "-o", str(out), "--type", type_name)
        assert proc.returncode == 0, proc.stderr
        reader = gguf.GGUFReader(str(out))
        tensors = {t.name: t for t in reader.tensors}
        assert tensors["blk.1.ffn_up.weight"].tensor_type == qtype
        assert tensors["blk.1.ffn_norm.weight"].tensor_type == gguf.GGMLQuantizationType.F32
        assert_logits_close(our_logits(out, PROMPT, tmp_path), reference, rel=rel)


def llama2c_tokenizer_bin(path: Path) -> None:
    """tokenizer.bin as llama2.c's tokenizer.py exports the SentencePiece model."""
    sentencepiece = pytest.importorskip("sentencepiece")
    sp = sentencepiece.SentencePieceProcessor(model_file=str(SPM_MODEL))
    pieces = []
    for i in range(sp.vocab_size()):
        t = sp.id_to_piece(i)
        if i == sp.bos_id():
            t = "\n<s>\n"
        elif i == sp.eos_id():
            t = "\n</s>\n"
        pieces.append((t.replace("\u2581", " ").encode("utf-8"), sp.get_score(i)))
    blob = [struct.pack("<i", max(len(b) for b, _ in pieces))]
    for b, score in pieces:
        blob.append(struct.pack("<fi", score, len(b)) + b)
    path.write_bytes(b"".join(blob))


def llama2c_checkpoint(path: Path, shared: bool, seed: int = 9) -> tuple[dict, dict]:
    c = {"dim": 64, "hidden_dim": 160, "n_layers": 2, "n_heads": 4, "n_kv_heads": 2, "vocab_size": 32000,
         "seq_len": 128}
    rng = np.random.default_rng(seed)
    L, dim, hid, d = c["n_layers"], c["dim"], c["hidden_dim"], c["dim"] // c["n_heads"]
    kv = d * c["n_kv_heads"]
    shapes = [("embd", (32000, dim)), ("rms_att", (L, dim)), ("wq", (L, dim, dim)), ("wk", (L, kv, dim)),
              ("wv", (L, kv, dim)), ("wo", (L, dim, dim)), ("rms_ffn", (L, dim)), ("w1", (L, hid, dim)),
              ("w2", (L, dim, hid)), ("w3", (L, hid, dim)), ("rms_final", (dim,)),
              ("freq_cis", (c["seq_len"], d))] + ([] if shared else [("wcls", (32000, dim))])
    arrays = {}
    for name, shape in shapes:
        norm = name.startswith("rms")
        arrays[name] = (1.0 + rng.normal(0, 0.1, shape) if norm else rng.normal(0, 0.08, shape)).astype(np.float32)
    header = struct.pack("<7i", dim, hid, L, c["n_heads"], c["n_kv_heads"], 32000 if shared else -32000,
                         c["seq_len"])
    path.write_bytes(header + b"".join(arrays[name].tobytes() for name, _ in shapes))
    return c, {k: v.astype(np.float64) for k, v in arrays.items() if k != "freq_cis"}


@pytest.mark.parametrize("shared", [True, False])
def test_llama2c_checkpoint_logits(tmp_path, shared):
    llama2c_tokenizer_bin(tmp_path / "tokenizer.bin")
    c, arrays = llama2c_checkpoint(tmp_path / "model.bin", shared)
    out = tmp_path / "model.gguf"
    proc = convert("--from", "llama2c", str(tmp_path / "model.bin"), "--tokenizer", str(tmp_path / "tokenizer.bin"),
                   "-o", str(out), "--type", "f32")
    assert proc.returncode == 0, proc.stderr
    assert_logits_close(our_logits(out, PROMPT, tmp_path), llama2c_forward(c, arrays, PROMPT))
    reader = gguf.GGUFReader(str(out))
    assert ("output.weight" in {t.name for t in reader.tensors}) is not shared
    assert gguf_scalar(reader, "llama.context_length") == 128
    # Pieces come back exactly as the SentencePiece model has them.
    vocab = gguf.GGUFReader(str(LLAMA2_VOCAB))
    assert gguf_strings(reader, "tokenizer.ggml.tokens") == gguf_strings(vocab, "tokenizer.ggml.tokens")
    ours_types = [int(reader.fields["tokenizer.ggml.token_type"].parts[i][0])
                  for i in reader.fields["tokenizer.ggml.token_type"].data]
    ref_types = [int(vocab.fields["tokenizer.ggml.token_type"].parts[i][0])
                 for i in vocab.fields["tokenizer.ggml.token_type"].data]
    assert ours_types == ref_types


def test_bad_inputs_fail_cleanly(tmp_path):
    out = tmp_path / "out.gguf"

    def fails(*args: str, message: str) -> None:
        proc = convert(*args, "-o", str(out))
        assert proc.returncode == 1, proc.stdout + proc.stderr
        assert message in proc.stderr, proc.stderr
        assert not out.exists()
        assert not list(tmp_path.glob("out.gguf.tmp*"))

    fails(str(tmp_path / "missing"), message="is not a directory")
    hf = tmp_path / "hf"
    cfg, _ = numpy_hf_model(hf)
    # Unsupported architecture.
    (hf / "config.json").write_text(json.dumps(cfg | {"architectures": ["GPTNeoXForCausalLM"]}))
    fails(str(hf), message="architecture 'GPTNeoXForCausalLM' is not supported")
    # Shapes that disagree with config.json.
    (hf / "config.json").write_text(json.dumps(cfg | {"intermediate_size": 128}))
    fails(str(hf), message="config.json implies")
    # A truncated safetensors file.
    (hf / "config.json").write_text(json.dumps(cfg))
    data = (hf / "model.safetensors").read_bytes()
    (hf / "model.safetensors").write_bytes(data[: len(data) - 1000])
    fails(str(hf), message="truncated")
    (hf / "model.safetensors").write_bytes(data[:100])
    fails(str(hf), message="truncated")
    (hf / "model.safetensors").write_bytes(data)
    fails(str(hf), "--type", "q3_k", message="unknown type 'q3_k'")
    (hf / "tokenizer.model").unlink()
    fails(str(hf), message="neither tokenizer.model")
    # llama2.c: missing tokenizer option, tokenizer of another size, truncated weights.
    llama2c_tokenizer_bin(tmp_path / "tokenizer.bin")
    llama2c_checkpoint(tmp_path / "model.bin", shared=True)
    fails("--from", "llama2c", str(tmp_path / "model.bin"), message="--tokenizer")
    model = (tmp_path / "model.bin").read_bytes()
    (tmp_path / "short.bin").write_bytes(model[:-8])
    fails("--from", "llama2c", str(tmp_path / "short.bin"), "--tokenizer", str(tmp_path / "tokenizer.bin"),
          message="truncated")
    (tmp_path / "tok-short.bin").write_bytes((tmp_path / "tokenizer.bin").read_bytes()[:5000])
    fails("--from", "llama2c", str(tmp_path / "model.bin"), "--tokenizer", str(tmp_path / "tok-short.bin"),
          message="ends inside token")
    fails("--from", "onnx", str(tmp_path / "model.bin"), message="use hf or llama2c")


# ------------------------------------------------------------------ tests with transformers

@functools.lru_cache(maxsize=None)
def source_reader(path: Path):
    """gguf-py reads a 128K vocabulary slowly: once per source file."""
    return gguf.GGUFReader(str(path))


@functools.lru_cache(maxsize=None)
def read_vocab(path: Path) -> tuple[list[str], list[int], list[str]]:
    """Tokens, token types and merges of a byte-level BPE GGUF."""
    reader = source_reader(path)
    field = reader.fields["tokenizer.ggml.token_type"]
    return (gguf_strings(reader, "tokenizer.ggml.tokens"), [int(field.parts[i][0]) for i in field.data],
            gguf_strings(reader, "tokenizer.ggml.merges"))


def bpe_tokenizer_json(source: Path, pre: str, path: Path, merges_as_strings: bool) -> list[str]:
    """tokenizer.json of a byte-level BPE built with the tokenizers package from a GGUF's
    vocabulary, configured as the model family's own tokenizer.json is. Returns the tokens."""
    tokenizers = pytest.importorskip("tokenizers")
    from tokenizers import AddedToken, Regex, decoders, models, pre_tokenizers, processors

    tokens, types, merge_strings = read_vocab(source)
    merges = [tuple(m.split(" ", 1)) for m in merge_strings]
    vocab = {t: i for i, t in enumerate(tokens)}
    tok = tokenizers.Tokenizer(models.BPE(vocab=vocab, merges=merges, ignore_merges=(pre == "llama3")))
    if pre == "llama3":
        pattern = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
                   r"|\s*[\r\n]+|\s+(?!\S)|\s+")
        tok.pre_tokenizer = pre_tokenizers.Sequence([
            pre_tokenizers.Split(Regex(pattern), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False)])
        bos = tokens[128000]
        tok.post_processor = processors.TemplateProcessing(single=f"{bos} $A", special_tokens=[(bos, 128000)])
    else:
        tok.pre_tokenizer = pre_tokenizers.Sequence([
            pre_tokenizers.Digits(individual_digits=True),
            pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=True)])
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False) for t, k in zip(tokens, types) if k == 3])
    tok.save(str(path))
    if merges_as_strings:  # the older serialization: "a b"
        data = json.loads(path.read_text())
        data["model"]["merges"] = [" ".join(m) if isinstance(m, list) else m for m in data["model"]["merges"]]
        path.write_text(json.dumps(data))
    return tokens


def import_or_skip(name: str):
    """Skips on any ImportError, not only a missing module: a torch wheel that fails to load
    must skip these tests, not fail them."""
    try:
        return importlib.import_module(name)
    except ImportError as error:
        pytest.skip(f"{name} is not importable: {error}")


@pytest.fixture(scope="module")
def torch_modules():
    torch = import_or_skip("torch")
    transformers = import_or_skip("transformers")
    torch.manual_seed(0)
    return torch, transformers


def randomize(torch, model) -> None:
    """Weights large enough that attention patterns and norms matter (the default init
    makes logits nearly flat, which would hide a misplaced row)."""
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() == 1:
                p.copy_(1.0 + 0.1 * torch.randn_like(p))
            else:
                p.copy_(0.08 * torch.randn_like(p))


def hf_logits(torch, model, tokens: list[int]) -> np.ndarray:
    with torch.no_grad():
        return model(torch.tensor([tokens])).logits[0].double().numpy()


def save_model(torch, transformers, arch: str, directory: Path, dtype=None, shard: str | None = None, **config):
    cls_config = getattr(transformers, arch.replace("ForCausalLM", "Config"))
    model = getattr(transformers, arch)(cls_config(**config)).eval()
    randomize(torch, model)
    if dtype is not None:
        model = model.to(dtype)
    kwargs = {"max_shard_size": shard} if shard else {}
    model.save_pretrained(str(directory), safe_serialization=True, **kwargs)
    # Run the reference in float32 on exactly the stored weights.
    reloaded = getattr(transformers, arch).from_pretrained(str(directory), dtype=torch.float32).eval()
    return reloaded


def check_tokenization(out: Path, texts: list[str], reference) -> None:
    for text in texts:
        proc = llamaserve("tokenize", "-m", str(out), "--add-special", text)
        assert proc.returncode == 0, proc.stderr
        assert [int(t) for t in proc.stdout.split()] == reference(text), text


def test_transformers_llama2_sharded_bf16(tmp_path, torch_modules):
    torch, transformers = torch_modules
    hf = tmp_path / "hf"
    model = save_model(torch, transformers, "LlamaForCausalLM", hf, dtype=torch.bfloat16, shard="2MB",
                       hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                       num_key_value_heads=4, vocab_size=32000, max_position_embeddings=256, rms_norm_eps=1e-5)
    assert (hf / "model.safetensors.index.json").exists(), "expected a sharded checkpoint"
    shutil.copy(SPM_MODEL, hf / "tokenizer.model")
    (hf / "tokenizer_config.json").write_text(json.dumps({"bos_token": "<s>", "eos_token": "</s>",
                                                          "add_bos_token": True}))
    out = tmp_path / "llama2.gguf"
    proc = convert(str(hf), "-o", str(out), "--type", "f32")
    assert proc.returncode == 0, proc.stderr
    assert_logits_close(our_logits(out, PROMPT, tmp_path), hf_logits(torch, model, PROMPT))
    sentencepiece = pytest.importorskip("sentencepiece")
    sp = sentencepiece.SentencePieceProcessor(model_file=str(SPM_MODEL))
    check_tokenization(out, ["Hello world", " leading space", "naïve café 🦙 1234"],
                       lambda text: [sp.bos_id()] + sp.encode(text))


def test_transformers_llama3_gqa_rope_scaling(tmp_path, torch_modules):
    torch, transformers = torch_modules
    hf = tmp_path / "hf"
    rope = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
            "original_max_position_embeddings": 64, "rope_theta": 500000.0}
    model = save_model(torch, transformers, "LlamaForCausalLM", hf, hidden_size=64, intermediate_size=96,
                       num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, vocab_size=128256,
                       max_position_embeddings=1024, rms_norm_eps=1e-5, rope_parameters=rope,
                       bos_token_id=128000, eos_token_id=128001)
    # The classic config.json form of LLaMA 3.1 checkpoints on the hub, which must convert
    # the same way.
    cfg = json.loads((hf / "config.json").read_text())
    cfg.pop("rope_parameters", None)
    cfg["rope_theta"] = 500000.0
    cfg["rope_scaling"] = {k: v for k, v in rope.items() if k != "rope_theta"}
    (hf / "config.json").write_text(json.dumps(cfg))
    tokens = bpe_tokenizer_json(LLAMA3_VOCAB, "llama3", hf / "tokenizer.json", merges_as_strings=False)
    (hf / "tokenizer_config.json").write_text(json.dumps({"bos_token": "<|begin_of_text|>",
                                                          "eos_token": "<|eot_id|>"}))
    out = tmp_path / "llama3.gguf"
    proc = convert(str(hf), "-o", str(out), "--type", "f32")
    assert proc.returncode == 0, proc.stderr
    assert "rope_freqs" in proc.stdout
    prompt = [128000, 9906, 1917, 0, 358, 1097, 264, 1646, 13, 220, 4513, 19, 128009, 40, 3021, 499, 11, 128255,
              77, 5]
    assert_logits_close(our_logits(out, prompt, tmp_path), hf_logits(torch, model, prompt))

    # Metadata through inspect --json (gguf-py needs many seconds for a 128K vocabulary; it
    # reads the other converted files).
    proc = llamaserve("inspect", "-m", str(out), "--json")
    assert proc.returncode == 0, proc.stderr
    meta = json.loads(proc.stdout)["metadata"]
    _, _, merges = read_vocab(LLAMA3_VOCAB)
    assert meta["tokenizer.ggml.tokens"]["value"]["length"] == len(tokens) == 128256
    assert meta["tokenizer.ggml.tokens"]["value"]["values"] == tokens[:16]
    assert meta["tokenizer.ggml.merges"]["value"]["length"] == len(merges)
    assert meta["tokenizer.ggml.merges"]["value"]["values"] == merges[:16]
    assert meta["tokenizer.ggml.pre"]["value"] == "llama-bpe"
    assert meta["tokenizer.ggml.bos_token_id"]["value"] == 128000
    assert meta["tokenizer.ggml.eos_token_id"]["value"] == 128009
    assert meta["tokenizer.ggml.add_bos_token"]["value"] is True
    assert "rope_freqs.weight" in {t["name"] for t in json.loads(proc.stdout)["tensors"]}
    from tokenizers import Tokenizer
    hf_tok = Tokenizer.from_file(str(hf / "tokenizer.json"))
    check_tokenization(out, ["Hello world!", "It's 12345 tokens\n\n  ok", "naïve café 🦙"],
                       lambda text: hf_tok.encode(text).ids)


def test_transformers_mistral(tmp_path, torch_modules):
    torch, transformers = torch_modules
    hf = tmp_path / "hf"
    model = save_model(torch, transformers, "MistralForCausalLM", hf, hidden_size=64, intermediate_size=96,
                       num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, vocab_size=32000,
                       max_position_embeddings=512, rms_norm_eps=1e-5, sliding_window=None, head_dim=32)
    shutil.copy(SPM_MODEL, hf / "tokenizer.model")
    out = tmp_path / "mistral.gguf"
    proc = convert(str(hf), "-o", str(out), "--type", "f32")
    assert proc.returncode == 0, proc.stderr
    assert_logits_close(our_logits(out, PROMPT, tmp_path), hf_logits(torch, model, PROMPT))


@pytest.mark.skipif(not SMOLLM2.exists(), reason="SmolLM2 model (its vocabulary) missing")
def test_transformers_smollm2_tied(tmp_path, torch_modules):
    torch, transformers = torch_modules
    hf = tmp_path / "hf"
    model = save_model(torch, transformers, "LlamaForCausalLM", hf, hidden_size=64, intermediate_size=128,
                       num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, vocab_size=49152,
                       max_position_embeddings=2048, rms_norm_eps=1e-5, rope_theta=100000.0,
                       tie_word_embeddings=True, bos_token_id=1, eos_token_id=2)
    tokens = bpe_tokenizer_json(SMOLLM2, "smollm", hf / "tokenizer.json", merges_as_strings=True)
    source = source_reader(SMOLLM2)
    template = bytes(source.fields["tokenizer.chat_template"].parts[-1]).decode()
    (hf / "tokenizer_config.json").write_text(json.dumps({
        "bos_token": "<|im_start|>", "eos_token": "<|im_end|>", "pad_token": "<|im_end|>",
        "unk_token": "<|endoftext|>", "add_bos_token": False, "chat_template": template}))
    out = tmp_path / "smollm2.gguf"
    proc = convert(str(hf), "-o", str(out), "--type", "f32")
    assert proc.returncode == 0, proc.stderr
    prompt = [1, 4093, 198, 1780, 314, 260, 3575, 282, 4649, 47, 2, 198, 1, 520, 9531, 198, 504, 3575, 282, 10]
    assert_logits_close(our_logits(out, prompt, tmp_path), hf_logits(torch, model, prompt))

    reader = gguf.GGUFReader(str(out))
    assert "output.weight" not in {t.name for t in reader.tensors}
    assert gguf_strings(reader, "tokenizer.ggml.tokens") == tokens
    assert gguf_strings(reader, "tokenizer.ggml.merges") == read_vocab(SMOLLM2)[2]
    for key in ("tokenizer.ggml.pre", "tokenizer.ggml.bos_token_id", "tokenizer.ggml.eos_token_id",
                "tokenizer.ggml.padding_token_id", "tokenizer.ggml.unknown_token_id", "tokenizer.ggml.add_bos_token",
                "tokenizer.chat_template"):
        assert gguf_scalar(reader, key) == gguf_scalar(source, key), key
    field = reader.fields["tokenizer.ggml.token_type"]
    assert [int(field.parts[i][0]) for i in field.data] == read_vocab(SMOLLM2)[1]
    # The converted model chats with the template it carries.
    proc = llamaserve("chat", "-m", str(out), "-p", "Hi", "-n", "4", "--temp", "0", "--threads", "2")
    assert proc.returncode == 0, proc.stderr
