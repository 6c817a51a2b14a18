"""Find or start the Neo4j the tests run against; reusable from any conftest.

* ``NEO4J_URI`` set: that server (with ``NEO4J_USER``, ``NEO4J_PASSWORD``, ``NEO4J_DATABASE``; its
  Browser at ``NEO4J_BROWSER_URL`` or host:``NEO4J_HTTP_PORT``). The tests EMPTY that database.
* otherwise: a test server of ``deploy/neo4j/start`` (Maven Central jars, no Docker) with its own data
  folder (``deploy/neo4j/cache/test-server``) on Bolt ``NEO4J_TEST_BOLT_PORT`` (17687) and HTTP
  ``NEO4J_TEST_HTTP_PORT`` (17474), so that tests never empty the server of ``make neo4j``. It is
  started once when nothing answers there and stopped when the test session ends
  (``stop_started_servers``; ``KLINEAGE_KEEP_NEO4J=1`` leaves it running for the next session).

Load it from another conftest by path, without putting ``tests/neo4j`` on ``sys.path`` (a folder
named ``neo4j`` there must never shadow the driver)::

    import importlib.util, pathlib, sys
    name = "klineage_local_neo4j"  # one shared module: the session's server state lives in it
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(
            name, pathlib.Path(__file__).parents[1] / "neo4j" / "local_neo4j.py")
        sys.modules[name] = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(sys.modules[name])
    local_neo4j = sys.modules[name]

and call ``local_neo4j.neo4j_connection()`` (raises ``Neo4jUnavailable`` with the reason: skip with
it) and ``local_neo4j.open_store(conn, clear=True)``.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

REPO_ROOT = Path(__file__).resolve().parents[2]
START = REPO_ROOT / "deploy" / "neo4j" / "start"
STOP = REPO_ROOT / "deploy" / "neo4j" / "stop"
DEFAULT_PASSWORD = "klineage-test"
START_TIMEOUT_S = 900  # the first start downloads ~140 MB of jars from Maven Central
# The tests EMPTY the database they use, so without NEO4J_URI they run on their own server (own ports,
# own data folder), never on the one `make neo4j` starts for your knowledge base.
TEST_BOLT_PORT, TEST_HTTP_PORT = 17687, 17474
TEST_SERVER_DIR = REPO_ROOT / "deploy" / "neo4j" / "cache" / "test-server"

_lock = threading.Lock()
_state: dict[str, Any] = {}  # "conn": Neo4jConnection, "error": str, "started": bool


class Neo4jUnavailable(RuntimeError):
    """No Neo4j could be found or started; the message says why (use it as the skip reason)."""


@dataclass(frozen=True)
class Neo4jConnection:
    """Where the test Neo4j is and how to log in."""

    uri: str
    user: str
    password: str
    database: str
    started_here: bool = False
    browser_url: str = "http://127.0.0.1:7474/browser/"

    def env(self) -> dict[str, str]:
        """The environment variables that point ``KLINEAGE_STORE=neo4j`` at this server."""
        return {"KLINEAGE_STORE": "neo4j", "NEO4J_URI": self.uri, "NEO4J_USER": self.user,
                "NEO4J_PASSWORD": self.password, "NEO4J_DATABASE": self.database}


def _port_open(port: int, host: str = "127.0.0.1") -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.settimeout(1.0)
        return sock.connect_ex((host, port)) == 0


def _check(conn: Neo4jConnection) -> None:
    """Raise Neo4jUnavailable unless a Neo4jStore can open on ``conn``."""
    from klineage.kb.neo4j_store import Neo4jStore
    from klineage.kb.store import StoreError

    try:
        Neo4jStore(conn.uri, conn.user, conn.password, conn.database, ensure_schema=False).close()
    except StoreError as exc:
        raise Neo4jUnavailable(str(exc)) from exc


def neo4j_connection(start: bool = True) -> Neo4jConnection:
    """The test Neo4j (see the module docstring); starts the local one when needed and allowed."""
    with _lock:
        if "conn" in _state:
            return _state["conn"]
        if "error" in _state:
            raise Neo4jUnavailable(_state["error"])
        try:
            conn = _find_or_start(start)
        except Neo4jUnavailable as exc:
            _state["error"] = str(exc)
            raise
        _state["conn"] = conn
        return conn


def _find_or_start(start: bool) -> Neo4jConnection:
    user = os.environ.get("NEO4J_USER") or "neo4j"
    password = os.environ.get("NEO4J_PASSWORD") or DEFAULT_PASSWORD
    database = os.environ.get("NEO4J_DATABASE") or "neo4j"
    if os.environ.get("NEO4J_URI"):
        uri = os.environ["NEO4J_URI"]
        host = urlparse(uri).hostname or "127.0.0.1"
        browser = os.environ.get("NEO4J_BROWSER_URL") or \
            f"http://{host}:{os.environ.get('NEO4J_HTTP_PORT') or 7474}/browser/"
        conn = Neo4jConnection(uri, user, password, database, browser_url=browser)
        _check(conn)
        return conn
    bolt = int(os.environ.get("NEO4J_TEST_BOLT_PORT") or TEST_BOLT_PORT)
    http = int(os.environ.get("NEO4J_TEST_HTTP_PORT") or TEST_HTTP_PORT)
    conn = Neo4jConnection(f"bolt://127.0.0.1:{bolt}", user, password, database,
                           browser_url=f"http://127.0.0.1:{http}/browser/")
    if _port_open(bolt):
        _check(conn)
        return conn
    if not start:
        raise Neo4jUnavailable(f"no Neo4j answers on 127.0.0.1:{bolt} and NEO4J_URI is not set")
    for tool in ("java", "mvn"):
        if shutil.which(tool) is None:
            raise Neo4jUnavailable(f"NEO4J_URI is not set and `{tool}` is missing, so deploy/neo4j/start "
                                   "cannot run (install a JDK 17 and Maven)")
    env = {**os.environ, "NEO4J_PASSWORD": password, "NEO4J_BOLT_PORT": str(bolt), "NEO4J_HTTP_PORT": str(http),
           "NEO4J_LOCAL_DIR": str(TEST_SERVER_DIR)}
    try:
        proc = subprocess.run([str(START)], cwd=REPO_ROOT, env=env, capture_output=True, text=True,
                              timeout=START_TIMEOUT_S, check=False)
    except subprocess.TimeoutExpired as exc:
        raise Neo4jUnavailable(f"deploy/neo4j/start did not finish within {START_TIMEOUT_S}s") from exc
    sys.stderr.write(proc.stdout)
    if proc.returncode != 0:
        raise Neo4jUnavailable(f"deploy/neo4j/start failed (exit {proc.returncode}):\n"
                               f"{proc.stdout}{proc.stderr}")
    _state["started"] = True
    conn = Neo4jConnection(conn.uri, user, password, database, started_here=True, browser_url=conn.browser_url)
    _check(conn)
    return conn


def stop_started_servers() -> None:
    """Stop the test Neo4j if this process started it (leave one that was already running, and this
    one too when ``KLINEAGE_KEEP_NEO4J=1``: the next test session then starts faster)."""
    with _lock:
        if _state.pop("started", False) and os.environ.get("KLINEAGE_KEEP_NEO4J") != "1":
            subprocess.run([str(STOP)], cwd=REPO_ROOT, env={**os.environ, "NEO4J_LOCAL_DIR": str(TEST_SERVER_DIR)},
                           capture_output=True, text=True, timeout=120, check=False)


def open_store(conn: Neo4jConnection, clear: bool = False) -> Any:
    """A ``Neo4jStore`` on ``conn``; with ``clear``, the database is emptied first (a fresh graph)."""
    from klineage.kb.neo4j_store import Neo4jStore

    store = Neo4jStore(conn.uri, conn.user, conn.password, conn.database)
    if clear:
        store.clear()
    return store
