"""``BoundMethod``: a method bound to a Module, itself a PyTree."""

import functools
from collections.abc import Callable
from typing import Any, TypeVar

import jax.tree_util as jtu

from .._errors import FrozenModuleError

_T = TypeVar("_T")

new_partial = functools.partial.__new__
"""``new_partial(BoundMethod, func, module)`` builds a bound method without ``__init__``
(the fast path every method access takes)."""


class BoundMethod(functools.partial[_T]):
    """A method bound to a Module, itself a PyTree whose only child is the module.

    Passed as an argument to a transform (``jax.jit(lambda f, x: f(x))(model.encode, x)``,
    or a pytreemod transform of ``model.encode``), the model's arrays are therefore inputs,
    not constants captured in a closure. (``jax.jit(model.encode)`` works too, but plain
    JAX treats the function it wraps as static, so there the arrays are constants.)

    It is a ``functools.partial`` of the function with the module as first argument, so
    that calling it (``model(x)`` goes through ``model.__call__``) runs in C.
    """

    __slots__ = ()

    def __new__(cls, __func__: Callable[..., _T], __self__: Any) -> "BoundMethod[_T]":
        return new_partial(cls, __func__, __self__)

    @property
    def __func__(self) -> Callable[..., _T]:
        """The function (as defined in the class body)."""
        return self.func

    @property
    def __self__(self) -> Any:
        """The module the method is bound to."""
        return self.args[0]

    def __setattr__(self, name: str, value: Any) -> None:
        raise FrozenModuleError(f"Cannot set {name!r} on a bound method; it is immutable.")

    def __reduce__(self) -> tuple[Any, ...]:
        # copy/deepcopy/pickle: rebuild through __new__, not the frozen __setattr__.
        return (BoundMethod, (self.func, self.args[0]))

    def __getattr__(self, name: str) -> Any:
        # __name__, __qualname__ ... of the underlying function.
        if name in ("__func__", "__self__", "func", "args", "keywords"):
            raise AttributeError(name)
        return getattr(self.func, name)

    @property
    def __wrapped__(self) -> Callable[..., _T]:
        return functools.partial(self.func, self.args[0])

    def __eq__(self, other: object) -> bool:
        return (
            type(other) is BoundMethod and self.func is other.func and self.args[0] == other.args[0]
        )

    def __hash__(self) -> int:
        # Not hash(self.__self__): a module holding arrays is unhashable, and jax.jit hashes
        # the function it wraps. Equal bound methods still hash equal.
        return hash((self.func, type(self.args[0])))

    def __repr__(self) -> str:
        return f"<bound method {self.func.__qualname__} of {type(self.args[0]).__name__}>"

    def _pytreemod_pformat(self, indent: int, width: int, used: int) -> str:
        return repr(self)


jtu.register_dataclass(BoundMethod, data_fields=["__self__"], meta_fields=["__func__"])
