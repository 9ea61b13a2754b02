#!/usr/bin/env python3
"""Independent codec oracle for tests/core/test_codecs.cpp, from ml_dtypes (PyPI) and numpy.

Writes to argv[1], in this order, raw little-endian arrays:
  decode of every code as float32: bf16 [65536], fp16 [65536], e4m3fn [256], e5m2 [256],
  e2m1 [16], e8m0 [256];
  encode of the test's f32 inputs (every 19-bit high part x 8 low-13-bit patterns, high part
  outer): bf16 u16, fp16 u16, e4m3fn u8, e5m2 u8, e2m1 u8 (ml_dtypes rounds to nearest even and
  does not saturate: overflow is NaN for e4m3fn, inf for e5m2; e2m1 clamps).
Exits 3 (the test then skips) when numpy or ml_dtypes is missing.
"""
import sys

try:
    import numpy as np
    import ml_dtypes as md
except ImportError as e:  # pragma: no cover - depends on the machine
    print(f"codec oracle: {e}; install with scripts/deps.sh", file=sys.stderr)
    sys.exit(3)

LOWS = [0x0000, 0x0001, 0x0FFF, 0x1000, 0x1001, 0x1FFF, 0x0A5B, 0x1C3D]


def decode(dtype, ncodes, storage):
    codes = np.arange(ncodes, dtype=np.uint32).astype(storage)  # fp4: the low nibble of a byte
    return codes.view(dtype).astype(np.float32)


def main():
    out = sys.argv[1]
    hi = np.arange(1 << 19, dtype=np.uint32) << np.uint32(13)
    x = (hi[:, None] | np.array(LOWS, dtype=np.uint32)[None, :]).reshape(-1).view(np.float32)
    parts = [
        decode(md.bfloat16, 65536, np.uint16),
        decode(np.float16, 65536, np.uint16),
        decode(md.float8_e4m3fn, 256, np.uint8),
        decode(md.float8_e5m2, 256, np.uint8),
        decode(md.float4_e2m1fn, 16, np.uint8),
        decode(md.float8_e8m0fnu, 256, np.uint8),
    ]
    with np.errstate(all="ignore"):
        parts += [
            x.astype(md.bfloat16).view(np.uint16),
            x.astype(np.float16).view(np.uint16),
            x.astype(md.float8_e4m3fn).view(np.uint8),
            x.astype(md.float8_e5m2).view(np.uint8),
            x.astype(md.float4_e2m1fn).view(np.uint8),
        ]
    with open(out, "wb") as f:
        for p in parts:
            f.write(np.ascontiguousarray(p).astype(p.dtype.newbyteorder("<")).tobytes())


if __name__ == "__main__":
    main()
