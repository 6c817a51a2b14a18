"""Abuse the HTTP/GraphQL layer: oversized or slow inputs get clear client errors, the server stays up.

Issue 18, items 7-10: kernel analysis off the event loop with size and time limits, the body limit
on the bytes actually read, a cost limit with fragments expanded and a response-size limit, and
malformed bodies answered 400 (never 500, never a traceback per client error).
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from klineage.graphql.app import create_app
from klineage.graphql.kernel_analysis import KernelAnalyzer
from klineage.kb.service import KnowledgeBase

KERNELS = Path(__file__).resolve().parents[1] / "fixtures" / "kernels"
TOKEN = "test-token-123"
SEARCH_KERNEL = "query($src: String) { searchSkills(kernelSource: $src, limit: 3) { score } }"


def _post(client: TestClient, body: bytes, headers: dict[str, Any] | None = None) -> Any:
    return client.post("/graphql", content=body,
                       headers={"content-type": "application/json", **(headers or {})})


# ---------------------------------------------------------------- item 7: kernel analysis


def test_oversized_kernel_source_is_a_clear_error_naming_the_limit(client: TestClient) -> None:
    source = "x = 1\n" * 250_000  # 1.5 MB (under the body limit): parses, but far over the source limit
    started = time.monotonic()
    data = client.post("/graphql", json={"query": SEARCH_KERNEL, "variables": {"src": source}}).json()
    assert time.monotonic() - started < 10
    message = data["errors"][0]["message"]
    assert "kernelSource" in message and str(KernelAnalyzer().max_bytes) in message


@pytest.fixture
def slow_client(kb: KnowledgeBase) -> Iterator[TestClient]:
    analyzer = KernelAnalyzer(timeout_s=1.0)
    with TestClient(create_app(kb, analyzer=analyzer)) as c:
        yield c


def _slow_source() -> str:
    """A kernel source under the size limit whose analysis takes seconds (it is superlinear)."""
    base = (KERNELS / "naive_gemm.py").read_text()
    return base * max(1, (KernelAnalyzer().max_bytes - 1) // len(base))


def test_health_answers_while_a_slow_analysis_runs_and_the_analysis_times_out(slow_client: TestClient) -> None:
    source = _slow_source()
    result: dict[str, Any] = {}

    def search() -> None:
        result["data"] = slow_client.post("/graphql", json={"query": SEARCH_KERNEL,
                                                            "variables": {"src": source}}).json()

    worker = threading.Thread(target=search)
    started = time.monotonic()
    worker.start()
    time.sleep(0.3)
    latencies = []
    while worker.is_alive() and time.monotonic() - started < 30:
        t0 = time.monotonic()
        assert slow_client.get("/healthz").status_code == 200
        latencies.append(time.monotonic() - t0)
        time.sleep(0.05)
    worker.join(30)
    assert latencies, "the analysis finished before health was asked"
    assert max(latencies) < 0.5, latencies
    message = result["data"]["errors"][0]["message"]
    assert "kernelSource" in message and "1" in message and "second" in message
    assert time.monotonic() - started < 10  # killed at its time limit, not run to the end


def test_kernel_search_still_works_after_a_timeout(slow_client: TestClient) -> None:
    slow_client.post("/graphql", json={"query": SEARCH_KERNEL, "variables": {"src": _slow_source()}})
    source = (KERNELS / "naive_gemm.py").read_text()
    data = slow_client.post("/graphql", json={"query": SEARCH_KERNEL, "variables": {"src": source}}).json()
    assert "errors" not in data, data


# ---------------------------------------------------------------- item 8: body limit on bytes read


def test_a_chunked_body_over_the_limit_is_refused_and_nothing_is_stored(client: TestClient, kb: Any) -> None:
    from klineage.graphql.app import MAX_BODY_BYTES

    before = kb.store.counts()
    doc = json.loads(sorted((Path(__file__).resolve().parents[1] / "fixtures" / "lineages").glob("*.json"))[0]
                     .read_text())
    doc["notes"] = "x" * (5 * 1024 * 1024)
    body = json.dumps({"query": "mutation($d: JSON!) { ingestLineage(document: $d) { lineageId } }",
                       "variables": {"d": doc}}).encode()

    def chunks() -> Iterator[bytes]:  # no Content-Length: a chunked body
        for i in range(0, len(body), 65536):
            yield body[i:i + 65536]

    response = client.post("/graphql", content=chunks(), headers={"content-type": "application/json",
                                                                   "authorization": f"Bearer {TOKEN}"})
    assert response.status_code == 413
    assert str(MAX_BODY_BYTES) in response.json()["errors"][0]["message"]
    assert kb.store.counts() == before


# ---------------------------------------------------------------- item 9: cost and response size


def _fan_out_query(levels: int) -> str:
    fragments = ["fragment F0 on Workload { name }"]
    for i in range(1, levels + 1):
        fragments.append(f"fragment F{i} on Workload {{ ...F{i - 1} ...F{i - 1} }}")
    return f"{{ workloads {{ ...F{levels} }} }} " + " ".join(fragments)


def test_a_fragment_fan_out_is_refused_by_cost_quickly(client: TestClient) -> None:
    query = _fan_out_query(20)  # 2**20 fields once fragments are expanded
    assert len(query) < 1200
    started = time.monotonic()
    data = client.post("/graphql", json={"query": query}).json()
    assert time.monotonic() - started < 1.0
    assert "cost" in data["errors"][0]["message"].lower()


def test_ordinary_queries_pass_the_cost_limit(client: TestClient) -> None:
    data = client.post("/graphql", json={"query": _fan_out_query(3)}).json()
    assert "errors" not in data, data


def test_a_huge_response_is_an_error_not_a_huge_body(kb: KnowledgeBase) -> None:
    from klineage.graphql.app import create_app as make

    app = make(kb, max_response_bytes=20_000)
    query = "{ " + " ".join(f"a{i}: lineages {{ kernels {{ source }} }}" for i in range(15)) + " }"
    with TestClient(app) as c:
        response = c.post("/graphql", json={"query": query})
    assert len(response.content) < 2000
    assert "20000" in response.json()["errors"][0]["message"]


# ---------------------------------------------------------------- item 10: malformed bodies


BAD_BODIES = {
    "null": b"null",
    "string": b'"str"',
    "number": b"12",
    "not utf-8": b'{"query": "\xff\xfe"}',
    "5000-digit integer": b'{"query": "{ workloads { name } }", "variables": {"x": ' + b"1" * 5000 + b"}}",
    "nested 3000 deep": b'{"query": "{ workloads { name } }", "variables": {"x": ' + b"[" * 3000 + b"]" * 3000
                        + b"}}",
    "query not a string": b'{"query": 12}',
    "variables not an object": b'{"query": "{ workloads { name } }", "variables": [1]}',
}


@pytest.mark.parametrize("name", sorted(BAD_BODIES))
def test_malformed_bodies_are_400_with_a_message(client: TestClient, name: str,
                                                 caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.DEBUG):
        response = _post(client, BAD_BODIES[name])
    assert response.status_code == 400, response.text
    assert response.json()["errors"][0]["message"]
    assert not [r for r in caplog.records if r.exc_info], "a client error logged a traceback"


def test_a_5000_digit_integer_literal_is_a_client_error_without_traceback(
        client: TestClient, caplog: pytest.LogCaptureFixture) -> None:
    query = '{ searchSkills(text: "x", limit: %s) { score } }' % ("1" * 5000)
    with caplog.at_level(logging.DEBUG):
        data = client.post("/graphql", json={"query": query}).json()
    assert data["errors"] and data["data"] is None
    assert not [r for r in caplog.records if r.exc_info], "a client error logged a traceback"


def test_a_non_ascii_bearer_token_is_400(client: TestClient) -> None:
    response = client.post("/graphql", json={"query": "{ workloads { name } }"},
                           headers={"Authorization": "Bearer ключ".encode()})
    assert response.status_code == 400
    assert "Authorization" in response.json()["errors"][0]["message"]


@pytest.mark.parametrize("context", [{"M": 10**400, "N": 4096, "K": 4096, "dtype": "bf16"},
                                     {"rows": 10**1000, "cols": 10**1000}, {"M": -(10**300)}])
def test_huge_integer_context_values_are_a_clear_error(client: TestClient, context: dict[str, int],
                                                       caplog: pytest.LogCaptureFixture) -> None:
    query = "query($c: JSON) { searchSkills(context: $c) { score } }"
    body = json.dumps({"query": query, "variables": {"c": context}}).encode()
    with caplog.at_level(logging.DEBUG):
        data = _post(client, body).json()
    message = data["errors"][0]["message"]
    assert "context" in message and "magnitude" in message, message
    assert not [r for r in caplog.records if r.exc_info], "a client error logged a traceback"
