"""The contractions of ``Linear`` and ``LinearGeneral`` with ``lax.dot_general``, as
pure functions of their settings (``LinearConfig``) and arrays, traced once per
configuration under a staging trace (``pm.trace_once(inline=True)``)."""

import functools
from collections.abc import Callable
from typing import Any, NamedTuple

import jax
from jax import lax

import pytreemod as pm
from pytreemod.nn import functional as F

Array = jax.Array


def with_preferred_type(fn: Callable[..., Any], preferred_element_type: Any) -> Any:
    """``fn`` given ``preferred_element_type`` on every call, when that is set."""
    if preferred_element_type is None:
        return fn
    return functools.partial(fn, preferred_element_type=preferred_element_type)


class LinearConfig(NamedTuple):
    """The settings of a contraction with ``lax.dot_general``, traced once per
    configuration (a user's ``dot_general`` may read or write state: it is called
    directly every time)."""

    precision: Any
    preferred_element_type: Any
    out_sharding: Any
    axis: Any = -1
    batch_dims: Any = ()


def _lax_dot(c: LinearConfig) -> Callable[..., Any]:
    return with_preferred_type(lax.dot_general, c.preferred_element_type)


def _linear(c: LinearConfig, inputs: Array, kernel: Array, bias: Array | None) -> Array:
    return F.linear(
        inputs,
        kernel,
        bias,
        precision=c.precision,
        dot_general=_lax_dot(c),
        out_sharding=c.out_sharding,
    )


def _dense_general(c: LinearConfig, inputs: Array, kernel: Array, bias: Array | None) -> Array:
    return F.dense_general(
        inputs,
        kernel,
        bias,
        axis=c.axis,
        batch_dims=c.batch_dims,
        precision=c.precision,
        dot_general=_lax_dot(c),
        out_sharding=c.out_sharding,
    )


# Under a staging trace each configuration's contraction is traced once and its trace
# inlined (``pm.trace_once(inline=True)``); eager calls run it as written.
linear_once = pm.trace_once(_linear, inline=True)
dense_general_once = pm.trace_once(_dense_general, inline=True)


class TakeAsJax(pm.sharding.ExplicitMeshPolicy):
    """The Explicit-mesh policy of NNX's ``Embed`` lookup without ``out_sharding``:
    ``jnp.take`` as JAX shards it (Flax's ``Embed``), where pytreemod's policy works out a
    sharding; a table and ids sharded so that the gather's output sharding is ambiguous
    then raise JAX's error, as in Flax."""

    def gather_rows(self, table: Any, ids: Any, *, op: str) -> tuple[Any, Any]:
        return table, None


TAKE_AS_JAX = TakeAsJax()
