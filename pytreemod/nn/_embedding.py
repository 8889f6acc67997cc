"""``Embedding``."""

import sys
from typing import Any

import jax
import jax.numpy as jnp
from jaxtyping import Float, Integer

from .._errors import LayerConfigError
from .._module import Module, field
from .._shapecheck import AnyArray, checked
from .._trace_cache import trace_once
from .._variables import Param
from .._where import layer_name
from . import _ops_linear as F
from ._init import Initializer, default_embed_init
from ._ops_common import var_value
from ._validate import layer_args


class Embedding(Module, typecheck=True):
    """A table of ``num_embeddings`` vectors of size ``features``, indexed by integers
    (Flax ``Embed``).

    **Arguments:**

    - ``num_embeddings``: vocabulary size; ``features``: vector size.
    - ``dtype``: dtype of the looked-up vectors / of ``attend``'s computation (default
      ``None``: the table's); ``param_dtype``: default ``float32``.
    - ``embedding_init``: default ``variance_scaling(1.0, "fan_in", "normal",
      out_axis=0)`` (Flax's Embed default: standard deviation ``1/sqrt(features)``).
    - ``key``: PRNG key (keyword-only).

    **Parameters:** ``embedding`` ``(num_embeddings, features)`` (``params``).

    ``attend(x)`` computes ``x @ embedding.T``: output logits that share the table (tied
    input and output embeddings).

    Ids outside ``[0, num_embeddings)`` are a ``LayerConfigError`` in an eager call;
    under ``jit`` (no host check there) they give NaN rows, negative ids included:
    never a silent wrap-around to the end of the table.

    >>> import jax, jax.numpy as jnp
    >>> import pytreemod as pm
    >>> emb = pm.nn.Embedding(100, 16, key=jax.random.key(0))
    >>> ids = jnp.array([[1, 2, 3]])  # (*batch) integers in [0, 100)
    >>> h = emb(ids)                  # (*batch, features)
    >>> h.shape
    (1, 3, 16)
    >>> emb.attend(h).shape           # (*batch, num_embeddings): tied output projection
    (1, 3, 100)
    """

    embedding: Param[jax.Array]
    num_embeddings: int = field(static=True)
    features: int = field(static=True)
    dtype: Any = field(static=True, default=None, repr=False)

    def __init__(
        self,
        num_embeddings: int,
        features: int,
        *,
        dtype: Any = None,
        param_dtype: Any = jnp.float32,
        embedding_init: Initializer = default_embed_init,
        key: jax.Array,
    ):
        layer_args(
            "Embedding",
            sizes={"num_embeddings": num_embeddings, "features": features},
            key=key,
            dtype=dtype,
            param_dtype=param_dtype,
            fns={"embedding_init": embedding_init},
        )
        self.embedding = Param(embedding_init(key, (num_embeddings, features), param_dtype))
        self.num_embeddings = num_embeddings
        self.features = features
        self.dtype = dtype

    @trace_once
    @checked
    def __call__(
        self, ids: Integer[AnyArray, "*batch"], *, out_sharding: Any = None
    ) -> Float[jax.Array, "*batch features"]:
        """Look up the vectors of integer ``ids``: output ``(*ids.shape, features)``;
        ``out_sharding``: its sharding (default: derived on an Explicit mesh)."""
        n = self.num_embeddings
        if ids.size:
            try:
                lo, hi = int(jnp.min(ids)), int(jnp.max(ids))
            except jax.errors.ConcretizationTypeError:
                # Traced: no host check (it would cost a callback and collectives on
                # sharded ids). Negative ids give NaN rows like ids >= n, never a wrap.
                ids = jnp.where(ids < 0, n, ids)
            else:
                if lo < 0 or hi >= n:
                    raise LayerConfigError(
                        f"{layer_name(self, sys._getframe(1))}: ids must be in [0, "
                        f"num_embeddings={n}) but range over [{lo}, {hi}]; check the "
                        "tokenizer's vocabulary size against num_embeddings."
                    )
        return F.embed(ids, var_value(self.embedding), dtype=self.dtype, out_sharding=out_sharding)

    @trace_once
    @checked
    def attend(
        self, query: Float[AnyArray, "*batch features"], *, out_sharding: Any = None
    ) -> Float[jax.Array, "*batch num_embeddings"]:
        """Dot products of ``query`` with every embedding: ``(*batch, num_embeddings)``;
        ``out_sharding``: their sharding (default: derived on an Explicit mesh)."""
        return F.attend(
            query, var_value(self.embedding), dtype=self.dtype, out_sharding=out_sharding
        )
