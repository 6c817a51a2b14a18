"""Where ``klineage demo`` finds lineage documents when the package is installed (the Docker image):
``$KLINEAGE_LINEAGES`` and the working directory, never only next to the installed package."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from klineage.cli import kb_commands

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def installed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The package as pip installs it: its 'checkout root' is site-packages, with no lineages there;
    the working directory is an empty folder."""
    site = tmp_path / "site-packages"
    site.mkdir()
    monkeypatch.setattr(kb_commands, "LINEAGE_DIRS", (Path("lineages"), site / "lineages"))
    monkeypatch.setattr(kb_commands, "FIXTURE_DIRS", (Path("tests") / "fixtures" / "lineages",
                                                      site / "tests" / "fixtures" / "lineages"))
    work = tmp_path / "app"
    work.mkdir()
    monkeypatch.chdir(work)
    monkeypatch.delenv(kb_commands.LINEAGES_ENV, raising=False)
    return work


def test_the_configured_folder_holds_the_measured_lineages(installed: Path, monkeypatch: pytest.MonkeyPatch,
                                                           tmp_path: Path) -> None:
    folder = tmp_path / "image-lineages"
    folder.mkdir()
    shutil.copy(ROOT / "lineages" / "gemm.lineage.json", folder)
    monkeypatch.setenv(kb_commands.LINEAGES_ENV, str(folder))
    assert kb_commands.find_lineage_documents() == ([folder / "gemm.lineage.json"], False)


def test_fixtures_are_found_under_the_working_directory(installed: Path) -> None:
    fixtures = installed / "tests" / "fixtures" / "lineages"
    shutil.copytree(ROOT / "tests" / "fixtures" / "lineages", fixtures)
    paths, sample = kb_commands.find_lineage_documents()
    assert sample and paths and all(p.resolve().parent == fixtures.resolve() for p in paths)


def test_nothing_found_is_empty(installed: Path) -> None:
    assert kb_commands.find_lineage_documents() == ([], True)
