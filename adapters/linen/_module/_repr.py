"""``repr`` of Linen modules: attributes, then the submodules defined so far (nested)."""

import dataclasses
from typing import Any

from ._marker import ModuleBase


def _indent(text: str, num_spaces: int) -> str:
    pad = " " * num_spaces
    lines = text.split("\n")
    return "\n".join(pad + line for line in lines[:-1]) + "\n"


def _attr_repr(value: Any) -> str:
    """Functions print as their name (``relu``), everything else with ``repr``."""
    if callable(value):
        name = value.__dict__.get("__name__") if isinstance(value, ModuleBase) else None
        if not isinstance(value, ModuleBase):
            name = getattr(value, "__name__", None)
        if name:
            return name
    return repr(value)


def _module_repr(module: Any, num_spaces: int = 4) -> str:
    """The multi-line repr; reads only the instance dict, so it never runs ``setup``."""
    cls = type(module)
    try:
        fields = dataclasses.fields(cls)
    except TypeError:
        return object.__repr__(module)
    d = module.__dict__
    body = ""
    attributes = [f.name for f in fields if f.name not in ("parent", "name") and f.repr]
    if attributes:
        body += "# attributes\n"
        for attr in attributes:
            body += f"{attr} = {_attr_repr(d.get(attr, None))}\n"
    state = d.get("_state")
    kids = state.children.items() if state else ()
    children = {k: v for k, v in kids if isinstance(v, ModuleBase)}
    if children:
        body += "# children\n"
        for child_name, child in children.items():
            body += f"{child_name} = {_module_repr(child, num_spaces)}\n"
    if body:
        return f"{cls.__name__}(\n{_indent(body, num_spaces)})"
    return f"{cls.__name__}()"
