"""``Module`` itself (immutability, equality, hashing, repr) and ``replace``/``fields``."""

import dataclasses
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, ClassVar, TypeVar

import jax.tree_util as jtu

from .._errors import FrozenModuleError, UndeclaredFieldError, UnhashableModuleError
from .._repr import format_group, tree_pformat
from .._tree import tree_equal
from .._treescope import treescope_repr
from ._fields import MARK
from ._init import initialising
from ._metaclass import _ModuleMeta

_M = TypeVar("_M", bound="Module")


class Module(metaclass=_ModuleMeta):
    """Base class of models: a frozen dataclass that is a JAX PyTree.

    Declare fields in the class body. Arrays (usually wrapped in ``Param`` or another
    ``Variable`` to name their collection) and submodules are children; configuration
    declared with ``field(static=True)`` lives in the tree structure. Either let the
    dataclass write ``__init__`` or write your own that assigns every field.

    >>> import jax, jax.numpy as jnp
    >>> import pytreemod as pm
    >>> class Linear(pm.Module):
    ...     weight: pm.Param
    ...     bias: pm.Param
    ...     def __init__(self, n_in: int, n_out: int, *, key: jax.Array):
    ...         self.weight = pm.Param(jax.random.normal(key, (n_in, n_out)))
    ...         self.bias = pm.Param(jnp.zeros(n_out))
    ...     def __call__(self, x):
    ...         return x @ self.weight.value + self.bias.value
    >>> Linear(2, 3, key=jax.random.key(0))
    Linear(weight=Param(f32[2, 3]), bias=Param(f32[3]))

    After construction the instance is immutable; use ``replace`` or ``tree_at`` to get
    an updated copy.
    """

    if TYPE_CHECKING:  # set by the metaclass; declared for type checkers, not as fields
        _pytreemod_field_objs: ClassVar[tuple[dataclasses.Field[Any], ...]]
        _pytreemod_fields: ClassVar[tuple[str, ...]]
        _pytreemod_fieldset: ClassVar[frozenset[str]]
        _pytreemod_static: ClassVar[tuple[str, ...]]
        _pytreemod_data_fields: ClassVar[tuple[str, ...]]
        _pytreemod_converters: ClassVar[tuple[tuple[str, Callable[[Any], Any]], ...]]
        _pytreemod_check_inits: ClassVar[tuple[Callable[[Any], None], ...]]
        _pytreemod_user_init: ClassVar[bool]
        _pytreemod_typecheck: ClassVar[bool]

    def __setattr__(self, name: str, value: Any) -> None:
        if id(self) in initialising:
            if name not in type(self)._pytreemod_fieldset:
                raise UndeclaredFieldError(
                    f"{type(self).__name__}.__init__ sets {name!r}, which is not a declared "
                    f"field. Declare it in the class body (`{name}: <type>`) so it becomes "
                    "part of the PyTree."
                )
            object.__setattr__(self, name, value)
            return
        raise FrozenModuleError(
            f"Cannot assign {type(self).__name__}.{name}: modules are immutable after "
            f"__init__. Build an updated copy instead: `model.replace({name}=...)` for this "
            f"field, or `pytreemod.tree_at(lambda m: m.path.to.{name}, model, new_value)` "
            "from the root of the model."
        )

    def __delattr__(self, name: str) -> None:
        raise FrozenModuleError(
            f"Cannot delete {type(self).__name__}.{name}: modules are immutable. Use "
            "`model.replace(...)` to build a copy with a different value."
        )

    def replace(self: _M, **changes: Any) -> _M:
        """Return a copy with the given fields replaced (no ``__init__``, no converters).

        >>> import pytreemod as pm
        >>> class Box(pm.Module):
        ...     x: int
        >>> Box(1).replace(x=2)
        Box(x=2)
        """
        return replace(self, **changes)

    def __eq__(self, other: object) -> bool:
        return type(self) is type(other) and tree_equal(self, other)

    def __hash__(self) -> int:
        try:
            return hash((type(self), *jtu.tree_leaves(self)))
        except TypeError:
            raise UnhashableModuleError(
                f"{type(self).__name__} is not hashable because it holds arrays. This usually "
                "means a model was used where JAX needs a static value, as in "
                "`jax.jit(model)` or `static_argnums`: pass the model as a traced argument "
                "instead, e.g. `pm.jit(model)(x)` or `jax.jit(lambda m, x: m(x))(model, x)`."
            ) from None

    def __repr__(self) -> str:
        return tree_pformat(self)

    def _pytreemod_pformat(self, indent: int, width: int, used: int) -> str:
        items = [
            (f.name, getattr(self, f.name))
            for f in dataclasses.fields(self)
            if f.repr and f.name in self._pytreemod_fieldset and f.name in self.__dict__
        ]
        return format_group(f"{type(self).__name__}(", ")", items, indent, width, used)

    def __treescope_repr__(self, path: str | None, subtree_renderer: Callable[..., Any]) -> Any:
        """Render as a foldable tree in notebooks (needs the optional ``treescope``)."""
        return treescope_repr(self, path, subtree_renderer)


def replace(module: _M, /, **changes: Any) -> _M:
    """Return a copy of ``module`` with the named fields replaced.

    The copy is built directly (no ``__init__``, converters or ``__check_init__``), exactly
    as JAX rebuilds a tree. An unknown field name is an ``UndeclaredFieldError``.
    """
    cls = type(module)
    if not isinstance(module, Module):
        raise TypeError(
            f"replace: expected a Module (an instance of a pm.Module subclass), got "
            f"{cls.__name__}; for other trees use pm.tree_at(lambda t: ..., tree, value)."
        )
    unknown = [n for n in changes if n not in cls._pytreemod_fields]
    if unknown:
        fields = ", ".join(cls._pytreemod_fields) or "(none)"
        raise UndeclaredFieldError(
            f"{cls.__name__} has no field {unknown[0]!r}; its fields are: {fields}."
        )
    new: Any = object.__new__(cls)
    new.__dict__.update(module.__dict__)
    new.__dict__.update(changes)
    return new


def fields(module: "Module | type[Module]") -> tuple[dataclasses.Field[Any], ...]:
    """The dataclass fields of a Module class or instance (without internal ones)."""
    return tuple(f for f in dataclasses.fields(module) if f.name != MARK)
