"""Fields: ``field(...)``, the unflatten sentinel, a class's field table and the
bookkeeping the metaclass records from it."""

import dataclasses
import inspect
from collections.abc import Callable
from typing import Any

from .._errors import InvalidFieldError


class _UnflattenSentinel:
    __slots__ = ()

    def __repr__(self) -> str:
        return "<pytreemod.unflatten>"

    def __reduce__(self) -> str:
        return "UNFLATTEN"


UNFLATTEN = _UnflattenSentinel()
"""The value of the sentinel keyword ``MARK`` in the calls by which JAX rebuilds a Module."""
MARK = "_pytreemod_unflatten"


def field(
    *,
    static: bool = False,
    converter: Callable[[Any], Any] | None = None,
    default: Any = dataclasses.MISSING,
    default_factory: Callable[[], Any] | Any = dataclasses.MISSING,
    repr: bool = True,
    kw_only: bool | Any = dataclasses.MISSING,
    metadata: dict[str, Any] | None = None,
) -> Any:
    """Declare a Module field with options, as ``dataclasses.field`` does.

    **Arguments:**

    - ``static``: keep the value in the tree structure instead of as a child. Use it for
      hashable configuration (sizes, flags, activation functions); JAX transforms then see
      it as a compile-time constant.
    - ``converter``: applied to the value after ``__init__`` (e.g. ``jnp.asarray``); not
      applied when JAX rebuilds a tree.
    - ``default``, ``default_factory``, ``repr``, ``kw_only``: as in ``dataclasses``.
    - ``metadata``: extra metadata stored on the field.

    >>> import pytreemod as pm
    >>> class Scale(pm.Module):
    ...     factor: float
    ...     name: str = pm.field(static=True, default="scale")
    >>> Scale(2.0)
    Scale(factor=2.0, name='scale')
    """
    md = dict(metadata or {})
    md["static"] = static
    if converter is not None:
        md["converter"] = converter
    return dataclasses.field(
        default=default,
        default_factory=default_factory,
        repr=repr,
        kw_only=kw_only,
        metadata=md,
    )


def sentinel_field() -> Any:
    """The unflatten sentinel as a (kw-only) dataclass field of the base class, so that
    ``register_dataclass`` accepts it as a meta field; its value lives on the class."""
    return dataclasses.field(default=UNFLATTEN, kw_only=True, repr=False, compare=False)


class FieldTable(dict[str, Any]):
    """A Module class's ``__dataclass_fields__``: its fields, then the unflatten sentinel
    (a real field, which JAX's dataclass registration needs). The metaclass's bookkeeping
    ClassVars are left out, and the repr (the line ``help()`` shows) leaves out the
    sentinel, so ``help(pm.nn.Conv2d)`` shows the layer's fields and nothing internal."""

    __slots__ = ()

    @classmethod
    def of(cls, table: dict[str, Any]) -> "FieldTable":
        own = {k: f for k, f in table.items() if not k.startswith("_pytreemod_")}
        return cls({**own, MARK: table[MARK]})

    def __repr__(self) -> str:
        return repr({k: v for k, v in self.items() if k != MARK})


def hide_sentinel(init: Any) -> None:
    """Give a dataclass-written ``__init__`` the signature ``help()`` should show: without
    the sentinel keyword."""
    signature = inspect.signature(init)
    shown = [p for p in signature.parameters.values() if p.name != MARK]
    init.__signature__ = signature.replace(parameters=shown)


def record_fields(cls: Any, name: str) -> tuple[list[str], tuple[str, ...]]:
    """Check the fields of the new dataclass ``cls`` and record them on the class (the
    ``_pytreemod_*`` ClassVars ``Module`` declares); returns ``(data fields, static
    fields)``."""
    fields = [f for f in dataclasses.fields(cls) if f.name != MARK]
    for f in fields:
        if not f.init:
            raise InvalidFieldError(
                f"Field {name}.{f.name} is declared with init=False; every Module field "
                "must be settable because JAX rebuilds modules from their fields. Drop "
                "init=False and assign the field in a custom __init__ instead."
            )
    static = tuple(f.name for f in fields if f.metadata.get("static", False))
    dynamic = [f.name for f in fields if not f.metadata.get("static", False)]
    cls._pytreemod_field_objs = tuple(fields)
    cls._pytreemod_fields = tuple(f.name for f in fields)
    cls._pytreemod_fieldset = frozenset(cls._pytreemod_fields) | {MARK}
    cls._pytreemod_static = static
    cls._pytreemod_data_fields = tuple(dynamic)
    cls._pytreemod_converters = tuple(
        (f.name, f.metadata["converter"]) for f in fields if "converter" in f.metadata
    )
    cls._pytreemod_check_inits = tuple(
        k.__dict__["__check_init__"]
        for k in reversed(cls.__mro__)
        if "__check_init__" in k.__dict__
    )
    return dynamic, static
