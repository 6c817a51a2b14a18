"""Neo4j Browser end to end: the real Neo4j serves the Browser module at :7474/browser and holds the
measured knowledge base (the committed lineages/ ingested); headless Chromium (Debian's) loads the
KLineage style, connects over Bolt, runs the first saved query (one lineage drawn as a chain of
kernels, naive -> expert, each arrow captioned with its skill and speedup) and saves a screenshot in
which the styled, labelled chain is visible.

Set ``KLINEAGE_UPDATE_DOCS=1`` to also copy the screenshot to docs/neo4j-browser-lineage.png.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from tests.chromium_support import chromium as chromium_executable
from tests.chromium_support import playwright_core

ROOT = Path(__file__).resolve().parents[2]
BROWSER_DIR = ROOT / "deploy" / "neo4j" / "browser"
SCRIPT = Path(__file__).with_name("browser_screenshot.cjs")
LINEAGES = ROOT / "lineages"
CHAIN_WORKLOAD = "gemm"  # the lineage the first saved query draws


def _browser_url(neo4j_server: Any) -> str:
    return str(neo4j_server.browser_url)


def _colour_pixels(png: Path, hex_colour: str, tolerance: float = 0.04) -> int:
    import matplotlib.image as mpimg
    import numpy as np

    image = mpimg.imread(str(png))[..., :3]
    target = np.array([int(hex_colour[i:i + 2], 16) / 255 for i in (1, 3, 5)])
    return int((np.abs(image - target).max(axis=-1) < tolerance).sum())


@pytest.mark.real("chromium")
@pytest.mark.slow
def test_lineage_is_visible_in_neo4j_browser(neo4j_store: Any, neo4j_server: Any, tmp_path: Path) -> None:
    chromium = chromium_executable()
    playwright = playwright_core()
    browser_url = _browser_url(neo4j_server)
    try:
        with urllib.request.urlopen(browser_url, timeout=10) as response:
            assert response.status == 200
    except OSError as exc:
        pytest.skip(f"Neo4j Browser is not served at {browser_url}: {exc}")

    from klineage.ingest.pipeline import ingest_lineages
    from klineage.kb.service import KnowledgeBase
    from klineage.schema.evolution import step_geomean_speedup
    from klineage.schema.lineage_document import load_lineage_document

    docs = [load_lineage_document(p) for p in sorted(LINEAGES.glob("*.lineage.json"))]
    assert docs and not any(doc.sample for doc in docs)  # the measured KB, not test fixtures
    ingest_lineages(KnowledgeBase(neo4j_store), docs)
    chain = next(doc.data for doc in docs if doc.workload == CHAIN_WORKLOAD)
    chain_length = sum(1 for s in chain["steps"] if s["accepted"])

    screenshot = tmp_path / "neo4j-browser-lineage.png"
    env = {**os.environ, "PLAYWRIGHT_CORE": str(playwright), "CHROMIUM": chromium, "BROWSER_URL": browser_url,
           "BOLT_URL": neo4j_server.uri, "NEO4J_USER": neo4j_server.user, "NEO4J_PASSWORD": neo4j_server.password,
           "GRASS_FILE": str(BROWSER_DIR / "klineage.grass"),
           "QUERY_FILE": str(BROWSER_DIR / "lineage-queries.cypher"), "SCREENSHOT": str(screenshot),
           "ARRANGE_CHAIN": "1"}
    proc = subprocess.run(["node", str(SCRIPT)], env=env, capture_output=True, text=True, timeout=300, check=False)
    lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
    assert lines, f"no result from the Browser script: {proc.stdout[-2000:]} {proc.stderr[-2000:]}"
    result = json.loads(lines[-1])
    assert result["ok"], f"{result.get('error')} (the page is in {screenshot})"
    # the lineage and every kernel of its walk are on the canvas, one EVOLVES_TO per step that made one
    assert result["nodes"] == len(chain["kernels"])
    assert result["relationships"] >= len([s for s in chain["steps"] if s["to"]])
    assert result["styled"], f"the KLineage style was not applied: fills {result['fills']}"
    captions = set(result["captions"])
    nodes = set(result["nodeCaptions"])
    assert {f"{CHAIN_WORKLOAD} v0 naive", f"{CHAIN_WORKLOAD} v{chain_length} expert"} <= nodes, nodes
    for step in chain["steps"]:  # every arrow names its skill and speedup (a rejected one its gate)
        speedup = step_geomean_speedup(step)
        label = (f"{step['operator']} ×{speedup:.2f}" if step["accepted"]
                 else f"{step['operator']} ✗ {step['gate']}")
        assert label in captions, (label, captions)
    assert screenshot.stat().st_size > 20_000
    # the chain is visible in the picture itself: Kernel circles and EVOLVES_TO arrows of the style
    assert _colour_pixels(screenshot, "#57C7E3") > 2000
    assert _colour_pixels(screenshot, "#4C8EDA") > 200
    if os.environ.get("KLINEAGE_UPDATE_DOCS") == "1":
        (ROOT / "docs").mkdir(exist_ok=True)
        shutil.copyfile(screenshot, ROOT / "docs" / "neo4j-browser-lineage.png")
