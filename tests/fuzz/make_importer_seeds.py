#!/usr/bin/env python3
"""Writes the seed corpora of the importer fuzz targets with the reference libraries, so that
the seeds are what real checkpoints contain, only small:

    python3 tests/fuzz/make_importer_seeds.py      (needs torch, safetensors, sentencepiece,
                                                    tokenizers)

  corpus/safetensors/    files written by safetensors.torch, and a shard index
  corpus/sentencepiece/  tokenizer.model files trained by sentencepiece (BPE, BPE with byte
                         fallback and user-defined pieces, Unigram)
  corpus/hf_json/        model directories as `head -v` prints them (hf_json_fuzz.cc): the
                         config.json of published LLaMA 2/3, Mistral and SmolLM2 models, and
                         tokenizer.json files trained by tokenizers with the pre-tokenizers of
                         LLaMA 3, Qwen2 and SmolLM2
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

CORPUS = Path(__file__).resolve().parent / "corpus"

TEXT = [
    "The quick brown fox jumps over the lazy dog.",
    "Hello world! Hello again, world.",
    "Numbers like 1234 and 56 appear here.",
    "A model reads tokens; the tokenizer splits text into pieces.",
]

# GPT-4-style split patterns of LLaMA 3 (numbers of up to 3 digits) and Qwen2 (single digits).
LLAMA3_SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
                r"|\s*[\r\n]+|\s+(?!\S)|\s+")
QWEN2_SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
               r"|\s*[\r\n]+|\s+(?!\S)|\s+")

LLAMA3_CONFIG = {  # meta-llama/Llama-3.2-1B-Instruct
    "architectures": ["LlamaForCausalLM"], "attention_bias": False, "attention_dropout": 0.0,
    "bos_token_id": 128000, "eos_token_id": [128001, 128008, 128009], "head_dim": 64,
    "hidden_act": "silu", "hidden_size": 2048, "initializer_range": 0.02,
    "intermediate_size": 8192, "max_position_embeddings": 131072, "mlp_bias": False,
    "model_type": "llama", "num_attention_heads": 32, "num_hidden_layers": 16,
    "num_key_value_heads": 8, "pretraining_tp": 1, "rms_norm_eps": 1e-05,
    "rope_scaling": {"factor": 32.0, "high_freq_factor": 4.0, "low_freq_factor": 1.0,
                     "original_max_position_embeddings": 8192, "rope_type": "llama3"},
    "rope_theta": 500000.0, "tie_word_embeddings": True, "torch_dtype": "bfloat16",
    "transformers_version": "4.45.0.dev0", "use_cache": True, "vocab_size": 128256,
}
SMOLLM2_CONFIG = {  # HuggingFaceTB/SmolLM2-135M-Instruct
    "architectures": ["LlamaForCausalLM"], "attention_bias": False, "attention_dropout": 0.0,
    "bos_token_id": 1, "eos_token_id": 2, "hidden_act": "silu", "hidden_size": 576,
    "initializer_range": 0.041666666666666664, "intermediate_size": 1536,
    "is_llama_config": True, "max_position_embeddings": 8192, "model_type": "llama",
    "num_attention_heads": 9, "num_hidden_layers": 30, "num_key_value_heads": 3,
    "pad_token_id": 2, "pretraining_tp": 1, "rms_norm_eps": 1e-05, "rope_interleaved": False,
    "rope_scaling": None, "rope_theta": 100000, "tie_word_embeddings": True,
    "torch_dtype": "bfloat16", "transformers.js_config": {"kv_cache_dtype": {"q4f16": "float16"}},
    "transformers_version": "4.42.3", "use_cache": True, "vocab_size": 49152,
}
MISTRAL_CONFIG = {  # mistralai/Mistral-7B-v0.1
    "architectures": ["MistralForCausalLM"], "bos_token_id": 1, "eos_token_id": 2,
    "hidden_act": "silu", "hidden_size": 4096, "initializer_range": 0.02,
    "intermediate_size": 14336, "max_position_embeddings": 32768, "model_type": "mistral",
    "num_attention_heads": 32, "num_hidden_layers": 32, "num_key_value_heads": 8,
    "rms_norm_eps": 1e-05, "rope_theta": 10000.0, "sliding_window": 4096,
    "tie_word_embeddings": False, "torch_dtype": "bfloat16", "transformers_version": "4.34.0.dev0",
    "use_cache": True, "vocab_size": 32000,
}
LLAMA2_CONFIG = {  # meta-llama/Llama-2-7b-hf, with a linear RoPE scaling as long-context
    # fine-tunes add it
    "architectures": ["LlamaForCausalLM"], "bos_token_id": 1, "eos_token_id": 2,
    "hidden_act": "silu", "hidden_size": 4096, "initializer_range": 0.02,
    "intermediate_size": 11008, "max_position_embeddings": 4096, "model_type": "llama",
    "num_attention_heads": 32, "num_hidden_layers": 32, "num_key_value_heads": 32,
    "pretraining_tp": 1, "rms_norm_eps": 1e-05, "rope_scaling": {"type": "linear", "factor": 2.0},
    "tie_word_embeddings": False, "torch_dtype": "float16", "transformers_version": "4.31.0.dev0",
    "use_cache": True, "vocab_size": 32000,
}

LLAMA3_TEMPLATE = (
    "{{- bos_token }}{%- for message in messages %}{{- '<|start_header_id|>' + message['role'] + "
    "'<|end_header_id|>\\n\\n' + message['content'] | trim + '<|eot_id|>' }}{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}"
    "{%- endif %}")
CHATML_TEMPLATE = (
    "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + message['content'] "
    "+ '<|im_end|>' + '\\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}"
    "{% endif %}")


def write_safetensors() -> None:
    import torch
    from safetensors.torch import save_file

    out = CORPUS / "safetensors"
    out.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(0)
    save_file({"weight": torch.randn(2, 3)}, out / "single-f32.safetensors", metadata={"format": "pt"})
    save_file({
        "model.embed_tokens.weight": torch.randn(4, 2).to(torch.float16),
        "model.norm.weight": torch.ones(2).to(torch.bfloat16),
        "lm_head.weight": torch.randn(4, 2).to(torch.bfloat16),
        "position_ids": torch.arange(3, dtype=torch.int64),
        "mask": torch.tensor([True, False]),
        "scalar": torch.tensor(1.5),
        "empty": torch.zeros(0, 4),
    }, out / "mixed-dtypes.safetensors")
    save_file({"a": torch.zeros(1, dtype=torch.uint8), "b": torch.zeros(2, 2, dtype=torch.int32)},
              out / "small-ints.safetensors")
    index = {"metadata": {"total_size": 52},
             "weight_map": {"lm_head.weight": "model-00002-of-00002.safetensors",
                            "model.embed_tokens.weight": "model-00001-of-00002.safetensors",
                            "model.norm.weight": "model-00002-of-00002.safetensors"}}
    (out / "model.safetensors.index.json").write_text(json.dumps(index, indent=2) + "\n")


def write_sentencepiece() -> None:
    import sentencepiece as spm

    out = CORPUS / "sentencepiece"
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        text = Path(tmp) / "train.txt"
        text.write_text("\n".join(TEXT) + "\n")
        common = dict(input=str(text), normalization_rule_name="identity", minloglevel=2,
                      hard_vocab_limit=False)
        models = {
            "bpe": dict(model_type="bpe", vocab_size=60),
            "bpe-bytes": dict(model_type="bpe", vocab_size=320, byte_fallback=True,
                              user_defined_symbols=["<|im_start|>", "<|im_end|>"], pad_id=3),
            "unigram": dict(model_type="unigram", vocab_size=50, add_dummy_prefix=False),
        }
        for name, options in models.items():
            spm.SentencePieceTrainer.train(model_prefix=str(Path(tmp) / name), **common, **options)
            (out / f"{name}.model").write_bytes((Path(tmp) / f"{name}.model").read_bytes())


def train_tokenizer_json(pre_tokenizer, specials: list[str], bos: str | None, pair_merges: bool) -> str:
    from tokenizers import Tokenizer, models, processors, trainers

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizer
    tokenizer.train_from_iterator(TEXT, trainers.BpeTrainer(vocab_size=120, special_tokens=specials))
    if bos is not None:
        tokenizer.post_processor = processors.TemplateProcessing(
            single=f"{bos} $A", pair=f"{bos} $A {bos} $B", special_tokens=[(bos, tokenizer.token_to_id(bos))])
    data = json.loads(tokenizer.to_str())
    if not pair_merges:  # the older "a b" form, as most published tokenizer.json files have
        data["model"]["merges"] = [" ".join(m) if isinstance(m, list) else m for m in data["model"]["merges"]]
    return json.dumps(data, ensure_ascii=False)


def head_v(files: dict[str, str]) -> str:
    return "".join(f"==> {name} <==\n{text}\n" for name, text in files.items())


def write_hf_json() -> None:
    from tokenizers import Regex, pre_tokenizers

    out = CORPUS / "hf_json"
    out.mkdir(parents=True, exist_ok=True)
    llama3_pre = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(LLAMA3_SPLIT), behavior="isolated"),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    qwen2_pre = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(QWEN2_SPLIT), behavior="isolated"),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    smollm_pre = pre_tokenizers.Sequence([
        pre_tokenizers.Digits(individual_digits=True),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)])

    llama3_specials = ["<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>",
                       "<|end_header_id|>", "<|eot_id|>"]
    (out / "llama3.txt").write_text(head_v({
        "config.json": json.dumps(dict(LLAMA3_CONFIG, bos_token_id=0, eos_token_id=[1, 4], vocab_size=120),
                                  indent=2),
        "tokenizer.json": train_tokenizer_json(llama3_pre, llama3_specials, "<|begin_of_text|>", True),
        "tokenizer_config.json": json.dumps({
            "bos_token": "<|begin_of_text|>", "eos_token": "<|eot_id|>", "chat_template": LLAMA3_TEMPLATE,
            "clean_up_tokenization_spaces": True, "model_max_length": 131072}, indent=2),
    }))
    chatml_specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    (out / "smollm2.txt").write_text(head_v({
        "config.json": json.dumps(dict(SMOLLM2_CONFIG, vocab_size=120), indent=2),
        "tokenizer.json": train_tokenizer_json(smollm_pre, chatml_specials, None, False),
        "tokenizer_config.json": json.dumps({
            "add_prefix_space": False, "bos_token": "<|im_start|>", "eos_token": "<|im_end|>",
            "pad_token": "<|im_end|>", "unk_token": "<|endoftext|>", "chat_template": CHATML_TEMPLATE,
            "additional_special_tokens": ["<|im_start|>", "<|im_end|>"]}, indent=2),
    }))
    (out / "qwen2-tokenizer.txt").write_text(head_v({
        "tokenizer.json": train_tokenizer_json(qwen2_pre, chatml_specials, None, True),
        "tokenizer_config.json": json.dumps({
            "eos_token": "<|im_end|>", "pad_token": "<|endoftext|>", "add_bos_token": False,
            "chat_template": [{"name": "default", "template": CHATML_TEMPLATE},
                              {"name": "tool_use", "template": "{{ messages }}"}]}, indent=2),
        "chat_template.jinja": CHATML_TEMPLATE,
    }))
    (out / "mistral-config.txt").write_text(head_v({"config.json": json.dumps(MISTRAL_CONFIG, indent=2)}))
    (out / "llama2-config.txt").write_text(head_v({"config.json": json.dumps(LLAMA2_CONFIG, indent=2)}))


if __name__ == "__main__":
    write_safetensors()
    write_sentencepiece()
    write_hf_json()
