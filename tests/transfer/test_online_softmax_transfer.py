"""online-softmax on attention's two-pass form: a max pass over the key blocks, then a pass whose exp weights feed
accumulators (the held-out decode attention: K read twice). apply folds the max into the weighted pass and
rescales every accumulator; the result passes the gates under the interpreter on shapes larger than one key
block and not divisible by it, and forms it cannot prove linear in the weights are refused."""

from __future__ import annotations

from typing import Any

import pytest

from klineage.transforms.registry import get_operator

from .heldout import failed_gates, heldout_dirs, naive_sources, validate_all
from .test_grid_transfer import grown_shapes

ONLINE = get_operator("online-softmax")
DECODE = naive_sources()["decode_attention"]
DIRS = {d.name: d for d in heldout_dirs()}


@pytest.fixture(scope="module")
def folded() -> Any:
    rw = ONLINE.apply(DECODE)
    assert rw is not None, "online-softmax does not apply to the two-pass decode attention"
    return rw


def test_the_max_pass_is_folded_into_the_weighted_pass(folded: Any) -> None:
    """One loop over the keys is left; both accumulators are rescaled by the same factor; the kernel now has
    the optimization (detect says present) and nothing left to apply."""
    kernel = folded.source.split("def run")[0]
    assert kernel.count("for start in range(") == 1, folded.diff
    assert "denom = denom * alpha + " in kernel and "acc = acc * alpha + " in kernel, folded.diff
    assert ONLINE.present(folded.source) and not ONLINE.applicable(folded.source)


def test_the_folded_decode_attention_passes_the_gates(folded: Any, cpu_validator: Any) -> None:
    shapes = grown_shapes("decode_attention")
    assert shapes[0]["S"] % 64, "the grown sequence must not be a multiple of the key block"
    results = validate_all([("folded", folded.source, DIRS["decode_attention"], shapes)], cpu_validator(seeds=2))
    assert results["folded"]["verdict"] == "pass", "\n".join(failed_gates(results["folded"])) + folded.diff


@pytest.mark.parametrize(("old", "new"), [
    # a weight squared is not linear in it: rescaling by alpha would be wrong
    ("acc = acc + tl.sum(p[:, None] * v, axis=0)", "acc = acc + tl.sum(p[:, None] * p[:, None] * v, axis=0)"),
    # the accumulator read elsewhere in the loop would see a rescaled value
    ("acc = acc + tl.sum(p[:, None] * v, axis=0)", "acc = acc + tl.sum(p[:, None] * v, axis=0)\n"
     "        denom = denom + tl.sum(acc, axis=0) * 0.0"),
    # the max read by something that is not a weight
    ("denom = denom + tl.sum(p, axis=0)", "denom = denom + tl.sum(p, axis=0) + m * 0.0"),
])
def test_forms_it_cannot_prove_right_are_refused(old: str, new: str) -> None:
    assert old in DECODE
    assert ONLINE.apply(DECODE.replace(old, new)) is None


def test_after_exp2_the_fold_keeps_the_base_change(cpu_validator: Any) -> None:
    """exp2 first (``exp2((s - m) * log2 e)``): the rescale factor uses the same base and scale."""
    based = get_operator("exp2").apply(DECODE)
    assert based is not None
    rw = ONLINE.apply(based.source)
    assert rw is not None, based.diff
    assert "alpha = tl.exp2((m - m_safe) * " in rw.source, rw.diff
    results = validate_all([("exp2-first", rw.source, DIRS["decode_attention"], grown_shapes("decode_attention"))],
                           cpu_validator(seeds=1))
    assert results["exp2-first"]["verdict"] == "pass", "\n".join(failed_gates(results["exp2-first"])) + rw.diff
