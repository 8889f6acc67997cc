"""``flax.nnx.proxy_caller``: record a chain of attribute and item lookups, replay it later.

``DelayedAccessor`` is a path such as ``.encoder.layers[0]`` kept as data (a static
pytree: hashable, no leaves); ``CallableProxy`` turns ``proxy.a.b[0](*args)`` into
``fn(DelayedAccessor(.a.b[0]), *args)``, the shape of NNX's ``Module.perturb``-style
"call a method of the object found at this path" APIs.
"""

import dataclasses
from typing import Any, Generic, Protocol, TypeVar

import jax

A = TypeVar("A", covariant=True)


@dataclasses.dataclass(frozen=True)
class GetItem:
    """One ``x[key]`` step of a path."""

    key: Any


@dataclasses.dataclass(frozen=True)
class GetAttr:
    """One ``x.name`` step of a path."""

    name: str


@dataclasses.dataclass(frozen=True)
class DelayedAccessor:
    """A recorded path of lookups; calling it on ``x`` replays them.

    >>> path = DelayedAccessor().layers[1].weight
    >>> path({"layers": [None, type("L", (), {"weight": 3})]})
    3
    """

    actions: tuple[GetItem | GetAttr, ...] = ()

    def __call__(self, x: Any) -> Any:
        for step in self.actions:
            x = x[step.key] if isinstance(step, GetItem) else getattr(x, step.name)
        return x

    def __getattr__(self, name: str) -> "DelayedAccessor":
        if name.startswith("__"):  # copy/pickle probes are not path steps
            raise AttributeError(name)
        return DelayedAccessor((*self.actions, GetAttr(name)))

    def __getitem__(self, key: Any) -> "DelayedAccessor":
        return DelayedAccessor((*self.actions, GetItem(key)))


jax.tree_util.register_static(DelayedAccessor)


class _AccessorCall(Protocol):
    def __call__(self, accessor: DelayedAccessor, /, *args: Any, **kwargs: Any) -> Any: ...


class CallableProxy:
    """``proxy.a[0].b(*args, **kwargs)`` calls ``fn(<path .a[0].b>, *args, **kwargs)``.

    >>> proxy = CallableProxy(lambda path, obj: path(obj))
    >>> proxy.real(3 + 4j)
    3.0
    """

    def __init__(self, callable: _AccessorCall, accessor: DelayedAccessor | None = None) -> None:
        self._callable = callable
        self._accessor = DelayedAccessor() if accessor is None else accessor

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self._callable(self._accessor, *args, **kwargs)

    def __getattr__(self, name: str) -> "CallableProxy":
        if name.startswith("__"):
            raise AttributeError(name)
        return CallableProxy(self._callable, getattr(self._accessor, name))

    def __getitem__(self, key: Any) -> "CallableProxy":
        return CallableProxy(self._callable, self._accessor[key])


class ApplyCaller(Protocol, Generic[A]):
    """The type of a ``CallableProxy`` whose calls return ``(output, A)``."""

    def __getattr__(self, name: str, /) -> "ApplyCaller[A]": ...

    def __getitem__(self, name: Any, /) -> "ApplyCaller[A]": ...

    def __call__(self, *args: Any, **kwargs: Any) -> tuple[Any, A]: ...
