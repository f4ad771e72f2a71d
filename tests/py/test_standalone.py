"""The repository stands alone: nothing it builds, tests or documents for users reaches outside
its own tree (a clone has nothing beside it)."""
import pathlib
import subprocess

ROOT = pathlib.Path(__file__).resolve().parents[2]

# Records of past runs may quote the paths of the machines they ran on.
HISTORY = ("bench/results/", "docs/dev/")


def test_no_file_reaches_outside_the_repository():
    files = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True,
                           check=True).stdout.split()
    reaching = []
    for name in files:
        if name.startswith(HISTORY) or name == "tests/py/test_standalone.py":
            continue
        path = ROOT / name
        try:
            text = path.read_text()
        except (UnicodeDecodeError, OSError):
            continue  # binary fixtures
        for needle in ("../shared", "/work/shared", "SHARED_DIR"):
            if needle in text:
                reaching.append(f"{name}: {needle}")
    assert not reaching, "files that reach outside the repository:\n" + "\n".join(reaching)
