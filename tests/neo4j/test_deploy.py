"""deploy/neo4j/start and stop for real: a fresh server on free ports in a temporary folder, started,
found already running, refused a taken port, connected to with the initial password, and stopped."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
from pathlib import Path

import pytest

from klineage.kb.neo4j_store import Neo4jStore

ROOT = Path(__file__).resolve().parents[2]
START, STOP = ROOT / "deploy" / "neo4j" / "start", ROOT / "deploy" / "neo4j" / "stop"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _run(script: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(script)], env={**os.environ, **env}, capture_output=True, text=True, timeout=900,
                          check=False)


@pytest.mark.real("neo4j")
@pytest.mark.slow
def test_start_is_idempotent_sets_the_password_and_stop_stops(tmp_path: Path) -> None:
    if shutil.which("java") is None or shutil.which("mvn") is None:
        pytest.skip("java and mvn are needed to run deploy/neo4j/start")
    bolt, http = _free_port(), _free_port()
    env = {"NEO4J_LOCAL_DIR": str(tmp_path / "server"), "NEO4J_BOLT_PORT": str(bolt), "NEO4J_HTTP_PORT": str(http),
           "NEO4J_PASSWORD": "deploy-test-pw", "NEO4J_HEAP": "512m"}
    first = _run(START, env)
    try:
        assert first.returncode == 0, first.stdout + first.stderr
        assert "started (pid" in first.stdout and f"bolt://127.0.0.1:{bolt}" in first.stdout
        conf = (tmp_path / "server" / "conf" / "neo4j.conf").read_text(encoding="utf-8")
        assert f"server.bolt.listen_address=127.0.0.1:{bolt}" in conf
        assert "server.default_listen_address=127.0.0.1" in conf and "dbms.security.auth_enabled=true" in conf
        pid = int((tmp_path / "server" / "run" / "neo4j.pid").read_text())
        again = _run(START, env)
        assert again.returncode == 0 and f"already running (pid {pid})" in again.stdout
        store = Neo4jStore(f"bolt://127.0.0.1:{bolt}", "neo4j", "deploy-test-pw", ensure_schema=False)
        assert store.server_version[:2] == (5, 26)
        store.close()
        other = _run(START, {**env, "NEO4J_LOCAL_DIR": str(tmp_path / "other")})
        assert other.returncode == 1 and f"port {bolt} on 127.0.0.1 is already taken" in other.stderr
    finally:
        stopped = _run(STOP, env)
    assert stopped.returncode == 0 and "stopped" in stopped.stdout
    assert not (tmp_path / "server" / "run" / "neo4j.pid").exists()
    assert "not running" in _run(STOP, env).stdout
