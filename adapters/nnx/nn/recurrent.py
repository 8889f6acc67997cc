"""Recurrent layers (``flax.nnx.nn.recurrent``): the cells ``LSTMCell``,
``OptimizedLSTMCell``, ``SimpleCell`` and ``GRUCell``, ``RNN`` that runs a cell over a
sequence, and ``Bidirectional``.

A cell's step is ``pytreemod.nn.functional``'s (``lstm_cell``, ``gru_cell``,
``simple_cell``), given the cell's ``Linear`` children as its projections; ``RNN`` drives
``functional.rnn`` (time axis, ``reverse``, ``keep_order``, ``seq_lengths``) with a
``jax.lax.scan`` over the cell's split state: the state selected as ``Carry`` by
``state_axes`` (all of it by default) is carried from step to step, state given axis
``None`` and the RNG streams of ``broadcast_rngs`` are the same at every step.
"""

import warnings
from collections.abc import Callable, Mapping
from functools import partial
from types import MappingProxyType
from typing import Any, Protocol, TypeVar

import jax
import jax.numpy as jnp
from absl import logging

from pytreemod.nn import functional as F

from .. import filterlib
from ..graphlib import merge, split, update
from ..module import Module
from ..pytreelib import data
from ..rnglib import Rngs, RngState, RngStream, split_rngs
from ..transforms.iteration import Carry as _CarryAxis
from ..transforms.iteration import StateAxes
from . import initializers
from .activations import sigmoid, tanh
from .dtypes import promote_dtype
from .linear import Linear

A = TypeVar("A")
Array = jax.Array
Carry = Any
Output = Any
Dtype = Any
Shape = tuple[int, ...]
Initializer = Callable[..., Any]
PromoteDtypeFn = Callable[..., Any]

__all__ = [
    "RNN",
    "Bidirectional",
    "GRUCell",
    "LSTMCell",
    "OptimizedLSTMCell",
    "RNNCellBase",
    "SimpleCell",
    "flip_sequences",
]

_NO_METADATA: Mapping[str, Any] = MappingProxyType({})
_ZEROS: Any = initializers.zeros_init()
_ORTHOGONAL: Any = initializers.orthogonal()
_LECUN_NORMAL: Any = initializers.lecun_normal()
default_kernel_init: Initializer = _LECUN_NORMAL
default_bias_init: Initializer = _ZEROS
_CARRY_INIT_WARNING = (
    "carry_init is provided in __init__. Please, use carry_init argument in "
    "`initialize_carry` method instead to initialize the carry. Otherwise, two instances "
    "with same configuration but different carry_init functions will have different "
    "graphdefs."
)


class RNNCellBase(Module):
    """The base of recurrent cells: ``cell(carry, inputs) -> (new_carry, output)``,
    ``cell.initialize_carry(input_shape, rngs)`` and ``cell.num_feature_axes``."""

    def initialize_carry(
        self,
        input_shape: tuple[int, ...],
        rngs: Rngs | RngStream | None = None,
        carry_init: Initializer | None = None,
    ) -> Carry:
        """The initial carry for inputs of ``input_shape`` (``(*batch, features)``)."""
        raise NotImplementedError

    def __call__(self, carry: Carry, inputs: Array) -> tuple[Carry, Array]:
        """One step: the new carry and the output."""
        raise NotImplementedError

    @property
    def num_feature_axes(self) -> int:
        """The number of trailing feature axes of the inputs (1 for these cells)."""
        raise NotImplementedError


def modified_orthogonal(key: Array, shape: Shape, dtype: Dtype = jnp.float32) -> Array:
    """The orthogonal initializer drawn in float32 and cast to ``dtype`` (so that half
    precision works)."""
    return _ORTHOGONAL(key, shape).astype(dtype)


def _cell_setup(
    cell: Any,
    in_features: int,
    hidden_features: int,
    dtype: Dtype | None,
    param_dtype: Dtype,
    promote_dtype: PromoteDtypeFn,
    keep_rngs: bool,
    rngs: Rngs,
    carry_init: Initializer | None,
) -> None:
    """The attributes every cell sets (Flax's names)."""
    cell.in_features = in_features
    cell.hidden_features = hidden_features
    cell.dtype = dtype
    cell.param_dtype = param_dtype
    cell.promote_dtype = promote_dtype
    if not keep_rngs:
        cell.rngs = data(None)
    else:
        warnings.warn(
            "keep_rngs argument is deprecated. Please use rngs argument in __call__ instead ",
            stacklevel=3,
        )
        cell.rngs = rngs.carry.fork()
    if carry_init:
        warnings.warn(_CARRY_INIT_WARNING, stacklevel=3)
    cell.carry_init = carry_init


def _carry_parts(
    cell: Any,
    input_shape: tuple[int, ...],
    rngs: Rngs | RngStream | None,
    carry_init: Initializer | None,
    parts: int,
) -> list[Array]:
    """``parts`` arrays ``(*batch, hidden_features)`` from ``carry_init`` (the call's, else
    the cell's, else zeros), each with a fresh key of the ``carry`` stream."""
    if rngs is None:
        rngs = cell.rngs
    if isinstance(rngs, Rngs):
        rngs = rngs.carry
    if rngs is None:
        raise ValueError("RNGs must be provided to initialize the cell carry.")
    init = carry_init or cell.carry_init or _ZEROS
    shape = (*input_shape[:-1], cell.hidden_features)
    return [init(rngs(), shape, cell.param_dtype) for _ in range(parts)]


def _fused_projections(
    dense_i: Linear, dense_h: Linear, names: tuple[str, ...]
) -> Callable[[str, Array], Array]:
    """A ``project`` for ``functional``'s cells from two fused ``Linear`` layers: the
    gate ``names[k]`` reads part ``k`` of ``dense_i(x)`` (names ``i*``) or ``dense_h(h)``
    (names ``h*``); each layer runs once per step."""
    done: dict[str, list[Array]] = {}

    def project(name: str, x: Array) -> Array:
        side = name[0]
        if side not in done:
            layer = dense_i if side == "i" else dense_h
            done[side] = jnp.split(layer(x), len(names), axis=-1)
        return done[side][names.index(name[1:])]

    return project


class LSTMCell(RNNCellBase):
    """LSTM cell: eight ``Linear`` children, ``ii, if_, ig, io`` (input to gate, no bias)
    and ``hi, hf, hg, ho`` (hidden to gate, with bias); the carry is ``(c, h)``.

    ``i, f, o = gate_fn(W_i. x + W_h. h + b)``, ``g = activation_fn(...)``,
    ``c' = f * c + i * g``, ``h' = o * activation_fn(c')``; the output is ``h'``.

    >>> import jax.numpy as jnp
    >>> from adapters import nnx
    >>> cell = nnx.LSTMCell(3, 4, rngs=nnx.Rngs(0))
    >>> carry = cell.initialize_carry((2, 3), nnx.Rngs(1))
    >>> (c, h), y = cell(carry, jnp.ones((2, 3)))
    >>> y.shape
    (2, 4)
    """

    def __init__(
        self,
        in_features: int,
        hidden_features: int,
        *,
        gate_fn: Callable[..., Any] = sigmoid,
        activation_fn: Callable[..., Any] = tanh,
        kernel_init: Initializer = default_kernel_init,
        recurrent_kernel_init: Initializer = modified_orthogonal,
        bias_init: Initializer = _ZEROS,
        dtype: Dtype | None = None,
        param_dtype: Dtype = jnp.float32,
        carry_init: Initializer | None = None,
        promote_dtype: PromoteDtypeFn = promote_dtype,
        keep_rngs: bool = False,
        rngs: Rngs,
        kernel_metadata: Mapping[str, Any] = _NO_METADATA,
        recurrent_kernel_metadata: Mapping[str, Any] = _NO_METADATA,
        bias_metadata: Mapping[str, Any] = _NO_METADATA,
    ) -> None:
        self.in_features = in_features
        self.hidden_features = hidden_features
        self.gate_fn = gate_fn
        self.activation_fn = activation_fn
        _cell_setup(
            self, in_features, hidden_features, dtype, param_dtype, promote_dtype,
            keep_rngs, rngs, carry_init,
        )  # fmt: skip
        common = dict(dtype=dtype, param_dtype=param_dtype, promote_dtype=promote_dtype)
        dense_i = partial(
            Linear, in_features, hidden_features, use_bias=False, kernel_init=kernel_init,
            rngs=rngs, kernel_metadata=kernel_metadata, **common,
        )  # fmt: skip
        dense_h = partial(
            Linear, hidden_features, hidden_features, use_bias=True,
            kernel_init=recurrent_kernel_init, bias_init=bias_init, rngs=rngs,
            kernel_metadata=recurrent_kernel_metadata, bias_metadata=bias_metadata, **common,
        )  # fmt: skip
        self.ii, self.if_, self.ig, self.io = dense_i(), dense_i(), dense_i(), dense_i()
        self.hi, self.hf, self.hg, self.ho = dense_h(), dense_h(), dense_h(), dense_h()

    def __call__(  # type: ignore[override]
        self, carry: tuple[Array, Array], inputs: Array
    ) -> tuple[tuple[Array, Array], Array]:
        """One LSTM step on ``inputs`` (``(*batch, in_features)``)."""
        layers = {"if": self.if_}

        def project(name: str, x: Array) -> Array:
            return (layers.get(name) or getattr(self, name))(x)

        return F.lstm_cell(
            carry, inputs, project, gate_fn=self.gate_fn, activation_fn=self.activation_fn
        )

    def initialize_carry(  # type: ignore[override]
        self,
        input_shape: tuple[int, ...],
        rngs: Rngs | RngStream | None = None,
        carry_init: Initializer | None = None,
    ) -> tuple[Array, Array]:
        """``(c, h)``, each ``(*batch, hidden_features)`` (zeros by default)."""
        c, h = _carry_parts(self, input_shape, rngs, carry_init, 2)
        return c, h

    @property
    def num_feature_axes(self) -> int:
        return 1


def _fused_pair(
    in_features: int,
    hidden_features: int,
    parts: int,
    input_bias: bool,
    kernel_init: Initializer,
    recurrent_kernel_init: Initializer,
    bias_init: Initializer,
    common: dict[str, Any],
    metadata: tuple[Mapping[str, Any], Mapping[str, Any], Mapping[str, Any]],
) -> tuple[Linear, Linear]:
    """``dense_i`` (inputs) then ``dense_h`` (hidden state), each to ``parts *
    hidden_features``; the bias (and its metadata) on ``dense_i`` if ``input_bias``, else
    on ``dense_h``."""
    kernel_meta, recurrent_meta, bias_meta = metadata
    dense_i = Linear(
        in_features, parts * hidden_features, use_bias=input_bias, kernel_init=kernel_init,
        bias_init=bias_init, kernel_metadata=kernel_meta,
        bias_metadata=bias_meta if input_bias else _NO_METADATA, **common,
    )  # fmt: skip
    dense_h = Linear(
        hidden_features, parts * hidden_features, use_bias=not input_bias,
        kernel_init=recurrent_kernel_init, bias_init=bias_init,
        kernel_metadata=recurrent_meta,
        bias_metadata=_NO_METADATA if input_bias else bias_meta, **common,
    )  # fmt: skip
    return dense_i, dense_h


class OptimizedLSTMCell(RNNCellBase):
    """``LSTMCell`` with the gates' kernels fused: ``dense_i`` (``(in, 4 * hidden)``, no
    bias) and ``dense_h`` (``(hidden, 4 * hidden)``, with bias), gates in the order
    ``i, f, g, o``: two matrix products per step instead of eight.

    >>> import jax.numpy as jnp
    >>> from adapters import nnx
    >>> cell = nnx.OptimizedLSTMCell(3, 4, rngs=nnx.Rngs(0))
    >>> cell.dense_h.kernel.shape
    (4, 16)
    """

    def __init__(
        self,
        in_features: int,
        hidden_features: int,
        *,
        gate_fn: Callable[..., Any] = sigmoid,
        activation_fn: Callable[..., Any] = tanh,
        kernel_init: Initializer = default_kernel_init,
        recurrent_kernel_init: Initializer = _ORTHOGONAL,
        bias_init: Initializer = _ZEROS,
        dtype: Dtype | None = None,
        param_dtype: Dtype = jnp.float32,
        carry_init: Initializer | None = None,
        promote_dtype: PromoteDtypeFn = promote_dtype,
        keep_rngs: bool = False,
        rngs: Rngs,
        kernel_metadata: Mapping[str, Any] = _NO_METADATA,
        recurrent_kernel_metadata: Mapping[str, Any] = _NO_METADATA,
        bias_metadata: Mapping[str, Any] = _NO_METADATA,
    ) -> None:
        self.gate_fn = gate_fn
        self.activation_fn = activation_fn
        _cell_setup(
            self, in_features, hidden_features, dtype, param_dtype, promote_dtype,
            keep_rngs, rngs, carry_init,
        )  # fmt: skip
        common = dict(dtype=dtype, param_dtype=param_dtype, promote_dtype=promote_dtype, rngs=rngs)
        self.dense_i, self.dense_h = _fused_pair(
            in_features, hidden_features, 4, False, kernel_init, recurrent_kernel_init,
            bias_init, common, (kernel_metadata, recurrent_kernel_metadata, bias_metadata),
        )  # fmt: skip

    def __call__(  # type: ignore[override]
        self, carry: tuple[Array, Array], inputs: Array
    ) -> tuple[tuple[Array, Array], Array]:
        """One LSTM step on ``inputs`` (``(*batch, in_features)``)."""
        project = _fused_projections(self.dense_i, self.dense_h, ("i", "f", "g", "o"))
        return F.lstm_cell(
            carry, inputs, project, gate_fn=self.gate_fn, activation_fn=self.activation_fn
        )

    def initialize_carry(  # type: ignore[override]
        self,
        input_shape: tuple[int, ...],
        rngs: Rngs | RngStream | None = None,
        carry_init: Initializer | None = None,
    ) -> tuple[Array, Array]:
        """``(c, h)``, each ``(*batch, hidden_features)`` (zeros by default)."""
        c, h = _carry_parts(self, input_shape, rngs, carry_init, 2)
        return c, h

    @property
    def num_feature_axes(self) -> int:
        return 1


class SimpleCell(RNNCellBase):
    """Elman cell: ``h' = activation_fn(dense_i(x) + dense_h(h))`` (``+ h`` inside with
    ``residual``); ``dense_i`` has the bias, and the output is ``h'``.

    >>> import jax.numpy as jnp
    >>> from adapters import nnx
    >>> cell = nnx.SimpleCell(3, 4, rngs=nnx.Rngs(0))
    >>> h, y = cell(cell.initialize_carry((2, 3), nnx.Rngs(1)), jnp.ones((2, 3)))
    >>> y.shape
    (2, 4)
    """

    def __init__(
        self,
        in_features: int,
        hidden_features: int,
        *,
        dtype: Dtype = jnp.float32,
        param_dtype: Dtype = jnp.float32,
        carry_init: Initializer | None = None,
        residual: bool = False,
        activation_fn: Callable[..., Any] = tanh,
        kernel_init: Initializer = _LECUN_NORMAL,
        recurrent_kernel_init: Initializer = _ORTHOGONAL,
        bias_init: Initializer = _ZEROS,
        promote_dtype: PromoteDtypeFn = promote_dtype,
        keep_rngs: bool = False,
        rngs: Rngs,
        kernel_metadata: Mapping[str, Any] = _NO_METADATA,
        recurrent_kernel_metadata: Mapping[str, Any] = _NO_METADATA,
        bias_metadata: Mapping[str, Any] = _NO_METADATA,
    ) -> None:
        self.residual = residual
        self.activation_fn = activation_fn
        _cell_setup(
            self, in_features, hidden_features, dtype, param_dtype, promote_dtype,
            keep_rngs, rngs, carry_init,
        )  # fmt: skip
        common = dict(dtype=dtype, param_dtype=param_dtype, promote_dtype=promote_dtype, rngs=rngs)
        # Flax creates dense_h first: its kernel takes the first key.
        self.dense_h = Linear(
            hidden_features, hidden_features, use_bias=False,
            kernel_init=recurrent_kernel_init, kernel_metadata=recurrent_kernel_metadata,
            **common,
        )  # fmt: skip
        self.dense_i = Linear(
            in_features, hidden_features, use_bias=True, kernel_init=kernel_init,
            bias_init=bias_init, kernel_metadata=kernel_metadata,
            bias_metadata=bias_metadata, **common,
        )  # fmt: skip

    def __call__(self, carry: Array, inputs: Array) -> tuple[Array, Array]:  # type: ignore[override]
        """One step on ``inputs`` (``(*batch, in_features)``)."""
        layers = {"i": self.dense_i, "h": self.dense_h}
        return F.simple_cell(
            carry,
            inputs,
            lambda name, x: layers[name](x),
            activation_fn=self.activation_fn,
            residual=self.residual,
        )

    def initialize_carry(  # type: ignore[override]
        self,
        input_shape: tuple[int, ...],
        rngs: Rngs | RngStream | None = None,
        carry_init: Initializer | None = None,
    ) -> Array:
        """``h``, ``(*batch, hidden_features)`` (zeros by default)."""
        return _carry_parts(self, input_shape, rngs, carry_init, 1)[0]

    @property
    def num_feature_axes(self) -> int:
        return 1


class GRUCell(RNNCellBase):
    """GRU cell with fused kernels: ``dense_i`` (``(in, 3 * hidden)``, with bias) and
    ``dense_h`` (``(hidden, 3 * hidden)``, no bias), parts in the order ``r, z, n``.

    ``r = gate_fn(x_r + h_r)``, ``z = gate_fn(x_z + h_z)``,
    ``n = activation_fn(x_n + r * h_n)``, ``h' = (1 - z) * n + z * h``; the output is ``h'``.

    >>> import jax.numpy as jnp
    >>> from adapters import nnx
    >>> cell = nnx.GRUCell(3, 4, rngs=nnx.Rngs(0))
    >>> cell.dense_i.kernel.shape
    (3, 12)
    """

    def __init__(
        self,
        in_features: int,
        hidden_features: int,
        *,
        gate_fn: Callable[..., Any] = sigmoid,
        activation_fn: Callable[..., Any] = tanh,
        kernel_init: Initializer = default_kernel_init,
        recurrent_kernel_init: Initializer = _ORTHOGONAL,
        bias_init: Initializer = _ZEROS,
        dtype: Dtype | None = None,
        param_dtype: Dtype = jnp.float32,
        carry_init: Initializer | None = None,
        promote_dtype: PromoteDtypeFn = promote_dtype,
        keep_rngs: bool = False,
        rngs: Rngs,
        kernel_metadata: Mapping[str, Any] = _NO_METADATA,
        recurrent_kernel_metadata: Mapping[str, Any] = _NO_METADATA,
        bias_metadata: Mapping[str, Any] = _NO_METADATA,
    ) -> None:
        self.gate_fn = gate_fn
        self.activation_fn = activation_fn
        _cell_setup(
            self, in_features, hidden_features, dtype, param_dtype, promote_dtype,
            keep_rngs, rngs, carry_init,
        )  # fmt: skip
        common = dict(dtype=dtype, param_dtype=param_dtype, promote_dtype=promote_dtype, rngs=rngs)
        self.dense_i, self.dense_h = _fused_pair(
            in_features, hidden_features, 3, True, kernel_init, recurrent_kernel_init,
            bias_init, common, (kernel_metadata, recurrent_kernel_metadata, bias_metadata),
        )  # fmt: skip

    def __call__(self, carry: Array, inputs: Array) -> tuple[Array, Array]:  # type: ignore[override]
        """One GRU step on ``inputs`` (``(*batch, in_features)``)."""
        project = _fused_projections(self.dense_i, self.dense_h, ("r", "z", "n"))
        return F.gru_cell(
            carry, inputs, project, gate_fn=self.gate_fn, activation_fn=self.activation_fn
        )

    def initialize_carry(  # type: ignore[override]
        self,
        input_shape: tuple[int, ...],
        rngs: Rngs | RngStream | None = None,
        carry_init: Initializer | None = None,
    ) -> Array:
        """``h``, ``(*batch, hidden_features)`` (zeros by default)."""
        return _carry_parts(self, input_shape, rngs, carry_init, 1)[0]

    @property
    def num_feature_axes(self) -> int:
        return 1


def flip_sequences(
    inputs: Array, seq_lengths: Array | None, num_batch_dims: int, time_major: bool
) -> Array:
    """Reverse each sequence along the time axis (``0`` if ``time_major``, else
    ``num_batch_dims``), keeping the padding after a sequence's ``seq_lengths`` at the end.

    >>> import jax.numpy as jnp
    >>> from adapters.nnx.nn.recurrent import flip_sequences
    >>> flip_sequences(jnp.array([[1, 2, 0], [3, 4, 5]]), jnp.array([2, 3]), 1, False).tolist()
    [[2, 1, 0], [5, 4, 3]]
    """
    return F.flip_sequences(inputs, seq_lengths, num_batch_dims, time_major)


def _axis_groups(state_axes: Mapping[Any, Any], broadcast_rngs: Any) -> tuple[list[Any], list[Any]]:
    """The filters splitting the cell's state, and each group's axis: first the
    ``broadcast_rngs`` streams (broadcast), then ``state_axes`` in order."""
    filters = [filterlib.All(RngState, broadcast_rngs)]
    axes: list[Any] = [None]
    for f, axis in state_axes.items():
        filters.append(f)
        axes.append(axis)
    return filters, axes


def _scan_cell(
    rnn: "RNN", cell: Any, carry: Any, xs: Any, time_axis: int, stack_carries: bool
) -> tuple[Any, Any]:
    """``functional.rnn``'s scan: ``cell`` (the RNN's, its broadcast streams split)
    applied along ``time_axis`` of ``xs`` by a ``jax.lax.scan`` over the cell's split
    state (see the module docstring)."""
    filters, axes = _axis_groups(rnn.state_axes, rnn.broadcast_rngs)
    graphdef, *states = split(cell, *filters)
    carried = [i for i, a in enumerate(axes) if a is _CarryAxis]
    scanned = [i for i, a in enumerate(axes) if isinstance(a, int)]

    def step(loop_carry: Any, x: Any) -> tuple[Any, Any]:
        cell_states, cell_carry = loop_carry
        xs_states, x = x
        # Broadcast state: new Variables of this trace holding the outer values (a
        # change made to them by a step stays in that step).
        parts = [jax.tree.map(lambda v: v, s) for s in states]
        for i, s in zip(carried, cell_states, strict=True):
            parts[i] = s
        for i, s in zip(scanned, xs_states, strict=True):
            parts[i] = s
        cell = merge(graphdef, *parts)
        cell_carry, y = cell(cell_carry, x)
        _, *new = split(cell, *filters)
        out = (cell_carry, y) if stack_carries else y
        return ([new[i] for i in carried], cell_carry), ([new[i] for i in scanned], out)

    def to_front(axis: int) -> Callable[[Any], Any]:
        return lambda tree: jax.tree.map(lambda a: jnp.moveaxis(a, axis, 0), tree)

    xs_states = [to_front(axes[i])(states[i]) for i in scanned]
    (final_states, final_carry), (ys_states, ys) = jax.lax.scan(
        step,
        ([states[i] for i in carried], carry),
        (xs_states, jnp.moveaxis(xs, time_axis, 0)),
        unroll=rnn.unroll,
    )
    ys_states = [
        jax.tree.map(lambda a, axis=axes[i]: jnp.moveaxis(a, 0, axis), s)
        for i, s in zip(scanned, ys_states, strict=True)
    ]
    update(cell, *final_states, *ys_states)
    if stack_carries:
        carries, ys = ys
        return carries, jnp.moveaxis(ys, 0, time_axis)
    return final_carry, jnp.moveaxis(ys, 0, time_axis)


class RNN(Module):
    """Runs ``cell`` over the time axis of a sequence: ``(*batch, time, *features)``, or
    ``(time, *batch, *features)`` with ``time_major``.

    The carry starts from ``initial_carry`` or ``cell.initialize_carry`` (keys from the
    ``carry`` stream of the call's ``rngs`` or of the ``rngs`` kept here). ``reverse``
    runs from the end (``keep_order`` puts the outputs back in input order);
    ``seq_lengths`` keeps padding out of a reversed run and, with ``return_carry``,
    returns each sequence's carry after its last valid step. ``state_axes`` maps filters
    of the cell's state to ``nnx.Carry`` (the default for all of it) or ``None``
    (broadcast); the RNG streams of ``broadcast_rngs`` give the same keys at every step.

    >>> import jax.numpy as jnp
    >>> from adapters import nnx
    >>> rnn = nnx.RNN(nnx.GRUCell(3, 4, rngs=nnx.Rngs(0)))
    >>> rnn(jnp.ones((2, 5, 3))).shape
    (2, 5, 4)
    """

    state_axes: Mapping[Any, Any]

    def __init__(
        self,
        cell: RNNCellBase,
        *,
        time_major: bool = False,
        return_carry: bool = False,
        reverse: bool = False,
        keep_order: bool = False,
        unroll: int = 1,
        state_axes: Mapping[Any, Any] | None = None,
        broadcast_rngs: Any = None,
        rngs: Rngs | RngStream | bool = True,
    ) -> None:
        self.cell = cell
        self.time_major = time_major
        self.return_carry = return_carry
        self.reverse = reverse
        self.keep_order = keep_order
        self.unroll = unroll
        self.rngs: RngStream | None
        if rngs is True:
            self.rngs = RngStream(0, tag="carry")
        elif isinstance(rngs, Rngs):
            self.rngs = rngs.carry.fork()
        elif rngs is False:
            self.rngs = data(None)
        else:
            raise ValueError(
                f"Expected rngs to be a jax.Array, int, Rngs, or bool. Got {type(rngs)}."
            )
        self.state_axes = state_axes or StateAxes({...: _CarryAxis})
        self.broadcast_rngs = broadcast_rngs

    def __call__(
        self,
        inputs: Array,
        *,
        initial_carry: Carry | None = None,
        seq_lengths: Array | None = None,
        return_carry: bool | None = None,
        time_major: bool | None = None,
        reverse: bool | None = None,
        keep_order: bool | None = None,
        rngs: Rngs | RngStream | None = None,
    ) -> Output | tuple[Carry, Output]:
        """The outputs over the sequence, or ``(carry, outputs)`` with ``return_carry``;
        the keyword arguments override the attributes of the same names."""
        if rngs is None:
            rngs = self.rngs
        if isinstance(rngs, Rngs):
            rngs = rngs.carry.fork()
        stream = rngs

        # A new split of the broadcast streams' keys on every call: in place and restored
        # afterwards in graph mode, on a copy of the cell in tree mode (as Flax does).
        @split_rngs(splits=1, only=self.broadcast_rngs, squeeze=True)
        def run(cell: Any) -> Any:
            def init_carry(shape: tuple[int, ...]) -> Carry:
                return cell.initialize_carry(shape, stream)

            def scan(carry: Any, xs: Any, time_axis: int, stack: bool) -> tuple[Any, Any]:
                return _scan_cell(self, cell, carry, xs, time_axis, stack)

            return F.rnn(
                scan,
                inputs,
                num_feature_axes=cell.num_feature_axes,
                initial_carry=initial_carry,
                init_carry=init_carry,
                seq_lengths=seq_lengths,
                time_major=self.time_major if time_major is None else time_major,
                reverse=self.reverse if reverse is None else reverse,
                keep_order=self.keep_order if keep_order is None else keep_order,
                return_carry=self.return_carry if return_carry is None else return_carry,
            )

        return run(self.cell)


def _concatenate(a: Array, b: Array) -> Array:
    """Concatenates two arrays along the last dimension."""
    return jnp.concatenate([a, b], axis=-1)


class RNNBase(Protocol):
    """What ``Bidirectional`` calls: an ``RNN``-like layer."""

    def __call__(
        self,
        inputs: Array,
        *,
        initial_carry: Carry | None = None,
        rngs: Rngs | RngStream | None = None,
        seq_lengths: Array | None = None,
        return_carry: bool | None = None,
        time_major: bool | None = None,
        reverse: bool | None = None,
        keep_order: bool | None = None,
    ) -> Output | tuple[Carry, Output]: ...


class Bidirectional(Module):
    """Runs ``forward_rnn`` over the sequence and ``backward_rnn`` over it reversed (its
    outputs put back in order), and merges the two outputs step by step with
    ``merge_fn`` (default: concatenation of the features).

    >>> import jax.numpy as jnp
    >>> from adapters import nnx
    >>> fwd = nnx.RNN(nnx.LSTMCell(3, 4, rngs=nnx.Rngs(0)))
    >>> bwd = nnx.RNN(nnx.LSTMCell(3, 4, rngs=nnx.Rngs(1)))
    >>> from adapters.nnx.nn.recurrent import Bidirectional
    >>> Bidirectional(fwd, bwd)(jnp.ones((2, 5, 3))).shape
    (2, 5, 8)
    """

    forward_rnn: RNNBase
    backward_rnn: RNNBase
    merge_fn: Callable[[Array, Array], Array] = _concatenate
    time_major: bool = False
    return_carry: bool = False

    def __init__(
        self,
        forward_rnn: RNNBase,
        backward_rnn: RNNBase,
        *,
        merge_fn: Callable[[Array, Array], Array] = _concatenate,
        time_major: bool = False,
        return_carry: bool = False,
        rngs: Rngs | RngStream | bool = True,
    ) -> None:
        self.forward_rnn = forward_rnn
        self.backward_rnn = backward_rnn
        self.merge_fn = merge_fn
        self.time_major = time_major
        self.return_carry = return_carry
        self.rngs: RngStream | None
        if rngs is True:
            self.rngs = RngStream(0, tag="carry")
        elif rngs is False:
            self.rngs = None
        elif isinstance(rngs, Rngs):
            self.rngs = rngs.carry.fork()
        elif isinstance(rngs, RngStream):
            self.rngs = rngs
        else:
            raise TypeError(f"rngs must be a Rngs, jax.Array, int, or bool, but got {type(rngs)}.")

    def __call__(
        self,
        inputs: Array,
        *,
        initial_carry: tuple[Carry, Carry] | None = None,
        rngs: Rngs | RngStream | None = None,
        seq_lengths: Array | None = None,
        return_carry: bool | None = None,
        time_major: bool | None = None,
        reverse: bool | None = None,  # unused, as in Flax
        keep_order: bool | None = None,  # unused, as in Flax
    ) -> Output | tuple[tuple[Carry, Carry], Output]:
        """The merged outputs, or ``((forward_carry, backward_carry), outputs)`` with
        ``return_carry``."""
        if rngs is None:
            rngs = self.rngs
        if isinstance(rngs, Rngs):
            rngs = rngs.carry
        if self.forward_rnn is self.backward_rnn:
            logging.warning(
                "forward_rnn and backward_rnn is the same object, so they will share parameters."
            )
        stream = rngs

        def direction(rnn: RNNBase) -> Callable[..., Any]:
            # functional.bidirectional passes `unused=None` as the key: both directions
            # take this call's stream, as Flax's do.
            return lambda xs, *, unused, **kw: rnn(xs, rngs=stream, **kw)

        return F.bidirectional(
            direction(self.forward_rnn),
            direction(self.backward_rnn),
            inputs,
            merge_fn=self.merge_fn,
            initial_carry=initial_carry,
            seq_lengths=seq_lengths,
            time_major=self.time_major if time_major is None else time_major,
            return_carry=self.return_carry if return_carry is None else return_carry,
            key_name="unused",
        )
