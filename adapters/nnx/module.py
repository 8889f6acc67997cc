"""NNX Module: a plain mutable Python object that is a node of the module graph."""

import functools
import inspect
import types
import typing
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

import numpy as np

from .graphlib import GraphNode, iter_graph
from .variablelib import Variable

T = TypeVar("T")


class Module(GraphNode):
    """Base class of NNX modules: ordinary mutable objects.

    Attributes may hold Variables, submodules, arrays, lists/tuples/dicts of them, and static
    values (anything else). ``nnx.split``/``nnx.state``/``nnx.update`` walk these attributes
    in sorted order; the same object reachable twice is one shared node.

    A NumPy scalar passed to a subclass's ``__init__`` for a parameter annotated with a
    Python number (``rate: float``, ``features: int``, ``axes: int | Sequence[int]``...)
    arrives as the Python number it holds, as in pytreemod's Modules and Linen's: it then
    means exactly what that number means (weakly typed in JAX arithmetic) and a module
    built from a config of NumPy numbers has the same graphdef as one built from literals.
    """

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        init = cls.__dict__.get("__init__")
        if isinstance(init, types.FunctionType):
            cls.__init__ = _python_numbers(init)  # type: ignore[method-assign]

    def iter_children(self) -> Iterator[tuple[str, "Module"]]:
        """``(name, submodule)`` for the direct submodule attributes, sorted by name."""
        for name in sorted(vars(self)):
            value = vars(self)[name]
            if isinstance(value, Module):
                yield name, value

    def set_attributes(self, *filters: Any, raise_if_not_found: bool = True, **attrs: Any) -> None:
        """Set ``attrs`` on every module in the graph that already has those attributes."""
        found = set()
        for _, node in iter_graph(self):
            if isinstance(node, Module):
                for name, value in attrs.items():
                    if name in vars(node):
                        setattr(node, name, value)
                        found.add(name)
        missing = set(attrs) - found
        if raise_if_not_found and missing:
            raise ValueError(
                "Could not find at least one instance of the following attributes: "
                f"{sorted(missing)}"
            )

    def train(self, **attributes: Any) -> None:
        """Training mode: ``deterministic=False``, ``use_running_average=False`` where present."""
        self.set_attributes(
            deterministic=False, use_running_average=False, **attributes, raise_if_not_found=False
        )

    def eval(self, **attributes: Any) -> None:
        """Evaluation mode: ``deterministic=True``, ``use_running_average=True`` where present."""
        self.set_attributes(
            deterministic=True, use_running_average=True, **attributes, raise_if_not_found=False
        )

    def __repr__(self) -> str:
        parts = ", ".join(f"{k}={_short(v)}" for k, v in sorted(vars(self).items()))
        return f"{type(self).__name__}({parts})"


# ----------------------------------------------------------------------------- numbers


def _is_numeric(hint: Any) -> bool:
    if hint is int or hint is float or hint is complex:
        return True
    return any(_is_numeric(a) for a in typing.get_args(hint))


def _number_slots(init: Callable[..., None]) -> tuple[frozenset[int], frozenset[str]]:
    """Positions (``self`` is 0) and names of ``init``'s numeric parameters."""
    try:
        hints: dict[str, Any] = typing.get_type_hints(init)
    except Exception:  # an unresolvable forward reference: no conversion
        hints = {}
    params = list(inspect.signature(init).parameters.values())
    names = frozenset(p.name for p in params if _is_numeric(hints.get(p.name)))
    positional = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    positions = frozenset(
        i for i, p in enumerate(params) if p.name in names and p.kind in positional
    )
    return positions, names


def _as_python(value: Any) -> Any:
    if isinstance(value, np.generic):
        return value if isinstance(value, np.bool_) else value.item()
    if type(value) in (tuple, list) and any(isinstance(v, np.generic) for v in value):
        return type(value)(_as_python(v) for v in value)
    return value


def _python_numbers(init: Callable[..., None]) -> Callable[..., None]:
    """``init`` taking NumPy scalars in its numeric parameters as Python numbers. The
    annotations are read on the first call, when forward references are defined."""
    slots: list[tuple[frozenset[int], frozenset[str]]] = []

    @functools.wraps(init)
    def __init__(*args: Any, **kwargs: Any) -> None:
        if not slots:
            slots.append(_number_slots(init))
        positions, names = slots[0]
        if positions and len(args) > 1:
            args = tuple(_as_python(a) if i in positions else a for i, a in enumerate(args))
        if kwargs and not names.isdisjoint(kwargs):
            kwargs = {k: _as_python(v) if k in names else v for k, v in kwargs.items()}
        init(*args, **kwargs)

    return __init__


def _short(value: Any) -> str:
    if isinstance(value, Variable):
        shape = getattr(value.get_value(), "shape", None)
        return f"{type(value).__name__}(shape={shape})"
    if isinstance(value, Module):
        return type(value).__name__ + "(...)"
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


class List(list[Any]):
    """A list that is a graph node (plain lists in Module attributes are too, here)."""


class Dict(dict[Any, Any]):
    """A dict that is a graph node (plain dicts in Module attributes are too, here)."""


def data(value: T, /) -> T:
    """Mark ``value`` as data; here every Variable, array and container is data already."""
    return value
