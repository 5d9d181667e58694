"""Solve seeded random linear systems and check the residuals (CPU tier entrypoint)."""

import sys
import time

import numpy as np

SIZES = (200, 800, 1600, 2400)
TOLERANCE = 1e-10  # relative residual; a correct LU solve is far below this


def relative_residual(a: np.ndarray, x: np.ndarray, b: np.ndarray) -> float:
    """||Ax - b|| / (||A|| ||x|| + ||b||): scale-free, near machine epsilon when right."""
    scale = np.linalg.norm(a) * np.linalg.norm(x) + np.linalg.norm(b)
    return float(np.linalg.norm(a @ x - b) / scale)


def main() -> int:
    start = time.perf_counter()
    rng = np.random.default_rng(12345)
    failures = 0
    for n in SIZES:
        # Diagonally dominant, hence well conditioned and certainly non-singular.
        a = rng.standard_normal((n, n)) + n * np.eye(n)
        x_true = rng.standard_normal(n)
        b = a @ x_true
        x = np.linalg.solve(a, b)
        residual = relative_residual(a, x, b)
        error = float(np.max(np.abs(x - x_true)))
        ok = residual < TOLERANCE and error < 1e-8
        failures += not ok
        status = "ok  " if ok else "FAIL"
        print(f"{status} n={n}: relative residual {residual:.2e}, max error {error:.2e}")
    elapsed = time.perf_counter() - start
    if failures:
        print(f"FAIL: {failures} of {len(SIZES)} systems off", file=sys.stderr)
        return 1
    print(f"OK: {len(SIZES)} systems solved with numpy {np.__version__} in {elapsed:.2f}s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
