"""NNX and pytreemod, both ways: ``NNXToPytreemod`` / ``from_nnx`` and ``PytreemodToNNX`` /
``to_nnx``.

**NNX to pytreemod.** ``nnx.split`` gives the model's ``GraphDef`` (its object graph:
module types, static attributes, shared modules and shared Variables) and one entry per
distinct Variable. The pytreemod model keeps the ``GraphDef`` and, per Variable, its NNX
type and metadata as static fields, and the values as children: ``variables[path...]``
holds a pytreemod Variable of the NNX type's collection (``variable_type`` gives the
type), its value boxed in ``pm.Partitioned`` (``pm.LogicallyPartitioned`` with
``sharding_rules``) where the NNX Variable has ``out_sharding`` metadata. ``to_nnx()``
builds the NNX model again with ``nnx.merge``: same graph, Variable types, values and
metadata (an ``out_sharding`` changed on the pytreemod side, e.g. by ``pm.vmap``'s
``metadata``, comes back changed).

Calling the model builds the NNX model, calls it, and writes every Variable whose value
the call changed with ``Variable.set``, so the enclosing ``pm.apply(model, ...,
mutable=...)`` records it (outside one, a write is a ``pm.StateWriteError``). A call that
changes the graph (a new Variable, a changed static attribute or Variable metadata) is a
``BridgeError``: a pytreemod model cannot hold it.

**pytreemod to NNX.** ``PytreemodToNNX(model)`` is an NNX Module holding the pytreemod
model's ``Structure`` as static data and its variables as NNX Variables
(``variables[collection][...]``; ``pm.Param`` as ``nnx.Param``..., another collection as
the NNX type registered under its name; boxes as ``out_sharding``/``mesh``/
``sharding_rules`` metadata). Calling it runs the pytreemod model under ``pm.apply`` with
every collection mutable and sets the NNX Variables it wrote; ``to_pytreemod()`` returns
the pytreemod model.
"""

from collections.abc import Callable, Hashable, Mapping
from typing import Any, NamedTuple

import jax

import pytreemod as pm

from .. import nnx
from ._keys import variable_type
from ._to_pytreemod import BridgeError

# NNX metadata that a pytreemod box carries (the order is the box's arguments').
_BOX_KEYS = ("out_sharding", "mesh", "sharding_rules")


def _is_var(x: Any) -> bool:
    return isinstance(x, pm.Variable)


def _freeze(metadata: Mapping[str, Any]) -> tuple[tuple[str, Any], ...]:
    return tuple(sorted(metadata.items()))


class _Slot(NamedTuple):
    """How one NNX Variable is rebuilt: its path in the state, its type, its metadata
    outside the box, and the box keys it had (``out_sharding``, ``mesh``,
    ``sharding_rules``) with their values."""

    path: tuple[Hashable, ...]
    nnx_type: type
    metadata: tuple[tuple[str, Any], ...]
    boxed: tuple[tuple[str, Any], ...]


class _Layout:
    """The static part: the ``GraphDef`` and the slots, equal by value. Hashable even
    where some metadata is not (a list): such layouts hash alike and ``==`` tells them
    apart, so JAX's caches stay correct."""

    __slots__ = ("graphdef", "slots")

    def __init__(self, graphdef: Any, slots: tuple[_Slot, ...]) -> None:
        self.graphdef = graphdef
        self.slots = slots

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, _Layout):
            return NotImplemented
        return self.graphdef == other.graphdef and self.slots == other.slots

    def __hash__(self) -> int:
        try:
            return hash((self.graphdef, self.slots))
        except TypeError:
            return hash(len(self.slots))

    def __repr__(self) -> str:
        return f"Layout({len(self.slots)} Variables)"


def _box(value: Any, boxed: Mapping[str, Any]) -> Any:
    names = boxed.get("out_sharding")
    if names is None:
        return value
    mesh = boxed.get("mesh")
    rules = boxed.get("sharding_rules")
    if rules is not None:
        return pm.LogicallyPartitioned(value, names, mesh, rules)
    return pm.Partitioned(value, names, mesh)


def _unbox(value: Any, slot: _Slot) -> tuple[Any, dict[str, Any]]:
    """The raw value in ``value`` and the NNX metadata its box (if any) stands for."""
    boxed = dict(slot.boxed)
    if not isinstance(value, pm.Partitioned):
        return value, boxed
    names = value.names
    old = boxed.get("out_sharding")
    # Unchanged names keep the original object (a PartitionSpec stays one).
    boxed["out_sharding"] = old if old is not None and tuple(old) == names else names
    if "mesh" in boxed or value.mesh is not None:
        boxed["mesh"] = value.mesh
    if isinstance(value, pm.LogicallyPartitioned) and value.rules is not None:
        boxed["sharding_rules"] = value.rules
    return value.value, boxed


def _nested_set(tree: dict[Any, Any], path: tuple[Hashable, ...], value: Any) -> None:
    for key in path[:-1]:
        tree = tree.setdefault(key, {})
    tree[path[-1]] = value


def _nested_get(tree: Any, path: tuple[Hashable, ...]) -> Any:
    for key in path:
        tree = tree[key]
    return tree


class NNXToPytreemod(pm.Module):
    """An NNX model as a frozen pytreemod Module.

    **Arguments:**

    - ``model``: an NNX object graph (an ``nnx.Module``, or any graph node ``nnx.split``
      takes).
    - ``variable_types``: optional ``{collection: pytreemod Variable type}`` overriding the
      bridge's default types (``variable_type``).

    ``model(*args, method=None, **kwargs)`` calls the NNX model (``method``: a method name
    or a function taking the model first) and returns its output; state writes go
    through ``pm.apply(model, ..., mutable=...)``. ``to_nnx()`` returns the NNX model.
    """

    layout: "_Layout" = pm.field(static=True)
    variables: dict[Any, Any]

    def __init__(
        self,
        model: Any,
        *,
        variable_types: Mapping[str, type[pm.Variable[Any]]] | None = None,
    ) -> None:
        types = variable_types or {}
        graphdef, state = nnx.split(model)
        slots: list[_Slot] = []
        variables: dict[Any, Any] = {}
        for path, var in nnx.to_flat_state(state):
            metadata = dict(var.get_metadata())
            boxed = {k: metadata.pop(k) for k in _BOX_KEYS if k in metadata}
            slots.append(_Slot(tuple(path), type(var), _freeze(metadata), _freeze(boxed)))
            collection = type(var).collection
            vtype = types.get(collection, variable_type(collection))
            _nested_set(variables, path, vtype(_box(var.get_value(), boxed)))
        self.layout = _Layout(graphdef, tuple(slots))
        self.variables = variables

    @property
    def graphdef(self) -> Any:
        """The NNX model's ``GraphDef`` (as ``nnx.graphdef(model)`` gave it)."""
        return self.layout.graphdef

    def to_nnx(self) -> Any:
        """The NNX model: the same graph, Variable types, metadata and current values (a
        new object graph each call)."""
        flat = []
        for slot in self.layout.slots:
            value, boxed = _unbox(_nested_get(self.variables, slot.path).get(), slot)
            metadata = {**dict(slot.metadata), **boxed}
            if metadata.get("ref"):
                value = jax.new_ref(value)
            flat.append((slot.path, slot.nnx_type.from_metadata(value, metadata)))
        return nnx.merge(self.layout.graphdef, nnx.from_flat_state(flat))

    def __call__(
        self, *args: Any, method: str | Callable[..., Any] | None = None, **kwargs: Any
    ) -> Any:
        model = self.to_nnx()
        if method is None:
            out = model(*args, **kwargs)
        elif isinstance(method, str):
            out = getattr(model, method)(*args, **kwargs)
        else:
            out = method(model, *args, **kwargs)
        graphdef, state = nnx.split(model)
        if graphdef != self.layout.graphdef:
            raise BridgeError(
                "The NNX call changed the model's graph (it created or removed a "
                "Variable or submodule, or changed a static attribute or Variable "
                "metadata), which a pytreemod model cannot hold. Make the change on the "
                "NNX model and convert it again with `bridge.from_nnx`."
            )
        for slot, (_, var) in zip(self.layout.slots, nnx.to_flat_state(state), strict=True):
            held = _nested_get(self.variables, slot.path)
            old, boxed = _unbox(held.get(), slot)
            new = var.get_value()
            if new is not old:
                held.set(_box(new, boxed))
        return out


def from_nnx(
    model: Any, *, variable_types: Mapping[str, type[pm.Variable[Any]]] | None = None
) -> NNXToPytreemod:
    """``NNXToPytreemod(model)``: an NNX model as a pytreemod Module."""
    return NNXToPytreemod(model, variable_types=variable_types)


# ------------------------------------------------------------------ pytreemod -> NNX

_NNX_TYPES: dict[str, Any] = {
    t.collection: t for t in (nnx.Param, nnx.BatchStat, nnx.Cache, nnx.Intermediate, nnx.Variable)
}


def _nnx_type(collection: str) -> Any:
    """The NNX Variable type for a pytreemod collection (``params`` -> ``nnx.Param``,
    ``variables`` -> ``nnx.Variable``...; another name -> the NNX type registered under
    it, registered on first use)."""
    known = _NNX_TYPES.get(collection)
    if known is not None:
        return known
    return nnx.variable_type_from_name(collection, allow_register=True)


def _to_nnx_var(collection: str, value: Any) -> Any:
    metadata: dict[str, Any] = {}
    if isinstance(value, pm.Partitioned):
        metadata = {"out_sharding": value.names, "mesh": value.mesh}
        if isinstance(value, pm.LogicallyPartitioned) and value.rules is not None:
            metadata["sharding_rules"] = value.rules
        value = value.value
    var = _nnx_type(collection)(value)
    if metadata:  # the value is placed already: record the sharding, do not apply it
        var.set_metadata(**metadata)
    return var


def _from_nnx_var(var: Any) -> Any:
    value = var.get_value()
    metadata = var.get_metadata()
    return _box(value, {k: metadata[k] for k in _BOX_KEYS if k in metadata})


def _map_leaves(fn: Callable[[Any], Any], tree: Any) -> Any:
    if isinstance(tree, Mapping):
        return {k: _map_leaves(fn, v) for k, v in tree.items()}
    return fn(tree)


class PytreemodToNNX(nnx.Module):
    """A pytreemod Module as an NNX Module.

    **Arguments:**

    - ``model``: a pytreemod Module (or any PyTree holding pytreemod Variables).

    Its Variables are NNX Variables at ``self.variables[collection][...]`` (the keys of
    ``pm.to_variables(model)``); ``pm.Partitioned`` boxes become ``out_sharding`` and
    ``mesh`` metadata (``sharding_rules`` for ``pm.LogicallyPartitioned``). Calling it
    calls ``method`` of the pytreemod model (default ``__call__``) under
    ``pm.apply(..., mutable=True)`` and sets the NNX Variables the call wrote.
    ``to_pytreemod()`` returns the pytreemod model of the current values.
    """

    def __init__(self, model: Any, *, method: str = "__call__") -> None:
        self.structure = nnx.static(pm.structure_of(model))
        self.method = method
        self.variables = nnx.data(
            {
                col: _map_leaves(lambda v, c=col: _to_nnx_var(c, v), tree)
                for col, tree in pm.to_variables(model).items()
            }
        )

    def to_pytreemod(self) -> Any:
        """The pytreemod model holding the current values (boxes from the metadata)."""
        values = {col: _map_leaves(_from_nnx_var, tree) for col, tree in self.variables.items()}
        return pm.from_variables(self.structure, values)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        model = self.to_pytreemod()
        fn = model if self.method == "__call__" else getattr(model, self.method)
        out, new = pm.apply(fn, *args, mutable=True, **kwargs)
        for col, tree in pm.to_variables(new).items():
            _write_back(self.variables[col], tree)
        return out


def _write_back(held: Any, new: Any) -> None:
    if isinstance(held, Mapping):
        for key, value in held.items():
            _write_back(value, new[key])
        return
    value = new.value if isinstance(new, pm.Partitioned) else new
    if value is not held.get_value():
        held.set_value(value)


def to_nnx(model: Any, *, method: str = "__call__") -> PytreemodToNNX:
    """``PytreemodToNNX(model)``: a pytreemod Module as an NNX Module."""
    return PytreemodToNNX(model, method=method)
