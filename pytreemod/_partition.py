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

from collections.abc import Mapping, Sequence
from typing import Any

import jax
import jax.tree_util as jtu

from ._errors import StateMismatchError
from ._filters import FilterLike, to_filter
from ._meta import AxisMetadata
from ._tree import Path, format_path, is_array, path_keys
from ._variables import Variable

State = dict[Any, Any]
"""A nested dict of variable values, keyed by path components."""


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


class Structure:
    """Everything in a PyTree except its variables' values. Hashable, comparable.

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

    def __init__(
        self,
        treedef: Any,
        leaves: tuple[Any, ...],
        paths: tuple[Path, ...],
        types: tuple[type[Variable] | None, ...],
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

    def with_specs(self, values: Sequence[Any]) -> "Structure":
        """A copy that records the shape, dtype and boxes of each slot's value."""
        return Structure(
            self.treedef,
            self.leaves,
            self.paths,
            self.types,
            self.alias,
            tuple(_spec_of(v) for v in values),
        )

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
    boxes: list[AxisMetadata] = []
    if isinstance(value, Variable):
        value = value.value
    while isinstance(value, AxisMetadata):
        try:
            boxes.append(value.replace_boxed(None))  # metadata only: no array kept alive
        except Exception:  # a user box that refuses None: no spec, nothing checked
            return None
        value = value.value
    shape, dtype = getattr(value, "shape", None), getattr(value, "dtype", None)
    if shape is None or dtype is None:
        return None
    return SlotSpec(tuple(shape), dtype, tuple(boxes))


def _rebox(boxes: tuple[AxisMetadata, ...], value: Any) -> Any:
    for box in reversed(boxes):
        value = box.replace_boxed(value)
    return value


def _checked(spec: SlotSpec | None, value: Any, path: Path, check: bool, prefix: str = "") -> Any:
    """``value`` checked against the slot's spec (if ``check``), and put back in the
    slot's boxes if it comes without them. Shape and dtype attributes only: works on
    tracers, costs little (the message is only formatted on a mismatch)."""
    if spec is None:
        return value
    shape = getattr(value, "shape", None)
    boxed = shape is None and isinstance(value, AxisMetadata)
    leaf = value
    while isinstance(leaf, AxisMetadata):
        leaf = leaf.value
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
        value = _rebox(spec.boxes, value)
    return value


def _safe_eq(a: Any, b: Any) -> bool:
    try:
        return type(a) is type(b) and bool(a == b)
    except Exception:
        return False


def _split(tree: Any) -> tuple[Structure, list[Any]]:
    """Walk ``tree`` once: its Structure and the value (Variable or bare) of each slot."""
    flat, treedef = jtu.tree_flatten_with_path(tree, is_leaf=_is_slot_leaf)
    leaves: list[Any] = []
    paths: list[Path] = []
    types: list[type[Variable] | None] = []
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
    structure = Structure(treedef, tuple(leaves), tuple(paths), tuple(types), tuple(alias))
    return structure, values


def _unwrap(value: Any) -> Any:
    return value.value if isinstance(value, Variable) else value


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


def partition(tree: Any, *filters: FilterLike) -> tuple[Any, ...]:
    """Split ``tree`` into its structure, one state per filter, and the rest.

    **Arguments:**

    - ``tree``: a Module or any PyTree.
    - ``*filters``: any filter forms (see ``pytreemod.to_filter``). A variable goes to the
      first filter that selects it; what none selects goes to the last state, ``rest``.

    **Returns:** ``(structure, state_1, ..., state_n, rest)``; ``combine`` inverts it.

    >>> import jax.numpy as jnp
    >>> import pytreemod as pm
    >>> tree = {"w": pm.Param(jnp.ones(2)), "mean": pm.BatchStat(jnp.zeros(2))}
    >>> structure, params, rest = pm.partition(tree, "params")
    >>> params, rest
    ({'w': Array([1., 1.], dtype=float32)}, {'mean': Array([0., 0.], dtype=float32)})
    """
    structure, values = _split(tree)
    preds = [to_filter(f) for f in filters]
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
        _insert(states[group], path, _unwrap(value))
    return (structure.with_specs(values), *states)


def structure_of(tree: Any) -> Structure:
    """The ``Structure`` of ``tree`` (``partition(tree)[0]``)."""
    structure, values = _split(tree)
    return structure.with_specs(values)


def state(tree: Any, filter: FilterLike = True) -> State:
    """The state of the variables of ``tree`` that ``filter`` selects, as a nested dict."""
    return partition(tree, filter)[1]


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


def _build(structure: Structure, values: Sequence[Any]) -> Any:
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


def combine(structure: Structure, *states: Mapping[Any, Any], check: bool = True) -> Any:
    """Rebuild the tree from ``structure`` and the states ``partition`` returned.

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


def _check_no_extra(structure: Structure, states: Sequence[Mapping[Any, Any]]) -> None:
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
            _insert(out.setdefault(coll, {}), structure.paths[slot], _unwrap(value))
    return out


def from_variables(
    template: Any, variables: Mapping[str, Mapping[Any, Any]], *, check: bool = True
) -> Any:
    """Rebuild a tree shaped like ``template`` from a ``{collection: nested dict}``.

    ``template`` is a model of the same structure (an ``eval_shape`` skeleton will do;
    its values are not used) or a ``Structure``. Missing variables, and entries with no
    place in the model, are a ``StateMismatchError`` naming the collection and path; so
    is a value whose shape or dtype differs from the template's (``check=False`` skips
    that). Plain arrays for slots the template boxes (``Partitioned``...) get the
    template's box back.
    """
    structure = template if isinstance(template, Structure) else structure_of(template)
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
