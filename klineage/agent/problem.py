"""The problem an agent works on: a candidate kernel and the workload it must compute.

A ``Problem`` holds the starting source, the workload manifest (family, description, shape grid,
dtypes) and derives what retrieval needs: a problem text for embedding search and a search context
(one representative shape of the grid in the condition language's feature names).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from klineage.kb.features import workload_context
from klineage.schema.errors import FormatError, KLineageError
from klineage.schema.manifest import Shape, WorkloadManifest, load_manifest


class ProblemError(KLineageError, ValueError):
    """A kernel file or workload folder the agent cannot work on; says which and why."""


@dataclass(frozen=True)
class Problem:
    """A candidate source to optimize for one workload (``manifest``)."""

    source: str
    manifest: WorkloadManifest
    kernel_path: Path | None = None

    @property
    def name(self) -> str:
        """The workload's name."""
        return self.manifest.name

    @property
    def family(self) -> str:
        """The workload's family (gemm, row-reduction, attention, ...)."""
        return self.manifest.family

    def text(self) -> str:
        """What the problem is, in words (for embedding search)."""
        return f"optimize a {self.family} Triton kernel: {self.manifest.description}"

    def representative_shape(self) -> Shape:
        """The grid shape of median size (``WorkloadManifest.representative_shape``): the shape search and
        the planner reason about when one shape must stand for the grid."""
        return self.manifest.representative_shape()

    def grid_contexts(self, arch: int | None = None) -> list[dict[str, Any]]:
        """``search_context`` of every shape of the grid (what a profitability rule is checked on)."""
        return [self.search_context(arch, shape) for shape in self.manifest.shapes]

    def search_context(self, arch: int | None = None, shape: Shape | None = None) -> dict[str, Any]:
        """``shape`` (default: the representative one) and the first dtype as search-context features
        (``kb.features.workload_context``: the portable features from the manifest's dim roles, plus the
        dims whose names the condition language knows; a dim it does not know is left out, never renamed by
        guess, and ``context_note`` says so)."""
        return workload_context(self.manifest, shape if shape is not None else self.representative_shape(),
                                arch).context

    def context_note(self) -> str:
        """What the search context had to leave out of the manifest's dims and how to fix it; "" if nothing."""
        return workload_context(self.manifest, self.representative_shape()).note(self.manifest)


def load_problem(kernel: Path | str | None, workload_dir: Path | str) -> Problem:
    """The problem for ``kernel`` (default: the manifest's own starting kernel) on the workload in
    ``workload_dir``; ProblemError naming the file and what was expected."""
    folder = Path(workload_dir)
    if not folder.is_dir():
        raise ProblemError(f"workload folder {str(folder)!r} does not exist")
    try:
        manifest = load_manifest(folder)
    except FormatError as exc:
        raise ProblemError(str(exc)) from exc
    path = Path(kernel) if kernel is not None else manifest.kernel_path
    if path.is_dir():
        raise ProblemError(f"kernel {str(path)!r} is a folder; expected the kernel's .py file (e.g. "
                           f"{str(path / manifest.kernel)!r})")
    if not path.is_file():
        raise ProblemError(f"kernel file {str(path)!r} does not exist")
    try:
        source = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise ProblemError(f"kernel file {str(path)!r}: expected UTF-8 Python source") from exc
    if not source.strip():
        raise ProblemError(f"kernel file {str(path)!r} is empty; expected a module defining run(*inputs)")
    try:
        compile(source, str(path), "exec", dont_inherit=True)
    except SyntaxError as exc:
        raise ProblemError(f"kernel file {str(path)!r}: line {exc.lineno}: {exc.msg}") from exc
    return Problem(source, manifest, path)
