"""The GraphQL API: the fields clients rely on, limits, DataLoaders and guarded mutations."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from klineage.graphql.schema import schema
from klineage.kb.service import KnowledgeBase


def gql(client: TestClient, query: str, variables: dict[str, Any] | None = None,
        token: str | None = None) -> dict[str, Any]:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    response = client.post("/graphql", json={"query": query, "variables": variables or {}}, headers=headers)
    assert response.status_code == 200, response.text
    return response.json()


ROOT = Path(__file__).resolve().parents[2]
SDL_PATH = ROOT / "klineage" / "graphql" / "schema.graphql"
FIXTURES = ROOT / "tests" / "fixtures" / "lineages"
TOKEN = "test-token-123"

SKILL_FIELDS = """id name intent operator anchor { predicate description } carrier transform
  effect { min median max n } support architectures sample profitability
  validWhen { expr kind } profitableWhen { expr accuracy oosAccuracy majority } risks { kind description }
  evidence { lineageId stepId workload gpu speedups sample } enables { id }"""


def test_checked_in_sdl_matches_the_schema() -> None:
    assert SDL_PATH.read_text(encoding="utf-8").strip() == schema.as_str().strip(), (
        "klineage/graphql/schema.graphql drifted: regenerate it with "
        "`python -c 'from klineage.graphql.schema import schema; print(schema.as_str())'"
        " > klineage/graphql/schema.graphql`"
    )


def test_search_skills_returns_explained_hits(client: TestClient) -> None:
    data = gql(client, """query($ctx: JSON) { searchSkills(text: "faster matrix multiply", context: $ctx, limit: 5) {
        score applicable skill { id name operator sample }
        explanation { passed failed unknown evidence { workload speedups sample } } } }""",
               {"ctx": {"M": 4096, "N": 4096, "K": 4096, "dtype": "bf16"}})
    assert "errors" not in data, data
    hits = data["data"]["searchSkills"]
    assert hits, "the fixtures hold skills, so a search finds some"
    scores = [h["score"] for h in hits]
    assert scores == sorted(scores, reverse=True)
    for hit in hits:
        assert hit["applicable"] in {"APPLICABLE", "NOT_APPLICABLE", "UNKNOWN"}
        assert hit["skill"]["sample"] is True  # fixtures are labelled sample data
        explained = hit["explanation"]
        assert explained["evidence"], "every hit carries its evidence"
        assert all(e["sample"] for e in explained["evidence"])


def test_search_with_nothing_is_a_clear_error(client: TestClient) -> None:
    data = gql(client, "{ searchSkills { score } }")
    assert data["errors"] and data["data"] is None
    assert "text" in data["errors"][0]["message"] and "context" in data["errors"][0]["message"]


def test_search_with_a_kernel_uses_its_features(client: TestClient) -> None:
    source = (Path(__file__).resolve().parents[1] / "schema" / "test_manifest.py").read_text()
    data = gql(client, "query($src: String) { searchSkills(kernelSource: $src, limit: 3) { applicable } }",
               {"src": source})
    assert "errors" not in data, data
    bad = gql(client, 'query { searchSkills(kernelSource: "def (:", limit: 3) { score } }')
    assert "kernelSource" in bad["errors"][0]["message"]


def test_skill_pagination_walks_every_skill_once(client: TestClient, kb: KnowledgeBase) -> None:
    seen: list[str] = []
    after = None
    while True:
        data = gql(client, "query($a: String) { skills(first: 2, after: $a) { items { id } endCursor hasNextPage } }",
                   {"a": after})
        page = data["data"]["skills"]
        seen.extend(item["id"] for item in page["items"])
        if not page["hasNextPage"]:
            break
        after = page["endCursor"]
    assert seen == sorted(seen) and len(seen) == len(set(seen))
    assert len(seen) == kb.store.counts()["Skill"]
    one = gql(client, "query($id: ID!) { skill(id: $id) { " + SKILL_FIELDS + " } }", {"id": seen[0]})
    assert "errors" not in one, one
    assert one["data"]["skill"]["id"] == seen[0]
    assert gql(client, '{ skill(id: "skill:nope") { id } }')["data"]["skill"] is None


def test_lineages_steps_kernels_and_gate_runs(client: TestClient) -> None:
    data = gql(client, """{ workloads { name } lineages { id workload sample startSha
        steps { index operator accepted gate reason from { sha } to { sha } skill { operator } }
        kernels { sha gateRuns { verdict } } } }""")
    assert "errors" not in data, data
    lineages = data["data"]["lineages"]
    assert {w["name"] for w in data["data"]["workloads"]} == {lin["workload"] for lin in lineages}
    for lin in lineages:
        indexes = [s["index"] for s in lin["steps"]]
        assert indexes == sorted(indexes)
        shas = {k["sha"] for k in lin["kernels"]}
        assert lin["startSha"] in shas
        for step in lin["steps"]:
            assert step["from"]["sha"] in shas
            if step["accepted"]:
                assert step["to"]["sha"] in shas and step["gate"] is None
            else:
                assert step["gate"] and step["skill"] is None
    sha = lineages[0]["startSha"]
    kernel = gql(client, "query($s: String!) { kernel(sha: $s) { sha source } }", {"s": sha})
    assert kernel["data"]["kernel"]["sha"] == sha
    one = gql(client, "query($id: ID!) { lineage(id: $id) { id } }", {"id": lineages[0]["id"]})
    assert one["data"]["lineage"]["id"] == lineages[0]["id"]
    only = gql(client, "query($w: String) { lineages(workload: $w) { workload } }", {"w": lineages[0]["workload"]})
    assert {x["workload"] for x in only["data"]["lineages"]} == {lineages[0]["workload"]}


def test_a_page_of_skills_costs_a_bounded_number_of_store_calls(client: TestClient, kb: Any) -> None:
    query = "{ skills(first: 50) { items { " + SKILL_FIELDS + " } } }"
    kb.store.calls.clear()
    data = gql(client, query)
    assert "errors" not in data, data
    n_skills = len(data["data"]["skills"]["items"])
    assert n_skills >= 2
    # one page read + one batched call per DataLoader (validWhen, profitableWhen, risks, evidence, enables)
    # and a few reads behind evidence; the count must not grow with the number of skills.
    first = kb.store.total()
    assert first <= 12, kb.store.calls
    kb.store.calls.clear()
    gql(client, "{ skills(first: 1) { items { " + SKILL_FIELDS + " } } }")
    assert kb.store.total() == first, (kb.store.calls, first)


@pytest.mark.parametrize(
    ("query", "needle"),
    [
        ("{ skills { items " + "{ enables " * 7 + "{ id }" + " }" * 7 + " } }",
         "exceeds maximum operation depth"),
        ("{ " + " ".join(f"a{i}: workloads {{ name }}" for i in range(20)) + " }", "aliases"),
        ("{ workloads { " + " ".join(["name"] * 2100) + " } }", "token"),
    ],
)
def test_oversized_queries_are_refused(client: TestClient, query: str, needle: str) -> None:
    data = gql(client, query)
    assert data.get("errors"), data
    assert needle.lower() in json.dumps(data["errors"]).lower()


INGEST = "mutation($doc: JSON!) { ingestLineage(document: $doc) { lineageId skills nodes relationships } }"


def test_mutations_need_the_token(client: TestClient, kb: Any) -> None:
    before = kb.store.counts()
    doc = json.loads(sorted(FIXTURES.glob("*.json"))[0].read_text())
    for token in (None, "wrong"):
        data = gql(client, INGEST, {"doc": doc}, token=token)
        assert "Authorization" in data["errors"][0]["message"]
        data = gql(client, 'mutation { recordApplication(skillId: "x", kernelSource: "k", outcome: "pass") { id } }',
                   token=token)
        assert data["errors"]
    assert kb.store.counts() == before


def test_ingest_is_idempotent_and_bad_documents_change_nothing(client: TestClient, kb: Any) -> None:
    doc = json.loads(sorted(FIXTURES.glob("*.json"))[0].read_text())
    before = kb.store.counts()
    data = gql(client, INGEST, {"doc": doc}, token=TOKEN)
    assert "errors" not in data, data
    assert kb.store.counts() == before  # already ingested by the fixture: nothing changes
    doc["version"] = 99
    bad = gql(client, INGEST, {"doc": doc}, token=TOKEN)
    assert "$.version" in bad["errors"][0]["message"]
    assert kb.store.counts() == before


def test_record_application(client: TestClient, kb: Any) -> None:
    skill_id = kb.skills(first=1).items[0].id
    data = gql(client, """mutation($id: ID!) { recordApplication(skillId: $id, kernelSource: "import triton\\n",
        outcome: "pass", speedup: 1.2) { id skillId outcome speedup } }""", {"id": skill_id}, token=TOKEN)
    assert "errors" not in data, data
    assert data["data"]["recordApplication"]["skillId"] == skill_id
    assert kb.store.counts()["Application"] == 1
    unknown = gql(client, 'mutation { recordApplication(skillId: "skill:nope", kernelSource: "x", outcome: "pass") '
                  "{ id } }", token=TOKEN)
    assert "skill:nope" in unknown["errors"][0]["message"]


def test_health(client: TestClient) -> None:
    response = client.get("/healthz")
    assert response.status_code == 200 and response.json()["status"] == "ok"
