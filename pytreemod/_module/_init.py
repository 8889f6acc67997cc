"""Construction: running a Module's ``__init__`` (the only time its fields may be
assigned), then defaults, converters, static checks and ``__check_init__``."""

import dataclasses
from typing import Any

from .._errors import UninitializedFieldError
from ._fields import MARK
from ._static import check_static_field

initialising: set[int] = set()
"""ids of instances whose ``__init__`` is running; only they accept attribute assignment."""


def finish_init(cls: Any, self: Any) -> None:
    """Complete ``self`` after ``cls.__init__`` returned."""
    state = self.__dict__
    state.pop(MARK, None)
    missing = []
    for f in cls._pytreemod_field_objs:
        if f.name not in state:
            if f.default is not dataclasses.MISSING:
                state[f.name] = f.default
            elif f.default_factory is not dataclasses.MISSING:
                state[f.name] = f.default_factory()
            else:
                missing.append(f.name)
    if missing:
        names = ", ".join(repr(n) for n in missing)
        raise UninitializedFieldError(
            f"{cls.__name__}.__init__ returned without setting field(s) {names}. Assign "
            f"them in __init__ (self.{missing[0]} = ...) or give them a default in the "
            "class body."
        )
    for name, converter in cls._pytreemod_converters:
        state[name] = converter(state[name])
    for name in cls._pytreemod_static:
        check_static_field(cls, name, state[name])
    for check in cls._pytreemod_check_inits:
        check(self)
