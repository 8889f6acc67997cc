"""Functionalization: ``init``, ``apply``, ``lazy_init`` and ``bind``.

``apply(fn, mutable)`` turns a scope function into a pure function of
``(variables, *args, rngs=...)``: it binds a root ``Scope`` to the variables, calls
``fn``, invalidates the scope and returns the output (and, if anything is mutable, the
mutable collections). ``init`` is ``apply`` on empty variables with every collection
mutable and the ``initializing`` flag set.
"""

import functools
from collections.abc import Callable, Mapping
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from . import _filters
from ._errors import (
    ApplyScopeInvalidVariablesStructureError,
    ApplyScopeInvalidVariablesTypeError,
    InvalidRngError,
    LazyInitError,
)
from ._frozen_dict import FrozenDict, unfreeze
from ._scope import LazyRng, Scope

RNGSequences = Mapping[str, Any]


def _is_valid_rng(rng: Any) -> bool:
    """A typed key of shape ``()``, a raw ``uint32[2]`` key, or a LazyRng."""
    if isinstance(rng, LazyRng):
        return True
    if not isinstance(rng, (np.ndarray, jax.Array)):
        return False
    if jnp.issubdtype(rng.dtype, jax.dtypes.prng_key):
        return rng.shape == ()
    return rng.shape == (2,) and rng.dtype == np.uint32


def _is_valid_rngs(rngs: Any) -> bool:
    return isinstance(rngs, Mapping) and all(
        isinstance(k, str) and _is_valid_rng(v) for k, v in rngs.items()
    )


def _check_variables(variables: Any) -> None:
    if not isinstance(variables, Mapping) or not all(
        isinstance(col, str)
        and isinstance(value, Mapping)
        and all(isinstance(k, str) for k in value)
        for col, value in variables.items()
    ):
        raise ApplyScopeInvalidVariablesTypeError()


def bind(
    variables: Mapping[str, Any],
    rngs: RNGSequences | None = None,
    mutable: _filters.CollectionFilter = False,
    flags: Mapping[str, Any] | None = None,
) -> Scope:
    """A root ``Scope`` bound to ``variables`` and ``rngs``, for interactive use.

    Mutable collections are copied, so writes never reach the caller's dicts. Prefer
    ``apply`` in reusable code: a bound scope is stateful.
    """
    _check_variables(variables)
    if rngs is not None and not _is_valid_rngs(rngs):
        raise InvalidRngError("rngs should be a dictionary mapping strings to `jax.PRNGKey`.")
    filt = _filters.to_filter(mutable)
    own = {
        col: unfreeze(value) if _filters.in_filter(filt, col) else value
        for col, value in variables.items()
    }
    return Scope(own, rngs=rngs, mutable=filt, flags=flags)


def apply(
    fn: Callable[..., Any],
    mutable: _filters.CollectionFilter = False,
    flags: Mapping[str, Any] | None = None,
) -> Callable[..., Any]:
    """Functionalize a scope function: ``apply(fn, mutable)(variables, *args, rngs=None)``.

    Returns ``fn``'s output, or ``(output, mutable_variables)`` when ``mutable`` is not
    ``False``. ``rngs`` is a key (the ``params`` stream) or a dict of keys.
    """

    @functools.wraps(fn)
    def wrapper(variables: Mapping[str, Any], *args: Any, rngs: Any = None, **kwargs: Any) -> Any:
        if rngs is not None:
            if _is_valid_rng(rngs):
                rngs = {"params": rngs}
            elif not _is_valid_rngs(rngs):
                raise ValueError(
                    "The ``rngs`` argument passed to an apply function should be a "
                    "``jax.PRNGKey`` or a dictionary mapping strings to ``jax.PRNGKey``."
                )
        if isinstance(variables, Mapping):
            params = variables.get("params")
            if isinstance(params, (dict, FrozenDict)) and "params" in params:
                raise ApplyScopeInvalidVariablesStructureError(variables)
        root = bind(variables, rngs=rngs, mutable=mutable, flags=flags)
        with root.temporary():
            y = fn(root, *args, **kwargs)
            if mutable is not False:
                return y, root.mutable_variables()
            return y

    return wrapper


def init(
    fn: Callable[..., Any],
    mutable: _filters.CollectionFilter = True,
    flags: Mapping[str, Any] | None = None,
) -> Callable[..., Any]:
    """Functionalize a scope function for initialization: ``init(fn)(rngs, *args)``.

    Returns ``(output, variables)``. ``rngs`` is a key (the ``params`` stream) or a dict
    of keys; the ``initializing`` flag is set.
    """

    @functools.wraps(fn)
    def wrapper(rngs: Any, *args: Any, **kwargs: Any) -> tuple[Any, dict[str, Any]]:
        if _is_valid_rng(rngs):
            rngs = {"params": rngs}
        elif not _is_valid_rngs(rngs):
            raise ValueError(
                "First argument passed to an init function should be a ``jax.PRNGKey`` "
                "or a dictionary mapping strings to ``jax.PRNGKey``."
            )
        init_flags = {**(flags or {}), "initializing": True}
        return apply(fn, mutable=mutable, flags=init_flags)({}, *args, rngs=rngs, **kwargs)

    return wrapper


def lazy_init(
    fn: Callable[..., Any],
    mutable: _filters.CollectionFilter = True,
    flags: Mapping[str, Any] | None = None,
) -> Callable[..., Any]:
    """Like ``init``, but inputs may be ``jax.ShapeDtypeStruct``s; returns only the variables.

    Variables must not depend on the values of the inputs given as shapes
    (``LazyInitError`` otherwise). The forward computation is not run: the variables
    are computed by a compiled program from which XLA removes everything else.
    """

    def wrapper(rngs: Any, *args: Any, **kwargs: Any) -> dict[str, Any]:
        is_shape = lambda x: isinstance(x, jax.ShapeDtypeStruct)
        leaves, treedef = jax.tree.flatten((args, kwargs), is_leaf=is_shape)
        unknown = [i for i, x in enumerate(leaves) if is_shape(x)]

        def variables_of(*unknown_values: Any) -> Any:
            full = list(leaves)
            for i, v in zip(unknown, unknown_values):
                full[i] = v
            a, k = jax.tree.unflatten(treedef, full)
            return init(fn, mutable, flags)(rngs, *a, **k)[1]

        shapes = [leaves[i] for i in unknown]
        if unknown:
            closed = jax.make_jaxpr(variables_of, return_shape=True)(*shapes)
            jaxpr, out_shape = closed
            dependent = _dependent_outputs(jaxpr.jaxpr)
            flat_paths = jax.tree_util.tree_flatten_with_path(out_shape)[0]
            for (path, _), dep in zip(flat_paths, dependent):
                if dep:
                    raise LazyInitError(jax.tree_util.keystr(path))

        def compute() -> Any:
            return variables_of(*(jnp.zeros(s.shape, s.dtype) for s in shapes))

        return jax.jit(compute)()

    return wrapper


def _dependent_outputs(jaxpr: Any) -> list[bool]:
    """Which outputs of ``jaxpr`` depend on any of its inputs (conservatively)."""
    # jax.extend imports all of its submodules (Pallas among them): loaded when needed.
    from jax.extend import core as jex_core

    dependent: set[Any] = set(jaxpr.invars)
    for eqn in jaxpr.eqns:
        if any(isinstance(v, jex_core.Var) and v in dependent for v in eqn.invars):
            dependent.update(eqn.outvars)
    return [isinstance(v, jex_core.Var) and v in dependent for v in jaxpr.outvars]
