"""``klineage validate`` and ``klineage validator``: exit codes, --json, bad usage."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from klineage.cli.main import app

ROWSUM = Path(__file__).resolve().parent / "workloads" / "rowsum"
runner = CliRunner()


@pytest.fixture(autouse=True)
def _cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KLINEAGE_VALIDATOR_CACHE", str(tmp_path / "cache.sqlite"))


def _write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def test_json_output_is_the_document_alone_and_exit_1_on_fail(tmp_path: Path) -> None:
    cand = _write(tmp_path, "c.py", "import os\n")
    result = runner.invoke(app, ["validate", str(cand), "--workload", str(ROWSUM), "--json"])
    assert result.exit_code == 1, result.output
    doc = json.loads(result.stdout)
    assert doc["verdict"] == "fail" and doc["gates"][0]["gate"] == "static"
    assert set(doc) >= {"verdict", "kernel_sha", "gpu", "versions", "gates"}


def test_exit_0_on_pass_with_a_table(tmp_path: Path) -> None:
    result = runner.invoke(app, ["validate", str(ROWSUM / "kernel.py"), "-w", str(ROWSUM), "--gates", "static"])
    assert result.exit_code == 0, result.output
    assert "verdict pass" in result.stdout and "not requested" in result.stdout


@pytest.mark.parametrize(("args", "message"), [
    (["missing.py", "-w", str(ROWSUM)], "does not exist"),
    (["{cand}", "-w", "/no/such/workload"], "does not exist"),
    (["{cand}", "-w", str(ROWSUM), "--gates", "static,speed"], "unknown gate 'speed'"),
    (["{cand}", "-w", str(ROWSUM), "--shapes", "[{{"], "--shapes is not JSON"),
    (["{latin}", "-w", str(ROWSUM)], "not valid UTF-8"),
    (["{cand}", "-w", "{bad}"], "malformed workload manifest"),
    (["{empty}", "-w", str(ROWSUM)], "empty.py: candidate source is empty"),
    (["{folder}", "-w", str(ROWSUM)], "is a folder; expected the kernel's .py file"),
    (["{cand}", "-w", str(ROWSUM), "--shapes", '{{"rows": 4}}'], "--shapes: expected a JSON list of shape objects"),
])
def test_bad_usage_exits_2(tmp_path: Path, args: list[str], message: str) -> None:
    cand = _write(tmp_path, "c.py", "import os\n")
    latin = tmp_path / "latin.py"
    latin.write_bytes(b"x = '\xe9'\n")
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "manifest.toml").write_text("[workload]\n")
    empty = _write(tmp_path, "empty.py", "\n")
    filled = [a.format(cand=cand, latin=latin, bad=bad, empty=empty, folder=tmp_path) for a in args]
    result = runner.invoke(app, ["validate", *filled])
    assert result.exit_code == 2, result.output
    assert message in " ".join(result.output.split())


def test_validator_group_is_registered() -> None:
    result = runner.invoke(app, ["validator", "--help"])
    assert result.exit_code == 0
    assert "serve" in result.stdout and "info" in result.stdout
