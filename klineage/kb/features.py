"""Normalize a caller's problem context into condition-language features (pure functions).

``problem_features`` accepts what a CLI (``-c M=4096 -c dtype=bf16``), a GraphQL JSON object or a
workload manifest shape gives, canonicalizes names and values, and derives ``numel``, ``bytes``,
``dtype_bytes``, ``flops``, ``arithmetic_intensity`` and ``has_tma`` from what was given. Nothing is
defaulted: a feature the caller did not give (and that cannot be derived from what was given)
stays absent, so conditions on it evaluate to *unknown*.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from typing import Any

from klineage.kb.conditions import FEATURES

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
    "n_rows": "rows", "n_cols": "cols", "vocab_size": "vocab", "V": "vocab",
    "sm": "arch", "compute_capability": "arch", "num_sms": "sm_count", "sms": "sm_count",
}

_BOOL_FEATURES = frozenset({"causal", "has_tma"})
_INT_FEATURES = frozenset({"M", "N", "K", "B", "H", "S", "D", "rows", "cols", "vocab", "numel", "bytes",
                           "dtype_bytes", "flops", "sm_count", "smem_per_sm", "smem_per_block"})
_TRUE = {"true", "yes", "1", "on"}
_FALSE = {"false", "no", "0", "off"}


class FeatureError(ValueError):
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


def _as_number(name: str, value: Any) -> int | float:
    if isinstance(value, bool):
        raise FeatureError(f"{name} {value!r}: expected a number")
    if isinstance(value, int):
        return value
    if isinstance(value, float):
        if not math.isfinite(value):
            raise FeatureError(f"{name} {value!r}: expected a finite number")
        return int(value) if value.is_integer() and name in _INT_FEATURES else value
    text = str(value).strip().replace("_", "")
    try:
        return int(text)
    except ValueError:
        pass
    try:
        number = float(text)
    except ValueError:
        raise FeatureError(f"{name} {value!r}: expected a number") from None
    return _as_number(name, number)


def _scalar(name: str, value: Any) -> Any:
    if name == "dtype":
        return canonical_dtype(value)
    if name == "arch":
        return canonical_arch(value)
    if name in _BOOL_FEATURES:
        return _as_bool(name, value)
    if name in _INT_FEATURES or name == "arithmetic_intensity":
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
    rows×vocab, B×H×S×D, M×N for a GEMM's output, or N alone); ``bytes`` = numel × dtype_bytes;
    ``flops`` and ``arithmetic_intensity`` (flops per byte of compulsory traffic) for GEMM
    (M, N, K) and attention (B, H, S, D; halved flops when causal); ``has_tma`` = arch >= 90.
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
    width = f.get("dtype_bytes", d.get("dtype_bytes"))
    gemm, attn = _ints(f, "M", "N", "K"), _ints(f, "B", "H", "S", "D")
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
    numel = f.get("numel", d.get("numel"))
    if numel is not None and width is not None:
        d["bytes"] = int(numel * width)
    if gemm is not None:
        m, n, k = gemm
        d["flops"] = int(2 * m * n * k)
        if width is not None and (m * k + k * n + m * n) > 0:
            d["arithmetic_intensity"] = round(2 * m * n * k / ((m * k + k * n + m * n) * width), 6)
    elif attn is not None:
        b, h, s, dim = attn
        flops = 4 * b * h * s * s * dim
        if f.get("causal") is True:
            flops //= 2
        d["flops"] = int(flops)
        if width is not None and b * h * s * dim > 0:
            d["arithmetic_intensity"] = round(flops / (4 * b * h * s * dim * width), 6)
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
