"""Cutting long texts with a note of their full size: what the journal stores and every
printer shows. A module of its own, importing only the standard library, so that
``companyd runs`` printing a daemon's answer does not load the journal's store.
"""

from __future__ import annotations

import re

__all__ = ["cut", "full_size"]

_MARK = re.compile(r" … \[cut: ([\d,]+) chars in all\]\Z")


def full_size(text: str) -> int:
    """The length ``text`` had before any cut (a cut string notes it at its end)."""
    m = _MARK.search(text)
    return int(m.group(1).replace(",", "")) if m else len(text)


def cut(text: str, limit: int) -> str:
    """``text``, or its first ``limit`` characters followed by a note of its full size."""
    size = full_size(text)
    body = _MARK.sub("", text)
    if len(body) <= limit and size == len(body):
        return text
    if len(body) > limit:
        body = body[:limit]
    return f"{body} … [cut: {size:,} chars in all]"
