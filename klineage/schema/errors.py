"""Errors raised when input does not match a KLineage format."""

from __future__ import annotations


class FormatError(ValueError):
    """Input that does not match its format: says which file, which key, and what was expected."""

    def __init__(self, source: str, key: str, expected: str, got: object = None) -> None:
        self.source = source
        self.key = key
        self.expected = expected
        self.got = got
        where = f"{source}: " if source else ""
        detail = f" (got {got!r})" if got is not None else ""
        super().__init__(f"{where}key '{key}': expected {expected}{detail}")


class ManifestError(FormatError):
    """A workload manifest (manifest.toml) is malformed."""


class LineageDocumentError(FormatError):
    """A lineage document (JSON) is malformed."""
