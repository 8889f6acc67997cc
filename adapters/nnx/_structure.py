"""The structure epoch: a counter that moves whenever the structure of an object graph
that a cached call plan (``nnx.jit``'s fast path) was built from may have changed.

``nnx.jit`` lowers its arguments by walking their object graphs on every call; the walk
costs far more than the call it prepares. A *plan* remembers the result of one walk (the
Variables in order, the static structure) together with the epoch it saw; the next call
reuses it while the epoch is unchanged. So every change of structure must move the epoch:

- an attribute set or deleted on an object that some plan walked (``watch``ed): the
  object's ``__setattr__``/``__delattr__`` and the graph protocol's set/pop/clear/init call
  ``touched``;
- a change to Variable metadata (part of the static structure) or to a ``State``'s
  entries: these call ``bump`` unconditionally (rare operations);
- plain mutable containers (lists, dicts) inside a graph have no hook: a plan keeps a
  snapshot of their children and compares it instead.

Values are not structure: a plan reads its Variables' values at every call. The plan
that serves ``f(node, x)`` inline keeps the list it read for the next call while no
Variable's value is replaced (``held``); every write of a Variable's value
(``Variable.__setattr__``, ``set_raw_value``, a plan's write-back) calls ``written``
after it, which counts the write (``writes``) and empties the kept lists, so the next
call reads afresh (and no list keeps an array alive once its Variable holds another).
A list read while another thread wrote is not kept: the reader compares ``writes``
before its read and after it has registered its list.

Objects nobody watches (the fresh ones built inside a trace) change freely without
invalidating anything; a watched object is forgotten when it dies.
"""

import functools
import weakref
from collections.abc import Iterable
from typing import Any

__all__ = ["bump", "epoch", "touched", "watch", "written"]


class _Counter:
    __slots__ = ("epoch", "held", "watched", "writes")

    def __init__(self) -> None:
        self.epoch = 0
        # the value lists plans keep between calls (each a one-item list, or empty)
        self.held: list[list[Any]] = []
        self.writes = 0  # Variable values written so far (see ``written``)
        # id -> weak reference of each watched object; an entry leaves when its object
        # dies, so a new object that reuses the id is not mistaken for it.
        self.watched: dict[int, weakref.ref[object]] = {}

    def forget(self, key: int, ref: "weakref.ref[object]") -> None:
        """The weak reference's callback (a bound method: it needs no module global,
        so it also runs while the interpreter shuts down)."""
        if self.watched.get(key) is ref:
            del self.watched[key]


COUNTER = _Counter()


def epoch() -> int:
    """The current epoch."""
    return COUNTER.epoch


def bump() -> None:
    """Record a structural change (every plan built before it is stale)."""
    COUNTER.epoch += 1


def written() -> None:
    """A Variable's value was replaced (call it after the write): count the write and
    empty the value lists plans keep."""
    COUNTER.writes += 1
    held = COUNTER.held
    if held:
        COUNTER.held = []
        for values in held:
            values.clear()


def touched(obj: object) -> None:
    """Record a change to ``obj``'s structure if a plan depends on it."""
    ref = COUNTER.watched.get(id(obj))
    if ref is not None and ref() is obj:
        COUNTER.epoch += 1


def watch(objects: Iterable[object]) -> bool:
    """Make changes to these objects move the epoch (while they live); False if one of
    them cannot be watched (it takes no weak reference)."""
    watched = COUNTER.watched
    for obj in objects:
        key = id(obj)
        ref = watched.get(key)
        if ref is None or ref() is not obj:
            try:
                watched[key] = weakref.ref(obj, functools.partial(COUNTER.forget, key))
            except TypeError:
                return False
    return True
