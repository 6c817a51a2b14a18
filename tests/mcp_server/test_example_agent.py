"""examples/agent_over_mcp.py end to end on CPU: a `klineage validator serve --cpu` subprocess, the MCP
server over stdio, a held-out naive kernel; every validation and record goes through MCP tools."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from klineage.kb.embedded_store import EmbeddedStore
from klineage.kb.service import KnowledgeBase

from .conftest import ROOT, free_port, server_env

pytestmark = [pytest.mark.real("embedder"), pytest.mark.slow]


def test_example_agent_optimizes_a_heldout_kernel(kb_dir: Path, tmp_path: Path) -> None:
    import socket
    import time

    port = free_port()
    validator = subprocess.Popen([sys.executable, "-m", "klineage.cli.main", "validator", "serve", "--cpu", "--port",
                                  str(port)], cwd=ROOT, env=server_env(None), stdout=subprocess.DEVNULL,
                                 stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", port)) == 0:
                    break
            time.sleep(0.2)
        out = tmp_path / "best.py"
        proc = subprocess.run([sys.executable, "examples/agent_over_mcp.py", "heldout/masked_softmax/naive.py",
                               "--workload", "masked_softmax", "--validator-url", f"http://127.0.0.1:{port}",
                               "--budget", "1", "--output", str(out)],
                              cwd=ROOT, env=server_env(kb_dir), capture_output=True, text=True, timeout=480)
    finally:
        validator.terminate()
        validator.wait(20)
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads(proc.stdout[proc.stdout.index("{\n"):])
    assert report["verdict"] == "pass" and report["trajectory"], report
    assert report["trajectory"][0]["verdict"] in ("pass", "fail")
    kb = KnowledgeBase(EmbeddedStore(kb_dir))
    recorded = [s for s in kb.skills(first=100).items if s.applied]
    assert recorded, "the example recorded its attempts through record_application"
    if report["trajectory"][0]["verdict"] == "pass":  # under the interpreter: a pass with nothing timed
        assert all(s.verified == 0 for s in recorded), "an untimed pass counted as a trial of profit"
    assert out.read_text().strip()
