"""Low-rank adaptation (``flax.nnx.nn.lora``): ``LoRA``, ``LoRALinear``, ``LoRAParam``."""

from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import Any, TypeVar

import jax
import jax.numpy as jnp

from adapters.typing import Dtype, Initializer
from pytreemod.nn import functional as F

from ..module import Module
from ..rnglib import Rngs
from ..variablelib import Param, Variable
from . import dtypes, initializers
from .linear import Linear

__all__ = ["LoRA", "LoRALinear", "LoRAParam", "default_a_initializer", "default_b_initializer"]

Array = jax.Array
Axis = int
Size = int
A = TypeVar("A")
PromoteDtypeFn = Callable[..., Any]
_NO_METADATA: Mapping[str, Any] = MappingProxyType({})

default_a_initializer: Initializer = initializers.he_uniform()
default_b_initializer: Initializer = initializers.zeros


class LoRAParam(Param[A]):
    """A LoRA factor: a ``Param`` (so ``nnx.Param`` filters match it) of its own type, so
    that ``nnx.LoRAParam`` selects the adapters alone (e.g. to train only them)."""

    __slots__ = ()


class LoRA(Module):
    """A low-rank update ``x @ lora_a @ lora_b``, optionally added to a base module's output.

    ``lora_a`` is ``(in_features, lora_rank)`` (He-uniform) and ``lora_b``
    ``(lora_rank, out_features)`` (zeros), so a fresh LoRA adds nothing.

    >>> import jax.numpy as jnp
    >>> from adapters import nnx
    >>> linear = nnx.Linear(3, 4, rngs=nnx.Rngs(0))
    >>> layer = nnx.LoRA(3, 2, 4, base_module=linear, rngs=nnx.Rngs(1))
    >>> layer.lora_a.shape, layer.lora_b.shape
    ((3, 2), (2, 4))
    >>> bool((layer(jnp.ones((1, 3))) == linear(jnp.ones((1, 3)))).all())
    True

    Args:
        in_features: the size of the input's last axis.
        lora_rank: the inner dimension of the two factors.
        out_features: the size of the output's last axis.
        base_module: a callable module whose output (called with the promoted input and
            the call's keyword arguments) is added (default ``None``).
        dtype: the computation dtype (default ``None``: promoted from the operands).
        param_dtype: the dtype of the factors (default ``float32``).
        a_initializer: initializer of ``lora_a`` (default ``he_uniform()``).
        b_initializer: initializer of ``lora_b`` (default zeros).
        lora_param_type: the Variable type of the factors (default ``LoRAParam``).
        promote_dtype: called as ``promote_dtype((x, lora_a, lora_b), dtype=dtype)``.
        rngs: the ``Rngs`` whose ``params`` stream draws the factors (``a`` first).
        a_metadata: metadata of ``lora_a``'s Variable (sharding...).
        b_metadata: metadata of ``lora_b``'s Variable.
    """

    def __init__(
        self,
        in_features: int,
        lora_rank: int,
        out_features: int,
        *,
        base_module: Module | None = None,
        dtype: Dtype | None = None,
        param_dtype: Dtype = jnp.float32,
        a_initializer: Initializer = default_a_initializer,
        b_initializer: Initializer = default_b_initializer,
        lora_param_type: type[Variable] = LoRAParam,
        promote_dtype: PromoteDtypeFn = dtypes.promote_dtype,
        rngs: Rngs,
        a_metadata: Mapping[str, Any] = _NO_METADATA,
        b_metadata: Mapping[str, Any] = _NO_METADATA,
    ) -> None:
        self.in_features = in_features
        self.out_features = out_features
        self.dtype = dtype
        self.param_dtype = param_dtype
        self.lora_param_type = lora_param_type
        self.base_module = base_module
        self.promote_dtype = promote_dtype
        self.lora_a = lora_param_type(
            a_initializer(rngs.params(), (in_features, lora_rank), param_dtype), **a_metadata
        )
        self.lora_b = lora_param_type(
            b_initializer(rngs.params(), (lora_rank, out_features), param_dtype), **b_metadata
        )

    def __call__(self, x: jax.Array, **kwargs: Any) -> jax.Array:
        """The low-rank update of ``x`` (``(..., in_features)``), plus the base module's
        output when there is one (``kwargs`` go to the base module)."""
        x, lora_a, lora_b = self.promote_dtype(
            (x, self.lora_a[...], self.lora_b[...]), dtype=self.dtype
        )
        out = F.linear(F.linear(x, lora_a), lora_b)
        if self.base_module is not None:
            if not callable(self.base_module):
                raise ValueError("`self.base_module` must be callable.")
            out = out + self.base_module(x, **kwargs)
        return out


class LoRALinear(Linear):
    """An ``nnx.Linear`` plus a ``LoRA`` update (submodule ``lora``) of its output.

    Its ``kernel`` and ``bias`` have a ``Linear``'s names and shapes, so a trained
    ``Linear``'s state loads into it (``nnx.update``).

    >>> import jax.numpy as jnp
    >>> from adapters import nnx
    >>> layer = nnx.LoRALinear(3, 4, lora_rank=2, rngs=nnx.Rngs(0))
    >>> layer.kernel.shape, layer.lora.lora_a.shape
    ((3, 4), (3, 2))
    >>> layer(jnp.ones((16, 3))).shape
    (16, 4)

    Args:
        in_features: the size of the input's last axis.
        out_features: the size of the output's last axis.
        lora_rank: the inner dimension of the LoRA factors.
        lora_dtype: the LoRA computation dtype (default ``None``: promoted).
        lora_param_dtype: the dtype of the factors (default ``float32``).
        a_initializer: initializer of ``lora_a`` (default ``he_uniform()``).
        b_initializer: initializer of ``lora_b`` (default zeros).
        lora_param_type: the Variable type of the factors (default ``LoRAParam``).
        lora_promote_dtype: the LoRA submodule's ``promote_dtype``.
        rngs: the ``Rngs`` drawing the kernel, the bias, then the factors.
        a_metadata: metadata of ``lora_a``'s Variable.
        b_metadata: metadata of ``lora_b``'s Variable.
        **kwargs: the other arguments of ``nnx.Linear``.
    """

    def __init__(
        self,
        in_features: int,
        out_features: int,
        *,
        lora_rank: int,
        lora_dtype: Dtype | None = None,
        lora_param_dtype: Dtype = jnp.float32,
        a_initializer: Initializer = default_a_initializer,
        b_initializer: Initializer = default_b_initializer,
        lora_param_type: type[Variable] = LoRAParam,
        lora_promote_dtype: PromoteDtypeFn = dtypes.promote_dtype,
        rngs: Rngs,
        a_metadata: Mapping[str, Any] = _NO_METADATA,
        b_metadata: Mapping[str, Any] = _NO_METADATA,
        **kwargs: Any,
    ) -> None:
        super().__init__(in_features, out_features, rngs=rngs, **kwargs)
        self.lora = LoRA(
            in_features,
            lora_rank,
            out_features,
            dtype=lora_dtype,
            param_dtype=lora_param_dtype,
            a_initializer=a_initializer,
            b_initializer=b_initializer,
            lora_param_type=lora_param_type,
            promote_dtype=lora_promote_dtype,
            rngs=rngs,
            a_metadata=a_metadata,
            b_metadata=b_metadata,
        )

    def __call__(self, x: jax.Array, out_sharding: Any = None) -> jax.Array:
        """``Linear``'s output plus the LoRA update of ``x``."""
        y = super().__call__(x, out_sharding=out_sharding)
        return y + self.lora(x)
