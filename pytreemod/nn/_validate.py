"""Checks of layer constructor arguments: each raises ``LayerConfigError`` naming the
layer, the argument and its value, and what to pass instead."""

import operator
from collections.abc import Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from .._errors import LayerConfigError
from .._shapecheck import fail, summary


def _is_int(value: Any) -> bool:
    if type(value) is int:  # the usual case, without the protocol lookups below
        return True
    if isinstance(value, bool):
        return False
    try:
        operator.index(value)
    except TypeError:
        return False
    return True


def integer(layer: str, name: str, value: Any) -> int:
    """``value`` as an int (not a bool)."""
    if not _is_int(value):
        raise LayerConfigError(f"{layer}: {name}={value!r} must be an int.")
    return operator.index(value)


def positive_int(layer: str, name: str, value: Any) -> int:
    """``value`` as an int, which must be ``>= 1``."""
    if type(value) is int and value >= 1:
        return value
    if not _is_int(value) or operator.index(value) < 1:
        raise LayerConfigError(
            f"{layer}: {name}={value!r} must be a positive int; pass e.g. {name}=1."
        )
    return operator.index(value)


def positive_ints(layer: str, name: str, values: Any, *, allow_int: bool = True) -> tuple[int, ...]:
    """A tuple of ints ``>= 1`` (a single int becomes a 1-tuple if ``allow_int``)."""
    if _is_int(values) and allow_int:
        values = (values,)
    if isinstance(values, str) or not isinstance(values, Sequence):
        hint = "a tuple with one int per spatial/window axis, e.g. (2, 2)"
        raise LayerConfigError(f"{layer}: {name}={values!r} must be {hint}.")
    out: list[int] = []
    for v in values:
        if not _is_int(v) or operator.index(v) < 1:
            raise LayerConfigError(
                f"{layer}: {name}={tuple(values)!r} must hold positive ints; got {v!r}."
            )
        out.append(operator.index(v))
    return tuple(out)


def number(layer: str, name: str, value: Any, *, low: float | None = None) -> float:
    """A real number, at least ``low`` when given."""
    if isinstance(value, (bool, str)) or not isinstance(value, (int, float, np.number)):
        raise LayerConfigError(f"{layer}: {name}={value!r} must be a number.")
    if low is not None and float(value) < low:
        raise LayerConfigError(f"{layer}: {name}={value!r} must be >= {low}.")
    return float(value)


def probability(layer: str, name: str, value: Any) -> float:
    """A number in ``[0, 1]``."""
    rate = number(layer, name, value)
    if not 0.0 <= rate <= 1.0:
        raise LayerConfigError(f"{layer}: {name}={value!r} is not a probability in [0, 1].")
    return rate


def prng_key(layer: str, key: Any, *, calling: bool = False) -> jax.Array:
    """A single PRNG key: a typed key of shape ``()`` or a raw ``uint32[2]`` key.

    ``calling``: the key was given to a call (Dropout's ``key=``), not to a constructor;
    the message says how to draw different masks per example instead of how to build
    several layers."""
    shape = getattr(key, "shape", None)
    dtype = getattr(key, "dtype", None)
    typed = dtype is not None and jax.dtypes.issubdtype(dtype, jax.dtypes.prng_key)
    raw = dtype == jnp.uint32 and shape == (2,)
    if (typed and shape == ()) or raw:
        return key
    if typed:
        got = f"a batch of keys of shape {shape}" if calling else f"a key array of shape {shape}"
    elif dtype is not None and shape is not None:
        got = summary(key)
    else:
        got = repr(key)
    if calling:
        fix = (
            "pass one key, key=jax.random.key(seed) (a fresh one each step: "
            "jax.random.fold_in(key, step)); one key draws the mask of the whole batch, "
            "and to give each example its own key, jax.vmap the call over split keys"
        )
    else:
        fix = (
            "pass key=jax.random.key(seed) (to build several layers, split it: "
            "jax.random.split(key, n))"
        )
    raise LayerConfigError(f"{layer}: key={got} is not a single PRNG key; {fix}.")


def dtype_arg(layer: str, name: str, dtype: Any, *, inexact: bool = False) -> Any:
    """``None`` or something ``jnp.dtype`` accepts (floating/complex if ``inexact``)."""
    if dtype is None:
        return None
    try:
        if (dtype, inexact) in _GOOD_DTYPES:
            return dtype
    except TypeError:  # unhashable: checked below, which rejects it
        pass
    try:
        resolved = jnp.dtype(dtype)
    except TypeError:
        resolved = None
    if resolved is None:
        raise LayerConfigError(
            f"{layer}: {name}={dtype!r} is not a dtype; pass e.g. {name}=jnp.float32."
        )
    if inexact and not jnp.issubdtype(resolved, jnp.inexact):
        raise LayerConfigError(
            f"{layer}: {name}={resolved.name} is not a floating dtype: parameters are "
            f"trained by gradients; pass e.g. {name}=jnp.float32."
        )
    if len(_GOOD_DTYPES) < 256:
        _GOOD_DTYPES.add((dtype, inexact))
    return dtype


_GOOD_DTYPES: set[tuple[Any, bool]] = set()  # dtype arguments that passed, and how


def callable_arg(layer: str, name: str, fn: Any, *, optional: bool = False) -> Any:
    """A callable (or ``None`` when ``optional``)."""
    if fn is None and optional:
        return None
    if not callable(fn):
        raise LayerConfigError(
            f"{layer}: {name}={fn!r} is not callable; pass a function such as "
            f"{'jax.nn.relu' if 'init' not in name else 'pm.nn.initializers.zeros'}."
        )
    return fn


def one_of(layer: str, name: str, value: Any, choices: Sequence[Any]) -> Any:
    """``value``, which must be one of ``choices``."""
    if value not in choices:
        options = ", ".join(repr(c) for c in choices)
        raise LayerConfigError(f"{layer}: {name}={value!r} is not one of {options}.")
    return value


_UNSET: Any = object()


def layer_args(
    layer: str,
    *,
    sizes: dict[str, Any] | None = None,
    key: Any = _UNSET,
    dtype: Any = None,
    param_dtype: Any = None,
    fns: dict[str, Any] | None = None,
) -> None:
    """The checks most layers share: positive sizes, a PRNG key, dtypes, callables."""
    for name, value in (sizes or {}).items():
        positive_int(layer, name, value)
    dtype_arg(layer, "dtype", dtype)
    dtype_arg(layer, "param_dtype", param_dtype, inexact=True)
    for name, fn in (fns or {}).items():
        callable_arg(layer, name, fn)
    if key is not _UNSET:
        prng_key(layer, key)


def nonempty_output(owner: str, x: Any, y: Any, what: str) -> Any:
    """``y``, unless it is empty while ``x`` is not (a window larger than the input)."""
    if y.size == 0 and x.size != 0:
        fail(
            owner,
            f"x {summary(x)} gives an empty output {summary(y)}: the {what} is larger than "
            "the (padded) input; use padding='SAME', a larger input or a smaller "
            f"{what}",
        )
    return y
