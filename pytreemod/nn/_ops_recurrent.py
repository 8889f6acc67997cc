"""Recurrent cells and the loop around them, as pure functions.

A cell step takes the carry, the input of one time step and a ``project`` function:
``project(name, x)`` applies the affine map called ``name`` (Flax's parameter names:
``"ii"`` input-to-input-gate, ``"hf"`` hidden-to-forget-gate...) to ``x``. Layers pass
their own projections (Linear layers, Linen ``Dense`` submodules); ``dense_projections``
builds one from a ``{name: {"kernel", "bias"}}`` dict. The step returns
``(new_carry, output)``. Every step and loop takes ``out_sharding=`` (a ``PartitionSpec`` or
``NamedSharding``): a step reshards its output and every array of its new carry (all of
the same ``(*batch, hidden)`` shape) to it; ``rnn`` and ``bidirectional`` reshard the
stacked outputs (not the carry).

``rnn`` runs a step function over a sequence given a ``scan`` callback (``pm.scan`` in
``pytreemod.nn``, ``nn.scan`` in the adapters): it handles the time axis, ``reverse``,
``keep_order``, ``seq_lengths`` and the initial carry, identically for both packages.
"""

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import jax
import jax.numpy as jnp
from jaxtyping import Float, Integer, Shaped

from .._errors import LayerConfigError
from .._shapecheck import AnyArray, checked, python_numbers
from .._sharding._ops import constrain, explicit_mesh
from ._ops_common import promote_dtype
from ._ops_linear import linear

Projection = Callable[[str, Any], Any]
"""``project(name, x)``: the affine map called ``name`` applied to ``x``."""

Activation = Callable[[jax.Array], jax.Array]

State = Shaped[AnyArray, "*batch hidden"]
Out = Shaped[jax.Array, "*batch hidden"]


@checked
def lstm_cell(
    carry: tuple[State, State],
    inputs: Shaped[AnyArray, "*batch in_features"],
    project: Projection,
    *,
    gate_fn: Activation = jax.nn.sigmoid,
    activation_fn: Activation = jnp.tanh,
    out_sharding: Any = None,
) -> tuple[tuple[Out, Out], Out]:
    """One LSTM step; ``carry`` is ``(c, h)``, the output is the new ``h``.

    ``i, f, o = gate_fn(ii(x) + hi(h), ...)``, ``g = activation_fn(ig(x) + hg(h))``,
    ``c' = f * c + i * g``, ``h' = o * activation_fn(c')`` (projections named as Flax's
    ``LSTMCell`` parameters, called in the order ``ii, hi, if, hf, ig, hg, io, ho``).

    >>> import jax.numpy as jnp
    >>> from pytreemod.nn import functional as F
    >>> (c, h), y = F.lstm_cell((jnp.zeros((2, 4)),) * 2, jnp.ones((2, 3)),
    ...                         lambda name, x: jnp.ones(x.shape[:-1] + (4,)))
    >>> c.shape, y.shape
    ((2, 4), (2, 4))
    """
    c, h = carry
    i = gate_fn(project("ii", inputs) + project("hi", h))
    f = gate_fn(project("if", inputs) + project("hf", h))
    g = activation_fn(project("ig", inputs) + project("hg", h))
    o = gate_fn(project("io", inputs) + project("ho", h))
    return _step_out(_lstm_update(c, i, f, g, o, activation_fn), out_sharding, inputs)


def _lstm_update(
    c: Any, i: Any, f: Any, g: Any, o: Any, activation_fn: Activation
) -> tuple[tuple[jax.Array, jax.Array], jax.Array]:
    new_c = f * c + i * g
    new_h = o * activation_fn(new_c)
    return (new_c, new_h), new_h


def _step_out(result: Any, out_sharding: Any, inputs: Any) -> Any:
    """A step's ``(new_carry, output)`` with ``out_sharding`` applied to every array."""
    if out_sharding is None:
        return result
    return jax.tree.map(lambda y: constrain(y, out_sharding, inputs), result)


_GATES = ("i", "f", "g", "o")


@checked
def fused_lstm_cell(
    carry: tuple[State, State],
    inputs: Shaped[AnyArray, "*batch in_features"],
    input_kernels: Sequence[Float[AnyArray, "in_features hidden"]],
    hidden_kernels: Sequence[Float[AnyArray, "hidden hidden"]],
    hidden_biases: Sequence[Float[AnyArray, " hidden"]],
    *,
    gate_fn: Activation = jax.nn.sigmoid,
    activation_fn: Activation = jnp.tanh,
    dtype: Any = None,
    out_sharding: Any = None,
) -> tuple[tuple[Out, Out], Out]:
    """``lstm_cell`` with the four gates' kernels concatenated: two matrix products per
    step instead of eight (Flax's ``OptimizedLSTMCell``; same parameters, gates in the
    order ``i, f, g, o``).

    >>> import jax.numpy as jnp
    >>> from pytreemod.nn import functional as F
    >>> wi, wh, b = [jnp.ones((3, 4))] * 4, [jnp.eye(4)] * 4, [jnp.zeros(4)] * 4
    >>> _, y = F.fused_lstm_cell((jnp.zeros((2, 4)),) * 2, jnp.ones((2, 3)), wi, wh, b)
    >>> y.shape
    (2, 4)
    """
    if not len(input_kernels) == len(hidden_kernels) == len(hidden_biases) == 4:
        raise LayerConfigError(
            "fused_lstm_cell takes 4 input kernels, 4 hidden kernels and 4 hidden biases "
            f"(gates i, f, g, o); got {len(input_kernels)}, {len(hidden_kernels)} and "
            f"{len(hidden_biases)}."
        )
    c, h = carry
    from_h = _fused(h, hidden_kernels, hidden_biases, dtype)
    from_x = _fused(inputs, input_kernels, None, dtype)
    i, f, o = (gate_fn(from_h[k] + from_x[k]) for k in (0, 1, 3))
    g = activation_fn(from_h[2] + from_x[2])
    return _step_out(_lstm_update(c, i, f, g, o, activation_fn), out_sharding, inputs)


def _fused(
    x: Any, kernels: Sequence[Any], biases: Sequence[Any] | None, dtype: Any
) -> list[jax.Array]:
    """``x @ concat(kernels) + concat(biases)``, split back per kernel. On an Explicit
    mesh one ``linear`` per kernel instead: each kernel keeps its own (column-parallel)
    sharding, which a concatenation along the sharded axis would move between devices."""
    if explicit_mesh(x, *kernels) is not None:
        bs = [None] * len(kernels) if biases is None else list(biases)
        return [linear(x, k, b, dtype=dtype) for k, b in zip(kernels, bs)]
    kernel = jnp.concatenate(list(kernels), axis=-1)
    bias = None if biases is None else jnp.concatenate(list(biases), axis=-1)
    x, kernel, bias = promote_dtype(x, kernel, bias, dtype=dtype)
    y = jnp.dot(x, kernel)
    if bias is not None:
        y = y + jnp.reshape(bias, (1,) * (y.ndim - 1) + (-1,))
    sizes = [k.shape[-1] for k in kernels]
    cuts = [sum(sizes[: n + 1]) for n in range(len(sizes) - 1)]
    return jnp.split(y, cuts, axis=-1)


@checked
def gru_cell(
    carry: State,
    inputs: Shaped[AnyArray, "*batch in_features"],
    project: Projection,
    *,
    gate_fn: Activation = jax.nn.sigmoid,
    activation_fn: Activation = jnp.tanh,
    out_sharding: Any = None,
) -> tuple[Out, Out]:
    """One GRU step; the carry and the output are the new ``h``.

    ``r = gate_fn(ir(x) + hr(h))``, ``z = gate_fn(iz(x) + hz(h))``,
    ``n = activation_fn(in(x) + r * hn(h))``, ``h' = (1 - z) * n + z * h``.

    >>> import jax.numpy as jnp
    >>> from pytreemod.nn import functional as F
    >>> h, y = F.gru_cell(jnp.zeros((2, 4)), jnp.ones((2, 3)),
    ...                   lambda name, x: jnp.zeros(x.shape[:-1] + (4,)))
    >>> y.shape
    (2, 4)
    """
    h = carry
    r = gate_fn(project("ir", inputs) + project("hr", h))
    z = gate_fn(project("iz", inputs) + project("hz", h))
    n = activation_fn(project("in", inputs) + r * project("hn", h))
    new_h = (1.0 - z) * n + z * h
    return _step_out((new_h, new_h), out_sharding, inputs)


@checked
def mgu_cell(
    carry: State,
    inputs: Shaped[AnyArray, "*batch in_features"],
    project: Projection,
    *,
    gate_fn: Activation = jax.nn.sigmoid,
    activation_fn: Activation = jnp.tanh,
    reset_gate: bool = True,
    out_sharding: Any = None,
) -> tuple[Out, Out]:
    """One minimal gated unit step (https://arxiv.org/abs/1603.09420).

    ``f = gate_fn(if(x) + hf(h))``, ``n = activation_fn(in(x) + f * hn(h))`` (without the
    ``f *`` when ``reset_gate=False``), ``h' = (1 - f) * n + f * h``.

    >>> import jax.numpy as jnp
    >>> from pytreemod.nn import functional as F
    >>> h, y = F.mgu_cell(jnp.zeros((2, 4)), jnp.ones((2, 3)),
    ...                   lambda name, x: jnp.zeros(x.shape[:-1] + (4,)))
    >>> y.shape
    (2, 4)
    """
    h = carry
    f = gate_fn(project("if", inputs) + project("hf", h))
    from_h = project("hn", h)
    if reset_gate:
        from_h = from_h * f
    n = activation_fn(project("in", inputs) + from_h)
    new_h = (1.0 - f) * n + f * h
    return _step_out((new_h, new_h), out_sharding, inputs)


@checked
def simple_cell(
    carry: State,
    inputs: Shaped[AnyArray, "*batch in_features"],
    project: Projection,
    *,
    activation_fn: Activation = jnp.tanh,
    residual: bool = False,
    out_sharding: Any = None,
) -> tuple[Out, Out]:
    """One Elman RNN step: ``h' = activation_fn(i(x) + h(h) [+ h])`` (the ``+ h`` with
    ``residual=True``).

    >>> import jax.numpy as jnp
    >>> from pytreemod.nn import functional as F
    >>> h, y = F.simple_cell(jnp.zeros((2, 4)), jnp.ones((2, 3)),
    ...                      lambda name, x: jnp.zeros(x.shape[:-1] + (4,)))
    >>> y.shape
    (2, 4)
    """
    new_h = project("i", inputs) + project("h", carry)
    if residual:
        new_h = new_h + carry
    new_h = activation_fn(new_h)
    return _step_out((new_h, new_h), out_sharding, inputs)


@checked
def conv_lstm_cell(
    carry: tuple[State, State],
    inputs: Shaped[AnyArray, "*batch in_features"],
    project: Projection,
    *,
    out_sharding: Any = None,
) -> tuple[tuple[Out, Out], Out]:
    """One convolutional LSTM step (Shi et al. 2015), channels last.

    ``ih`` and ``hh`` are convolutions to ``4 * hidden`` channels whose sum splits into
    ``i, g, f, o``; the forget gate gets ``+1`` before its sigmoid; then as ``lstm_cell``
    with sigmoid gates and tanh.

    >>> import jax.numpy as jnp
    >>> from pytreemod.nn import functional as F
    >>> zeros = jnp.zeros((2, 5, 5, 4))
    >>> _, y = F.conv_lstm_cell((zeros, zeros), jnp.ones((2, 5, 5, 3)),
    ...                         lambda name, x: jnp.zeros(x.shape[:-1] + (16,)))
    >>> y.shape
    (2, 5, 5, 4)
    """
    c, h = carry
    gates = project("ih", inputs) + project("hh", h)
    i, g, f, o = jnp.split(gates, 4, axis=-1)
    f = jax.nn.sigmoid(f + 1)
    new = _lstm_update(c, jax.nn.sigmoid(i), f, jnp.tanh(g), jax.nn.sigmoid(o), jnp.tanh)
    return _step_out(new, out_sharding, inputs)


def dense_projections(
    params: Mapping[str, Mapping[str, Any]], *, dtype: Any = None, precision: Any = None
) -> Projection:
    """A ``project`` function from a ``{name: {"kernel": k, "bias": b}}`` dict (the bias
    optional): Flax's parameters of a cell, ``variables["params"]["cell"]`` of an RNN.

    >>> import jax.numpy as jnp
    >>> from pytreemod.nn import functional as F
    >>> project = F.dense_projections({"i": {"kernel": jnp.ones((3, 4))}})
    >>> project("i", jnp.ones((2, 3))).shape
    (2, 4)
    """

    def project(name: str, x: jax.Array) -> jax.Array:
        if name not in params:
            raise LayerConfigError(
                f"dense_projections: no parameters for the projection {name!r}; the cell "
                f"needs it, and the dict has {sorted(params)}."
            )
        p = params[name]
        return linear(x, p["kernel"], p.get("bias"), dtype=dtype, precision=precision)

    return project


# ----------------------------------------------------------------------------- the loop


@checked
def flip_sequences(
    inputs: Shaped[AnyArray, "..."],
    seq_lengths: Integer[AnyArray, "..."] | None,
    num_batch_dims: int,
    time_major: bool,
) -> Shaped[jax.Array, "..."]:
    """Reverse each sequence along the time axis, keeping padding at the end.

    The time axis is ``0`` (``time_major``) or ``num_batch_dims``; ``seq_lengths`` has
    the batch shape. Without it, the whole axis is reversed. With it, the first
    ``length`` steps of each sequence are reversed in place and the padding after them
    is reversed within itself (Flax's ``flip_sequences``).

    >>> import jax.numpy as jnp
    >>> from pytreemod.nn import functional as F
    >>> F.flip_sequences(jnp.array([[1, 2, 3, 0], [4, 5, 0, 0]]), jnp.array([3, 2]), 1, False)
    Array([[3, 2, 1, 0],
           [5, 4, 0, 0]], dtype=int32)
    """
    time_axis = 0 if time_major else num_batch_dims
    steps = inputs.shape[time_axis]
    if seq_lengths is None:
        return jnp.flip(jnp.asarray(inputs), axis=time_axis)
    lengths = jnp.expand_dims(jnp.asarray(seq_lengths), time_axis)
    backwards = jnp.arange(steps - 1, -1, -1, dtype=lengths.dtype)
    shape = [1] * (num_batch_dims + 1)
    shape[time_axis] = steps
    index = (jnp.reshape(backwards, shape) + lengths) % steps
    index = jnp.reshape(index, index.shape + (1,) * (inputs.ndim - index.ndim))
    return jnp.take_along_axis(jnp.asarray(inputs), index, axis=time_axis)


def select_last_carry(carries: Any, seq_lengths: AnyArray) -> Any:
    """From carries stacked over time on axis 0 (``(time, *batch, ...)`` leaves), the one
    at step ``seq_lengths - 1`` of each sequence: the carry after its last valid input.

    A length of 0 selects the last step (as Flax's indexing with ``-1`` does).

    >>> import jax.numpy as jnp
    >>> from pytreemod.nn import functional as F
    >>> F.select_last_carry(jnp.arange(6).reshape(3, 2), jnp.array([1, 3]))
    Array([0, 5], dtype=int32)
    """
    lengths = jnp.asarray(seq_lengths)

    def select(x: jax.Array) -> jax.Array:
        steps = x.shape[0]
        index = lengths - 1
        index = jnp.where(index < 0, index + steps, index)
        index = jnp.reshape(index, (1, *index.shape) + (1,) * (x.ndim - 1 - index.ndim))
        return jnp.take_along_axis(x, index, axis=0, mode="clip")[0]

    return jax.tree.map(select, carries)


ScanFn = Callable[[Any, Any, int, bool], tuple[Any, Any]]
"""``scan(carry, inputs, time_axis, stack_carries) -> (carry, outputs)``."""


@python_numbers
def rnn(
    scan: ScanFn,
    inputs: Any,
    *,
    num_feature_axes: int,
    initial_carry: Any = None,
    init_carry: Callable[[tuple[int, ...]], Any] | None = None,
    seq_lengths: AnyArray | None = None,
    time_major: bool = False,
    reverse: bool = False,
    keep_order: bool = False,
    return_carry: bool = False,
    out_sharding: Any = None,
) -> Any:
    """Run a cell over a sequence (Flax's ``RNN.__call__``), through a ``scan`` callback.

    ``inputs`` is ``(*batch, time, *features)``, or ``(time, *batch, *features)`` with
    ``time_major``; ``num_feature_axes`` is the cell's (1, or 1 + spatial axes).
    ``scan(carry, inputs, time_axis, stack_carries)`` applies the cell along
    ``time_axis`` and returns ``(final_carry, outputs)``, outputs on ``time_axis``; with
    ``stack_carries`` it returns every step's carry stacked on axis 0 in place of the
    final one. The initial carry is ``initial_carry``, else
    ``init_carry(shape_of_one_step)``.

    ``reverse`` runs from the end (``seq_lengths`` keeps padding at the end, see
    ``flip_sequences``); its outputs are in processing order unless ``keep_order``. With
    ``seq_lengths`` (batch shape) and ``return_carry``, the carry returned for each
    sequence is the one after its last valid step. Returns the outputs, or ``(carry,
    outputs)`` with ``return_carry``. ``out_sharding`` reshards the outputs.

    >>> import jax.numpy as jnp
    >>> import jax
    >>> from pytreemod.nn import functional as F
    >>> def scan(carry, xs, axis, stack):  # a running sum as the "cell"
    ...     step = lambda c, x: (c + x, c + x)
    ...     c, ys = jax.lax.scan(step, carry, jnp.moveaxis(xs, axis, 0))
    ...     return c, jnp.moveaxis(ys, 0, axis)
    >>> F.rnn(scan, jnp.ones((1, 3, 2)), num_feature_axes=1,
    ...       init_carry=lambda shape: jnp.zeros(shape))[0, :, 0]
    Array([1., 2., 3.], dtype=float32)
    """
    ndim = jnp.ndim(inputs)
    time_axis = 0 if time_major else ndim - (num_feature_axes + 1)
    if time_axis < 0:
        time_axis += ndim
    num_batch_dims = ndim - 1 - num_feature_axes

    def flip(tree: Any) -> Any:
        return jax.tree.map(
            lambda x: flip_sequences(x, seq_lengths, num_batch_dims, time_major), tree
        )

    if reverse:
        inputs = flip(inputs)
    if initial_carry is None:
        if init_carry is None:
            raise LayerConfigError("rnn: give initial_carry or init_carry.")
        shape = tuple(jnp.shape(inputs))
        initial_carry = init_carry(shape[:time_axis] + shape[time_axis + 1 :])
    stack_carries = seq_lengths is not None and return_carry
    carry, outputs = scan(initial_carry, inputs, time_axis, stack_carries)
    if stack_carries:
        assert seq_lengths is not None
        carry = select_last_carry(carry, seq_lengths)
    if reverse and keep_order:
        outputs = flip(outputs)
    outputs = _step_out(outputs, out_sharding, inputs)
    return (carry, outputs) if return_carry else outputs


def bidirectional(
    forward: Callable[..., Any],
    backward: Callable[..., Any],
    inputs: Any,
    *,
    merge_fn: Callable[[Any, Any], Any],
    initial_carry: tuple[Any, Any] | None = None,
    key: jax.Array | None = None,
    seq_lengths: AnyArray | None = None,
    time_major: bool = False,
    return_carry: bool = False,
    key_name: str = "key",
    out_sharding: Any = None,
) -> Any:
    """Run ``forward`` and ``backward`` (RNN calls) over ``inputs`` and merge the outputs
    step by step with ``merge_fn`` (Flax's ``Bidirectional``).

    Each RNN is called as ``rnn(inputs, initial_carry=..., <key_name>=...,
    seq_lengths=..., return_carry=True, time_major=..., reverse=..., keep_order=...)``:
    forward in order, backward reversed with ``keep_order=True`` so its outputs line up.
    ``key`` (split in two) and ``initial_carry`` (a pair) go to the two directions.
    Returns the merged outputs, or ``((forward_carry, backward_carry), outputs)``;
    ``out_sharding`` reshards the merged outputs.
    """
    keys: tuple[Any, Any] = (None, None) if key is None else tuple(jax.random.split(key))
    carries = (None, None) if initial_carry is None else initial_carry
    common = dict(seq_lengths=seq_lengths, return_carry=True, time_major=time_major)
    carry_f, out_f = forward(
        inputs, initial_carry=carries[0], reverse=False, **{key_name: keys[0]}, **common
    )
    carry_b, out_b = backward(
        inputs,
        initial_carry=carries[1],
        reverse=True,
        keep_order=True,
        **{key_name: keys[1]},
        **common,
    )
    outputs = _step_out(jax.tree.map(merge_fn, out_f, out_b), out_sharding, inputs)
    return ((carry_f, carry_b), outputs) if return_carry else outputs
