"""CPU entrypoint: a configured experiment with the installed `tinystats` package."""

from __future__ import annotations

import random
import statistics
import sys

from tinystats import Welford
from tinystats.config import load


def main() -> int:
    config = load("experiment.yaml")
    rng = random.Random(config["seed"])
    dist = config["distribution"]
    sample = [rng.gauss(dist["mu"], dist["sigma"]) for _ in range(config["samples"])]
    acc = Welford()
    for value in sample:
        acc.push(value)
    errors = []
    tol = float(config["tolerance"])
    if abs(acc.mean - statistics.fmean(sample)) > tol * max(1.0, abs(acc.mean)):
        errors.append(f"mean {acc.mean} != {statistics.fmean(sample)}")
    if abs(acc.variance - statistics.variance(sample)) > 1e-6 * statistics.variance(sample):
        errors.append(f"variance {acc.variance} != {statistics.variance(sample)}")
    if not (2.9 < acc.mean < 3.1 and 3.8 < acc.variance < 4.2):
        errors.append(f"sample far from N(3, 4): mean {acc.mean:.3f}, variance {acc.variance:.3f}")
    for error in errors:
        print(f"FAIL: {error}", file=sys.stderr)
    if errors:
        return 1
    print(f"OK: {acc.count} samples, mean {acc.mean:.4f}, variance {acc.variance:.4f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
