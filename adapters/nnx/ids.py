"""``flax.nnx.ids``: unique, hashable ids for NNX objects.

``id()`` cannot tell objects apart over time (CPython reuses the address of a dead object),
so NNX numbers the objects whose sharing it must track from one process-wide counter. A
copy (``copy.copy``/``copy.deepcopy``) of an id is a *new* id: a copied object is another
object, not an alias of the original.
"""

import itertools
import threading
from typing import Any

__all__ = ["UUID", "UUIDManager", "uuid"]


class UUID:
    """A hashable id, equal only to an id with the same number."""

    __slots__ = ("id",)

    def __init__(self, rawid: int) -> None:
        self.id: int = rawid

    def __eq__(self, other: object) -> bool:
        return isinstance(other, UUID) and other.id == self.id

    def __hash__(self) -> int:
        return hash(self.id)

    def __repr__(self) -> str:
        return f"UUID({self.id})"

    def __copy__(self) -> "UUID":
        return uuid()

    def __deepcopy__(self, memo: dict[int, Any]) -> "UUID":
        return uuid()


class UUIDManager:
    """Hands out ``UUID``s from a thread-safe counter (call it: ``uuid()``)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counter = itertools.count(1)

    def __call__(self) -> UUID:
        with self._lock:
            return UUID(next(self._counter))


uuid = UUIDManager()
"""The process-wide id source: ``ids.uuid()`` is a new ``UUID``."""
