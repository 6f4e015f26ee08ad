"""Sets of rank indexes as compressed range strings, as the indexed Job writes `completedIndexes`: `0-3,7,9-12`.

A job of 10,000 ranks whose ranks mostly share one state names them all in a few characters (`0-9999`), so a
status that groups ranks by state does not grow with the job. Decoding is bounded: a string naming more than
`limit` indexes (a hostile or corrupt status) is refused rather than expanded.
"""

from __future__ import annotations

from collections.abc import Iterable


class RangeError(ValueError):
    """A range string that does not parse, or names more indexes than allowed."""


def encode(indexes: Iterable[int]) -> str:
    """`[0, 1, 2, 3, 7]` -> `"0-3,7"` (any order, duplicates allowed; negative indexes are refused)."""
    parts: list[str] = []
    run: list[int] = []  # [first, last] of the run being built
    for i in sorted(set(indexes)):
        if i < 0:
            raise RangeError(f"negative index {i}")
        if run and i == run[1] + 1:
            run[1] = i
            continue
        if run:
            parts.append(_span(*run))
        run = [i, i]
    if run:
        parts.append(_span(*run))
    return ",".join(parts)


def _span(first: int, last: int) -> str:
    return str(first) if first == last else f"{first}-{last}"


def decode(text: str, limit: int) -> list[int]:
    """`"0-3,7"` -> `[0, 1, 2, 3, 7]`, ascending. Raises RangeError for anything `encode` would not write (empty
    parts, descending or overlapping spans, signs, spaces) or for more than `limit` indexes."""
    out: list[int] = []
    if not text:
        return out
    for part in text.split(","):
        first_text, dash, last_text = part.partition("-")
        if not _digits(first_text) or (dash and not _digits(last_text)):
            raise RangeError(f"{text!r}: {part!r} is not an index or a range first-last")
        first = int(first_text)
        last = int(last_text) if last_text else first
        if last < first or (out and first <= out[-1]):
            raise RangeError(f"{text!r}: {part!r} is out of order")
        if len(out) + last - first + 1 > limit:
            raise RangeError(f"{text!r} names more than {limit} indexes")
        out.extend(range(first, last + 1))
    return out


def _digits(s: str) -> bool:
    return s.isascii() and s.isdigit() and len(s) <= 9
