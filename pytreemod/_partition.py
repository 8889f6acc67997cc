"""Split a model into its structure and plain nested-dict states, and back.

``partition(model, *filters)`` returns ``(structure, state_1, ..., state_n, rest)``: one
state per filter (a variable goes to the first filter that matches it) and the rest.
``combine(structure, *states)`` inverts it exactly. ``to_variables`` / ``from_variables``
do the same grouped by collection, giving a Linen-style ``{collection: nested dict}``.

A state is a nested ``dict`` keyed by field names, dict keys and sequence indices
(``{'blocks': {3: {'mlp': {'weight': Array}}}}``); its leaves are the variables' values
(arrays, or ``AxisMetadata`` boxes around them), so optax and ``jax.tree`` take it
directly. The structure holds everything else: the tree's shape, static leaves (functions,
strings, Python numbers), the Variable type at each slot and which slots share a Variable.

Sharing: a Variable object that occurs at several places of a model (tied weights)
occupies one slot; it appears once in the states (at its first path) and ``combine``
puts the same Variable object back in every place.
"""

from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Generic, TypeAlias, TypeVar, overload

import jax
import jax.tree_util as jtu

from ._errors import StateMismatchError
from ._filters import FilterLike, check_collections, to_filter
from ._meta import AxisMetadata, peel, rebox, slot_value
from ._tree import Path, format_path, is_array, path_keys
from ._variables import Variable

State: TypeAlias = dict[Any, Any]
"""A nested dict of variable values, keyed by path components."""

StateLike: TypeAlias = Mapping[Any, Any] | Iterable[Any] | jax.typing.ArrayLike
"""What ``combine`` accepts as a state: a ``State``, or any mapping shaped like one. The
type is as wide as optax's ``Params`` (``optax.apply_updates`` returns that for a state
dict), so ``combine(structure, optax.apply_updates(params, updates), rest)`` type-checks;
at run time a state must still be a mapping (``StateMismatchError`` otherwise)."""

M = TypeVar("M")
"""The type of the tree a ``Structure`` was taken from (a Module class, a dict...)."""


def _is_slot_leaf(x: Any) -> bool:
    return isinstance(x, (Variable, AxisMetadata))


class _Hole:
    """Marks a slot position among a Structure's leaves."""

    __slots__ = ("index",)

    def __init__(self, index: int):
        self.index = index

    def __eq__(self, other: object) -> bool:
        return type(other) is _Hole and other.index == self.index

    def __hash__(self) -> int:
        return hash((_Hole, self.index))

    def __repr__(self) -> str:
        return f"<slot {self.index}>"


class Structure(Generic[M]):
    """Everything in a PyTree except its variables' values. Hashable, comparable.

    Generic in the type of the tree it was taken from: ``partition(model)`` gives a
    ``Structure[type(model)]`` and ``combine`` returns that type.

    **Attributes:**

    - ``treedef``: the PyTree structure with Variables and boxes as leaves.
    - ``leaves``: per leaf, either a static value or a slot marker.
    - ``paths``: per slot, the path of plain keys where its value lives in a state.
    - ``types``: per slot, the Variable type (``None`` for a bare array or box).
    - ``alias``: per slot, the index of the slot whose Variable it shares, or ``None``.
    - ``specs``: per slot, the ``SlotSpec`` (shape, dtype, boxes) of the value it was built
      from, or ``None`` where that is unknown; ``combine`` and ``from_variables`` check
      values against it. Not part of equality: structures compare by tree shape only.
    """

    __slots__ = ("_hash", "alias", "leaves", "paths", "specs", "treedef", "types")

    treedef: Any
    leaves: tuple[Any, ...]
    paths: tuple[Path, ...]
    types: "tuple[type[Variable[Any]] | None, ...]"
    alias: tuple[int | None, ...]
    specs: "tuple[SlotSpec | None, ...] | None"

    def __init__(
        self,
        treedef: Any,
        leaves: tuple[Any, ...],
        paths: tuple[Path, ...],
        types: "tuple[type[Variable[Any]] | None, ...]",
        alias: tuple[int | None, ...],
        specs: "tuple[SlotSpec | None, ...] | None" = None,
    ):
        self.treedef = treedef
        self.leaves = leaves
        self.paths = paths
        self.types = types
        self.alias = alias
        self.specs = specs
        self._hash: int | None = None

    def with_specs(self, values: Sequence[Any]) -> "Structure[M]":
        """A copy that records the shape, dtype and boxes of each slot's value."""
        copy: Structure[M] = Structure(
            self.treedef,
            self.leaves,
            self.paths,
            self.types,
            self.alias,
            tuple(_spec_of(v) for v in values),
        )
        return copy

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Structure):
            return NotImplemented
        return (
            self.treedef == other.treedef
            and self.types == other.types
            and self.alias == other.alias
            and self.paths == other.paths
            and len(self.leaves) == len(other.leaves)
            and all(a is b or _safe_eq(a, b) for a, b in zip(self.leaves, other.leaves))
        )

    def __hash__(self) -> int:
        if self._hash is None:
            self._hash = hash((self.treedef, self.types, self.alias, self.leaves))
        return self._hash

    def __repr__(self) -> str:
        return f"Structure({self.treedef}, slots={len(self.paths)})"

    def collection(self, slot: int) -> str:
        """The collection of slot ``slot`` (``params`` for bare arrays)."""
        vtype = self.types[slot]
        return vtype.collection if vtype is not None else "params"


class SlotSpec:
    """What a slot held when its Structure was taken: the shape and dtype of its array,
    and the axis-metadata boxes around it (outermost first, values removed)."""

    __slots__ = ("boxes", "dtype", "shape")

    def __init__(self, shape: tuple[int, ...], dtype: Any, boxes: tuple[AxisMetadata, ...]):
        self.shape = shape
        self.dtype = dtype
        self.boxes = boxes

    def __repr__(self) -> str:
        return f"SlotSpec({self.dtype}{list(self.shape)}, boxes={len(self.boxes)})"


def _spec_of(value: Any) -> SlotSpec | None:
    boxes, leaf = peel(value)
    try:  # metadata only: no array kept alive
        emptied = tuple(box.replace_boxed(None) for box in boxes)
    except Exception:  # a user box that refuses None: no spec, nothing checked
        return None
    shape, dtype = getattr(leaf, "shape", None), getattr(leaf, "dtype", None)
    if shape is None or dtype is None:
        return None
    return SlotSpec(tuple(shape), dtype, emptied)


def _checked(spec: SlotSpec | None, value: Any, path: Path, check: bool, prefix: str = "") -> Any:
    """``value`` checked against the slot's spec (if ``check``), and put back in the
    slot's boxes if it comes without them. Shape and dtype attributes only: works on
    tracers, costs little (the message is only formatted on a mismatch)."""
    if spec is None:
        return value
    shape = getattr(value, "shape", None)
    boxed = shape is None and isinstance(value, AxisMetadata)
    leaf = peel(value)[1] if isinstance(value, AxisMetadata) else value
    if boxed:
        shape = getattr(leaf, "shape", None)
    dtype = getattr(leaf, "dtype", None)
    if check and shape is not None and dtype is not None:
        if tuple(shape) != spec.shape or (dtype != spec.dtype and dtype != jax.dtypes.float0):
            raise StateMismatchError(
                f"{prefix}{format_path(path)} is {dtype}{list(shape)}, but the model has "
                f"{spec.dtype}{list(spec.shape)} there. Pass the state of a model with the "
                "same configuration; if the change is intended (a cast or vmapped state), "
                "pass check=False."
            )
    if spec.boxes and not boxed:
        value = rebox(spec.boxes, value)
    return value


def _safe_eq(a: Any, b: Any) -> bool:
    try:
        return type(a) is type(b) and bool(a == b)
    except Exception:
        return False


def _split(tree: Any) -> tuple[Structure[Any], list[Any]]:
    """Walk ``tree`` once: its Structure and the value (Variable or bare) of each slot."""
    flat, treedef = jtu.tree_flatten_with_path(tree, is_leaf=_is_slot_leaf)
    leaves: list[Any] = []
    paths: list[Path] = []
    types: list[type[Variable[Any]] | None] = []
    alias: list[int | None] = []
    values: list[Any] = []
    seen: dict[int, int] = {}
    for keypath, leaf in flat:
        if isinstance(leaf, Variable):
            first = seen.get(id(leaf))
            slot = len(paths)
            if first is None:
                seen[id(leaf)] = slot
            alias.append(first)
            types.append(type(leaf))
        elif is_array(leaf) or isinstance(leaf, (AxisMetadata, jax.ShapeDtypeStruct)):
            slot = len(paths)
            alias.append(None)
            types.append(None)
        else:
            leaves.append(leaf)
            continue
        leaves.append(_Hole(slot))
        paths.append(path_keys(keypath))
        values.append(leaf)
    structure: Structure[Any] = Structure(
        treedef, tuple(leaves), tuple(paths), tuple(types), tuple(alias)
    )
    return structure, values


def _insert(state: State, path: Path, value: Any) -> None:
    node = state
    for key in path[:-1]:
        node = node.setdefault(key, {})
    if path:
        node[path[-1]] = value
    else:
        raise StateMismatchError(
            "The whole tree is a single variable, which has no path to store it under in a "
            "state dict; put it inside a Module or a dict first."
        )


@overload
def partition(tree: M, /) -> tuple[Structure[M], State]: ...
@overload
def partition(tree: M, filter: FilterLike, /) -> tuple[Structure[M], State, State]: ...
@overload
def partition(
    tree: M, filter1: FilterLike, filter2: FilterLike, /
) -> tuple[Structure[M], State, State, State]: ...
@overload
def partition(tree: M, /, *filters: FilterLike) -> tuple[Structure[M], *tuple[State, ...]]: ...
def partition(tree: M, /, *filters: FilterLike) -> tuple[Structure[M], *tuple[State, ...]]:
    """Split ``tree`` into its structure, one state per filter, and the rest.

    **Arguments:**

    - ``tree``: a Module or any PyTree.
    - ``*filters``: any filter forms (see ``pytreemod.to_filter``). A variable goes to the
      first filter that selects it; what none selects goes to the last state, ``rest``.
      A collection name no Variable class declares (a typo such as ``"parms"``) is an
      ``InvalidFilterError`` listing the tree's collections; a declared collection the
      tree has no variable of selects nothing (an empty state), so generic code may pass
      ``"batch_stats"`` for models with and without BatchNorm.

    **Returns:** ``(structure, state_1, ..., state_n, rest)``; ``combine`` inverts it.
    The structure is a ``Structure[M]`` for a ``tree`` of type ``M``, so ``combine``
    returns an ``M``.

    >>> import jax.numpy as jnp
    >>> import pytreemod as pm
    >>> tree = {"w": pm.Param(jnp.ones(2)), "mean": pm.BatchStat(jnp.zeros(2))}
    >>> structure, params, rest = pm.partition(tree, "params")
    >>> params, rest
    ({'w': Array([1., 1.], dtype=float32)}, {'mean': Array([0., 0.], dtype=float32)})
    """
    structure, values = _split(tree)
    preds = [to_filter(f) for f in filters]
    for pred in preds:
        check_collections(pred, "partition", lambda: _collections(structure))
    states: list[State] = [{} for _ in range(len(preds) + 1)]
    for slot, value in enumerate(values):
        if structure.alias[slot] is not None:
            continue
        path = structure.paths[slot]
        group = len(preds)
        for i, pred in enumerate(preds):
            if pred(path, value):
                group = i
                break
        _insert(states[group], path, slot_value(value))
    return (structure.with_specs(values), *states)


def _collections(structure: Structure[Any]) -> set[str]:
    return {structure.collection(slot) for slot in range(len(structure.paths))}


def structure_of(tree: M) -> Structure[M]:
    """The ``Structure`` of ``tree`` (``partition(tree)[0]``)."""
    structure, values = _split(tree)
    return structure.with_specs(values)


def state(tree: Any, filter: FilterLike = True) -> State:
    """The state of the variables of ``tree`` that ``filter`` selects, as a nested dict."""
    _, selected, _ = partition(tree, filter)
    return selected


_ABSENT = object()


def _lookup(state: Any, path: Path) -> Any:
    node = state
    for key in path:
        if not isinstance(node, Mapping):
            return _ABSENT
        node = node.get(key, _ABSENT)
        if node is _ABSENT:
            return _ABSENT
    return node


def _unexpected(state: Any, prefix: Path, used: set[Path], out: list[Path]) -> None:
    if prefix in used:
        return
    if isinstance(state, Mapping):
        for key, child in state.items():
            _unexpected(child, (*prefix, key), used, out)
    else:
        out.append(prefix)


def _build(structure: Structure[Any], values: Sequence[Any]) -> Any:
    built: list[Any] = []
    for slot, value in enumerate(values):
        first = structure.alias[slot]
        if first is not None:
            built.append(built[first])
            continue
        vtype = structure.types[slot]
        built.append(vtype(value) if vtype is not None else value)
    leaves = [built[x.index] if type(x) is _Hole else x for x in structure.leaves]
    return jtu.tree_unflatten(structure.treedef, leaves)


def combine(structure: Structure[M], *states: StateLike, check: bool = True) -> M:
    """Rebuild the tree from ``structure`` and the states ``partition`` returned.

    Returns the type of the tree the structure was taken from. A state may come straight
    from optax (``optax.apply_updates(params, updates)``: typed ``optax.Params``, a dict
    at run time); a state that is not a mapping is a ``StateMismatchError``.

    Every variable must be found in exactly one state, and every state entry must have a
    place in the structure; otherwise ``StateMismatchError`` names the paths. Each value
    must have the shape and dtype the slot had when ``partition`` ran (``check=False``
    skips this, for states that are cast or mapped on purpose); a plain array given for a
    slot that held an axis-metadata box is put back in that box, with or without the
    check (``Partitioned`` names survive ``unbox``, optax or a checkpoint that stored
    plain arrays).
    """
    if not isinstance(structure, Structure):
        raise StateMismatchError(
            f"combine expects the Structure returned by partition as its first argument, "
            f"got {type(structure).__name__}; call combine(structure, *states)."
        )
    for i, s in enumerate(states):
        if not isinstance(s, Mapping):
            raise StateMismatchError(
                f"combine: state {i + 1} is a {type(s).__name__}, not a mapping of paths to "
                "values; pass the dicts partition returned (or optax's update of one)."
            )
    specs = structure.specs
    values: list[Any] = []
    for slot, path in enumerate(structure.paths):
        if structure.alias[slot] is not None:
            values.append(None)
            continue
        found = [v for v in (_lookup(s, path) for s in states) if v is not _ABSENT]
        if not found:
            raise StateMismatchError(
                f"No state has a value for {format_path(path)} (collection "
                f"{structure.collection(slot)!r}). Pass every state partition returned, "
                "including the rest."
            )
        if len(found) > 1:
            raise StateMismatchError(
                f"{format_path(path)} has a value in {len(found)} states; each variable "
                "must be in exactly one. Pass the states of one partition call."
            )
        spec = specs[slot] if specs is not None else None
        if spec is not None and (check or spec.boxes):
            values.append(_checked(spec, found[0], path, check))
        else:
            values.append(found[0])
    _check_no_extra(structure, states)
    return _build(structure, values)


def _check_no_extra(structure: Structure[Any], states: Sequence[Any]) -> None:
    used = {p for p, a in zip(structure.paths, structure.alias) if a is None}
    extra: list[Path] = []
    for s in states:
        _unexpected(s, (), used, extra)
    if extra:
        shown = ", ".join(format_path(p) for p in extra[:5])
        raise StateMismatchError(
            f"The states hold {len(extra)} value(s) the structure has no place for: {shown}. "
            "They would be lost; check the paths, or rebuild the structure from the model "
            "that has these variables."
        )


def to_variables(tree: Any) -> dict[str, State]:
    """The Linen-style variables dict ``{collection: nested dict}`` of ``tree``.

    >>> import jax.numpy as jnp
    >>> import pytreemod as pm
    >>> tree = {"w": pm.Param(jnp.ones(2)), "mean": pm.BatchStat(jnp.zeros(2))}
    >>> sorted(pm.to_variables(tree))
    ['batch_stats', 'params']
    """
    structure, values = _split(tree)
    out: dict[str, State] = {}
    for slot, value in enumerate(values):
        if structure.alias[slot] is None:
            coll = structure.collection(slot)
            _insert(out.setdefault(coll, {}), structure.paths[slot], slot_value(value))
    return out


def from_variables(
    template: Structure[M] | M, variables: Mapping[str, Mapping[Any, Any]], *, check: bool = True
) -> M:
    """Rebuild a tree shaped like ``template`` from a ``{collection: nested dict}``.

    ``template`` is a model of the same structure (an ``eval_shape`` skeleton will do;
    its values are not used) or a ``Structure``. Missing variables, and entries with no
    place in the model, are a ``StateMismatchError`` naming the collection and path; so
    is a value whose shape or dtype differs from the template's (``check=False`` skips
    that). Plain arrays for slots the template boxes (``Partitioned``...) get the
    template's box back.
    """
    structure: Structure[Any] = (
        template if isinstance(template, Structure) else structure_of(template)
    )
    specs = structure.specs
    values: list[Any] = []
    for slot, path in enumerate(structure.paths):
        if structure.alias[slot] is not None:
            values.append(None)
            continue
        coll = structure.collection(slot)
        value = _lookup(variables.get(coll, {}), path)
        if value is _ABSENT:
            have = ", ".join(sorted(map(str, variables))) or "none"
            raise StateMismatchError(
                f"variables[{coll!r}] has no value for {format_path(path)} (collections "
                f"given: {have}). Pass the variables of a model with the same structure."
            )
        if specs:
            value = _checked(specs[slot], value, path, check, f"variables[{coll!r}]")
        values.append(value)
    for coll, tree_ in variables.items():
        used = {
            p
            for slot, p in enumerate(structure.paths)
            if structure.alias[slot] is None and structure.collection(slot) == coll
        }
        extra: list[Path] = []
        _unexpected(tree_, (), used, extra)
        if extra:
            shown = ", ".join(format_path(p) for p in extra[:5])
            raise StateMismatchError(
                f"variables[{coll!r}] holds {len(extra)} value(s) the model has no place "
                f"for: {shown}. They would be lost; check the collection and paths."
            )
    return _build(structure, values)
