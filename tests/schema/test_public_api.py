"""The flat public namespace and the one exception root."""

from __future__ import annotations

import subprocess
import sys

import pytest

import klineage
from klineage.schema.errors import KLineageError


@pytest.mark.parametrize("name", klineage.__all__)
def test_every_public_name_resolves(name: str) -> None:
    assert getattr(klineage, name) is not None


def test_importing_the_package_loads_neither_torch_nor_the_model() -> None:
    code = "import sys, klineage; print(sorted(m for m in ('torch', 'sentence_transformers') if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_user_errors_share_the_root_and_keep_their_builtin_base() -> None:
    from klineage.agent.problem import ProblemError
    from klineage.client import RequestError
    from klineage.kb.conditions import ConditionError
    from klineage.kb.service import KnowledgeBaseError
    from klineage.kb.store import StoreError
    from klineage.schema.errors import FormatError
    from klineage.validator.runner import ValidationRequestError

    for error, builtin in ((FormatError, ValueError), (ConditionError, ValueError), (KnowledgeBaseError, ValueError),
                           (ProblemError, ValueError), (ValidationRequestError, ValueError),
                           (StoreError, RuntimeError), (RequestError, RuntimeError)):
        assert issubclass(error, KLineageError) and issubclass(error, builtin), error
    with pytest.raises(AttributeError, match="no attribute 'nothing'"):
        klineage.nothing  # noqa: B018
