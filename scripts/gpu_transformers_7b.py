#!/usr/bin/env python3
"""A LLaMA-2-7B-shaped model from Hugging Face transformers against llamaserve on the same GPU.

For the GPU machine (it has torch and transformers): builds LlamaForCausalLM with the
LLaMA-2-7B configuration and random weights (seeded) on the GPU, saves it as safetensors (F16)
with the LLaMA 2 tokenizer.model, converts it with `llamaserve convert`, then compares the
logits of every position of a prompt: transformers in float32 from the same F16 weights
against llamaserve's CUDA executor (logits_tool --device cuda:0). Prints and writes a JSON
report; exits 1 when the error exceeds the tolerance or a well-separated greedy token differs.

  scripts/gpu_transformers_7b.py --llamaserve BIN --logits-tool BIN --tokenizer-model FILE \\
      --work DIR [--out REPORT.json] [--layers 32]
"""
from __future__ import annotations

import argparse
import json
import os
import pathlib
import shutil
import subprocess
import sys
import time

import numpy as np
import torch
from transformers import LlamaConfig, LlamaForCausalLM

# max |ours - transformers| / max |transformers| per position. Our GEMMs take F16 activations
# (cuBLAS, F32 accumulation) where transformers here computes in F32 throughout.
TOLERANCE = 2e-2


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--llamaserve", required=True)
    parser.add_argument("--logits-tool", required=True)
    parser.add_argument("--tokenizer-model", required=True)
    parser.add_argument("--work", required=True)
    parser.add_argument("--out")
    parser.add_argument("--layers", type=int, default=32)
    # For a trial of the script itself on a machine without a GPU: --torch-device cpu --device cpu.
    parser.add_argument("--torch-device", default="cuda")
    parser.add_argument("--device", default="cuda:0", help="llamaserve device for logits_tool")
    args = parser.parse_args()
    work = pathlib.Path(args.work)
    hf_dir = work / "hf-llama2-7b-shape"
    gguf = work / "hf-llama2-7b-shape.gguf"
    shutil.rmtree(hf_dir, ignore_errors=True)
    hf_dir.mkdir(parents=True)
    timings = {}

    start = time.time()
    torch.manual_seed(1234)
    config = LlamaConfig(vocab_size=32000, hidden_size=4096, intermediate_size=11008,
                         num_hidden_layers=args.layers, num_attention_heads=32, num_key_value_heads=32,
                         max_position_embeddings=4096, rms_norm_eps=1e-5, rope_theta=10000.0,
                         tie_word_embeddings=False, bos_token_id=1, eos_token_id=2)
    with torch.device(args.torch_device):
        model = LlamaForCausalLM(config).to(torch.float16)
    model.eval()
    model.save_pretrained(hf_dir, safe_serialization=True)
    shutil.copy(args.tokenizer_model, hf_dir / "tokenizer.model")
    timings["build_and_save_s"] = time.time() - start

    start = time.time()
    subprocess.run([args.llamaserve, "convert", str(hf_dir), "-o", str(gguf), "--type", "f16"], check=True,
                   stdout=subprocess.DEVNULL)
    timings["convert_s"] = time.time() - start

    tokens = [1, 450, 7483, 310, 3444, 338, 3681, 29889, 450, 7483, 310, 9556, 338, 5115, 29889, 13, 4806, 338]
    start = time.time()
    with torch.no_grad():
        reference = model.float()(torch.tensor([tokens], device=args.torch_device)).logits[0].double().cpu().numpy()
    timings["transformers_s"] = time.time() - start
    del model
    if args.torch_device == "cuda":
        torch.cuda.empty_cache()

    start = time.time()
    out_file = work / "ours.f32"
    subprocess.run([args.logits_tool, "--device", args.device, str(gguf), str(out_file), *map(str, tokens)],
                   check=True)
    ours = np.fromfile(out_file, dtype=np.float32).reshape(len(tokens), -1).astype(np.float64)
    timings["llamaserve_s"] = time.time() - start

    errors = (np.abs(ours - reference).max(axis=1) / np.abs(reference).max(axis=1)).tolist()
    mismatches = []
    for i in range(len(tokens)):
        top2 = np.argsort(reference[i])[::-1][:2]
        margin = reference[i][top2[0]] - reference[i][top2[1]]
        if margin > 2 * TOLERANCE * np.abs(reference[i]).max() and int(np.argmax(ours[i])) != int(top2[0]):
            mismatches.append(i)
    report = {"layers": args.layers, "tokens": tokens, "max_rel_error_per_position": errors,
              "max_rel_error": max(errors), "tolerance": TOLERANCE, "greedy_mismatches": mismatches,
              "timings": timings}
    print(json.dumps(report, indent=1))
    if args.out:
        pathlib.Path(args.out).write_text(json.dumps(report, indent=1))
    for path in (gguf, out_file):
        path.unlink(missing_ok=True)
    shutil.rmtree(hf_dir, ignore_errors=True)
    ok = max(errors) <= TOLERANCE and not mismatches
    print("transformers 7B-shape comparison:", "ok" if ok else "FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
