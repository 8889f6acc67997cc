"""NNX Module: a plain mutable Python object that is a node of the module graph."""

from collections.abc import Iterator
from typing import Any, TypeVar

from ._graph import GraphNode, iter_graph
from ._variables import Variable

T = TypeVar("T")


class Module(GraphNode):
    """Base class of NNX modules: ordinary mutable objects.

    Attributes may hold Variables, submodules, arrays, lists/tuples/dicts of them, and static
    values (anything else). ``nnx.split``/``nnx.state``/``nnx.update`` walk these attributes
    in sorted order; the same object reachable twice is one shared node.
    """

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
