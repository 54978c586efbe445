"""Counts in sentences a person reads: "1 test input", "2 test inputs"."""

from __future__ import annotations


def count(n: int, noun: str, plural: str | None = None) -> str:
    """`n` and the noun, singular for exactly one (`plural` where adding an "s" is wrong); thousands separated."""
    return f"{n:,} {noun if n == 1 else plural or noun + 's'}"
