"""adapters.nnx.tabulate: the same table as flax.nnx.tabulate."""

import jax
import jax.numpy as jnp
import pytest
from flax import nnx as fnnx
from flax.nnx import summary as flax_summary

from adapters import nnx
from adapters.nnx import summary

PLAIN = {"force_terminal": False, "no_color": True, "width": 300}


def _block_model(lib):
    class Block(lib.Module):
        def __init__(self, rngs):
            self.linear = lib.Linear(3, 4, rngs=rngs)
            self.bn = lib.BatchNorm(4, rngs=rngs)
            self.dropout = lib.Dropout(0.5, rngs=rngs)

        def forward(self, x, *, scale=None):
            return jax.nn.relu(self.dropout(self.bn(self.linear(x))))

    class Model(lib.Module):
        def __init__(self, rngs):
            self.block = Block(rngs)
            self.head = lib.Linear(4, 2, rngs=rngs)

        def __call__(self, x):
            return self.head(self.block.forward(x, scale={}))

    return Model(lib.Rngs(0))


def test_table_matches_flax():
    x = jnp.ones((2, 3))
    ours = nnx.tabulate(_block_model(nnx), x, console_kwargs=PLAIN)
    theirs = fnnx.tabulate(_block_model(fnnx), x, console_kwargs=PLAIN)
    assert ours == theirs
    assert "block/forward" in ours and "scale: {}" in ours
    assert "Total Parameters: 44 (180 B)" in ours


def test_depth_flops_and_no_side_effects():
    model = _block_model(nnx)
    mean_before = jnp.copy(model.block.bn.mean[...])
    x = jnp.ones((2, 3))
    table = nnx.tabulate(model, x, depth=1, compute_flops=True, console_kwargs=PLAIN)
    header = table.splitlines()[2]
    assert "flops" in header and "vjp_flops" not in header
    assert "block/forward" not in table and "│ head " in table
    assert (model.block.bn.mean[...] == mean_before).all()  # tabulate runs on a clone


def test_non_graph_object_is_rejected():
    with pytest.raises(ValueError, match="Expected a graph node or Variable"):
        summary._collect_stats((), 3, {}, set())


@pytest.mark.parametrize(
    "value",
    [
        {"b": 1, "a": None},
        [jnp.ones(2), {}, None, [1, {}]],
        {"foo": {}, "x": jnp.ones(3)},
        ({}, jnp.ones(2)),
        ([], {}),
        None,
    ],
)
def test_cell_text_matches_flax(value):
    ours = summary._as_yaml_str(jax.tree.map(summary._to_dummy, value))
    theirs = flax_summary._as_yaml_str(jax.tree.map(flax_summary._to_dummy_array, value))
    assert ours == theirs
