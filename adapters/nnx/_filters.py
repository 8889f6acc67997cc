"""NNX filters: predicates ``(path, value) -> bool`` selecting state leaves."""

import builtins
import typing
from collections.abc import Callable

from ._variables import Variable

Path = tuple[typing.Any, ...]
Predicate = Callable[[Path, typing.Any], bool]
Filter = typing.Any
"""A type, a tag, ``...``/``True``/``False``/``None``, a tuple/list (any of) or a predicate."""


class OfType:
    """Matches values that are instances of ``type``."""

    def __init__(self, type: builtins.type) -> None:
        self.type = type

    def __call__(self, path: Path, value: typing.Any) -> bool:
        return isinstance(value, self.type)

    def __repr__(self) -> str:
        return f"OfType({self.type.__name__})"


class WithTag:
    """Matches Variables whose ``tag`` metadata equals ``tag``."""

    def __init__(self, tag: str) -> None:
        self.tag = tag

    def __call__(self, path: Path, value: typing.Any) -> bool:
        return isinstance(value, Variable) and value.get_metadata().get("tag") == self.tag

    def __repr__(self) -> str:
        return f"WithTag({self.tag!r})"


class PathContains:
    """Matches leaves whose path contains ``key`` (``exact=False``: as a substring of a part)."""

    def __init__(self, key: typing.Any, exact: bool = True) -> None:
        self.key = key
        self.exact = exact

    def __call__(self, path: Path, value: typing.Any) -> bool:
        if self.exact:
            return self.key in path
        return any(str(self.key) in str(part) for part in path)

    def __repr__(self) -> str:
        return f"PathContains({self.key!r}, exact={self.exact})"


class Any:
    """Matches when any of ``filters`` matches."""

    def __init__(self, *filters: Filter) -> None:
        self.predicates = tuple(to_predicate(f) for f in filters)

    def __call__(self, path: Path, value: typing.Any) -> bool:
        return any(p(path, value) for p in self.predicates)


class All:
    """Matches when all of ``filters`` match."""

    def __init__(self, *filters: Filter) -> None:
        self.predicates = tuple(to_predicate(f) for f in filters)

    def __call__(self, path: Path, value: typing.Any) -> bool:
        return all(p(path, value) for p in self.predicates)


class Not:
    """Matches when ``filter`` does not."""

    def __init__(self, filter: Filter) -> None:
        self.predicate = to_predicate(filter)

    def __call__(self, path: Path, value: typing.Any) -> bool:
        return not self.predicate(path, value)


class Everything:
    """Matches every leaf."""

    def __call__(self, path: Path, value: typing.Any) -> bool:
        return True


class Nothing:
    """Matches no leaf."""

    def __call__(self, path: Path, value: typing.Any) -> bool:
        return False


def to_predicate(filter: Filter) -> Predicate:
    """The predicate a filter stands for."""
    if isinstance(filter, str):
        return WithTag(filter)
    if isinstance(filter, type):
        return OfType(filter)
    if isinstance(filter, bool):
        return Everything() if filter else Nothing()
    if filter is Ellipsis:
        return Everything()
    if filter is None:
        return Nothing()
    if callable(filter):
        return typing.cast(Predicate, filter)
    if isinstance(filter, (list, tuple)):
        return Any(*filter)
    raise TypeError(f"Invalid collection filter: {filter!r}. ")


def _is_catch_all(f: Filter) -> bool:
    return f is Ellipsis or f is True


def filters_to_predicates(filters: tuple[Filter, ...]) -> tuple[Predicate, ...]:
    """Predicates for ``filters``; ``...``/``True`` may only come last."""
    for i, f in enumerate(filters):
        if _is_catch_all(f) and not all(_is_catch_all(g) for g in filters[i + 1 :]):
            raise ValueError(
                f"`...` or `True` can only be used as the last filters, got {f} it at index {i}."
            )
    return tuple(to_predicate(f) for f in filters)
