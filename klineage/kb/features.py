"""Normalize a caller's problem context into condition-language features (pure functions).

``problem_features`` accepts what a CLI (``-c M=4096 -c dtype=bf16``), a GraphQL JSON object or a
workload manifest shape gives, canonicalizes names and values, and derives ``numel``, ``dtype_bytes``,
``has_tma`` and the portable features (below) from what was given. Nothing is defaulted: a feature the
caller did not give (and that cannot be derived from what was given) stays absent, so conditions on
it evaluate to *unknown*.

**Portable features** (``kb.conditions.PORTABLE_FEATURES``) mean the same thing on every workload,
whatever its dims are called. ``case_features(shape, dtype, roles, family, ...)`` is the one function
the rest of the project calls to get the features of a case: the workload's own dims (kept as
context) plus the portable ones, computed from each dim's *role* (``schema.manifest.DIM_ROLES``),
declared in the manifest or inferred by ``infer_roles``. With ``P(role)`` the product of the dims of
that role (1 when none) and ``batch = P(batch)``:

* ``rows`` = batch × P(rows) × P(seq): independent output rows (absent for an elementwise problem);
* ``reduce_len`` = P(reduce) × P(reduce_kept) × P(seq) when one of those roles is present;
* ``out_elems`` = rows × P(cols) × P(head_dim) × P(reduce_kept), or batch × P(elements);
* ``flops``: a contraction (``reduce`` and ``cols`` dims) 2 × rows × P(cols) × reduce_len; attention
  (``seq`` and ``head_dim``) 4 × rows × reduce_len × P(head_dim), halved when a ``causal`` flag is
  true; otherwise absent (unless the caller measured it);
* ``bytes``: compulsory traffic, (inputs + output) × dtype_bytes, the inputs being A and B of a
  contraction (rows × reduce_len + batch × reduce_len × P(cols)), Q, K and V of attention
  (3 × rows × P(head_dim)), the (rows, reduce_len) matrix of a row operation, or the elements of an
  elementwise one; an estimate (extra inputs such as a bias or a second elementwise operand are not
  counted) unless the caller measured it;
* ``arithmetic_intensity`` = flops / bytes; ``dtype_bytes`` from the dtype; ``causal`` from a flag;
* ``tiles`` = ceil(rows / tile_rows) × ceil(P(cols...) / tile_cols) and ``waves`` = tiles / sm_count,
  only when the caller gives the kernel's tile (and the SM count for waves).

Divisibility features (``<dim>_div_<n>``) are not computed.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from klineage.kb.conditions import FEATURES
from klineage.schema.errors import KLineageError
from klineage.schema.manifest import DIM_ROLES, WorkloadManifest

#: Bytes per element of each canonical dtype.
DTYPE_BYTES: Mapping[str, int] = {"fp32": 4, "fp16": 2, "bf16": 2, "fp8": 1, "int8": 1}

_DTYPE_ALIASES: Mapping[str, str] = {
    "fp32": "fp32", "float32": "fp32", "float": "fp32", "f32": "fp32", "torch.float32": "fp32",
    "fp16": "fp16", "float16": "fp16", "half": "fp16", "f16": "fp16", "torch.float16": "fp16",
    "bf16": "bf16", "bfloat16": "bf16", "torch.bfloat16": "bf16",
    "fp8": "fp8", "float8": "fp8", "fp8e4m3": "fp8", "fp8e5m2": "fp8", "float8_e4m3fn": "fp8",
    "float8_e5m2": "fp8", "int8": "int8", "torch.int8": "int8",
}

#: Other spellings accepted for feature names (case-sensitive keys first, then these).
ALIASES: Mapping[str, str] = {
    "m": "M", "n": "N", "k": "K", "b": "B", "h": "H", "s": "S", "d": "D",
    "batch": "B", "heads": "H", "num_heads": "H", "seq_len": "S", "seqlen": "S", "head_dim": "D",
    "n_rows": "rows", "n_cols": "cols", "vocab_size": "vocab", "V": "vocab", "n_elements": "N", "n_elems": "N",
    "sm": "arch", "compute_capability": "arch", "num_sms": "sm_count", "sms": "sm_count",
}

#: The largest magnitude a numeric feature may have (1e18: beyond any real problem's bytes or flops; larger
#: integers cannot be turned into floats for derived features).
MAX_FEATURE_MAGNITUDE = 10**18
_BOOL_FEATURES = frozenset({"causal", "has_tma"})
_INT_FEATURES = frozenset({"M", "N", "K", "B", "H", "S", "D", "rows", "cols", "vocab", "numel", "bytes",
                           "dtype_bytes", "flops", "sm_count", "smem_per_sm", "smem_per_block", "out_elems",
                           "reduce_len", "tiles"})
#: Vocabulary names that are dims of a problem (their roles can be inferred, ``infer_roles``).
DIM_FEATURES = ("M", "N", "K", "B", "H", "S", "D", "rows", "cols", "vocab", "causal")
#: Dim sets a caller's context must give exactly (flags aside) for ``problem_features`` to derive
#: the portable features: a partial shape (``M`` alone) derives nothing rather than inventing a 1.
COMPLETE_DIM_SETS = (frozenset("MNK"), frozenset("BMNK"), frozenset("BHSD"), frozenset({"rows", "cols"}),
                     frozenset({"rows", "vocab"}), frozenset("N"), frozenset("BN"))
_TRUE = {"true", "yes", "1", "on"}
_FALSE = {"false", "no", "0", "off"}


class FeatureError(KLineageError, ValueError):
    """A context value that cannot be a feature: unknown name or a value of the wrong kind; says why."""


def _known_names() -> str:
    return ", ".join(sorted(FEATURES))


def canonical_name(name: str) -> str:
    """The vocabulary name for ``name`` (``seq_len`` -> ``S``, ``m`` -> ``M``); FeatureError if none."""
    key = str(name).strip()
    if key in FEATURES:
        return key
    if key in ALIASES:
        return ALIASES[key]
    lowered = key.lower()
    if lowered in ALIASES:
        return ALIASES[lowered]
    for feature in FEATURES:
        if feature.lower() == lowered and len(feature) > 1:
            return feature
    raise FeatureError(f"unknown feature {name!r} in the context; known features: {_known_names()}")


def canonical_dtype(value: Any) -> str:
    """``'bfloat16'``/``torch.bfloat16``/``'bf16'`` -> ``'bf16'`` etc.; FeatureError for anything else."""
    text = str(value).strip().lower().replace("-", "").replace(" ", "")
    if text in _DTYPE_ALIASES:
        return _DTYPE_ALIASES[text]
    raise FeatureError(f"dtype {value!r}: expected one of {', '.join(DTYPE_BYTES)} (or a torch dtype name)")


def canonical_arch(value: Any) -> int:
    """Compute capability as an int: 90, ``'90'``, ``'sm_90'``, ``'sm_90a'``, ``'9.0'`` -> 90."""
    if isinstance(value, bool):
        raise FeatureError(f"arch {value!r}: expected a compute capability such as 90 or 'sm_90'")
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value < 20:
        return round(value * 10)
    if isinstance(value, float) and value.is_integer():
        return int(value)
    text = str(value).strip().lower()
    match = re.fullmatch(r"(?:sm_?|compute_?)?(\d+)a?", text)
    if match:
        return int(match.group(1))
    match = re.fullmatch(r"(\d+)\.(\d)", text)
    if match:
        return int(match.group(1)) * 10 + int(match.group(2))
    raise FeatureError(f"arch {value!r}: expected a compute capability such as 90 or 'sm_90'")


def _as_bool(name: str, value: Any) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, (int, float)) and value in (0, 1):
        return bool(value)
    text = str(value).strip().lower()
    if text in _TRUE:
        return True
    if text in _FALSE:
        return False
    raise FeatureError(f"{name} {value!r}: expected true or false")


def _check_magnitude(name: str, value: Any) -> None:
    """FeatureError when ``value`` is a number (not a bool) larger in magnitude than MAX_FEATURE_MAGNITUDE."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return
    if isinstance(value, float) and not math.isfinite(value):
        return
    if abs(value) > MAX_FEATURE_MAGNITUDE:
        shown = f"{value:.3g}" if isinstance(value, float) else f"an integer of {len(str(abs(value)))} digits"
        raise FeatureError(f"{name} {shown}: magnitude over the limit of {MAX_FEATURE_MAGNITUDE:.0e}")


def _as_number(name: str, value: Any) -> int | float:
    if isinstance(value, bool):
        raise FeatureError(f"{name} {value!r}: expected a number")
    _check_magnitude(name, value)
    if isinstance(value, int):
        return value
    if isinstance(value, float):
        if not math.isfinite(value):
            raise FeatureError(f"{name} {value!r}: expected a finite number")
        return int(value) if value.is_integer() and name in _INT_FEATURES else value
    text = str(value).strip().replace("_", "")
    try:
        whole = int(text)
    except ValueError:
        pass
    else:
        _check_magnitude(name, whole)
        return whole
    try:
        number = float(text)
    except ValueError:
        raise FeatureError(f"{name} {value!r}: expected a number") from None
    return _as_number(name, number)


def _scalar(name: str, value: Any) -> Any:
    _check_magnitude(name, value)
    if name == "dtype":
        return canonical_dtype(value)
    if name == "arch":
        return canonical_arch(value)
    if name in _BOOL_FEATURES:
        return _as_bool(name, value)
    if name in _INT_FEATURES or name in ("arithmetic_intensity", "waves"):
        return _as_number(name, value)
    if isinstance(value, (bool, int, float)):
        return value
    if isinstance(value, str):
        text = value.strip()
        lowered = text.lower()
        if lowered in ("true", "false"):
            return lowered == "true"
        try:
            return _as_number(name, text)
        except FeatureError:
            return text
    raise FeatureError(f"{name} {value!r}: expected a number, a string or a boolean")


def problem_features(context: Mapping[str, Any] | None) -> dict[str, Any]:
    """Canonical features from a caller's context; derived features added; nothing invented.

    Names go through ``canonical_name`` (an unknown name raises FeatureError listing the known
    ones); values through the feature's type (numbers from strings, ``'sm_90'`` -> 90, ``'bfloat16'``
    -> ``'bf16'``, ``'true'`` -> True). ``None`` values are dropped (unknown). Derived, when their
    inputs are all present and the caller did not give them: ``dtype_bytes``; ``numel`` (rows×cols,
    rows×vocab, B×H×S×D, M×N for a GEMM's output, or N alone); ``has_tma`` = arch >= 90; and, when
    the dims given are exactly one of ``COMPLETE_DIM_SETS`` (flags aside), the portable features of
    ``portable_features`` with the roles ``infer_roles`` gives them (``bytes`` needs the dtype):
    the same values ``case_features`` computes for that shape, so an induced rule evaluates alike
    on its evidence and on a caller's context. ``arithmetic_intensity`` = flops / bytes when both
    are known (given or derived).
    """
    out: dict[str, Any] = {}
    for raw_name, value in (context or {}).items():
        name = canonical_name(raw_name)
        if value is None:
            continue
        scalar = _scalar(name, value)
        if name in out and out[name] != scalar:
            raise FeatureError(f"feature {name} given twice with different values "
                               f"({out[name]!r}, {scalar!r})")
        out[name] = scalar
    derived = _derive(out)
    for name, value in derived.items():
        out.setdefault(name, value)
    dims = {k: v for k, v in out.items() if k in DIM_FEATURES}
    if frozenset(k for k in dims if k != "causal") in COMPLETE_DIM_SETS:
        portable = portable_features(dims, infer_roles(dims), out.get("dtype_bytes"))
        for name, value in portable.items():
            out.setdefault(name, value)
    if "flops" in out and "bytes" in out and out["bytes"]:
        out.setdefault("arithmetic_intensity", round(out["flops"] / out["bytes"], 6))
    return out


def _ints(f: Mapping[str, Any], *names: str) -> list[int | float] | None:
    values = [f.get(n) for n in names]
    if any(v is None or isinstance(v, bool) or not isinstance(v, (int, float)) for v in values):
        return None
    return values  # type: ignore[return-value]


def _derive(f: Mapping[str, Any]) -> dict[str, Any]:
    d: dict[str, Any] = {}
    if "dtype" in f and f["dtype"] in DTYPE_BYTES:
        d["dtype_bytes"] = DTYPE_BYTES[f["dtype"]]
    attn = _ints(f, "B", "H", "S", "D")
    if (rc := _ints(f, "rows", "cols")) is not None:
        d["numel"] = rc[0] * rc[1]
    elif (rv := _ints(f, "rows", "vocab")) is not None:
        d["numel"] = rv[0] * rv[1]
    elif attn is not None:
        d["numel"] = math.prod(attn)
    elif (mn := _ints(f, "M", "N")) is not None:
        d["numel"] = mn[0] * mn[1]
    elif "N" in f and _ints(f, "N") is not None and not any(k in f for k in ("M", "K", "rows", "cols")):
        d["numel"] = f["N"]
    if isinstance(f.get("arch"), int) and not isinstance(f.get("arch"), bool):
        d["has_tma"] = f["arch"] >= 90
    return d


def kernel_feature_values(features: Mapping[str, Any] | None) -> dict[str, Any]:
    """Kernel features usable by conditions: scalar values only; None (not fixed by the source) is absent."""
    out: dict[str, Any] = {}
    for name, value in (features or {}).items():
        if value is None or not isinstance(value, (bool, int, float, str)):
            continue
        if isinstance(value, float) and not math.isfinite(value):
            continue
        out[str(name)] = value
    return out


# ------------------------------------------------------------------------------------ roles


def _role_name(dim: str) -> str | None:
    try:
        return canonical_name(dim)
    except FeatureError:
        return None


def infer_roles(shape: Mapping[str, Any], family: str | None = None) -> dict[str, str]:
    """The role (``schema.manifest.DIM_ROLES``) of every dim of ``shape``, from its name and the family.

    Rules, on the vocabulary name of each dim (``canonical_name``: ``seq_len`` is ``S``, ``n_rows`` is
    ``rows``): a boolean value is a ``flag``; ``B`` and ``H`` are ``batch``; ``M`` and ``rows`` are
    ``rows``; ``K`` and ``vocab`` are ``reduce``; ``S`` is ``seq``; ``D`` is ``head_dim``; ``cols`` is
    ``cols`` in a ``gemm`` family and ``reduce_kept`` otherwise (a row-wise operation whose output
    keeps the row: softmax, norms); ``N`` is ``elements`` when no other non-batch, non-flag dim is
    given (a 1-D problem) and ``cols`` otherwise. Any other name raises FeatureError naming the dim
    and asking for a ``[workload.roles]`` entry. Pure: the same shape and family give the same roles.
    """
    names = {dim: _role_name(dim) for dim in shape}
    others = {n for dim, n in names.items() if n not in (None, "N", "B", "H") and not isinstance(shape[dim], bool)}
    out: dict[str, str] = {}
    for dim, name in names.items():
        if isinstance(shape[dim], bool):
            out[dim] = "flag"
        elif name in ("B", "H"):
            out[dim] = "batch"
        elif name in ("M", "rows"):
            out[dim] = "rows"
        elif name in ("K", "vocab"):
            out[dim] = "reduce"
        elif name == "S":
            out[dim] = "seq"
        elif name == "D":
            out[dim] = "head_dim"
        elif name == "cols":
            out[dim] = "cols" if family == "gemm" else "reduce_kept"
        elif name == "N":
            out[dim] = "cols" if others else "elements"
        else:
            raise FeatureError(f"cannot infer the role of dim {dim!r} (family {family!r}): declare it in the "
                               f"manifest's [workload.roles] as one of {', '.join(DIM_ROLES)}")
    return out


def resolve_roles(shape: Mapping[str, Any], roles: Mapping[str, str] | None = None,
                  family: str | None = None) -> dict[str, str]:
    """Declared ``roles`` where given, ``infer_roles`` for the other dims of ``shape``; FeatureError for
    a declared role outside ``DIM_ROLES`` or a dim whose role cannot be inferred."""
    declared = dict(roles or {})
    for dim, role in declared.items():
        if role not in DIM_ROLES:
            raise FeatureError(f"dim {dim!r}: role {role!r} is not one of {', '.join(DIM_ROLES)}")
    rest = {d: v for d, v in shape.items() if d not in declared}
    return {**infer_roles(rest, family), **{d: r for d, r in declared.items() if d in shape}}


def manifest_roles(manifest: WorkloadManifest) -> dict[str, str]:
    """The role of every dim of a workload's shapes (GPU and CPU grids): its declared
    ``[workload.roles]`` where given, ``infer_roles`` (with its family) elsewhere; FeatureError
    naming the manifest when a dim has neither."""
    roles: dict[str, str] = {}
    for shape in (*manifest.shapes, *manifest.cpu_shapes):
        try:
            roles.update(resolve_roles(shape, manifest.roles, manifest.family))
        except FeatureError as exc:
            raise FeatureError(f"{manifest.directory / 'manifest.toml'}: {exc}") from exc
    return roles


def portable_features(shape: Mapping[str, Any], roles: Mapping[str, str], dtype_bytes: int | None = None,
                      tile_rows: int | None = None, tile_cols: int | None = None,
                      sm_count: int | None = None) -> dict[str, Any]:
    """The portable features of one shape (module docstring gives each formula), from its dims'
    ``roles``; a feature whose inputs are missing stays absent. ``dtype_bytes`` None: no ``bytes``
    (and no ``arithmetic_intensity``). Raises FeatureError for a dim without a role or a role outside
    ``DIM_ROLES``."""
    by_role: dict[str, list[int]] = {}
    causal: bool | None = None
    for dim, value in shape.items():
        role = roles.get(dim)
        if role is None or role not in DIM_ROLES:
            raise FeatureError(f"dim {dim!r} has no known role (roles given: {dict(roles)!r})")
        if role == "flag":
            if _role_name(dim) == "causal" and isinstance(value, bool):
                causal = value
            continue
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise FeatureError(f"dim {dim!r} = {value!r}: expected a number (its role is {role})")
        by_role.setdefault(role, []).append(int(value))

    def prod(*names: str) -> int:
        return math.prod(v for n in names for v in by_role.get(n, ()))

    def has(*names: str) -> bool:
        return any(n in by_role for n in names)

    out: dict[str, Any] = {}
    batch = prod("batch")
    if causal is not None:
        out["causal"] = causal
    out_cols = prod("cols", "head_dim", "reduce_kept")
    rows: int | None = None
    in_elems: int | None = None
    if has("rows", "seq") or (has("batch") and not has("elements")):
        rows = batch * prod("rows", "seq")
        out["rows"] = rows
        out["out_elems"] = rows * out_cols
    elif has("elements"):
        out["out_elems"] = batch * prod("elements")
        in_elems = out["out_elems"]
    if has("reduce", "reduce_kept", "seq"):
        out["reduce_len"] = prod("reduce", "reduce_kept", "seq")
    reduce_len = out.get("reduce_len")
    if rows is not None:
        if has("seq") and has("head_dim"):  # attention: Q, K, V
            flops = 4 * rows * (reduce_len or 1) * prod("head_dim")
            out["flops"] = flops // 2 if causal else flops
            in_elems = 3 * rows * prod("head_dim")
        elif has("reduce") and has("cols"):  # a contraction: A (rows, reduce) and B (reduce, cols)
            out["flops"] = 2 * rows * prod("cols") * (reduce_len or 1)
            in_elems = rows * (reduce_len or 1) + batch * (reduce_len or 1) * prod("cols")
        else:  # a row operation over a (rows, reduce_len) matrix
            in_elems = rows * (reduce_len or 1) * prod("cols", "head_dim")
    if dtype_bytes is not None and in_elems is not None and "out_elems" in out:
        out["bytes"] = int((in_elems + out["out_elems"]) * dtype_bytes)
    if "flops" in out and out.get("bytes"):
        out["arithmetic_intensity"] = round(out["flops"] / out["bytes"], 6)
    if tile_rows and rows is not None:
        tiles = -(-rows // int(tile_rows))
        if tile_cols:
            tiles *= -(-out_cols // int(tile_cols))
        out["tiles"] = tiles
        if sm_count:
            out["waves"] = round(tiles / int(sm_count), 6)
    return out


def case_features(shape: Mapping[str, int | bool], dtype: str | None, roles: Mapping[str, str] | None = None,
                  family: str | None = None, flops: float | None = None, bytes_moved: float | None = None,
                  arch: Any = None, tile_rows: int | None = None, tile_cols: int | None = None,
                  sm_count: int | None = None) -> dict[str, Any]:
    """The features of one case: its workload-local dims as given (context only: induced rules do
    not use them), ``dtype`` and ``dtype_bytes``, the portable features (``portable_features`` over
    ``resolve_roles(shape, roles, family)``), and ``arch`` / ``has_tma`` when ``arch`` is given.

    ``flops`` / ``bytes_moved``: measured or recorded values that replace the estimates (and
    ``arithmetic_intensity`` is recomputed from them). The one function the walker, extraction and
    the agent call. Raises FeatureError for a bad dtype or arch, a declared role outside
    ``DIM_ROLES``, or a dim whose role is neither declared nor inferable (the message says to
    declare it in ``[workload.roles]``).
    """
    out: dict[str, Any] = dict(shape)
    width: int | None = None
    if dtype is not None:
        out["dtype"] = canonical_dtype(dtype)
        width = DTYPE_BYTES[out["dtype"]]
        out["dtype_bytes"] = width
    out.update(portable_features(shape, resolve_roles(shape, roles, family), width, tile_rows, tile_cols,
                                 sm_count))
    if flops is not None:
        out["flops"] = int(_as_number("flops", flops))
    if bytes_moved is not None:
        out["bytes"] = int(_as_number("bytes", bytes_moved))
    if out.get("flops") is not None and out.get("bytes"):
        out["arithmetic_intensity"] = round(out["flops"] / out["bytes"], 6)
    if arch is not None and arch != "":
        out["arch"] = canonical_arch(arch)
        out["has_tma"] = out["arch"] >= 90
    if sm_count is not None:
        out["sm_count"] = int(sm_count)
    return out


@dataclass(frozen=True)
class WorkloadContext:
    """A workload's shape as a search context (``workload_context``) and the dims it had to leave out."""

    context: dict[str, Any]
    left_out: tuple[str, ...] = ()

    def note(self, manifest: WorkloadManifest) -> str:
        """One line for the user when dims were left out (empty otherwise): which, and how to fix it."""
        if not self.left_out:
            return ""
        return (f"{manifest.directory / 'manifest.toml'}: dim(s) {', '.join(self.left_out)} have no role the "
                f"conditions know, so the search context leaves them out and conditions over the portable "
                f"features (rows, reduce_len, bytes, ...) stay unknown: declare them in [workload.roles] as one "
                f"of {', '.join(DIM_ROLES)}")


def workload_context(manifest: WorkloadManifest, shape: Mapping[str, Any] | None = None,
                     arch: int | None = None) -> WorkloadContext:
    """``shape`` (default: the manifest's representative shape) and its first dtype as a search context:
    the portable features (``case_features`` over the manifest's dim roles) plus the dims whose names the
    condition language knows. When a dim has no role (neither declared nor inferable) the portable features
    cannot be computed: the context is then the dims the language knows and the dtype, and the others are
    named in ``left_out`` (never renamed by guess). The one function behind ``Problem.search_context`` and
    ``klineage search --workload``."""
    shape = dict(shape if shape is not None else manifest.representative_shape())
    dtype = manifest.dtypes[0]
    portable = True
    try:
        features = case_features(shape, dtype, manifest_roles(manifest), manifest.family, arch=arch)
    except FeatureError:  # a dim without a role: the local names are all search can use
        portable = False
        features = {**shape, "dtype": dtype, **({"arch": arch} if arch is not None else {})}
    context: dict[str, Any] = {}
    left_out: list[str] = []
    for name, value in features.items():
        if value is None:
            continue
        try:
            context[canonical_name(name)] = value
        except FeatureError:  # a local name: with roles the portable features carry it, else it is lost
            if not portable:
                left_out.append(name)
    return WorkloadContext(context, tuple(left_out))

