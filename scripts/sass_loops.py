#!/usr/bin/env python3
"""Instructions in the main loop of each quant_mma and matvec kernel of a CUDA object or binary,
and the kernel's registers.

The main loop is the span of the kernel's longest backward branch in `cuobjdump -sass`; its
length is the instructions a warp issues per step of the loop (per step of 4 units of a row for
quant_mma, per item for the matvec), which is what those kernels' speed has followed. Static
counts, no GPU needed:

    scripts/sass_loops.py build/cuda/src/backend/cuda/CMakeFiles/llamaserve_backend_cuda.dir/quant_mma.cu.o
    scripts/sass_loops.py --types Q4_K --ops OLD.o NEW.o     # side by side, with opcode counts

cuobjdump ships with the full CUDA toolkit, or from PyPI (nvidia-cuda-cuobjdump, its
nvidia/cu13/bin); give its path with --cuobjdump when it is not on PATH.
"""
import argparse
import collections
import re
import shutil
import subprocess
import sys

TYPES = {0: "F32", 1: "F16", 2: "Q4_0", 3: "Q4_1", 8: "Q8_0", 12: "Q4_K", 13: "Q5_K",
         14: "Q6_K", 30: "BF16"}
# quant_mma_kernel<TensorType, int NT, bool kSwiGlu>; matvec_kernel<TensorType, int, int, int, int>.
MANGLED = re.compile(r"(quant_mma_kernel|matvec_kernel)ILNS_10TensorTypeE(\d+)E((?:L[ib]\d+E)+)")


def kernels(path, cuobjdump):
    out = subprocess.run([cuobjdump, "-sass", path], capture_output=True, text=True, check=True)
    result, name = {}, None
    for line in out.stdout.splitlines():
        m = re.search(r"Function : (\S+)", line)
        if m:
            name = m.group(1)
            result[name] = []
            continue
        m = re.match(r"\s+/\*([0-9a-f]{4,})\*/\s+(.*?);", line)
        if m and name:
            result[name].append((int(m.group(1), 16), m.group(2).strip()))
    return result


def registers(path, cuobjdump):
    """Registers and stack bytes of each kernel, by mangled name."""
    out = subprocess.run([cuobjdump, "-res-usage", path], capture_output=True, text=True,
                         check=True)
    result, name = {}, None
    for line in out.stdout.splitlines():
        m = re.search(r"Function (\S+):", line)
        if m:
            name = m.group(1)
            continue
        m = re.search(r"REG:(\d+) STACK:(\d+)", line)
        if m and name:
            result[name] = (int(m.group(1)), int(m.group(2)))
            name = None
    return result


def label(mangled):
    m = MANGLED.search(mangled)
    if not m:
        return None
    args = re.findall(r"L[ib](\d+)E", m.group(3))
    kind = "quant_mma" if m.group(1) == "quant_mma_kernel" else "matvec"
    type_name = TYPES.get(int(m.group(2)), m.group(2))
    if kind == "quant_mma":
        return f"quant_mma {type_name} tiles={args[0]}" + (" swiglu" if args[1] == "1" else "")
    return f"matvec {type_name} <{','.join(args)}>"


def main_loop(instructions):
    best = None
    for addr, text in instructions:
        b = re.search(r"BRA (0x[0-9a-f]+)", text)
        if b:
            target = int(b.group(1), 16)
            if target < addr and (best is None or addr - target > best[1] - best[0]):
                best = (target, addr)
    if best is None:
        return []
    return [t for a, t in instructions if best[0] <= a <= best[1]]


def opcode(text):
    words = text.split()
    return words[1] if words[0].startswith("@") and len(words) > 1 else words[0]


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("objects", nargs="+", help="CUDA objects or binaries (two: side by side)")
    parser.add_argument("--types", default="", help="comma-separated types to show (default all)")
    parser.add_argument("--ops", action="store_true", help="opcode counts of each loop")
    parser.add_argument("--cuobjdump", default=shutil.which("cuobjdump") or "cuobjdump")
    args = parser.parse_args()
    types = set(filter(None, args.types.split(",")))
    tables, resources = [], []
    for path in args.objects:
        loops, used = {}, {}
        regs = registers(path, args.cuobjdump)
        for mangled, instructions in kernels(path, args.cuobjdump).items():
            name = label(mangled)
            if name is None or (types and name.split()[1] not in types):
                continue
            loops[name] = main_loop(instructions)
            used[name] = regs.get(mangled)
        tables.append(loops)
        resources.append(used)
    names = sorted(set().union(*tables))
    # Each build's loop instructions, then its registers (and stack bytes where it spills).
    print("| kernel | " + " | ".join(f"{p} | regs" for p in args.objects) + " |")
    print("| --- |" + " ---: | ---: |" * len(args.objects))
    for name in names:
        cells = []
        for t, used in zip(tables, resources):
            r = used.get(name)
            cells.append(str(len(t[name])) if name in t else "-")
            cells.append("-" if r is None else f"{r[0]}" + (f" (stack {r[1]})" if r[1] else ""))
        print(f"| {name} | " + " | ".join(cells) + " |")
    if args.ops:
        for name in names:
            print(f"\n{name}")
            for path, t in zip(args.objects, tables):
                counts = collections.Counter(opcode(x) for x in t.get(name, []))
                print(f"  {path}: " + ", ".join(f"{op} {n}" for op, n in counts.most_common(12)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
