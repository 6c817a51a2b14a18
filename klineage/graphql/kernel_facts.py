"""What a kernel's source tells skill search: static features, a summary, and operator anchors.

Both the GraphQL resolver and the ``klineage search --kernel`` command build their search inputs
here and call the one service function, ``KnowledgeBase.search``. It lives above ``kb`` and
``transforms`` because it needs both: ``kb`` never imports ``transforms``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from klineage.kb.search import ANCHOR_ABSENT, ANCHOR_APPLICABLE, ANCHOR_PRESENT, OperatorAnchor


@dataclass(frozen=True)
class KernelFacts:
    """The search inputs derived from one kernel source (arguments of ``KnowledgeBase.search``)."""

    features: dict[str, Any]
    summary: str
    operator_anchors: dict[str, OperatorAnchor]

    def search_kwargs(self) -> dict[str, Any]:
        """Keyword arguments for ``KnowledgeBase.search``."""
        return {"kernel_features": self.features, "kernel_summary": self.summary,
                "operator_anchors": self.operator_anchors}


def _where(anchors: list[Any]) -> str:
    seen = dict.fromkeys(f"{a.description} (line {a.start_line})" for a in anchors)
    return "; ".join(seen)


def operator_anchors(source: str) -> dict[str, OperatorAnchor]:
    """For every registered operator, its anchor state in ``source``:

    - "applicable" when its ``detect`` finds a place to add it AND its ``apply`` (default
      parameters) actually rewrites the source: a skill is never recommended where applying it
      would change nothing;
    - else "present" when ``detect`` finds it already there;
    - else "absent", with the reason (what the operator needs, or that apply changes nothing).

    An operator whose ``detect`` or ``apply`` raises is left out: its anchor stays unknown to the
    search rather than guessed.
    """
    from klineage.transforms.registry import all_operators

    out: dict[str, OperatorAnchor] = {}
    for op in all_operators():
        try:
            found = op.detect(source)
            applicable = [a for a in found if a.kind == "applicable"]
            changes = bool(applicable) and op.apply(source) is not None
        except Exception:  # an operator bug must not break search: its anchor stays unknown, not guessed
            continue
        present = [a for a in found if a.kind == "present"]
        if changes:
            out[op.id] = OperatorAnchor(ANCHOR_APPLICABLE, _where(applicable))
        elif present:
            out[op.id] = OperatorAnchor(ANCHOR_PRESENT, _where(present))
        elif applicable:
            out[op.id] = OperatorAnchor(ANCHOR_ABSENT, f"its detect finds {_where(applicable)}, "
                                                       "but its apply changes nothing there")
        else:
            out[op.id] = OperatorAnchor(ANCHOR_ABSENT, f"it needs {op.anchor_description}")
    return out


def kernel_facts(source: str) -> KernelFacts:
    """Features, summary and operator anchors of a candidate source; SyntaxError when it does not parse."""
    from klineage.transforms.features import kernel_features, kernel_summary

    features = kernel_features(source)
    return KernelFacts(features, kernel_summary(source), operator_anchors(source))
