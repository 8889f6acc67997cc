"""How ``tabulate`` shows a value: arrays as ``dtype[shape]``, partitioned boxes with
their axis names, everything else by ``repr``; and the way back to abstract inputs
(``jax.ShapeDtypeStruct``) for the FLOP estimates.

The call records of ``_context`` store their inputs and outputs in this form, so it sits
below both the call context and the summary table.
"""

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from ...core import meta


class _ValueRepresentation:
    """How a value is shown in the table."""

    def render(self) -> str:
        raise NotImplementedError


@dataclasses.dataclass
class _ArrayRepresentation(_ValueRepresentation):
    shape: tuple[int, ...]
    dtype: Any

    @classmethod
    def from_array(cls, x: Any) -> "_ArrayRepresentation":
        return cls(tuple(jnp.shape(x)), jnp.result_type(x))

    @classmethod
    def render_array(cls, x: Any) -> str:
        return cls.from_array(x).render()

    def render(self) -> str:
        return f"[dim]{self.dtype}[/dim][{','.join(str(d) for d in self.shape)}]"


@dataclasses.dataclass
class _PartitionedArrayRepresentation(_ValueRepresentation):
    array_representation: _ArrayRepresentation
    names: Any

    @classmethod
    def from_partitioned(cls, partitioned: Any) -> "_PartitionedArrayRepresentation":
        return cls(_ArrayRepresentation.from_array(partitioned.value), partitioned.names)

    def render(self) -> str:
        return self.array_representation.render() + f" [dim]P[/dim]{self.names}"


@dataclasses.dataclass
class _ObjectRepresentation(_ValueRepresentation):
    obj: Any

    def render(self) -> str:
        return repr(self.obj)


def _get_value_representation(x: Any) -> _ValueRepresentation:
    if isinstance(x, int | float | bool | type(None)) or (
        isinstance(x, np.ndarray) and np.isscalar(x)
    ):
        return _ObjectRepresentation(x)
    if isinstance(x, meta.Partitioned):
        return _PartitionedArrayRepresentation.from_partitioned(x)
    if not (hasattr(x, "shape") and hasattr(x, "dtype")) and not isinstance(x, np.generic):
        return _ObjectRepresentation(x)
    try:
        return _ArrayRepresentation.from_array(x)
    except Exception:
        return _ObjectRepresentation(x)


def _from_value_representation(x: Any) -> Any:
    if isinstance(x, _ArrayRepresentation):
        return jax.ShapeDtypeStruct(x.shape, x.dtype)
    if isinstance(x, _PartitionedArrayRepresentation):
        rep = x.array_representation
        return jax.ShapeDtypeStruct(rep.shape, rep.dtype)
    if isinstance(x, _ObjectRepresentation):
        return x.obj
    raise TypeError(x, type(x))


def _represent_tree(x: Any) -> Any:
    """Every leaf of ``x`` (boxes kept whole) as its value representation."""
    return jax.tree_util.tree_map(
        _get_value_representation,
        x,
        is_leaf=lambda v: v is None or isinstance(v, meta.Partitioned),
    )


def _maybe_render(x: Any) -> str:
    return x.render() if hasattr(x, "render") else repr(x)
