"""The embedded store's own promises: durable atomic files, several processes, killed writers."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

from klineage.kb.embedded_store import FORMAT_VERSION, STATE_FILE, TEMP_PREFIX, EmbeddedStore
from klineage.kb.store import StoreError
from klineage.schema.graph import GraphBatch, Node, Relationship
from klineage.schema.lineage_document import lineage_to_batch

from .conftest import GEMM_FIXTURE, SOFTMAX_FIXTURE, load_doc

ROOT = Path(__file__).resolve().parents[2]


def test_state_survives_reopening(tmp_path: Path) -> None:
    first = EmbeddedStore(tmp_path)
    first.upsert(lineage_to_batch(load_doc(GEMM_FIXTURE)))
    exported = first.export()
    first.close()
    again = EmbeddedStore(tmp_path)
    assert again.export() == exported
    assert again.counts() == EmbeddedStore(tmp_path).counts()


def test_the_file_has_a_versioned_header_and_compact_vectors(tmp_path: Path) -> None:
    store = EmbeddedStore(tmp_path)
    vector = [float(i) / 7 for i in range(384)]  # not float32-exact: stored as $f64
    f32 = [float(i) / 8 for i in range(384)]  # float32-exact: stored as $f32
    store.upsert(GraphBatch.of([Node("Skill", "skill:a", {"embedding": f32, "other": vector, "short": [0.5] * 3})]))
    lines = (tmp_path / STATE_FILE).read_text().splitlines()
    header = json.loads(lines[0])
    assert header["format"] == "klineage.embedded-store" and header["version"] == FORMAT_VERSION
    assert header["nodes"] == 1 and header["relationships"] == 0 and header["generation"] == 1
    props = json.loads(lines[1])[3]
    assert set(props["embedding"]) == {"$f32"} and set(props["other"]) == {"$f64"} and props["short"] == [0.5] * 3
    node = EmbeddedStore(tmp_path).get("Skill", "skill:a")
    assert node is not None and node.props["embedding"] == f32 and node.props["other"] == vector


def test_a_batch_that_changes_nothing_writes_nothing(tmp_path: Path) -> None:
    store = EmbeddedStore(tmp_path)
    batch = lineage_to_batch(load_doc(SOFTMAX_FIXTURE))
    store.upsert(batch)
    before = (tmp_path / STATE_FILE).stat()
    token = store.state_token
    store.upsert(batch)
    after = (tmp_path / STATE_FILE).stat()
    assert (before.st_ino, before.st_mtime_ns) == (after.st_ino, after.st_mtime_ns)
    assert store.state_token == token


def test_another_instance_sees_new_writes(tmp_path: Path) -> None:
    reader, writer = EmbeddedStore(tmp_path), EmbeddedStore(tmp_path)
    assert reader.get("Condition", "condition:1") is None
    token = reader.state_token
    writer.upsert(GraphBatch.of([Node("Condition", "condition:1", {"expr": "K > 1"})]))
    assert reader.get("Condition", "condition:1") is not None
    assert reader.state_token != token


def test_two_instances_in_threads_do_not_lose_batches(tmp_path: Path) -> None:
    stores = [EmbeddedStore(tmp_path), EmbeddedStore(tmp_path)]

    def write(k: int) -> None:
        for i in range(20):
            stores[k].upsert(GraphBatch.of([Node("Risk", f"risk:{k}-{i}", {"kind": "x", "description": str(i)})]))

    threads = [threading.Thread(target=write, args=(k,)) for k in (0, 1)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert EmbeddedStore(tmp_path).counts()["Risk"] == 40


WRITER = textwrap.dedent("""
    import random, sys
    from klineage.kb.embedded_store import EmbeddedStore
    from klineage.schema.graph import GraphBatch, Node, Relationship

    data_dir, tag = sys.argv[1], sys.argv[2]
    start, count, per_batch = (int(x) for x in sys.argv[3:6])
    store = EmbeddedStore(data_dir)
    rng = random.Random(start)
    print("ready", flush=True)
    for i in range(start, start + count):
        skills = [Node("Skill", f"skill:{tag}-{i}-{j}", {"tag": tag, "batch": i, "j": j,
                                                        "embedding": [rng.random() for _ in range(384)]})
                  for j in range(per_batch)]
        cond = Node("Condition", f"condition:{tag}-{i}", {"tag": tag, "batch": i, "expr": "K > 1", "kind": "valid"})
        rels = [Relationship("VALID_WHEN", s.id, cond.id) for s in skills]
        store.upsert(GraphBatch.of([*skills, cond], rels))
        print(f"done {i}", flush=True)
""")


def run_writer(tmp_path: Path, tag: str, start: int, count: int, per_batch: int) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.Popen([sys.executable, "-c", WRITER, str(tmp_path), tag, str(start), str(count), str(per_batch)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)


def batches_in(store: EmbeddedStore, tag: str, per_batch: int) -> set[int]:
    """The batch numbers of ``tag`` in the store, after checking that every one is complete."""
    skills = [n for n in store.find("Skill", where={"tag": tag})]
    by_batch: dict[int, list[Node]] = {}
    for node in skills:
        by_batch.setdefault(node.props["batch"], []).append(node)
    conds = {n.props["batch"]: n for n in store.find("Condition", where={"tag": tag})}
    assert set(conds) == set(by_batch), "a batch's condition and skills were written together"
    links = store.neighbors([c.id for c in conds.values()], "VALID_WHEN", "in")
    for batch, nodes in by_batch.items():
        assert sorted(n.props["j"] for n in nodes) == list(range(per_batch)), f"batch {batch} is torn"
        assert all(len(n.props["embedding"]) == 384 for n in nodes)
        assert len(links[conds[batch].id]) == per_batch, f"batch {batch} lost relationships"
    return set(by_batch)


def test_two_processes_writing_at_once_both_land(tmp_path: Path) -> None:
    procs = [run_writer(tmp_path, tag, 0, 12, 20) for tag in ("a", "b")]
    for p in procs:
        _, err = p.communicate(timeout=240)
        assert p.returncode == 0, err
    store = EmbeddedStore(tmp_path)
    assert batches_in(store, "a", 20) == set(range(12))
    assert batches_in(store, "b", 20) == set(range(12))


@pytest.mark.slow
def test_a_writer_killed_at_random_moments_leaves_a_complete_earlier_state(tmp_path: Path) -> None:
    """SIGKILL a process that writes big batches in a loop, at random moments, many times: every time
    the store opens, holds only complete batches, holds every batch the writer had acknowledged,
    and at least one kill must have landed in the middle of a write (a temporary file left behind)."""
    rng = random.Random(20261203)
    per_batch = 120
    next_batch = 0
    mid_write_kills = 0
    acknowledged: set[int] = set()
    for trial in range(40):
        proc = run_writer(tmp_path, "k", next_batch, 1000, per_batch)
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == "ready", proc.stderr.read() if proc.stderr else ""
        time.sleep(rng.uniform(0.05, 1.2))
        proc.send_signal(signal.SIGKILL)
        out, _ = proc.communicate(timeout=60)
        assert proc.returncode == -signal.SIGKILL
        acknowledged |= {int(line.split()[1]) for line in out.splitlines() if line.startswith("done ")}
        if list(tmp_path.glob(TEMP_PREFIX + "*")):
            mid_write_kills += 1
        present = batches_in(EmbeddedStore(tmp_path), "k", per_batch)
        assert acknowledged <= present, "a batch the writer saw committed was lost"
        assert present == set(range(len(present))), f"batches are not a prefix: {sorted(present)}"
        next_batch = len(present)
        if mid_write_kills >= 2 and trial >= 5:
            break
    print(f"kill test: {trial + 1} kills, {mid_write_kills} during a write, {next_batch} batches")
    assert mid_write_kills >= 1, "no kill landed during a write; the test proved nothing"
    store = EmbeddedStore(tmp_path)
    store.upsert(GraphBatch.of([Node("Risk", "risk:after", {"kind": "x", "description": "y"})]))
    assert not list(tmp_path.glob(TEMP_PREFIX + "*")), "the next writer cleans up temporary files"
    assert store.counts()["Skill"] == next_batch * per_batch


def test_a_file_from_a_newer_version_is_refused(tmp_path: Path) -> None:
    (tmp_path / STATE_FILE).write_text(json.dumps({"format": "klineage.embedded-store", "version": 99,
                                                   "generation": 1, "nodes": 0, "relationships": 0}) + "\n")
    with pytest.raises(StoreError, match="newer"):
        EmbeddedStore(tmp_path)


@pytest.mark.parametrize(
    ("content", "needle"),
    [
        ("hello\n", "not JSON"),
        ('{"format": "something else"}\n', "not a KLineage embedded store"),
        ('{"format": "klineage.embedded-store", "version": 1, "generation": 3, "nodes": 2, "relationships": 0}\n'
         '["N", "Risk", "risk:1", {}]\n', "truncated or corrupt"),
        ('{"format": "klineage.embedded-store", "version": 1, "generation": 3, "nodes": 1, "relationships": 0}\n'
         '["X"]\n', "line 2"),
    ],
)
def test_a_damaged_file_is_a_clear_error(tmp_path: Path, content: str, needle: str) -> None:
    (tmp_path / STATE_FILE).write_text(content)
    with pytest.raises(StoreError, match=needle):
        EmbeddedStore(tmp_path)


def test_a_closed_store_refuses_work(tmp_path: Path) -> None:
    store = EmbeddedStore(tmp_path)
    store.close()
    with pytest.raises(StoreError, match="closed"):
        store.counts()
    with pytest.raises(StoreError, match="closed"):
        store.upsert(GraphBatch.of([Node("Risk", "risk:1", {})]))


def test_bad_values_and_arguments_are_refused(tmp_path: Path) -> None:
    store = EmbeddedStore(tmp_path)
    with pytest.raises(StoreError, match="non-finite"):
        store.upsert(GraphBatch.of([Node("Risk", "risk:1", {"x": float("nan")})]))
    with pytest.raises(StoreError, match="not a storable value"):
        store.upsert(GraphBatch.of([Node("Risk", "risk:1", {"x": object()})]))
    with pytest.raises(StoreError, match="not a string"):
        store.upsert(GraphBatch.of([Node("Risk", "risk:1", {"x": {1: 2}})]))
    with pytest.raises(StoreError, match="GraphBatch"):
        store.upsert([Node("Risk", "risk:1", {})])  # type: ignore[arg-type]
    with pytest.raises(StoreError, match="unknown label"):
        store.find("Nope")
    with pytest.raises(StoreError, match="direction"):
        store.neighbors(["x"], "RISKS", "sideways")
    with pytest.raises(StoreError, match="zero"):
        store.vector_top_k("Skill", "embedding", [0.0] * 384, 3)
    assert store.counts()["Risk"] == 0
    assert not (tmp_path / STATE_FILE).exists()
    store.upsert(GraphBatch.of([Node("Skill", "skill:a", {}), Node("Condition", "condition:a", {})],
                               [Relationship("VALID_WHEN", "skill:a", "condition:a")]))
    assert store.vector_top_k("Skill", "embedding", [1.0] * 384, 3) == []
