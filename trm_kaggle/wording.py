"""Words a person reads: counts ("1 test input", "2 test inputs") and values echoed in a message, bounded."""

from __future__ import annotations


def count(n: int, noun: str, plural: str | None = None) -> str:
    """`n` and the noun, singular for exactly one (`plural` where adding an "s" is wrong); thousands separated."""
    return f"{n:,} {noun if n == 1 else plural or noun + 's'}"


def clipped(value: object, limit: int = 80) -> str:
    """`repr(value)` for a one-line message, at most about `limit` characters: a value typed or read from a file
    may be megabytes long (an expanded YAML alias, a pasted file), and its message stays one short line."""
    text = value if isinstance(value, str) else None
    if text is not None and len(text) > limit:  # cut before repr: a huge string is never copied whole
        return repr(text[:limit]) + f"... ({len(text):,} characters)"
    shown = repr(value)
    return shown if len(shown) <= limit else shown[:limit] + f"... ({len(shown):,} characters)"
