"""Checks our tokenizers against the reference implementations, token for token.

  (a) SentencePiece-style BPE (LLaMA 2): tests/fixtures/vocab-llama2-spm.gguf under
      our tokenizer against the `sentencepiece` package with llama2-tokenizer.model.
  (b) Byte-level BPE: vocab-llama3-bpe.gguf (pre-tokenizer llama3) and the SmolLM2 model
      (pre-tokenizer smollm) against the `tokenizers` package, with a BPE model built from
      the vocabulary and merges that gguf-py reads out of the same files and the
      pre-tokenizer configuration those models ship with; the qwen2 and gpt2 pre-tokenizers
      likewise, on copies of the LLaMA 3 vocabulary that gguf-py writes with that pre name.
  (c) decode(encode(s)) == s for every string (guaranteed without special-token parsing).

Every string of a corpus generated from a fixed seed (scripts, CJK, emoji, whitespace runs,
control and byte-fallback characters, code, numbers, contractions) goes through one
`llamaserve tokenize --lines` process per vocabulary. The binary comes from LLAMASERVE_BIN
(default build/cpu/src/cli/llamaserve); the tests skip only when it is missing.
"""

from __future__ import annotations

import functools
import json
import os
import random
import subprocess
from pathlib import Path

import pytest

gguf = pytest.importorskip("gguf")
sentencepiece = pytest.importorskip("sentencepiece")
tokenizers = pytest.importorskip("tokenizers")

REPO_ROOT = Path(__file__).resolve().parents[2]
FIXTURES = REPO_ROOT / "tests" / "fixtures"
LLAMA2_GGUF = FIXTURES / "vocab-llama2-spm.gguf"
LLAMA2_MODEL = FIXTURES / "llama2-tokenizer.model"
LLAMA3_GGUF = FIXTURES / "vocab-llama3-bpe.gguf"
SMOLLM_GGUF = REPO_ROOT / "models" / "SmolLM2-135M-Instruct.Q4_1.gguf"

LLAMA3_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|"
                  r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")

QWEN2_PATTERN = LLAMA3_PATTERN.replace(r"\p{N}{1,3}", r"\p{N}")

CORPUS_SIZE = 3000
CORPUS_SEED = 20240611


# ---------------------------------------------------------------------------- the corpus

def _chars(rng: random.Random, first: int, last: int, n: int) -> str:
    return "".join(chr(rng.randint(first, last)) for _ in range(n))


SCRIPT_RANGES = [
    (0x00C0, 0x00FF),  # Latin-1 letters
    (0x0100, 0x017F),  # Latin Extended-A (includes U+017F long s)
    (0x0391, 0x03C9),  # Greek
    (0x0410, 0x044F),  # Cyrillic
    (0x05D0, 0x05EA),  # Hebrew
    (0x0627, 0x064A),  # Arabic
    (0x0905, 0x094C),  # Devanagari letters and vowel signs (marks)
    (0x0E01, 0x0E3A),  # Thai
    (0x4E00, 0x9FFF),  # CJK ideographs
    (0x3041, 0x3096),  # Hiragana
    (0x30A1, 0x30FA),  # Katakana
    (0xAC00, 0xD7A3),  # Hangul syllables
    (0x0300, 0x036F),  # combining diacritics
]

EMOJI = ["🦙", "😀", "🎉", "👍🏽", "👨‍👩‍👧", "🇯🇵", "❤️", "1️⃣", "🧑‍💻", "✨", "🤖", "🍣", "🏳️‍🌈"]

WHITESPACE = [" ", "  ", "   ", "\t", "\t\t", "\n", "\n\n", "\r\n", " \n ", "\n \n", "\u00a0",
              "\u3000", "\u2009", "\u2028", "\x0b", "\x0c", "\x85", "    \n\t  "]

# Characters most vocabularies lack (byte fallback in LLaMA 2) and controls that are not \s.
RARE = ["\x00", "\x01", "\x07", "\x1b", "\x1c", "\x1f", "\x7f", "\ue000", "\U00010000",
        "\U0001d400", "\U00020000", "\U0001f9ff", "\u2603", "\ufffd", "\u00ad", "\u200b"]

CODE = [
    "def f(x):\n    return x * 2\n",
    "for (int i = 0; i < n; ++i) { sum += a[i]; }",
    '{"key": [1, 2.5, null], "nested": {"a": "b"}}',
    "SELECT * FROM users WHERE id = 42;",
    "#include <vector>\nint main() { return 0; }",
    "x = [i**2 for i in range(10) if i % 2 == 0]",
    "if (a && b || !c) {\n\treturn;\n}",
    "console.log(`value: ${obj?.field ?? 'none'}`);",
]

NUMBERS = ["0", "7", "42", "123", "1234", "12345678901234567890", "3.14159", "1,234,567",
           "-0.5e-10", "٣٤٥", "１２３", "²³", "Ⅻ", "½", "2024-06-11", "v1.2.3", "0x1F"]

WORDS = ["the", "The", "quick", "brown", "fox", "jumps", "over", "lazy", "dog", "Hello",
         "world", "LLaMA", "tokenizer", "inference", "server", "GPU", "naïve", "café",
         "résumé", "Straße", "mañana", "über", "it's", "IT'S", "we'll", "You'RE", "they've",
         "I'm", "'ll", "''", "it'ſ", "that'ſall", "WE'LLdo", "'DEAR", "don't", "O'Neil", "rock'n'roll", "e.g.", "U.S.A."]

PUNCT = [".", ",", "!", "?", ";", ":", "...", "--", "—", "(", ")", "[", "]", "\"", "'", "«»",
         "、", "。", "¿", "¡", "@", "#", "$", "%", "&", "*", "<", ">", "|", "~", "`", "\\"]


REPEATED = ["a", "=", ".", "-", "!", "0", "ha", "ab", " ", "\n", "ー", "日", "é", "_", "*", "#"]


def _fragment(rng: random.Random) -> str:
    kind = rng.randrange(10)
    if kind == 9:  # runs where many merge candidates tie
        return rng.choice(REPEATED) * rng.randint(2, 40)
    if kind == 0:
        return " ".join(rng.choice(WORDS) for _ in range(rng.randint(1, 6)))
    if kind == 1:
        first, last = rng.choice(SCRIPT_RANGES)
        return _chars(rng, first, last, rng.randint(1, 8))
    if kind == 2:
        return "".join(rng.choice(EMOJI) for _ in range(rng.randint(1, 3)))
    if kind == 3:
        return rng.choice(WHITESPACE)
    if kind == 4:
        return "".join(rng.choice(RARE) for _ in range(rng.randint(1, 3)))
    if kind == 5:
        return rng.choice(CODE)
    if kind == 6:
        return rng.choice(NUMBERS) if rng.random() < 0.6 else str(rng.randint(0, 10**rng.randint(1, 15)))
    if kind == 7:
        return rng.choice(PUNCT)
    return _chars(rng, 0x20, 0x7E, rng.randint(1, 12))  # printable ASCII noise


def make_corpus(seed: int = CORPUS_SEED, size: int = CORPUS_SIZE) -> list[str]:
    rng = random.Random(seed)
    corpus = ["", " ", "  ", "\n", "a", " a", "a ", "Hello world", "  leading", "trailing  ",
              "\t\ttabs", "line\nbreaks\r\n", "🦙", "日本語のテキスト", "ﬁ ＡＢ é\u0301"]
    while len(corpus) < size:
        separators = ["", " ", " ", "  ", "\n", "\t", ""]
        parts = [_fragment(rng) for _ in range(rng.randint(1, 8))]
        text = ""
        for part in parts:
            text += rng.choice(separators) + part
        corpus.append(text)
    return corpus


@pytest.fixture(scope="module")
def corpus() -> list[str]:
    return make_corpus()


# ------------------------------------------------------------------------ our tokenizer

def _binary() -> Path:
    path = Path(os.environ.get("LLAMASERVE_BIN", "build/cpu/src/cli/llamaserve"))
    return path if path.is_absolute() else REPO_ROOT / path


@pytest.fixture(scope="module")
def binary() -> Path:
    path = _binary()
    if not path.exists():
        pytest.skip(f"llamaserve binary not built at {path}")
    return path


def ours_encode(binary: Path, model: Path, texts: list[str], *flags: str) -> list[list[int]]:
    payload = "".join(json.dumps(t) + "\n" for t in texts)
    proc = subprocess.run([str(binary), "tokenize", "-m", str(model), "--lines", "--file", "-", *flags],
                          input=payload.encode(), capture_output=True, timeout=300)
    assert proc.returncode == 0, proc.stderr.decode(errors="replace")
    lines = proc.stdout.decode().split("\n")
    assert lines[-1] == "" and len(lines) == len(texts) + 1, "one output line per input line"
    return [[int(x) for x in line.split()] for line in lines[:-1]]


def ours_decode(binary: Path, model: Path, ids: list[list[int]], *flags: str) -> list[str]:
    payload = "".join(" ".join(map(str, row)) + "\n" for row in ids)
    proc = subprocess.run([str(binary), "tokenize", "-m", str(model), "--decode", "--lines", "--file", "-",
                           *flags], input=payload.encode(), capture_output=True, timeout=300)
    assert proc.returncode == 0, proc.stderr.decode(errors="replace")
    lines = proc.stdout.decode().split("\n")
    assert lines[-1] == "" and len(lines) == len(ids) + 1
    return [json.loads(line) for line in lines[:-1]]


def assert_same(texts: list[str], ours: list[list[int]], reference: list[list[int]], what: str) -> None:
    bad = [i for i, (a, b) in enumerate(zip(ours, reference)) if a != b]
    detail = "\n".join(f"  {texts[i]!r}\n    ours {ours[i]}\n    ref  {reference[i]}" for i in bad[:5])
    assert not bad, f"{what}: {len(bad)} of {len(texts)} strings differ, e.g.\n{detail}"


# ------------------------------------------------------------------ reference tokenizers

def _gguf_strings(reader, key: str) -> list[str]:
    field = reader.fields[key]
    return [bytes(field.parts[i]).decode("utf-8") for i in field.data]


def _gguf_ints(reader, key: str) -> list[int]:
    field = reader.fields[key]
    return [int(field.parts[i][0]) for i in field.data]


@functools.lru_cache(maxsize=None)
def read_vocab(path: Path) -> tuple[list[str], list[int], list[str]]:
    """Tokens, token types and merges of a byte-level BPE GGUF, read by gguf-py."""
    reader = gguf.GGUFReader(str(path))
    return (_gguf_strings(reader, "tokenizer.ggml.tokens"), _gguf_ints(reader, "tokenizer.ggml.token_type"),
            _gguf_strings(reader, "tokenizer.ggml.merges"))


def write_vocab_gguf(path: Path, source: Path, pre: str) -> None:
    """A vocab-only GGUF with `source`'s vocabulary and merges under another pre-tokenizer
    name, to check the pre-tokenizers no fixture model uses (qwen2, gpt2)."""
    tokens, types, merges = read_vocab(source)
    writer = gguf.GGUFWriter(str(path), arch="llama")
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre(pre)
    writer.add_token_list(tokens)
    writer.add_token_types(types)
    writer.add_token_merges(merges)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


def hf_tokenizer(source: Path, pre: str):
    """A `tokenizers` BPE model over the vocabulary and merges of `source`, with the
    pre-tokenizer configuration of the model family (as in its tokenizer.json) and control
    tokens as special added tokens."""
    from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, pre_tokenizers

    tokens, types, merge_strings = read_vocab(source)
    merges = []
    for merge in merge_strings:
        cut = merge.index(" ", 1)
        merges.append((merge[:cut], merge[cut + 1:]))
    vocab = {tok: i for i, tok in enumerate(tokens)}
    model = models.BPE(vocab=vocab, merges=merges, ignore_merges=(pre == "llama3"))
    tok = Tokenizer(model)
    byte_level = pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False)
    if pre in ("llama3", "qwen2"):
        pattern = LLAMA3_PATTERN if pre == "llama3" else QWEN2_PATTERN
        tok.pre_tokenizer = pre_tokenizers.Sequence([
            pre_tokenizers.Split(Regex(pattern), behavior="isolated", invert=False), byte_level])
    elif pre == "smollm":
        tok.pre_tokenizer = pre_tokenizers.Sequence([
            pre_tokenizers.Digits(individual_digits=True),
            pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=True),
        ])
    elif pre == "gpt2":
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=True)
    else:
        raise ValueError(pre)
    tok.decoder = decoders.ByteLevel()
    control = [AddedToken(t, special=True, normalized=False) for t, typ in zip(tokens, types) if typ == 3]
    tok.add_special_tokens(control)
    assert all(tok.token_to_id(t.content) == vocab[t.content] for t in control)
    return tok


@pytest.fixture(scope="module")
def sp():
    return sentencepiece.SentencePieceProcessor(model_file=str(LLAMA2_MODEL))


# pre-tokenizer -> (vocabulary source, whether our binary reads the source itself)
BPE_CASES = {"llama3": (LLAMA3_GGUF, True), "smollm": (SMOLLM_GGUF, True),
             "qwen2": (LLAMA3_GGUF, False), "gpt2": (LLAMA3_GGUF, False)}


@pytest.fixture(scope="module", params=sorted(BPE_CASES))
def bpe_case(request, tmp_path_factory):
    pre = request.param
    source, direct = BPE_CASES[pre]
    if not source.exists():
        pytest.skip(f"{source} is missing")
    path = source
    if not direct:
        path = tmp_path_factory.mktemp("vocab") / f"vocab-{pre}.gguf"
        write_vocab_gguf(path, source, pre)
    return pre, path, hf_tokenizer(source, pre)


# ------------------------------------------------------------------------------- tests

def test_corpus_is_varied(corpus):
    # Guards the generator itself: every class of input the tests are meant to cover occurs.
    joined = "".join(corpus)
    assert len(corpus) == CORPUS_SIZE and len(set(corpus)) > CORPUS_SIZE * 0.9
    for probe in ["\t", "\r\n", "\u3000", "🦙", "\x00", "\U00020000", "1234", "it's", "def ", "======"]:
        assert probe in joined, probe
    assert any(0x4E00 <= ord(c) <= 0x9FFF for c in joined)


def test_llama2_matches_sentencepiece(binary, corpus, sp):
    reference = [sp.encode(t) for t in corpus]
    assert_same(corpus, ours_encode(binary, LLAMA2_GGUF, corpus), reference, "llama2 vs sentencepiece")
    with_bos = ours_encode(binary, LLAMA2_GGUF, corpus[:200], "--add-special")
    assert_same(corpus[:200], with_bos, [[sp.bos_id()] + r for r in reference[:200]], "llama2 with BOS")


def test_llama2_special_tokens_split_out(binary, sp):
    # With --parse-special, <s> and </s> become tokens and each text piece is tokenized as a
    # text of its own (SentencePiece's dummy prefix included), as llama.cpp and HF do.
    texts = ["<s>Hello</s>", "a</s>b <s> c", "no specials", "<s><s>", "x<unk>y"]
    specials = {"<s>": sp.bos_id(), "</s>": sp.eos_id(), "<unk>": sp.unk_id()}
    expected = []
    for text in texts:
        ids, rest = [], text
        while rest:
            hits = [(rest.find(s), s) for s in specials if rest.find(s) >= 0]
            if not hits:
                ids += sp.encode(rest)
                break
            at, special = min(hits)
            if at > 0:
                ids += sp.encode(rest[:at])
            ids.append(specials[special])
            rest = rest[at + len(special):]
        expected.append(ids)
    assert_same(texts, ours_encode(binary, LLAMA2_GGUF, texts, "--parse-special"), expected,
                "llama2 --parse-special")
    # Without it the markup is plain text.
    assert_same(texts, ours_encode(binary, LLAMA2_GGUF, texts), [sp.encode(t) for t in texts], "llama2 text")


def test_byte_level_bpe_matches_tokenizers(binary, corpus, bpe_case):
    pre, path, hf = bpe_case
    # Control-token texts are plain text without --parse-special; the reference always
    # splits them out, so strings containing one are compared in the parse-special test only.
    control = [t.content for t in hf.get_added_tokens_decoder().values()]
    plain = [t for t in corpus if not any(c in t for c in control)]
    assert len(plain) > len(corpus) * 0.99
    reference = [e.ids for e in hf.encode_batch(plain, add_special_tokens=False)]
    assert_same(plain, ours_encode(binary, path, plain), reference, f"{pre} vs tokenizers")


def test_byte_level_bpe_special_tokens(binary, corpus, bpe_case):
    pre, path, hf = bpe_case
    rng = random.Random(7)
    llama3 = ["<|begin_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"]
    specials = {"llama3": llama3, "qwen2": llama3, "gpt2": llama3,
                "smollm": ["<|im_start|>", "<|im_end|>", "<|endoftext|>", "<file_sep>"]}[pre]
    texts = []
    for text in corpus[:400]:
        cut = rng.randint(0, len(text))
        texts.append(text[:cut] + rng.choice(specials) + text[cut:] + rng.choice(specials))
    reference = [e.ids for e in hf.encode_batch(texts, add_special_tokens=False)]
    assert_same(texts, ours_encode(binary, path, texts, "--parse-special"), reference,
                f"{pre} --parse-special vs tokenizers")


def test_roundtrip(binary, corpus, sp):
    for name, path in [("llama2", LLAMA2_GGUF), ("llama3", LLAMA3_GGUF), ("smollm", SMOLLM_GGUF)]:
        if not path.exists():
            continue
        ids = ours_encode(binary, path, corpus)
        decoded = ours_decode(binary, path, ids)
        bad = [i for i, (a, b) in enumerate(zip(decoded, corpus)) if a != b]
        assert not bad, f"{name}: decode(encode(s)) != s for {len(bad)} strings, e.g. " + \
            "; ".join(f"{corpus[i]!r} -> {decoded[i]!r}" for i in bad[:5])
        if name == "llama2":
            # Our decode agrees with SentencePiece's on its own ids.
            assert decoded == [sp.decode(row) for row in ids]


def test_bpe_decode_matches_tokenizers(binary, corpus, bpe_case):
    pre, path, hf = bpe_case
    # Ids that cut characters apart: every decoded prefix is compared as bytes would be,
    # including the control tokens rendered as their text.
    rng = random.Random(11)
    rows = [[rng.randrange(hf.get_vocab_size()) for _ in range(rng.randint(1, 12))] for _ in range(300)]
    ours = ours_decode(binary, path, rows)
    reference = [hf.decode(row, skip_special_tokens=False) for row in rows]
    bad = [i for i, (a, b) in enumerate(zip(ours, reference)) if a != b]
    assert not bad, f"{pre}: {len(bad)} decodes differ, e.g. {rows[bad[0]]}: {ours[bad[0]]!r} vs {reference[bad[0]]!r}"
