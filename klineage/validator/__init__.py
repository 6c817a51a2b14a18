"""The validator: gates (static, compile, correctness, integrity, performance), sandbox, service, client.

DESIGN.md, "Validator". Use a ``ValidatorClient``::

    from klineage.validator import LocalValidator, HttpValidator, RayValidator, make_validator
    result = LocalValidator().validate(source, "workloads/softmax")      # a schema.gate_result.GateResult
    result = HttpValidator("http://127.0.0.1:8100").validate(source, "softmax")
    result = RayValidator("auto").validate(source, "workloads/softmax")  # one actor per GPU of a Ray cluster
    client = make_validator("ray:auto")                                  # what a --validator option names

Imports only ``klineage.schema`` from the rest of KLineage. The worker (``klineage.validator.worker``)
needs only the standard library, torch, triton and numpy; the service (``klineage.validator.service``)
adds FastAPI and is imported only when served; Ray (the ``ray`` extra) is imported only when a
``RayValidator`` is made.
"""

from klineage.schema.gate_result import GATES, GateOutcome, GateResult
from klineage.validator.client import HttpValidator, LocalValidator, ValidatorClient, ValidatorUnavailable
from klineage.validator.errors import ValidationRequestError, WorkloadError
from klineage.validator.factory import make_validator
from klineage.validator.ray_backend import RayValidator
from klineage.validator.runner import crowded_out

__all__ = ["GATES", "GateOutcome", "GateResult", "HttpValidator", "LocalValidator", "RayValidator",
           "ValidationRequestError", "ValidatorClient", "ValidatorUnavailable", "WorkloadError", "crowded_out",
           "make_validator"]
