"""The memory journal's format (``memory.jsonl.journal``; docs/memory.md).

A header line names the exact graph file the journal extends (its size and SHA-256); each
change after it is one record line: the CRC-32 of its JSON payload in eight hex digits, a
space, the payload (an effect with its ``op``). A record whose checksum does not match is
damaged; what :class:`companyd.memory._store.GraphStore` does with one is in docs/memory.md.
"""

from __future__ import annotations

import json
import zlib
from collections.abc import Mapping
from typing import Any

from companyd.memory._codec import QuarantinedLine

__all__ = [
    "JOURNAL_MAGIC",
    "JOURNAL_VERSION",
    "decode_record",
    "encode_record",
    "journal_header",
    "journal_line",
    "journal_quarantined",
    "parse_header",
]

JOURNAL_MAGIC = "companyd_memory_journal"
JOURNAL_VERSION = 1
_RECORD_ENCODER = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"))


def journal_header(size: int, sha: str) -> bytes:
    """The header line (newline included) of a journal extending a graph file of ``size`` bytes
    with SHA-256 ``sha`` (hex).
    """
    return (
        json.dumps(
            {JOURNAL_MAGIC: JOURNAL_VERSION, "base_size": size, "base_sha256": sha},
            separators=(",", ":"),
        ).encode()
        + b"\n"
    )


def parse_header(line: bytes) -> tuple[int, str] | None:
    """``(base_size, base_sha256)`` from a header line, or None if ``line`` is not a header of
    this journal version.
    """
    try:
        obj = json.loads(line)
    except ValueError:
        return None
    if not isinstance(obj, dict) or obj.get(JOURNAL_MAGIC) != JOURNAL_VERSION:
        return None
    size, sha = obj.get("base_size"), obj.get("base_sha256")
    if not isinstance(size, int) or not isinstance(sha, str):
        return None
    return size, sha


def encode_record(effect: Mapping[str, Any]) -> bytes:
    """One record line for ``effect`` (newline included): the CRC-32 of the compact UTF-8 JSON
    payload in eight hex digits, a space, the payload. Lone surrogates are kept, as JSON escapes.
    """
    text = _RECORD_ENCODER.encode(effect)
    try:
        payload = text.encode("utf-8")
    except UnicodeEncodeError:  # lone surrogates, escaped as JSON \udxxx
        payload = text.encode("utf-8", "backslashreplace")
    return b"%08x %s\n" % (zlib.crc32(payload), payload)


def decode_record(line: bytes) -> dict[str, Any]:
    """Raises ValueError if the record is damaged."""
    crc, sep, payload = line.partition(b" ")
    if not sep or len(crc) != 8:
        raise ValueError("no checksum")
    if int(crc, 16) != zlib.crc32(payload):
        raise ValueError("checksum mismatch")
    obj = json.loads(payload)
    if not isinstance(obj, dict) or not isinstance(obj.get("op"), str):
        raise ValueError("not a journal record")
    return obj


def journal_line(journal: bytes, offset: int) -> bytes:
    """The journal line starting at ``offset`` (without its newline)."""
    end = journal.find(b"\n", offset)
    return journal[offset:] if end < 0 else journal[offset:end]


def journal_quarantined(offset: int, raw: bytes, reason: str) -> QuarantinedLine:
    """A damaged journal record as a :class:`QuarantinedLine`: line number 0, the byte ``offset``
    in the reason.
    """
    return QuarantinedLine(lineno=0, raw=raw, reason=f"journal byte {offset}: {reason}")
