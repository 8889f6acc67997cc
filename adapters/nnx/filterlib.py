"""The two filters flax.nnx has beyond pytreemod's: ``WithTag`` and ``PathContains(exact=)``.

Both are ``pm.Filter`` objects, so they combine with pytreemod's (``Not``, ``Any``, ``All``,
``~``, ``|``, ``&``) and ``pm.to_filter`` takes them as they are: adapters.nnx has no filter
language of its own.
"""

import dataclasses
from typing import Any as _Any

import pytreemod as pm
from pytreemod import All as All
from pytreemod import Any as Any
from pytreemod import Everything as Everything
from pytreemod import Not as Not
from pytreemod import Nothing as Nothing
from pytreemod import OfType as OfType

from .variablelib import Variable


@dataclasses.dataclass(frozen=True)
class WithTag(pm.Filter):
    """Selects Variables whose ``tag`` metadata is ``tag`` (an Rngs stream's key and count)."""

    tag: str

    def __call__(self, path: tuple[_Any, ...], value: _Any) -> bool:
        return isinstance(value, Variable) and value.get_metadata("tag", None) == self.tag


@dataclasses.dataclass(frozen=True)
class PathContains(pm.PathContains):
    """Selects leaves whose path contains ``key``; ``exact=False``: ``str(key)`` is a
    substring of some part of the path (``PathContains("ker", exact=False)``)."""

    exact: bool = True

    def __call__(self, path: tuple[_Any, ...], value: _Any) -> bool:
        if self.exact:
            return self.key in path
        return any(str(self.key) in str(part) for part in path)

    def __repr__(self) -> str:
        return f"PathContains({self.key!r}, exact={self.exact})"
