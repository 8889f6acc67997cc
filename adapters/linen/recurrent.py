"""Recurrent layers (``flax.linen.recurrent``): the cells ``LSTMCell``,
``OptimizedLSTMCell``, ``GRUCell``, ``MGUCell``, ``SimpleCell``, ``ConvLSTMCell``, the
``RNN`` that scans a cell over a sequence with ``nn.scan``, and ``Bidirectional``.

Parameter names, shapes, initializers and the carry layout are Flax's. Each cell creates
its projections as ``Dense``/``Conv`` submodules named as Flax's and passes them to the
step function of ``pytreemod.nn.functional`` (``lstm_cell``, ``gru_cell``...), which the
``pytreemod.nn`` cells call too; ``RNN`` and ``Bidirectional`` drive ``F.rnn`` and
``F.bidirectional``.
"""

import logging
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol

import jax
import jax.numpy as jnp
from jax import random

from pytreemod.nn import functional as F
from pytreemod.nn.functional import flip_sequences as flip_sequences

from ..core import FrozenDict
from . import initializers, transforms
from .activation import sigmoid, tanh
from .linear import Conv, Dense, default_kernel_init
from .module import Module, compact, nowrap

__all__ = [
    "Bidirectional",
    "ConvLSTMCell",
    "DenseParams",
    "GRUCell",
    "LSTMCell",
    "MGUCell",
    "OptimizedLSTMCell",
    "RNN",
    "RNNCellBase",
    "SimpleCell",
    "flip_sequences",
]

Array = jax.Array
PRNGKey = jax.Array
Dtype = Any
Initializer = Callable[..., Any]
Carry = Any
Output = Any

_logger = logging.getLogger(__name__)


class RNNCellBase(Module):
    """Base class of the cells: ``__call__(carry, inputs) -> (carry, output)``."""

    @nowrap
    def initialize_carry(self, rng: PRNGKey, input_shape: tuple[int, ...]) -> Carry:
        """The initial carry for inputs of ``input_shape`` (one time step)."""
        raise NotImplementedError

    @property
    def num_feature_axes(self) -> int:
        """How many trailing axes of the input are features (the rest is batch)."""
        raise NotImplementedError


def _vector_carry(cell: Any, rng: PRNGKey, input_shape: tuple[int, ...], parts: int) -> Any:
    """``parts`` carries of shape ``(*batch, features)`` from ``cell.carry_init``."""
    shape = (*input_shape[:-1], cell.features)
    if parts == 1:
        return cell.carry_init(rng, shape, cell.param_dtype)
    k1, k2 = random.split(rng)
    return tuple(cell.carry_init(k, shape, cell.param_dtype) for k in (k1, k2))


class LSTMCell(RNNCellBase):
    """An LSTM cell; carry ``(c, h)``, output ``h``.

    Parameters: input kernels ``ii``, ``if``, ``ig``, ``io`` (``(in, features)``, no
    bias) and hidden ``hi``, ``hf``, ``hg``, ``ho`` (``(features, features)`` and bias).
    Defaults: ``lecun_normal()`` input kernels, ``orthogonal()`` hidden kernels, zero
    biases and carry.
    """

    features: int
    gate_fn: Callable[..., Any] = sigmoid
    activation_fn: Callable[..., Any] = tanh
    kernel_init: Initializer = default_kernel_init
    recurrent_kernel_init: Initializer = initializers.orthogonal()
    bias_init: Initializer = initializers.zeros_init()
    dtype: Dtype | None = None
    param_dtype: Dtype = jnp.float32
    carry_init: Initializer = initializers.zeros_init()

    @compact
    def __call__(self, carry: tuple[Array, Array], inputs: Array) -> tuple[Any, Array]:
        """One step: ``((c, h), x) -> ((c', h'), h')``."""
        hidden = carry[1].shape[-1]

        def project(name: str, x: Array) -> Array:
            if name[0] == "i":
                dense = Dense(
                    hidden,
                    use_bias=False,
                    kernel_init=self.kernel_init,
                    dtype=self.dtype,
                    param_dtype=self.param_dtype,
                    name=name,
                )
            else:
                dense = Dense(
                    hidden,
                    use_bias=True,
                    kernel_init=self.recurrent_kernel_init,
                    bias_init=self.bias_init,
                    dtype=self.dtype,
                    param_dtype=self.param_dtype,
                    name=name,
                )
            return dense(x)

        return F.lstm_cell(
            carry, inputs, project, gate_fn=self.gate_fn, activation_fn=self.activation_fn
        )

    @nowrap
    def initialize_carry(self, rng: PRNGKey, input_shape: tuple[int, ...]) -> tuple[Array, Array]:
        """``(c, h)``, each ``(*batch, features)`` from ``carry_init``."""
        return _vector_carry(self, rng, input_shape, 2)

    @property
    def num_feature_axes(self) -> int:
        """1: the last axis."""
        return 1


class DenseParams(Module):
    """Creates (and returns) the ``kernel`` and ``bias`` a ``Dense`` would, without
    applying them."""

    features: int
    use_bias: bool = True
    param_dtype: Dtype = jnp.float32
    precision: Any = None
    kernel_init: Initializer = default_kernel_init
    bias_init: Initializer = initializers.zeros_init()

    @compact
    def __call__(self, inputs: Array) -> tuple[Array, Array | None]:
        """``(kernel, bias)`` for inputs of this last-axis size (bias ``None`` without)."""
        kernel = self.param(
            "kernel", self.kernel_init, (jnp.shape(inputs)[-1], self.features), self.param_dtype
        )
        bias = None
        if self.use_bias:
            bias = self.param("bias", self.bias_init, (self.features,), self.param_dtype)
        return kernel, bias


class OptimizedLSTMCell(RNNCellBase):
    """``LSTMCell`` computing the four gates with one matrix product per source (same
    parameters, names and defaults)."""

    features: int
    gate_fn: Callable[..., Any] = sigmoid
    activation_fn: Callable[..., Any] = tanh
    kernel_init: Initializer = default_kernel_init
    recurrent_kernel_init: Initializer = initializers.orthogonal()
    bias_init: Initializer = initializers.zeros_init()
    dtype: Dtype | None = None
    param_dtype: Dtype = jnp.float32
    carry_init: Initializer = initializers.zeros_init()

    @compact
    def __call__(self, carry: tuple[Array, Array], inputs: Array) -> tuple[Any, Array]:
        """One step: ``((c, h), x) -> ((c', h'), h')``."""
        h = carry[1]
        hidden = h.shape[-1]
        input_kernels, hidden_kernels, hidden_biases = [], [], []
        for gate in ("i", "f", "g", "o"):
            kernel, _ = DenseParams(
                features=hidden,
                use_bias=False,
                param_dtype=self.param_dtype,
                kernel_init=self.kernel_init,
                bias_init=self.bias_init,
                name=f"i{gate}",
            )(inputs)
            input_kernels.append(kernel)
            kernel, bias = DenseParams(
                features=hidden,
                use_bias=True,
                param_dtype=self.param_dtype,
                kernel_init=self.recurrent_kernel_init,
                bias_init=self.bias_init,
                name=f"h{gate}",
            )(h)
            hidden_kernels.append(kernel)
            hidden_biases.append(bias)
        return F.fused_lstm_cell(
            carry,
            inputs,
            input_kernels,
            hidden_kernels,
            hidden_biases,
            gate_fn=self.gate_fn,
            activation_fn=self.activation_fn,
            dtype=self.dtype,
        )

    @nowrap
    def initialize_carry(self, rng: PRNGKey, input_shape: tuple[int, ...]) -> tuple[Array, Array]:
        """``(c, h)``, each ``(*batch, features)`` from ``carry_init``."""
        return _vector_carry(self, rng, input_shape, 2)

    @property
    def num_feature_axes(self) -> int:
        """1: the last axis."""
        return 1


class SimpleCell(RNNCellBase):
    """An Elman cell ``h' = activation_fn(i(x) + h(h) [+ h])``; carry and output ``h'``.

    Parameters ``i`` (kernel ``(in, features)`` and bias) and ``h`` (kernel ``(features,
    features)``); ``residual`` adds ``h`` before the activation.
    """

    features: int
    activation_fn: Callable[..., Any] = tanh
    kernel_init: Initializer = default_kernel_init
    recurrent_kernel_init: Initializer = initializers.orthogonal()
    bias_init: Initializer = initializers.zeros_init()
    dtype: Dtype | None = None
    param_dtype: Dtype = jnp.float32
    carry_init: Initializer = initializers.zeros_init()
    residual: bool = False

    @compact
    def __call__(self, carry: Array, inputs: Array) -> tuple[Array, Array]:
        """One step: ``(h, x) -> (h', h')``."""
        project = _input_hidden_projection(
            self,
            carry.shape[-1],
            input_bias_init=lambda name: self.bias_init,
            hidden_bias=lambda name: None,
        )
        return F.simple_cell(
            carry, inputs, project, activation_fn=self.activation_fn, residual=self.residual
        )

    @nowrap
    def initialize_carry(self, rng: PRNGKey, input_shape: tuple[int, ...]) -> Array:
        """``h`` of shape ``(*batch, features)`` from ``carry_init``."""
        return _vector_carry(self, rng, input_shape, 1)

    @property
    def num_feature_axes(self) -> int:
        """1: the last axis."""
        return 1


def _input_hidden_projection(
    cell: Any,
    hidden: int,
    input_bias_init: Callable[[str], Initializer],
    hidden_bias: Callable[[str], Initializer | None],
) -> F.Projection:
    """Dense projections of a GRU-like cell: ``i*`` from the input (with a bias),
    ``h*`` from the carry (a bias where ``hidden_bias(name)`` gives an initializer)."""

    def project(name: str, x: Array) -> Array:
        common = dict(dtype=cell.dtype, param_dtype=cell.param_dtype, name=name)
        if name[0] == "i":
            dense = Dense(
                hidden,
                use_bias=True,
                kernel_init=cell.kernel_init,
                bias_init=input_bias_init(name),
                **common,
            )
        else:
            bias_init = hidden_bias(name)
            dense = Dense(
                hidden,
                use_bias=bias_init is not None,
                kernel_init=cell.recurrent_kernel_init,
                **({} if bias_init is None else {"bias_init": bias_init}),
                **common,
            )
        return dense(x)

    return project


class GRUCell(RNNCellBase):
    """A GRU cell; carry and output ``h``.

    Parameters ``ir``, ``iz``, ``in`` (kernel ``(in, features)`` and bias) and ``hr``,
    ``hz`` (kernel ``(features, features)``), ``hn`` (kernel and bias).
    """

    features: int
    gate_fn: Callable[..., Any] = sigmoid
    activation_fn: Callable[..., Any] = tanh
    kernel_init: Initializer = default_kernel_init
    recurrent_kernel_init: Initializer = initializers.orthogonal()
    bias_init: Initializer = initializers.zeros_init()
    dtype: Dtype | None = None
    param_dtype: Dtype = jnp.float32
    carry_init: Initializer = initializers.zeros_init()

    @compact
    def __call__(self, carry: Array, inputs: Array) -> tuple[Array, Array]:
        """One step: ``(h, x) -> (h', h')``."""
        project = _input_hidden_projection(
            self,
            carry.shape[-1],
            input_bias_init=lambda name: self.bias_init,
            hidden_bias=lambda name: self.bias_init if name == "hn" else None,
        )
        return F.gru_cell(
            carry, inputs, project, gate_fn=self.gate_fn, activation_fn=self.activation_fn
        )

    @nowrap
    def initialize_carry(self, rng: PRNGKey, input_shape: tuple[int, ...]) -> Array:
        """``h`` of shape ``(*batch, features)`` from ``carry_init``."""
        return _vector_carry(self, rng, input_shape, 1)

    @property
    def num_feature_axes(self) -> int:
        """1: the last axis."""
        return 1


class MGUCell(RNNCellBase):
    """A minimal gated unit; carry and output ``h``.

    Parameters ``if``, ``in`` (kernel and bias; biases from ``forget_bias_init``, default
    ones, and ``activation_bias_init``, default zeros), ``hf`` (kernel) and ``hn`` (kernel,
    and a bias when ``reset_gate``).
    """

    features: int
    gate_fn: Callable[..., Any] = sigmoid
    activation_fn: Callable[..., Any] = tanh
    kernel_init: Initializer = default_kernel_init
    recurrent_kernel_init: Initializer = initializers.orthogonal()
    forget_bias_init: Initializer = initializers.ones_init()
    activation_bias_init: Initializer = initializers.zeros_init()
    dtype: Dtype | None = None
    param_dtype: Dtype = jnp.float32
    carry_init: Initializer = initializers.zeros_init()
    reset_gate: bool = True

    @compact
    def __call__(self, carry: Array, inputs: Array) -> tuple[Array, Array]:
        """One step: ``(h, x) -> (h', h')``."""
        with_bias = self.reset_gate
        project = _input_hidden_projection(
            self,
            carry.shape[-1],
            input_bias_init=lambda name: (
                self.forget_bias_init if name == "if" else self.activation_bias_init
            ),
            hidden_bias=lambda name: (
                self.activation_bias_init if name == "hn" and with_bias else None
            ),
        )
        return F.mgu_cell(
            carry,
            inputs,
            project,
            gate_fn=self.gate_fn,
            activation_fn=self.activation_fn,
            reset_gate=self.reset_gate,
        )

    @nowrap
    def initialize_carry(self, rng: PRNGKey, input_shape: tuple[int, ...]) -> Array:
        """``h`` of shape ``(*batch, features)`` from ``carry_init``."""
        return _vector_carry(self, rng, input_shape, 1)

    @property
    def num_feature_axes(self) -> int:
        """1: the last axis."""
        return 1


class ConvLSTMCell(RNNCellBase):
    """A convolutional LSTM cell over ``(*batch, *spatial, features)`` inputs; carry
    ``(c, h)``.

    Parameters: ``Conv`` layers ``ih`` and ``hh`` to ``4 * features`` channels (default
    initializers of ``Conv``); the forget gate gets ``+1`` before its sigmoid.
    """

    features: int
    kernel_size: Sequence[int]
    strides: Sequence[int] | None = None
    padding: str | Sequence[tuple[int, int]] = "SAME"
    use_bias: bool = True
    dtype: Dtype | None = None
    param_dtype: Dtype = jnp.float32
    carry_init: Initializer = initializers.zeros_init()

    @compact
    def __call__(self, carry: tuple[Array, Array], inputs: Array) -> tuple[Any, Array]:
        """One step: ``((c, h), x) -> ((c', h'), h')``."""

        def project(name: str, x: Array) -> Array:
            return Conv(
                features=4 * self.features,
                kernel_size=self.kernel_size,
                # None means 1, as in Flax's Conv (adapters' Conv rejects None).
                strides=1 if self.strides is None else self.strides,
                padding=self.padding,
                use_bias=self.use_bias,
                dtype=self.dtype,
                param_dtype=self.param_dtype,
                name=name,
            )(x)

        return F.conv_lstm_cell(carry, inputs, project)

    @nowrap
    def initialize_carry(self, rng: PRNGKey, input_shape: tuple[int, ...]) -> tuple[Array, Array]:
        """``(c, h)``, each ``(*batch, *spatial, features)`` from ``carry_init``."""
        n = self.num_feature_axes
        shape = tuple(input_shape[:-n]) + tuple(input_shape[-n:-1]) + (self.features,)
        k1, k2 = random.split(rng)
        return (
            self.carry_init(k1, shape, self.param_dtype),
            self.carry_init(k2, shape, self.param_dtype),
        )

    @property
    def num_feature_axes(self) -> int:
        """The spatial axes and the channel axis."""
        return len(self.kernel_size) + 1


class RNN(Module):
    """Applies ``cell`` over the time axis of ``inputs`` with ``nn.scan``.

    Inputs are ``(*batch, time, *features)`` (``(time, *batch, *features)`` with
    ``time_major``). The carry starts from ``initial_carry`` or from
    ``cell.initialize_carry(init_key or key(0), one_step_shape)``. ``seq_lengths``
    (batch shape) marks padding: with ``return_carry`` the carry of each sequence is the
    one after its last valid step; outputs at padded steps are not zeroed. ``reverse``
    processes from the end (padding stays at the end) and returns outputs in that order
    unless ``keep_order``. ``unroll``, ``variable_axes``, ``variable_broadcast``,
    ``variable_carry`` and ``split_rngs`` are passed to ``nn.scan`` (defaults: parameters
    broadcast, the ``params`` stream not split).
    """

    cell: RNNCellBase
    time_major: bool = False
    return_carry: bool = False
    reverse: bool = False
    keep_order: bool = False
    unroll: int = 1
    variable_axes: Mapping[Any, Any] = FrozenDict()
    variable_broadcast: Any = "params"
    variable_carry: Any = False
    split_rngs: Mapping[Any, bool] = FrozenDict({"params": False})

    def __call__(
        self,
        inputs: Array,
        *,
        initial_carry: Carry | None = None,
        init_key: PRNGKey | None = None,
        seq_lengths: Array | None = None,
        return_carry: bool | None = None,
        time_major: bool | None = None,
        reverse: bool | None = None,
        keep_order: bool | None = None,
    ) -> Output | tuple[Carry, Output]:
        """Run the cell over ``inputs``; keyword arguments override the attributes."""

        def scan(carry: Any, xs: Any, time_axis: int, stack_carries: bool) -> tuple[Any, Any]:
            def step(cell: RNNCellBase, carry: Any, x: Any) -> Any:
                carry, y = cell(carry, x)
                return (carry, (carry, y)) if stack_carries else (carry, y)

            scanned = transforms.scan(
                step,
                in_axes=time_axis,
                out_axes=(0, time_axis) if stack_carries else time_axis,
                unroll=self.unroll,
                variable_axes=self.variable_axes,
                variable_broadcast=self.variable_broadcast,
                variable_carry=self.variable_carry,
                split_rngs=self.split_rngs,
            )
            final, ys = scanned(self.cell, carry, xs)
            return ys if stack_carries else (final, ys)

        return F.rnn(
            scan,
            inputs,
            num_feature_axes=self.cell.num_feature_axes,
            initial_carry=initial_carry,
            init_carry=lambda shape: self.cell.initialize_carry(
                random.key(0) if init_key is None else init_key, shape
            ),
            seq_lengths=seq_lengths,
            time_major=self.time_major if time_major is None else time_major,
            reverse=self.reverse if reverse is None else reverse,
            keep_order=self.keep_order if keep_order is None else keep_order,
            return_carry=self.return_carry if return_carry is None else return_carry,
        )


def _concatenate(a: Array, b: Array) -> Array:
    return jnp.concatenate([a, b], axis=-1)


class RNNBase(Protocol):
    """What ``Bidirectional`` calls: ``RNN``'s ``__call__`` signature."""

    def __call__(
        self,
        inputs: Array,
        *,
        initial_carry: Carry | None = None,
        init_key: PRNGKey | None = None,
        seq_lengths: Array | None = None,
        return_carry: bool | None = None,
        time_major: bool | None = None,
        reverse: bool | None = None,
        keep_order: bool | None = None,
    ) -> Output | tuple[Carry, Output]: ...


class Bidirectional(Module):
    """Runs ``forward_rnn`` in order and ``backward_rnn`` reversed (outputs re-aligned)
    and merges their outputs with ``merge_fn`` (default: concatenation on the last
    axis). The carry is the pair of both final carries."""

    forward_rnn: RNNBase
    backward_rnn: RNNBase
    merge_fn: Callable[[Array, Array], Array] = _concatenate
    time_major: bool = False
    return_carry: bool = False

    def __call__(
        self,
        inputs: Array,
        *,
        initial_carry: Carry | None = None,
        init_key: PRNGKey | None = None,
        seq_lengths: Array | None = None,
        return_carry: bool | None = None,
        time_major: bool | None = None,
        reverse: bool | None = None,
        keep_order: bool | None = None,
    ) -> Output | tuple[Carry, Output]:
        """Run both directions; ``reverse`` and ``keep_order`` are ignored."""
        if self.forward_rnn is self.backward_rnn:
            _logger.warning(
                "forward_rnn and backward_rnn is the same object, so they will share parameters."
            )
        return F.bidirectional(
            self.forward_rnn,
            self.backward_rnn,
            inputs,
            merge_fn=self.merge_fn,
            initial_carry=initial_carry,
            key=init_key,
            seq_lengths=seq_lengths,
            time_major=self.time_major if time_major is None else time_major,
            return_carry=self.return_carry if return_carry is None else return_carry,
            key_name="init_key",
        )
