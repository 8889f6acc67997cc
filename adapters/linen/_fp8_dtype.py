"""``fp8_meta32``: a float32 stand-in dtype whose cotangents accumulate by ``max``.

A scale or amax history used several times in a step (a loop, a shared layer) receives
one "gradient" per use; with this dtype JAX combines them with ``max`` instead of ``+``,
so the newest statistics survive. Built on JAX's extended-dtype hooks (as Flax's is).
"""

import dataclasses
from typing import Any

import jax
import numpy as np
from jax import lax
from jax._src import core, dtypes

try:
    from jax._src import earray as _earray  # noqa: F401
    from jax._src.interpreters import pxla as _pxla  # noqa: F401

    CAN_USE_EARRAY = True
except (ModuleNotFoundError, ImportError):  # pragma: no cover - older JAX
    CAN_USE_EARRAY = False


class _Fp8MetaRules:
    """How JAX treats arrays of the meta dtype: float32 storage, ``max`` accumulation."""

    @staticmethod
    def physical_element_aval(dtype: Any) -> Any:
        return core.ShapedArray((), dtype.float_dtype)

    @staticmethod
    def convert_from(meta_dtype: Any, other_dtype: Any) -> bool:
        return meta_dtype.float_dtype == other_dtype

    @staticmethod
    def convert_to(other_dtype: Any, meta_dtype: Any) -> bool:
        return meta_dtype.float_dtype == other_dtype

    @staticmethod
    def add(dt: Any, x: Any, y: Any) -> Any:
        as_float = lambda v: lax.convert_element_type(v, dt.float_dtype)
        return lax.convert_element_type(lax.max(as_float(x), as_float(y)), dt)

    @staticmethod
    def zero(dt: Any) -> Any:
        fdt = dt.float_dtype
        lowest = -np.inf if dtypes.supports_inf(fdt) else dtypes.finfo(fdt).min
        return lax.convert_element_type(np.array(lowest, fdt), dt)

    @staticmethod
    def tangent_dtype(dtype: Any) -> Any:
        return dtype

    @staticmethod
    def full(shape: Any, fill_value: Any, dtype: Any) -> Any:
        value = lax.convert_element_type(fill_value, dtype.float_dtype)
        return lax.convert_element_type(lax.full(shape, value, dtype.float_dtype), dtype)

    @staticmethod
    def global_sharded_result_handler(aval: Any, out_sharding: Any, committed: Any) -> Any:
        if not CAN_USE_EARRAY:
            raise NotImplementedError("convert back under the jit")
        from jax._src import earray
        from jax._src.interpreters import pxla

        physical = core.physical_aval(aval)
        handler = pxla.global_result_handlers[core.ShapedArray](physical, out_sharding, committed)
        return lambda bufs: earray.EArray(aval, handler(bufs))


class fp8_meta_dtype(dtypes.extended):
    """The scalar type of the fp8 meta dtypes."""


@dataclasses.dataclass(frozen=True)
class fp8_meta_dtype_wrapper(dtypes.ExtendedDType):
    """An fp8 meta dtype over ``float_dtype``."""

    float_dtype: Any
    _rules: Any = _Fp8MetaRules
    type: Any = fp8_meta_dtype

    def __repr__(self) -> str:
        return f"fp8_meta{dtypes.finfo(self.float_dtype).bits}"

    name = property(__repr__)  # type: ignore[assignment]  # pyright: ignore[reportAssignmentType]


fm32: fp8_meta_dtype_wrapper = fp8_meta_dtype_wrapper(jax.numpy.float32)
fp32_max_grad: fp8_meta_dtype_wrapper = fp8_meta_dtype_wrapper(jax.numpy.float32)
