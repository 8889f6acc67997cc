"""The recurrent cells of ``adapters.linen.recurrent`` (``flax.linen.recurrent``):
``RNNCellBase`` and ``LSTMCell``, ``OptimizedLSTMCell``, ``GRUCell``, ``MGUCell``,
``SimpleCell``, ``ConvLSTMCell``, with the helpers they share.

Each cell creates its projections as ``Dense``/``Conv`` submodules named as Flax's and
passes them to the step function of ``pytreemod.nn.functional`` (``lstm_cell``,
``gru_cell``...), which the ``pytreemod.nn`` cells call too. Import them from
``adapters.linen.recurrent`` (or ``adapters.linen``), which re-exports every name here.
"""

from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp
from jax import random

from pytreemod.nn import functional as F

from . import initializers
from .activation import sigmoid, tanh
from .linear import Conv, Dense, default_kernel_init
from .module import Module, compact, nowrap

__all__ = [
    "ConvLSTMCell",
    "DenseParams",
    "GRUCell",
    "LSTMCell",
    "MGUCell",
    "OptimizedLSTMCell",
    "RNNCellBase",
    "SimpleCell",
]

Array = jax.Array
PRNGKey = jax.Array
Dtype = Any
Initializer = Callable[..., Any]
Carry = Any
Output = Any


class RNNCellBase(Module):
    """The base class of the recurrent cells, and the interface ``RNN`` relies on.

    A cell is called once per time step as ``cell(carry, inputs) -> (new_carry, output)``
    and provides ``initialize_carry(rng, input_shape)``, the state before the first step,
    and ``num_feature_axes``, the number of trailing input axes that are features.
    Subclass it for a custom cell to run in ``RNN``. It has no fields of its own.
    """

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
    """A long short-term memory cell: carry ``(c, h)``, output ``h``.

    Input, forget and output gates ``i``, ``f``, ``o`` and a candidate ``g`` are computed
    from the input and ``h``; then ``c' = f * c + i * g`` and ``h' = o * activation_fn(c')``.
    Each gate has a ``Dense`` child for the input (``ii``, ``if``, ``ig``, ``io``: kernel
    ``(in_features, features)``, no bias) and one for the hidden state (``hi``, ``hf``,
    ``hg``, ``ho``: kernel ``(features, features)`` and bias). Apply it over a sequence
    with ``RNN``.

    >>> import jax, jax.numpy as jnp
    >>> from adapters import linen as nn
    >>> cell = nn.LSTMCell(features=4)
    >>> x = jnp.ones((2, 3))  # one time step: (batch, in_features)
    >>> carry = cell.initialize_carry(jax.random.key(0), x.shape)
    >>> variables = cell.init(jax.random.key(1), carry, x)
    >>> (c, h), y = cell.apply(variables, carry, x)
    >>> c.shape, y.shape
    ((2, 4), (2, 4))

    Attributes:
        features: the size of the hidden state and of the output.
        gate_fn: the nonlinearity of the gates (default ``sigmoid``).
        activation_fn: the nonlinearity of the candidate and of the cell state (default
            ``tanh``).
        kernel_init: initializer of the input kernels (default ``lecun_normal()``).
        recurrent_kernel_init: initializer of the hidden kernels (default
            ``orthogonal()``).
        bias_init: initializer of the biases (default zeros).
        dtype: the dtype of the computation (default ``None``: promoted from the inputs,
            carry and parameters).
        param_dtype: the dtype the parameters are created in (default ``float32``).
        carry_init: initializer of the carry made by ``initialize_carry`` (default
            zeros).
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
        """One time step.

        Args:
            carry: the state ``(c, h)``, each ``(*batch, features)``, from
                ``initialize_carry`` or the previous step.
            inputs: the step's input ``(*batch, in_features)``.

        Returns:
            ``(new_carry, output)``: ``((c', h'), h')``.
        """
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
    """An LSTM cell that computes its four gates with one matrix product per source.

    The same function, parameters (names, shapes) and defaults as ``LSTMCell``, so the
    two are interchangeable; the four input kernels and the four hidden kernels are each
    concatenated for a single product, which is faster on accelerators.

    Attributes:
        features: the size of the hidden state and of the output.
        gate_fn: the nonlinearity of the gates (default ``sigmoid``).
        activation_fn: the nonlinearity of the candidate and of the cell state (default
            ``tanh``).
        kernel_init: initializer of the input kernels (default ``lecun_normal()``).
        recurrent_kernel_init: initializer of the hidden kernels (default
            ``orthogonal()``).
        bias_init: initializer of the biases (default zeros).
        dtype: the dtype of the computation (default ``None``: promoted from the inputs,
            carry and parameters).
        param_dtype: the dtype the parameters are created in (default ``float32``).
        carry_init: initializer of the carry made by ``initialize_carry`` (default
            zeros).
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
        """One time step.

        Args:
            carry: the state ``(c, h)``, each ``(*batch, features)``, from
                ``initialize_carry`` or the previous step.
            inputs: the step's input ``(*batch, in_features)``.

        Returns:
            ``((c', h'), h')``.
        """
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
    """A simple (Elman) recurrent cell: ``h' = activation_fn(i(x) + h(h))``.

    The carry and the output are both ``h'``. ``i`` is a ``Dense`` child with kernel
    ``(in_features, features)`` and bias, ``h`` one with kernel ``(features, features)``
    and no bias.

    Attributes:
        features: the size of the hidden state and of the output.
        activation_fn: the nonlinearity (default ``tanh``).
        kernel_init: initializer of the input kernel (default ``lecun_normal()``).
        recurrent_kernel_init: initializer of the hidden kernel (default
            ``orthogonal()``).
        bias_init: initializer of the input bias (default zeros).
        dtype: the dtype of the computation (default ``None``: promoted from the inputs,
            carry and parameters).
        param_dtype: the dtype the parameters are created in (default ``float32``).
        carry_init: initializer of the carry made by ``initialize_carry`` (default
            zeros).
        residual: add the previous ``h`` inside the activation, ``activation_fn(i(x) +
            h(h) + h)`` (default ``False``).
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
        """One time step.

        Args:
            carry: the state ``h`` ``(*batch, features)``, from ``initialize_carry``
                or the previous step.
            inputs: the step's input ``(*batch, in_features)``.

        Returns:
            ``(new_carry, output)``: ``(h', h')``.
        """
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
    """A gated recurrent unit cell; the carry and the output are the new ``h``.

    A reset gate ``r`` and an update gate ``z`` are computed from the input and ``h``;
    the candidate is ``n = activation_fn(in(x) + r * hn(h))`` and
    ``h' = (1 - z) * n + z * h``. Children: ``ir``, ``iz``, ``in`` (kernel
    ``(in_features, features)`` and bias), ``hr``, ``hz`` (kernel ``(features,
    features)``) and ``hn`` (kernel and bias).

    >>> import jax, jax.numpy as jnp
    >>> from adapters import linen as nn
    >>> layer = nn.RNN(nn.GRUCell(features=5))
    >>> xs = jnp.ones((2, 7, 3))  # (batch, time, in_features)
    >>> variables = layer.init(jax.random.key(0), xs)
    >>> layer.apply(variables, xs).shape
    (2, 7, 5)

    Attributes:
        features: the size of the hidden state and of the output.
        gate_fn: the nonlinearity of the gates (default ``sigmoid``).
        activation_fn: the nonlinearity of the candidate state (default ``tanh``).
        kernel_init: initializer of the input kernels (default ``lecun_normal()``).
        recurrent_kernel_init: initializer of the hidden kernels (default
            ``orthogonal()``).
        bias_init: initializer of the biases (default zeros).
        dtype: the dtype of the computation (default ``None``: promoted from the inputs,
            carry and parameters).
        param_dtype: the dtype the parameters are created in (default ``float32``).
        carry_init: initializer of the carry made by ``initialize_carry`` (default
            zeros).
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
        """One time step.

        Args:
            carry: the state ``h`` ``(*batch, features)``, from ``initialize_carry``
                or the previous step.
            inputs: the step's input ``(*batch, in_features)``.

        Returns:
            ``(new_carry, output)``: ``(h', h')``.
        """
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
    """A minimal gated unit: a GRU with a single (forget) gate; carry and output ``h``.

    ``f = gate_fn(if(x) + hf(h))``, ``n = activation_fn(in(x) + f * hn(h))`` and
    ``h' = (1 - f) * n + f * h``. Children: ``if`` and ``in`` (kernel ``(in_features,
    features)`` and bias), ``hf`` (kernel ``(features, features)``) and ``hn`` (kernel,
    and a bias when ``reset_gate``).

    Attributes:
        features: the size of the hidden state and of the output.
        gate_fn: the nonlinearity of the forget gate (default ``sigmoid``).
        activation_fn: the nonlinearity of the candidate state (default ``tanh``).
        kernel_init: initializer of the input kernels (default ``lecun_normal()``).
        recurrent_kernel_init: initializer of the hidden kernels (default
            ``orthogonal()``).
        forget_bias_init: initializer of the forget gate's bias (default ones, so the
            cell starts out keeping its state).
        activation_bias_init: initializer of the candidate's biases (default zeros).
        dtype: the dtype of the computation (default ``None``: promoted from the inputs,
            carry and parameters).
        param_dtype: the dtype the parameters are created in (default ``float32``).
        carry_init: initializer of the carry made by ``initialize_carry`` (default
            zeros).
        reset_gate: multiply the hidden contribution to the candidate by ``f`` (default
            ``True``); ``False`` uses ``in(x) + hn(h)`` and gives ``hn`` no bias.
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
        """One time step.

        Args:
            carry: the state ``h`` ``(*batch, features)``, from ``initialize_carry``
                or the previous step.
            inputs: the step's input ``(*batch, in_features)``.

        Returns:
            ``(new_carry, output)``: ``(h', h')``.
        """
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
    """A convolutional LSTM cell: an LSTM whose projections are convolutions.

    Inputs are images (or other grids) ``(*batch, *spatial, in_features)`` and the carry
    ``(c, h)`` has shape ``(*batch, *spatial, features)`` each, so the state keeps its
    spatial layout. Two ``Conv`` children, ``ih`` for the input and ``hh`` for ``h``, each
    produce ``4 * features`` channels split into the four gates (with ``Conv``'s default
    initializers); the forget gate gets ``+1`` before its sigmoid.

    >>> import jax, jax.numpy as jnp
    >>> from adapters import linen as nn
    >>> cell = nn.ConvLSTMCell(features=6, kernel_size=(3, 3))
    >>> x = jnp.ones((2, 8, 8, 3))  # one time step: (batch, height, width, channels)
    >>> carry = cell.initialize_carry(jax.random.key(0), x.shape)
    >>> variables = cell.init(jax.random.key(1), carry, x)
    >>> variables["params"]["ih"]["kernel"].shape
    (3, 3, 3, 24)

    Attributes:
        features: the number of channels of the state and of the output.
        kernel_size: the convolution window, one int per spatial axis.
        strides: the convolution strides (default ``None``: 1); the state's spatial
            shape must match the input's, so strides other than 1 rarely fit.
        padding: the convolution padding, as for ``Conv`` (default ``'SAME'``).
        use_bias: whether the convolutions have biases (default ``True``).
        dtype: the dtype of the computation (default ``None``: promoted).
        param_dtype: the dtype the parameters are created in (default ``float32``).
        carry_init: initializer of the carry made by ``initialize_carry`` (default
            zeros).
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
        """One time step.

        Args:
            carry: the state ``(c, h)``, each ``(*batch, *spatial, features)``.
            inputs: the step's input ``(*batch, *spatial, in_features)``.

        Returns:
            ``((c', h'), h')``.
        """

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
