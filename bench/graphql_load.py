"""GraphQL load: 50 concurrent clients for 30 s of searchSkills against `klineage serve` with one worker,
then with several (SO_REUSEPORT worker processes over one embedded store), and the servers' RSS before and after the
abuse probes of issue 18 (huge kernel source, slow kernel, chunked 10 MB body, fragment fan-out,
aliased kernel sources, malformed bodies, huge context integers). One run, figures printed.

    PYTHONPATH=. HF_HUB_OFFLINE=1 python bench/graphql_load.py [--seconds 30] [--clients 50] [--workers 2]

The store is built in a temporary folder from ``lineages/*.json`` (measured) or, when there are none,
the sample fixtures. Each server process warms its embedder and kernel-analysis forkserver at start-up;
the load starts once /healthz answers. The load generator speaks HTTP/1.1 keep-alive over raw asyncio
streams (one connection per client) to cost the 2 shared cores as little as possible. Torch runs one
thread per server process (OMP_NUM_THREADS=1) in both configurations.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
KERNELS = ROOT / "tests" / "fixtures" / "kernels"

TEXTS = ["faster matrix multiply", "make a softmax kernel faster", "speed up layernorm on large rows",
         "reduce memory traffic of attention", "better tiling for gemm", "fuse the epilogue into the matmul",
         "cross entropy over a large vocabulary", "persistent kernel for small problems",
         "software pipelining of loads", "avoid register spills", "use tensor cores in bf16",
         "online softmax in one pass"]
CONTEXTS = [{"M": 4096, "N": 4096, "K": 4096, "dtype": "bf16"}, {"M": 512, "N": 512, "K": 8192, "dtype": "fp16"},
            {"rows": 32768, "cols": 4096, "dtype": "bf16"}, {"rows": 4096, "cols": 50257, "dtype": "fp32"},
            {"B": 8, "H": 16, "S": 2048, "D": 128, "dtype": "bf16", "causal": True}, {"M": 8192, "N": 1024}]
SEARCH = ("query($t: String, $c: JSON, $k: String) { searchSkills(text: $t, context: $c, kernelSource: $k, "
          "limit: 5) { score applicable skill { id name operator } explanation { passed failed unknown } } }")


def request_mix(rng: random.Random) -> dict[str, Any]:
    """One searchSkills request: 35% text + context, 30% context only, 25% text only, 10% a kernel."""
    roll = rng.random()
    variables: dict[str, Any]
    if roll < 0.35:
        variables = {"t": rng.choice(TEXTS), "c": rng.choice(CONTEXTS)}
    elif roll < 0.65:
        variables = {"c": rng.choice(CONTEXTS)}
    elif roll < 0.90:
        variables = {"t": rng.choice(TEXTS)}
    else:
        variables = {"k": rng.choice(_kernels())}
    return {"query": SEARCH, "variables": variables}


_KERNEL_SOURCES: list[str] = []


def _kernels() -> list[str]:
    if not _KERNEL_SOURCES:
        _KERNEL_SOURCES.extend(p.read_text() for p in sorted(KERNELS.glob("naive_*.py"))[:4])
    return _KERNEL_SOURCES


# ------------------------------------------------------------------------------------------- HTTP


async def _read_response(reader: asyncio.StreamReader) -> tuple[int, bytes]:
    head = await reader.readuntil(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split()[1])
    length = 0
    chunked = False
    for line in lines[1:]:
        name, _, value = line.partition(":")
        if name.strip().lower() == "content-length":
            length = int(value.strip())
        elif name.strip().lower() == "transfer-encoding" and "chunked" in value.lower():
            chunked = True
    if not chunked:
        return status, await reader.readexactly(length)
    body = b""
    while True:
        size = int((await reader.readuntil(b"\r\n")).strip(), 16)
        chunk = await reader.readexactly(size + 2)
        if size == 0:
            return status, body
        body += chunk[:-2]


def _request(path: str, body: bytes, port: int, method: str = "POST", extra: str = "") -> bytes:
    head = (f"{method} {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\n{extra}\r\n")
    return head.encode("latin-1") + body


@dataclass
class LoadResult:
    latencies: list[float] = field(default_factory=list)
    errors: int = 0
    samples: list[str] = field(default_factory=list)
    seconds: float = 0.0

    def line(self, name: str) -> str:
        lat = sorted(self.latencies)
        p50 = statistics.median(lat) * 1000 if lat else float("nan")
        p99 = lat[min(len(lat) - 1, int(0.99 * len(lat)))] * 1000 if lat else float("nan")
        return (f"{name}: {len(lat)} requests in {self.seconds:.1f} s = {self.rate:.1f} req/s, p50 {p50:.0f} ms, "
                f"p99 {p99:.0f} ms, errors {self.errors}")

    @property
    def rate(self) -> float:
        return len(self.latencies) / self.seconds if self.seconds else 0.0

    @property
    def p99_ms(self) -> float:
        lat = sorted(self.latencies)
        return lat[min(len(lat) - 1, int(0.99 * len(lat)))] * 1000 if lat else float("inf")


async def load(port: int, clients: int, seconds: float, seed: int = 0) -> LoadResult:
    """``clients`` keep-alive connections sending searchSkills back to back for ``seconds``."""
    result = LoadResult()
    stop = time.monotonic() + seconds

    async def client(index: int) -> None:
        rng = random.Random(seed * 1000 + index)
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        try:
            while time.monotonic() < stop:
                body = json.dumps(request_mix(rng)).encode()
                started = time.perf_counter()
                try:
                    writer.write(_request("/graphql", body, port))
                    await writer.drain()
                    status, payload = await _read_response(reader)
                except (OSError, asyncio.IncompleteReadError) as exc:
                    result.errors += 1
                    result.samples.append(repr(exc))
                    writer.close()
                    reader, writer = await asyncio.open_connection("127.0.0.1", port)
                    continue
                elapsed = time.perf_counter() - started
                answer = json.loads(payload) if payload else {}
                if status != 200 or answer.get("errors") or not answer.get("data"):
                    result.errors += 1
                    if len(result.samples) < 5:
                        result.samples.append(f"{status} {payload[:200]!r}")
                else:
                    result.latencies.append(elapsed)
        finally:
            writer.close()

    started = time.monotonic()
    await asyncio.gather(*(client(i) for i in range(clients)))
    result.seconds = time.monotonic() - started
    return result


# ------------------------------------------------------------------------------------------- servers


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_server(data_dir: Path, workers: int) -> tuple[subprocess.Popen[bytes], int]:
    """``klineage.cli.kb_commands:serve_app`` under uvicorn, in ``workers`` SO_REUSEPORT processes when more
    than one (``klineage.cli.reuseport``); returns once healthy."""
    port = free_port()
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1",
           "KLINEAGE_STORE": "embedded", "KLINEAGE_DATA_DIR": str(data_dir)}
    if workers > 1:  # what `klineage serve --workers N` runs (without access logs)
        command = [sys.executable, "-m", "klineage.cli.reuseport", "klineage.cli.kb_commands:serve_app",
                   "--host", "127.0.0.1", "--port", str(port), "--log-level", "warning", "--no-access-log",
                   "--workers", str(workers)]
    else:
        command = [sys.executable, "-m", "uvicorn", "klineage.cli.kb_commands:serve_app", "--factory",
                   "--host", "127.0.0.1", "--port", str(port), "--log-level", "warning", "--no-access-log"]
    proc = subprocess.Popen(command, env=env, cwd=ROOT)
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"the server exited with {proc.returncode}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1) as s:
                s.sendall(_request("/healthz", b"", port, method="GET"))
                if s.recv(64).startswith(b"HTTP/1.1 200"):
                    break
        except OSError:
            pass
        time.sleep(0.5)
    else:
        proc.kill()
        raise RuntimeError("the server did not become healthy in 180 s")
    time.sleep(3 * workers)  # every worker runs its start-up (embedder, forkserver) before accepting
    return proc, port


def _descendants(pid: int) -> list[int]:
    out = [pid]
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            children = Path(f"/proc/{pid}/task/{tid}/children").read_text().split()
        except OSError:
            continue
        for child in children:
            out.extend(_descendants(int(child)))
    return out


def rss_mib(pid: int) -> float:
    """Resident memory of ``pid`` and all its descendants (workers, forkservers), in MiB."""
    total = 0
    for p in _descendants(pid):
        try:
            for line in Path(f"/proc/{p}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1])
        except OSError:
            continue
    return total / 1024


def stop_server(proc: subprocess.Popen[bytes]) -> None:
    proc.terminate()
    try:
        proc.wait(20)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


# ------------------------------------------------------------------------------------------- abuse


def _fan_out(levels: int) -> str:
    frags = ["fragment F0 on Workload { name }"] + [
        f"fragment F{i} on Workload {{ ...F{i - 1} ...F{i - 1} }}" for i in range(1, levels + 1)]
    return f"{{ workloads {{ ...F{levels} }} }} " + " ".join(frags)


def abuse_probes(port: int) -> list[tuple[str, int, float, int, str]]:
    """Send each probe once; (name, status, seconds, response bytes) per probe (status 0: connection error)."""
    import httpx

    search_kernel = "query($k: String) { searchSkills(kernelSource: $k, limit: 3) { score } }"
    big_kernel = "x = 1\n" * 250_000
    slow_kernel = (KERNELS / "naive_gemm.py").read_text()
    slow_kernel = slow_kernel * (99_000 // len(slow_kernel))
    ten_mb = json.dumps({"query": "{ workloads { name } }", "variables": {"pad": "x" * 10_000_000}}).encode()
    probes: list[tuple[str, dict[str, Any]]] = [
        ("1.5 MB kernelSource", {"json": {"query": search_kernel, "variables": {"k": big_kernel}}}),
        ("99 KB slow kernelSource", {"json": {"query": search_kernel, "variables": {"k": slow_kernel}}}),
        ("chunked 10 MB body", {"content": (ten_mb[i:i + 65536] for i in range(0, len(ten_mb), 65536))}),
        ("fragment fan-out 2^20", {"json": {"query": _fan_out(20)}}),
        ("15 aliased lineages{kernels{source}}", {"json": {"query": "{ " + " ".join(
            f"a{i}: lineages {{ kernels {{ source }} }}" for i in range(15)) + " }"}}),
        ("body null", {"content": b"null"}),
        ("body \"str\"", {"content": b'"str"'}),
        ("body 12", {"content": b"12"}),
        ("non-UTF-8 body", {"content": b'{"query": "\xff\xfe"}'}),
        ("5000-digit integer", {"content": b'{"query": "{ workloads { name } }", "variables": {"x": '
                                + b"1" * 5000 + b"}}"}),
        ("JSON nested 3000 deep", {"content": b'{"query": "{ workloads { name } }", "variables": {"x": '
                                   + b"[" * 3000 + b"]" * 3000 + b"}}"}),
        ("huge context integers", {"content": json.dumps({"query": "query($c: JSON) { searchSkills(context: $c) "
                                                                   "{ score } }",
                                                          "variables": {"c": {"M": 10**400, "N": 1}}}).encode()}),
        ("non-ASCII bearer token", {"json": {"query": "{ workloads { name } }"},
                                    "headers": {"Authorization": "Bearer ключ".encode()}}),
    ]
    out = []
    with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=60) as client:
        for name, kwargs in probes:
            headers = {"content-type": "application/json", **kwargs.pop("headers", {})}
            started = time.monotonic()
            try:
                response = client.post("/graphql", headers=headers, **kwargs)
            except httpx.HTTPError as exc:  # e.g. the server closed a refused upload mid-stream
                out.append((name, 0, time.monotonic() - started, 0, type(exc).__name__))
                continue
            try:
                message = str((response.json().get("errors") or [{}])[0].get("message", ""))
            except ValueError:
                message = response.text
            out.append((name, response.status_code, time.monotonic() - started, len(response.content),
                        message[:90].replace("\n", " ")))
    return out


def build_store(data_dir: Path) -> str:
    """Ingest the measured lineages (or the sample fixtures) into ``data_dir``; says which."""
    from klineage.ingest.pipeline import ingest_lineages
    from klineage.kb.embedded_store import EmbeddedStore
    from klineage.kb.service import KnowledgeBase
    from klineage.schema.lineage_document import load_lineage_document

    paths = sorted((ROOT / "lineages").glob("*.json")) or sorted((ROOT / "tests/fixtures/lineages").glob("*.json"))
    kb = KnowledgeBase(EmbeddedStore(data_dir))
    ingest_lineages(kb, [load_lineage_document(p) for p in paths])
    return f"{len(paths)} lineage documents, {kb.store.counts()['Skill']} skills"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=30.0, help="length of each load run, in seconds")
    parser.add_argument("--clients", type=int, default=50,
                        help="concurrent keep-alive clients sending searchSkills back to back")
    parser.add_argument("--workers", type=int, default=2,
                        help="server worker processes of the second run (the first has one); the abuse probes "
                             "and RSS figures are taken on it")
    args = parser.parse_args()
    data_dir = Path(tempfile.mkdtemp(prefix="klineage-load-")) / "kb"
    print(f"store: {build_store(data_dir)} in {data_dir}; {os.cpu_count()} CPUs", flush=True)

    results = {}
    for workers in (1, args.workers):
        proc, port = start_server(data_dir, workers)
        try:
            asyncio.run(load(port, 8, 5.0, seed=99))  # warm-up: every worker has analysed the few kernels once
            result = asyncio.run(load(port, args.clients, args.seconds))
            results[workers] = result
            print(result.line(f"{workers} worker(s), {args.clients} clients"), flush=True)
            for sample in result.samples[:3]:
                print(f"  error sample: {sample}")
            if workers == args.workers:
                before = rss_mib(proc.pid)
                probes = abuse_probes(port)
                after = rss_mib(proc.pid)
                print("abuse probes (status, seconds, response bytes, message):")
                for name, status, seconds, size, message in probes:
                    print(f"  {name:37s} {status}  {seconds:6.2f} s  {size:4d} B  {message}")
                health = time.monotonic()
                import httpx

                ok = httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=10).status_code
                print(f"healthz after probes: {ok} in {(time.monotonic() - health) * 1000:.0f} ms")
                print(f"server RSS (all processes): {before:.0f} MiB before the probes, {after:.0f} MiB after")
        finally:
            stop_server(proc)
    single, multi = results[1], results[args.workers]
    ratio = multi.rate / single.rate if single.rate else float("nan")
    print(f"throughput {args.workers} workers / 1 worker: {ratio:.2f}x (target >= 1.7x); "
          f"p99 {multi.p99_ms:.0f} ms (target <= 500 ms); errors {multi.errors} (target 0)")


if __name__ == "__main__":
    main()
