"""Deterministic content-hash identifiers: the same content always gets the same id."""

from __future__ import annotations

import hashlib
import json
from typing import Any


def canonical_json(value: Any) -> str:
    """Serialize ``value`` to JSON with sorted keys and no whitespace, so equal data hashes equally."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)


def sha256_text(text: str) -> str:
    """Return the hex SHA-256 of ``text`` encoded as UTF-8."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def content_id(label: str, *parts: Any) -> str:
    """Return ``"<label>:<16 hex>"``, a stable id derived from ``label`` and the canonical JSON of ``parts``."""
    digest = sha256_text(canonical_json([label, *parts]))[:16]
    return f"{label.lower()}:{digest}"


def kernel_sha(source: str) -> str:
    """Return the full SHA-256 of a kernel's source text: the kernel's identity everywhere in KLineage."""
    return sha256_text(source)
