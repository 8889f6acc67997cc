"""Operators of ``adapters.cursor.Cursor``: each applies to the wrapped object.

``c + 1`` is ``c._obj + 1``, so ``c["w"] += 1`` reads the value under the cursor, adds one
and records the sum as a change.
"""

from typing import Any


class CursorOperators:
    """Arithmetic, bitwise and comparison operators forwarded to ``self._obj``."""

    _obj: Any

    # Binary operators with the cursor on the left.
    def __add__(self, other: Any) -> Any:
        return self._obj + other

    def __sub__(self, other: Any) -> Any:
        return self._obj - other

    def __mul__(self, other: Any) -> Any:
        return self._obj * other

    def __matmul__(self, other: Any) -> Any:
        return self._obj @ other

    def __truediv__(self, other: Any) -> Any:
        return self._obj / other

    def __floordiv__(self, other: Any) -> Any:
        return self._obj // other

    def __mod__(self, other: Any) -> Any:
        return self._obj % other

    def __divmod__(self, other: Any) -> Any:
        return divmod(self._obj, other)

    def __pow__(self, other: Any) -> Any:
        return self._obj**other

    def __lshift__(self, other: Any) -> Any:
        return self._obj << other

    def __rshift__(self, other: Any) -> Any:
        return self._obj >> other

    def __and__(self, other: Any) -> Any:
        return self._obj & other

    def __xor__(self, other: Any) -> Any:
        return self._obj ^ other

    def __or__(self, other: Any) -> Any:
        return self._obj | other

    # Binary operators with the cursor on the right.
    def __radd__(self, other: Any) -> Any:
        return other + self._obj

    def __rsub__(self, other: Any) -> Any:
        return other - self._obj

    def __rmul__(self, other: Any) -> Any:
        return other * self._obj

    def __rmatmul__(self, other: Any) -> Any:
        return other @ self._obj

    def __rtruediv__(self, other: Any) -> Any:
        return other / self._obj

    def __rfloordiv__(self, other: Any) -> Any:
        return other // self._obj

    def __rmod__(self, other: Any) -> Any:
        return other % self._obj

    def __rdivmod__(self, other: Any) -> Any:
        return divmod(other, self._obj)

    def __rpow__(self, other: Any) -> Any:
        return other**self._obj

    def __rlshift__(self, other: Any) -> Any:
        return other << self._obj

    def __rrshift__(self, other: Any) -> Any:
        return other >> self._obj

    def __rand__(self, other: Any) -> Any:
        return other & self._obj

    def __rxor__(self, other: Any) -> Any:
        return other ^ self._obj

    def __ror__(self, other: Any) -> Any:
        return other | self._obj

    # Unary operators and rounding.
    def __neg__(self) -> Any:
        return -self._obj

    def __pos__(self) -> Any:
        return +self._obj

    def __abs__(self) -> Any:
        return abs(self._obj)

    def __invert__(self) -> Any:
        return ~self._obj

    def __round__(self, ndigits: int | None = None) -> Any:
        return round(self._obj, ndigits)

    # Comparisons (a cursor compares as its object; it is therefore unhashable).
    def __lt__(self, other: Any) -> Any:
        return self._obj < other

    def __le__(self, other: Any) -> Any:
        return self._obj <= other

    def __eq__(self, other: Any) -> Any:  # pyright: ignore[reportIncompatibleMethodOverride]
        return self._obj == other

    def __ne__(self, other: Any) -> Any:  # pyright: ignore[reportIncompatibleMethodOverride]
        return self._obj != other

    def __gt__(self, other: Any) -> Any:
        return self._obj > other

    def __ge__(self, other: Any) -> Any:
        return self._obj >= other

    __hash__ = None  # pyright: ignore[reportAssignmentType]
