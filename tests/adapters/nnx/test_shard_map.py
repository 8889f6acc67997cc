"""``nnx.shard_map`` as ``pm.shard_map`` plus the graph's split/merge: Variable metadata
kept across it, numbers traced as JAX traces them, changes written back, as in Flax."""

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx as fnnx
from jax.sharding import AxisType
from jax.sharding import PartitionSpec as P

from adapters import nnx

MESH = jax.make_mesh((8,), ("data",), axis_types=(AxisType.Auto,))


def _run(lib: Any, graph: bool, updates: bool) -> tuple[Any, ...]:
    class Counter(lib.Module):
        def __init__(self) -> None:
            self.count = lib.Variable(0)
            self.w = lib.Param(jnp.arange(2.0), tag=("x",))

    m = Counter()
    seen: list[Any] = []

    @lib.shard_map(
        mesh=MESH,
        in_specs=(P(), P("data")),
        out_specs=P("data"),
        graph=graph,
        graph_updates=updates,
    )
    def f(m: Any, x: jax.Array) -> jax.Array:
        seen.append((m.w.get_metadata("tag"), x.shape, isinstance(m.count[...], jax.Array)))
        m.count[...] += 1
        return x * m.w[...].sum()

    y = f(m, jnp.ones(8))
    return (
        np.asarray(y).tolist(),
        int(m.count[...]),
        isinstance(m.count[...], jax.Array),
        m.w.get_metadata("tag"),
        seen,
    )


@pytest.mark.parametrize(("graph", "updates"), [(True, True), (True, False), (False, False)])
def test_metadata_numbers_and_updates_match_flax(graph: bool, updates: bool) -> None:
    ours = _run(nnx, graph, updates)
    assert ours == _run(fnnx, graph, updates)
    assert ours[:2] == ([1.0] * 8, 1) and ours[4] == [(("x",), (1,), True)]
