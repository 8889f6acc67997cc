"""NNX layers over ``pytreemod.nn.functional`` (the math lives there)."""

from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp

from pytreemod.nn import functional as F

from ..module import List, Module
from ..rnglib import Rngs, RngStream
from ..variablelib import Param

Initializer = Callable[..., jax.Array]

default_kernel_init: Initializer = jax.nn.initializers.lecun_normal()
default_bias_init: Initializer = jax.nn.initializers.zeros
default_embed_init: Initializer = jax.nn.initializers.variance_scaling(
    1.0, "fan_in", "normal", out_axis=0
)


class Linear(Module):
    """``y = x @ kernel + bias`` over the last axis; ``kernel`` is ``(in_features, out_features)``.

    Keys: ``kernel`` then ``bias`` are drawn from ``rngs.params()``.
    """

    def __init__(
        self,
        in_features: int,
        out_features: int,
        *,
        use_bias: bool = True,
        dtype: Any = None,
        param_dtype: Any = jnp.float32,
        precision: Any = None,
        kernel_init: Initializer = default_kernel_init,
        bias_init: Initializer = default_bias_init,
        dot_general: Callable[..., jax.Array] | None = None,
        rngs: Rngs,
    ) -> None:
        self.kernel: Param = Param(
            kernel_init(rngs.params(), (in_features, out_features), param_dtype)
        )
        self.bias: Param | None = None
        if use_bias:
            self.bias = Param(bias_init(rngs.params(), (out_features,), param_dtype))
        self.in_features = in_features
        self.out_features = out_features
        self.use_bias = use_bias
        self.dtype = dtype
        self.param_dtype = param_dtype
        self.precision = precision
        self.dot_general = dot_general

    def __call__(self, inputs: jax.Array) -> jax.Array:
        bias = None if self.bias is None else self.bias[...]
        return F.linear(
            inputs,
            self.kernel[...],
            bias,
            dtype=self.dtype,
            precision=self.precision,
            dot_general=self.dot_general,
        )


class Embed(Module):
    """A lookup table ``embedding`` of shape ``(num_embeddings, features)``."""

    def __init__(
        self,
        num_embeddings: int,
        features: int,
        *,
        dtype: Any = None,
        param_dtype: Any = jnp.float32,
        embedding_init: Initializer = default_embed_init,
        rngs: Rngs,
    ) -> None:
        self.embedding: Param = Param(
            embedding_init(rngs.params(), (num_embeddings, features), param_dtype)
        )
        self.num_embeddings = num_embeddings
        self.features = features
        self.dtype: Any = dtype or self.embedding.dtype
        self.param_dtype = param_dtype

    def __call__(self, inputs: jax.Array) -> jax.Array:
        return F.embed(inputs, self.embedding[...], dtype=self.dtype)

    def attend(self, query: jax.Array) -> jax.Array:
        """Dot products of ``query`` with every embedding (a weight-tied output layer)."""
        return F.attend(query, self.embedding[...], dtype=self.dtype)


class Dropout(Module):
    """Zeroes inputs with probability ``rate`` and scales the rest by ``1 / (1 - rate)``.

    Keys come from the ``rngs`` given to ``__call__`` or, failing that, from a fork of stream
    ``rng_collection`` taken at construction.
    """

    def __init__(
        self,
        rate: float,
        *,
        broadcast_dims: Sequence[int] = (),
        deterministic: bool = False,
        rng_collection: str = "dropout",
        rngs: Rngs | RngStream | None = None,
    ) -> None:
        self.rate = rate
        self.broadcast_dims = broadcast_dims
        self.deterministic = deterministic
        self.rng_collection = rng_collection
        if isinstance(rngs, Rngs):
            self.rngs: RngStream | None = rngs[rng_collection].fork()
        elif isinstance(rngs, RngStream):
            self.rngs = rngs.fork()
        elif rngs is None:
            self.rngs = None
        else:
            raise TypeError(f"rngs must be a Rngs, RngStream or None, but got {type(rngs)}.")

    def __call__(
        self,
        inputs: jax.Array,
        *,
        deterministic: bool | None = None,
        rngs: Rngs | RngStream | jax.Array | None = None,
    ) -> jax.Array:
        deterministic = self.deterministic if deterministic is None else deterministic
        if self.rate == 0.0 or deterministic:
            return inputs
        if self.rate == 1.0:
            return jnp.zeros_like(inputs)
        source = rngs if rngs is not None else self.rngs
        if isinstance(source, Rngs):
            key = source[self.rng_collection]()
        elif isinstance(source, RngStream):
            key = source()
        elif isinstance(source, jax.Array):
            key = source
        elif source is None:
            raise ValueError(
                "`deterministic` is False, but no `rngs` argument was provided to Dropout "
                "as either a __call__ argument or class attribute."
            )
        else:
            raise TypeError(f"rngs must be a Rngs, RngStream or jax.Array, but got {type(source)}.")
        return F.dropout(inputs, self.rate, key, broadcast_dims=self.broadcast_dims)


class Sequential(Module):
    """Applies ``fns`` in order; a tuple output is splatted into the next call, a dict as kwargs."""

    def __init__(self, *fns: Callable[..., Any]) -> None:
        self.layers: List = List(fns)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if not self.layers:
            if len(args) == 1:
                return args[0]
            return args or kwargs or None
        output: Any = None
        for i, f in enumerate(self.layers):
            if not callable(f):
                raise TypeError(f"Sequence[{i}] is not callable: {f}")
            if i > 0:
                if isinstance(output, tuple):
                    args, kwargs = output, {}
                elif isinstance(output, dict):
                    args, kwargs = (), output
                else:
                    args, kwargs = (output,), {}
            output = f(*args, **kwargs)
        return output
