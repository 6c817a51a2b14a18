"""The condition language: whitelist parsing, three-valued (Kleene) evaluation, deciding clauses."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from klineage.kb.conditions import (
    ARCH_FEATURES,
    FEATURES,
    KERNEL_FEATURES,
    PROBLEM_FEATURES,
    ConditionError,
    Verdict,
    check_features,
    evaluate,
    parse_condition,
    validate_condition,
)


@pytest.mark.parametrize(
    ("expr", "features", "value", "decided_by"),
    [
        ("K % 64 == 0", {"K": 4096}, True, "K % 64 == 0"),
        ("K % 64 == 0", {"K": 1000}, False, "K % 64 == 0"),
        ("K % 64 == 0", {}, None, "K % 64 == 0"),
        ("M * N >= 2 ** 22", {"M": 4096, "N": 1024}, True, "M * N >= 2 ** 22"),
        ("M * N >= 2 ** 22", {"M": 1024, "N": 1024}, False, "M * N >= 2 ** 22"),
        ("dtype in ('bf16', 'fp16')", {"dtype": "fp32"}, False, "dtype in ('bf16', 'fp16')"),
        ("dtype not in ['fp32']", {"dtype": "bf16"}, True, "dtype not in ['fp32']"),
        ("arch in {80, 90}", {"arch": 90}, True, "arch in {80, 90}"),
        ("K % 64 == 0 and M > 0", {"M": -1}, False, "M > 0"),  # False and unknown = False
        ("K % 64 == 0 and M > 0", {"M": 5}, None, "K % 64 == 0"),  # True and unknown = unknown
        ("K % 64 == 0 or M > 0", {"M": 5}, True, "M > 0"),  # unknown or True = True
        ("K % 64 == 0 or M > 0", {"M": -5}, None, "K % 64 == 0"),  # unknown or False = unknown
        ("has_dot and has_k_loop", {"has_dot": True, "has_k_loop": True}, True, "has_dot and has_k_loop"),
        ("has_dot or has_k_loop", {"has_dot": False, "has_k_loop": False}, False, "has_dot or has_k_loop"),
        ("not has_dot", {"has_dot": False}, True, "has_dot"),
        ("not has_dot", {}, None, "has_dot"),
        ("0 < cols <= 8192", {"cols": 4096}, True, "0 < cols <= 8192"),
        ("0 < cols <= 8192", {"cols": 10000}, False, "cols <= 8192"),
        ("0 < cols <= M", {"cols": -1}, False, "0 < cols"),  # a false link decides even with M unknown
        ("0 < cols <= M", {"cols": 5}, None, "cols <= M"),
        ("-K < -1", {"K": 4}, True, "-K < -1"),
        ("(M + N) // 2 - K / 4 > 1.5", {"M": 4, "N": 4, "K": 4}, True, "(M + N) // 2 - K / 4 > 1.5"),
        ("causal == True", {"causal": False}, False, "causal == True"),
        ("num_stages", {"num_stages": None}, None, "num_stages"),  # None means not fixed: unknown
    ],
)
def test_evaluation(expr: str, features: dict[str, Any], value: bool | None, decided_by: str) -> None:
    verdict = evaluate(expr, features)
    assert verdict.value is value
    assert verdict.decided_by == decided_by


def test_verdict_lists_missing_features() -> None:
    verdict = evaluate("K % 64 == 0 and M > 0 and dtype == 'bf16'", {"dtype": "bf16"})
    assert verdict == Verdict(None, "K % 64 == 0", ("K", "M"), None)


@pytest.mark.parametrize(
    ("expr", "features", "error"),
    [
        ("dtype > 3", {"dtype": "bf16"}, "cannot compare str with int"),
        ("K % 0 == 1", {"K": 4}, "modulo"),
        ("K ** 2 > 1", {"K": 2**100}, "power too large"),  # constant powers too large are refused at parse
        ("dtype * 3 == 'x'", {"dtype": "bf16"}, "arithmetic on str"),
        ("1 / (K - K) > 0", {"K": 3}, "division"),
    ],
)
def test_evaluation_errors_make_the_clause_unknown(expr: str, features: dict[str, Any], error: str) -> None:
    verdict = evaluate(expr, features)
    assert verdict.value is None
    assert verdict.error is not None and error in verdict.error


def test_an_error_in_one_clause_does_not_hide_a_false_one() -> None:
    verdict = evaluate("dtype > 3 and M > 10", {"dtype": "bf16", "M": 1})
    assert verdict.value is False and verdict.decided_by == "M > 10"


FORBIDDEN = [
    ("__import__('os')", "a function call"),
    ("x.y", "attribute access"),
    ("f(1)", "a function call"),
    ("a[0]", "subscripting"),
    ("lambda: 1", "a lambda"),
    ("[x for x in y]", "a comprehension"),
    ("{x: 1 for x in y}", "a comprehension"),
    ("(x for x in y)", "a generator expression"),
    ("f'{x}'", "an f-string"),
    ("_secret > 1", "names starting with '_'"),
    ("(y := 1)", "an assignment"),
    ("a if b else c", "a conditional expression"),
    ("{'a': 1}", "a dict literal"),
    ("1 | 2", "a bitwise operator"),
    ("~M", "a bitwise operator"),
    ("M @ N", "matrix multiplication"),
    ("M is None", "`is`"),
    ("M == None", "the constant None"),
    ("b'x' == M", "the constant b'x'"),
    ("M in N", "tuple/list/set literal"),
    ("M in (N, 1)", "non-constant element"),
    ("(1, 2) == M", "collection literal"),
    ("M > ...", "the constant Ellipsis"),
    ("().__class__", "attribute access"),
    ("M.__class__.__bases__", "attribute access"),
    ("x == 1j", "the constant 1j"),
]


@pytest.mark.parametrize(("expr", "construct"), FORBIDDEN)
def test_non_whitelisted_constructs_are_refused(expr: str, construct: str) -> None:
    with pytest.raises(ConditionError) as info:
        parse_condition(expr)
    message = str(info.value)
    assert construct in message, message
    assert "column" in message and "allowed:" in message


@pytest.mark.parametrize("expr", ["", "   ", "M >", "M > 1 and", "import os", "M = 1", "x" * 3000])
def test_malformed_text_is_a_condition_error(expr: str) -> None:
    with pytest.raises(ConditionError):
        parse_condition(expr)


def test_the_error_points_at_the_column() -> None:
    with pytest.raises(ConditionError, match="attribute access at column 11"):
        parse_condition("K > 1 and x.y")


TEMPLATES = ["{}", "M > 1 and ({})", "not ({})", "({}) + 1 > 2", "K in (1, 2) or {}", "0 < ({}) < 3"]


@settings(max_examples=200, deadline=None)
@given(bad=st.sampled_from([e for e, _ in FORBIDDEN]), template=st.sampled_from(TEMPLATES))
def test_forbidden_constructs_are_refused_anywhere(bad: str, template: str) -> None:
    with pytest.raises(ConditionError):
        parse_condition(template.format(bad))


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=40))
def test_arbitrary_text_parses_or_raises_condition_error(text: str) -> None:
    try:
        compiled = parse_condition(text)
    except ConditionError:
        return
    verdict = compiled.evaluate({})
    assert verdict.value in (True, False, None)


# --- Kleene logic, checked against a reference on random formulas ---------------------------------

NAMES = ("M", "N", "K")


def formulas() -> st.SearchStrategy[Any]:
    leaf = st.sampled_from(NAMES).map(lambda n: ("var", n))
    return st.recursive(leaf, lambda inner: st.one_of(
        inner.map(lambda f: ("not", f)),
        st.tuples(st.sampled_from(["and", "or"]), st.lists(inner, min_size=2, max_size=3)),
    ), max_leaves=8)


def render(f: Any) -> str:
    if f[0] == "var":
        return f"{f[1]} > 0"
    if f[0] == "not":
        return f"not ({render(f[1])})"
    op, parts = f
    return "(" + f" {op} ".join(render(p) for p in parts) + ")"


def kleene(f: Any, env: dict[str, bool | None]) -> bool | None:
    if f[0] == "var":
        return env[f[1]]
    if f[0] == "not":
        inner = kleene(f[1], env)
        return None if inner is None else not inner
    op, parts = f
    values = [kleene(p, env) for p in parts]
    if op == "and":
        return False if False in values else (None if None in values else True)
    return True if True in values else (None if None in values else False)


truth = st.sampled_from([True, False, None])


@settings(max_examples=150, deadline=None)
@given(f=formulas(), m=truth, n=truth, k=truth)
def test_three_valued_logic_matches_kleene(f: Any, m: bool | None, n: bool | None, k: bool | None) -> None:
    env = {"M": m, "N": n, "K": k}
    features = {name: (1 if v else -1) for name, v in env.items() if v is not None}
    verdict = evaluate(render(f), features)
    assert verdict.value is kleene(f, env)
    if verdict.value is not None:
        # the deciding clause alone, re-evaluated, settles the same way (or its negation does, under `not`)
        alone = evaluate(verdict.decided_by, features).value
        assert alone is not None
    assert set(verdict.unknown) == {name for name, v in env.items() if v is None} & set(
        parse_condition(render(f)).names)


@settings(max_examples=100, deadline=None)
@given(a=formulas(), b=formulas(), m=truth, n=truth, k=truth)
def test_kleene_laws(a: Any, b: Any, m: bool | None, n: bool | None, k: bool | None) -> None:
    features = {name: (1 if v else -1) for name, v in {"M": m, "N": n, "K": k}.items() if v is not None}

    def value(expr: str) -> bool | None:
        return evaluate(expr, features).value

    ra, rb = render(a), render(b)
    assert value(f"not ({ra} and {rb})") is value(f"(not {ra}) or (not {rb})")  # De Morgan
    assert value(f"not ({ra} or {rb})") is value(f"(not {ra}) and (not {rb})")
    assert value(f"not (not {ra})") is value(ra)  # double negation
    assert value(f"{ra} and {rb}") is value(f"{rb} and {ra}")  # commutativity
    assert value(f"{ra} or ({ra} and {rb})") is value(ra)  # absorption
    if value(ra) is False:
        assert value(f"{ra} and {rb}") is False  # False dominates and
    if value(ra) is True:
        assert value(f"{ra} or {rb}") is True  # True dominates or


# --- vocabulary ---------------------------------------------------------------------------------

def test_check_features_reports_unknown_names() -> None:
    assert check_features("K % 64 == 0 and colz > 3 and has_dot") == ("colz",)
    assert check_features("K > 1", {"M"}) == ("K",)
    with pytest.raises(ConditionError, match="unknown feature"):
        validate_condition("colz > 3")
    assert validate_condition("dtype in ('bf16',) and arch >= 90").names == {"dtype", "arch"}


def test_vocabulary_groups() -> None:
    assert {"M", "N", "K", "rows", "cols", "numel", "bytes", "dtype", "arithmetic_intensity"} <= set(PROBLEM_FEATURES)
    assert set(ARCH_FEATURES) >= {"arch", "sm_count", "smem_per_sm", "has_tma"}
    assert {"has_dot", "has_k_loop", "num_stages", "uses_autotune", "row_reduction", "persistent"} <= set(
        KERNEL_FEATURES)
    assert set(PROBLEM_FEATURES) | set(ARCH_FEATURES) | set(KERNEL_FEATURES) == FEATURES
    assert all(not name.startswith("_") and name.isidentifier() for name in FEATURES)


def test_kernel_vocabulary_covers_what_the_source_analysis_computes() -> None:
    from klineage.transforms import features

    missing = set(features.KERNEL_FEATURES) - set(KERNEL_FEATURES)
    assert not missing, f"kernel features computed by transforms but unknown to conditions: {sorted(missing)}"


def test_every_operator_anchor_predicate_is_a_valid_condition() -> None:
    """Skills carry their operator's anchor predicate into the KB, which refuses invalid expressions."""
    from klineage.transforms.registry import all_operators

    for op in all_operators():
        validate_condition(op.anchor_predicate)
