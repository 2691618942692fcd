#!/usr/bin/env python3
"""Reference solution. Fed to bash instead of run directly, this is a syntax error."""

from pathlib import Path


def primes_below(n: int) -> list[int]:
    sieve = [True] * n
    sieve[0:2] = [False, False]
    for i in range(2, int(n**0.5) + 1):
        if sieve[i]:
            sieve[i * i :: i] = [False] * len(range(i * i, n, i))
    return [i for i, is_prime in enumerate(sieve) if is_prime]


Path("/root/answer.txt").write_text(f"{sum(primes_below(100))}\n")
print("wrote /root/answer.txt")
