"""CPU entrypoint: check the compiled kernels against the standard library and pure Python."""

from __future__ import annotations

import math
import random
import sys
import time
import zlib

import kernels


def main() -> int:
    rng = random.Random(7)
    errors = []
    for size in (0, 1, 1000, 5_552, 1 << 20):
        data = rng.randbytes(size)
        if kernels.adler32(data) != zlib.adler32(data):
            errors.append(f"adler32 differs from zlib on {size} bytes")
    xs = [rng.uniform(-1, 1) for _ in range(200_000)]
    ys = [rng.uniform(-1, 1) for _ in range(200_000)]
    started = time.perf_counter()
    fast = kernels.dot(xs, ys)
    c_time = time.perf_counter() - started
    started = time.perf_counter()
    slow = math.fsum(x * y for x, y in zip(xs, ys))
    py_time = time.perf_counter() - started
    if not math.isclose(fast, slow, rel_tol=1e-9, abs_tol=1e-9):
        errors.append(f"dot product {fast} != {slow}")
    for error in errors:
        print(f"FAIL: {error}", file=sys.stderr)
    if errors:
        return 1
    print(f"OK: adler32 matches zlib on 5 inputs; dot = {fast:.6f} (C {c_time * 1e3:.1f} ms, "
          f"Python {py_time * 1e3:.1f} ms) from {kernels._ckern.__file__}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
