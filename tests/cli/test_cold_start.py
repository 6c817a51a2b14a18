"""Cold starts: `klineage serve` loads the embedding model before it listens (its first request does not pay
for it), and loading the model prints no progress bar."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

# In a fresh process (nothing loaded yet): run `klineage serve` with uvicorn.run replaced by a probe that
# reports whether the model and the skill catalog were loaded by the time the server would listen.
PROBE = """
import json, sys
import uvicorn
import klineage.graphql.app as graphql_app
from typer.testing import CliRunner
from klineage.cli.main import app

seen = {}
real_create_app = graphql_app.create_app

def create_app(kb, recorder=None):
    seen["kb"] = kb
    return real_create_app(kb, recorder=recorder)

def run(asgi, host, port, log_level):
    kb = seen["kb"]
    seen["at_listen"] = {"model_loaded": kb.embedder.loaded, "catalog_loaded": kb._catalog is not None}

graphql_app.create_app = create_app
uvicorn.run = run
result = CliRunner().invoke(app, ["serve", "--port", "8999"])
print(json.dumps({"exit": result.exit_code, **seen["at_listen"]}))
"""


@pytest.mark.real("embedder")
def test_serve_loads_the_model_before_it_listens_and_prints_no_progress_bar(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "KLINEAGE_DATA_DIR": str(tmp_path / "kb"),
           "KLINEAGE_STORE": "embedded", "HF_HUB_OFFLINE": "1"}
    env.pop("HF_HUB_DISABLE_PROGRESS_BARS", None)
    env.pop("TQDM_DISABLE", None)
    result = subprocess.run([sys.executable, "-c", PROBE], env=env, capture_output=True, text=True, timeout=300,
                            cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    probe = json.loads(result.stdout.strip().splitlines()[-1])
    assert probe == {"exit": 0, "model_loaded": True, "catalog_loaded": True}
    assert "Loading weights" not in result.stderr and "it/s]" not in result.stderr, result.stderr
