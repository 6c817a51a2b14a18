"""`klineage walk --resume`: a resumed walk goes on from the kernel its document started from."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import typer

from klineage.cli.walk_commands import _resumed_start

ROOT = Path(__file__).resolve().parents[2]


def _copy_attention(tmp_path: Path) -> tuple[Path, Path]:
    folder = tmp_path / "attention"
    shutil.copytree(ROOT / "workloads" / "attention", folder)
    document = tmp_path / "attention.lineage.json"
    shutil.copy(ROOT / "lineages" / "attention.lineage.json", document)
    return folder, document


def test_resume_starts_from_the_documents_kernel_and_says_the_file_moved_on(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    folder, document = _copy_attention(tmp_path)
    doc = json.loads(document.read_text(encoding="utf-8"))
    recorded = next(k["source"] for k in doc["kernels"] if k["sha"] == doc["start"])
    (folder / "expert.py").write_text(recorded, encoding="utf-8")
    assert _resumed_start(document, folder) == recorded
    assert "changed since" not in capsys.readouterr().out
    (folder / "expert.py").write_text(recorded + "\n# a later version\n", encoding="utf-8")
    assert _resumed_start(document, folder) == recorded
    assert "changed since" in capsys.readouterr().out


def test_resume_of_a_document_without_its_start_is_a_usage_error(tmp_path: Path) -> None:
    folder, document = _copy_attention(tmp_path)
    doc = json.loads(document.read_text(encoding="utf-8"))
    doc["kernels"] = [k for k in doc["kernels"] if k["sha"] != doc["start"]]
    document.write_text(json.dumps(doc), encoding="utf-8")
    with pytest.raises(typer.Exit) as exc:
        _resumed_start(document, folder)
    assert exc.value.exit_code == 2
    document.write_text("{not json", encoding="utf-8")
    with pytest.raises(typer.Exit):
        _resumed_start(document, folder)
