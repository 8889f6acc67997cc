"""``adapters.cursor``: edit immutable pytrees through a mutable view (``flax.cursor``'s API).

``cursor(obj)`` wraps ``obj``; item and attribute access on the cursor walks into it,
assignment records a change, and ``build()`` returns a copy of ``obj`` with the changes
applied (``obj`` itself is never modified). Containers understood: ``dict``, ``FrozenDict``,
``list``, ``tuple``, named tuples, dataclasses (``struct.dataclass``, Linen modules,
``TrainState``), pytreemod Modules (rebuilt with ``pm.replace``) and pytreemod Variables
(their ``value``). Other objects are leaves.

>>> from adapters.cursor import cursor
>>> cursor({"a": 1, "b": (2, 3)})["b"][0].set(10)
{'a': 1, 'b': (10, 3)}
"""

import dataclasses
import enum
from collections.abc import Callable, Generator, Iterator, Mapping
from typing import Any, Generic, Protocol, TypeVar, runtime_checkable

import pytreemod as pm

from ._cursor_ops import CursorOperators
from .core import FrozenDict
from .errors import CursorFindError, TraverseTreeError

A = TypeVar("A")
Key = Any
#: One step of a path: the key and how it is looked up.
PathEntry = tuple[Key, "AccessType"]

__all__ = ["AccessType", "Cursor", "Indexable", "ParentKey", "cursor", "is_named_tuple"]


@runtime_checkable
class Indexable(Protocol):
    """Anything with ``__getitem__``."""

    def __getitem__(self, key: Any) -> Any: ...


class AccessType(enum.Enum):
    """How a child is reached from its parent: ``obj[key]`` or ``obj.key``."""

    ITEM = enum.auto()
    ATTR = enum.auto()


@dataclasses.dataclass
class ParentKey(Generic[A]):
    """Where a child cursor hangs: its parent cursor, the key and the access type."""

    parent: "Cursor[A]"
    key: Key
    access_type: AccessType


def is_named_tuple(obj: Any) -> bool:
    """Whether ``obj`` is an instance of a ``namedtuple``/``NamedTuple`` class."""
    return isinstance(obj, tuple) and all(
        hasattr(obj, name) for name in ("_fields", "_asdict", "_replace")
    )


def _children(obj: Any) -> tuple[list[tuple[Key, Any]], AccessType] | None:
    """The (key, child) pairs of a container and how they are accessed; None for a leaf."""
    if isinstance(obj, (dict, FrozenDict)):
        return list(obj.items()), AccessType.ITEM
    if is_named_tuple(obj):
        return [(name, getattr(obj, name)) for name in obj._fields], AccessType.ATTR
    if isinstance(obj, (list, tuple)):
        return list(enumerate(obj)), AccessType.ITEM
    if isinstance(obj, pm.Module):
        return [(f.name, getattr(obj, f.name)) for f in pm.fields(obj)], AccessType.ATTR
    if isinstance(obj, pm.Variable):
        return [("value", obj.value)], AccessType.ATTR
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        pairs = [(f.name, getattr(obj, f.name)) for f in dataclasses.fields(obj) if f.init]
        return pairs, AccessType.ATTR
    return None


def _traverse_tree(
    path: tuple[PathEntry, ...],
    obj: Any,
    *,
    update_fn: Callable[[str, Any], Any] | None = None,
    cond_fn: Callable[[str, Any], bool] | None = None,
) -> Generator[Any, None, None]:
    """Walk ``obj`` depth first below ``path`` (the root itself is not visited).

    With ``update_fn`` yields ``(path, new_value)`` wherever ``update_fn(path_str, value)``
    returns a different object (``is not``) and stops descending there. With ``cond_fn``
    yields ``path`` wherever ``cond_fn(path_str, value)`` is true, again without
    descending further. ``path_str`` joins the keys with ``/``. Exactly one of the two
    functions must be given (``TraverseTreeError`` otherwise).
    """
    if bool(update_fn) == bool(cond_fn):
        raise TraverseTreeError(update_fn, cond_fn)
    if path:
        path_str = "/".join(str(key) for key, _ in path)
        if update_fn is not None:
            new = update_fn(path_str, obj)
            if new is not obj:
                yield path, new
                return
        elif cond_fn is not None and cond_fn(path_str, obj):
            yield path
            return
    found = _children(obj)
    if found is None:
        return
    pairs, access = found
    for key, child in pairs:
        yield from _traverse_tree(
            (*path, (key, access)), child, update_fn=update_fn, cond_fn=cond_fn
        )


def _rebuild(obj: Any, changes: dict[Any, Any]) -> Any:
    """A copy of ``obj`` with ``changes`` (key -> new child) applied."""
    if isinstance(obj, FrozenDict):
        return obj.copy(changes)
    if isinstance(obj, (dict, list)):
        new = obj.copy()
        for key, value in changes.items():
            new[key] = value
        return new
    if is_named_tuple(obj):
        return obj._replace(**changes)
    if isinstance(obj, tuple):
        items = list(obj)
        for key, value in changes.items():
            items[key] = value
        return tuple(items)
    if isinstance(obj, pm.Module):
        return pm.replace(obj, **changes) if changes else obj
    if isinstance(obj, pm.Variable):
        unknown = [key for key in changes if key != "value"]
        if unknown:
            raise TypeError(
                f"Cannot set {unknown[0]!r} on {type(obj).__name__}: a cursor can only "
                "replace the value of a pytreemod Variable"
            )
        return obj.replace(changes["value"]) if changes else obj
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return dataclasses.replace(obj, **changes)
    return obj


def _walk(start: "Cursor[A]", path: tuple[PathEntry, ...]) -> "Cursor[A]":
    node = start
    for key, access in path:
        node = node[key] if access is AccessType.ITEM else getattr(node, key)
    return node


class Cursor(CursorOperators, Generic[A]):
    """A mutable view of an immutable object that records changes to it.

    ``c[key]`` and ``c.name`` return child cursors (a named tuple accepts both);
    ``c[key] = v`` and ``c.name = v`` record a change; ``build()`` applies all recorded
    changes bottom-up to a copy. Operators apply to the wrapped object, so
    ``c["w"] *= 2`` records twice the current value.
    """

    _obj: A
    _parent_key: "ParentKey[A] | None"
    _changes: "dict[Any, Cursor[A]]"

    def __init__(self, obj: A, parent_key: "ParentKey[A] | None") -> None:
        state = vars(self)
        state["_obj"] = obj
        state["_parent_key"] = parent_key
        state["_changes"] = {}

    @property
    def _root(self) -> "Cursor[A]":
        node = self
        while node._parent_key is not None:
            node = node._parent_key.parent
        return node

    @property
    def _path(self) -> str:
        """The accesses leading from the root here, as code: ``.x[1]['b']``."""
        parts: list[str] = []
        node = self
        while node._parent_key is not None:
            pk = node._parent_key
            if pk.access_type is AccessType.ATTR:
                parts.append(f".{pk.key}")
            elif isinstance(pk.key, str):
                parts.append(f"['{pk.key}']")
            else:
                parts.append(f"[{pk.key}]")
            node = pk.parent
        return "".join(reversed(parts))

    def _child(self, key: Key, access: AccessType, value: Any) -> "Cursor[A]":
        child: Cursor[A] = Cursor(value, ParentKey(self, key, access))
        self._changes[key] = child
        return child

    def __getitem__(self, key: Key) -> "Cursor[A]":
        if key in self._changes:
            return self._changes[key]
        obj: Any = self._obj
        if is_named_tuple(obj):  # c[0] is c.<first field>
            return getattr(self, obj._fields[key])
        if not isinstance(obj, Indexable):
            raise TypeError(f"Cannot index into {obj}")
        if isinstance(obj, Mapping) and key not in obj:
            raise KeyError(f"Key {key} not found in {obj}")
        return self._child(key, AccessType.ITEM, obj[key])

    def __getattr__(self, name: str) -> "Cursor[A]":
        if name in ("_obj", "_parent_key", "_changes"):  # not set yet (copy, unpickling)
            raise AttributeError(name)
        if name in self._changes:
            return self._changes[name]
        if not hasattr(self._obj, name):
            raise AttributeError(f"Attribute {name} not found in {self._obj}")
        return self._child(name, AccessType.ATTR, getattr(self._obj, name))

    def __setitem__(self, key: Key, value: Any) -> None:
        obj: Any = self._obj
        if is_named_tuple(obj):
            setattr(self, obj._fields[key], value)
            return
        self._child(key, AccessType.ITEM, value)

    def __setattr__(self, name: str, value: Any) -> None:
        self._child(name, AccessType.ATTR, value)

    def set(self, value: Any) -> A:
        """Replace the object under this cursor by ``value`` and return the rebuilt root.

        >>> cursor({"a": [1, 2]})["a"][1].set(5)
        {'a': [1, 5]}
        """
        parent_key = self._parent_key
        if parent_key is None:
            return value
        parent = parent_key.parent
        parent._changes[parent_key.key] = Cursor(value, parent_key)
        return parent._root.build()

    def build(self) -> A:
        """A copy of the wrapped object with every recorded change applied.

        >>> c = cursor({"a": 1, "b": (2, 3)})
        >>> c["a"] = 0
        >>> c["b"][1] = 4
        >>> c.build()
        {'a': 0, 'b': (2, 4)}
        """
        changes = {key: child.build() for key, child in self._changes.items()}
        return _rebuild(self._obj, changes)

    def apply_update(self, update_fn: Callable[[str, Any], Any]) -> "Cursor[A]":
        """Record ``update_fn(path, value)`` for every node below the root; return ``self``.

        ``path`` is the node's keys joined by ``/`` (``"Dense_0/kernel"``). A result that
        is not the same object (``is``) as ``value`` is recorded as a change and that
        branch is not descended further; the root itself is not passed to ``update_fn``.
        Call ``build()`` afterwards for the updated copy.

        >>> cursor({"a": 1, "b": {"c": 2}}).apply_update(
        ...     lambda path, v: v * 10 if isinstance(v, int) else v
        ... ).build()
        {'a': 10, 'b': {'c': 20}}
        """
        for path, value in _traverse_tree((), self._obj, update_fn=update_fn):
            *head, (key, access) = path
            parent = _walk(self, tuple(head))
            if access is AccessType.ITEM:
                parent[key] = value
            else:
                setattr(parent, key, value)
        return self

    def find(self, cond_fn: Callable[[str, Any], bool]) -> "Cursor[A]":
        """The one child cursor for which ``cond_fn(path, value)`` holds.

        Searches as ``find_all`` does; raises ``CursorFindError`` when no node or more than
        one matches.

        >>> c = cursor({"a": {"x": 1}, "b": {"y": 2}})
        >>> c.find(lambda path, v: path.endswith("y"))._path
        "['b']['y']"
        """
        matches = self.find_all(cond_fn)
        first = next(matches, None)
        if first is None:
            raise CursorFindError()
        second = next(matches, None)
        if second is not None:
            raise CursorFindError(first, second)
        return first

    def find_all(self, cond_fn: Callable[[str, Any], bool]) -> Generator["Cursor[A]", None, None]:
        """Child cursors of every node below the root for which ``cond_fn(path, value)`` holds.

        ``path`` is the node's keys joined by ``/``. A matching node's own children are
        not searched. Changes made through the returned cursors show in ``build()``.
        """
        for path in _traverse_tree((), self._obj, cond_fn=cond_fn):
            yield _walk(self, path)

    def __str__(self) -> str:
        return str(self._obj)

    def __repr__(self) -> str:
        return self._pretty_repr()

    def _pretty_repr(self, indent: int = 2, _prefix_indent: int = 0) -> str:
        inner = " " * (_prefix_indent + indent)
        obj_repr = repr(self._obj).replace("\n", "\n" + inner)
        lines = ["Cursor(", f"{inner}_obj={obj_repr},"]
        if not self._changes:
            lines.append(f"{inner}_changes={{}}")
        else:
            lines.append(f"{inner}_changes={{")
            entries = []
            for key, child in self._changes.items():
                prefix = " " * (_prefix_indent + 2 * indent) + repr(key) + ": "
                entries.append(prefix + child._pretty_repr(indent, len(prefix)))
            lines.append(",\n".join(entries))
            lines.append(f"{inner}}}")
        lines.append(" " * _prefix_indent + ")")
        return "\n".join(lines)

    def __len__(self) -> int:
        return len(self._obj)  # pyright: ignore[reportArgumentType]

    def __iter__(self) -> Iterator["Cursor[A]"]:
        obj: Any = self._obj
        if not isinstance(obj, (tuple, list)):
            raise NotImplementedError(
                f"__iter__ method only implemented for tuples and lists, not type {type(obj)}"
            )
        return (self[i] for i in range(len(obj)))

    def __reversed__(self) -> Iterator["Cursor[A]"]:
        obj: Any = self._obj
        if not isinstance(obj, (tuple, list)):
            raise NotImplementedError(
                f"__reversed__ method only implemented for tuples and lists, not type {type(obj)}"
            )
        return (self[i] for i in reversed(range(len(obj))))


def cursor(obj: A) -> Cursor[A]:
    """A root ``Cursor`` over ``obj``: edit through it with ``set``, assignments and
    ``build()``, ``apply_update`` or ``find``/``find_all``; ``obj`` is left unchanged.
    A cursor over a list or tuple iterates over child cursors.
    """
    return Cursor(obj, None)
