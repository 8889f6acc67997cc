"""``pm.checkpoint_formats``: the formats ``pm.load`` reads, and how to add one.

``pm.load(path, like)`` reads with the first format that detects ``path``: pytreemod's
own, in a fixed order (``pytreemod-dir``: a checkpoint directory ``pm.save`` wrote;
``orbax``: an Orbax checkpoint of ``pm.state(model)``; ``pytreemod-file``: a ``pm.save``
file; ``safetensors``: a plain safetensors file), then those added with
``register_format``, in the order they were added (docs/checkpoints.md, "Formats").

- ``CheckpointFormat``: the class a format subclasses: ``name``, ``detect(path)``,
  ``read(path, like, filter=...)``, and ``write(path, tree)`` if it writes;
- ``register_format(format)``, ``unregister_format(name)``: add or remove a format;
- ``formats()``: every format, in the order ``pm.load`` tries them;
- ``find_format(path)``: the one ``pm.load`` would read ``path`` with.
"""

from ._checkpoint import find_format as find_format
from ._checkpoint import formats as formats
from ._checkpoint import register_format as register_format
from ._checkpoint import unregister_format as unregister_format
from ._checkpoint_registry import CheckpointFormat as CheckpointFormat

__all__ = ["CheckpointFormat", "find_format", "formats", "register_format", "unregister_format"]
