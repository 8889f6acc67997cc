"""Signature synthesis for option dicts: a custom ``__init__`` taking
``**kwargs: Unpack[Options]`` shows the options as keyword parameters."""

import inspect
import typing
from typing import Any


def takes_unpacked_options(init: Any) -> bool:
    """Whether ``init`` declares ``**kwargs: Unpack[SomeTypedDict]`` (read cheaply, from
    its raw annotations)."""
    for hint in getattr(init, "__annotations__", {}).values():
        if typing.get_origin(hint) is typing.Unpack:
            return True
        if isinstance(hint, str) and hint.replace(" ", "").startswith(
            ("Unpack[", "typing.Unpack[")
        ):
            return True
    return False


def spell_out_options(cls: Any, init: Any) -> None:
    """Give ``init`` (and so the class) a signature listing the keyword arguments of its
    ``**kwargs: Unpack[Options]``, as ``inspect.signature`` and ``help()`` show them:
    ``Conv2d(in_features, out_features, kernel_size, *, strides=1, padding='SAME', ...,
    key)``. Their annotations are the TypedDict's; their defaults are those of the base
    classes' ``__init__`` that the options are passed on to (a required key has none).
    Left as it is when an optional key has no default there."""
    signature = inspect.signature(init)
    params = list(signature.parameters.values())
    if not params or params[-1].kind is not inspect.Parameter.VAR_KEYWORD:
        return
    try:
        (options,) = typing.get_args(typing.get_type_hints(init)[params[-1].name])
        hints = typing.get_type_hints(options)
    except Exception:  # an unresolvable annotation: keep **kwargs
        return
    if not typing.is_typeddict(options):
        return
    defaults: dict[str, Any] = {}
    for base in cls.__mro__[1:]:
        base_init = base.__dict__.get("__init__")
        if base_init is None or base is object:
            continue
        for p in inspect.signature(base_init).parameters.values():
            if p.default is not inspect.Parameter.empty:
                defaults.setdefault(p.name, p.default)
    keyword = []
    for name, hint in hints.items():
        if name in options.__required_keys__:
            default = inspect.Parameter.empty
        elif name in defaults:
            default = defaults[name]
        else:
            return
        keyword.append(
            inspect.Parameter(
                name, inspect.Parameter.KEYWORD_ONLY, default=default, annotation=hint
            )
        )
    init.__signature__ = signature.replace(parameters=[*params[:-1], *keyword])
