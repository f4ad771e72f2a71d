#!/usr/bin/env python3
"""A GGUF file with another file's header and random valid tensor data, for benchmarks on
machines the model file cannot be copied to (the kernels' work does not depend on the values).

  random_like.py describe MODEL.gguf OUT_DIR   # header.bin + layout.txt (needs PyPI gguf)
  random_like.py write OUT_DIR NEW.gguf        # standard library only

Block scales are 0.01 and norms 1.0, so no kernel meets denormals, infinities or NaNs.
"""
import os
import struct
import sys


def describe(model, out_dir):
    import gguf
    reader = gguf.GGUFReader(model)
    first = min(t.data_offset for t in reader.tensors)
    os.makedirs(out_dir, exist_ok=True)
    with open(model, 'rb') as f, open(os.path.join(out_dir, 'header.bin'), 'wb') as out:
        out.write(f.read(first))
    with open(os.path.join(out_dir, 'layout.txt'), 'w') as out:
        for t in reader.tensors:
            out.write(f'{t.name} {t.tensor_type.name} {t.data_offset} {t.n_bytes}\n')


def write(in_dir, path):
    with open(os.path.join(in_dir, 'header.bin'), 'rb') as f:
        head = f.read()
    rows = [line.split() for line in open(os.path.join(in_dir, 'layout.txt'))]
    buf = bytearray(max(int(o) + int(n) for _, _, o, n in rows))
    buf[:len(head)] = head
    half = struct.pack('<e', 0.01)
    # Block bytes and the offsets of their f16 scales.
    blocks = {'Q8_0': (34, (0,)), 'Q4_0': (18, (0,)), 'Q4_1': (20, (0, 2))}
    for name, kind, offset, size in rows:
        offset, size = int(offset), int(size)
        if kind == 'F32':
            buf[offset:offset + size] = struct.pack('<f', 1.0) * (size // 4)
            continue
        if kind not in blocks:
            sys.exit(f'{name}: type {kind} not handled')
        block, scales = blocks[kind]
        data = bytearray(os.urandom(size))
        for s in scales:
            data[s::block] = half[0:1] * (size // block)
            data[s + 1::block] = half[1:2] * (size // block)
        buf[offset:offset + size] = data
    with open(path, 'wb') as f:
        f.write(buf)


if __name__ == '__main__':
    if len(sys.argv) != 4 or sys.argv[1] not in ('describe', 'write'):
        sys.exit(__doc__)
    (describe if sys.argv[1] == 'describe' else write)(sys.argv[2], sys.argv[3])
