"""Flax's Variable types and the Linen collection name <-> Variable type registry."""

import functools
import typing as tp
import warnings
from collections.abc import Callable, Sequence
from typing import Any

import pytreemod as pm
from adapters.typing import MISSING, Missing

from ._metadata import (
    A,
    AddAxisHook,
    CreateValueHook,
    GetValueHook,
    RemoveAxisHook,
    SetValueHook,
    VariableMetadata,
)
from ._variable import Variable

F = tp.TypeVar("F", bound=Callable[..., Any])

VariableState = Variable
"""Deprecated alias (Flax's old name for the state of a Variable)."""


class Param(Variable[A], pm.Param[A], collection="params"):
    """A trainable parameter (collection ``params``; a ``pm.Param``).

    Every learnable array of NNX's layers is a ``Param``:
    ``nnx.state(nnx.Linear(2, 3, rngs=nnx.Rngs(0)), nnx.Param)`` holds ``kernel`` and
    ``bias``.
    """


class BatchStat(Variable[A], pm.BatchStat[A], collection="batch_stats"):
    """Running statistics, such as BatchNorm's mean and variance (``batch_stats``)."""


class Cache(Variable[A], pm.Cache[A], collection="cache"):
    """Cached values, such as an autoregressive decoder's keys and values (``cache``)."""


class Intermediate(Variable[A], pm.Intermediate[A], collection="intermediates"):
    """Values sown during a call with ``Module.sow`` (``intermediates``)."""


class Perturbation(Intermediate[A], collection="perturbations"):
    """Perturbations added with ``Module.perturb``, whose gradients are the gradients of
    intermediate values (``perturbations``)."""


class RngState(Variable[A]):
    """State of an RNG stream (its key or counter); metadata ``tag`` names the stream."""


class RngKey(RngState[A]):
    """The key of an RNG stream."""


class RngCount(RngState[A]):
    """The call counter of an RNG stream."""


def _as_hooks(hooks: Any) -> tuple[Any, ...]:
    if not hooks:
        return ()
    return (hooks,) if callable(hooks) else tuple(hooks)


def with_metadata(
    initializer: F,
    on_set_value: SetValueHook | Sequence[SetValueHook] = (),
    on_get_value: GetValueHook | Sequence[GetValueHook] = (),
    on_create_value: CreateValueHook | Sequence[CreateValueHook] = (),
    on_add_axis: AddAxisHook | Sequence[AddAxisHook] = (),
    on_remove_axis: RemoveAxisHook | Sequence[RemoveAxisHook] = (),
    **metadata: Any,
) -> F:
    """``initializer`` whose result carries ``metadata`` (and hooks) into the Variable
    built from it: ``nnx.Param(with_metadata(init, out_sharding=(None, 'model'))(key,
    shape))`` is a ``Param`` with ``out_sharding`` metadata."""
    hooks = {
        "on_set_value": _as_hooks(on_set_value),
        "on_get_value": _as_hooks(on_get_value),
        "on_create_value": _as_hooks(on_create_value),
        "on_add_axis": _as_hooks(on_add_axis),
        "on_remove_axis": _as_hooks(on_remove_axis),
    }
    if any(hooks.values()):
        warnings.warn(
            "Variable hooks are deprecated in favor of users creating their own "
            "Variable types and overloading `get_value` and `set_value` instead.",
            stacklevel=2,
        )

    @functools.wraps(initializer)
    def wrapper(*args: Any) -> VariableMetadata[Any]:
        return VariableMetadata(initializer(*args), metadata=metadata, **hooks)

    return tp.cast(F, wrapper)


# --------------------------------------------------------------------------------------
# Linen collection name <-> NNX Variable type (one to one)
# --------------------------------------------------------------------------------------

VariableTypeCache: dict[str, type[Variable[Any]]] = {}
"""The registry of ``register_variable_name``: collection name -> Variable type."""


def variable_type_from_name(
    name: str, /, *, base: type[Variable[Any]] = Variable, allow_register: bool = False
) -> type[Variable[Any]]:
    """The Variable type registered for the Linen collection ``name``; with
    ``allow_register``, a new subclass of ``base`` named ``name`` is made and registered."""
    if name not in VariableTypeCache:
        if not allow_register:
            raise ValueError(
                f"Name {name} is not registered in the registry. "
                "To register a new name, use register_variable_name() "
                "or set allow_register=True."
            )
        VariableTypeCache[name] = type(name, (base,), {})
    return VariableTypeCache[name]


def variable_name_from_type(typ: type[Variable[Any]], /, *, allow_register: bool = False) -> str:
    """The Linen collection name registered for ``typ`` (the inverse of
    ``variable_type_from_name``); with ``allow_register``, ``typ``'s class name is
    registered."""
    for name, t in VariableTypeCache.items():
        if typ == t:
            return name
    if not allow_register:
        raise ValueError(
            f"Type {typ} is not registered in the registry. "
            "To register a new type, use register_variable_name() "
            "or set allow_register=True."
        )
    name = typ.__name__
    if name in VariableTypeCache:
        raise ValueError(
            f"Name {name} is already registered in the registry as "
            f"{VariableTypeCache[name]}. It cannot be linked with this type {typ}."
        )
    register_variable_name(name, typ)
    return name


def register_variable_name(name: str, typ: Any = MISSING, *, overwrite: bool = False) -> Any:
    """Link the Linen collection ``name`` with the Variable type ``typ`` (used as a class
    decorator when ``typ`` is omitted)."""
    if isinstance(typ, Missing):
        return functools.partial(register_variable_name, name, overwrite=overwrite)
    if not overwrite and name in VariableTypeCache:
        raise ValueError(
            f"Name {name} already mapped to type {VariableTypeCache[name]}. "
            "To overwrite, call register_variable_name() with `overwrite=True`."
        )
    VariableTypeCache[name] = typ
    return typ


register_variable_name("params", Param)
register_variable_name("batch_stats", BatchStat)
register_variable_name("cache", Cache)
register_variable_name("intermediates", Intermediate)
register_variable_name("perturbations", Perturbation)


def _unwrap(x: Any) -> Any:
    """The value of a Variable; anything else unchanged."""
    return x.get_value() if isinstance(x, Variable) else x
