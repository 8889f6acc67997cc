"""Variables: PyTree boxes that put one value in a named collection.

``Param`` (``params``), ``BatchStat`` (``batch_stats``), ``Cache`` (``cache``) and
``Intermediate`` (``intermediates``) are the built-in collections. Subclassing defines a
new collection, named by the ``collection=`` class keyword or, by default, by the class
name::

    class LoRAParam(pm.Param, collection="lora_params"):
        pass

A filter on ``Param`` (the type) matches ``LoRAParam`` too; a filter on ``"params"`` (the
collection name) does not.

Every Variable subclass is registered with JAX's C++ dataclass path: its only child is
``value``, so ``jax.tree.map`` maps the value and keeps the box.

``Variable.set``/``get`` go through the stack of ``WriteRecorder``s kept here: each active
``pytreemod.apply`` call (``_apply``) pushes one, and the innermost one records the writes.
"""

import contextvars
from collections.abc import Callable
from typing import Any, ClassVar, Generic, TypeVar

import jax
import jax.tree_util as jtu

from ._errors import FrozenModuleError, StateWriteError
from ._repr import format_node, tree_pformat
from ._tree import Path, format_path, is_array, tree_equal
from ._treescope import treescope_repr

T = TypeVar("T")
_V = TypeVar("_V", bound="Variable[Any]")


class WriteRecorder:
    """The writes of one ``pytreemod.apply`` call, keyed by the id of the Variable object.

    ``paths`` maps the id of every Variable of the applied model to its path and the
    Variable itself; ``mutable(path, variable)`` says whether it may be written;
    ``elsewhere`` is what to tell a write to a Variable outside the model (the likely cause
    and the fix, which depend on what ``apply`` was given).
    """

    __slots__ = ("elsewhere", "mutable", "paths", "writes")

    def __init__(
        self,
        paths: "dict[int, tuple[Path, Variable[Any]]]",
        mutable: "Callable[[Path, Variable[Any]], bool]",
        elsewhere: str,
    ):
        self.paths = paths
        self.mutable = mutable
        self.elsewhere = elsewhere
        self.writes: dict[int, Any] = {}


recorders: contextvars.ContextVar[tuple[WriteRecorder, ...]] = contextvars.ContextVar(
    "pytreemod_apply", default=()
)
"""The recorders of the active ``pytreemod.apply`` calls, innermost last (never modules)."""


def _unboxed(value: Any) -> Any:
    # The array a Variable holds, inside any axis-metadata boxes: a box is a PyTree node
    # whose only child is the value it wraps, so the one leaf is the array.
    if is_array(value) or isinstance(value, jax.ShapeDtypeStruct):
        return value
    leaves = jtu.tree_leaves(value)
    return leaves[0] if len(leaves) == 1 else value


class Variable(Generic[T]):
    """A box around one value (usually an array), tagged with a collection name.

    >>> import jax.numpy as jnp
    >>> import pytreemod as pm
    >>> w = pm.Param(jnp.zeros((2, 3)))
    >>> w, w.collection, w.value.shape
    (Param(f32[2, 3]), 'params', (2, 3))
    """

    __slots__ = ("value",)
    collection: ClassVar[str] = "variables"
    # How _treescope (a lower layer, which cannot import this file) recognises a Variable.
    _pytreemod_variable: ClassVar[bool] = True
    value: T

    def __init_subclass__(cls, collection: str | None = None, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        cls.collection = collection if collection is not None else cls.__name__
        jtu.register_dataclass(cls, data_fields=["value"], meta_fields=[])

    def __init__(self, value: T):
        object.__setattr__(self, "value", value)

    def __setattr__(self, name: str, value: Any) -> None:
        raise FrozenModuleError(
            f"Cannot assign {type(self).__name__}.{name}: variables are immutable. Use "
            f"`var.replace(new_value)` to build a new {type(self).__name__}."
        )

    def __delattr__(self, name: str) -> None:
        raise FrozenModuleError(f"Cannot delete {type(self).__name__}.{name}: immutable.")

    # copy, deepcopy and pickle restore the value without going through __setattr__.
    def __getstate__(self) -> dict[str, Any]:
        return {"value": self.value}

    def __setstate__(self, state: dict[str, Any]) -> None:
        object.__setattr__(self, "value", state["value"])

    def set(self, value: T) -> None:
        """Record ``value`` as this variable's new value in the innermost ``pytreemod.apply``.

        The variable itself is not changed; ``apply`` returns a model holding the new
        value. Writing outside ``apply``, or to a collection the ``apply`` call did not
        make mutable, is a ``StateWriteError``.
        """
        active = recorders.get()
        name = f"{type(self).__name__} (collection {self.collection!r})"
        if not active:
            raise StateWriteError(
                f"{name}.set() was called outside pytreemod.apply. Modules are immutable: run "
                f"the call as `out, model = pm.apply(model, *args, mutable={self.collection!r})` "
                "to get the updated model back."
            )
        recorder = active[-1]
        entry = recorder.paths.get(id(self))
        if entry is None:
            raise StateWriteError(
                f"{name}.set() wrote a variable that is not part of the model given to the "
                f"innermost pytreemod.apply. {recorder.elsewhere}"
            )
        path, original = entry
        if not recorder.mutable(path, original):
            raise StateWriteError(
                f"Cannot update {format_path(path)}: collection {self.collection!r} is not "
                f"mutable in this apply (mutable={recorder.mutable!r}). Pass "
                f"mutable=[{self.collection!r}, ...] to pytreemod.apply to allow it, or do not "
                "write it (e.g. BatchNorm with use_running_average=True in evaluation)."
            )
        recorder.writes[id(self)] = value

    def get(self) -> T:
        """The value written in the current ``apply`` call if any, else ``value``."""
        for recorder in reversed(recorders.get()):
            if id(self) in recorder.writes:
                return recorder.writes[id(self)]
        return self.value

    def replace(self: _V, value: Any) -> _V:
        """A new variable of the same type (and collection) holding ``value``."""
        return type(self)(value)

    @property
    def shape(self) -> tuple[int, ...]:
        """Shape of the (unboxed) value."""
        return _unboxed(self.value).shape

    @property
    def dtype(self) -> Any:
        """Dtype of the (unboxed) value."""
        return _unboxed(self.value).dtype

    def __eq__(self, other: object) -> bool:
        return type(self) is type(other) and tree_equal(self.value, other.value)  # type: ignore[attr-defined]

    def __hash__(self) -> int:
        return hash((type(self), self.value))

    def __repr__(self) -> str:
        return tree_pformat(self)

    def _pytreemod_pformat(self, indent: int, width: int, used: int) -> str:
        name = type(self).__name__
        return f"{name}({format_node(self.value, indent, width, used + len(name) + 2)})"

    def __treescope_repr__(self, path: str | None, subtree_renderer: Callable[..., Any]) -> Any:
        """Render as ``Param(value=...)``, a foldable node, in notebooks (needs the optional
        ``treescope``)."""
        return treescope_repr(self, path, subtree_renderer)


jtu.register_dataclass(Variable, data_fields=["value"], meta_fields=[])


class Param(Variable[T], collection="params"):
    """A trainable parameter (collection ``params``)."""

    __slots__ = ()


class BatchStat(Variable[T], collection="batch_stats"):
    """A running statistic such as BatchNorm's mean and variance (``batch_stats``)."""

    __slots__ = ()


class Cache(Variable[T], collection="cache"):
    """Decoding state such as an attention key/value cache (``cache``)."""

    __slots__ = ()


class Intermediate(Variable[T], collection="intermediates"):
    """A value recorded during a forward pass for inspection (``intermediates``)."""

    __slots__ = ()


def collection_of(value: Any) -> str:
    """The collection of a Variable, or ``"params"`` for a bare array.

    A bare array (or axis-metadata box) in a Module, not wrapped in a Variable, is treated
    as a parameter, so Equinox-style models work unchanged.
    """
    if isinstance(value, Variable):
        return value.collection
    return Param.collection
