"""The checkpoint format seam: what a format is, and the formats others added.

A format knows one layout of a checkpoint on disk. ``detect(path)`` says, cheaply and
without raising, whether ``path`` is in it; ``read(path, like, filter=...)`` loads it
into a tree shaped like ``like``; ``write(path, tree)`` saves one, for a format that
writes (the default says it does not). ``explain(path)`` may say why ``path`` is not in
the format, for the error of a path no format detects.

``pm.load`` asks each format in turn and reads with the first that detects the path:
pytreemod's own formats first, in a fixed order (``_checkpoint.BUILTIN_FORMATS``), then
the ones added with ``register_format``, in the order they were added. This module holds
the protocol and the added formats; ``_checkpoint`` holds pytreemod's own, the
detection and the public ``register_format`` (``pm.checkpoint_formats``).
"""

from typing import Any, TypeVar

from ._errors import CheckpointError
from ._filters import FilterLike

T = TypeVar("T")


class CheckpointFormat:
    """A checkpoint format ``pm.load`` can detect and read. Subclass it, give it a
    ``name``, implement ``detect`` and ``read`` (and ``write`` if it writes), and add an
    instance with ``pm.checkpoint_formats.register_format``.

    >>> import pytreemod as pm
    >>> [f.name for f in pm.checkpoint_formats.formats()][:4]
    ['pytreemod-dir', 'orbax', 'pytreemod-file', 'safetensors']
    """

    name: str = ""
    """A short name, unique among the registered formats (it appears in errors)."""

    def detect(self, path: str) -> bool:
        """Whether ``path`` holds a checkpoint of this format. Cheap (a look at a few
        bytes or file names, never the arrays) and never raises: a path it cannot open
        is not in the format."""
        raise NotImplementedError

    def read(self, path: str, like: T, *, filter: FilterLike = True) -> T:
        """The checkpoint at ``path`` as a tree shaped like ``like`` (``pm.load``'s
        arguments). Problems are ``pm.CheckpointError``s naming ``path``."""
        raise NotImplementedError

    def write(self, path: str, tree: Any) -> None:
        """Save ``tree`` at ``path`` in this format; a format that only reads raises."""
        raise CheckpointError(
            f"Cannot save {path!r} as a {self.name!r} checkpoint: pm.load reads that format "
            "but pytreemod does not write it. Save with pm.save (a pytreemod file or "
            "checkpoint directory)."
        )

    def explain(self, path: str) -> str | None:
        """Why ``path`` is not in this format, as a sentence naming it (for the error of a
        path no format detects); ``None`` when the format has nothing to say."""
        return None

    def __repr__(self) -> str:
        return f"<checkpoint format {self.name!r}>"


_ADDED: list[CheckpointFormat] = []


def added_formats() -> tuple[CheckpointFormat, ...]:
    """The formats added with ``register_format``, in the order they were added."""
    return tuple(_ADDED)


def add(format: CheckpointFormat, *, reserved: frozenset[str]) -> None:
    """Add ``format`` after the others (``reserved``: the built-in formats' names). A
    format of a name already added is replaced where it stands."""
    if not isinstance(format, CheckpointFormat):
        raise CheckpointError(
            f"register_format: {format!r} is a {type(format).__name__}, not a "
            "pm.checkpoint_formats.CheckpointFormat; subclass it and implement detect and "
            "read."
        )
    name = format.name
    if not isinstance(name, str) or not name:
        raise CheckpointError(
            f"register_format: {type(format).__name__} has no name; set the class "
            "attribute name to a short string (it appears in errors)."
        )
    if name in reserved:
        raise CheckpointError(
            f"register_format: {name!r} is one of pytreemod's own formats, which cannot be "
            "replaced; give the format another name."
        )
    for i, known in enumerate(_ADDED):
        if known.name == name:
            _ADDED[i] = format
            return
    _ADDED.append(format)


def remove(name: str) -> None:
    """Remove the added format called ``name``."""
    for i, known in enumerate(_ADDED):
        if known.name == name:
            del _ADDED[i]
            return
    added = ", ".join(repr(f.name) for f in _ADDED) or "none"
    raise CheckpointError(
        f"unregister_format: no added format is called {name!r} (added: {added}); "
        "pytreemod's own formats cannot be removed."
    )
