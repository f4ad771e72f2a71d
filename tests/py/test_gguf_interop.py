"""GGUF interoperability with the PyPI `gguf` package (the reference implementation).

- Our writer's output (gguf_test writes tests/fixtures/generated/gguf_roundtrip.gguf when
  LLAMASERVE_WRITE_FIXTURES is set) is read by gguf.GGUFReader: same keys in the same order,
  same value types and values, same tensor names, types, shapes and bytes.
- Files written by gguf.GGUFWriter, and the vocab-only fixtures, are read by
  `llamaserve inspect --json`: same metadata, alignment, tensor directory and offsets.
"""

import json
import math
import os
import subprocess
from pathlib import Path

import numpy as np
import pytest

gguf = pytest.importorskip("gguf")
from gguf import GGMLQuantizationType as QT  # noqa: E402
from gguf import GGUFReader, GGUFValueType as VT, GGUFWriter  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
BUILD_DIR = Path(os.environ.get("LLAMASERVE_BUILD_DIR", ROOT / "build" / "cpu"))
GGUF_TEST = BUILD_DIR / "tests" / "unit" / "gguf" / "gguf_test"
LLAMASERVE = Path(os.environ.get("LLAMASERVE_BIN", ROOT / "build" / "cpu" / "src" / "cli" / "llamaserve"))
ROUNDTRIP = ROOT / "tests" / "fixtures" / "generated" / "gguf_roundtrip.gguf"
FIXTURES = ROOT / "tests" / "fixtures"
MODEL = ROOT / "models" / "SmolLM2-135M-Instruct.Q4_1.gguf"

I64_MIN, I64_MAX = -(2**63), 2**63 - 1

# What tests/unit/gguf/gguf_test_util.h (add_sample_metadata) writes, in order. The writer
# was built with alignment 64, so general.alignment comes first.
EXPECTED_METADATA = [
    ("general.alignment", VT.UINT32, None, 64),
    ("general.architecture", VT.STRING, None, "llama"),
    ("general.name", VT.STRING, None, "gguf roundtrip"),
    ("test.u8", VT.UINT8, None, 200),
    ("test.i8", VT.INT8, None, -100),
    ("test.u16", VT.UINT16, None, 60000),
    ("test.i16", VT.INT16, None, -30000),
    ("test.u32", VT.UINT32, None, 4000000000),
    ("test.i32", VT.INT32, None, -2000000000),
    ("test.u64", VT.UINT64, None, 2**64 - 1),
    ("test.i64", VT.INT64, None, I64_MIN),
    ("test.f32", VT.FLOAT32, None, 3.25),
    ("test.f64", VT.FLOAT64, None, -1.5e300),
    ("test.bool_true", VT.BOOL, None, True),
    ("test.bool_false", VT.BOOL, None, False),
    ("test.string", VT.STRING, None, "héllo wörld ✓"),
    ("test.empty_string", VT.STRING, None, ""),
    ("test.arr_u8", VT.ARRAY, VT.UINT8, [0, 1, 255]),
    ("test.arr_i8", VT.ARRAY, VT.INT8, [-128, 0, 127]),
    ("test.arr_u16", VT.ARRAY, VT.UINT16, [0, 65535]),
    ("test.arr_i16", VT.ARRAY, VT.INT16, [-32768, 32767]),
    ("test.arr_u32", VT.ARRAY, VT.UINT32, [0, 4294967295]),
    ("test.arr_i32", VT.ARRAY, VT.INT32, [-(2**31), 7, 2**31 - 1]),
    ("test.arr_u64", VT.ARRAY, VT.UINT64, [0, 2**64 - 1]),
    ("test.arr_i64", VT.ARRAY, VT.INT64, [I64_MIN, I64_MAX]),
    ("test.arr_f32", VT.ARRAY, VT.FLOAT32, [0.5, -2.0, 1024.125]),
    ("test.arr_f64", VT.ARRAY, VT.FLOAT64, [0.1, -1e-300]),
    ("test.arr_bool", VT.ARRAY, VT.BOOL, [True, False, True]),
    ("test.arr_string", VT.ARRAY, VT.STRING, ["alpha", "", "ünï ✓", "with space"]),
    ("test.arr_empty", VT.ARRAY, VT.INT32, []),
]

# (name, type, GGUF dims, bytes); tensor i holds pattern_bytes(bytes, 1 + 17 * i).
EXPECTED_TENSORS = [
    ("tok_embd.weight", QT.F32, [4, 3], 48),
    ("norm.weight", QT.F16, [6], 12),
    ("blk.0.q8.weight", QT.Q8_0, [64, 2], 136),
    ("blk.0.q4k.weight", QT.Q4_K, [256], 144),
    ("ids", QT.I32, [5], 20),
    ("cube", QT.BF16, [2, 2, 2, 2], 32),
]


def pattern_bytes(n: int, seed: int) -> bytes:
    return bytes((seed + i * 7 + (i >> 8)) & 0xFF for i in range(n))


def field_value(field, max_elems=None):
    """A ReaderField as plain Python values, decoded from its raw parts (arrays: the first
    max_elems elements, or all)."""
    def scalar(part, vtype):
        if vtype == VT.STRING:
            return bytes(part).decode("utf-8", errors="replace")
        value = part[0].item()
        return bool(value) if vtype == VT.BOOL else value

    if field.types[0] == VT.ARRAY:
        return [scalar(field.parts[i], field.types[-1]) for i in field.data[:max_elems]]
    return scalar(field.parts[field.data[0]], field.types[0])


@pytest.fixture(scope="module")
def roundtrip_file() -> Path:
    if not GGUF_TEST.exists():
        pytest.skip(f"gguf_test not built: {GGUF_TEST}")
    env = dict(os.environ, LLAMASERVE_WRITE_FIXTURES="1")
    result = subprocess.run(
        [str(GGUF_TEST), "--gtest_filter=GgufInterop.WritesRoundTripFixture"],
        env=env, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
    assert ROUNDTRIP.exists(), "gguf_test did not write the fixture"
    return ROUNDTRIP


def run_inspect(path: Path, *extra: str) -> subprocess.CompletedProcess:
    if not LLAMASERVE.exists():
        pytest.skip(f"llamaserve not built: {LLAMASERVE}")
    return subprocess.run([str(LLAMASERVE), "inspect", "-m", str(path), *extra],
                          capture_output=True, text=True, timeout=120)


def inspect_json(path: Path, *extra: str) -> dict:
    result = run_inspect(path, "--json", *extra)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def same_number(a, b) -> bool:
    if isinstance(a, float) or isinstance(b, float):
        return a == b or (math.isnan(a) and math.isnan(b))
    return a == b


def assert_metadata_matches(ours: dict, reader: GGUFReader):
    """`ours` is inspect's "metadata" object; gguf-py is the reference."""
    keys = [k for k in reader.fields if not k.startswith("GGUF.")]
    assert list(ours) == keys, "keys or their order differ"
    for key in keys:
        field = reader.fields[key]
        entry = ours[key]
        assert entry["type"] == VT(field.types[0]).name, key
        expected = field_value(field, max_elems=16)
        if field.types[0] == VT.ARRAY:
            value = entry["value"]
            if len(field.types) > 1:  # gguf-py records no element type for an empty array
                assert value["elem_type"] == VT(field.types[1]).name, key
            assert value["length"] == len(field.data), key
            shown = value["values"]
            assert len(shown) == len(expected), key
            assert all(same_number(a, b) if not isinstance(a, str) else a == b
                       for a, b in zip(shown, expected)), key
        elif isinstance(expected, str):
            assert entry["value"] == expected, key
        else:
            assert same_number(entry["value"], expected), (key, entry["value"], expected)


def assert_tensors_match(ours: list, reader: GGUFReader):
    assert [t["name"] for t in ours] == [t.name for t in reader.tensors]
    for mine, ref in zip(ours, reader.tensors):
        assert mine["type"] == QT(ref.tensor_type).name, ref.name
        assert mine["dims"] == [int(d) for d in ref.shape], ref.name
        assert mine["bytes"] == int(ref.n_bytes), ref.name
        assert mine["file_offset"] == int(ref.data_offset), ref.name


# --- our writer, read by gguf-py -------------------------------------------------------------

def test_gguf_py_reads_our_metadata(roundtrip_file):
    reader = GGUFReader(roundtrip_file)
    assert field_value(reader.fields["GGUF.version"]) == 3
    keys = [k for k in reader.fields if not k.startswith("GGUF.")]
    assert keys == [key for key, *_ in EXPECTED_METADATA]
    for key, vtype, elem_type, value in EXPECTED_METADATA:
        field = reader.fields[key]
        assert field.types[0] == vtype, key
        if value and elem_type is not None:  # gguf-py keeps no element type for empty arrays
            assert field.types[1] == elem_type, key
        assert field_value(field) == value, key


def test_gguf_py_reads_our_tensors(roundtrip_file):
    reader = GGUFReader(roundtrip_file)
    assert reader.alignment == 64
    assert [t.name for t in reader.tensors] == [t[0] for t in EXPECTED_TENSORS]
    for index, (tensor, (name, qtype, dims, n_bytes)) in enumerate(
            zip(reader.tensors, EXPECTED_TENSORS)):
        assert tensor.tensor_type == qtype, name
        assert [int(d) for d in tensor.shape] == dims, name
        assert int(tensor.n_bytes) == n_bytes, name
        assert tensor.data_offset % 64 == 0, name
        assert tensor.data.tobytes() == pattern_bytes(n_bytes, 1 + 17 * index), name


def test_inspect_agrees_with_gguf_py_on_our_file(roundtrip_file):
    ours = inspect_json(roundtrip_file)
    reader = GGUFReader(roundtrip_file)
    assert ours["alignment"] == 64
    assert_metadata_matches(ours["metadata"], reader)
    assert_tensors_match(ours["tensors"], reader)


# --- gguf-py's writer, read by llamaserve inspect --------------------------------------------

@pytest.fixture(scope="module")
def gguf_py_file(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("gguf_py") / "written_by_gguf_py.gguf"
    writer = GGUFWriter(str(path), arch="llama")
    writer.add_custom_alignment(128)
    writer.add_name("written by gguf-py")
    writer.add_context_length(256)
    writer.add_embedding_length(64)
    writer.add_block_count(2)
    writer.add_feed_forward_length(192)
    writer.add_head_count(4)
    writer.add_head_count_kv(2)
    writer.add_rope_freq_base(10000.0)
    writer.add_layer_norm_rms_eps(1e-6)
    writer.add_uint8("x.u8", 250)
    writer.add_int8("x.i8", -5)
    writer.add_uint16("x.u16", 65000)
    writer.add_int16("x.i16", -1234)
    writer.add_uint32("x.u32", 3000000000)
    writer.add_int32("x.i32", -123456789)
    writer.add_uint64("x.u64", 2**64 - 2)
    writer.add_int64("x.i64", -(2**62))
    writer.add_float32("x.f32", 0.1)
    writer.add_float64("x.f64", 2.5e-200)
    writer.add_bool("x.bool", True)
    writer.add_string("x.str", "naïve ✓")
    writer.add_key_value("x.arr_u64", [1, 2**64 - 1], VT.ARRAY, sub_type=VT.UINT64)
    writer.add_key_value("x.arr_i16", [-3, 3], VT.ARRAY, sub_type=VT.INT16)
    writer.add_array("x.arr_f32", [0.25, -8.0])
    writer.add_array("x.arr_bool", [False, True])
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("default")
    writer.add_token_list([f"tok{i}" for i in range(20)])
    writer.add_chat_template("{{ first line }}\n{{ second line }}")
    rng = np.random.default_rng(7)
    writer.add_tensor("token_embd.weight", rng.standard_normal((20, 64), dtype=np.float32))
    writer.add_tensor("blk.0.attn_norm.weight", rng.standard_normal(64).astype(np.float16))
    q8 = rng.integers(0, 256, size=(3, 2 * 34), dtype=np.uint8)  # 3 rows of 64 Q8_0 elements
    writer.add_tensor("blk.0.attn_q.weight", q8, raw_shape=q8.shape, raw_dtype=QT.Q8_0)
    writer.add_tensor("ids", np.arange(7, dtype=np.int32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def test_inspect_reads_gguf_py_file(gguf_py_file):
    ours = inspect_json(gguf_py_file)
    reader = GGUFReader(gguf_py_file)
    assert ours["alignment"] == 128
    assert ours["data_offset"] % 128 == 0
    assert_metadata_matches(ours["metadata"], reader)
    assert_tensors_match(ours["tensors"], reader)
    assert all(t["file_offset"] % 128 == 0 for t in ours["tensors"])

    assert ours["architecture"] == "llama"
    assert ours["name"] == "written by gguf-py"
    hp = ours["hparams"]
    assert (hp["context_length"], hp["embedding_length"], hp["block_count"]) == (256, 64, 2)
    assert (hp["feed_forward_length"], hp["head_count"], hp["head_count_kv"]) == (192, 4, 2)
    assert hp["rope_freq_base"] == 10000.0
    assert hp["layer_norm_rms_epsilon"] == float(np.float32(1e-6))
    assert ours["tokenizer"] == {"model": "gpt2", "pre": "default", "vocab_size": 20,
                                 "chat_template": True,
                                 "chat_template_first_line": "{{ first line }}"}
    assert ours["tensor_count"] == 4
    assert ours["tensor_types"] == {
        "F32": {"count": 1, "bytes": 20 * 64 * 4},
        "F16": {"count": 1, "bytes": 64 * 2},
        "Q8_0": {"count": 1, "bytes": 3 * 68},
        "I32": {"count": 1, "bytes": 28},
    }
    # f16 K and V for 256 tokens: 2 layers x 2 KV heads x head_dim 16.
    assert ours["kv_cache"]["bytes_f16"] == 2 * 2 * 256 * 2 * 2 * 16
    assert inspect_json(gguf_py_file, "--ctx", "32")["kv_cache"]["n_ctx"] == 32
    assert ours["file_size_bytes"] == gguf_py_file.stat().st_size


def test_inspect_text_mode(gguf_py_file):
    result = run_inspect(gguf_py_file)
    assert result.returncode == 0, result.stderr
    assert "architecture:   llama" in result.stdout
    assert "Q8_0" in result.stdout and "{{ first line }}" in result.stdout


# vocab-llama3-bpe.gguf is left out: gguf-py needs half a minute to parse its 400k strings
# (the C++ tests read it).
@pytest.mark.parametrize("name", ["vocab-llama2-spm.gguf", "model"])
def test_inspect_agrees_with_gguf_py_on_real_files(name):
    path = MODEL if name == "model" else FIXTURES / name
    if not path.exists():
        pytest.skip(f"absent: {path}")
    ours = inspect_json(path)
    reader = GGUFReader(path)
    assert_metadata_matches(ours["metadata"], reader)
    assert_tensors_match(ours["tensors"], reader)
    if name == "model":
        assert ours["hparams"]["block_count"] == 30
        assert ours["tensor_count"] == 272
        assert ours["tensor_types"]["Q8_0"]["count"] == 1


# --- bad files -------------------------------------------------------------------------------

def test_inspect_rejects_bad_files(tmp_path):
    garbage = tmp_path / "garbage.gguf"
    garbage.write_bytes(b"not a gguf file at all")
    result = run_inspect(garbage)
    assert result.returncode == 1
    assert "not a GGUF file" in result.stderr and str(garbage) in result.stderr
    assert result.stdout == ""

    v1 = tmp_path / "v1.gguf"
    v1.write_bytes(b"GGUF" + (1).to_bytes(4, "little") + bytes(16))
    result = run_inspect(v1, "--json")
    assert result.returncode == 1
    assert "version 1" in result.stderr

    truncated = tmp_path / "truncated.gguf"
    src = FIXTURES / "vocab-llama2-spm.gguf"
    if src.exists():
        truncated.write_bytes(src.read_bytes()[:5000])
        result = run_inspect(truncated)
        assert result.returncode == 1
        assert "truncated file" in result.stderr and "5000" in result.stderr
