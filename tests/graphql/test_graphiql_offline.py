"""GraphiQL works with no network: the server serves the page and its React/GraphiQL builds itself.

Before: strawberry's page loaded React and GraphiQL from unpkg.com, so offline it stayed blank. The
end-to-end test runs the real server (uvicorn) and opens /graphql in headless Chromium (Debian's,
empty profile) with every request outside the server refused and no name resolving; GraphiQL must
render and run a query. ``KLINEAGE_UPDATE_DOCS=1`` copies its screenshot to docs/graphiql-offline.png.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
import threading
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from klineage.graphql.app import create_app
from klineage.graphql.ide import ASSETS_PATH, VENDOR_DIR, asset_names
from klineage.kb.service import KnowledgeBase
from tests.chromium_support import chromium, playwright_core

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = Path(__file__).with_name("graphiql_screenshot.cjs")
QUERY = "{ skills(first: 3) { items { name operator } } }"


def _page(client: TestClient) -> str:
    response = client.get("/graphql", headers={"accept": "text/html"})
    assert response.status_code == 200
    return response.text


def test_the_page_references_no_other_host(client: TestClient) -> None:
    html = _page(client)
    assert "GraphiQL.createFetcher" in html
    urls = re.findall(r"""(?:src|href)\s*=\s*["']([^"']+)["']""", html)
    assert urls and all(u.startswith(ASSETS_PATH + "/") or u.startswith("data:") for u in urls), urls
    assert "unpkg.com" not in html and "://" not in "".join(urls)
    assert {u.rsplit("/", 1)[1] for u in urls if u.startswith(ASSETS_PATH)} == set(asset_names())


def test_assets_are_served_gzipped_or_plain(client: TestClient) -> None:
    names = asset_names()
    wanted = {"react.production.min.js", "react-dom.production.min.js", "graphiql.min.js", "graphiql.min.css"}
    assert wanted <= set(names)
    for name in names:
        raw = client.get(f"{ASSETS_PATH}/{name}", headers={"accept-encoding": "identity"})
        assert raw.status_code == 200 and "content-encoding" not in raw.headers
        assert raw.headers["content-type"].startswith("text/css" if name.endswith(".css") else "text/javascript")
        assert len(raw.content) > 1000
        zipped = client.get(f"{ASSETS_PATH}/{name}", headers={"accept-encoding": "gzip"})
        assert zipped.headers["content-encoding"] == "gzip" and zipped.content == raw.content  # httpx decodes
    assert client.get(f"{ASSETS_PATH}/..%2Fgraphiql.html").status_code == 404
    assert client.get(f"{ASSETS_PATH}/nothing.js").status_code == 404
    # licenses ship next to the builds, and the package stays small
    licenses = VENDOR_DIR.parent / "licenses"
    assert {p.name for p in licenses.iterdir()} == {"react.LICENSE", "react-dom.LICENSE", "graphiql.LICENSE"}
    assert sum(p.stat().st_size for p in VENDOR_DIR.iterdir()) < 1_200_000


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture
def server(kb: KnowledgeBase) -> Iterator[str]:
    """The real ASGI server (uvicorn) on a free local port, serving ``kb``."""
    import uvicorn

    port = _free_port()
    config = uvicorn.Config(create_app(kb), host="127.0.0.1", port=port, log_level="warning")
    srv = uvicorn.Server(config)
    thread = threading.Thread(target=srv.run, daemon=True)
    thread.start()
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    while True:
        try:
            with urllib.request.urlopen(base + "/healthz", timeout=2):
                break
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)
    yield base
    srv.should_exit = True
    thread.join(timeout=10)


@pytest.mark.real("chromium")
@pytest.mark.slow
def test_graphiql_renders_and_runs_a_query_offline(server: str, tmp_path: Path) -> None:
    browser = chromium()
    playwright = playwright_core()
    screenshot = tmp_path / "graphiql-offline.png"
    url = f"{server}/graphql?q={urllib.parse.quote(QUERY)}"
    env = {**os.environ, "PLAYWRIGHT_CORE": str(playwright), "CHROMIUM": browser, "PAGE_URL": url,
           "SCREENSHOT": str(screenshot)}
    proc = subprocess.run(["node", str(SCRIPT)], env=env, capture_output=True, text=True, timeout=180, check=False)
    lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
    assert lines, f"no result from the GraphiQL script: {proc.stdout[-2000:]} {proc.stderr[-2000:]}"
    result = json.loads(lines[-1])
    assert result["ok"], f"{result.get('error')} blocked={result['blocked']} (the page is in {screenshot})"
    assert result["blocked"] == [] and result["failed"] == []  # nothing outside the server was asked for
    assert '"skills"' in result["response"] and '"operator"' in result["response"]
    assert screenshot.stat().st_size > 20_000
    if os.environ.get("KLINEAGE_UPDATE_DOCS") == "1":
        (ROOT / "docs").mkdir(exist_ok=True)
        shutil.copyfile(screenshot, ROOT / "docs" / "graphiql-offline.png")
