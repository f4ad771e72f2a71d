"""The Q8_0 KV cache on the default model: teacher-forced over a paragraph of real text, its
next-token distributions stay as close to an f32 cache's as the f16 cache's do (the logits_tool
helper, optimized CPU kernels, one prefill of every position)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import numpy as np
import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
BIN = Path(os.environ.get("LLAMASERVE_BIN", REPO_ROOT / "build" / "cpu" / "src" / "cli" / "llamaserve"))
_BUILD = Path(os.environ.get("LLAMASERVE_BUILD_DIR", "build/cpu"))
LOGITS_TOOL = (_BUILD if _BUILD.is_absolute() else REPO_ROOT / _BUILD) / "tests" / "unit" / "tools" / "logits_tool"
SMOLLM2 = REPO_ROOT / "models" / "SmolLM2-135M-Instruct.Q4_1.gguf"

pytestmark = [
    pytest.mark.skipif(not BIN.exists(), reason=f"llamaserve binary not built: {BIN}"),
    pytest.mark.skipif(not LOGITS_TOOL.exists(), reason=f"logits_tool not built: {LOGITS_TOOL}"),
    pytest.mark.skipif(not SMOLLM2.exists(), reason=f"model missing: {SMOLLM2}"),
]

TEXT = (
    "The lighthouse stood on a narrow spit of rock at the edge of the northern coast. For nearly "
    "a century its keepers had climbed the one hundred and twelve steps each evening to light the "
    "lamp, trim the wick and wind the clockwork that turned the great lens. The last keeper, a "
    "quiet man named Thomas Arden, kept a logbook in which he recorded the weather, the passing "
    "ships and, now and then, a thought about his life. In the winter of 1921 a storm broke the "
    "glass of the lantern room, and Arden spent three nights repairing it by candlelight while "
    "the sea threw spray as high as the gallery. When the supply boat finally reached him, the "
    "crew found the lamp burning and the keeper asleep at his desk, his logbook open to a page "
    "that read only: the light did not go out.")


def logits(tokens: list[int], kv_type: str | None, tmp: Path) -> np.ndarray:
    out = tmp / f"{kv_type or 'f32'}.f32"
    args = [str(LOGITS_TOOL), *(["--kv-type", kv_type] if kv_type else []), str(SMOLLM2), str(out),
            *map(str, tokens)]
    proc = subprocess.run(args, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    return np.fromfile(out, dtype="<f4").reshape(len(tokens), -1).astype(np.float64)


def log_softmax(x: np.ndarray) -> np.ndarray:
    x = x - x.max(axis=1, keepdims=True)
    return x - np.log(np.exp(x).sum(axis=1, keepdims=True))


def test_q8_0_cache_is_as_close_to_f32_as_f16(tmp_path):
    tokenized = subprocess.run([str(BIN), "tokenize", "-m", str(SMOLLM2), TEXT], capture_output=True,
                               text=True, timeout=60)
    assert tokenized.returncode == 0, tokenized.stderr
    tokens = [int(t) for t in tokenized.stdout.split()]
    assert len(tokens) > 150
    reference = log_softmax(logits(tokens, None, tmp_path))
    p = np.exp(reference)
    stats = {}
    for kv_type in ("f16", "q8_0"):
        ours = logits(tokens, kv_type, tmp_path)
        kl = (p * (reference - log_softmax(ours))).sum(axis=1)
        agree = float((ours.argmax(axis=1) == reference.argmax(axis=1)).mean())
        stats[kv_type] = (float(kl.mean()), float(kl.max()), agree)
        print(f"{kv_type} cache against f32: KL mean {kl.mean():.2e} max {kl.max():.2e}, "
              f"top-1 agreement {agree:.3f}")
    f16, q8 = stats["f16"], stats["q8_0"]
    assert q8[0] > 0  # the caches really differ
    assert q8[0] <= 2 * f16[0] and q8[1] <= 2 * f16[1]
    assert q8[2] >= f16[2] - 0.03
