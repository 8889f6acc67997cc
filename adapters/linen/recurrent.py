"""Recurrent layers (``flax.linen.recurrent``): the cells ``LSTMCell``,
``OptimizedLSTMCell``, ``GRUCell``, ``MGUCell``, ``SimpleCell``, ``ConvLSTMCell``, the
``RNN`` that scans a cell over a sequence with ``nn.scan``, and ``Bidirectional``.

Parameter names, shapes, initializers and the carry layout are Flax's. Each cell creates
its projections as ``Dense``/``Conv`` submodules named as Flax's and passes them to the
step function of ``pytreemod.nn.functional`` (``lstm_cell``, ``gru_cell``...), which the
``pytreemod.nn`` cells call too; ``RNN`` and ``Bidirectional`` drive ``F.rnn`` and
``F.bidirectional``. The cells are defined in ``_recurrent_cells`` and re-exported here,
with the helpers and names this module has always had.
"""

import logging
from collections.abc import Callable, Mapping
from collections.abc import Sequence as Sequence
from typing import Any, Protocol

import jax as jax
import jax.numpy as jnp
from jax import random

from pytreemod.nn import functional as F
from pytreemod.nn.functional import flip_sequences as flip_sequences

from ..core import FrozenDict
from . import initializers as initializers
from . import transforms
from ._recurrent_cells import Array, Carry, Output, PRNGKey, RNNCellBase
from ._recurrent_cells import ConvLSTMCell as ConvLSTMCell
from ._recurrent_cells import DenseParams as DenseParams
from ._recurrent_cells import Dtype as Dtype
from ._recurrent_cells import GRUCell as GRUCell
from ._recurrent_cells import Initializer as Initializer
from ._recurrent_cells import LSTMCell as LSTMCell
from ._recurrent_cells import MGUCell as MGUCell
from ._recurrent_cells import OptimizedLSTMCell as OptimizedLSTMCell
from ._recurrent_cells import SimpleCell as SimpleCell
from ._recurrent_cells import _input_hidden_projection as _input_hidden_projection
from ._recurrent_cells import _vector_carry as _vector_carry
from .activation import sigmoid as sigmoid
from .activation import tanh as tanh
from .linear import Conv as Conv
from .linear import Dense as Dense
from .linear import default_kernel_init as default_kernel_init
from .module import Module
from .module import compact as compact
from .module import nowrap as nowrap

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

_logger = logging.getLogger(__name__)


class RNN(Module):
    """Run a recurrent cell over the time axis of a sequence (a ``scan`` over steps).

    Inputs are ``(*batch, time, *features)``, or ``(time, *batch, *features)`` with
    ``time_major``; the cell sees one step at a time and its parameters are shared by all
    steps. The carry starts from ``initial_carry`` if given, else from
    ``cell.initialize_carry``. With ``seq_lengths``, steps past each sequence's length are
    padding: the returned carry is the one after the last real step (the outputs at
    padded steps are not zeroed). The ``__call__`` keywords ``return_carry``,
    ``time_major``, ``reverse`` and ``keep_order`` override the fields for one call.
    Example: see ``GRUCell``.

    Attributes:
        cell: the cell applied at each step (an ``RNNCellBase``).
        time_major: the time axis comes first, before the batch axes (default ``False``:
            it follows them).
        return_carry: return ``(final_carry, outputs)`` instead of the outputs alone
            (default ``False``).
        reverse: process the sequence from its end (default ``False``); with
            ``seq_lengths`` each sequence is reversed within its length, so padding stays
            at the end.
        keep_order: with ``reverse``, put the outputs back in input order (default
            ``False``: they come out in processing order).
        unroll: how many steps to unroll in each iteration of the loop (default ``1``).
        variable_axes: the variable collections with one slice per step, as
            ``{collection: axis}`` (default ``{}``: none).
        variable_broadcast: the collections shared by all steps (default ``'params'``).
        variable_carry: the collections whose values flow from step to step (default
            ``False``: none).
        split_rngs: for each rng stream, whether every step gets its own key (default
            ``{'params': False}``: one parameter key, so the steps share parameters).
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
        """Run the cell over the sequence.

        Args:
            inputs: the sequence ``(*batch, time, *features)`` (time first when
                ``time_major``).
            initial_carry: the carry before the first step (default ``None``: from
                ``cell.initialize_carry``).
            init_key: the key for ``cell.initialize_carry`` (default ``None``:
                ``jax.random.key(0)``).
            seq_lengths: an integer array of the batch shape with each sequence's length
                (default ``None``: all use the full time axis).
            return_carry: overrides the field for this call (default ``None``).
            time_major: overrides the field for this call (default ``None``).
            reverse: overrides the field for this call (default ``None``).
            keep_order: overrides the field for this call (default ``None``).

        Returns:
            The outputs ``(*batch, time, *out_features)``, or ``(final_carry, outputs)``
            when returning the carry.
        """

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
    """Run one RNN forward and another backward over a sequence and merge their outputs.

    ``backward_rnn`` reads the sequence from its end (each sequence within its length when
    ``seq_lengths`` is given); its outputs are put back in input order before
    ``merge_fn`` combines them with ``forward_rnn``'s step by step. The carry is the pair
    ``(forward_carry, backward_carry)``. Passing the same object twice shares parameters
    (and logs a warning).

    >>> import jax, jax.numpy as jnp
    >>> from adapters import linen as nn
    >>> layer = nn.Bidirectional(nn.RNN(nn.LSTMCell(4)), nn.RNN(nn.LSTMCell(4)))
    >>> xs = jnp.ones((2, 7, 3))  # (batch, time, in_features)
    >>> variables = layer.init(jax.random.key(0), xs)
    >>> layer.apply(variables, xs).shape  # both directions' features, concatenated
    (2, 7, 8)

    Attributes:
        forward_rnn: the RNN run in input order (anything with ``RNN``'s call signature).
        backward_rnn: the RNN run in reverse order.
        merge_fn: combines the two output sequences (default: concatenation along the
            last axis).
        time_major: the time axis comes first (default ``False``).
        return_carry: return ``((forward_carry, backward_carry), outputs)`` (default
            ``False``: the outputs alone).
    """

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
        """Run both directions and merge them.

        Args:
            inputs: the sequence ``(*batch, time, *features)`` (time first when
                ``time_major``).
            initial_carry: ``(forward_carry, backward_carry)`` before the first step
                (default ``None``: each cell's ``initialize_carry``).
            init_key: the key for the cells' ``initialize_carry`` (default ``None``).
            seq_lengths: each sequence's length, an integer array of the batch shape
                (default ``None``: the full time axis).
            return_carry: overrides the field for this call (default ``None``).
            time_major: overrides the field for this call (default ``None``).
            reverse: accepted for ``RNN``'s signature and ignored.
            keep_order: accepted for ``RNN``'s signature and ignored.

        Returns:
            The merged outputs, or ``((forward_carry, backward_carry), outputs)`` when
            returning the carry.
        """
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
