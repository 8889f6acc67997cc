"""``RNN`` (a cell scanned over a sequence with ``pm.scan``) and ``Bidirectional``."""

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
from jax import lax
from jaxtyping import Integer, Shaped

from .._errors import LayerConfigError
from .._module import Module, field
from .._shapecheck import AnyArray, fail, summary
from .._sharding._ops import steady_carry
from .._transforms_axes import Carry
from .._transforms_scan import scan
from . import _ops_recurrent as R
from ._recurrent import RNNCellBase
from ._validate import callable_arg, positive_int


class RNN(Module, typecheck=True):
    """Runs ``cell`` over the time axis of a sequence (Flax ``RNN``), with ``pm.scan``.

    **Arguments:** ``cell`` (any ``RNNCellBase``); ``time_major`` (default ``False``:
    inputs ``(*batch, time, *features)``; ``True``: ``(time, *batch, *features)``);
    ``return_carry`` (also return the final carry); ``reverse`` (process from the last
    step; outputs in processing order); ``keep_order`` (with ``reverse``, outputs back in
    input order); ``unroll`` (passed to the scan). Each can be overridden per call.

    **Call:** ``rnn(inputs, *, initial_carry=None, seq_lengths=None, key=None, ...)``.
    Without ``initial_carry`` the carry is ``cell.initialize_carry(step_shape, key=key)``.
    ``seq_lengths`` (integers of the batch shape) marks the steps past each length as
    padding: with ``reverse`` the padding stays at the end, and the carry returned is the
    one after each sequence's last valid step (outputs at padded steps are computed, not
    zeroed).

    >>> import jax, jax.numpy as jnp
    >>> import pytreemod as pm
    >>> rnn = pm.nn.RNN(pm.nn.LSTMCell(3, 8, key=jax.random.key(0)))
    >>> x = jnp.ones((2, 10, 3))           # (batch, time, in_features)
    >>> rnn(x).shape                        # (batch, time, hidden_features)
    (2, 10, 8)
    >>> (c, h), y = rnn(x, seq_lengths=jnp.array([10, 4]), return_carry=True)
    >>> bool(jnp.allclose(h[1], y[1, 3]))   # the carry after step 4 of sequence 1
    True
    """

    cell: RNNCellBase
    time_major: bool = field(static=True, default=False)
    return_carry: bool = field(static=True, default=False)
    reverse: bool = field(static=True, default=False)
    keep_order: bool = field(static=True, default=False)
    unroll: int = field(static=True, default=1, repr=False)

    def __check_init__(self) -> None:
        if not isinstance(self.cell, RNNCellBase):
            raise LayerConfigError(
                f"RNN: cell={self.cell!r} is not a recurrent cell; pass an RNNCellBase such "
                "as RNN(pm.nn.LSTMCell(in_features, hidden_features, key=key))."
            )
        if not isinstance(self.unroll, bool):
            positive_int("RNN", "unroll", self.unroll)

    def __call__(
        self,
        inputs: Shaped[AnyArray, "..."],
        *,
        initial_carry: Any = None,
        seq_lengths: Integer[AnyArray, "..."] | None = None,
        key: jax.Array | None = None,
        return_carry: bool | None = None,
        time_major: bool | None = None,
        reverse: bool | None = None,
        keep_order: bool | None = None,
        out_sharding: Any = None,
    ) -> Any:
        """Run the cell over ``inputs``; returns the outputs, or ``(carry, outputs)``.
        ``out_sharding`` reshards the stacked outputs (not the carry)."""

        def run(carry: Any, xs: Any, time_axis: int, stack_carries: bool) -> tuple[Any, Any]:
            def step(cell: RNNCellBase, carry: Any, x: Any) -> Any:
                carry, y = cell(carry, x)
                return carry, ((carry, y) if stack_carries else y)

            ys_axes = (0, time_axis) if stack_carries else time_axis
            carry = steady_carry(
                lambda c, x: self.cell(c, lax.index_in_dim(x, 0, time_axis, keepdims=False)),
                carry,
                xs,
            )
            final, ys = scan(
                step,
                in_axes=(None, Carry, time_axis),
                out_axes=(Carry, ys_axes),
                unroll=self.unroll,
            )(self.cell, carry, xs)
            return ys if stack_carries else (final, ys)

        major = self.time_major if time_major is None else time_major
        _check_sequence("RNN", inputs, seq_lengths, self.cell.num_feature_axes, major)
        return R.rnn(
            run,
            inputs,
            num_feature_axes=self.cell.num_feature_axes,
            initial_carry=initial_carry,
            init_carry=lambda shape: self.cell.initialize_carry(shape, key=key),
            seq_lengths=seq_lengths,
            time_major=major,
            reverse=self.reverse if reverse is None else reverse,
            keep_order=self.keep_order if keep_order is None else keep_order,
            return_carry=self.return_carry if return_carry is None else return_carry,
            out_sharding=out_sharding,
        )


def _check_sequence(
    owner: str, inputs: Any, seq_lengths: Any, num_feature_axes: int, time_major: bool
) -> None:
    shape = tuple(jnp.shape(inputs))
    if len(shape) < num_feature_axes + 1:
        fail(
            "rnn",
            f"{owner}: inputs {summary(inputs)} has {len(shape)} axes but the cell needs at "
            f"least {num_feature_axes + 1} (time and {num_feature_axes} feature axes)",
        )
    if seq_lengths is None:
        return
    end = len(shape) - num_feature_axes
    batch = shape[1:end] if time_major else shape[: end - 1]
    if tuple(jnp.shape(seq_lengths)) != batch:
        fail(
            "rnn",
            f"{owner}: seq_lengths {summary(seq_lengths)} must have the batch shape {batch} "
            f"of inputs {summary(inputs)} (one length per sequence)",
        )


def _concatenate(a: jax.Array, b: jax.Array) -> jax.Array:
    return jnp.concatenate([a, b], axis=-1)


class Bidirectional(Module, typecheck=True):
    """Runs ``forward_rnn`` over the sequence and ``backward_rnn`` over it reversed (its
    outputs put back in input order), and merges the two outputs of each step with
    ``merge_fn`` (default: concatenation on the last axis) (Flax ``Bidirectional``).

    **Call:** ``layer(inputs, *, initial_carry=None, seq_lengths=None, key=None,
    return_carry=None, time_major=None)``; ``initial_carry`` is a ``(forward, backward)``
    pair, ``key`` is split between the two; the carry returned is the pair of final
    carries. Passing the same ``RNN`` twice shares its parameters.

    >>> import jax, jax.numpy as jnp
    >>> import pytreemod as pm
    >>> k1, k2 = jax.random.split(jax.random.key(0))
    >>> layer = pm.nn.Bidirectional(pm.nn.RNN(pm.nn.GRUCell(3, 4, key=k1)),
    ...                             pm.nn.RNN(pm.nn.GRUCell(3, 5, key=k2)))
    >>> layer(jnp.ones((2, 10, 3))).shape   # (batch, time, 4 + 5)
    (2, 10, 9)
    """

    forward_rnn: RNN
    backward_rnn: RNN
    merge_fn: Callable[[Any, Any], Any] = field(static=True, default=_concatenate, repr=False)
    time_major: bool = field(static=True, default=False)
    return_carry: bool = field(static=True, default=False)

    def __check_init__(self) -> None:
        for name in ("forward_rnn", "backward_rnn"):
            value = getattr(self, name)
            if not isinstance(value, RNN):
                raise LayerConfigError(
                    f"Bidirectional: {name}={value!r} is not an RNN; pass RNN(cell) layers, "
                    "e.g. Bidirectional(RNN(cell_f), RNN(cell_b))."
                )
        callable_arg("Bidirectional", "merge_fn", self.merge_fn)

    def __call__(
        self,
        inputs: Shaped[AnyArray, "..."],
        *,
        initial_carry: tuple[Any, Any] | None = None,
        seq_lengths: Integer[AnyArray, "..."] | None = None,
        key: jax.Array | None = None,
        return_carry: bool | None = None,
        time_major: bool | None = None,
        out_sharding: Any = None,
    ) -> Any:
        """Run both directions; returns the merged outputs, or ``(carries, outputs)``.
        ``out_sharding`` reshards the merged outputs."""
        return R.bidirectional(
            self.forward_rnn,
            self.backward_rnn,
            inputs,
            merge_fn=self.merge_fn,
            initial_carry=initial_carry,
            key=key,
            seq_lengths=seq_lengths,
            time_major=self.time_major if time_major is None else time_major,
            return_carry=self.return_carry if return_carry is None else return_carry,
            out_sharding=out_sharding,
        )
