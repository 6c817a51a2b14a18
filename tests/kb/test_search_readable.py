"""Search answers a person can read: a relevance floor (a text nothing is near gives no hit), the score
explained, a false PROFITABLE_WHEN never ranked above conditions that hold, and the features that
undecided conditions need (``klineage features`` lists them; ``search --help`` says so)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from klineage.cli.main import app
from klineage.kb.embedded_store import EmbeddedStore
from klineage.kb.search import UNKNOWN, content_words
from klineage.kb.service import KnowledgeBase
from klineage.schema.graph import GraphBatch, Relationship
from klineage.schema.records import Anchor, Condition, Effect, Skill

from .conftest import GEMM_FIXTURE, SOFTMAX_FIXTURE, load_doc

VEC = tuple([1.0] + [0.0] * 383)


def _skill(op: str, speedups: list[float], support: int, anchor: str = "") -> Skill:
    return Skill(op, op, "synthetic", Anchor(anchor, ""), "c", {"operator": op}, effect=Effect.of(speedups),
                 support_steps=support, support_lineages=1, embedding=VEC)


def test_a_false_profitable_when_never_ranks_above_conditions_that_hold(tmp_path: Path) -> None:
    # "loser" measured 3.0x with 6 steps, but its rule says it does not pay at M=1024: capped at 1.0 x 7/8 =
    # 0.875, still above "holds" (1.1 x 2/3 = 0.73) by score; its false rule must put it after.
    loser, holds = _skill("loser", [3.0], 6), _skill("holds", [1.1], 1)
    big, small = Condition("M >= 4096", "profitable", "induced"), Condition("M <= 2048", "profitable", "induced")
    store = EmbeddedStore(tmp_path)
    store.upsert(GraphBatch.of([loser.to_node(), holds.to_node(), big.to_node(), small.to_node()],
                               [Relationship("PROFITABLE_WHEN", loser.id, big.id),
                                Relationship("PROFITABLE_WHEN", holds.id, small.id)]))
    hits = KnowledgeBase(store, embedder=None).search(context={"M": 1024}, limit=5)
    assert [h.skill.operator for h in hits] == ["holds", "loser"]
    assert hits[1].score > hits[0].score  # the tier, not the score, puts it second
    assert hits[1].unprofitable and not hits[0].unprofitable
    assert "ranked after every hit whose PROFITABLE_WHEN is not false" in hits[1].why
    assert hits[0].why.startswith(f"score {hits[0].score:.3f} = relevance 1.00 × expected gain 1.10×")
    assert "confidence 0.67 (1 measured step(s))" in hits[0].why


def test_unknown_conditions_name_the_features_they_need(tmp_path: Path) -> None:
    skill = _skill("rowy", [1.2], 2, anchor="row_reduction and n_loops >= 1")
    store = EmbeddedStore(tmp_path)
    store.upsert(GraphBatch.of([skill.to_node()]))
    [hit] = KnowledgeBase(store, embedder=None).search(context={"rows": 4096, "cols": 512}, limit=5)
    assert hit.applicable == UNKNOWN
    assert hit.missing_features == ("n_loops", "row_reduction")


def test_content_words_drop_what_every_request_says() -> None:
    assert content_words("Make a kernel FASTER with the online softmax") == ["online", "softmax"]
    assert content_words("bake a chocolate cake") == ["bake", "chocolate", "cake"]


@pytest.mark.real("embedder")
def test_a_text_nothing_is_near_gives_no_hit(tmp_path: Path, embedder: Any) -> None:
    kb = KnowledgeBase(EmbeddedStore(tmp_path), embedder)
    for path in (GEMM_FIXTURE, SOFTMAX_FIXTURE):
        kb.ingest(load_doc(path))
    assert kb.search(text="bake a chocolate cake", limit=10) == []
    assert kb.search(text="hello", context={"M": 4096, "dtype": "bf16"}, limit=10) == []
    hits = kb.search(text="exp2 softmax exponential", limit=10)
    assert hits and hits[0].skill.operator == "exp2"
    assert hits[0].similarity is not None and hits[0].similarity >= 0.25
    assert "text similarity" in hits[0].why


def test_features_command_lists_names_with_meaning() -> None:
    runner = CliRunner()
    result = runner.invoke(app, ["features", "--json"])
    assert result.exit_code == 0, result.output
    rows = {r["name"]: r for r in json.loads(result.output)}
    assert rows["M"]["kind"] == "problem" and "GEMM" in rows["M"]["meaning"]
    assert rows["has_dot"]["kind"] == "kernel" and rows["has_dot"]["given_by"] == "--kernel FILE"
    assert rows["reduce_len"]["portable"] is True
    table = runner.invoke(app, ["features"], env={"COLUMNS": "200"})
    assert table.exit_code == 0 and "row_reduction" in table.output
    helped = runner.invoke(app, ["search", "--help"], env={"COLUMNS": "200"})
    assert "klineage features" in helped.output


@pytest.mark.real("embedder")
def test_the_cli_says_when_nothing_matches(tmp_path: Path) -> None:
    runner = CliRunner()
    env = {"KLINEAGE_DATA_DIR": str(tmp_path / "kb"), "KLINEAGE_STORE": "embedded", "COLUMNS": "200"}
    assert runner.invoke(app, ["ingest", str(GEMM_FIXTURE)], env=env).exit_code == 0
    result = runner.invoke(app, ["search", "bake a chocolate cake"], env=env)
    assert result.exit_code == 0, result.output
    assert "No skill matches 'bake a chocolate cake'" in result.output
    assert "klineage features" in result.output
