"""The CLI end to end: demo, ingest, search --json, export, and clear errors for bad input."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests" / "fixtures" / "lineages"


def klineage(tmp_path: Path, *args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "KLINEAGE_DATA_DIR": str(tmp_path / "kb"), "KLINEAGE_STORE": "embedded",
           "HF_HUB_OFFLINE": "1", "COLUMNS": "200"}
    return subprocess.run([sys.executable, "-m", "klineage.cli.main", *args], env=env, capture_output=True,
                          text=True, timeout=300, cwd=cwd or tmp_path)


def test_demo_labels_fixture_data_on_every_line(tmp_path: Path) -> None:
    result = klineage(tmp_path, "demo", cwd=tmp_path)  # no lineages/ here and none in the repo yet
    assert result.returncode == 0, result.stderr
    lines = [line for line in result.stdout.splitlines() if line.strip()]
    assert any("Skills" in line for line in lines)
    assert any("Example search" in line for line in lines)
    content = [line for line in lines if any(ch.isalnum() for ch in line)]
    if not (ROOT / "lineages").is_dir():
        unlabelled = [line for line in content if "sample data, not measured" not in line
                      and not set(line.strip()) <= set("┃│┏┓┗┛━─┡┩└┘┌┐├┤┼╇╈╋ ")
                      and "measured" not in line]
        # table rows carry the label in their sample column; headers and borders carry no figures
        assert all(not any(ch.isdigit() for ch in line) for line in unlabelled), unlabelled


def test_ingest_search_json_and_export(tmp_path: Path) -> None:
    ingest = klineage(tmp_path, "ingest", str(FIXTURES))
    assert ingest.returncode == 0, ingest.stderr
    again = klineage(tmp_path, "ingest", str(FIXTURES))
    assert again.returncode == 0
    search = klineage(tmp_path, "search", "matrix multiply", "-c", "M=4096", "-c", "dtype=bf16", "--json")
    assert search.returncode == 0, search.stderr
    hits = json.loads(search.stdout)
    assert hits and {"skill", "score", "applicable", "explanation"} <= set(hits[0])
    assert {"id", "name", "operator"} <= set(hits[0]["skill"])
    exported = klineage(tmp_path, "export", "--format", "json")
    data = json.loads(exported.stdout)
    labels = {n["label"] for n in data["nodes"]}
    assert {"Skill", "Lineage", "Step", "Kernel", "Workload"} <= labels
    graphml = klineage(tmp_path, "export", "--format", "graphml", "-o", str(tmp_path / "kb.graphml"))
    assert graphml.returncode == 0 and (tmp_path / "kb.graphml").read_text().startswith("<?xml")
    import networkx as nx

    graph = nx.read_graphml(tmp_path / "kb.graphml")
    assert graph.number_of_nodes() == len(data["nodes"])
    assert graph.number_of_edges() == len(data["relationships"])


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (("ingest", "nowhere.json"), "no such file"),
        (("search",), "text"),
        (("search", "x", "-c", "M"), "NAME=VALUE"),
        (("search", "x", "-c", '{"M": 4096'), "not a JSON object"),
        (("search", "x", "-c", '{"colz": 1}'), "unknown feature 'colz'"),
        (("search", "x", "--kernel", "missing.py"), "no such file"),
        (("search", "x", "--workload", "."), "manifest.toml"),
        (("export", "--format", "csv"), "json or graphml"),
    ],
)
def test_bad_input_is_a_clear_error(tmp_path: Path, args: tuple[str, ...], needle: str) -> None:
    result = klineage(tmp_path, *args)
    assert result.returncode == 2, (result.stdout, result.stderr)
    assert needle in result.stderr, result.stderr


def test_bad_lineage_document_changes_nothing(tmp_path: Path) -> None:
    assert klineage(tmp_path, "ingest", str(FIXTURES)).returncode == 0
    before = klineage(tmp_path, "export").stdout
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"format": "klineage.lineage", "version": 1}))
    result = klineage(tmp_path, "ingest", str(bad))
    assert result.returncode == 2 and "bad.json" in result.stderr
    assert klineage(tmp_path, "export").stdout == before


def test_search_with_a_kernel_recommends_only_what_can_be_added(tmp_path: Path) -> None:
    assert klineage(tmp_path, "ingest", str(FIXTURES)).returncode == 0
    kernel = ROOT / "heldout" / "log_softmax" / "naive.py"
    # the text names the GEMM-only skills too: below the relevance floor and with no place in the kernel, a
    # skill the text does not name does not come back at all
    result = klineage(tmp_path, "search", "exp2, tile size, grouped order", "--kernel", str(kernel), "--context",
                      '{"rows": 4096, "cols": 32000, "dtype": "bf16", "arch": 90}', "--json")
    assert result.returncode == 0, result.stderr
    hits = {h["skill"]["operator"]: h for h in json.loads(result.stdout)}
    assert hits["exp2"]["applicable"] == "APPLICABLE"
    passed = hits["exp2"]["explanation"]["passed"]
    assert any(line.startswith("anchor applicable: exp2 can be added") for line in passed), passed
    for gemm_only in ("tile-size", "grouped-order"):
        assert hits[gemm_only]["applicable"] == "NOT_APPLICABLE"
        assert any(line.startswith(f"anchor absent: nowhere in the kernel to add {gemm_only}")
                   for line in hits[gemm_only]["explanation"]["failed"])
