"""Count primes below N with a sieve and check the result three ways (CPU tier entrypoint)."""

import hashlib
import sys
import time

N = 10_000_000
KNOWN_COUNT = 664_579  # pi(10**7)
KNOWN_LAST = 9_999_991  # the largest prime below 10**7


def sieve(limit: int) -> list[int]:
    """All primes below `limit` (sieve of Eratosthenes over a bytearray)."""
    is_prime = bytearray([1]) * limit
    is_prime[0:2] = b"\x00\x00"
    for p in range(2, int(limit**0.5) + 1):
        if is_prime[p]:
            is_prime[p * p :: p] = bytes(len(range(p * p, limit, p)))
    return [i for i, flag in enumerate(is_prime) if flag]


def is_prime_slow(n: int) -> bool:
    """Trial division: slow but obviously right, used to spot-check the sieve."""
    if n < 2:
        return False
    return all(n % d for d in range(2, int(n**0.5) + 1))


def main() -> int:
    start = time.perf_counter()
    primes = sieve(N)
    errors = []
    if len(primes) != KNOWN_COUNT:
        errors.append(f"expected {KNOWN_COUNT} primes below {N}, got {len(primes)}")
    if primes and primes[-1] != KNOWN_LAST:
        errors.append(f"expected the last prime to be {KNOWN_LAST}, got {primes[-1]}")
    prime_set = set(primes)
    for n in list(range(0, 5000)) + list(range(N - 5000, N)):
        if (n in prime_set) != is_prime_slow(n):
            errors.append(f"sieve and trial division disagree on {n}")
            break
    digest = hashlib.sha256(",".join(map(str, primes)).encode()).hexdigest()
    elapsed = time.perf_counter() - start
    for error in errors:
        print(f"FAIL: {error}", file=sys.stderr)
    if errors:
        return 1
    print(f"OK: {len(primes)} primes below {N}, sha256 {digest[:16]}..., {elapsed:.2f}s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
