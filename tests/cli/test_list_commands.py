"""Listing what the knowledge base holds (`klineage skills`, `lineages`, `workloads`, tables and --json), and
`klineage replay` saying why it exits non-zero (on a CPU nothing is timed)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from klineage.cli.main import app
from klineage.ingest.replay import ReplayCase, ReplayReport, ReplayStep
from klineage.ingest.walker import Measurement
from klineage.schema.gate_result import GateOutcome, GateResult

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests" / "fixtures" / "lineages"


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    data = tmp_path_factory.mktemp("list-kb")
    env = {"KLINEAGE_DATA_DIR": str(data), "KLINEAGE_STORE": "embedded", "COLUMNS": "200"}
    result = CliRunner().invoke(app, ["ingest", str(FIXTURES)], env=env)
    assert result.exit_code == 0, result.output
    return env


@pytest.mark.real("embedder")
def test_skills_lineages_and_workloads_as_tables_and_json(env: dict[str, str]) -> None:
    runner = CliRunner()
    skills = json.loads(runner.invoke(app, ["skills", "--json"], env=env).output)
    assert {s["operator"] for s in skills} >= {"grouped-order", "tile-size", "num-warps", "exp2"}
    assert all(s["sample"] is True and s["support_steps"] >= 1 for s in skills)
    only = json.loads(runner.invoke(app, ["skills", "--operator", "exp2", "--json"], env=env).output)
    assert [s["operator"] for s in only] == ["exp2"]
    lineages = json.loads(runner.invoke(app, ["lineages", "--json"], env=env).output)
    assert sorted(row["workload"] for row in lineages) == ["gemm", "softmax"]
    assert all(row["measured"] is True and row["id"].startswith("lineage:") for row in lineages)
    workloads = json.loads(runner.invoke(app, ["workloads", "--json"], env=env).output)
    assert sorted(w["name"] for w in workloads) == ["gemm", "softmax"]
    for command, needle in (("skills", "grouped-order"), ("lineages", "softmax"), ("workloads", "gemm")):
        table = runner.invoke(app, [command], env=env)
        assert table.exit_code == 0 and needle in table.output, table.output


def test_listing_an_empty_knowledge_base_says_how_to_fill_it(tmp_path: Path) -> None:
    env = {"KLINEAGE_DATA_DIR": str(tmp_path / "empty"), "KLINEAGE_STORE": "embedded", "COLUMNS": "200"}
    result = CliRunner().invoke(app, ["skills"], env=env)
    assert result.exit_code == 0 and "klineage ingest lineages/" in result.output
    assert json.loads(CliRunner().invoke(app, ["lineages", "--json"], env=env).output) == []


def _cpu_result(gates: tuple[GateOutcome, ...]) -> GateResult:
    return GateResult("0" * 64, "none (CPU: Triton interpreter, cross-compile only)", {}, gates, "softmax")


def test_replay_on_cpu_says_why_it_exits_non_zero(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    passed = _cpu_result((GateOutcome("correctness", "pass"),
                          GateOutcome("performance", "skipped", "no GPU: interpreter mode, nothing to time")))
    report = ReplayReport("softmax", (ReplayStep("exp2", True),), ())
    rebuilt = Measurement("0" * 64, passed, None)

    def fake_replay_check(doc: Any, walker: Any, recorded: bool = True) -> tuple[ReplayReport, Measurement, str]:
        return report, rebuilt, "source"

    monkeypatch.setattr("klineage.ingest.replay.replay_check", fake_replay_check)
    args = ["replay", str(ROOT / "lineages" / "softmax.lineage.json"), "-w", str(ROOT / "workloads" / "softmax"),
            "--cache", str(tmp_path / "cache.sqlite")]
    result = CliRunner().invoke(app, args, env={"COLUMNS": "200"})
    assert result.exit_code == 1
    last = result.output.strip().splitlines()[-1]
    assert last.startswith("exit 1: nothing was timed (no GPU") and "run replay on a GPU" in last


def test_replay_says_which_case_fell_short_and_rejects_a_bad_workload() -> None:
    slow = ReplayReport("softmax", (), (ReplayCase({"rows": 4096}, "bf16", 1.0, 2.0),))
    assert slow.why_not_passed == "bf16 {'rows': 4096} reached 0.500x of the expert's throughput, below 0.9x"
    assert ReplayReport("softmax", (), (ReplayCase({"rows": 1}, "bf16", 1.0, 1.0),)).why_not_passed is None
    result = CliRunner().invoke(app, ["replay", str(ROOT / "lineages" / "softmax.lineage.json"), "-w", "nowhere"])
    assert result.exit_code == 2 and "not a workload folder" in result.output


@pytest.mark.parametrize("args", [["search", "x"], ["ingest", str(FIXTURES)], ["export"], ["skills"], ["lineages"],
                                  ["workloads"], ["demo"]])
def test_a_bad_store_setting_is_one_line_and_exit_2(args: list[str]) -> None:
    result = CliRunner().invoke(app, args, env={"KLINEAGE_STORE": "bogus", "COLUMNS": "200"})
    assert result.exit_code == 2, (result.output, result.exception)
    assert "KLINEAGE_STORE='bogus': expected one of embedded, neo4j" in result.output
    assert "Traceback" not in result.output
