"""The source layers depend one way (docs/architecture.md): a file includes project headers only
from its own layer or the layers below it."""
import pathlib
import re

SRC = pathlib.Path(__file__).resolve().parents[2] / "src"

# Lowest first. A layer may include its own headers and those of any layer before it.
LAYERS = [
    "core", "jinja", "http", "quant", "gguf", "tokenizer", "grammar", "toolcall", "model", "backend",
    "executor", "parallel", "parallel/distributed", "engine", "service", "server", "loadtest", "cli",
]
# Layers that sit side by side (neither includes the other).
SIDE_BY_SIDE = {("engine", "parallel"), ("engine", "parallel/distributed")}
# Layers that may include only some of the layers below them: the load generator is a client
# of any server and must not grow a dependency on the model or the server code.
ONLY_BELOW = {
    "loadtest": {"core", "http"},
    "jinja": {"core"},
    "toolcall": {"core", "tokenizer"},
}

INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)


def layer_of(path: str) -> str:
    for layer in sorted(LAYERS, key=len, reverse=True):
        if path == layer or path.startswith(layer + "/"):
            return layer
    raise AssertionError(f"{path}: in no layer")


def test_includes_point_down():
    climbing = []
    for file in sorted(SRC.rglob("*")):
        if file.suffix not in {".h", ".cc", ".cu", ".cuh", ".inc"}:
            continue
        own = layer_of(str(file.relative_to(SRC)))
        for header in INCLUDE.findall(file.read_text(errors="replace")):
            if "/" not in header:
                continue  # a file beside it
            target = layer_of(header)
            if target == own:
                continue
            if (own, target) in SIDE_BY_SIDE or (target, own) in SIDE_BY_SIDE:
                climbing.append(f"{file.relative_to(SRC)} -> {header} (side by side)")
            elif LAYERS.index(target) > LAYERS.index(own):
                climbing.append(f"{file.relative_to(SRC)} -> {header}")
            elif own in ONLY_BELOW and target not in ONLY_BELOW[own]:
                climbing.append(f"{file.relative_to(SRC)} -> {header} (only "
                                f"{sorted(ONLY_BELOW[own])})")
    assert not climbing, "includes that climb up:\n" + "\n".join(climbing)


def test_no_environment_reads_below_the_configuration():
    readers = []
    for file in sorted(SRC.rglob("*")):
        if file.suffix not in {".h", ".cc", ".cu", ".cuh"}:
            continue
        if "getenv(" in file.read_text(errors="replace"):
            readers.append(str(file.relative_to(SRC)))
    assert readers == [], readers
