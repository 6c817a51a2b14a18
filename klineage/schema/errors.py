"""The root of KLineage's exceptions, and the errors raised when input does not match a KLineage format."""

from __future__ import annotations


class KLineageError(Exception):
    """Every error KLineage raises on purpose derives from this (each also keeps the builtin base it had,
    ``ValueError`` for bad input, ``RuntimeError`` for a failed operation): ``except KLineageError``
    catches what a user can cause, and nothing else."""


class FormatError(KLineageError, ValueError):
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
