"""The validator's request errors: what it refuses to judge, and why (bad usage or a broken workload).

Kept apart from ``runner`` so that the gates (``checks``, ``perf``) and the trusted side (``trusted``) can
raise them without importing the job machinery above them.
"""

from __future__ import annotations

from klineage.schema.errors import KLineageError


class ValidationRequestError(KLineageError, ValueError):
    """A request the validator refuses before creating a job (bad usage: exit code 2, HTTP 4xx)."""

    def __init__(self, message: str, status: int = 400) -> None:
        super().__init__(message)
        self.status = status


class WorkloadError(ValidationRequestError):
    """The workload's trusted code is broken (its ``reference.py`` does not import, lacks ``make_inputs`` or
    ``reference``, or ``make_inputs`` raises or returns something other than a tuple of inputs): the
    workload's fault, never the candidate's, so no verdict is given: a request error (exit code 2, HTTP 422)."""

    def __init__(self, message: str, status: int = 422) -> None:
        super().__init__(message, status)
