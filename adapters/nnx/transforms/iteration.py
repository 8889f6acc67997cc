"""NNX's iteration transforms: ``vmap``, ``pmap``, ``scan``, ``while_loop``, ``fori_loop``.

Each is a pytreemod transform (``pm.vmap``, ``pm.pmap``, ``pm.scan``, ``pm.while_loop``,
``pm.fori_loop``) plus the split/merge of the arguments' object graph: the graph nodes are
split together, their state travels through the transform as flat arrays with one axis
each, and the caller's objects are updated in place afterwards (see ``_iteration_lift``).
``in_axes``/``out_axes`` are JAX prefixes over the arguments, with
``StateAxes({filter: axis})`` in place of an axis to give a node's substates different
axes and ``Carry`` marking scan's loop state; they are resolved to one axis per lowered
array before the pytreemod transform sees them.

The lowered state keeps JAX's semantics: its Python numbers are arrays
(``general.trace_numbers``; JAX traces them, pytreemod keeps them static), so
``while_loop(..., (m, x, 3.0))`` counts down a traced float. ``nnx.scan`` makes one
``pm.scan`` per scanned function, which keeps one traced body per structure: a scanned
function called again on the same structure is not traced again.
"""

from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from types import MappingProxyType
from typing import Any, TypeVar, overload

from ._iteration_axes import Carry as Carry
from ._iteration_axes import StateAxes as StateAxes
from ._iteration_loop import fori_loop as fori_loop
from ._iteration_loop import transform_metadata as transform_metadata
from ._iteration_loop import while_loop as while_loop
from ._iteration_map import default_mode, make_mapped, pmap_mapper, vmap_mapper
from ._iteration_scan import scan as scan

F = TypeVar("F", bound=Callable[..., Any])
_EMPTY: Mapping[str, Any] = MappingProxyType({})

__all__ = [
    "Carry",
    "StateAxes",
    "fori_loop",
    "pmap",
    "scan",
    "transform_metadata",
    "vmap",
    "while_loop",
]


@overload
def vmap(
    f: None = None,
    *,
    in_axes: Any = 0,
    out_axes: Any = 0,
    axis_name: Hashable | None = None,
    axis_size: int | None = None,
    spmd_axis_name: Any = None,
    transform_metadata: Mapping[str, Any] = _EMPTY,
    graph: bool | None = None,
    graph_updates: bool | None = None,
) -> Callable[[F], F]: ...
@overload
def vmap(
    f: F,
    *,
    in_axes: Any = 0,
    out_axes: Any = 0,
    axis_name: Hashable | None = None,
    axis_size: int | None = None,
    spmd_axis_name: Any = None,
    transform_metadata: Mapping[str, Any] = _EMPTY,
    graph: bool | None = None,
    graph_updates: bool | None = None,
) -> F: ...
def vmap(
    f: Callable[..., Any] | None = None,
    *,
    in_axes: Any = 0,
    out_axes: Any = 0,
    axis_name: Hashable | None = None,
    axis_size: int | None = None,
    spmd_axis_name: Any = None,
    transform_metadata: Mapping[str, Any] = _EMPTY,
    graph: bool | None = None,
    graph_updates: bool | None = None,
) -> Any:
    """Reference-aware ``jax.vmap``: Modules and Variables in the arguments are mapped
    like pytrees (``in_axes=(None, 0)`` broadcasts the first argument's state), and the
    changes ``f`` makes to them are seen by the caller.

    ``in_axes``/``out_axes`` take ``StateAxes({filter: axis})`` in place of an axis to map
    a node's substates differently; ``transform_metadata={nnx.PARTITION_NAME: name}`` adds
    the mapped axis to the Variables' sharding metadata. ``graph=False`` treats Modules as
    plain pytrees (no shared Variables, no ``StateAxes``).

    Example::

        >>> from adapters import nnx
        >>> import jax.numpy as jnp
        >>> model = nnx.Linear(2, 3, rngs=nnx.Rngs(0))
        >>> nnx.vmap(lambda m, x: m(x), in_axes=(None, 0))(model, jnp.ones((5, 2))).shape
        (5, 3)
    """
    graph, graph_updates = default_mode(graph, graph_updates)
    if f is None:
        return lambda g: vmap(
            g,
            in_axes=in_axes,
            out_axes=out_axes,
            axis_name=axis_name,
            axis_size=axis_size,
            spmd_axis_name=spmd_axis_name,
            transform_metadata=transform_metadata,
            graph=graph,
            graph_updates=graph_updates,
        )
    return make_mapped(
        f,
        "vmap",
        vmap_mapper(axis_name, axis_size, spmd_axis_name),
        in_axes=in_axes,
        out_axes=out_axes,
        graph=graph,
        graph_updates=graph_updates,
        transform_metadata=transform_metadata,
    )


def pmap(
    f: Callable[..., Any] | None = None,
    *,
    axis_name: Hashable | None = None,
    in_axes: Any = 0,
    out_axes: Any = 0,
    static_broadcasted_argnums: int | Iterable[int] = (),
    devices: Sequence[Any] | None = None,
    backend: str | None = None,
    axis_size: int | None = None,
    donate_argnums: int | Iterable[int] = (),
    transform_metadata: Mapping[str, Any] = _EMPTY,
    graph: bool | None = None,
    graph_updates: bool | None = None,
) -> Any:
    """Reference-aware ``jax.pmap`` (``pm.pmap`` on the lowered state), with ``vmap``'s
    handling of Modules and axes.

    ``static_broadcasted_argnums`` names arguments passed to ``f`` as they are, the same
    on every device (not traced; their ``in_axes`` entry is ignored). ``donate_argnums``
    names arguments whose arrays (a Module's Variables included) are donated to the
    computation; the caller's Modules get the new values afterwards, as in Flax.
    """
    graph, graph_updates = default_mode(graph, graph_updates)
    if f is None:
        return lambda g: pmap(
            g,
            axis_name=axis_name,
            in_axes=in_axes,
            out_axes=out_axes,
            static_broadcasted_argnums=static_broadcasted_argnums,
            devices=devices,
            backend=backend,
            axis_size=axis_size,
            donate_argnums=donate_argnums,
            transform_metadata=transform_metadata,
            graph=graph,
            graph_updates=graph_updates,
        )
    options: dict[str, Any] = {"axis_name": axis_name, "devices": devices, "backend": backend}
    if axis_size is not None:
        options["axis_size"] = axis_size
    return make_mapped(
        f,
        "pmap",
        pmap_mapper(**options),
        in_axes=in_axes,
        out_axes=out_axes,
        graph=graph,
        graph_updates=graph_updates,
        transform_metadata=transform_metadata,
        static_argnums=_argnums(static_broadcasted_argnums),
        donate_argnums=_argnums(donate_argnums),
    )


def _argnums(argnums: int | Iterable[int]) -> tuple[int, ...]:
    return (argnums,) if isinstance(argnums, int) else tuple(argnums)
