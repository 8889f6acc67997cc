"""NNX variables: mutable pytreemod Variables with metadata.

``nnx.Variable`` is a ``pm.Variable``, and ``nnx.Param``/``BatchStat``/``Cache``/
``Intermediate`` are ``pm.Param``/``pm.BatchStat``/``pm.Cache``/``pm.Intermediate``, so
pytreemod's filters select them by type or collection name (``"params"``...) as they
select pytreemod's own. What nnx adds: the box is mutable (``v.value = x``, ``v[...] = x``),
carries metadata (``Param(x, sharding=...)``), and is a pytree whose aux data is that
metadata, so ``jax.tree.map`` keeps it.
"""

import operator
from collections.abc import Callable, Mapping
from typing import Any, ClassVar

import jax
import numpy as np

import pytreemod as pm

_MISSING: Any = object()


def _unwrap(x: Any) -> Any:
    """The value of a Variable; anything else unchanged."""
    return x.get_value() if isinstance(x, Variable) else x


def _flatten(v: Any) -> tuple[tuple[Any], tuple[tuple[str, Any], ...]]:
    return (v._raw_value,), tuple(sorted(v._var_metadata.items()))


def _unflatten_as(cls: type) -> Callable[[Any, Any], "Variable"]:
    return lambda aux, children: cls.from_metadata(children[0], dict(aux))


class _OwnPytree:
    """Mixin before ``pm.Variable`` in the bases: its ``__init_subclass__`` takes the place
    of ``pm.Variable``'s (same ``collection=`` rule), registering nnx's pytree (value plus
    metadata) instead of pytreemod's value-only one."""

    __slots__ = ()
    collection: ClassVar[str]

    def __init_subclass__(cls, collection: str | None = None, **kwargs: Any) -> None:
        super(pm.Variable, cls).__init_subclass__(**kwargs)  # type: ignore[arg-type]
        cls.collection = collection if collection is not None else cls.__name__
        jax.tree_util.register_pytree_node(cls, _flatten, _unflatten_as(cls))


_Op = Callable[["Variable", Any], Any]


def _binary(op: Callable[[Any, Any], Any]) -> _Op:
    return lambda self, other: op(self._raw_value, _unwrap(other))


def _reflected(op: Callable[[Any, Any], Any]) -> _Op:
    return lambda self, other: op(_unwrap(other), self._raw_value)


class Variable(_OwnPytree, pm.Variable[Any], collection="variables"):
    """A mutable box around one value (usually an array) with metadata.

    ``v.value`` / ``v[...]`` read the value (through ``get_value``), ``v.value = x`` /
    ``v[...] = x`` replace it (through ``set_value``) and ``v[idx] = x`` writes a slice
    (``value.at[idx].set(x)``). Extra keyword arguments are metadata, readable as
    attributes (``Param(x, sharding=...).sharding``).
    """

    __slots__ = ("_raw_value", "_var_metadata")

    _raw_value: Any
    _var_metadata: dict[str, Any]

    def __init__(self, value: Any, **metadata: Any) -> None:
        object.__setattr__(self, "_raw_value", _unwrap(value))
        object.__setattr__(self, "_var_metadata", dict(metadata))

    @classmethod
    def from_metadata(cls, value: Any, metadata: Mapping[str, Any]) -> "Variable":
        """A new ``cls`` holding ``value`` with ``metadata`` (no checks)."""
        obj = object.__new__(cls)
        object.__setattr__(obj, "_raw_value", value)
        object.__setattr__(obj, "_var_metadata", dict(metadata))
        return obj

    @property
    def value(self) -> Any:
        """The wrapped value."""
        return self.get_value()

    @value.setter
    def value(self, value: Any) -> None:
        self.set_value(value)

    def get_value(self) -> Any:
        """The wrapped value."""
        return self._raw_value

    def set_value(self, value: Any) -> None:
        """Replace the wrapped value in place."""
        object.__setattr__(self, "_raw_value", _unwrap(value))

    # pytreemod's functional get/set become the in-place ones: an nnx Variable is mutable.
    get = get_value
    set = set_value

    def get_raw_value(self) -> Any:
        """The wrapped value, bypassing a subclass's ``get_value``."""
        return self._raw_value

    def set_raw_value(self, value: Any) -> None:
        """Replace the wrapped value in place, bypassing a subclass's ``set_value``."""
        object.__setattr__(self, "_raw_value", value)

    def set_metadata(self, *args: Any, **kwargs: Any) -> None:
        """``set_metadata(dict)`` replaces all metadata, ``set_metadata(name, value)`` sets one
        entry, ``set_metadata(**entries)`` updates entries."""
        if args and kwargs:
            raise TypeError("Cannot mix positional and keyword arguments in set_metadata")
        if len(args) == 1:
            object.__setattr__(self, "_var_metadata", dict(args[0]))
        elif len(args) == 2:
            self._var_metadata[args[0]] = args[1]
        elif args:
            raise TypeError(f"set_metadata takes 1 or 2 positional arguments, got {len(args)}")
        else:
            self._var_metadata.update(kwargs)

    def get_metadata(self, name: str | None = None, default: Any = _MISSING) -> Any:
        """A copy of the metadata dict, or the entry ``name`` (``default`` if absent)."""
        if name is None:
            return dict(self._var_metadata)
        if name in self._var_metadata:
            return self._var_metadata[name]
        if default is _MISSING:
            raise KeyError(f"{name!r} not found in the metadata of {type(self).__name__}")
        return default

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.get_value()(*args, **kwargs)

    def replace(self, value: Any = None, **metadata: Any) -> "Variable":
        """A new Variable of the same type; ``value`` (if given) and ``metadata`` override."""
        new_value = self._raw_value if value is None else _unwrap(value)
        return type(self).from_metadata(new_value, {**self._var_metadata, **metadata})

    def copy(self) -> "Variable":
        """A shallow copy (same value object, copied metadata)."""
        return type(self).from_metadata(self._raw_value, self._var_metadata)

    def __getstate__(self) -> dict[str, Any]:
        return {"value": self._raw_value, "metadata": self._var_metadata}

    def __setstate__(self, state: dict[str, Any]) -> None:
        object.__setattr__(self, "_raw_value", state["value"])
        object.__setattr__(self, "_var_metadata", dict(state["metadata"]))

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        metadata = object.__getattribute__(self, "_var_metadata")
        if name in metadata:
            return metadata[name]
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    def __setattr__(self, name: str, value: Any) -> None:
        if name == "value":
            self.set_value(value)
        elif name in Variable.__slots__:
            object.__setattr__(self, name, value)
        else:
            self._var_metadata[name] = value

    def __delattr__(self, name: str) -> None:
        try:
            del self._var_metadata[name]
        except KeyError:
            raise AttributeError(f"{type(self).__name__} has no metadata {name!r}") from None

    def __getitem__(self, index: Any) -> Any:
        value = self.get_value()
        return value if index is Ellipsis else value[index]

    def __setitem__(self, index: Any, value: Any) -> None:
        if index is Ellipsis:
            self.set_value(value)
        else:
            self.set_value(self.get_value().at[index].set(value))

    @property
    def ndim(self) -> int:
        """Number of dimensions of the value."""
        return self._raw_value.ndim

    @property
    def size(self) -> int:
        """Number of elements of the value."""
        return self._raw_value.size

    @property
    def T(self) -> Any:
        """The transposed value."""
        return self._raw_value.T

    __hash__: ClassVar[None] = None  # type: ignore[assignment]

    def __eq__(self, other: object) -> Any:  # type: ignore[override]
        return self._raw_value == _unwrap(other)

    def __ne__(self, other: object) -> Any:  # type: ignore[override]
        return self._raw_value != _unwrap(other)

    __add__: ClassVar[_Op] = _binary(operator.add)
    __radd__: ClassVar[_Op] = _reflected(operator.add)
    __sub__: ClassVar[_Op] = _binary(operator.sub)
    __rsub__: ClassVar[_Op] = _reflected(operator.sub)
    __mul__: ClassVar[_Op] = _binary(operator.mul)
    __rmul__: ClassVar[_Op] = _reflected(operator.mul)
    __truediv__: ClassVar[_Op] = _binary(operator.truediv)
    __rtruediv__: ClassVar[_Op] = _reflected(operator.truediv)
    __matmul__: ClassVar[_Op] = _binary(operator.matmul)
    __rmatmul__: ClassVar[_Op] = _reflected(operator.matmul)
    __pow__: ClassVar[_Op] = _binary(operator.pow)

    def __neg__(self) -> Any:
        return -self._raw_value

    def __abs__(self) -> Any:
        return abs(self._raw_value)

    def __len__(self) -> int:
        return len(self._raw_value)

    def __array__(self, dtype: Any = None, copy: Any = None) -> Any:
        return np.asarray(self._raw_value, dtype=dtype)

    def __repr__(self) -> str:
        extra = "".join(f", {k}={v!r}" for k, v in self._var_metadata.items())
        return f"{type(self).__name__}(value={self._raw_value!r}{extra})"


class Param(Variable, pm.Param[Any], collection="params"):
    """A trainable parameter (collection ``params``; a ``pm.Param``)."""

    __slots__ = ()


class BatchStat(Variable, pm.BatchStat[Any], collection="batch_stats"):
    """Running statistics such as BatchNorm's mean and variance (``batch_stats``)."""

    __slots__ = ()


class Cache(Variable, pm.Cache[Any], collection="cache"):
    """Cached values such as a decoder's keys and values (``cache``)."""

    __slots__ = ()


class Intermediate(Variable, pm.Intermediate[Any], collection="intermediates"):
    """Values sown during a call (``intermediates``)."""

    __slots__ = ()


class RngState(Variable):
    """State of an RNG stream (its key or counter); metadata ``tag`` names the stream."""

    __slots__ = ()


class RngKey(RngState):
    """The key of an RNG stream."""

    __slots__ = ()


class RngCount(RngState):
    """The call counter of an RNG stream."""

    __slots__ = ()
