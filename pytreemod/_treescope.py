"""Rendering modules and variables with treescope (notebooks show a foldable tree).

``treescope`` is an optional dependency (the ``notebook`` extra): it is imported inside
``treescope_repr`` only, so pytreemod imports without it. ``Module.__treescope_repr__``
and ``Variable.__treescope_repr__`` delegate here. This file imports nothing from the
package: it recognises Modules and Variables by the class attributes they carry, so it
sits below both (pyproject's layers contract).
"""

import dataclasses
from collections.abc import Callable
from typing import Any

__all__ = ["treescope_repr"]


def _is_variable(obj: Any) -> bool:
    """Whether ``obj`` is a pytreemod Variable: its class carries ``_pytreemod_variable``
    (set by ``Variable``), so this file need not import ``_variables``."""
    return getattr(type(obj), "_pytreemod_variable", False) is True


def _module_attributes(obj: Any) -> dict[str, Any] | None:
    """The fields ``repr`` shows, by name, or ``None`` if ``obj`` is not a pytreemod Module.

    Recognised by the class attributes every Module class gets from its metaclass, so
    this file need not import ``_module``.
    """
    fieldset = getattr(type(obj), "_pytreemod_fieldset", None)
    if fieldset is None or not dataclasses.is_dataclass(obj):
        return None
    return {
        f.name: obj.__dict__[f.name]
        for f in dataclasses.fields(obj)
        if f.repr and f.name in fieldset and f.name in obj.__dict__
    }


def treescope_repr(obj: Any, path: str | None, subtree_renderer: Callable[..., Any]) -> Any:
    """Render a Module or Variable for treescope, as its ``__treescope_repr__`` does.

    A Module shows as ``Type(field=..., ...)`` with one foldable child per field (the
    fields its ``repr`` shows, static configuration included), tinted by its type; a
    Variable as ``Param(value=...)``, its value rendered by treescope (arrays get
    treescope's array summaries). ``path`` and ``subtree_renderer`` are the arguments
    treescope passes to ``__treescope_repr__``. Anything else gives ``NotImplemented``,
    which tells treescope to try its other handlers.

    Needs ``treescope`` (``pip install pytreemod[notebook]``).
    """
    try:
        from treescope import formatting_util, repr_lib
    except ImportError as err:
        raise ImportError(
            "Rendering pytreemod modules with treescope needs the `treescope` package: "
            "`pip install treescope` (or the `notebook` extra of pytreemod)."
        ) from err

    if _is_variable(obj):
        return repr_lib.render_object_constructor(
            object_type=type(obj),
            attributes={"value": obj.value},
            path=path,
            subtree_renderer=subtree_renderer,
            roundtrippable=True,
        )
    attributes = _module_attributes(obj)
    if attributes is None:
        return NotImplemented
    cls = type(obj)
    return repr_lib.render_object_constructor(
        object_type=cls,
        attributes=attributes,
        path=path,
        subtree_renderer=subtree_renderer,
        # A class with a custom __init__ is not rebuilt from its fields by calling it.
        roundtrippable=not getattr(cls, "_pytreemod_user_init", True),
        color=formatting_util.color_from_string(cls.__qualname__),
    )
