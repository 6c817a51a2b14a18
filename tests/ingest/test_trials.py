"""Trials (agents' verified applications on held-out kernels, ``trials/*.jsonl``) recorded into a knowledge
base: every committed trial is readable and verified; recording is idempotent; the skills' counts follow;
a malformed file is refused with the file, the line and what was expected."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from klineage.ingest.trials import TrialError, find_trial_files, load_trials, record_trials
from klineage.kb.embedded_store import EmbeddedStore
from klineage.kb.service import KnowledgeBase
from klineage.schema.graph import GraphBatch
from klineage.schema.ids import kernel_sha
from klineage.schema.records import Anchor, Effect, Skill, skill_id

ROOT = Path(__file__).resolve().parents[2]
VEC = tuple([1.0] + [0.0] * 383)


def _kb(tmp_path: Path, operators: list[str]) -> KnowledgeBase:
    store = EmbeddedStore(tmp_path / "kb")
    store.upsert(GraphBatch.of([Skill(op, op, "i", Anchor("", ""), "c", {"operator": op}, effect=Effect.of([1.0]),
                                      support_steps=1, support_lineages=1, embedding=VEC).to_node()
                                for op in operators]))
    return KnowledgeBase(store, embedder=None)


def test_every_committed_trial_is_a_verified_application_of_its_own_kernel() -> None:
    files = find_trial_files(ROOT)
    assert files, "no committed trial file under trials/"
    for path in files:
        trials = load_trials(path)
        assert trials, path
        for t in trials:
            assert t.gate_result.kernel_sha == kernel_sha(t.kernel_source), (path, t.operator, t.recorded_at)
            assert t.gate_result.gpu.startswith("NVIDIA"), t.gate_result.gpu  # measured on a GPU, not the CPU
            assert t.gate_result.verdict in ("pass", "fail")


def test_recording_trials_counts_them_and_twice_changes_nothing(tmp_path: Path) -> None:
    path = find_trial_files(ROOT)[0]
    trials = load_trials(path)
    operators = sorted({t.operator for t in trials})
    kb = _kb(tmp_path, operators[:-1])  # one operator's skill is missing: its trials are skipped
    recorded = record_trials(kb, trials)
    assert recorded == sum(1 for t in trials if t.operator != operators[-1])
    counts = {op: kb.skill(skill_id(op)) for op in operators[:-1]}
    for op, skill in counts.items():
        mine = [t for t in trials if t.operator == op]
        timed = [t for t in mine if t.gate_result.verdict != "pass" or t.speedup is not None]  # trials of profit
        assert skill is not None and skill.applied == len(mine) and skill.verified == len(timed), op
        assert skill.paid == sum(1 for t in mine if t.gate_result.verdict == "pass" and (t.speedup or 0) >= 1.03)
    before = kb.store.counts()
    assert record_trials(kb, trials) == recorded
    assert kb.store.counts() == before  # the same trials again: the same applications, nothing new
    assert {op: kb.skill(skill_id(op)) for op in operators[:-1]} == counts


@pytest.mark.parametrize(("line", "message"), [
    ("not json", ":1: not JSON"),
    ("[1, 2]", ":1: expected a JSON object"),
    ('{"operator": "autotune"}', ":1: missing kernel_source, outcome, gate_result, recorded_at"),
    ('{"operator": "a", "kernel_source": "x", "outcome": "pass", "gate_result": {"gates": []}, '
     '"recorded_at": "2026-12-05", "speedup": -1}', "speedup -1: expected a positive number"),
    ('{"operator": "a", "kernel_source": "x", "outcome": "pass", "gate_result": {"gates": []}, '
     '"recorded_at": "2026-12-05"}', "gate_result is not a gate result document"),
])
def test_a_malformed_trial_file_is_refused_with_file_line_and_expectation(tmp_path: Path, line: str,
                                                                           message: str) -> None:
    path = tmp_path / "bad.jsonl"
    path.write_text(line + "\n")
    with pytest.raises(TrialError) as caught:
        load_trials(path)
    assert str(path) in str(caught.value) and message in str(caught.value)


def test_a_missing_trial_file_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(TrialError, match="cannot read the trial file"):
        load_trials(tmp_path / "none.jsonl")


def test_the_committed_trials_rebuild_from_the_evaluation(tmp_path: Path) -> None:
    """``bench/export_trials.py`` rebuilds every attempt's source from the start kernel and the moves (its
    sha must match the recorded one) and writes what is committed."""
    import subprocess
    import sys

    out = tmp_path / "h200.jsonl"
    done = subprocess.run([sys.executable, str(ROOT / "bench" / "export_trials.py"), "-o", str(out)],
                          capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert done.returncode == 0, done.stderr
    assert "0 attempts not rebuilt" in done.stdout
    committed = [json.loads(x) for x in (ROOT / "trials" / "h200.jsonl").read_text().splitlines()]
    rebuilt = [json.loads(x) for x in out.read_text().splitlines()]
    assert rebuilt == committed
