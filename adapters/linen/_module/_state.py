"""Per-instance bookkeeping of a Linen module (setup progress, autonames, children)."""

import dataclasses
import enum
from typing import Any


class SetupState(enum.IntEnum):
    """How far ``setup`` got: not yet run, run inside a lifted transform, or done."""

    NEW = 0
    TRANSFORMED = 1
    DONE = 2


@dataclasses.dataclass
class _ModuleInternalState:
    """Mutable state behind a (frozen-looking) module instance.

    - ``in_compact_method`` / ``in_setup``: a ``@compact`` method or ``setup`` is running.
    - ``setup_called``: a ``SetupState``.
    - ``is_initialized``: ``__post_init__`` finished attaching the module.
    - ``autoname_cursor``: next index per class-name prefix (``Dense`` -> 2).
    - ``children``: name -> submodule, or the collection of a variable of that name.
    """

    in_compact_method: bool = False
    in_setup: bool = False
    setup_called: SetupState = SetupState.NEW
    is_initialized: bool = False
    autoname_cursor: dict[str, int] = dataclasses.field(default_factory=dict)
    children: dict[str, Any] = dataclasses.field(default_factory=dict)

    def reset(self) -> None:
        """Forget the running method and the autoname counters (a method returned)."""
        self.in_compact_method = False
        self.in_setup = False
        self.autoname_cursor = {}

    def export(self) -> "_ModuleInternalState":
        """A copy for the clone of this module inside a lifted transform."""
        return _ModuleInternalState(
            in_compact_method=self.in_compact_method,
            in_setup=self.in_setup,
            setup_called=SetupState.TRANSFORMED if self.setup_called else SetupState.NEW,
            is_initialized=self.is_initialized,
            autoname_cursor=dict(self.autoname_cursor),
        )

    def reimport(self, other: "_ModuleInternalState") -> None:
        """Take back what the transformed clone changed (names handed out...)."""
        self.in_compact_method = other.in_compact_method
        self.in_setup = other.in_setup
        self.is_initialized = other.is_initialized
        self.autoname_cursor = dict(other.autoname_cursor)


_uninitialized_module_internal_state = _ModuleInternalState()
