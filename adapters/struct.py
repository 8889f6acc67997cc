"""``adapters.struct``: frozen dataclasses that are JAX pytrees (``flax.struct``'s API).

``@dataclass`` makes a class a (by default frozen) dataclass registered with JAX: its
fields are children, except those declared ``field(pytree_node=False)``, which are
static metadata (part of the tree structure, so they must be hashable). The class gets
``replace(**updates)``; ``PyTreeNode`` is a base class doing the same to subclasses.
``adapters.serialization`` saves and restores the data fields.
"""

import dataclasses
import functools
from collections.abc import Callable, Mapping
from typing import Any, TypeVar, dataclass_transform, overload

import jax

import pytreemod as pm

_T = TypeVar("_T")
TNode = TypeVar("TNode", bound="PyTreeNode")


def field(
    pytree_node: bool = True, *, metadata: Mapping[str, Any] | None = None, **kwargs: Any
) -> Any:
    """A ``dataclasses.field``; ``pytree_node=False`` makes it static metadata."""
    meta = {**(metadata or {}), "pytree_node": pytree_node}
    if not pytree_node:
        # The same flag under pytreemod's name, for PyTreeNodes that are also pytreemod
        # Modules (e.g. custom AxisMetadata boxes); data fields' metadata stays Flax's.
        meta["static"] = True
    return dataclasses.field(metadata=meta, **kwargs)


def _replace(self: Any, **updates: Any) -> Any:
    """A copy with the given fields replaced."""
    return dataclasses.replace(self, **updates)


@overload
@dataclass_transform(field_specifiers=(field,))
def dataclass(clz: type[_T], /, **kwargs: Any) -> type[_T]: ...


@overload
@dataclass_transform(field_specifiers=(field,))
def dataclass(clz: None = None, /, **kwargs: Any) -> Callable[[type[_T]], type[_T]]: ...


@dataclass_transform(field_specifiers=(field,))
def dataclass(clz: type[_T] | None = None, /, **kwargs: Any) -> Any:
    """Make ``clz`` a frozen dataclass and a JAX pytree (``@dataclass`` or ``@dataclass(...)``).

    ``kwargs`` go to ``dataclasses.dataclass`` (``frozen`` defaults to ``True``;
    ``kw_only``, ``eq``... as there). Applying it twice to a class is a no-op.
    """
    if clz is None:
        return functools.partial(dataclass, **kwargs)
    if "_flax_dataclass" in clz.__dict__:
        return clz
    kwargs.setdefault("frozen", True)
    data_clz: Any = dataclasses.dataclass(**kwargs)(clz)
    data_fields: list[str] = []
    meta_fields: list[str] = []
    for f in dataclasses.fields(data_clz):
        (data_fields if f.metadata.get("pytree_node", True) else meta_fields).append(f.name)
    data_clz.replace = _replace
    jax.tree_util.register_dataclass(data_clz, data_fields, meta_fields)
    data_clz._flax_dataclass = True  # adapters.serialization: save the data fields
    return data_clz


@dataclass_transform(field_specifiers=(field,))
class PyTreeNode:
    """Base class whose subclasses are ``@dataclass``es (keyword arguments of the class
    statement go to ``dataclass``: ``class A(PyTreeNode, frozen=False)``)."""

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__()
        if issubclass(cls, pm.Module):
            # Also a pytreemod Module (``class Box(PyTreeNode, AxisMetadata)``): its
            # metaclass makes it a frozen dataclass registered with JAX.
            return
        dataclass(cls, **kwargs)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        # Replaced by the dataclass constructor in every subclass.
        raise NotImplementedError

    def replace(self: TNode, **overrides: Any) -> TNode:
        """A copy with the given fields replaced."""
        return dataclasses.replace(self, **overrides)  # type: ignore[type-var]
