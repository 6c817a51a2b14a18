"""Figures of the evaluation (DESIGN.md): lineage waterfalls and skill effect maps.

Each function takes plain data (a lineage's steps, a skill's evidence), builds a matplotlib Figure on
the Agg backend (no display needed) and returns it; ``save_png`` writes it. Nothing is measured
here: every plotted number is a stored timing or a ratio of stored timings.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")

from matplotlib.figure import Figure

from klineage.ingest.extract import PROFIT_MARGIN, shape_features, shape_label
from klineage.schema.records import Evidence

__all__ = ["lineage_waterfall", "save_png", "skill_effect_map", "waterfall_series"]


def _case_key(shape: Mapping[str, Any], dtype: str) -> tuple[str, str]:
    return shape_label(shape, None), dtype


def waterfall_series(steps: Sequence[Mapping[str, Any]]) -> tuple[list[str], dict[str, list[float]]]:
    """Speedup over the naive end of every kernel version along the accepted steps, per case.

    ``steps``: a lineage's steps (document entries or Step node properties, any order; rejected ones
    are ignored). Returns the version labels from naive to expert (``naive``, then ``+<operator>`` for
    each optimization added back) and, per case present in every accepted step, the speedups over
    the naive version (first value 1.0): the product of ``to_ms / from_ms`` of the steps between.
    """
    accepted = sorted((s for s in steps if s.get("accepted")), key=lambda s: int(s["index"]))
    labels = ["naive"] + [f"+{s['operator']}" for s in reversed(accepted)]
    if not accepted:
        return labels, {}
    ratios: list[dict[tuple[str, str], float]] = []
    for step in reversed(accepted):  # naive end first
        ratios.append({_case_key(t["shape"], t["dtype"]): float(t["to_ms"]) / float(t["from_ms"])
                       for t in step.get("timings") or () if t.get("from_ms") and t.get("to_ms")})
    common = set(ratios[0]).intersection(*ratios[1:]) if ratios else set()
    series: dict[str, list[float]] = {}
    for key in sorted(common):
        values, total = [1.0], 1.0
        for r in ratios:
            total *= r[key]
            values.append(total)
        series[f"{key[1]} {key[0]}"] = values
    return labels, series


def lineage_waterfall(steps: Sequence[Mapping[str, Any]], title: str = "") -> Figure:
    """One thin line per measured case and a thick geometric mean (its value written at each version)
    of the speedup over the naive end, from the naive kernel (left) to the expert (right), each
    version labelled by the operator its step added back. Where the lineage recorded vendor times, a
    tick in the case's colour right of the expert marks the vendor, and a dashed line their geometric
    mean. The legend sits outside the axes so that a grid of 30 cases stays readable. A lineage
    without common timed cases gives a figure that says so."""
    labels, series = waterfall_series(steps)
    legend_cols = 1 if len(series) <= 18 else 2
    fig = Figure(figsize=(max(6.0, 1.1 * len(labels) + 2) + 2.2 * legend_cols, 4.8), layout="constrained")
    ax = fig.add_subplot()
    x = list(range(len(labels)))
    if series:
        vendor = _vendor_speedups(steps)
        palette = matplotlib.colormaps["tab20"]
        for i, (name, values) in enumerate(series.items()):
            color = palette(i % 20)
            ax.plot(x, values, marker="o", markersize=3, linewidth=1.0, alpha=0.75, color=color, label=name)
            if name in vendor:
                ax.plot([x[-1] + 0.3], [vendor[name]], marker="_", markersize=14, markeredgewidth=2, color=color)
        gm = [statistics.geometric_mean(v[i] for v in series.values()) for i in x]
        ax.plot(x, gm, color="black", linewidth=2.8, marker="s", label="geometric mean", zorder=5)
        for xi, g in zip(x, gm, strict=True):
            ax.annotate(f"{g:.2f}×", (xi, g), textcoords="offset points", xytext=(0, 7), ha="center",
                        fontsize=8, fontweight="bold", zorder=6)
        shown = [v for name, v in vendor.items() if name in series]
        if shown:
            vgm = statistics.geometric_mean(shown)
            ax.axhline(vgm, linestyle="--", linewidth=1.0, color="grey")
            ax.annotate(f"vendor, geometric mean {vgm:.2f}× (ticks: per case)", (0, vgm), fontsize=7,
                        color="grey", ha="left", va="bottom")
        ax.set_yscale("log")
        ax.set_xlim(-0.3, x[-1] + 0.6)
        ax.legend(fontsize=6, loc="upper left", bbox_to_anchor=(1.01, 1.0), ncol=legend_cols, frameon=False)
    else:
        ax.text(0.5, 0.5, "no case was timed at every accepted step", ha="center", va="center",
                transform=ax.transAxes)
    ax.set_xticks(x, labels, rotation=30, ha="right")
    ax.set_ylabel("speedup over the naive end (×)")
    ax.set_xlabel("kernel version (naive → expert)")
    ax.set_title(title or "lineage waterfall")
    ax.grid(True, which="both", axis="y", alpha=0.3)
    return fig


def _vendor_speedups(steps: Sequence[Mapping[str, Any]]) -> dict[str, float]:
    """Per case: naive time over vendor time, when the last accepted step and any step timed them."""
    accepted = sorted((s for s in steps if s.get("accepted")), key=lambda s: int(s["index"]))
    if not accepted:
        return {}
    naive = {_case_key(t["shape"], t["dtype"]): float(t["to_ms"]) for t in accepted[-1].get("timings") or ()}
    vendor: dict[tuple[str, str], float] = {}
    for step in accepted:
        for t in step.get("timings") or ():
            if t.get("vendor_ms"):
                vendor.setdefault(_case_key(t["shape"], t["dtype"]), float(t["vendor_ms"]))
    return {f"{k[1]} {k[0]}": naive[k] / v for k, v in vendor.items() if k in naive}


def skill_effect_map(evidence: Sequence[Evidence], title: str = "", x_feature: str | None = None) -> Figure:
    """Measured speedup of a skill per case: one point per (evidence step, case), coloured by
    workload, marker by dtype, with the 1.0 line and the profit margin. The x axis lists the case
    labels, or the value of ``x_feature`` (a problem feature such as ``numel``, log scale) when
    given; cases without that feature are left out and the figure says how many."""
    fig = Figure(figsize=(8.0, 4.5), layout="constrained")
    ax = fig.add_subplot()
    workloads = sorted({e.workload for e in evidence})
    colours = {w: f"C{i % 10}" for i, w in enumerate(workloads)}
    markers = {"fp32": "o", "fp16": "^", "bf16": "s"}
    cases: list[str] = []
    left_out = 0
    seen: set[tuple[str, str]] = set()
    for ev in evidence:
        for point in ev.speedups:
            label = shape_label(point["shape"], point["dtype"])
            if x_feature:
                value = shape_features(point["shape"], point["dtype"]).get(x_feature)
                if not isinstance(value, (int, float)) or isinstance(value, bool):
                    left_out += 1
                    continue
                xpos: float = float(value)
            else:
                if label not in cases:
                    cases.append(label)
                xpos = float(cases.index(label))
            key = (ev.workload, str(point["dtype"]))
            ax.scatter([xpos], [float(point["speedup"])], color=colours[ev.workload],
                       marker=markers.get(str(point["dtype"]), "D"), s=40, zorder=3,
                       label=f"{ev.workload} {point['dtype']}" if key not in seen else None)
            seen.add(key)
    ax.axhline(1.0, color="black", linewidth=1.0)
    ax.axhline(1.0 + PROFIT_MARGIN, color="grey", linewidth=0.8, linestyle=":",
               label=f"paid (≥ {1 + PROFIT_MARGIN:g}×)")
    if x_feature:
        ax.set_xscale("log")
        ax.set_xlabel(x_feature + (f" ({left_out} case(s) without it left out)" if left_out else ""))
    else:
        # Labels are long ("bf16 B=8 D=128 H=16 S=4096 causal=True"): widen the figure with the case
        # count and stand them upright past ~20 cases so that they never overlap.
        many = len(cases) > 20
        fig.set_size_inches(max(8.0, 0.22 * len(cases) + 3.0), 6.0 if many else 4.5)
        ax.set_xticks(range(len(cases)), cases, rotation=90 if many else 30, ha="center" if many else "right",
                      fontsize=7)
        ax.set_xlabel("case")
    if not seen:
        ax.text(0.5, 0.5, "no measured speedups for this skill", ha="center", va="center", transform=ax.transAxes)
    ax.set_ylabel("speedup of the optimization (×)")
    ax.set_title(title or "skill effect by case")
    ax.grid(True, axis="y", alpha=0.3)
    ax.legend(fontsize=7)
    return fig


def save_png(fig: Figure, path: str | Path, dpi: int = 120) -> Path:
    """Write ``fig`` as a PNG at ``path`` (parent folders created); return the path."""
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, format="png", dpi=dpi)
    return out
