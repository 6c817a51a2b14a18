"""Headless Chromium for end-to-end tests: Debian's ``chromium`` driven by ``playwright-core`` (npm,
installed once into the git-ignored deploy/neo4j/cache/node; nothing downloads a browser). Each helper
skips the test with the reason when its component is missing (``KLINEAGE_REQUIRE_REAL=1`` turns
that into a failure for tests marked ``real("chromium")``)."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
NODE_DIR = ROOT / "deploy" / "neo4j" / "cache" / "node"  # git-ignored
PLAYWRIGHT_VERSION = "1.65.1"


def chromium() -> str:
    """The Chromium executable (``CHROMIUM``, else ``chromium`` / ``chromium-browser`` on PATH)."""
    found = os.environ.get("CHROMIUM") or shutil.which("chromium") or shutil.which("chromium-browser")
    if not found:
        pytest.skip("Chromium is not installed (Debian: apt-get install -y chromium)")
    return found


def playwright_core() -> Path:
    """The ``playwright-core`` module folder, installed with npm on first use."""
    module = NODE_DIR / "node_modules" / "playwright-core"
    if (module / "package.json").is_file():
        return module
    if shutil.which("node") is None or shutil.which("npm") is None:
        pytest.skip("node and npm are needed to drive Chromium (Debian: apt-get install -y nodejs npm)")
    NODE_DIR.mkdir(parents=True, exist_ok=True)
    proc = subprocess.run(["npm", "install", "--no-audit", "--no-fund", "--silent", "--prefix", str(NODE_DIR),
                           f"playwright-core@{PLAYWRIGHT_VERSION}"], capture_output=True, text=True, timeout=600,
                          check=False)
    if proc.returncode != 0 or not (module / "package.json").is_file():
        pytest.skip(f"npm could not install playwright-core: {proc.stderr[-2000:]}")
    return module
