"""``transforms.under_autotune``: a structural operator on an autotuned kernel (configs out, operator,
configs back), refused for the launch-configuration operators and for kernels with nothing to take out;
the kernel facts call such an operator applicable and say how."""

from __future__ import annotations

from pathlib import Path

import pytest

from klineage.transforms._module import parse
from klineage.transforms.facts import APPLICABLE, kernel_facts
from klineage.transforms.registry import LAUNCH_CONFIGURATION, get_operator
from klineage.transforms.under_autotune import apply_under_autotune

ROOT = Path(__file__).resolve().parents[2]
NAIVE = (ROOT / "heldout" / "matmul_nt" / "naive.py").read_text()
TUNED = get_operator("autotune").apply(NAIVE)


def _configs(source: str) -> dict[str, int]:
    m = parse(source)
    assert m is not None
    return {k.name: len(k.autotune.keywords[0].value.elts) for k in m.kernels if k.autotune is not None}


def test_persistent_on_an_autotuned_matmul_keeps_its_config_list() -> None:
    assert TUNED is not None
    persistent = get_operator("persistent")
    assert persistent.apply(TUNED.source) is None  # refused directly: the launch has no tile sizes
    rw = apply_under_autotune(persistent, TUNED.source)
    assert rw is not None and persistent.present(rw.source)
    assert rw.params["under_autotune"] == sorted(_configs(TUNED.source))
    assert _configs(rw.source) == _configs(TUNED.source)


def test_split_k_keeps_every_tile_in_the_configs() -> None:
    """Split-k's K loop starts at ``pid_k * BLOCK_K`` and steps by ``BLOCK_K * SPLIT_K``: it covers K with any
    BLOCK_K, and the grid counts splits, not tiles of BLOCK_K, so the configs keep tuning it."""
    assert TUNED is not None
    rw = apply_under_autotune(get_operator("split-k"), TUNED.source)
    assert rw is not None
    m = parse(rw.source)
    assert m is not None
    kernel = next(k for k in m.kernels if k.name in _configs(TUNED.source))
    assert kernel.autotune is not None
    config_text = rw.source[rw.source.index("@triton.autotune"):rw.source.index("@triton.jit")]
    assert "BLOCK_M" in config_text and "BLOCK_K" in config_text.split("key")[0]
    assert "BLOCK_K=" not in rw.source.split("def run")[1]  # the configs set it


@pytest.mark.parametrize("op_id", LAUNCH_CONFIGURATION)
def test_launch_configuration_operators_are_never_made_under_autotune(op_id: str) -> None:
    assert TUNED is not None
    assert apply_under_autotune(get_operator(op_id), TUNED.source) is None


def test_a_kernel_without_autotune_has_nothing_to_take_out() -> None:
    assert apply_under_autotune(get_operator("persistent"), NAIVE) is None


def test_the_facts_call_it_applicable_and_say_how() -> None:
    assert TUNED is not None
    anchor = kernel_facts(TUNED.source).operator_anchors["persistent"]
    assert anchor["state"] == APPLICABLE and "autotune configs taken out" in anchor["detail"]
