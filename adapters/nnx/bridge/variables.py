"""``flax.nnx.bridge.variables``: Linen variables <-> NNX Variables.

A Linen collection name maps to an NNX Variable type (``params`` <-> ``Param``; an
unknown name gets a new Variable subclass of that name, registered both ways). A Linen
value becomes a Variable of its collection's type: a plain array is wrapped as is, a Linen
metadata box (``nn.Partitioned``...) gives its fields as the Variable's metadata (``names``
become ``out_sharding``, ``rules`` ``sharding_rules``) and remembers its box type in
``linen_meta_type``. The way back rebuilds that box, returns the bare value for a Variable
without metadata of its own, and otherwise boxes the Variable in ``NNXMeta``.
"""

import dataclasses
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Generic, TypeVar

import jax

import pytreemod as pm

from ...core import meta
from .. import spmd, traversals, variablelib

A = TypeVar("A")
B = TypeVar("B")

# Variable metadata every Variable carries; it does not make a Variable "non-vanilla".
_DEFAULT_METADATA = frozenset({"hijax", "ref", "eager_sharding"})


def _type_from_name(name: str) -> type[variablelib.Variable]:
    return variablelib.variable_type_from_name(name, allow_register=True)


def _name_from_type(var_type: type) -> str:
    return variablelib.variable_name_from_type(var_type, allow_register=True)


def sort_variable_types(types: Iterable[type]) -> list[type]:
    """``types`` with subclasses before their bases (most Variable ancestors first)."""

    def depth(t: type) -> int:
        return sum(1 for p in t.mro() if issubclass(p, variablelib.Variable))

    return sorted(types, key=lambda t: -depth(t))


class _Metadata(dict[str, Any]):
    """A Variable's metadata as the static part of an ``NNXMeta`` box: a dict that JAX
    can hash (by its keys; equality is the dict's)."""

    def __hash__(self) -> int:  # type: ignore[override]
        return hash(tuple(sorted(map(str, self))))


class NNXMeta(meta.AxisMetadata, Generic[A]):
    """The Linen box of an NNX Variable that carries metadata: its type, value and
    metadata, so the Variable can be rebuilt exactly (``to_nnx_variable``)."""

    var_type: type = pm.field(static=True)
    value: Any
    metadata: dict[str, Any] = pm.field(static=True)

    def __init__(self, var_type: type, value: Any, metadata: dict[str, Any]) -> None:
        self.var_type = var_type
        self.value = value
        self.metadata = _Metadata(metadata)

    def unbox(self) -> A:
        """The value."""
        return self.value

    def replace_boxed(self, value: B) -> "NNXMeta[B]":
        """The same box around ``value``."""
        return self.replace(value=value)  # type: ignore[return-value]

    def add_axis(self, index: int, params: Mapping[Any, Any]) -> "NNXMeta[A]":
        """The box of the value with an axis added at ``index``: the Variable's
        ``out_sharding`` gains ``params[PARTITION_NAME]`` there (unchanged without one).
        Flax leaves the box unchanged; this keeps ``remove_axis`` its inverse."""
        return self._with_axis(index, params, insert=True)

    def remove_axis(self, index: int, params: Mapping[Any, Any]) -> "NNXMeta[A]":
        """Inverse of ``add_axis``."""
        return self._with_axis(index, params, insert=False)

    def _with_axis(self, index: int, params: Mapping[Any, Any], insert: bool) -> "NNXMeta[A]":
        axis_name = params.get(meta.PARTITION_NAME)
        names = self.metadata.get("out_sharding")
        if axis_name is None or names is None:
            return self
        updated = list(names)
        if insert:
            updated.insert(index if index >= 0 else len(updated) + 1 + index, axis_name)
        else:
            del updated[index]
        metadata = _Metadata({**self.metadata, "out_sharding": tuple(updated)})
        return self.replace(metadata=metadata)

    def get_partition_spec(self) -> jax.sharding.PartitionSpec:
        """The PartitionSpec of the value, from the Variable's ``out_sharding``."""
        names = self.metadata.get("out_sharding") or self.metadata.get("sharding_names")
        if names is None:
            return jax.sharding.PartitionSpec()
        return jax.sharding.PartitionSpec(*names)

    def to_nnx_variable(self) -> variablelib.Variable:
        """The Variable this box stands for."""
        return self.var_type(self.value, **self.metadata)


def is_vanilla_variable(vs: variablelib.Variable) -> bool:
    """Whether ``vs`` carries no metadata beyond the defaults (empty hooks included)."""
    required = getattr(variablelib.Variable, "required_metadata", _DEFAULT_METADATA)
    for key, value in vs.get_metadata().items():
        if key in required:
            continue
        if key.endswith("_hooks") and value == ():
            continue
        return False
    return True


def to_linen_var(vs: variablelib.Variable) -> Any:
    """A Variable as a Linen value: its original Linen box, the bare value, or ``NNXMeta``."""
    metadata = vs.get_metadata()
    if "linen_meta_type" in metadata:
        box_type = metadata["linen_meta_type"]
        if hasattr(box_type, "from_nnx_metadata"):
            return box_type.from_nnx_metadata({"value": vs.get_value(), **metadata})
        return _linen_box(box_type, vs.get_value(), metadata)
    if is_vanilla_variable(vs):
        return vs.get_value()
    return NNXMeta(type(vs), vs.get_value(), metadata)


# Linen box fields under their NNX metadata names.
_TO_NNX_NAMES = {"names": "out_sharding", "rules": "sharding_rules"}
_TO_LINEN_NAMES = {v: k for k, v in _TO_NNX_NAMES.items()}


def _box_fields(box: Any) -> dict[str, Any]:
    if dataclasses.is_dataclass(box):
        names = [f.name for f in dataclasses.fields(box)]
    else:
        names = list(vars(box))
    return {n: getattr(box, n) for n in names if not n.startswith("_")}


def _linen_box(box_type: type, value: Any, metadata: Mapping[str, Any]) -> Any:
    """Rebuild a Linen box of ``box_type`` from a Variable's value and metadata."""
    fields = (
        {f.name for f in dataclasses.fields(box_type)}
        if dataclasses.is_dataclass(box_type)
        else None
    )
    kwargs = {"value": value}
    for key, item in metadata.items():
        name = _TO_LINEN_NAMES.get(key, key)
        if fields is None or name in fields:
            kwargs[name] = item
    kwargs.pop("linen_meta_type", None)
    return box_type(**kwargs)


def get_col_name(keypath: tuple[Any, ...]) -> str:
    """The Linen collection name at the head of a variables-dict key path."""
    head = keypath[0]
    assert isinstance(head, jax.tree_util.DictKey)
    return str(head.key)


def to_nnx_var(col: str, x: Any) -> variablelib.Variable:
    """A Linen value of collection ``col`` as an NNX Variable."""
    var_type = _type_from_name(col)
    if isinstance(x, NNXMeta):
        assert var_type == x.var_type, (
            f"Type stored in NNXMeta {x.var_type} != type inferred from collection name {var_type}"
        )
        return x.to_nnx_variable()
    if isinstance(x, meta.AxisMetadata):
        if hasattr(x, "to_nnx_metadata"):
            fields = dict(x.to_nnx_metadata())  # type: ignore[attr-defined]
        else:
            fields = {_TO_NNX_NAMES.get(k, k): v for k, v in _box_fields(x).items()}
        value = fields.pop("value")
        return var_type(value, **fields, linen_meta_type=type(x))
    return var_type(x)


def _recursive_merge(dict1: Mapping[Any, Any], dict2: Mapping[Any, Any]) -> dict[Any, Any]:
    """``dict1`` updated leaf by leaf with ``dict2``."""
    flat = dict(traversals.flatten_mapping(dict1))
    flat.update(traversals.flatten_mapping(dict2))
    return traversals.unflatten_mapping(flat)


def linen_vars_to_nnx_attrs(variables: Mapping[str, Any]) -> dict[str, Any]:
    """A Linen variables dict as one nested dict of NNX Variables (collections merged);
    a path present in two collections is a ValueError."""
    converted = jax.tree_util.tree_map_with_path(
        lambda kp, x: to_nnx_var(get_col_name(kp), x),
        dict(variables),
        is_leaf=lambda x: not isinstance(x, Mapping),
    )
    flat: dict[tuple[Any, ...], Any] = {}
    for collection in converted.values():
        for path, variable in traversals.flatten_mapping(collection).items():
            if path in flat:
                raise ValueError(
                    f"Found duplicate variable path {path} with variables {flat[path]} and "
                    f"{variable}. This is not allowed in NNX."
                )
            flat[path] = variable
    return traversals.unflatten_mapping(flat)


def nnx_attrs_to_linen_vars(nnx_attrs: Mapping[str, Any]) -> dict[str, Any]:
    """A nested dict of NNX Variables as a Linen variables dict ``{collection: ...}``."""
    by_path = {}
    for path, v in traversals.flatten_mapping(nnx_attrs).items():
        if not isinstance(v, variablelib.Variable):
            raise ValueError(f"Cannot infer collection name from value: {v}")
        by_path[(_name_from_type(type(v)), *path)] = to_linen_var(v)
    return traversals.unflatten_mapping(by_path)


def with_partitioning(
    fn: Callable[..., Any],
    names: Any,
    mesh: jax.sharding.Mesh | None = None,
) -> Callable[..., Any]:
    """Linen's ``with_partitioning`` signature, building an NNX-sharded Variable whose
    Linen form is ``nn.Partitioned``."""
    return spmd.with_partitioning(fn, names, mesh, linen_meta_type=meta.Partitioned)
