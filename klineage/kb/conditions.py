"""The condition language (DESIGN.md, "Conditions"): a small, safe expression language over features.

An expression is parsed with ``ast`` (mode ``"eval"``) and checked against a whitelist:

* feature names (never starting with ``_``), numbers, strings, ``True``/``False``;
* comparisons ``== != < <= > >=`` (chained comparisons too: ``0 < K <= 8192``);
* ``in`` / ``not in`` with a tuple, list or set literal of constants on the right
  (``dtype in ('bf16', 'fp16')``);
* ``and``, ``or``, ``not``;
* arithmetic on numbers: ``+ - * / // % **`` and unary ``-`` / ``+``.

Anything else (calls, attributes, subscripts, lambdas, comprehensions, f-strings, walrus, ...) raises
``ConditionError`` naming the construct and its column. Evaluation never runs Python code: it walks
the checked tree.

Bounds, checked at parse so that a stored expression can always be evaluated: at most
``MAX_EXPRESSION_CHARS`` characters, ``MAX_NODES`` syntax nodes, ``MAX_DEPTH`` levels of nesting
(tree and parentheses); ASCII only (full-width letters would NFKC-normalize into feature names), no
comments; a power's exponent is a number constant of magnitude at most ``MAX_POWER_EXPONENT``; and the
constant parts must evaluate (no ``1 / 0``, no ``'a' + 1``). Parsed expressions are cached, at most
``PARSE_CACHE_SIZE`` of them (least recently used first out).

Evaluation is three-valued (Kleene logic): a feature the caller did not supply is *unknown*, and
unknown propagates through arithmetic and comparisons; ``False and unknown`` is False, ``True or
unknown`` is True, ``not unknown`` is unknown. The ``Verdict`` says which clause decided.

The feature vocabulary is declared here once (``FEATURES``): problem features, architecture
features and kernel features. ``PORTABLE_FEATURES`` is the subset of problem features that means the
same thing on every workload (bytes, flops, rows, reduce_len, ...): induced rules use only those.
The kernel features are declared once, in ``klineage.schema.kernel_features`` (``KERNEL_FEATURES``,
``KERNEL_FEATURE_DOCS``): ``klineage.transforms.features`` computes exactly those from source.
"""

from __future__ import annotations

import ast
import io
import math
import tokenize
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, TypeGuard

from klineage.schema import pyast
from klineage.schema.errors import KLineageError
from klineage.schema.kernel_features import KERNEL_FEATURE_DOCS as KERNEL_FEATURE_DOCS  # re-exported
from klineage.schema.kernel_features import KERNEL_FEATURES as KERNEL_FEATURES  # re-exported

MAX_EXPRESSION_CHARS = 2000
MAX_NODES = 200
MAX_DEPTH = 16
MAX_POWER_EXPONENT = 64
MAX_INT_BITS = 4096
PARSE_CACHE_SIZE = 1024

#: Problem features: what the caller's problem looks like (``kb.features.problem_features``).
PROBLEM_FEATURE_DOCS: Mapping[str, str] = {
    "M": "rows of A / C in a GEMM (int)",
    "N": "columns of B / C in a GEMM, or the length of a 1-D problem (int)",
    "K": "reduction length of a GEMM (int)",
    "B": "batch size (int)",
    "H": "number of attention heads (int)",
    "S": "sequence length (int)",
    "D": "head dimension (int)",
    "rows": ("independent output rows (int; portable): a row-wise operation's rows, a GEMM's M (x batch), "
             "attention's B*H*S query rows"),
    "cols": "columns (row length) of a row-wise operation (int)",
    "vocab": "vocabulary size of a cross-entropy (row length) (int)",
    "causal": "attention with a causal mask (bool)",
    "dtype": "input element type: 'fp32', 'fp16' or 'bf16' (str)",
    "dtype_bytes": "bytes per input element (int; derived from dtype)",
    "numel": "elements of the main input (int; derived from the shape; workload-local, not portable)",
    "bytes": ("compulsory memory traffic in bytes (int; portable): the inputs the dim roles imply plus the "
              "output, at dtype_bytes per element, or the value a measurement recorded"),
    "flops": ("floating-point operations (int; portable): 2*rows*cols*reduce_len for a contraction (GEMM), "
              "4*B*H*S*S*D for attention (halved when causal), or the value a measurement recorded"),
    "arithmetic_intensity": "flops per byte of compulsory traffic (float; portable; derived: flops / bytes)",
    "out_elems": "elements of the output (int; portable): rows x output columns, or the elements of an "
                 "elementwise problem",
    "reduce_len": ("length of the reduced dimension (int; portable): K of a GEMM, the row length of a row "
                   "reduction (cols, vocab), the key length S of attention"),
    "tiles": "output tiles at the kernel's tile size (int; portable; only when a tile is known)",
    "waves": "tiles / sm_count: waves of programs over the GPU (float; portable; only when both are known)",
}

#: Portable problem features: meaningful on every workload whatever its dims are called (computed
#: by ``kb.features.case_features`` from a shape and its dim roles). Induced PROFITABLE_WHEN and
#: VALID_WHEN rules are written over these only, never over a workload's own dim names.
PORTABLE_FEATURES: tuple[str, ...] = ("bytes", "flops", "arithmetic_intensity", "dtype_bytes", "out_elems",
                                      "reduce_len", "rows", "tiles", "waves", "causal")

#: Architecture features: the GPU the code will run on.
ARCH_FEATURE_DOCS: Mapping[str, str] = {
    "arch": "compute capability as an integer: 80 for sm_80 (A100), 90 for sm_90 (H100/H200) (int)",
    "sm_count": "streaming multiprocessors (int; 132 on H200)",
    "smem_per_sm": "shared memory per SM in bytes (int)",
    "smem_per_block": "largest shared memory one block may use, in bytes (int; 232448 on H200)",
    "has_tma": "the GPU has the Tensor Memory Accelerator (bool; derived: arch >= 90)",
}

PROBLEM_FEATURES: tuple[str, ...] = tuple(PROBLEM_FEATURE_DOCS)
ARCH_FEATURES: tuple[str, ...] = tuple(ARCH_FEATURE_DOCS)
#: Every feature name a condition or anchor may use.
FEATURES: frozenset[str] = frozenset((*PROBLEM_FEATURES, *ARCH_FEATURES, *KERNEL_FEATURES))

ALLOWED = ("allowed: feature names, numbers, strings, True/False, comparisons (== != < <= > >=, chained), "
           "`in` / `not in` a tuple/list/set literal, and/or/not, + - * / // % **, unary -")


class ConditionError(KLineageError, ValueError):
    """An expression that is not in the condition language, or uses unknown features; says why."""

    def __init__(self, expr: str, message: str) -> None:
        self.expr = expr
        self.message = message
        super().__init__(f"condition {expr!r}: {message}")


@dataclass(frozen=True)
class Verdict:
    """The outcome of evaluating a condition.

    ``value`` is True, False or None (unknown). ``decided_by`` is the source text of the clause that
    decided the outcome (the whole expression when every clause was needed). ``unknown`` lists the
    features the expression uses that the caller did not supply. ``error`` is set when a clause
    could not be evaluated on the supplied values (e.g. comparing a string with a number); such a
    clause is unknown.
    """

    value: bool | None
    decided_by: str
    unknown: tuple[str, ...] = ()
    error: str | None = None


_UNKNOWN = object()  # the third truth value, and any value computed from an unknown feature

_COMPARE = {
    ast.Eq: lambda a, b: a == b, ast.NotEq: lambda a, b: a != b, ast.Lt: lambda a, b: a < b,
    ast.LtE: lambda a, b: a <= b, ast.Gt: lambda a, b: a > b, ast.GtE: lambda a, b: a >= b,
    ast.In: lambda a, b: a in b, ast.NotIn: lambda a, b: a not in b,
}
_BINARY = {
    ast.Add: lambda a, b: a + b, ast.Sub: lambda a, b: a - b, ast.Mult: lambda a, b: a * b,
    ast.Div: lambda a, b: a / b, ast.FloorDiv: lambda a, b: a // b, ast.Mod: lambda a, b: a % b,
    ast.Pow: lambda a, b: a ** b,
}
_CONSTRUCTS: Mapping[type, str] = {
    ast.Call: "a function call", ast.Attribute: "attribute access", ast.Subscript: "subscripting",
    ast.Lambda: "a lambda", ast.ListComp: "a comprehension", ast.SetComp: "a comprehension",
    ast.DictComp: "a comprehension", ast.GeneratorExp: "a generator expression",
    ast.JoinedStr: "an f-string", ast.FormattedValue: "an f-string", ast.NamedExpr: "an assignment (:=)",
    ast.IfExp: "a conditional expression (x if c else y)", ast.Dict: "a dict literal",
    ast.Starred: "unpacking (*)", ast.Slice: "a slice", ast.Await: "await", ast.Yield: "yield",
    ast.YieldFrom: "yield", ast.BitAnd: "a bitwise operator", ast.BitOr: "a bitwise operator",
    ast.BitXor: "a bitwise operator", ast.LShift: "a bitwise operator", ast.RShift: "a bitwise operator",
    ast.Invert: "a bitwise operator (~)", ast.MatMult: "matrix multiplication (@)", ast.Is: "`is`",
    ast.IsNot: "`is not`",
}


def _describe(node: ast.AST) -> str:
    for kind, text in _CONSTRUCTS.items():
        if isinstance(node, kind):
            return text
    return type(node).__name__


def _number(value: Any) -> TypeGuard[int | float]:
    return isinstance(value, (int, float)) and not isinstance(value, complex)


class _Checker:
    """Walks a parsed expression and raises ConditionError at the first construct not allowed."""

    def __init__(self, expr: str) -> None:
        self.expr = expr
        self.names: set[str] = set()

    def fail(self, node: ast.AST, what: str) -> ConditionError:
        offset = getattr(node, "col_offset", 0)
        col = len(self.expr.encode("utf-8")[:offset].decode("utf-8", errors="ignore")) + 1
        return ConditionError(self.expr, f"{what} at column {col} is not allowed; {ALLOWED}")

    def check(self, node: ast.AST) -> None:
        if isinstance(node, ast.BoolOp):
            for value in node.values:
                self.check(value)
        elif isinstance(node, ast.UnaryOp):
            if not isinstance(node.op, (ast.Not, ast.USub, ast.UAdd)):
                raise self.fail(node, _describe(node.op))
            self.check(node.operand)
        elif isinstance(node, ast.BinOp):
            if type(node.op) not in _BINARY:
                raise self.fail(node, _describe(node.op))
            if isinstance(node.op, ast.Pow):
                self.check_power(node)
            self.check(node.left)
            self.check(node.right)
        elif isinstance(node, ast.Compare):
            self.check(node.left)
            for op, right in zip(node.ops, node.comparators, strict=True):
                if type(op) not in _COMPARE:
                    raise self.fail(node, _describe(op))
                if isinstance(op, (ast.In, ast.NotIn)):
                    self.check_collection(right)
                else:
                    self.check(right)
        elif isinstance(node, ast.Constant):
            if isinstance(node.value, bool | int | float | str) and not isinstance(node.value, complex):
                return
            raise self.fail(node, f"the constant {node.value!r}")
        elif isinstance(node, ast.Name):
            if node.id.startswith("_"):
                raise self.fail(node, f"the name {node.id!r} (names starting with '_')")
            self.names.add(node.id)
        elif isinstance(node, (ast.Tuple, ast.List, ast.Set)):
            raise self.fail(node, "a collection literal outside `in` / `not in`")
        else:
            raise self.fail(node, _describe(node))

    def check_power(self, node: ast.BinOp) -> None:
        exponent = node.right
        if isinstance(exponent, ast.UnaryOp) and isinstance(exponent.op, (ast.USub, ast.UAdd)):
            exponent = exponent.operand
        if not (isinstance(exponent, ast.Constant) and _number(exponent.value)
                and abs(exponent.value) <= MAX_POWER_EXPONENT):
            raise self.fail(node.right, f"an exponent other than a number constant of magnitude at most "
                                        f"{MAX_POWER_EXPONENT}")
        if isinstance(node.left, ast.Constant) and isinstance(node.left.value, int) and \
                node.left.value.bit_length() > 64:
            raise self.fail(node.left, "a power of an integer constant over 64 bits")

    def check_collection(self, node: ast.AST) -> None:
        if not isinstance(node, (ast.Tuple, ast.List, ast.Set)):
            raise self.fail(node, "`in` / `not in` with something other than a tuple/list/set literal")
        for element in node.elts:
            inner = element.operand if isinstance(element, ast.UnaryOp) and isinstance(
                element.op, ast.USub) else element
            if not isinstance(inner, ast.Constant) or not isinstance(inner.value, bool | int | float | str):
                raise self.fail(element, "a non-constant element of an `in` collection")
            if inner is not element and not _number(inner.value):
                raise self.fail(element, "unary minus on a non-number")


@dataclass(frozen=True)
class CompiledCondition:
    """A checked expression, ready to evaluate many times. Build it with ``parse_condition``."""

    expr: str
    tree: ast.Expression
    names: frozenset[str]

    def evaluate(self, features: Mapping[str, Any]) -> Verdict:
        """Evaluate against ``features`` (name -> value; a missing name or a None value is unknown)."""
        evaluator = _Evaluator(self.expr, features)
        value, decided = evaluator.truth(self.tree.body)
        missing = tuple(sorted(n for n in self.names if features.get(n) is None))
        return Verdict(value, decided, missing, evaluator.error)


def _check_text(expr: str) -> None:
    """ASCII only, no comments, parentheses nested at most MAX_DEPTH deep (tokenize errors are left to
    ``ast.parse``, which words them better)."""
    for i, ch in enumerate(expr):
        if not ch.isascii():
            raise ConditionError(expr, f"the non-ASCII character {ch!r} at column {i + 1} is not allowed; write "
                                       "feature names, operators and strings in ASCII")
    depth = 0
    try:
        for token in tokenize.generate_tokens(io.StringIO(expr).readline):
            if token.type == tokenize.COMMENT:
                raise ConditionError(expr, f"a comment at column {token.start[1] + 1} is not allowed")
            if token.type == tokenize.OP and token.string in "([{":
                depth += 1
                if depth > MAX_DEPTH:
                    raise ConditionError(expr, f"parentheses nested deeper than {MAX_DEPTH} levels")
            elif token.type == tokenize.OP and token.string in ")]}":
                depth -= 1
    except (tokenize.TokenError, SyntaxError):
        return


def _check_size(expr: str, tree: ast.Expression) -> None:
    """At most MAX_NODES syntax nodes and MAX_DEPTH levels of nesting (counted without recursion)."""
    nodes = 0
    stack: list[tuple[ast.AST, int]] = [(tree.body, 1)]
    while stack:
        node, depth = stack.pop()
        nodes += 1
        if nodes > MAX_NODES:
            raise ConditionError(expr, f"more than {MAX_NODES} terms and operators; split the condition")
        if depth > MAX_DEPTH:
            raise ConditionError(expr, f"nested deeper than {MAX_DEPTH} levels")
        stack.extend((child, depth + 1) for child in ast.iter_child_nodes(node)
                     if not isinstance(child, (ast.operator, ast.cmpop, ast.boolop, ast.unaryop, ast.expr_context)))


@lru_cache(maxsize=PARSE_CACHE_SIZE)
def parse_condition(expr: str) -> CompiledCondition:
    """Parse and check ``expr``; raise ConditionError saying what is not allowed and where.

    A returned condition is within every bound of the module docstring and its constant parts evaluate,
    so ``evaluate`` cannot fail on it. The result is cached (least recently used of PARSE_CACHE_SIZE).
    """
    if not isinstance(expr, str) or not expr.strip():
        raise ConditionError(str(expr), "an empty expression; write a predicate such as `K % 64 == 0`")
    if len(expr) > MAX_EXPRESSION_CHARS:
        raise ConditionError(expr[:60] + "...", f"longer than {MAX_EXPRESSION_CHARS} characters")
    _check_text(expr)
    try:
        tree = pyast.parse(expr.strip(), mode="eval")
    except SyntaxError as exc:
        col = f" at column {exc.offset}" if exc.offset else ""
        raise ConditionError(expr, f"not a valid expression ({exc.msg}{col}); {ALLOWED}") from exc
    except (ValueError, RecursionError, MemoryError) as exc:
        raise ConditionError(expr, f"not a valid expression ({type(exc).__name__})") from exc
    _check_size(expr, tree)
    checker = _Checker(expr.strip())
    checker.check(tree.body)
    compiled = CompiledCondition(expr.strip(), tree, frozenset(checker.names))
    constant = _Evaluator(compiled.expr, {})
    constant.truth(tree.body)  # every feature unknown: only the constant parts are computed
    if constant.error is not None:
        raise ConditionError(expr, f"cannot be evaluated: {constant.error}")
    return compiled


def check_features(expr: str, known: Iterable[str] = FEATURES) -> tuple[str, ...]:
    """The feature names ``expr`` uses that are not in ``known`` (sorted; empty when all are known).

    Raises ConditionError when ``expr`` is not in the language at all.
    """
    known_set = known if isinstance(known, (set, frozenset)) else set(known)
    return tuple(sorted(n for n in parse_condition(expr).names if n not in known_set))


def validate_condition(expr: str, known: Iterable[str] = FEATURES) -> CompiledCondition:
    """Parse ``expr`` and require every feature it names to be in ``known``; raise ConditionError if not."""
    compiled = parse_condition(expr)
    unknown = check_features(expr, known)
    if unknown:
        raise ConditionError(expr, f"unknown feature(s) {', '.join(unknown)}; known features: "
                                   f"{', '.join(sorted(known))}")
    return compiled


def evaluate(expr: str, features: Mapping[str, Any]) -> Verdict:
    """Parse (cached) and evaluate ``expr`` against ``features``: three-valued, with the deciding clause."""
    return parse_condition(expr).evaluate(features)


class _Evaluator:
    """Evaluates a checked tree. ``value`` gives a Python value or _UNKNOWN; ``truth`` gives
    (True/False/None, deciding clause)."""

    def __init__(self, expr: str, features: Mapping[str, Any]) -> None:
        self.expr = expr
        self.features = features
        self.error: str | None = None

    def text(self, node: ast.AST) -> str:
        return ast.get_source_segment(self.expr, node) or pyast.unparse(node)

    def fault(self, node: ast.AST, message: str) -> object:
        if self.error is None:
            self.error = f"{self.text(node)}: {message}"
        return _UNKNOWN

    def truth(self, node: ast.AST) -> tuple[bool | None, str]:
        if isinstance(node, ast.BoolOp):
            results = [self.truth(v) for v in node.values]
            decisive = not isinstance(node.op, ast.And)  # the value that settles the BoolOp
            for value, clause in results:
                if value is decisive:
                    return value, clause
            for value, clause in results:
                if value is None:
                    return None, clause
            return (not decisive), self.text(node)
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
            value, clause = self.truth(node.operand)
            return (None if value is None else not value), clause
        if isinstance(node, ast.Compare):
            return self.compare(node)
        value = self.value(node)
        return (None if value is _UNKNOWN else bool(value)), self.text(node)

    def compare(self, node: ast.Compare) -> tuple[bool | None, str]:
        # a < b < c is (a < b) and (b < c), with Kleene logic over the links
        left = self.value(node.left)
        left_node: ast.AST = node.left
        unknown_link: str | None = None
        for op, right_node in zip(node.ops, node.comparators, strict=True):
            member = isinstance(op, (ast.In, ast.NotIn))
            right = self.collection(right_node) if member else self.value(right_node)
            link = self.span(left_node, right_node)
            if left is _UNKNOWN or right is _UNKNOWN:
                unknown_link = unknown_link or link
            else:
                try:
                    outcome = bool(_COMPARE[type(op)](left, right))
                except TypeError:
                    self.fault(node, f"cannot compare {type(left).__name__} with {type(right).__name__}")
                    unknown_link = unknown_link or link
                else:
                    if not outcome:
                        return False, link
            left, left_node = right, right_node
        if unknown_link is not None:
            return None, unknown_link
        return True, self.text(node)

    def span(self, left: ast.AST, right: ast.AST) -> str:
        """Source text from the start of ``left`` to the end of ``right`` (offsets are UTF-8 bytes)."""
        start, end = getattr(left, "col_offset", None), getattr(right, "end_col_offset", None)
        if start is None or end is None:
            return self.expr
        return self.expr.encode("utf-8")[start:end].decode("utf-8", errors="replace")

    def collection(self, node: ast.AST) -> Any:
        assert isinstance(node, (ast.Tuple, ast.List, ast.Set))
        return frozenset(self.value(e) for e in node.elts) if isinstance(node, ast.Set) else tuple(
            self.value(e) for e in node.elts)

    def value(self, node: ast.AST) -> Any:
        if isinstance(node, ast.Constant):
            return node.value
        if isinstance(node, ast.Name):
            found = self.features.get(node.id)
            return _UNKNOWN if found is None else found
        if isinstance(node, ast.UnaryOp):
            if isinstance(node.op, ast.Not):
                value, _ = self.truth(node)
                return _UNKNOWN if value is None else value
            operand = self.value(node.operand)
            if operand is _UNKNOWN:
                return _UNKNOWN
            if not _number(operand):
                return self.fault(node, f"unary {'-' if isinstance(node.op, ast.USub) else '+'} on "
                                        f"{type(operand).__name__}")
            return -operand if isinstance(node.op, ast.USub) else +operand
        if isinstance(node, ast.BinOp):
            return self.binary(node)
        if isinstance(node, (ast.BoolOp, ast.Compare)):
            value, _ = self.truth(node)
            return _UNKNOWN if value is None else value
        return self.fault(node, "not evaluable")  # unreachable for checked trees

    def binary(self, node: ast.BinOp) -> Any:
        left, right = self.value(node.left), self.value(node.right)
        if left is _UNKNOWN or right is _UNKNOWN:
            return _UNKNOWN
        if not (_number(left) and _number(right)):
            return self.fault(node, f"arithmetic on {type(left).__name__} and {type(right).__name__}")
        if isinstance(node.op, ast.Pow) and (abs(right) > MAX_POWER_EXPONENT or
                                             (isinstance(left, int) and left.bit_length() > 64)):
            return self.fault(node, f"power too large (exponent limit {MAX_POWER_EXPONENT})")
        try:
            result = _BINARY[type(node.op)](left, right)
        except (ZeroDivisionError, OverflowError, ValueError) as exc:
            return self.fault(node, str(exc) or type(exc).__name__)
        if isinstance(result, complex):
            return self.fault(node, "complex result")
        if isinstance(result, int) and result.bit_length() > MAX_INT_BITS:
            return self.fault(node, "integer result too large")
        if isinstance(result, float) and not math.isfinite(result):
            return self.fault(node, "non-finite result")
        return result
