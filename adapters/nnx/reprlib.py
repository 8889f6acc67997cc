"""``flax.nnx.reprlib``: the text ``repr`` of NNX objects.

An object opts in by subclassing ``Representable`` and writing ``__nnx_repr__``, a
generator that yields one ``Object`` (how to open and close: type name, brackets, the
key/value separator) and then one ``Attr`` per entry. ``get_repr`` lays that out one entry
per line, indenting nested objects; ``str()`` adds terminal colors where the terminal has
them, ``repr()`` never does.
"""

import dataclasses
import os
import sys
import threading
from collections.abc import Iterator, Mapping, Sequence
from typing import Any, NamedTuple

from adapters.config import config as _config

__all__ = [
    "COLOR",
    "NO_COLOR",
    "Attr",
    "Color",
    "MappingReprMixin",
    "Object",
    "PrettyMapping",
    "PrettySequence",
    "Representable",
    "SequenceReprMixin",
    "colorized",
    "get_repr",
    "supports_color",
]


def supports_color() -> bool:
    """Whether stdout is a color terminal (or an IPython session)."""
    try:
        from IPython import get_ipython  # type: ignore[import-not-found]  # optional

        in_ipython = get_ipython() is not None
    except ImportError:
        in_ipython = False
    platform_ok = sys.platform != "win32" or "ANSICON" in os.environ
    tty = hasattr(sys.stdout, "isatty") and sys.stdout.isatty()
    return (platform_ok and tty) or in_ipython


class Color(NamedTuple):
    """ANSI escape codes of each part of a repr."""

    TYPE: str
    ATTRIBUTE: str
    SEP: str
    PAREN: str
    COMMENT: str
    INT: str
    STRING: str
    FLOAT: str
    BOOL: str
    NONE: str
    END: str


NO_COLOR = Color(*([""] * 11))


def _rgb(r: int, g: int, b: int) -> str:
    return f"\x1b[38;2;{r};{g};{b}m"


COLOR = (
    Color(
        TYPE=_rgb(79, 201, 177),
        ATTRIBUTE=_rgb(156, 220, 254),
        SEP=_rgb(212, 212, 212),
        PAREN=_rgb(255, 213, 3),
        COMMENT=_rgb(105, 105, 105),
        INT=_rgb(182, 207, 169),
        STRING=_rgb(207, 144, 120),
        FLOAT=_rgb(182, 207, 169),
        BOOL=_rgb(86, 156, 214),
        NONE=_rgb(86, 156, 214),
        END="\x1b[0m",
    )
    if supports_color()
    else NO_COLOR
)


@dataclasses.dataclass
class ReprContext(threading.local):
    """Per thread: the colors in use and how deep the repr being built is."""

    current_color: Color = COLOR
    depth: int = 0


REPR_CONTEXT = ReprContext()


def colorized(x: Any, /) -> str:
    """``repr(x)`` with colors (containers element by element)."""
    c = REPR_CONTEXT.current_color

    def paren(s: str) -> str:
        return f"{c.PAREN}{s}{c.END}"

    if isinstance(x, list):
        return paren("[") + ", ".join(map(colorized, x)) + paren("]")
    if isinstance(x, tuple):
        inner = colorized(x[0]) + "," if len(x) == 1 else ", ".join(map(colorized, x))
        return paren("(") + inner + paren(")")
    if isinstance(x, dict):
        items = (f"{c.STRING}{k!r}{c.END}: {colorized(v)}" for k, v in x.items())
        return paren("{") + ", ".join(items) + paren("}")
    if isinstance(x, set):
        return paren("{") + ", ".join(map(colorized, x)) + paren("}")
    if isinstance(x, type):
        return f"{c.TYPE}{x.__name__}{c.END}"
    if isinstance(x, bool):
        return f"{c.BOOL}{x}{c.END}"
    if isinstance(x, int):
        return f"{c.INT}{x}{c.END}"
    if isinstance(x, str):
        return f"{c.STRING}{x!r}{c.END}"
    if isinstance(x, float):
        return f"{c.FLOAT}{x}{c.END}"
    if x is None:
        return f"{c.NONE}{x}{c.END}"
    if isinstance(x, Representable):
        return get_repr(x)
    return repr(x)


@dataclasses.dataclass
class Object:
    """How an object's repr opens and closes (first item of ``__nnx_repr__``)."""

    type: str | type
    start: str = "("
    end: str = ")"
    kv_sep: str = "="
    indent: str = "  "
    empty_repr: str = ""
    comment: str = ""
    same_line: bool = False

    @property
    def elem_sep(self) -> str:
        """What separates entries: a comma and a newline, or a comma on one line."""
        return ", " if self.same_line else ",\n"


@dataclasses.dataclass
class Attr:
    """One entry of an object's repr: ``key`` ``kv_sep`` ``repr(value)``."""

    key: str
    value: Any
    start: str = ""
    end: str = ""
    use_raw_value: bool = False
    use_raw_key: bool = False


class Representable:
    """Mixin: ``repr``/``str`` laid out from ``__nnx_repr__``."""

    __slots__ = ()

    def __nnx_repr__(self) -> Iterator[Object | Attr]:
        raise NotImplementedError

    def __repr__(self) -> str:
        saved = REPR_CONTEXT.current_color
        REPR_CONTEXT.current_color = NO_COLOR
        try:
            return get_repr(self)
        finally:
            REPR_CONTEXT.current_color = saved

    def __str__(self) -> str:
        return get_repr(self)


def _entry(elem: Any, config: Object, c: Color, kv_sep: str) -> str:
    if not isinstance(elem, Attr):
        raise TypeError(f"Item must be Elem, got {type(elem).__name__}")
    value = elem.value if elem.use_raw_value else colorized(elem.value)
    value = value.replace("\n", "\n" + config.indent)
    key = elem.key if elem.use_raw_key else f"{c.ATTRIBUTE}{elem.key}{c.END}"
    indent = "" if config.same_line else config.indent
    return f"{indent}{elem.start}{key}{kv_sep}{value}{elem.end}"


def get_repr(obj: Representable) -> str:
    """The repr text of a ``Representable`` (colored per the current context)."""
    REPR_CONTEXT.depth += 1
    try:
        if not isinstance(obj, Representable):
            raise TypeError(f"Object {obj!r} is not representable")
        c = REPR_CONTEXT.current_color
        items = obj.__nnx_repr__()
        config = next(items)
        if not isinstance(config, Object):
            raise TypeError(f"First item must be Config, got {type(config).__name__}")
        kv_sep = f"{c.SEP}{config.kv_sep}{c.END}"
        max_depth = _config.flax_max_repr_depth
        too_deep = max_depth is not None and REPR_CONTEXT.depth > max_depth
        if too_deep:
            body = "..."
        else:
            body = config.elem_sep.join(_entry(e, config, c, kv_sep) for e in items)
        comment = ""
        if not body:
            body = config.empty_repr
        elif not (config.same_line or too_deep):
            body = "\n" + body + "\n"
            comment = f"{c.COMMENT}{config.comment}{c.END}"
        name = config.type if isinstance(config.type, str) else config.type.__name__
        name = f"{c.TYPE}{name}{c.END}" if name else ""
        start = f"{c.PAREN}{config.start}{c.END}" if config.start else ""
        end = f"{c.PAREN}{config.end}{c.END}" if config.end else ""
        return f"{name}{start}{comment}{body}{end}"
    finally:
        REPR_CONTEXT.depth -= 1


class MappingReprMixin(Representable):
    """``Type({key: value, ...})`` for a class with ``items()``."""

    __slots__ = ()

    def __nnx_repr__(self) -> Iterator[Object | Attr]:
        yield Object(type=type(self), kv_sep=": ", start="({", end="})")
        for key, value in self.items():  # type: ignore[attr-defined]
            yield Attr(colorized(key), value, use_raw_key=True)


@dataclasses.dataclass(repr=False)
class PrettyMapping(Representable):
    """Wraps a mapping to repr it as ``PrettyMapping({...})``, one entry per line."""

    mapping: Mapping[Any, Any]

    def __nnx_repr__(self) -> Iterator[Object | Attr]:
        yield Object(type=type(self), kv_sep=": ", start="({", end="})")
        for key, value in self.mapping.items():
            yield Attr(colorized(key), value, use_raw_key=True)


class SequenceReprMixin(Representable):
    """``Type([value, ...])`` for an iterable class."""

    __slots__ = ()

    def __nnx_repr__(self) -> Iterator[Object | Attr]:
        yield Object(type=type(self), kv_sep="", start="([", end="])")
        for value in self:  # type: ignore[attr-defined]
            yield Attr("", value, use_raw_key=True)


@dataclasses.dataclass(repr=False)
class PrettySequence(Representable):
    """Wraps a sequence to repr it as ``PrettySequence([...])``, one entry per line."""

    sequence: Sequence[Any]

    def __nnx_repr__(self) -> Iterator[Object | Attr]:
        yield Object(type=type(self), kv_sep="", start="([", end="])")
        for value in self.sequence:
            yield Attr("", value, use_raw_key=True)
