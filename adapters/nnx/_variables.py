"""NNX variables: mutable boxes holding a value plus metadata."""

from collections.abc import Mapping
from typing import Any

import jax
import numpy as np

_MISSING: Any = object()


class Variable:
    """A mutable box around one value (usually an array) with metadata.

    ``v.value`` / ``v[...]`` read the value, ``v.value = x`` / ``v[...] = x`` replace it and
    ``v[idx] = x`` writes a slice (``value.at[idx].set(x)``). Extra keyword arguments are
    metadata, readable as attributes (``Param(x, sharding=...).sharding``).
    """

    __slots__ = ("_raw_value", "_var_metadata")

    _raw_value: Any
    _var_metadata: dict[str, Any]

    def __init__(self, value: Any, **metadata: Any) -> None:
        if isinstance(value, Variable):
            value = value.get_value()
        object.__setattr__(self, "_raw_value", value)
        object.__setattr__(self, "_var_metadata", dict(metadata))

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        _register(cls)

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
        if isinstance(value, Variable):
            value = value.get_value()
        object.__setattr__(self, "_raw_value", value)

    def get_raw_value(self) -> Any:
        """The wrapped value (same as ``get_value`` here)."""
        return self._raw_value

    def set_raw_value(self, value: Any) -> None:
        """Replace the wrapped value in place (same as ``set_value`` here)."""
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
        new_value = self._raw_value if value is None else value
        if isinstance(new_value, Variable):
            new_value = new_value.get_value()
        return type(self).from_metadata(new_value, {**self._var_metadata, **metadata})

    def copy(self) -> "Variable":
        """A shallow copy (same value object, copied metadata)."""
        return type(self).from_metadata(self._raw_value, self._var_metadata)

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

    def __getitem__(self, index: Any) -> Any:
        if index is Ellipsis:
            return self.get_value()
        return self.get_value()[index]

    def __setitem__(self, index: Any, value: Any) -> None:
        if index is Ellipsis:
            self.set_value(value)
        else:
            self.set_value(self.get_value().at[index].set(value))

    @property
    def shape(self) -> tuple[int, ...]:
        """Shape of the value."""
        return self._raw_value.shape

    @property
    def dtype(self) -> Any:
        """Dtype of the value."""
        return self._raw_value.dtype

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

    def __eq__(self, other: object) -> Any:
        return self._raw_value == self._other(other)

    def __ne__(self, other: object) -> Any:
        return self._raw_value != self._other(other)

    __hash__ = None  # type: ignore[assignment]

    def __len__(self) -> int:
        return len(self._raw_value)

    def __array__(self, dtype: Any = None, copy: Any = None) -> Any:
        return np.asarray(self._raw_value, dtype=dtype)

    def _other(self, other: Any) -> Any:
        return other.get_value() if isinstance(other, Variable) else other

    def __add__(self, other: Any) -> Any:
        return self._raw_value + self._other(other)

    def __radd__(self, other: Any) -> Any:
        return self._other(other) + self._raw_value

    def __sub__(self, other: Any) -> Any:
        return self._raw_value - self._other(other)

    def __rsub__(self, other: Any) -> Any:
        return self._other(other) - self._raw_value

    def __mul__(self, other: Any) -> Any:
        return self._raw_value * self._other(other)

    def __rmul__(self, other: Any) -> Any:
        return self._other(other) * self._raw_value

    def __truediv__(self, other: Any) -> Any:
        return self._raw_value / self._other(other)

    def __rtruediv__(self, other: Any) -> Any:
        return self._other(other) / self._raw_value

    def __matmul__(self, other: Any) -> Any:
        return self._raw_value @ self._other(other)

    def __rmatmul__(self, other: Any) -> Any:
        return self._other(other) @ self._raw_value

    def __pow__(self, other: Any) -> Any:
        return self._raw_value ** self._other(other)

    def __neg__(self) -> Any:
        return -self._raw_value

    def __abs__(self) -> Any:
        return abs(self._raw_value)

    def __repr__(self) -> str:
        extra = "".join(f", {k}={v!r}" for k, v in self._var_metadata.items())
        return f"{type(self).__name__}(value={self._raw_value!r}{extra})"


def _register(cls: type[Variable]) -> None:
    def flatten(v: Variable) -> tuple[tuple[Any], tuple[tuple[str, Any], ...]]:
        return (v._raw_value,), tuple(sorted(v._var_metadata.items()))

    def unflatten(aux: tuple[tuple[str, Any], ...], children: Any) -> Variable:
        return cls.from_metadata(children[0], dict(aux))

    jax.tree_util.register_pytree_node(cls, flatten, unflatten)


_register(Variable)


class Param(Variable):
    """A trainable parameter."""


class BatchStat(Variable):
    """Running statistics (e.g. BatchNorm's mean and variance)."""


class Cache(Variable):
    """Cached values (e.g. an autoregressive decoder's keys and values)."""


class Intermediate(Variable):
    """Values sown during a call."""


class RngState(Variable):
    """State of an RNG stream (its key or counter)."""


class RngKey(RngState):
    """The key of an RNG stream."""


class RngCount(RngState):
    """The call counter of an RNG stream."""
