"""A structural operator on an autotuned kernel: its configs taken out, the operator, the same configs back.

Operators that restructure a kernel (split-k, persistent, epilogue fusion, single-pass rows, ...) refuse a
kernel under ``@triton.autotune``: they read tile sizes at the launch, and an autotuned launch has none.
An agent that tunes first (the lineages' largest single gain on GEMMs is their launch config set) would
then never reach them. ``apply_under_autotune`` composes three operator directions, each the one the
walker uses: ``autotune.simplify`` (the first config pinned at the launch, the decorator's config list and
key recorded), the operator's ``apply`` on that pinned kernel, and ``autotune.apply`` with the recorded
config list and key (``kernels=``). Nothing is guessed: when any of the three declines, the answer is None.
The launch-configuration operators (tiles, warps, stages, register cap) are never made this way: on an
autotuned kernel their values are the config list's, which would overwrite them.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

from klineage.schema import pyast
from klineage.transforms._module import parse
from klineage.transforms.operator import Operator, Rewrite, make_rewrite
from klineage.transforms.registry import LAUNCH_CONFIGURATION, get_operator

#: The key of a Rewrite's params that says it was made under autotune (its value: the kernels re-tuned).
MARK = "under_autotune"


def apply_or_under_autotune(operator: Operator, source: str, **params: Any) -> Rewrite | None:
    """``operator.apply(source, **params)``, or, when that declines, ``apply_under_autotune``: how the agent
    makes a move, and what a kernel's facts call applicable."""
    return operator.apply(source, **params) or apply_under_autotune(operator, source, **params)


def apply_under_autotune(operator: Operator, source: str, **params: Any) -> Rewrite | None:
    """``operator.apply(**params)`` made on ``source``'s kernels with their autotune config lists taken out
    and put back (see the module docstring); the Rewrite's params say so (``MARK``: the kernels
    whose configs were restored). None when ``source`` has no literal config list to take out, when the
    operator does not apply to the pinned kernel, or when the configs cannot be put back."""
    if operator.id in LAUNCH_CONFIGURATION or "autotune" not in source:
        return None
    pinned_source, kernels = _pinned(source)
    if not kernels:
        return None
    changed = operator.apply(pinned_source, **params)
    if changed is None:
        return None
    restored = _put_back(changed.source, kernels)
    if restored is None:
        return None
    return make_rewrite(source, restored, operator.id, {**changed.params, MARK: sorted(kernels)}, "apply")


def _put_back(source: str, kernels: dict[str, Any]) -> str | None:
    """``source`` with each kernel of ``kernels`` autotuned again over its recorded configs and key; None
    when one of them would stay pinned. The recorded list goes back as it was (``kernels=``). When the
    operator made a recorded parameter one that the autotune operator will not move any more (split-k's
    ``BLOCK_K`` now also strides the split across a grid axis that does not count with it), a single
    kernel's list goes back without that parameter, which keeps its pinned launch value."""
    autotune = get_operator("autotune")
    tries: list[dict[str, Any]] = [{"kernels": kernels}]
    if len(kernels) == 1:
        recorded = next(iter(kernels.values()))
        try:
            configs = [{name: pyast.literal_eval(value) for name, value in dict(c).items()}
                       for c in recorded.get("configs") or []]
            key = pyast.literal_eval(recorded["key"]) if recorded.get("key") else None
        except (ValueError, SyntaxError):
            configs, key = [], None
        keyed = {"key": list(key)} if isinstance(key, list | tuple) else {}
        tiles = list(dict.fromkeys(n for c in configs for n in c if n not in ("num_warps", "num_stages")))
        for dropped in ([None, *tiles] if configs else []):
            tries.append({"configs": [{n: v for n, v in c.items() if n != dropped} for c in configs], **keyed})
    for params in tries:
        restored = autotune.apply(source, **params)
        if restored is not None and set(kernels) <= {k.name for k in _autotuned(restored.source)}:
            return restored.source
    return None


@lru_cache(maxsize=64)
def _pinned(source: str) -> tuple[str, dict[str, Any]]:
    """``source`` with its autotune decorators taken out (the first config pinned) and what they held
    (``{kernel: {"configs", "key"}}``, empty when there is no literal config list to take out). Cached: a
    planner asks this of one kernel for every operator."""
    pinned = get_operator("autotune").simplify(source)
    if pinned is None:
        return source, {}
    return pinned.source, dict(pinned.params.get("kernels") or {})


def _autotuned(source: str) -> list[Any]:
    m = parse(source)
    return [] if m is None else [k for k in m.kernels if k.autotune is not None]
