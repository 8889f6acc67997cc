"""``adapters.training.prefetch_iterator``: read an iterator ahead in a background thread."""

import threading
import warnings
from collections.abc import Iterator
from typing import Any

__all__ = ["PrefetchIterator"]


class PrefetchIterator:
    """Iterates over ``data_iter`` while a daemon thread reads up to ``buffer_size`` items
    ahead.

    Deprecated, as in Flax (``tf.data`` prefetches by itself): constructing one warns
    with a ``DeprecationWarning``. An exception raised by ``data_iter`` is re-raised by
    ``next`` once the buffered items are consumed. ``close()`` stops the thread.
    """

    def __init__(self, data_iter: Iterator[Any], buffer_size: int = 1):
        warnings.warn(
            "PrefetchIterator is deprecated. Use the standard `tf.data` prefetch method instead",
            DeprecationWarning,
            stacklevel=2,
        )
        self._data_iter = data_iter
        self.buffer_size = buffer_size
        self._cond = threading.Condition()
        self._buffer: list[Any] = []
        self._active = True
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._prefetch_loop, daemon=True)
        self._thread.start()

    def __iter__(self) -> "PrefetchIterator":
        return self

    def __next__(self) -> Any:
        with self._cond:
            self._cond.wait_for(lambda: bool(self._buffer) or not self._active)
            if self._buffer:
                item = self._buffer.pop(0)
                self._cond.notify_all()
                return item
            if self._error is not None:
                raise self._error
            raise StopIteration

    def close(self) -> None:
        """Stop reading ahead; items already buffered can still be taken."""
        with self._cond:
            self._active = False
            self._cond.notify_all()

    def _room_or_closed(self) -> bool:
        return len(self._buffer) < self.buffer_size or not self._active

    def _prefetch_loop(self) -> None:
        while True:
            try:
                item = next(self._data_iter)
            except Exception as e:  # StopIteration included: hand it to the reader
                with self._cond:
                    if not isinstance(e, StopIteration):
                        self._error = e
                    self._active = False
                    self._cond.notify_all()
                return
            with self._cond:
                self._buffer.append(item)
                self._cond.notify_all()
                self._cond.wait_for(self._room_or_closed)
                if not self._active:
                    return
