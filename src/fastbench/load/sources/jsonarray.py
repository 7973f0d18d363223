"""Where each element of a file's top-level JSON array lies, found without parsing it whole.

A ShareGPT file is one JSON array; parsed whole it costs about four times its size in Python objects. Its
elements' bounds are found instead by a scan of the bytes, a block at a time, in numpy: the quotes not
escaped by an odd run of backslashes open and close strings, and outside strings the brackets and braces
set the depth and the commas at depth 1 end the elements. Each element is then parsed on its own, when
the run needs it. A file the scan cannot read as one array (not JSON, not an array, text after it) gives
None: its caller parses it whole, for the error message orjson words.
"""

from __future__ import annotations

import numpy as np

__all__ = ("element_bounds",)

_BLOCK = 1 << 22  # bytes scanned at a time: the scan's arrays are a few times this
_QUOTE, _BACKSLASH, _COMMA = ord('"'), ord("\\"), ord(",")
_OPENS, _CLOSES = (ord("["), ord("{")), (ord("]"), ord("}"))
_WHITESPACE = b" \t\r\n"


def element_bounds(raw: bytes) -> np.ndarray | None:
    """The array's bounds: the offsets of its ``[``, of each comma between its elements and of its ``]``
    (element ``k`` is ``raw[b[k] + 1:b[k + 1]]``); None where ``raw`` is not one JSON array to the scan."""
    n = len(raw)
    bounds: list[np.ndarray] = []
    in_string, depth, lo, top_level = False, 0, 0, 0
    while lo < n:
        hi = min(lo + _BLOCK, n)
        while hi < n and raw[hi - 1] == _BACKSLASH:  # a run of backslashes stays in one block
            hi += 1
        block = np.frombuffer(raw, np.uint8, hi - lo, lo)
        quotes = np.flatnonzero(block == _QUOTE)
        escaped = np.zeros(len(quotes), dtype=bool)
        for i in np.flatnonzero(block[np.maximum(quotes - 1, 0)] == _BACKSLASH):  # rare: \" and \\"
            q, run = int(quotes[i]), 0
            while q - run - 1 >= 0 and block[q - run - 1] == _BACKSLASH:
                run += 1
            escaped[i] = run % 2 == 1
        real = quotes[~escaped]
        is_mark = block == _COMMA
        for char in (*_OPENS, *_CLOSES):
            is_mark |= block == char
        marks = np.flatnonzero(is_mark)
        outside = marks[(np.searchsorted(real, marks) + in_string) % 2 == 0]
        chars = block[outside]
        step = np.isin(chars, _OPENS).astype(np.int64) - np.isin(chars, _CLOSES)
        after = np.cumsum(step) + depth
        before = after - step
        if (after < 0).any() or ((before == 0) & (step != 1)).any():
            return None  # more closes than opens, or a comma outside the array
        top_level += int((before == 0).sum())
        if top_level > 1:
            return None  # a second value after the array
        ends = (before == 1) & (chars == _COMMA) | (before == 0) | (after == 0)
        bounds.append(outside[ends] + lo)
        in_string ^= len(real) % 2 == 1
        depth = int(after[-1]) if len(after) else depth
        lo = hi
    found = np.concatenate(bounds) if bounds else np.empty(0, dtype=np.int64)
    if in_string or depth != 0 or len(found) < 2 or raw[found[0]] != _OPENS[0] \
            or raw[found[-1]] != _CLOSES[0] or raw[:found[0]].strip(_WHITESPACE) \
            or raw[found[-1] + 1:].strip(_WHITESPACE):
        return None
    return found
