"""Keyword-only dataclass fields (``flax.linen.kw_only_dataclasses``).

On the Python versions this package supports, ``dataclasses`` has ``kw_only`` natively;
these helpers keep Flax's names and add ``extra_fields`` (fields appended after the
class's own, e.g. Linen's ``parent`` and ``name``).
"""

import dataclasses
import inspect
from collections.abc import Callable, Sequence
from typing import Any

KW_ONLY = dataclasses.KW_ONLY


def field(*, metadata: Any = None, kw_only: Any = dataclasses.MISSING, **kwargs: Any) -> Any:
    """``dataclasses.field`` whose ``kw_only`` defaults to the class setting."""
    if kw_only is dataclasses.MISSING:
        return dataclasses.field(metadata=metadata, **kwargs)
    return dataclasses.field(metadata=metadata, kw_only=kw_only, **kwargs)


def inherit_kw_only(cls: type) -> None:
    """Keep a field keyword-only when a subclass redeclares it without saying so (a
    field a base class made keyword-only stays keyword-only)."""
    inherited: set[str] = set()
    for base in cls.__mro__[1:]:
        for f in getattr(base, "__dataclass_fields__", {}).values():
            if f.kw_only is True:
                inherited.add(f.name)
    if not inherited:
        return
    for name in inspect.get_annotations(cls):
        if name not in inherited:
            continue
        value = cls.__dict__.get(name, dataclasses.MISSING)
        if isinstance(value, dataclasses.Field):
            if value.kw_only is dataclasses.MISSING:
                value.kw_only = True
        elif value is dataclasses.MISSING:
            setattr(cls, name, dataclasses.field(kw_only=True))
        else:
            setattr(cls, name, dataclasses.field(default=value, kw_only=True))


def dataclass(
    cls: type | None = None,
    extra_fields: Sequence[tuple[str, Any, Any]] | None = None,
    **kwargs: Any,
) -> Any:
    """``dataclasses.dataclass`` that first appends ``extra_fields`` (``(name, type,
    field)`` triples) to the class annotations, after any inherited ones, and keeps
    inherited keyword-only fields keyword-only when redeclared."""

    def wrap(c: type) -> type:
        if extra_fields:
            annotations = dict(inspect.get_annotations(c))
            for name, annotation, default in extra_fields:
                annotations.pop(name, None)
                annotations[name] = annotation
                setattr(c, name, default)
            c.__annotations__ = annotations
        inherit_kw_only(c)
        return dataclasses.dataclass(c, **kwargs)

    if cls is None:
        return wrap
    return wrap(cls)


Wrapper = Callable[[type], type]
