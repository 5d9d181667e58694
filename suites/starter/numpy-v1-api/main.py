"""CPU entrypoint: geometric means with the legacy helpers, checked against the standard library."""

import math
import random
import sys

from legacy_stats import geometric_mean, normalize


def main():
    rng = random.Random(2024)
    errors = []
    for n in (1, 5, 50, 200):
        sample = [rng.uniform(0.5, 2.0) for _ in range(n)]
        got = geometric_mean(sample)
        want = math.exp(math.fsum(math.log(x) for x in sample) / n)
        if not math.isclose(got, want, rel_tol=1e-9):
            errors.append(f"n={n}: geometric mean {got} != {want}")
    if abs(float(normalize([2.0] * 4).sum()) - 2.0) > 1e-12:
        errors.append("normalize is off")
    for error in errors:
        print(f"FAIL: {error}", file=sys.stderr)
    if errors:
        return 1
    print("OK: 4 geometric means and a normalization checked")
    return 0


if __name__ == "__main__":
    sys.exit(main())
