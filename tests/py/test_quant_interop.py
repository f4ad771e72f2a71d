"""Cross-checks the C++ quant codecs against gguf-py, an independent implementation of the
GGUF block formats (the numpy reference shipped with llama.cpp).

Both directions, bit-exact:
  * bytes quantized by us decode in gguf-py to exactly the floats our decoder gives;
  * bytes quantized by gguf-py (Q8_0, Q4_0, Q4_1, F16, BF16) decode identically in ours, and
    our encoders produce the very same bytes;
  * random raw K-quant / legacy blocks (arbitrary quants, sane f16 scales) decode identically.

The C++ side runs through the test helper quant_tool, found under LLAMASERVE_BUILD_DIR
(default build/cpu) at tests/unit/quant/quant_tool.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import numpy as np
import pytest

gguf = pytest.importorskip("gguf")
from gguf import GGMLQuantizationType as QT  # noqa: E402
from gguf.constants import GGML_QUANT_SIZES  # noqa: E402

REPO_ROOT = Path(__file__).resolve().parents[2]


def _tool_path() -> Path:
    build_dir = Path(os.environ.get("LLAMASERVE_BUILD_DIR", "build/cpu"))
    if not build_dir.is_absolute():
        build_dir = REPO_ROOT / build_dir
    return build_dir / "tests" / "unit" / "quant" / "quant_tool"


@pytest.fixture(scope="module")
def tool() -> Path:
    path = _tool_path()
    if not path.exists():
        pytest.skip(f"quant_tool not built at {path}")
    return path


def run_tool(tool: Path, tmp_path: Path, mode: str, type_name: str, data: bytes) -> bytes:
    src = tmp_path / f"{mode}-{type_name}.in"
    dst = tmp_path / f"{mode}-{type_name}.out"
    src.write_bytes(data)
    proc = subprocess.run([str(tool), mode, type_name, str(src), str(dst)],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    return dst.read_bytes()


def ours_quantize(tool, tmp_path, qtype: QT, x: np.ndarray) -> np.ndarray:
    out = run_tool(tool, tmp_path, "quantize", qtype.name, x.astype(np.float32).tobytes())
    return np.frombuffer(out, dtype=np.uint8)


def ours_dequantize(tool, tmp_path, qtype: QT, raw: np.ndarray) -> np.ndarray:
    out = run_tool(tool, tmp_path, "dequantize", qtype.name, raw.tobytes())
    return np.frombuffer(out, dtype=np.float32)


def gguf_dequantize(qtype: QT, raw: np.ndarray) -> np.ndarray:
    return np.asarray(gguf.quants.dequantize(raw, qtype), dtype=np.float32).reshape(-1)


def gguf_quantize(qtype: QT, x: np.ndarray) -> np.ndarray:
    with np.errstate(over="ignore"):  # values past the f16 range become inf, on purpose
        quantized = gguf.quants.quantize(x.astype(np.float32), qtype)
    return np.asarray(quantized).view(np.uint8).reshape(-1)


def assert_bit_equal(actual: np.ndarray, expected: np.ndarray, what: str) -> None:
    assert actual.shape == expected.shape, f"{what}: shape {actual.shape} vs {expected.shape}"
    a = actual.view(np.uint32)
    b = expected.view(np.uint32)
    bad = np.flatnonzero(a != b)
    assert bad.size == 0, (f"{what}: {bad.size} of {a.size} differ, first at {bad[0]}: "
                           f"{actual[bad[0]]!r} vs {expected[bad[0]]!r}")


ALL_TYPES = [QT.F32, QT.F16, QT.BF16, QT.Q8_0, QT.Q4_0, QT.Q4_1, QT.Q4_K, QT.Q5_K, QT.Q6_K]
GGUF_QUANTIZABLE = [QT.F16, QT.BF16, QT.Q8_0, QT.Q4_0, QT.Q4_1]


def block_elems(qtype: QT) -> int:
    return GGML_QUANT_SIZES[qtype][0]


def odd_sizes(qtype: QT) -> list[int]:
    """769- and 5125-like lengths padded to the block size, plus whole-block odd counts."""
    b = block_elems(qtype)
    pad = lambda n: (n + b - 1) // b * b  # noqa: E731
    return [pad(769), pad(5125), 256 * 21] + ([32 * 37] if b <= 32 else [])


def gaussian(n: int, seed: int, sigma: float = 0.02) -> np.ndarray:
    return np.random.default_rng(seed).normal(0.0, sigma, n).astype(np.float32)


@pytest.mark.parametrize("qtype", ALL_TYPES, ids=lambda t: t.name)
def test_our_bytes_decode_identically_in_gguf(tool, tmp_path, qtype):
    for i, n in enumerate(odd_sizes(qtype)):
        x = gaussian(n, seed=1000 + i)
        x[:: 97] *= 50.0  # a few outliers per row stress the scale searches
        raw = ours_quantize(tool, tmp_path, qtype, x)
        bytes_per_block = GGML_QUANT_SIZES[qtype][1]
        assert raw.size == n // block_elems(qtype) * bytes_per_block
        ours = ours_dequantize(tool, tmp_path, qtype, raw)
        theirs = gguf_dequantize(qtype, raw)
        assert_bit_equal(ours, theirs, f"{qtype.name} n={n}")
        # Sanity: a real encoding, not an identically-decoded garbage one.
        rel_rms = np.sqrt(np.sum((ours - x) ** 2) / np.sum(x.astype(np.float64) ** 2))
        assert rel_rms < 0.2, f"{qtype.name} n={n}: relative rms {rel_rms}"


def special_values() -> np.ndarray:
    """Values that exercise f16/bf16 rounding: ties, subnormals, overflow, infinities."""
    f32 = lambda bits: np.array(bits, dtype=np.uint32).view(np.float32)  # noqa: E731
    halves = np.arange(0, 0x7c00, dtype=np.uint16).view(np.float16).astype(np.float32)
    upper = np.append(halves[1:], np.float32(65536.0))
    midpoints = (halves + upper) / 2  # exact in float32; ties for f16
    return np.concatenate([
        midpoints, -midpoints,
        np.nextafter(midpoints, np.float32(0)), np.nextafter(midpoints, np.float32(1e9)),
        f32([0x3f808000, 0x3f818000, 0x00008000, 0x00018000, 0x7f7fffff, 0xff7fffff,
             0x00000001, 0x80000001, 0x7f800000, 0xff800000, 0x7fc00000, 0x80000000]),
        np.float32([65504.0, 65519.99, 65520.0, 1e10, -1e10, 2.0**-25, 3 * 2.0**-25]),
    ]).astype(np.float32)


@pytest.mark.parametrize("qtype", GGUF_QUANTIZABLE, ids=lambda t: t.name)
def test_gguf_bytes_decode_identically_in_ours_and_encoders_agree(tool, tmp_path, qtype):
    inputs = [gaussian(n, seed=2000 + i) for i, n in enumerate(odd_sizes(qtype))]
    # Blocks with ties in max magnitude, all-equal values and zeros: the legacy rules'
    # corner cases (first-of-equal maximum, d = 0).
    corner = np.zeros(32 * 6, dtype=np.float32)
    corner[0:32] = 0.5
    corner[32:64] = np.linspace(-3, 3, 32)
    corner[64] = -7.0
    corner[70] = 7.0
    corner[96:128] = -1e-3
    corner[128:160] = np.arange(32) * 0.125 - 2.0
    inputs.append(corner)
    if qtype in (QT.F16, QT.BF16):
        inputs.append(special_values())
    for i, x in enumerate(inputs):
        theirs_raw = gguf_quantize(qtype, x)
        ours_raw = ours_quantize(tool, tmp_path, qtype, x)
        assert_bit_equal(ours_dequantize(tool, tmp_path, qtype, theirs_raw),
                         gguf_dequantize(qtype, theirs_raw), f"{qtype.name} input {i}")
        mismatch = np.flatnonzero(ours_raw != theirs_raw)
        assert mismatch.size == 0, (f"{qtype.name} input {i}: encoders differ at byte "
                                    f"{mismatch[0]} of {ours_raw.size}")


def random_blocks(qtype: QT, n_blocks: int, seed: int) -> np.ndarray:
    """Random quants and sub-block scales with finite, sane f16 super-block scales."""
    rng = np.random.default_rng(seed)
    bytes_per_block = GGML_QUANT_SIZES[qtype][1]
    raw = rng.integers(0, 256, size=(n_blocks, bytes_per_block), dtype=np.uint8)

    def halves(sign_random: bool) -> np.ndarray:
        magnitude = 10.0 ** rng.uniform(-5, 0, n_blocks)
        sign = rng.choice([-1.0, 1.0], n_blocks) if sign_random else 1.0
        return (sign * magnitude).astype(np.float16).view(np.uint8).reshape(n_blocks, 2)

    if qtype in (QT.Q8_0, QT.Q4_0):
        raw[:, 0:2] = halves(True)
    elif qtype == QT.Q4_1:
        raw[:, 0:2] = halves(True)
        raw[:, 2:4] = halves(True)
    elif qtype in (QT.Q4_K, QT.Q5_K):
        raw[:, 0:2] = halves(True)  # d
        raw[:, 2:4] = halves(True)  # dmin
    elif qtype == QT.Q6_K:
        raw[:, -2:] = halves(True)  # d is the last field
    return raw.reshape(-1)


@pytest.mark.parametrize("qtype", [QT.Q4_K, QT.Q5_K, QT.Q6_K, QT.Q8_0, QT.Q4_0, QT.Q4_1],
                         ids=lambda t: t.name)
def test_random_blocks_decode_identically(tool, tmp_path, qtype):
    raw = random_blocks(qtype, n_blocks=300, seed=int(qtype))
    ours = ours_dequantize(tool, tmp_path, qtype, raw)
    theirs = gguf_dequantize(qtype, raw)
    assert np.all(np.isfinite(theirs))
    assert_bit_equal(ours, theirs, qtype.name)


@pytest.mark.parametrize("qtype", [QT.F16, QT.BF16], ids=lambda t: t.name)
def test_every_half_pattern_decodes_identically(tool, tmp_path, qtype):
    raw = np.arange(0, 0x10000, dtype=np.uint32).astype(np.uint16).view(np.uint8)
    ours = ours_dequantize(tool, tmp_path, qtype, raw)
    theirs = gguf_dequantize(qtype, raw)
    nan = np.isnan(theirs)
    assert np.array_equal(np.isnan(ours), nan)
    assert_bit_equal(ours[~nan], theirs[~nan], qtype.name)


def test_tool_rejects_partial_blocks(tool, tmp_path):
    src = tmp_path / "partial.f32"
    src.write_bytes(np.zeros(33, dtype=np.float32).tobytes())
    proc = subprocess.run([str(tool), "quantize", "Q8_0", str(src), str(tmp_path / "out")],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode != 0
    assert "33" in proc.stderr
