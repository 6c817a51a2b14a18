"""Test-session rules shared by every test.

Tests that need a real component (Neo4j, the embedding model, Chromium) carry
``@pytest.mark.real("neo4j")``. With ``KLINEAGE_REQUIRE_REAL=1`` (set by ``.ci/run``) a skipped
real test is reported as a failure, so CI cannot pass by skipping what it claims to test.
Tests that need a GPU carry ``@pytest.mark.gpu`` and are skipped on CPU machines (CI has none).
"""

from __future__ import annotations

import os

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "gpu: needs a CUDA GPU; skipped on CPU machines")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):  # type: ignore[no-untyped-def]
    outcome = yield
    report = outcome.get_result()
    marker = item.get_closest_marker("real")
    if report.skipped and marker is not None and os.environ.get("KLINEAGE_REQUIRE_REAL") == "1":
        component = marker.args[0] if marker.args else "a real component"
        report.outcome = "failed"
        report.longrepr = (f"{item.nodeid}: needs {component}, but was skipped while "
                           f"KLINEAGE_REQUIRE_REAL=1: {report.longrepr}")
