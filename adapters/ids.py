"""``flax.ids``: process-wide unique identifiers that survive copying as new identities.

``id()`` is unusable for remembering which module or variable objects are shared (CPython
reuses addresses once an object dies), so objects that need an identity carry a ``FlaxId``
drawn from one global, thread-safe counter. Copying (``copy.copy``/``copy.deepcopy``) an
object gives the copy a fresh id: a copy is a different object, not an alias.
"""

import itertools
import threading
from typing import Any

__all__ = ["FlaxId", "UUIDManager", "uuid"]


class FlaxId:
    """A hashable identifier; equal only to an id with the same number."""

    __slots__ = ("id",)

    def __init__(self, rawid: int) -> None:
        self.id: int = rawid

    def __eq__(self, other: object) -> bool:
        return isinstance(other, FlaxId) and other.id == self.id

    def __hash__(self) -> int:
        return hash(self.id)

    def __repr__(self) -> str:
        return f"FlaxId({self.id})"

    def __copy__(self) -> "FlaxId":
        return uuid()

    def __deepcopy__(self, memo: dict[int, Any]) -> "FlaxId":
        return uuid()


class UUIDManager:
    """Calling it returns the next ``FlaxId`` of a counter shared by all threads."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counter = itertools.count(1)

    def __call__(self) -> FlaxId:
        with self._lock:
            return FlaxId(next(self._counter))


uuid: UUIDManager = UUIDManager()
"""The process-wide id source: ``adapters.ids.uuid()`` returns a new ``FlaxId``."""
