"""FP8 matrix products with delayed scaling (``flax.linen.fp8_ops``).

Inputs and kernels are quantised to ``float8_e4m3fn``, output gradients to
``float8_e5m2``, each with a scale derived from a history of absolute maxima. The scales
and histories are variables of the ``_overwrite_with_gradient`` collection: their
"gradients" are their updated values, so an optimizer step that overwrites them with the
gradient keeps them current. ``Fp8DotGeneral`` (``Fp8DirectDotGeneralOp``) plugs into a
layer's ``dot_general_cls``; ``Fp8Einsum`` replaces ``jnp.einsum``.
"""

import functools
import itertools
import warnings
from typing import Any

import jax
import numpy as np
from jax import custom_jvp, custom_vjp, lax, random
from jax import numpy as jnp

from . import initializers
from ._fp8_dtype import CAN_USE_EARRAY as CAN_USE_EARRAY
from ._fp8_dtype import fm32 as fm32
from ._fp8_dtype import fp8_meta_dtype as fp8_meta_dtype
from ._fp8_dtype import fp8_meta_dtype_wrapper as fp8_meta_dtype_wrapper
from ._fp8_dtype import fp32_max_grad as fp32_max_grad
from .module import Module, Variable

OVERWRITE_WITH_GRADIENT = "_overwrite_with_gradient"

__all__ = [
    "OVERWRITE_WITH_GRADIENT",
    "Fp8DirectDotGeneralOp",
    "Fp8DotGeneral",
    "Fp8DotGeneralOp",
    "Fp8Einsum",
    "NANOOFp8DotGeneralOp",
    "compute_amax_history",
    "compute_scale",
    "dequantize",
    "fp8_scaled_dot_general",
    "get_fp8_max",
    "qdq",
    "quantize",
    "quantize_dequantize_update",
    "update_fp8_meta",
]

_FP8_TYPES = (jnp.float8_e4m3fn, jnp.float8_e5m2, jnp.float8_e4m3fnuz, jnp.float8_e5m2fnuz)


def get_fp8_max(fp8_dtype: Any, out_dtype: Any) -> jax.Array:
    """The largest finite value of ``fp8_dtype``, as ``out_dtype``."""
    assert fp8_dtype in _FP8_TYPES
    return jnp.finfo(fp8_dtype).max.astype(out_dtype)


def quantize(x: Any, q_dtype: Any, scale: Any, compute_dtype: Any) -> jax.Array:
    """``clip(x / scale)`` to ``q_dtype``'s range, cast to ``q_dtype``."""
    limit = get_fp8_max(q_dtype, compute_dtype)
    scaled = x / jnp.broadcast_to(scale.astype(compute_dtype), x.shape)
    return jnp.clip(scaled, -limit, limit).astype(q_dtype)


def dequantize(x: Any, dq_dtype: Any, scale: Any) -> jax.Array:
    """``x * scale`` in ``dq_dtype``."""
    return x.astype(dq_dtype) * jnp.broadcast_to(scale.astype(dq_dtype), x.shape)


def qdq(x: Any, q_dtype: Any, scale: Any, compute_dtype: Any) -> jax.Array:
    """Quantise and dequantise: ``x`` rounded to what ``q_dtype`` can represent."""
    return dequantize(quantize(x, q_dtype, scale, compute_dtype), x.dtype, scale)


def compute_scale(amax: Any, scale: Any, fp8_max: Any, margin: int = 0) -> jax.Array:
    """The new scale ``amax / fp8_max * 2**margin``; the old ``scale`` where ``amax`` is
    zero or not finite."""
    inverse_old = 1.0 / scale
    inverse_new = (fp8_max / amax) / (2**margin)
    inverse_new = jnp.where(amax > 0.0, inverse_new, inverse_old)
    inverse_new = jnp.where(jnp.isfinite(amax), inverse_new, inverse_old)
    return 1.0 / inverse_new


def compute_amax_history(x: Any, amax_history: Any) -> jax.Array:
    """The history rolled by one with ``max(|x|)`` written at position 0."""
    amax = jnp.max(jnp.abs(x)).astype(amax_history.dtype)
    return jnp.roll(amax_history, shift=-1, axis=0).at[0].set(amax)


def _as_float32(value: Any) -> Any:
    return lax.convert_element_type(value, jnp.float32) if value.dtype == fm32 else value


def update_fp8_meta(x: Any, q_dtype: Any, scale: Any, amax_history: Any) -> tuple[Any, Any]:
    """The scale for this step (from the history so far) and the history with ``x``'s
    amax added. Meta-dtype (``fm32``) inputs give meta-dtype outputs."""
    meta = scale.dtype == fm32 and amax_history.dtype == fm32
    if meta:
        amax_history = lax.convert_element_type(amax_history, jnp.float32)
        scale = lax.convert_element_type(scale, jnp.float32)
    new_scale = compute_scale(
        jnp.max(amax_history, axis=0), scale, get_fp8_max(q_dtype, jnp.float32)
    )
    new_history = compute_amax_history(x, amax_history)
    if meta:
        new_history = lax.convert_element_type(new_history, fp32_max_grad)
        new_scale = lax.convert_element_type(new_scale, fp32_max_grad)
    return new_scale, new_history


def quantize_dequantize_update(
    x: Any, q_dtype: Any, scale: Any, amax_history: Any, compute_dtype: Any
) -> tuple[Any, Any, Any]:
    """``qdq`` with the updated scale, and the updated scale and history."""
    new_scale, new_history = update_fp8_meta(x, q_dtype, scale, amax_history)
    return qdq(x, q_dtype, _as_float32(new_scale), compute_dtype), new_scale, new_history


def _complement(n: Any, *removed: Any) -> list[int]:
    gone = set(itertools.chain(*removed))
    return [i for i in n if i not in gone]


def dot_general_transpose_lhs(
    g: Any,
    x: Any,
    y: Any,
    *,
    dimension_numbers: Any,
    precision: Any,
    preferred_element_type: Any,
    swap_ans: bool = False,
) -> jax.Array:
    """The cotangent of ``lhs`` of ``dot_general(x, y)`` given the output cotangent ``g``."""
    (x_contract, y_contract), (x_batch, y_batch) = dimension_numbers
    x_kept = _complement(range(np.ndim(x)), x_contract, x_batch)
    y_kept = _complement(range(np.ndim(y)), y_contract, y_batch)
    n_batch = len(x_batch)
    if swap_ans:
        ans_y = range(n_batch, n_batch + len(y_kept))
    else:
        ans_y = range(n_batch + len(x_kept), n_batch + len(x_kept) + len(y_kept))
    ans_batch = range(n_batch)
    dims = ((tuple(ans_y), tuple(y_kept)), (tuple(ans_batch), tuple(y_batch)))
    contract_by_y = list(np.take(x_contract, np.argsort(y_contract)))
    out_axes = np.argsort([*x_batch, *x_kept, *contract_by_y])
    product = lax.dot_general(
        g, y, dims, precision=precision, preferred_element_type=preferred_element_type
    )
    return lax.transpose(product, tuple(int(a) for a in out_axes))


def dot_general_transpose_rhs(
    g: Any, x: Any, y: Any, *, dimension_numbers: Any, precision: Any, preferred_element_type: Any
) -> jax.Array:
    """The cotangent of ``rhs`` of ``dot_general(x, y)`` given the output cotangent ``g``."""
    (x_contract, y_contract), (x_batch, y_batch) = dimension_numbers
    swapped = ((y_contract, x_contract), (y_batch, x_batch))
    return dot_general_transpose_lhs(
        g,
        y,
        x,
        dimension_numbers=swapped,
        precision=precision,
        preferred_element_type=preferred_element_type,
        swap_ans=True,
    )


# ----------------------------------------------------------------------------- custom rules
# The scale/history "gradient" of each op below is its updated value.


@functools.partial(custom_vjp, nondiff_argnums=(0, 1))
def in_qdq(compute_dtype: Any, q_dtype: Any, inp: Any, scale: Any, amax_history: Any) -> Any:
    """``qdq`` of an input in the forward pass; straight-through gradient."""
    return quantize_dequantize_update(inp, q_dtype, scale, amax_history, compute_dtype)[0]


def _in_qdq_fwd(compute_dtype: Any, q_dtype: Any, inp: Any, scale: Any, history: Any) -> Any:
    q, new_scale, new_history = quantize_dequantize_update(
        inp, q_dtype, scale, history, compute_dtype
    )
    return q, (new_scale, new_history)


def _in_qdq_bwd(compute_dtype: Any, q_dtype: Any, res: Any, g: Any) -> Any:
    new_scale, new_history = res
    return g, new_scale, new_history


in_qdq.defvjp(_in_qdq_fwd, _in_qdq_bwd)


@functools.partial(custom_vjp, nondiff_argnums=(0, 1))
def out_qdq(compute_dtype: Any, q_dtype: Any, out: Any, scale: Any, amax_history: Any) -> Any:
    """Identity in the forward pass; ``qdq`` of the output gradient in the backward."""
    return out


def _out_qdq_fwd(compute_dtype: Any, q_dtype: Any, out: Any, scale: Any, history: Any) -> Any:
    return out, (scale, history)


def _out_qdq_bwd(compute_dtype: Any, q_dtype: Any, res: Any, g: Any) -> Any:
    scale, history = res
    return quantize_dequantize_update(g, q_dtype, scale, history, compute_dtype)


out_qdq.defvjp(_out_qdq_fwd, _out_qdq_bwd)


@functools.partial(custom_vjp, nondiff_argnums=(0, 1))
def in_q(compute_dtype: Any, q_dtype: Any, inp: Any, scale: Any, amax_history: Any) -> Any:
    """Quantise an input (returns the fp8 array and the scale used)."""
    new_scale, _ = update_fp8_meta(inp, q_dtype, scale, amax_history)
    return quantize(inp, q_dtype, _as_float32(new_scale), compute_dtype), new_scale


def _in_q_fwd(compute_dtype: Any, q_dtype: Any, inp: Any, scale: Any, history: Any) -> Any:
    new_scale, new_history = update_fp8_meta(inp, q_dtype, scale, history)
    q = quantize(inp, q_dtype, _as_float32(new_scale), compute_dtype)
    return (q, new_scale), (new_scale, new_history)


def _in_q_bwd(compute_dtype: Any, q_dtype: Any, res: Any, _: Any) -> Any:
    new_scale, new_history = res
    return None, new_scale, new_history


in_q.defvjp(_in_q_fwd, _in_q_bwd)


@functools.partial(custom_vjp, nondiff_argnums=(0,))
def out_dq(dq_type: Any, lhs_scale: Any, rhs_scale: Any, out: Any) -> Any:
    """Dequantise a product by both operand scales; straight-through gradient."""
    return dequantize(out, dq_type, _as_float32(lhs_scale) * _as_float32(rhs_scale))


def _out_dq_fwd(dq_type: Any, lhs_scale: Any, rhs_scale: Any, out: Any) -> Any:
    return out_dq(dq_type, lhs_scale, rhs_scale, out), None


def _out_dq_bwd(dq_type: Any, _: Any, g: Any) -> Any:
    return None, None, g


out_dq.defvjp(_out_dq_fwd, _out_dq_bwd)


@functools.partial(custom_vjp, nondiff_argnums=(8, 9))
def quantized_dot(
    lhs: Any,
    q_lhs: Any,
    lhs_scale: Any,
    rhs: Any,
    q_rhs: Any,
    rhs_scale: Any,
    out_grad_scale: Any,
    out_grad_amax_history: Any,
    dimension_numbers: Any,
    preferred_element_type: Any = None,
) -> Any:
    """The product of the fp8 operands; its backward pass quantises the output gradient
    to e5m2 and returns dequantised operand gradients."""
    return lax.dot_general(
        q_lhs,
        q_rhs,
        dimension_numbers,
        preferred_element_type=preferred_element_type,
        precision=lax.Precision.DEFAULT,
    )


def _quantized_dot_fwd(
    lhs: Any,
    q_lhs: Any,
    lhs_scale: Any,
    rhs: Any,
    q_rhs: Any,
    rhs_scale: Any,
    out_grad_scale: Any,
    out_grad_amax_history: Any,
    dimension_numbers: Any,
    preferred_element_type: Any,
) -> Any:
    out = lax.dot_general(
        q_lhs,
        q_rhs,
        dimension_numbers,
        preferred_element_type=preferred_element_type,
        precision=lax.Precision.DEFAULT,
    )
    res = (lhs, q_lhs, lhs_scale, rhs, q_rhs, rhs_scale, out_grad_scale, out_grad_amax_history)
    return out, res


def _quantized_dot_bwd(
    dimension_numbers: Any, preferred_element_type: Any, res: Any, g: Any
) -> Any:
    lhs, q_lhs, lhs_scale, rhs, q_rhs, rhs_scale, grad_scale, grad_history = res
    new_grad_scale, new_grad_history = update_fp8_meta(g, jnp.float8_e5m2, grad_scale, grad_history)
    g_scale = _as_float32(new_grad_scale)
    q_g = quantize(g, jnp.float8_e5m2, g_scale, preferred_element_type)
    options: dict[str, Any] = dict(
        dimension_numbers=dimension_numbers,
        precision=lax.Precision.HIGHEST,
        preferred_element_type=preferred_element_type,
    )
    grad_lhs = dot_general_transpose_lhs(q_g, lhs, q_rhs, **options)
    grad_lhs = dequantize(grad_lhs, preferred_element_type, _as_float32(rhs_scale) * g_scale)
    grad_rhs = dot_general_transpose_rhs(q_g, q_lhs, rhs, **options)
    grad_rhs = dequantize(grad_rhs, preferred_element_type, _as_float32(lhs_scale) * g_scale)
    return grad_lhs, None, None, grad_rhs, None, None, new_grad_scale, new_grad_history


quantized_dot.defvjp(_quantized_dot_fwd, _quantized_dot_bwd)


def _pair(value: Any) -> tuple[Any, Any]:
    first, second = value
    return first, second


def fp8_scaled_dot_general(
    lhs: Any,
    rhs: Any,
    dimension_numbers: Any,
    precision: Any = None,
    preferred_element_type: Any = None,
    *,
    lhs_scale: Any = None,
    rhs_scale: Any = None,
    grad_scale: Any = None,
    lhs_amax_history: Any = None,
    rhs_amax_history: Any = None,
    grad_amax_history: Any = None,
    quantize_compute_type: Any = jnp.float32,
) -> Any:
    """``lax.dot_general`` computed on e4m3 operands with delayed scaling; ``precision``
    is fixed by the op (a warning if one is given)."""
    if precision is not None:
        warnings.warn(
            'The function fp8_scaled_dot_general will set the "precision" and disregard any '
            'provided "precision" argument.',
            stacklevel=2,
        )
    e4m3 = jnp.float8_e4m3fn
    q_lhs, new_lhs_scale = _pair(
        in_q(quantize_compute_type, e4m3, lhs, lhs_scale, lhs_amax_history)
    )
    q_rhs, new_rhs_scale = _pair(
        in_q(quantize_compute_type, e4m3, rhs, rhs_scale, rhs_amax_history)
    )
    y = quantized_dot(
        lhs,
        q_lhs,
        new_lhs_scale,
        rhs,
        q_rhs,
        new_rhs_scale,
        grad_scale,
        grad_amax_history,
        dimension_numbers,
        preferred_element_type,
    )
    return out_dq(preferred_element_type, new_lhs_scale, new_rhs_scale, y)


@functools.partial(custom_jvp, nondiff_argnums=(2, 3, 4))
def dot_general_with_precision(
    lhs: Any,
    rhs: Any,
    dimension_numbers: Any,
    precision: Any = None,
    preferred_element_type: Any = None,
) -> Any:
    """``lax.dot_general`` at default precision whose derivative uses the highest one."""
    if precision is not None or preferred_element_type is not None:
        warnings.warn(
            "The function dot_general_with_precision will set the "
            "precision/preferred_element_type and disregard any provided values.",
            stacklevel=2,
        )
    return lax.dot_general(lhs, rhs, dimension_numbers, precision=lax.Precision.DEFAULT)


@dot_general_with_precision.defjvp
def _dot_general_with_precision_jvp(
    dimension_numbers: Any, precision: Any, preferred_element_type: Any, primals: Any, tangents: Any
) -> Any:
    lhs, rhs = primals
    lhs_dot, rhs_dot = tangents
    out = lax.dot_general(lhs, rhs, dimension_numbers, precision=lax.Precision.DEFAULT)
    high = lax.Precision.HIGHEST
    tangent = lax.dot_general(lhs_dot, rhs, dimension_numbers, precision=high) + lax.dot_general(
        lhs, rhs_dot, dimension_numbers, precision=high
    )
    return out, tangent


def _parse_dot_inputs(*args: Any, **kwargs: Any) -> tuple[Any, Any, Any, Any]:
    assert len(args) == 3
    x, k, dimension_numbers = args
    return jnp.asarray(x, k.dtype), k, dimension_numbers, k.dtype


# ----------------------------------------------------------------------------- modules


class Fp8DotGeneralBase(Module):
    """The state shared by the fp8 products: scales and histories of absolute maxima.

    Creates, in the ``_overwrite_with_gradient`` collection, a scale (shape ``(1,)``,
    initially one) and an amax history (shape ``(amax_history_length,)``, initially zero)
    for each of the input, the kernel and the output gradient.

    Attributes:
        amax_history_length: how many past absolute maxima each history keeps; the
            scales follow the largest of them (default ``1024``).
        e4m3_dtype: the fp8 type the inputs and kernels are quantised to (default
            ``float8_e4m3fn``).
        e5m2_dtype: the fp8 type the output gradients are quantised to (default
            ``float8_e5m2``).
    """

    amax_history_length: int = 1024
    e4m3_dtype: Any = jnp.float8_e4m3fn
    e5m2_dtype: Any = jnp.float8_e5m2

    def setup(self) -> None:
        key = random.PRNGKey(0)
        scale = (initializers.ones_init(), key, (1,), jnp.float32)
        history = (initializers.zeros_init(), key, (self.amax_history_length,), jnp.float32)
        col = OVERWRITE_WITH_GRADIENT
        self.input_amax_history: Variable[Any] = self.variable(col, "input_amax_history", *history)
        self.kernel_amax_history: Variable[Any] = self.variable(
            col, "kernel_amax_history", *history
        )
        self.output_grad_amax_history: Variable[Any] = self.variable(
            col, "output_grad_amax_history", *history
        )
        self.input_scale: Variable[Any] = self.variable(col, "input_scale", *scale)
        self.kernel_scale: Variable[Any] = self.variable(col, "kernel_scale", *scale)
        self.output_grad_scale: Variable[Any] = self.variable(col, "output_grad_scale", *scale)


class Fp8DotGeneralOp(Fp8DotGeneralBase):
    """An fp8 ``dot_general`` that quantises and dequantises its operands, then multiplies.

    The product runs in the original dtype on values rounded through fp8, which lets the
    compiler fuse them into an fp8 product. Deprecated by Flax (it warns when built): use
    ``Fp8DirectDotGeneralOp``. Pass the class as a layer's ``dot_general_cls``.

    Attributes:
        amax_history_length: how many past absolute maxima each history keeps; the
            scales follow the largest of them (default ``1024``).
        e4m3_dtype: the fp8 type the inputs and kernels are quantised to (default
            ``float8_e4m3fn``).
        e5m2_dtype: the fp8 type the output gradients are quantised to (default
            ``float8_e5m2``).
    """

    def __post_init__(self) -> None:
        super().__post_init__()
        if type(self) is Fp8DotGeneralOp:
            warnings.warn(
                "The Fp8DotGeneralOp is deprecated. Use Fp8DirectDotGeneralOp or Fp8Einsum "
                "instead.",
                DeprecationWarning,
                stacklevel=2,
            )

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """Multiply through fp8, as ``jax.lax.dot_general`` would.

        Args:
            *args: ``jax.lax.dot_general``'s positional arguments: ``lhs`` (the input),
                ``rhs`` (the kernel), ``dimension_numbers``, then optionally
                ``precision`` and ``preferred_element_type``.
            **kwargs: the same arguments by keyword.

        Returns:
            The product, in the input's dtype.
        """
        x, k, dims, dtype = _parse_dot_inputs(*args, **kwargs)
        x_qdq = in_qdq(
            dtype, self.e4m3_dtype, x, self.input_scale.value, self.input_amax_history.value
        )
        k_qdq = in_qdq(
            dtype, self.e4m3_dtype, k, self.kernel_scale.value, self.kernel_amax_history.value
        )
        y = dot_general_with_precision(x_qdq, k_qdq, dims)
        return out_qdq(
            dtype,
            self.e5m2_dtype,
            y,
            self.output_grad_scale.value,
            self.output_grad_amax_history.value,
        )


class Fp8DirectDotGeneralOp(Fp8DotGeneralBase):
    """An fp8 ``dot_general`` computed directly on quantised operands (delayed scaling).

    Input and kernel are scaled and cast to ``e4m3_dtype``, the output gradient to
    ``e5m2_dtype`` on the way back, with scales from the recorded amax histories; each call
    updates the histories and scales, whose new values come back as their "gradients".
    Also exported as ``Fp8DotGeneral``. Pass the class as a layer's ``dot_general_cls``:

    >>> import jax, jax.numpy as jnp
    >>> from adapters import linen as nn
    >>> layer = nn.Dense(4, dot_general_cls=nn.Fp8DirectDotGeneralOp)
    >>> x = jnp.ones((2, 3))
    >>> variables = layer.init(jax.random.key(0), x)
    >>> sorted(variables["_overwrite_with_gradient"]["Fp8DirectDotGeneralOp_0"])[:2]
    ['input_amax_history', 'input_scale']
    >>> layer.apply(variables, x).shape
    (2, 4)

    Attributes:
        amax_history_length: how many past absolute maxima each history keeps; the
            scales follow the largest of them (default ``1024``).
        e4m3_dtype: the fp8 type the inputs and kernels are quantised to (default
            ``float8_e4m3fn``).
        e5m2_dtype: the fp8 type the output gradients are quantised to (default
            ``float8_e5m2``).
    """

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """Multiply in fp8, as ``jax.lax.dot_general`` would.

        Args:
            *args: ``jax.lax.dot_general``'s positional arguments: ``lhs`` (the input),
                ``rhs`` (the kernel), ``dimension_numbers``, then optionally
                ``precision`` and ``preferred_element_type``.
            **kwargs: the same arguments by keyword.

        Returns:
            The product, in the input's dtype.
        """
        x, k, dims, dtype = _parse_dot_inputs(*args, **kwargs)
        return fp8_scaled_dot_general(
            x,
            k,
            dims,
            precision=None,
            preferred_element_type=x.dtype,
            lhs_scale=self.input_scale.value,
            rhs_scale=self.kernel_scale.value,
            grad_scale=self.output_grad_scale.value,
            lhs_amax_history=self.input_amax_history.value,
            rhs_amax_history=self.kernel_amax_history.value,
            grad_amax_history=self.output_grad_amax_history.value,
            quantize_compute_type=dtype,
        )


class NANOOFp8DotGeneralOp(Fp8DotGeneralOp):
    """``Fp8DotGeneralOp`` with the ``fnuz`` fp8 types (no negative zero, no infinities).

    Attributes:
        amax_history_length: how many past absolute maxima each history keeps (default
            ``1024``).
        e4m3_dtype: the fp8 type of inputs and kernels (default ``float8_e4m3fnuz``).
        e5m2_dtype: the fp8 type of output gradients (default ``float8_e5m2fnuz``).
    """

    e4m3_dtype: Any = jnp.float8_e4m3fnuz
    e5m2_dtype: Any = jnp.float8_e5m2fnuz


class Fp8Einsum(Fp8DotGeneralBase):
    """An fp8 ``jnp.einsum``: every product inside it is a scaled fp8 ``dot_general``.

    A drop-in for ``jnp.einsum`` in layers that accept an einsum (e.g. attention's
    ``qk_attn_weights_einsum_cls``); the left operand is cast to the right one's dtype
    first, and the scales and histories are kept as in ``Fp8DirectDotGeneralOp``.

    Attributes:
        amax_history_length: how many past absolute maxima each history keeps; the
            scales follow the largest of them (default ``1024``).
        e4m3_dtype: the fp8 type the inputs and kernels are quantised to (default
            ``float8_e4m3fn``).
        e5m2_dtype: the fp8 type the output gradients are quantised to (default
            ``float8_e5m2``).
    """

    def __call__(
        self,
        eqn: str,
        lhs: Any,
        rhs: Any,
        precision: Any = None,
        preferred_element_type: Any = None,
    ) -> Any:
        """Evaluate the einsum with fp8 products.

        Args:
            eqn: the einsum equation, as for ``jnp.einsum``.
            lhs: the first operand (the input).
            rhs: the second operand (the kernel); its dtype is the computation's.
            precision: passed to ``jnp.einsum`` (default ``None``).
            preferred_element_type: the result dtype, passed to ``jnp.einsum`` (default
                ``None``).

        Returns:
            The einsum's result.
        """
        dtype = rhs.dtype
        dot = functools.partial(
            fp8_scaled_dot_general,
            lhs_scale=self.input_scale.value,
            rhs_scale=self.kernel_scale.value,
            grad_scale=self.output_grad_scale.value,
            lhs_amax_history=self.input_amax_history.value,
            rhs_amax_history=self.kernel_amax_history.value,
            grad_amax_history=self.output_grad_amax_history.value,
            quantize_compute_type=dtype,
        )
        return jnp.einsum(
            eqn,
            lhs.astype(dtype),
            rhs,
            precision=precision,
            preferred_element_type=preferred_element_type,
            _dot_general=dot,
        )


Fp8DotGeneral = Fp8DirectDotGeneralOp
