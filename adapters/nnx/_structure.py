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

Objects nobody watches (the fresh ones built inside a trace) change freely without
invalidating anything. An id reused by a new object after the watched one died only
causes a needless rebuild.
"""

from collections.abc import Iterable

__all__ = ["bump", "epoch", "touched", "watch"]

_WATCH_LIMIT = 1 << 16


class _Counter:
    __slots__ = ("epoch", "watched")

    def __init__(self) -> None:
        self.epoch = 0
        self.watched: set[int] = set()


COUNTER = _Counter()


def epoch() -> int:
    """The current epoch."""
    return COUNTER.epoch


def bump() -> None:
    """Record a structural change (every plan built before it is stale)."""
    COUNTER.epoch += 1


def touched(obj: object) -> None:
    """Record a change to ``obj``'s structure if a plan depends on it."""
    if id(obj) in COUNTER.watched:
        COUNTER.epoch += 1


def watch(ids: Iterable[int]) -> None:
    """Make changes to the objects with these ids move the epoch."""
    if len(COUNTER.watched) > _WATCH_LIMIT:
        COUNTER.watched.clear()
        COUNTER.epoch += 1
    COUNTER.watched.update(ids)
