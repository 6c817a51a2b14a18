"""klineage.client against a real `klineage serve` subprocess: hits equal the in-process
KnowledgeBase.search for the same request, the async client answers like the sync one, errors carry
the server's message, `klineage search --server` prints what the local path prints, and mutations."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from klineage.client import AsyncKLineageClient, KLineageClient, KLineageError, SkillHit
from klineage.kb.embedded_store import EmbeddedStore
from klineage.kb.service import KnowledgeBase
from klineage.schema.gate_result import GateOutcome, GateResult
from klineage.schema.ids import kernel_sha
from klineage.transforms.facts import kernel_facts

from .conftest import ROOT, TOKEN, cli_env

pytestmark = pytest.mark.real("embedder")

KERNEL = (ROOT / "heldout" / "scaled_softmax" / "naive.py").read_text()
CONTEXT = {"M": 4096, "N": 4096, "K": 4096, "dtype": "bf16"}
REQUESTS: list[dict[str, Any]] = [
    {"text": "faster matrix multiply", "context": CONTEXT, "limit": 5},
    {"kernel_source": KERNEL, "context": {"rows": 4096, "cols": 4096, "dtype": "bf16"}, "limit": 4},
    {"text": "reduce memory traffic", "limit": 10},
]


def local_search(kb: KnowledgeBase, text: str | None = None, context: dict[str, Any] | None = None,
                 kernel_source: str | None = None, limit: int = 10) -> list[Any]:
    facts = kernel_facts(kernel_source).search_kwargs() if kernel_source else {}
    return list(kb.search(text=text, context=context, limit=limit, **facts))


def evidence(items: Any) -> list[tuple[Any, ...]]:
    return [(e.lineage_id, e.step_id, e.workload, e.gpu, [dict(x) for x in e.speedups], e.sample) for e in items]


def assert_same(remote: list[SkillHit], local: list[Any]) -> None:
    assert [h.skill.id for h in remote] == [h.skill.id for h in local]
    for r, h in zip(remote, local, strict=True):
        assert r.score == pytest.approx(h.score, rel=1e-12) and r.applicable == h.applicable
        assert (r.passed, r.failed, r.unknown) == (h.passed, h.failed, h.unknown)
        assert evidence(r.evidence) == evidence(h.evidence)
        s, k = r.skill, h.skill
        assert (s.name, s.operator, s.intent, s.carrier, s.anchor, s.effect) == \
            (k.name, k.operator, k.intent, k.carrier, k.anchor, k.effect)
        assert (dict(s.transform), s.support_steps, s.support_lineages, s.architectures, s.sample) == \
            (dict(k.transform), k.support_steps, k.support_lineages, k.architectures, k.sample)
        assert s.usage == k.usage() == r.usage


@pytest.fixture(scope="module")
def kb(kb_dir: Path, embedder: Any) -> KnowledgeBase:
    return KnowledgeBase(EmbeddedStore(kb_dir), embedder)


def test_search_equals_the_in_process_search(server: str, kb: KnowledgeBase) -> None:
    with KLineageClient(server) as client:
        for request in REQUESTS:
            hits = client.search_skills(**request)
            assert hits, request
            assert_same(hits, local_search(kb, **request))


def test_get_skill_and_lineages(server: str, kb: KnowledgeBase) -> None:
    with KLineageClient(server + "/graphql/") as client:  # a full endpoint URL works too
        sid = client.search_skills("faster matrix multiply", CONTEXT, limit=1)[0].skill.id
        skill = client.get_skill(sid)
        assert client.get_skill("skill:0000000000000000") is None
        lineages = client.lineages()
        gemm = client.lineages("gemm")
    expected = kb.skill(sid)
    assert skill is not None and expected is not None and skill.name == expected.name
    assert set(skill.valid_when) == set(kb.conditions([sid], "valid")[sid])
    assert set(skill.profitable_when) == set(kb.conditions([sid], "profitable")[sid])
    assert evidence(skill.evidence) == evidence(kb.evidence([sid])[sid])
    views = kb.lineages(None)
    assert sorted(v.id for v in lineages) == sorted(v.lineage.id for v in views)
    by_id = {v.lineage.id: v for v in views}
    for lin in lineages:
        assert [s.operator for s in lin.steps] == [s.operator for s in by_id[lin.id].steps]
    assert gemm and all(v.workload == "gemm" for v in gemm)
    accepted = [s for lin in gemm for s in lin.steps if s.accepted]
    assert accepted and all(s.skill_id and s.skill_id.startswith("skill:") for s in accepted)


def test_async_client_answers_like_the_sync_one(server: str) -> None:
    async def main() -> tuple[Any, ...]:
        async with AsyncKLineageClient(server) as client:
            searches = await asyncio.gather(*(client.search_skills(**r) for r in REQUESTS))
            sid = searches[0][0].skill.id
            return searches, await client.get_skill(sid), await client.lineages()

    searches, skill, lineages = asyncio.run(main())
    with KLineageClient(server) as client:
        assert list(searches) == [client.search_skills(**r) for r in REQUESTS]
        assert skill == client.get_skill(searches[0][0].skill.id)
        assert lineages == client.lineages()


def test_errors_carry_the_server_message(server: str) -> None:
    with KLineageClient(server) as client:
        with pytest.raises(KLineageError, match=r"limit: expected 1\.\.100"):
            client.search_skills("x", limit=101)
        with pytest.raises(KLineageError, match="kernelSource: expected Python source"):
            client.search_skills(kernel_source="def (:")
        with pytest.raises(KLineageError, match="mutations need the header"):
            client.record_application("skill:7c96e7e93d11cfbc", "k = 1\n", "pass")
    with KLineageClient(server, token="wrong") as client, pytest.raises(KLineageError, match="mutations need"):
        client.record_application("skill:7c96e7e93d11cfbc", "k = 1\n", "pass")
    with KLineageClient("http://127.0.0.1:1", timeout=2) as client, \
            pytest.raises(KLineageError, match=r"127\.0\.0\.1:1"):
        client.lineages()

    async def unknown() -> None:
        async with AsyncKLineageClient(server, token=TOKEN) as client:
            await client.record_application("skill:0000000000000000", "k = 1\n", "pass")

    with pytest.raises(KLineageError, match="unknown skill"):
        asyncio.run(unknown())


def klineage(kb_dir: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "klineage.cli.main", "search", *args], cwd=ROOT,
                          env=cli_env(kb_dir), capture_output=True, text=True, timeout=120)


def test_cli_search_server_prints_what_the_local_path_prints(server: str, kb_dir: Path) -> None:
    kernel = str(ROOT / "heldout" / "scaled_softmax" / "naive.py")
    for args in (["faster matrix multiply", "-c", "M=4096", "-c", "dtype=bf16", "--limit", "4"],
                 ["--kernel", kernel, "-c", "rows=4096", "-c", "cols=4096", "--limit", "3"]):
        for extra in (["--json"], []):
            local = klineage(kb_dir, *args, *extra)
            remote = klineage(kb_dir, *args, *extra, "--server", server)
            assert local.returncode == remote.returncode == 0, (local.stderr, remote.stderr)
            assert remote.stdout == local.stdout
            assert ('"score"' if extra else "searchSkills") in local.stdout
    bad = klineage(kb_dir, "x", "--server", "http://127.0.0.1:1")
    assert bad.returncode == 2 and "--server http://127.0.0.1:1" in bad.stderr


def test_record_application_with_the_token(server: str) -> None:
    sid, source = "skill:7c96e7e93d11cfbc", "k_client = 2\n"
    gate = GateResult(kernel_sha(source), "cpu", {"torch": "2.11.0"},
                      (GateOutcome("static", "pass"), GateOutcome("correctness", "pass", "checked")))
    with KLineageClient(server, token=TOKEN) as client:
        before = client.get_skill(sid)
        claim = client.record_application(sid, "k_client = 1\n", "improved", 9.0)
        verified = client.record_application(sid, source, "improved", 1.5, gate_result=gate)
        after = client.get_skill(sid)
    assert before is not None and after is not None
    assert not claim.verified and claim.verdict is None and claim.skill_id == sid
    assert verified.verified and verified.verdict == "pass" and verified.kernel_sha == kernel_sha(source)
    assert (after.applied - before.applied, after.verified - before.verified, after.paid - before.paid) == (2, 1, 1)
    assert after.effect == before.effect and after.field_effect is not None and after.field_effect.median == 1.5


def test_serve_reinduces_on_verified_feedback(embedder: Any, tmp_path: Path) -> None:
    """`klineage serve` records through ingest.feedback, as `klineage mcp` does: MIN_VERIFIED verified
    applications with a context replace the skill's PROFITABLE_WHEN with a rule induced from them."""
    from klineage.ingest.feedback import MIN_VERIFIED

    from .conftest import build_kb, start_serve, stop

    proc, url = start_serve(cli_env(build_kb(tmp_path / "kb", embedder), KLINEAGE_API_TOKEN=TOKEN))
    sid = "skill:7c96e7e93d11cfbc"
    try:
        with KLineageClient(url, token=TOKEN) as client:
            before = client.get_skill(sid)
            for i in range(MIN_VERIFIED + 6):
                big, source = i % 2 == 0, f"k_serve = {i}\n"
                gate = GateResult(kernel_sha(source), "cpu", {"torch": "2.11.0"},
                                  (GateOutcome("static", "pass"), GateOutcome("correctness", "pass", "checked")))
                client.record_application(sid, source, "improved" if big else "no-gain", 1.4 if big else 0.9,
                                          gate_result=gate, context={"flops": 2.0 ** (40 if big else 30)})
            after = client.get_skill(sid)
            with pytest.raises(KLineageError, match="context: expected a JSON object"):
                client.record_application(sid, "k = 0\n", "pass", context=[1])  # type: ignore[arg-type]
    finally:
        stop(proc)
    assert before is not None and after is not None
    assert all(c.source != "induced-feedback" for c in before.profitable_when)
    [rule] = after.profitable_when
    assert rule.source == "induced-feedback" and "flops" in rule.expr
