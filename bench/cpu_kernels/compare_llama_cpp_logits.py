#!/usr/bin/env python3
"""Accuracy of the CPU kernels against exact arithmetic and against llama.cpp, on one chat prompt.

Computes the logits of every prompt position three ways on the same GGUF file:
  exact      llamaserve's reference kernels (float activations, F32 KV cache; logits_tool --reference)
  fast       llamaserve's optimized kernels (8-bit activation blocks; logits_tool)
  llama.cpp  the PyPI package llama-cpp-python, built outside this repository
and prints, per pair, the largest |difference| relative to the largest |logit| of the row, with
the top-2 tokens of the last position. Writes a markdown report with --out.

  PYTHONPATH=/path/to/llama_cpp_python python3 bench/cpu_kernels/compare_llama_cpp_logits.py \\
      [--build build/cpu] [--model M.gguf] [--question TEXT] [--out FILE.md]
"""
from __future__ import annotations

import argparse
import datetime
import pathlib
import subprocess
import sys
import tempfile

import numpy as np

ROOT = pathlib.Path(__file__).resolve().parents[2]
SYSTEM = "You are a helpful AI assistant named SmolLM, trained by Hugging Face"


def chatml(question: str) -> str:
    return (f"<|im_start|>system\n{SYSTEM}<|im_end|>\n<|im_start|>user\n{question}<|im_end|>\n"
            "<|im_start|>assistant\n")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--build", default=str(ROOT / "build" / "cpu"))
    parser.add_argument("--model", default=str(ROOT / "models" / "SmolLM2-135M-Instruct.Q4_1.gguf"))
    parser.add_argument("--question", default="What is the capital of France?")
    parser.add_argument("--out")
    args = parser.parse_args()
    try:
        import llama_cpp  # noqa: PLC0415 (optional, built outside the repository)
    except ImportError:
        print("llama_cpp is not importable: put llama-cpp-python on PYTHONPATH", file=sys.stderr)
        return 2
    build = pathlib.Path(args.build)
    cli, tool = build / "src" / "cli" / "llamaserve", build / "tests" / "unit" / "tools" / "logits_tool"
    prompt = chatml(args.question)
    ids = subprocess.run([str(cli), "tokenize", "-m", args.model, "--parse-special", prompt],
                         capture_output=True, text=True, check=True).stdout.split()
    logits = {}
    with tempfile.TemporaryDirectory() as tmp:
        out = pathlib.Path(tmp) / "logits.f32"
        for name, flags in (("exact", ["--reference"]), ("fast", [])):
            subprocess.run([str(tool), *flags, args.model, str(out), *ids], check=True, capture_output=True)
            logits[name] = np.fromfile(out, dtype=np.float32).reshape(len(ids), -1)
    model = llama_cpp.Llama(args.model, n_ctx=max(512, len(ids) + 1), n_batch=512, logits_all=True,
                            verbose=False)
    model.eval([int(i) for i in ids])
    logits["llama.cpp"] = np.array(model.scores[:len(ids)], dtype=np.float32)

    def piece(token: int) -> str:
        return subprocess.run([str(cli), "tokenize", "-m", args.model, "--decode", str(token)],
                              capture_output=True, text=True, check=True).stdout

    lines = [f"# CPU kernel accuracy: exact vs fast vs llama.cpp ({pathlib.Path(args.model).name})", "",
             f"- date: {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%dT%H:%MZ}",
             f"- commit: {subprocess.run(['git', '-C', str(ROOT), 'rev-parse', '--short', 'HEAD'], capture_output=True, text=True).stdout.strip()}",
             f"- llama.cpp: llama-cpp-python {llama_cpp.__version__}",
             f"- prompt: the ChatML conversation of `{args.question}` ({len(ids)} tokens), logits of every position",
             "- command: `bench/cpu_kernels/compare_llama_cpp_logits.py`", "",
             "| pair | max abs diff / max abs logit (all positions) | max abs diff, last position |",
             "| --- | --- | --- |"]
    for a, b in (("fast", "exact"), ("llama.cpp", "exact"), ("fast", "llama.cpp")):
        diff = np.abs(logits[a] - logits[b])
        relative = float(np.max(diff.max(axis=1) / np.abs(logits[b]).max(axis=1)))
        lines.append(f"| {a} vs {b} | {relative:.2e} | {float(diff[-1].max()):.3f} |")
    lines += ["", "| kernels | first answer token | runner-up | top-2 margin |", "| --- | --- | --- | --- |"]
    for name, value in logits.items():
        top = np.argsort(value[-1])[::-1][:2]
        lines.append(f"| {name} | {int(top[0])} {piece(int(top[0]))!r} | {int(top[1])} {piece(int(top[1]))!r} | "
                     f"{float(value[-1][top[0]] - value[-1][top[1]]):.3f} |")
    report = "\n".join(lines) + "\n"
    print(report)
    if args.out:
        pathlib.Path(args.out).write_text(report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
