"""The axis specs of NNX's iteration transforms: ``Carry``, ``StateAxes`` and their checks.

A spec (``in_axes``/``out_axes``) is a prefix of the arguments (or the output) whose leaves
are an int (the mapped axis), ``None`` (broadcast), ``Carry`` (scan's loop state) or a
``StateAxes`` (one of those per filter of a graph node's state).
"""

from collections.abc import Iterable, Iterator, Mapping
from typing import Any, cast

import jax

import pytreemod as pm

from .. import extract, filterlib, graphlib
from ..statelib import State
from ..variablelib import Variable

Path = tuple[Any, ...]


class Carry:
    """Marks, in ``nnx.scan``'s ``in_axes``/``out_axes``, the argument (or output) that is
    the loop carry."""

    # Shown (in GraphDef and StateAxes reprs) under the public module, as Flax shows it.
    __module__ = "adapters.nnx.transforms.iteration"


def to_predicate(filter: Any) -> Any:
    """The ``(path, value) -> bool`` predicate of an NNX filter."""
    convert = getattr(filterlib, "to_predicate", None)
    if convert is not None:
        return convert(filter)
    return pm.to_filter(filter)


class _PathIn:
    """Selects the leaves at exactly these paths."""

    def __init__(self, *paths: Path) -> None:
        self.paths = frozenset(tuple(p) for p in paths)

    def __call__(self, path: Path, value: Any) -> bool:
        return tuple(path) in self.paths

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _PathIn) and self.paths == other.paths

    def __hash__(self) -> int:
        return hash(self.paths)

    def __repr__(self) -> str:
        return f"PathIn({', '.join(map(repr, sorted(self.paths, key=repr)))})"


def path_filters(state: Any) -> dict[Any, Any]:
    """``{filter: value}`` from a State whose leaves are axes: one path filter per value."""
    path_in = getattr(filterlib, "PathIn", _PathIn)
    by_value: dict[Any, list[Path]] = {}
    for path, value in state.flat_state():
        if isinstance(value, Variable):
            value = value.get_value()
        by_value.setdefault(value, []).append(tuple(path))
    return {path_in(*paths): value for value, paths in by_value.items()}


class StateAxes(Mapping[Any, Any]):
    """An axis per filter of a graph node's state, used in place of an int in the axes of
    ``nnx.vmap``/``nnx.pmap``/``nnx.scan``: ``StateAxes({nnx.Param: 0, ...: None})``.

    A Variable takes the axis of the first filter that matches it.
    """

    __module__ = "adapters.nnx.transforms.iteration"

    def __init__(
        self,
        filter_axes: Mapping[Any, Any] | Iterable[tuple[Any, Any]],
        /,
    ) -> None:
        if isinstance(filter_axes, State):
            filter_axes = path_filters(filter_axes)
        items = tuple(filter_axes.items() if isinstance(filter_axes, Mapping) else filter_axes)
        self._filters = tuple(f for f, _ in items)
        self._axes = tuple(a for _, a in items)

    @property
    def filters(self) -> tuple[Any, ...]:
        """The filters, in order."""
        return self._filters

    @property
    def axes(self) -> tuple[Any, ...]:
        """The axis of each filter."""
        return self._axes

    def map_prefix(self, path: Path, variable: Any) -> Any:
        """The axis of the first filter matching ``(path, variable)``."""
        for filter, axis in zip(self._filters, self._axes, strict=True):
            if to_predicate(filter)(path, variable):
                return axis
        raise ValueError(f"No axis found for {path=}, {variable=}")

    def items(self) -> Any:
        return zip(self._filters, self._axes, strict=True)

    def __getitem__(self, key: Any) -> Any:
        return self._axes[self._filters.index(key)]

    def __iter__(self) -> Iterator[Any]:
        return iter(self._filters)

    def __len__(self) -> int:
        return len(self._filters)

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, StateAxes)
            and self._filters == other._filters
            and self._axes == other._axes
        )

    def __hash__(self) -> int:
        return hash((self._filters, self._axes))

    def __repr__(self) -> str:
        return f"StateAxes({dict(self.items())})"


def is_node(x: Any) -> bool:
    """Whether ``x`` is lifted as a graph node (a Module, Rngs, Variable...), not a pytree."""
    if isinstance(x, Variable):
        return True
    return type(x) not in (list, tuple, dict) and graphlib.is_graph_node(x)


def is_tree_state(x: Any) -> bool:
    """Whether ``x`` is a node-shaped prefix built by ``nnx.prefix(..., graph=True)``."""
    tree_state = getattr(extract, "TreeState", None)
    return tree_state is not None and isinstance(x, tree_state)


def is_prefix_leaf(x: Any) -> bool:
    return x is None or x is Carry or isinstance(x, StateAxes) or is_tree_state(x)


def axis_of(prefix: Any, path: Path, value: Any) -> Any:
    """The axis ``prefix`` gives the leaf ``value`` at ``path`` (inside its graph node)."""
    if isinstance(prefix, StateAxes):
        return prefix.map_prefix(path, value)
    if is_tree_state(prefix):
        if not hasattr(prefix.state, "flat_state"):  # a Variable's prefix: one axis
            state = prefix.state
            return state.get_value() if isinstance(state, Variable) else state
        for p, axis in prefix.state.flat_state():
            if tuple(p) == tuple(path):
                return axis.get_value() if isinstance(axis, Variable) else axis
        raise ValueError(f"No axis found for {path=}, {value=} in {prefix!r}")
    return prefix


def check_prefix(
    prefix: Any, name: str, fn_name: str, graph: bool, graph_updates: bool
) -> list[Any]:
    """Flax's checks on an axes spec; returns the distinct axes it uses."""

    def check(path: Any, leaf: Any) -> None:
        where = f"at path {jax.tree_util.keystr(path)} in `{name}` for nnx.{fn_name}."
        if isinstance(leaf, Variable):
            raise ValueError(
                f"Found Variable of type {type(leaf).__name__} {where} "
                "Variables prefixes are not supported."
                "Pass a prefix for the entire Variable instead of passing a "
                "Variable with a prefix for its value."
            )
        if isinstance(leaf, StateAxes) and not (graph and graph_updates):
            kind = type(leaf).__name__
            raise ValueError(
                f"`{name}` cannot contain `{kind}` objects "
                "when `graph=False` or `graph_updates=False`. "
                "Consider the following options:\n\n"
                f"1. Remove `{kind}` objects from `{name}`.\n"
                "2. Enable graph mode and graph updates by passing graph=True and "
                f"graph_updates=True to {fn_name} e.g.\n\n"
                f"  nnx.{fn_name}(..., graph=True, graph_updates=True)\n\n"
                f"3. Use nnx.compat.{fn_name} instead e.g.\n\n"
                f"  nnx.compat.{fn_name}(...)"
            )
        if is_tree_state(leaf) and (not graph or graph_updates):
            msg = (
                f"Found `TreeState` object at path {jax.tree_util.keystr(path)} in "
                f"`{name}` for nnx.{fn_name}. `TreeState` objects are only "
                "allowed as prefixes when `graph=True` and `graph_updates=False`."
                "Consider the following options:\n\n"
                "1. Enable graph mode and graph updates by passing graph=True and "
                f"graph_updates=True to {fn_name} e.g.\n\n"
                f"  nnx.{fn_name}(..., graph=True, graph_updates=True)\n\n"
                f"2. Use nnx.compat.{fn_name} instead e.g.\n\n"
                f"  nnx.compat.{fn_name}(...)"
            )
            if graph_updates:
                msg += (
                    "\n\n3. If you using nnx.prefix to create the prefix, pass graph=False:\n\n"
                    "  prefix = nnx.prefix(..., graph=False)"
                )
            raise ValueError(msg)
        if graph and is_node(leaf):
            raise ValueError(
                f"Found graph node of type {type(leaf).__name__} {where} "
                "Graph nodes are not allowed as prefixes when graph=True."
                "Consider the following options:\n\n"
                f"1. Remove graph nodes from `{name}`.\n"
                f"2. Enable tree mode by passing graph=False to {fn_name} e.g.\n\n"
                f"  nnx.{fn_name}(..., graph=False)\n\n"
                "3. If you using nnx.prefix to create the prefix, pass graph=True:\n\n"
                "  prefix = nnx.prefix(..., graph=True)"
            )

    leaves = jax.tree_util.tree_leaves_with_path(
        prefix, is_leaf=lambda x: is_prefix_leaf(x) or is_node(x)
    )
    unique: list[Any] = []
    for path, leaf in leaves:
        check(path, leaf)
        if leaf not in unique:
            unique.append(leaf)
    return unique


def check_out_axes(out_axes: Any) -> None:
    """``nnx.scan`` cannot broadcast (``None``) or carry (in a StateAxes) output state."""
    for path, x in jax.tree_util.tree_leaves_with_path(out_axes, is_leaf=is_prefix_leaf):
        where = f"out_axes{jax.tree_util.keystr(path)}"
        if x is None:
            raise ValueError(f"Cannot broadcast output state. Got out_axes=None at: {where}")
        if isinstance(x, StateAxes):
            for filter, value in x.items():
                if value is None:
                    raise ValueError(
                        "Cannot broadcast output state. "
                        f"Got StateAxes({{{filter}: None}}) at: {where}"
                    )
                if value is Carry:
                    raise ValueError(
                        f"Cannot carry output state. Got StateAxes({{{filter}: Carry}}) at: {where}"
                    )


def carry_index(axes: Any, name: str) -> int | str | None:
    """Where ``Carry`` is in a scan spec: ``'all'``, a top-level index, or ``None``."""
    if axes is Carry:
        return "all"
    found: tuple[int, Any] | None = None
    for key_path, x in jax.tree_util.tree_leaves_with_path(axes, is_leaf=is_prefix_leaf):
        if x is not Carry:
            continue
        path = tuple(key_path)
        top = path[0] if path else None
        if len(path) != 1 or not isinstance(top, jax.tree_util.SequenceKey):
            raise ValueError(
                "Carry must be a top-level argument, it cannot be nested. "
                f"Found Carry inside {name} at path {jax.tree_util.keystr(path)}"
            )
        if found is not None:
            raise ValueError(
                f"Found multiple Carry definitions at {name}{jax.tree_util.keystr(found[1])} "
                f"and {name}{jax.tree_util.keystr(path)}"
            )
        found = (cast(int, cast(Any, top).idx), path)
    return None if found is None else found[0]


def aliasing_error(conflicts: list[tuple[str, list[tuple[Path, Any]]]]) -> ValueError:
    """Flax's error for a Variable reached under two different axes."""
    msgs = []
    for type_name, paths_axes in conflicts:
        lines = "\n".join(
            f"  {'/'.join(map(str, p)) if p else '<root>'}: {a}" for p, a in paths_axes
        )
        msgs.append(f"Node: {type_name}\n{lines}")
    return ValueError(
        "Inconsistent aliasing detected. The following nodes have different prefixes:\n"
        + "\n".join(msgs)
    )


def duplicate_error(fn_name: str, variable: Any, first: str, second: str) -> ValueError:
    """Flax's error for a Variable passed twice where aliasing is not supported."""
    return ValueError(
        f"Duplicate {variable}\nfound at paths:\n\n"
        f"  - {first}\n"
        f"  - {second}\n\n"
        f"nnx.{fn_name} with graph_updates=False does not support "
        "Variable aliasing (duplicate inputs, duplicate outputs, or "
        "input Variables returned as outputs). "
        "Consider the following options:\n\n"
        "1. Remove the duplicate Variables.\n"
        "2. Create new Variables via nnx.clone() and use those instead.\n"
        "3. Enable graph mode and graph updates by passing graph=True and "
        f"graph_updates=True to {fn_name}\n\n"
        f"  nnx.{fn_name}(..., graph=True, graph_updates=True)\n\n"
        f"4. Use nnx.compat.{fn_name} (sets graph and graph_updates to True "
        "automatically)\n\n"
        f"  nnx.compat.{fn_name}(...)"
    )
