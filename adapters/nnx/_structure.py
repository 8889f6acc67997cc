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

A plan may only serve a call made outside every graph context (``update_context``,
``split_context``, ``merge_context``) and with no static cache offered
(``cached_partial``'s handshake): those change what the call means. The contexts are
thread-local, but the counter also counts them across threads (``busy``, moved by
``enter``/``leave``), so the commonest call checks one number: ``ready`` is the epoch
while nothing is open in any thread, else -1 (a call then checks its own thread's
contexts, the slower way).
"""

import functools
import threading
import weakref
from collections.abc import Iterable
from typing import Any

__all__ = ["bump", "enter", "epoch", "leave", "touched", "watch", "written"]


class _Counter:
    __slots__ = ("busy", "epoch", "held", "ready", "watched", "writes")

    def __init__(self) -> None:
        self.epoch = 0
        self.busy = 0  # graph contexts open and static caches offered, in all threads
        self.ready = 0  # the epoch while ``busy`` is 0, else -1
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
_LOCK = threading.Lock()  # ``epoch``, ``busy`` and ``ready`` change together


def epoch() -> int:
    """The current epoch."""
    return COUNTER.epoch


def bump() -> None:
    """Record a structural change (every plan built before it is stale)."""
    with _LOCK:
        COUNTER.epoch += 1
        if not COUNTER.busy:
            COUNTER.ready = COUNTER.epoch


def enter() -> None:
    """A graph context opens, or a static cache is offered (in any thread)."""
    with _LOCK:
        COUNTER.busy += 1
        COUNTER.ready = -1


def leave() -> None:
    """What ``enter`` recorded is closed, or the offer taken."""
    with _LOCK:
        COUNTER.busy -= 1
        if not COUNTER.busy:
            COUNTER.ready = COUNTER.epoch


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
        bump()


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
