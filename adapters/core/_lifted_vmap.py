"""The lifted ``vmap``: ``pack`` plus ``pytreemod.vmap``.

The variable groups are plain dicts, so they go into ``pm.vmap`` as arguments, each with
its axis from ``variable_axes`` (``None`` broadcasts) in ``pm.vmap``'s ``in_axes``; the rng
groups go in split (axis 0) or whole. Axis-metadata boxes go in and come out as they are,
with ``metadata_params``: ``pm.vmap`` removes the mapped axis from the boxes of mapped
groups before mapping and adds it to the boxes of mapped outputs after (Flax's order).
There is no second implementation of vmap, or of the box axes, here.
"""

from collections.abc import Callable, Mapping
from typing import Any

import pytreemod as pm

from ._lift import pack
from ._lift_util import unzip2
from ._lifted_axes import (
    axis_leaves,
    check_partition_name,
    mapped_size,
    per_arg,
    split_in_out_axes,
    split_keys,
)


def vmap(
    fn: Callable[..., Any],
    variable_axes: Mapping[Any, Any],
    split_rngs: Mapping[Any, bool],
    in_axes: Any = 0,
    out_axes: Any = 0,
    axis_size: int | None = None,
    axis_name: str | None = None,
    spmd_axis_name: str | None = None,
    metadata_params: Mapping[Any, Any] | None = None,
) -> Callable[..., Any]:
    """A lifted ``jax.vmap``: ``pack`` plus ``pytreemod.vmap``.

    **Arguments:**

    - ``fn``: a scope function ``fn(scope, *args)``.
    - ``variable_axes``: ``{collection_filter: axis}``; each group is lifted with that
      axis (``None``: shared/broadcast). Wrap an axis in ``In``/``Out`` to use it only for
      inputs/outputs. Collections no filter matches are not available inside.
    - ``split_rngs``: ``{rng_filter: bool}``; split streams get a different key per
      index, the others the same key.
    - ``in_axes``/``out_axes``: as in ``jax.vmap``, for the arguments after the scope and
      for the output.
    - ``axis_size``, ``axis_name``, ``spmd_axis_name``: as in ``jax.vmap``.
    - ``metadata_params``: passed to ``pm.vmap``, which calls the axis-metadata boxes'
      ``remove_axis`` on the way in and ``add_axis`` on the way out with it (e.g.
      ``{pm.PARTITION_NAME: 'heads'}``).

    >>> import jax, jax.numpy as jnp
    >>> from adapters.core import init, lift, nn
    >>> batch_dense = lift.vmap(nn.dense, variable_axes={'params': 0},
    ...                         split_rngs={'params': True}, in_axes=(0, None))
    >>> y, v = init(batch_dense)(jax.random.key(0), jnp.ones((3, 2)), 4)
    >>> v['params']['kernel'].shape
    (3, 2, 4)
    """
    var_in, var_out = split_in_out_axes(variable_axes)
    in_groups, in_axes_v = unzip2(var_in.items())
    out_groups, out_axes_v = unzip2(var_out.items())
    rng_filters, rng_splits = unzip2(split_rngs.items())
    rng_axes = tuple(0 if split else None for split in rng_splits)
    params = dict(metadata_params or {})

    def inner(
        scope_fn: Callable[..., Any],
        repack_fn: Callable[..., Any],
        variable_groups: Any,
        rng_groups: Any,
        *args: Any,
    ) -> Any:
        arg_axes = per_arg(in_axes, len(args), "lift.vmap in_axes")
        if any(rng_splits):
            pairs = axis_leaves(tuple(in_axes_v), tuple(variable_groups), "variable_axes")
            pairs += axis_leaves(arg_axes, args, "in_axes")
            size = mapped_size(axis_size, pairs, "mapped axis size", "vmap")
            rng_groups = tuple(
                split_keys(g, size) if split else g for g, split in zip(rng_groups, rng_splits)
            )

        check_partition_name(variable_groups, in_axes_v, params)

        def mapped(variable_groups: Any, rng_groups: Any, *args: Any) -> Any:
            scope = scope_fn(variable_groups, rng_groups)
            y = fn(scope, *args)
            return y, repack_fn(scope)

        y, out_groups = pm.vmap(
            mapped,
            in_axes=(tuple(in_axes_v), rng_axes, *arg_axes),
            out_axes=(out_axes, tuple(out_axes_v)),
            axis_size=axis_size,
            axis_name=axis_name,
            spmd_axis_name=spmd_axis_name,
            metadata_params=params,
        )(tuple(variable_groups), tuple(rng_groups), *args)
        check_partition_name(out_groups, out_axes_v, params)
        return y, out_groups

    return pack(inner, in_groups, out_groups, rng_filters, name="vmap")
