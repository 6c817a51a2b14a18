"""Query cost: how many values an operation can produce, with fragments expanded, computed before validation.

Depth, alias and token limits do not bound the work of a query: a chain of fragments that each spread
the previous one twice asks for 2**n fields in a few hundred bytes, and a few aliased list fields
multiply the response. The cost here is an upper estimate of the values a query selects:

* a leaf field costs 1; an object field costs 1 plus its selection's cost;
* a field given a ``limit`` / ``first`` argument (a literal or a variable) multiplies its selection's
  cost by it; a list field without one by ``DEFAULT_LIST_SIZE`` (by 1 directly inside a sized page:
  ``skills(first: 50) { items { ... } }`` counts 50 items, not 500);
* a fragment spread costs its fragment's selection, computed once per fragment (memoized), so the
  estimate of a 2**20 fan-out is found in 20 steps, never by materializing the fields.

``QueryLimiter`` measures cost, depth and aliases in that one memoized walk and refuses an operation over
its ``Limits`` (an error naming each limit) before validation and execution.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from graphql import (
    DocumentNode,
    FieldNode,
    FragmentDefinitionNode,
    FragmentSpreadNode,
    GraphQLError,
    GraphQLList,
    GraphQLNonNull,
    GraphQLSchema,
    InlineFragmentNode,
    IntValueNode,
    OperationDefinitionNode,
    OperationType,
    SelectionSetNode,
    VariableNode,
    get_named_type,
)
from strawberry.extensions import SchemaExtension

DEFAULT_LIST_SIZE = 10
MAX_LIST_SIZE = 1000
SIZE_ARGUMENTS = ("limit", "first")


class CostError(ValueError):
    """A document whose cost cannot be computed (a fragment cycle or an unknown fragment)."""


@dataclass(frozen=True)
class Measure:
    """What an operation asks for: ``cost`` (see the module docstring), ``depth`` (field nesting: 0 for
    leaves only) and ``aliases`` (aliased fields), all with fragments expanded."""

    cost: int = 0
    depth: int = 0
    aliases: int = 0

    def plus(self, other: Measure) -> Measure:
        return Measure(self.cost + other.cost, max(self.depth, other.depth), self.aliases + other.aliases)


class _Estimator:
    """Measures selections over one document; fragment measures are memoized by name."""

    def __init__(self, document: DocumentNode, variables: Mapping[str, Any] | None,
                 schema: GraphQLSchema | None) -> None:
        self.schema = schema
        self.fragments = {d.name.value: d for d in document.definitions if isinstance(d, FragmentDefinitionNode)}
        self.variables = variables or {}
        self.memo: dict[tuple[str, bool], Measure] = {}
        self.active: set[str] = set()

    def named(self, name: str | None) -> Any:
        return self.schema.get_type(name) if self.schema is not None and name else None

    def selection(self, selection_set: SelectionSetNode | None, parent: Any, paged: bool = False) -> Measure:
        total = Measure()
        if selection_set is None:
            return total
        for node in selection_set.selections:
            if isinstance(node, FieldNode):
                total = total.plus(self.field(node, parent, paged))
            elif isinstance(node, InlineFragmentNode):
                inner = self.named(node.type_condition.name.value) if node.type_condition else parent
                total = total.plus(self.selection(node.selection_set, inner, paged))
            elif isinstance(node, FragmentSpreadNode):
                total = total.plus(self.fragment(node.name.value, paged))
        return total

    def fragment(self, name: str, paged: bool) -> Measure:
        key = (name, paged)
        if key in self.memo:
            return self.memo[key]
        if name in self.active:
            raise CostError(f"fragment {name!r} spreads itself (a cycle)")
        definition = self.fragments.get(name)
        if definition is None:
            raise CostError(f"unknown fragment {name!r}")
        self.active.add(name)
        measure = self.selection(definition.selection_set, self.named(definition.type_condition.name.value), paged)
        self.active.discard(name)
        self.memo[key] = measure
        return measure

    def field(self, node: FieldNode, parent: Any, paged: bool) -> Measure:
        """Cost 1, plus the selection times the field's size: its limit/first argument; else, for a list
        field, ``DEFAULT_LIST_SIZE`` (1 for a list directly inside a page, whose size its parent already
        counted). Without type information (no schema, an unknown field) a field is taken to be a list."""
        alias = 1 if node.alias is not None else 0
        if node.selection_set is None:
            return Measure(1, 0, alias)
        definition = (getattr(parent, "fields", None) or {}).get(node.name.value)
        field_type = definition.type if definition is not None else None
        if isinstance(field_type, GraphQLNonNull):
            field_type = field_type.of_type
        many = field_type is None or isinstance(field_type, GraphQLList)
        size = self.size_argument(node)
        if size is None:
            size = DEFAULT_LIST_SIZE if many and not paged else 1
        inner_type = get_named_type(field_type) if field_type is not None else None
        inner = self.selection(node.selection_set, inner_type, paged=size > 1 and not many)
        return Measure(1 + size * inner.cost, 1 + inner.depth, alias + inner.aliases)

    def size_argument(self, node: FieldNode) -> int | None:
        for argument in node.arguments or ():
            if argument.name.value not in SIZE_ARGUMENTS:
                continue
            value: Any = None
            if isinstance(argument.value, IntValueNode):
                value = argument.value.value
            elif isinstance(argument.value, VariableNode):
                value = self.variables.get(argument.value.name.value)
            try:
                return max(1, min(MAX_LIST_SIZE, int(value)))
            except (TypeError, ValueError):
                return DEFAULT_LIST_SIZE
        return None


def measure_query(document: DocumentNode, operation_name: str | None = None,
                  variables: Mapping[str, Any] | None = None, schema: GraphQLSchema | None = None) -> Measure:
    """The ``Measure`` of the operation named ``operation_name`` (every operation when None: the largest of
    each) of ``document``, fragments expanded (see the module docstring) without materializing them: each
    fragment is measured once. With ``schema``, only fields returning lists multiply their selection
    (without it every object field does); CostError on a fragment cycle or an unknown fragment."""
    estimator = _Estimator(document, variables, schema)
    roots = {OperationType.QUERY: schema.query_type, OperationType.MUTATION: schema.mutation_type,
             OperationType.SUBSCRIPTION: schema.subscription_type} if schema is not None else {}
    operations = [d for d in document.definitions if isinstance(d, OperationDefinitionNode)]
    chosen = [op for op in operations if operation_name is None or (op.name and op.name.value == operation_name)]
    found = [estimator.selection(op.selection_set, roots.get(op.operation)) for op in chosen]
    return Measure(max((m.cost for m in found), default=0), max((m.depth for m in found), default=0),
                   max((m.aliases for m in found), default=0))


@dataclass(frozen=True)
class Limits:
    """The most an operation may ask for (``measure_query``)."""

    max_cost: int
    max_depth: int
    max_aliases: int

    def problems(self, measure: Measure) -> list[str]:
        """One message per limit ``measure`` exceeds."""
        out = []
        if measure.depth > self.max_depth:
            out.append(f"the operation exceeds maximum operation depth of {self.max_depth} (depth {measure.depth})")
        if measure.aliases > self.max_aliases:
            out.append(f"{measure.aliases} aliases found, more than the {self.max_aliases} allowed")
        if measure.cost > self.max_cost:
            out.append(f"query cost {measure.cost} exceeds the limit of {self.max_cost} (fields counted with "
                       f"fragments expanded, list fields times their limit/first or {DEFAULT_LIST_SIZE}); ask for "
                       "fewer fields, fewer aliases or smaller pages")
        return out


class QueryLimiter(SchemaExtension):
    """Refuses an operation over ``limits`` (depth, aliases, cost; fragments expanded but measured once each)
    before execution (strawberry's own depth and alias limiters expand every fragment spread, which takes
    seconds on a fan-out of 2**20). Install it after ``ValidationCache``, which replaces the errors."""

    def __init__(self, limits: Limits) -> None:
        self.limits = limits

    def on_validate(self) -> Iterator[None]:
        context = self.execution_context
        document = context.graphql_document
        if document is not None and not context.pre_execution_errors:  # after validation (maybe cached)
            try:
                problems = self.limits.problems(measure_query(document, context.operation_name, context.variables,
                                                              context.schema._schema))
            except CostError as exc:
                problems = [f"query: {exc}"]
            if problems:
                context.pre_execution_errors = [GraphQLError(p) for p in problems]
        yield
