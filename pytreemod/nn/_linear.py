"""``Linear``, ``Identity`` and ``MLP``."""

from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp
from jaxtyping import Float

from .._module import Module, field
from .._shapecheck import AnyArray, checked
from .._sharding._ops import constrain
from .._trace_cache import trace_once
from .._variables import Param
from . import _ops_linear as F
from ._init import (
    Initializer,
    bias_value,
    default_bias_init,
    default_kernel_init,
    kernel_bias_keys,
)
from ._ops_common import var_value
from ._validate import callable_arg, layer_args, positive_int


class Linear(Module, typecheck=True):
    """An affine map ``x @ kernel + bias`` over the last axis (Flax ``Dense``).

    **Arguments:**

    - ``in_features``, ``out_features``: sizes of the last axis of input and output.
    - ``use_bias``: add a bias (default ``True``).
    - ``dtype``: computation dtype (default ``None``: the common dtype of input and
      parameters); ``param_dtype``: dtype of the parameters (default ``float32``).
    - ``precision``: ``lax.dot_general`` precision (default ``None``).
    - ``kernel_init``: default ``lecun_normal()`` (Flax's Dense default);
      ``bias_init``: default ``zeros``.
    - ``key``: PRNG key for the initializers (keyword-only).

    **Parameters:** ``kernel`` ``(in_features, out_features)`` and ``bias``
    ``(out_features,)`` (``None`` without bias), in the ``params`` collection; the
    shapes and names are Flax's, so ``pm.to_variables(layer)`` is a Dense variables dict.

    >>> import jax, jax.numpy as jnp
    >>> import pytreemod as pm
    >>> layer = pm.nn.Linear(3, 4, key=jax.random.key(0))
    >>> layer
    Linear(kernel=Param(f32[3, 4]), bias=Param(f32[4]), in_features=3, out_features=4)
    >>> x = jnp.ones((8, 3))  # (*batch, in_features)
    >>> layer(x).shape        # (*batch, out_features)
    (8, 4)
    """

    kernel: Param[jax.Array]
    bias: Param[jax.Array] | None
    in_features: int = field(static=True)
    out_features: int = field(static=True)
    dtype: Any = field(static=True, default=None, repr=False)
    precision: Any = field(static=True, default=None, repr=False)

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
        key: jax.Array,
    ):
        layer_args(
            "Linear",
            sizes={"in_features": in_features, "out_features": out_features},
            key=key,
            dtype=dtype,
            param_dtype=param_dtype,
            fns={"kernel_init": kernel_init, "bias_init": bias_init},
        )
        kkey, bkey = kernel_bias_keys(key, bias_init, use_bias)
        self.kernel = Param(kernel_init(kkey, (in_features, out_features), param_dtype))
        self.bias = (
            Param(bias_value(bias_init, bkey, (out_features,), param_dtype)) if use_bias else None
        )
        self.in_features = in_features
        self.out_features = out_features
        self.dtype = dtype
        self.precision = precision

    @trace_once
    @checked
    def __call__(
        self, x: Float[AnyArray, "*batch in_features"], *, out_sharding: Any = None
    ) -> Float[jax.Array, "*batch out_features"]:
        """Apply the map to ``x`` of shape ``(*batch, in_features)``; ``out_sharding``:
        the output's sharding (default: derived on an Explicit mesh, see docs/sharding.md)."""
        return F.linear(
            x,
            var_value(self.kernel),
            var_value(self.bias),
            dtype=self.dtype,
            precision=self.precision,
            out_sharding=out_sharding,
        )


class Identity(Module, typecheck=True):
    """Returns its input unchanged (extra arguments are ignored); a placeholder layer.

    >>> import jax.numpy as jnp
    >>> import pytreemod as pm
    >>> pm.nn.Identity()(jnp.ones((2, 3))).shape  # (*shape) -> (*shape)
    (2, 3)
    """

    def __call__(self, x: Any, *args: Any, out_sharding: Any = None, **kwargs: Any) -> Any:
        """Return ``x`` (resharded to ``out_sharding`` when given)."""
        return constrain(x, out_sharding)


class MLP(Module, typecheck=True):
    """A multi-layer perceptron: ``Linear`` layers with an activation between them.

    **Arguments:**

    - ``in_features``, ``out_features``: input and output sizes.
    - ``hidden_features``: the size of each hidden layer: an int for one hidden layer, a
      sequence for several (``()`` gives a single ``Linear``).
    - ``activation``: applied after every hidden layer (default ``jax.nn.relu``).
    - ``final_activation``: applied to the output (default ``None``: none).
    - ``use_bias``, ``use_final_bias``: biases in the hidden / last layer (default
      ``True``).
    - ``dtype``, ``param_dtype``, ``precision``, ``kernel_init``, ``bias_init``: passed to
      every ``Linear`` (defaults as there: ``lecun_normal()`` kernels, zero biases).
    - ``key``: PRNG key (keyword-only), split over the layers.

    >>> import jax, jax.numpy as jnp
    >>> import pytreemod as pm
    >>> mlp = pm.nn.MLP(3, [32, 32], 2, activation=jax.nn.gelu, key=jax.random.key(0))
    >>> [layer.kernel.shape for layer in mlp.layers]
    [(3, 32), (32, 32), (32, 2)]
    >>> mlp(jnp.ones((8, 3))).shape  # (*batch, in_features) -> (*batch, out_features)
    (8, 2)
    """

    layers: tuple[Linear, ...]
    activation: Callable[[jax.Array], jax.Array] = field(static=True)
    final_activation: Callable[[jax.Array], jax.Array] | None = field(static=True)

    def __init__(
        self,
        in_features: int,
        hidden_features: int | Sequence[int],
        out_features: int,
        *,
        activation: Callable[[jax.Array], jax.Array] = jax.nn.relu,
        final_activation: Callable[[jax.Array], jax.Array] | None = None,
        use_bias: bool = True,
        use_final_bias: bool = True,
        dtype: Any = None,
        param_dtype: Any = jnp.float32,
        precision: Any = None,
        kernel_init: Initializer = default_kernel_init,
        bias_init: Initializer = default_bias_init,
        key: jax.Array,
    ):
        if isinstance(hidden_features, int) or not isinstance(hidden_features, Sequence):
            hidden = [hidden_features]
        else:
            hidden = list(hidden_features)
        for i, size in enumerate(hidden):
            positive_int("MLP", f"hidden_features[{i}]", size)
        callable_arg("MLP", "activation", activation)
        callable_arg("MLP", "final_activation", final_activation, optional=True)
        sizes = [in_features, *hidden, out_features]
        keys = jax.random.split(key, len(sizes) - 1)
        last = len(sizes) - 2
        self.layers = tuple(
            Linear(
                n_in,
                n_out,
                use_bias=use_final_bias if i == last else use_bias,
                dtype=dtype,
                param_dtype=param_dtype,
                precision=precision,
                kernel_init=kernel_init,
                bias_init=bias_init,
                key=k,
            )
            for i, (n_in, n_out, k) in enumerate(zip(sizes[:-1], sizes[1:], keys))
        )
        self.activation = activation
        self.final_activation = final_activation

    @trace_once
    @checked
    def __call__(
        self, x: Float[AnyArray, "*batch in_features"], *, out_sharding: Any = None
    ) -> Float[jax.Array, "*batch out_features"]:
        """Apply the layers to ``x`` of shape ``(*batch, in_features)``; ``out_sharding``:
        the sharding of the last layer's output (default: derived on an Explicit mesh)."""
        for layer in self.layers[:-1]:
            x = self.activation(layer(x))
        x = self.layers[-1](x, out_sharding=out_sharding)
        if self.final_activation is not None:
            x = self.final_activation(x)
        return jnp.asarray(x)
