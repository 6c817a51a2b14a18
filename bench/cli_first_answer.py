"""The CLI's first-answer time: `klineage search` cold (a fresh process that loads the embedding model)
against `klineage search --server URL` (a fresh process that asks a running, warmed `klineage serve`).

Both are wall-clock times of a whole CLI process, from exec to exit, answering the same question
(text + context) on the same knowledge base (``lineages/`` ingested into a temporary folder, or
``--data-dir``). The server's own start-up (it loads the model before it listens) is timed apart and
is not in the ``--server`` figure. Prints the median and range of ``--runs`` runs of each.

    python bench/cli_first_answer.py [--runs 3] [--data-dir DIR]
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]
QUERY = ["search", "faster softmax", "-c", "rows=16384", "-c", "cols=8192", "-c", "dtype=bf16", "--json"]


def _cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "klineage.cli.main", *args]


def _timed(cmd: list[str], env: dict[str, str]) -> float:
    """Wall seconds of one CLI process; it must exit 0 and print a JSON list of hits."""
    started = time.perf_counter()
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600, cwd=ROOT)
    seconds = time.perf_counter() - started
    if done.returncode != 0 or not done.stdout.lstrip().startswith("["):
        raise SystemExit(f"{' '.join(cmd)} failed ({done.returncode}): {done.stderr[-2000:]}")
    return seconds


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _start_server(env: dict[str, str]) -> tuple[subprocess.Popen[bytes], str, float]:
    """`klineage serve` on a free port; returns the process, its URL and the seconds until /healthz answered."""
    port = _free_port()
    started = time.perf_counter()
    proc = subprocess.Popen(_cli("serve", "--port", str(port)), env=env, cwd=ROOT,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    while True:
        if proc.poll() is not None:
            raise SystemExit(f"klineage serve exited {proc.returncode}")
        try:
            if httpx.get(f"{url}/healthz", timeout=2).status_code == 200:
                return proc, url, time.perf_counter() - started
        except httpx.HTTPError:
            time.sleep(0.2)


def _summary(values: list[float]) -> str:
    return f"median {statistics.median(values):.2f} s (min {min(values):.2f}, max {max(values):.2f}, n={len(values)})"


def main() -> None:
    """Run the measurement and print both figures."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=3, help="CLI processes timed per mode")
    parser.add_argument("--data-dir", type=Path, help="an embedded store already built (default: ingest lineages/)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="klineage-first-answer-") as tmp:
        data_dir = args.data_dir or Path(tmp) / "kb"
        env = {**os.environ, "KLINEAGE_DATA_DIR": str(data_dir), "KLINEAGE_STORE": "embedded",
               "HF_HUB_OFFLINE": "1", "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT),
                                                                                os.environ.get("PYTHONPATH")]))}
        if args.data_dir is None:
            subprocess.run(_cli("ingest", "lineages/"), env=env, cwd=ROOT, check=True, capture_output=True)
        cold = [_timed(_cli(*QUERY), env) for _ in range(args.runs)]
        proc, url, startup = _start_server(env)
        try:
            warm = [_timed(_cli(*QUERY, "--server", url), env) for _ in range(args.runs)]
        finally:
            proc.terminate()
            proc.wait(timeout=30)
    print(f"klineage search, cold (loads the model):  {_summary(cold)}")
    print(f"klineage search --server (warm server):    {_summary(warm)}")
    print(f"klineage serve start-up until /healthz:    {startup:.2f} s (the model loads here, once)")
    print(f"cold / --server: {statistics.median(cold) / statistics.median(warm):.1f}x")


if __name__ == "__main__":
    main()
