"""Workload manifests (``workloads/<name>/manifest.toml``), loaded and checked exactly as DESIGN.md says.

Every error names the file, the key and what was expected; unknown keys are errors, not ignored.

**Dimension roles** (``[workload.roles]``, optional). A workload names its dims as it likes (``M``,
``cols``, ``vocab``, ``S``); a role says what a dim *is*, so that conditions can be written over
portable features (``kb.features.case_features``: ``rows``, ``reduce_len``, ``out_elems``, ``bytes``,
...) that mean the same thing on every workload. The roles (``DIM_ROLES``):

* ``batch``: an independent batch dim (a batch ``B``, attention heads ``H``); multiplies the rows;
* ``rows``: independent output rows (a GEMM's ``M``, a row-wise operation's ``rows``);
* ``cols``: output columns that are not reduced over (a GEMM's ``N``);
* ``reduce``: a dim reduced away, absent from the output (a GEMM's ``K``, cross-entropy's ``vocab``,
  a row maximum's ``cols``);
* ``reduce_kept``: a row length reduced over for a statistic and kept in the output (softmax's and
  the norms' ``cols``);
* ``seq``: a sequence length that is both query rows and the reduced key length (attention's ``S``);
* ``head_dim``: attention's head dimension ``D`` (inner dim of Q Kᵀ, output columns of P V);
* ``elements``: the length of an elementwise problem (``N`` of a 1-D operation);
* ``flag``: a boolean switch of the problem (``causal``).

Example: ``[workload.roles]`` / ``M = "rows"`` / ``N = "cols"`` / ``K = "reduce"``. A role outside
``DIM_ROLES``, or a role for a dim that no shape has, is an error naming the file and key. Dims
without a declared role get the role ``kb.features.infer_roles`` infers from their name and the
family (documented there).
"""

from __future__ import annotations

import math
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from klineage.schema.errors import ManifestError

DTYPES = ("fp32", "fp16", "bf16")
ROLES = ("expert", "heldout")
#: Roles a workload dim may have (module docstring).
DIM_ROLES = ("batch", "rows", "cols", "reduce", "reduce_kept", "seq", "head_dim", "elements", "flag")
MANIFEST_NAME = "manifest.toml"
_REQUIRED = ("name", "family", "description", "role", "kernel", "reference", "dtypes", "shapes",
             "cpu_shapes", "tolerance")
_OPTIONAL = ("roles",)

Shape = Mapping[str, int | bool]


@dataclass(frozen=True)
class WorkloadManifest:
    """A validated workload: where its files are, its dtypes, GPU and CPU shape grids and tolerances."""

    name: str
    family: str
    description: str
    role: str
    kernel: str
    reference: str
    dtypes: tuple[str, ...]
    shapes: tuple[Shape, ...]
    cpu_shapes: tuple[Shape, ...]
    tolerance: Mapping[str, float]
    directory: Path
    roles: Mapping[str, str] | None = None  # declared [workload.roles]; None when the table is absent

    @property
    def kernel_path(self) -> Path:
        """Path of the starting candidate (expert.py or naive.py)."""
        return self.directory / self.kernel

    @property
    def reference_path(self) -> Path:
        """Path of reference.py."""
        return self.directory / self.reference

    def representative_shape(self) -> Shape:
        """The GPU grid's shape of median size (by the product of its integer dims): the one shape that
        stands for the grid where one must (search contexts, the agent's planning)."""
        def size(shape: Shape) -> float:
            return math.prod(float(v) for v in shape.values() if isinstance(v, int) and not isinstance(v, bool))

        ordered = sorted(self.shapes, key=size)
        return ordered[len(ordered) // 2]


def _check_shapes(source: str, key: str, value: Any, flags: frozenset[str] = frozenset()) -> tuple[Shape, ...]:
    """The shape list ``key``: every dim a positive integer or a boolean; a dim declared a ``flag`` (``flags``)
    only a boolean, so that ``causal = 0`` is an error that says to write ``false``."""
    if not isinstance(value, list) or not value:
        raise ManifestError(source, key, "a non-empty list of inline tables like { M = 64, N = 64 }", value)
    shapes = []
    for i, shape in enumerate(value):
        where = f"{key}[{i}]"
        if not isinstance(shape, dict) or not shape:
            raise ManifestError(source, where, "an inline table of dimension = integer", shape)
        for dim, size in shape.items():
            if isinstance(size, bool):
                continue  # flags such as causal = true
            if dim in flags:
                raise ManifestError(source, f"{where}.{dim}", "true or false ([workload.roles] declares "
                                    f"{dim} a flag)", size)
            if not isinstance(size, int) or size <= 0:
                raise ManifestError(source, f"{where}.{dim}", "a positive integer (or a boolean flag)", size)
        shapes.append(dict(shape))
    return tuple(shapes)


def parse_manifest(data: Mapping[str, Any], source: str, directory: Path) -> WorkloadManifest:
    """Validate parsed TOML ``data`` (from ``source``) and return the manifest; raise ManifestError."""
    extra = set(data) - {"workload"}
    if extra:
        raise ManifestError(source, sorted(extra)[0], "only the table [workload] at the top level")
    table = data.get("workload")
    if not isinstance(table, dict):
        raise ManifestError(source, "workload", "a table [workload]")
    unknown = set(table) - set(_REQUIRED) - set(_OPTIONAL)
    if unknown:
        raise ManifestError(source, f"workload.{sorted(unknown)[0]}",
                            f"one of the known keys ({', '.join((*_REQUIRED, *_OPTIONAL))}); unknown keys are "
                            "an error")
    for key in _REQUIRED:
        if key not in table:
            raise ManifestError(source, f"workload.{key}", "a value (the key is required)")
    for key in ("name", "family", "description", "kernel", "reference"):
        if not isinstance(table[key], str) or not table[key].strip():
            raise ManifestError(source, f"workload.{key}", "a non-empty string", table[key])
    if table["role"] not in ROLES:
        raise ManifestError(source, "workload.role", f"one of {ROLES}", table["role"])
    for key in ("kernel", "reference"):
        if not (directory / table[key]).is_file():
            raise ManifestError(source, f"workload.{key}", f"a file next to the manifest ({table[key]} "
                                "does not exist)")
    dtypes = table["dtypes"]
    if not isinstance(dtypes, list) or not dtypes or any(d not in DTYPES for d in dtypes):
        raise ManifestError(source, "workload.dtypes", f"a non-empty list drawn from {DTYPES}", dtypes)
    tolerance = table["tolerance"]
    if not isinstance(tolerance, dict):
        raise ManifestError(source, "workload.tolerance", "a table dtype = relative error bound", tolerance)
    for dtype in dtypes:
        bound = tolerance.get(dtype)
        if isinstance(bound, bool) or not isinstance(bound, int | float) or bound <= 0:
            raise ManifestError(source, f"workload.tolerance.{dtype}", "a positive number", bound)
    for dtype in tolerance:
        if dtype not in DTYPES:
            raise ManifestError(source, f"workload.tolerance.{dtype}", f"a dtype among {DTYPES}")
    declared = table.get("roles")
    flags = frozenset(d for d, r in declared.items() if r == "flag") if isinstance(declared, dict) else frozenset()
    shapes = _check_shapes(source, "workload.shapes", table["shapes"], flags)
    cpu_shapes = _check_shapes(source, "workload.cpu_shapes", table["cpu_shapes"], flags)
    roles = _check_roles(source, table["roles"], (*shapes, *cpu_shapes)) if "roles" in table else None
    return WorkloadManifest(
        name=table["name"], family=table["family"], description=table["description"],
        role=table["role"], kernel=table["kernel"], reference=table["reference"],
        dtypes=tuple(dtypes), shapes=shapes, cpu_shapes=cpu_shapes,
        tolerance={k: float(v) for k, v in tolerance.items()}, directory=directory, roles=roles,
    )


def _check_roles(source: str, value: Any, shapes: tuple[Shape, ...]) -> dict[str, str]:
    """The declared ``[workload.roles]`` table: every key a dim of some shape, every value in DIM_ROLES."""
    if not isinstance(value, dict):
        raise ManifestError(source, "workload.roles", 'a table dim = role, e.g. M = "rows"', value)
    dims = {d for shape in shapes for d in shape}
    for dim, role in value.items():
        if role not in DIM_ROLES:
            raise ManifestError(source, f"workload.roles.{dim}", f"one of {DIM_ROLES}", role)
        if dim not in dims:
            raise ManifestError(source, f"workload.roles.{dim}",
                                f"a dim of the shapes ({', '.join(sorted(dims))})", dim)
    return dict(value)


def load_manifest(path: str | Path) -> WorkloadManifest:
    """Load ``path`` (a workload folder or its manifest.toml); raise ManifestError naming file and key."""
    path = Path(path)
    file = path / MANIFEST_NAME if path.is_dir() else path
    if not file.is_file():
        raise ManifestError(str(file), "workload", f"a workload folder holding {MANIFEST_NAME} (not found)")
    try:
        data = tomllib.loads(file.read_text(encoding="utf-8"))
    except UnicodeDecodeError as exc:
        raise ManifestError(str(file), "workload", "UTF-8 text") from exc
    except tomllib.TOMLDecodeError as exc:
        raise ManifestError(str(file), "workload", f"valid TOML ({exc})") from exc
    return parse_manifest(data, str(file), file.parent.resolve())
