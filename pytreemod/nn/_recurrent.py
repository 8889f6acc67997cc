"""Recurrent cells: ``LSTMCell``, ``OptimizedLSTMCell``, ``GRUCell``, ``MGUCell``,
``SimpleCell``, ``ConvLSTMCell`` (their base ``RNNCellBase``).

A cell maps ``(carry, x)`` to ``(new_carry, y)`` for one time step. Its projections are
``Linear`` (``Conv``) layers in a ``projections`` dict keyed by Flax's parameter names, so
``pm.to_variables(cell)["params"]["projections"]`` is the ``params`` dict of the matching
Linen cell. The step math is ``pytreemod.nn.functional``'s (``lstm_cell``...).
"""

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import jax
import jax.numpy as jnp
from jaxtyping import Float, Shaped

from .._module import Module, field
from .._shapecheck import AnyArray, checked
from .._trace_cache import trace_once
from . import _ops_recurrent as R
from ._conv import Conv
from ._init import Initializer, default_bias_init, default_kernel_init
from ._linear import Linear
from ._ops_common import var_value
from ._ops_conv import PaddingLike
from ._validate import layer_args, positive_ints

Activation = Callable[[jax.Array], jax.Array]
State = Float[AnyArray, "*batch hidden_features"]
NewState = Float[jax.Array, "*batch hidden_features"]
Input = Shaped[AnyArray, "*batch in_features"]

default_recurrent_kernel_init: Initializer = jax.nn.initializers.orthogonal()
"""``orthogonal()``: Flax's default for the kernels applied to the hidden state."""


class RNNCellBase(Module, typecheck=True):
    """A recurrent cell: ``cell(carry, x) -> (new_carry, y)`` for one time step.

    Subclasses define ``__call__``, ``initialize_carry(input_shape, *, key=None)`` (the
    carry for a step input of ``input_shape``) and ``num_feature_axes`` (the trailing
    input axes that are features; the others are batch axes). ``RNN`` runs any of them.

    >>> import jax, jax.numpy as jnp
    >>> import pytreemod as pm
    >>> cell = pm.nn.GRUCell(3, 4, key=jax.random.key(0))
    >>> isinstance(cell, pm.nn.RNNCellBase), cell.initialize_carry((2, 3)).shape
    (True, (2, 4))
    """

    def __call__(self, carry: Any, x: Any, *, out_sharding: Any = None) -> tuple[Any, Any]:
        """One step: ``(carry, x) -> (new_carry, y)``; ``out_sharding`` reshards ``y`` and
        every array of ``new_carry``."""
        raise NotImplementedError

    def initialize_carry(
        self, input_shape: tuple[int, ...], *, key: jax.Array | None = None
    ) -> Any:
        """The initial carry for one step's input of shape ``input_shape``."""
        raise NotImplementedError

    @property
    def num_feature_axes(self) -> int:
        """How many trailing axes of the input are features."""
        raise NotImplementedError


def _linears(
    spec: dict[str, tuple[int, bool, Initializer, Initializer]],
    out: int,
    key: jax.Array,
    **kwargs: Any,
) -> dict[str, Linear | Conv]:
    """``Linear`` layers ``name -> (in_features, use_bias, kernel_init, bias_init)``."""
    keys = jax.random.split(key, len(spec))
    return {
        name: Linear(
            n_in, out, use_bias=bias, kernel_init=k_init, bias_init=b_init, key=k, **kwargs
        )
        for (name, (n_in, bias, k_init, b_init)), k in zip(spec.items(), keys)
    }


def _bias(layer: Linear | Conv) -> jax.Array:
    assert layer.bias is not None, "the hidden projections of an LSTM cell have a bias"
    return var_value(layer.bias)


class _VectorCell(RNNCellBase):
    """Shared fields and carry of the cells over ``(*batch, features)`` inputs."""

    projections: dict[str, Linear | Conv]
    in_features: int = field(static=True)
    hidden_features: int = field(static=True)
    carry_init: Initializer = field(static=True, repr=False)
    param_dtype: Any = field(static=True, repr=False)

    def _check_args(
        self,
        in_features: Any,
        hidden_features: Any,
        key: Any,
        dtype: Any,
        param_dtype: Any,
        carry_init: Any,
    ) -> None:
        """Validate the constructor arguments every cell shares (``LayerConfigError``);
        typed ``Any`` so that the check, not the method's type check, reports them."""
        layer_args(
            type(self).__name__,
            sizes={"in_features": in_features, "hidden_features": hidden_features},
            key=key,
            dtype=dtype,
            param_dtype=param_dtype,
            fns={"carry_init": carry_init},
        )

    def _set_fields(
        self,
        projections: dict[str, Linear | Conv],
        in_features: int,
        hidden_features: int,
        carry_init: Callable[..., Any],
        param_dtype: Any,
    ) -> None:
        """Set the fields every cell shares (called from ``__init__``)."""
        self.projections = projections
        self.in_features = in_features
        self.hidden_features = hidden_features
        self.carry_init = carry_init
        self.param_dtype = param_dtype

    def _set_linear_fields(
        self,
        spec: dict[str, Any],
        key: jax.Array,
        in_features: int,
        hidden_features: int,
        carry_init: Callable[..., Any],
        dtype: Any,
        param_dtype: Any,
        precision: Any,
    ) -> None:
        """``_set_fields`` with projections built by ``_linears`` from ``spec``."""
        projections = _linears(
            spec, hidden_features, key, dtype=dtype, param_dtype=param_dtype, precision=precision
        )
        self._set_fields(projections, in_features, hidden_features, carry_init, param_dtype)

    def _project(self, name: str, x: jax.Array) -> jax.Array:
        return self.projections[name](x)

    def _carry(self, input_shape: tuple[int, ...], key: jax.Array | None, parts: int) -> Any:
        shape = (*input_shape[:-1], self.hidden_features)  # (*batch, *spatial, hidden)
        key = jax.random.key(0) if key is None else key
        if parts == 1:
            return self.carry_init(key, shape, self.param_dtype)
        return tuple(self.carry_init(k, shape, self.param_dtype) for k in jax.random.split(key))

    @property
    def num_feature_axes(self) -> int:
        """1: the last axis."""
        return 1


class LSTMCell(_VectorCell):
    """A long short-term memory cell (Flax ``LSTMCell``); carry ``(c, h)``, output ``h``.

    ``i, f, o = gate_fn(W_i* x + W_h* h + b_h*)``, ``g = activation_fn(...)``,
    ``c' = f * c + i * g``, ``h' = o * activation_fn(c')``.

    **Arguments:** ``in_features``, ``hidden_features``; ``gate_fn`` (default sigmoid),
    ``activation_fn`` (default tanh); ``kernel_init`` (input kernels, default
    ``lecun_normal()``), ``recurrent_kernel_init`` (default ``orthogonal()``),
    ``bias_init`` (default zeros), ``carry_init`` (default zeros); ``dtype``,
    ``param_dtype`` (default float32; also the carry's), ``precision``; ``key``.

    **Parameters:** ``projections``: ``ii``, ``if``, ``ig``, ``io`` (``Linear(in,
    hidden)``, no bias) and ``hi``, ``hf``, ``hg``, ``ho`` (``Linear(hidden, hidden)``).

    >>> import jax, jax.numpy as jnp
    >>> import pytreemod as pm
    >>> cell = pm.nn.LSTMCell(3, 4, key=jax.random.key(0))
    >>> x = jnp.ones((2, 3))                     # (*batch, in_features)
    >>> c, h = cell.initialize_carry(x.shape)    # each (*batch, hidden_features)
    >>> (c, h), y = cell((c, h), x)
    >>> y.shape
    (2, 4)
    """

    gate_fn: Activation = field(static=True, repr=False)
    activation_fn: Activation = field(static=True, repr=False)

    def __init__(
        self,
        in_features: int,
        hidden_features: int,
        *,
        gate_fn: Activation = jax.nn.sigmoid,
        activation_fn: Activation = jnp.tanh,
        kernel_init: Initializer = default_kernel_init,
        recurrent_kernel_init: Initializer = default_recurrent_kernel_init,
        bias_init: Initializer = default_bias_init,
        carry_init: Initializer = jax.nn.initializers.zeros,
        dtype: Any = None,
        param_dtype: Any = jnp.float32,
        precision: Any = None,
        key: jax.Array,
    ):
        self._check_args(in_features, hidden_features, key, dtype, param_dtype, carry_init)
        spec = {}
        for gate in "ifgo":
            spec[f"i{gate}"] = (in_features, False, kernel_init, bias_init)
        for gate in "ifgo":
            spec[f"h{gate}"] = (hidden_features, True, recurrent_kernel_init, bias_init)
        self._set_linear_fields(
            spec, key, in_features, hidden_features, carry_init, dtype, param_dtype, precision
        )
        self.gate_fn = gate_fn
        self.activation_fn = activation_fn

    @trace_once
    @checked
    def __call__(
        self, carry: tuple[State, State], x: Input, *, out_sharding: Any = None
    ) -> tuple[tuple[NewState, NewState], NewState]:
        """One step: ``((c, h), x) -> ((c', h'), h')``."""
        return R.lstm_cell(
            carry,
            x,
            self._project,
            gate_fn=self.gate_fn,
            activation_fn=self.activation_fn,
            out_sharding=out_sharding,
        )

    def initialize_carry(
        self, input_shape: tuple[int, ...], *, key: jax.Array | None = None
    ) -> tuple[jax.Array, jax.Array]:
        """``(c, h)`` of shape ``(*batch, hidden_features)`` from ``carry_init`` (``key``
        split in two; default ``key(0)``, used only by random initializers)."""
        return self._carry(input_shape, key, 2)


class OptimizedLSTMCell(LSTMCell):
    """``LSTMCell`` computing its gates with two matrix products per step (the four
    kernels of each source concatenated); same arguments, parameters and results
    (Flax ``OptimizedLSTMCell``).

    >>> import jax, jax.numpy as jnp
    >>> import pytreemod as pm
    >>> cell = pm.nn.OptimizedLSTMCell(3, 4, key=jax.random.key(0))
    >>> _, y = cell(cell.initialize_carry((2, 3)), jnp.ones((2, 3)))
    >>> y.shape  # (*batch, hidden_features)
    (2, 4)
    """

    if TYPE_CHECKING:  # the inherited constructor, not one synthesised from the fields
        __init__ = LSTMCell.__init__

    @trace_once
    @checked
    def __call__(
        self, carry: tuple[State, State], x: Input, *, out_sharding: Any = None
    ) -> tuple[tuple[NewState, NewState], NewState]:
        """One step: ``((c, h), x) -> ((c', h'), h')``."""
        p = self.projections
        hidden = [p[f"h{gate}"] for gate in "ifgo"]
        return R.fused_lstm_cell(
            carry,
            x,
            [var_value(p[f"i{gate}"].kernel) for gate in "ifgo"],
            [var_value(layer.kernel) for layer in hidden],
            [_bias(layer) for layer in hidden],
            gate_fn=self.gate_fn,
            activation_fn=self.activation_fn,
            dtype=p["ii"].dtype,
            out_sharding=out_sharding,
        )


class GRUCell(_VectorCell):
    """A gated recurrent unit (Flax ``GRUCell``); carry and output ``h``.

    ``r = gate_fn(W_ir x + b_ir + W_hr h)``, ``z = gate_fn(W_iz x + b_iz + W_hz h)``,
    ``n = activation_fn(W_in x + b_in + r * (W_hn h + b_hn))``, ``h' = (1 - z) n + z h``.

    **Arguments:** as ``LSTMCell``. **Parameters:** ``projections`` ``ir``, ``iz``,
    ``in`` (``Linear(in, hidden)``), ``hr``, ``hz`` (no bias), ``hn``.

    >>> import jax, jax.numpy as jnp
    >>> import pytreemod as pm
    >>> cell = pm.nn.GRUCell(3, 4, key=jax.random.key(0))
    >>> h, y = cell(cell.initialize_carry((2, 3)), jnp.ones((2, 3)))
    >>> h.shape, y.shape  # (*batch, hidden_features)
    ((2, 4), (2, 4))
    """

    gate_fn: Activation = field(static=True, repr=False)
    activation_fn: Activation = field(static=True, repr=False)

    def __init__(
        self,
        in_features: int,
        hidden_features: int,
        *,
        gate_fn: Activation = jax.nn.sigmoid,
        activation_fn: Activation = jnp.tanh,
        kernel_init: Initializer = default_kernel_init,
        recurrent_kernel_init: Initializer = default_recurrent_kernel_init,
        bias_init: Initializer = default_bias_init,
        carry_init: Initializer = jax.nn.initializers.zeros,
        dtype: Any = None,
        param_dtype: Any = jnp.float32,
        precision: Any = None,
        key: jax.Array,
    ):
        self._check_args(in_features, hidden_features, key, dtype, param_dtype, carry_init)
        spec = {f"i{g}": (in_features, True, kernel_init, bias_init) for g in "rzn"}
        for g in "rzn":
            spec[f"h{g}"] = (hidden_features, g == "n", recurrent_kernel_init, bias_init)
        self._set_linear_fields(
            spec, key, in_features, hidden_features, carry_init, dtype, param_dtype, precision
        )
        self.gate_fn = gate_fn
        self.activation_fn = activation_fn

    @trace_once
    @checked
    def __call__(
        self, carry: State, x: Input, *, out_sharding: Any = None
    ) -> tuple[NewState, NewState]:
        """One step: ``(h, x) -> (h', h')``."""
        return R.gru_cell(
            carry,
            x,
            self._project,
            gate_fn=self.gate_fn,
            activation_fn=self.activation_fn,
            out_sharding=out_sharding,
        )

    def initialize_carry(
        self, input_shape: tuple[int, ...], *, key: jax.Array | None = None
    ) -> jax.Array:
        """``h`` of shape ``(*batch, hidden_features)`` from ``carry_init``."""
        return self._carry(input_shape, key, 1)


class MGUCell(_VectorCell):
    """A minimal gated unit (Flax ``MGUCell``, https://arxiv.org/abs/1603.09420).

    ``f = gate_fn(W_if x + b_if + W_hf h)``, ``n = activation_fn(W_in x + b_in + f *
    (W_hn h + b_hn))`` (no ``f *`` and no ``b_hn`` when ``reset_gate=False``),
    ``h' = (1 - f) n + f h``.

    **Arguments:** as ``GRUCell``, with ``forget_bias_init`` (default ones) and
    ``activation_bias_init`` (default zeros) in place of ``bias_init``, and
    ``reset_gate`` (default ``True``). **Parameters:** ``projections`` ``if``, ``in``,
    ``hf`` (no bias), ``hn``.

    >>> import jax, jax.numpy as jnp
    >>> import pytreemod as pm
    >>> cell = pm.nn.MGUCell(3, 4, key=jax.random.key(0))
    >>> h, y = cell(cell.initialize_carry((2, 3)), jnp.ones((2, 3)))
    >>> y.shape  # (*batch, hidden_features)
    (2, 4)
    """

    gate_fn: Activation = field(static=True, repr=False)
    activation_fn: Activation = field(static=True, repr=False)
    reset_gate: bool = field(static=True, repr=False)

    def __init__(
        self,
        in_features: int,
        hidden_features: int,
        *,
        gate_fn: Activation = jax.nn.sigmoid,
        activation_fn: Activation = jnp.tanh,
        kernel_init: Initializer = default_kernel_init,
        recurrent_kernel_init: Initializer = default_recurrent_kernel_init,
        forget_bias_init: Initializer = jax.nn.initializers.ones,
        activation_bias_init: Initializer = default_bias_init,
        carry_init: Initializer = jax.nn.initializers.zeros,
        reset_gate: bool = True,
        dtype: Any = None,
        param_dtype: Any = jnp.float32,
        precision: Any = None,
        key: jax.Array,
    ):
        self._check_args(in_features, hidden_features, key, dtype, param_dtype, carry_init)
        spec = {
            "if": (in_features, True, kernel_init, forget_bias_init),
            "in": (in_features, True, kernel_init, activation_bias_init),
            "hf": (hidden_features, False, recurrent_kernel_init, activation_bias_init),
            "hn": (hidden_features, reset_gate, recurrent_kernel_init, activation_bias_init),
        }
        self._set_linear_fields(
            spec, key, in_features, hidden_features, carry_init, dtype, param_dtype, precision
        )
        self.gate_fn = gate_fn
        self.activation_fn = activation_fn
        self.reset_gate = reset_gate

    @trace_once
    @checked
    def __call__(
        self, carry: State, x: Input, *, out_sharding: Any = None
    ) -> tuple[NewState, NewState]:
        """One step: ``(h, x) -> (h', h')``."""
        return R.mgu_cell(
            carry,
            x,
            self._project,
            gate_fn=self.gate_fn,
            activation_fn=self.activation_fn,
            reset_gate=self.reset_gate,
            out_sharding=out_sharding,
        )

    def initialize_carry(
        self, input_shape: tuple[int, ...], *, key: jax.Array | None = None
    ) -> jax.Array:
        """``h`` of shape ``(*batch, hidden_features)`` from ``carry_init``."""
        return self._carry(input_shape, key, 1)


class SimpleCell(_VectorCell):
    """An Elman cell (Flax ``SimpleCell``): ``h' = activation_fn(W_i x + b_i + W_h h)``,
    plus ``h`` inside the activation when ``residual``; carry and output ``h'``.

    **Arguments:** ``in_features``, ``hidden_features``, ``activation_fn`` (default tanh),
    ``kernel_init``, ``recurrent_kernel_init``, ``bias_init``, ``carry_init``,
    ``residual`` (default ``False``), ``dtype``, ``param_dtype``, ``precision``, ``key``.
    **Parameters:** ``projections`` ``i`` (``Linear(in, hidden)``) and ``h`` (no bias).

    >>> import jax, jax.numpy as jnp
    >>> import pytreemod as pm
    >>> cell = pm.nn.SimpleCell(3, 4, key=jax.random.key(0))
    >>> h, y = cell(cell.initialize_carry((2, 3)), jnp.ones((2, 3)))
    >>> y.shape  # (*batch, hidden_features)
    (2, 4)
    """

    activation_fn: Activation = field(static=True, repr=False)
    residual: bool = field(static=True, repr=False)

    def __init__(
        self,
        in_features: int,
        hidden_features: int,
        *,
        activation_fn: Activation = jnp.tanh,
        kernel_init: Initializer = default_kernel_init,
        recurrent_kernel_init: Initializer = default_recurrent_kernel_init,
        bias_init: Initializer = default_bias_init,
        carry_init: Initializer = jax.nn.initializers.zeros,
        residual: bool = False,
        dtype: Any = None,
        param_dtype: Any = jnp.float32,
        precision: Any = None,
        key: jax.Array,
    ):
        self._check_args(in_features, hidden_features, key, dtype, param_dtype, carry_init)
        spec = {
            "i": (in_features, True, kernel_init, bias_init),
            "h": (hidden_features, False, recurrent_kernel_init, bias_init),
        }
        self._set_linear_fields(
            spec, key, in_features, hidden_features, carry_init, dtype, param_dtype, precision
        )
        self.activation_fn = activation_fn
        self.residual = residual

    @trace_once
    @checked
    def __call__(
        self, carry: State, x: Input, *, out_sharding: Any = None
    ) -> tuple[NewState, NewState]:
        """One step: ``(h, x) -> (h', h')``."""
        return R.simple_cell(
            carry,
            x,
            self._project,
            activation_fn=self.activation_fn,
            residual=self.residual,
            out_sharding=out_sharding,
        )

    def initialize_carry(
        self, input_shape: tuple[int, ...], *, key: jax.Array | None = None
    ) -> jax.Array:
        """``h`` of shape ``(*batch, hidden_features)`` from ``carry_init``."""
        return self._carry(input_shape, key, 1)


class ConvLSTMCell(_VectorCell):
    """A convolutional LSTM cell (Flax ``ConvLSTMCell``) over ``(*batch, *spatial,
    in_features)`` inputs; carry ``(c, h)`` of shape ``(*batch, *spatial,
    hidden_features)``, output ``h``.

    **Arguments:** ``in_features``, ``hidden_features``, ``kernel_size`` (one size per
    spatial axis); ``strides`` (default 1), ``padding`` (default ``"SAME"``), ``use_bias``
    (default ``True``), ``kernel_init``/``bias_init`` (``Conv``'s defaults),
    ``carry_init``, ``dtype``, ``param_dtype``, ``precision``, ``key``.
    **Parameters:** ``projections`` ``ih`` (``Conv(in, 4 * hidden)``) and ``hh``
    (``Conv(hidden, 4 * hidden)``); gates ``i, g, f, o`` in that order, ``+1`` on ``f``.

    >>> import jax, jax.numpy as jnp
    >>> import pytreemod as pm
    >>> cell = pm.nn.ConvLSTMCell(3, 4, (3, 3), key=jax.random.key(0))
    >>> x = jnp.ones((2, 8, 8, 3))              # (*batch, height, width, in_features)
    >>> _, y = cell(cell.initialize_carry(x.shape), x)
    >>> y.shape                                 # (*batch, height, width, hidden_features)
    (2, 8, 8, 4)
    """

    kernel_size: tuple[int, ...] = field(static=True, repr=False)

    def __init__(
        self,
        in_features: int,
        hidden_features: int,
        kernel_size: Sequence[int],
        *,
        strides: int | Sequence[int] = 1,
        padding: PaddingLike = "SAME",
        use_bias: bool = True,
        kernel_init: Initializer = default_kernel_init,
        bias_init: Initializer = default_bias_init,
        carry_init: Initializer = jax.nn.initializers.zeros,
        dtype: Any = None,
        param_dtype: Any = jnp.float32,
        precision: Any = None,
        key: jax.Array,
    ):
        self._check_args(in_features, hidden_features, key, dtype, param_dtype, carry_init)
        size = positive_ints(type(self).__name__, "kernel_size", kernel_size, allow_int=False)
        options: dict[str, Any] = dict(
            strides=strides,
            padding=padding,
            use_bias=use_bias,
            kernel_init=kernel_init,
            bias_init=bias_init,
            dtype=dtype,
            param_dtype=param_dtype,
            precision=precision,
        )
        k1, k2 = jax.random.split(key)
        projections: dict[str, Linear | Conv] = {
            "ih": Conv(in_features, 4 * hidden_features, size, key=k1, **options),
            "hh": Conv(hidden_features, 4 * hidden_features, size, key=k2, **options),
        }
        self._set_fields(projections, in_features, hidden_features, carry_init, param_dtype)
        self.kernel_size = size

    @trace_once
    @checked
    def __call__(
        self, carry: tuple[State, State], x: Input, *, out_sharding: Any = None
    ) -> tuple[tuple[NewState, NewState], NewState]:
        """One step: ``((c, h), x) -> ((c', h'), h')``."""
        return R.conv_lstm_cell(carry, x, self._project, out_sharding=out_sharding)

    def initialize_carry(
        self, input_shape: tuple[int, ...], *, key: jax.Array | None = None
    ) -> tuple[jax.Array, jax.Array]:
        """``(c, h)`` of shape ``(*batch, *spatial, hidden_features)``."""
        return self._carry(input_shape, key, 2)

    @property
    def num_feature_axes(self) -> int:
        """The spatial axes and the channel axis."""
        return len(self.kernel_size) + 1
