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


def dataclass(
    cls: type | None = None,
    extra_fields: Sequence[tuple[str, Any, Any]] | None = None,
    **kwargs: Any,
) -> Any:
    """``dataclasses.dataclass`` that first appends ``extra_fields`` (``(name, type,
    field)`` triples) to the class annotations, after any inherited ones."""

    def wrap(c: type) -> type:
        if extra_fields:
            annotations = dict(inspect.get_annotations(c))
            for name, annotation, default in extra_fields:
                annotations.pop(name, None)
                annotations[name] = annotation
                setattr(c, name, default)
            c.__annotations__ = annotations
        return dataclasses.dataclass(c, **kwargs)

    if cls is None:
        return wrap
    return wrap(cls)


Wrapper = Callable[[type], type]
