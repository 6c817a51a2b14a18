"""Every command of the README runs as written.

Each ```bash (and ```python) block of README.md is preceded by a marker comment that says how it is tested:

* ``<!-- readme-test: run -->`` — run with bash (``set -euo pipefail``) in a sandbox folder that links the
  repository's folders (so files the commands write stay out of the checkout), with ``klineage`` and
  ``python`` on PATH meaning this checkout; must exit 0.
* ``<!-- readme-test: server -->`` — run against ``klineage serve`` started here on a free port (the block's
  ``:8000`` is rewritten to that port, nothing else); must exit 0, and a GraphQL answer must hold no errors.
* ``<!-- readme-test: skip: REASON -->`` — needs a GPU, Docker, several servers or minutes of gates on CPU;
  reported as skipped with its reason.

A bash or python block without a marker fails: every block must say how it is checked. The knowledge base
is built once (``klineage ingest lineages/``) and shared by every block.
"""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
_FENCE = re.compile(r"^```(\w*)\s*$")
_MARKER = re.compile(r"<!--\s*readme-test:\s*(run|server|skip)\s*(?::\s*(.*?))?\s*-->")
SERVER_PORT = "8000"


@dataclass(frozen=True)
class Block:
    """One fenced code block of the README: its language, first line number, text and marker."""

    lang: str
    line: int
    text: str
    mode: str | None
    reason: str


def readme_blocks(text: str) -> list[Block]:
    """The bash and python blocks of a README text, each with the marker comment just above it."""
    lines = text.splitlines()
    blocks: list[Block] = []
    i = 0
    while i < len(lines):
        fence = _FENCE.match(lines[i])
        if not fence:
            i += 1
            continue
        lang, start = fence.group(1), i
        j = i + 1
        while j < len(lines) and not lines[j].startswith("```"):
            j += 1
        if lang in ("bash", "sh", "python"):
            above = next((lines[k] for k in range(start - 1, -1, -1) if lines[k].strip()), "")
            marker = _MARKER.search(above)
            blocks.append(Block(lang, start + 1, "\n".join(lines[start + 1:j]) + "\n",
                                marker.group(1) if marker else None, (marker.group(2) or "") if marker else ""))
        i = j + 1
    return blocks


BLOCKS = readme_blocks(README.read_text(encoding="utf-8"))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass(frozen=True)
class Sandbox:
    """A folder that links the repository's top-level entries, with a PATH and an environment."""

    cwd: Path
    env: dict[str, str]


@pytest.fixture(scope="module")
def sandbox(tmp_path_factory: pytest.TempPathFactory) -> Sandbox:
    root = tmp_path_factory.mktemp("readme")
    cwd = root / "checkout"
    cwd.mkdir()
    for entry in ROOT.iterdir():
        if entry.name.startswith(".") or entry.name == "README.md":
            continue
        (cwd / entry.name).symlink_to(entry)
    bin_dir = root / "bin"
    bin_dir.mkdir()
    for name, line in (("klineage", f'exec "{sys.executable}" -m klineage.cli.main "$@"'),
                       ("python", f'exec "{sys.executable}" "$@"')):
        (bin_dir / name).write_text(f"#!/bin/sh\n{line}\n", encoding="utf-8")
        (bin_dir / name).chmod(0o755)
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}",
           "PYTHONPATH": str(ROOT), "KLINEAGE_DATA_DIR": str(root / "kb"), "KLINEAGE_STORE": "embedded",
           "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "COLUMNS": "160"}
    built = subprocess.run(["klineage", "ingest", "lineages/"], cwd=cwd, env=env, capture_output=True, text=True,
                           timeout=600)
    assert built.returncode == 0, built.stderr
    return Sandbox(cwd, env)


@pytest.fixture(scope="module")
def server(sandbox: Sandbox) -> Iterator[str]:
    port = str(_free_port())
    proc = subprocess.Popen(["klineage", "serve", "--port", port], cwd=sandbox.cwd, env=sandbox.env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 180
        while True:
            if proc.poll() is not None:
                pytest.fail(f"klineage serve exited {proc.returncode}: {proc.stderr.read() if proc.stderr else ''}")
            try:
                if httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                pytest.fail("klineage serve did not answer /healthz within 180 s")
            time.sleep(0.5)
        yield port
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()


def _run(block: Block, sandbox: Sandbox, text: str) -> subprocess.CompletedProcess[str]:
    if block.lang == "python":
        args = [sys.executable, "-c", text]
    else:
        args = ["bash", "-c", "set -euo pipefail\n" + text]
    return subprocess.run(args, cwd=sandbox.cwd, env=sandbox.env, capture_output=True, text=True, timeout=600)


def test_every_block_says_how_it_is_checked() -> None:
    unmarked = [f"README.md:{b.line} ({b.lang})" for b in BLOCKS if b.mode is None]
    assert not unmarked, ("blocks without a <!-- readme-test: run|server|skip: reason --> marker: "
                          + ", ".join(unmarked))
    assert all(b.reason for b in BLOCKS if b.mode == "skip"), "a skipped block must say why"


@pytest.mark.slow
@pytest.mark.parametrize("block", BLOCKS, ids=[f"line{b.line}" for b in BLOCKS])
def test_readme_block_runs_as_written(block: Block, request: pytest.FixtureRequest) -> None:
    if block.mode is None:
        pytest.fail(f"README.md:{block.line}: no readme-test marker")
    if block.mode == "skip":
        pytest.skip(f"README.md:{block.line}: {block.reason}")
    sandbox: Sandbox = request.getfixturevalue("sandbox")
    text = block.text
    if block.mode == "server":
        port = request.getfixturevalue("server")
        text = text.replace(f":{SERVER_PORT}", f":{port}")
    result = _run(block, sandbox, text)
    assert result.returncode == 0, (f"README.md:{block.line} exited {result.returncode}\n--- stdout\n"
                                    f"{result.stdout[-3000:]}\n--- stderr\n{result.stderr[-3000:]}")
    if block.mode == "server" and "graphql" in text and result.stdout.lstrip().startswith("{"):
        answer = json.loads(result.stdout)
        assert not answer.get("errors") and answer.get("data"), result.stdout[:2000]
