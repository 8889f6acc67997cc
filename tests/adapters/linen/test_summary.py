"""``tabulate`` / ``Module.tabulate``: the same table as flax.linen's for the same model,
rows per call, depth, repeated calls, totals and FLOPs."""

from typing import Any

import jax
import jax.numpy as jnp
import pytest

import adapters.linen as nn
from adapters.linen import summary

from ._flax_compare import flax_linen, standard

CONSOLE = dict(force_terminal=False, no_color=True, width=300)
X = jnp.ones((2, 5))


def _mlp(m: Any) -> Any:
    class Block(m.Module):
        features: int

        @m.compact
        def __call__(self, x: jax.Array) -> jax.Array:
            return m.relu(m.Dense(self.features)(x))

    class MLP(m.Module):
        @m.compact
        def __call__(self, x: jax.Array) -> jax.Array:
            x = Block(4)(x)
            x = Block(3, name="second")(x)
            return m.Dense(2, use_bias=False)(x)

    return MLP()


@pytest.mark.parametrize("depth", [None, 1])
def test_table_matches_flax(depth: int | None) -> None:
    fl = flax_linen()
    with standard():
        theirs = _mlp(fl).tabulate(jax.random.key(0), X, depth=depth, console_kwargs=CONSOLE)
        ours = _mlp(nn).tabulate(jax.random.key(0), X, depth=depth, console_kwargs=CONSOLE)
    assert ours == theirs


def test_rows_paths_inputs_and_counts() -> None:
    table = summary._get_module_table(
        _mlp(nn), depth=None, show_repeated=False, compute_flops=True, compute_vjp_flops=False
    )(jax.random.key(0), X)
    assert [row.path for row in table] == [
        (),
        ("Block_0",),
        ("Block_0", "Dense_0"),
        ("second",),
        ("second", "Dense_0"),
        ("Dense_0",),
    ]
    assert table[1].inputs.shape == (2, 5) and table[1].outputs.shape == (2, 4)
    assert table[2].size_and_bytes(["params"]) == {"params": (24, 96)}
    assert table[0].module_variables == {"params": {}}
    assert all(row.flops > 0 for row in table) and table[0].vjp_flops == -1


def test_repeated_calls_and_batch_stats_totals() -> None:
    class Shared(nn.Module):
        @nn.compact
        def __call__(self, x: jax.Array) -> jax.Array:
            dense = nn.Dense(5)
            x = nn.BatchNorm(use_running_average=False)(dense(dense(x)))
            return x

    text = nn.tabulate(Shared(), jax.random.key(0), console_kwargs=CONSOLE)(X)
    assert "Total Parameters: 50 (200 B)" in text
    assert "mean: float32[5]" in text and "batch_stats" in text
    repeated = Shared().tabulate(jax.random.key(0), X, show_repeated=True, console_kwargs=CONSOLE)
    assert repeated.count("│ Dense_0 ") == 2 and text.count("│ Dense_0 ") == 1


def test_partitioned_parameters_show_their_names() -> None:
    init = nn.with_partitioning(jax.nn.initializers.ones, ("a", "b"))
    text = nn.Dense(3, kernel_init=init).tabulate(jax.random.key(0), X, console_kwargs=CONSOLE)
    assert "float32[5,3] P(a, b)" in text


@pytest.mark.parametrize(
    "value",
    [
        {"a": {"b": "x", "c": [1, 2]}, "d": None, "e": True},
        [{"a": 1, "b": {"c": 2}}, [3, 4]],
        {"empty": {}, "list": [], "nested": {"k": ("t", "u")}},
    ],
)
def test_yaml_text_matches_pyyaml(value: Any) -> None:
    yaml = pytest.importorskip("yaml")
    expected = yaml.safe_dump(value, default_flow_style=False, indent=2, sort_keys=False)
    expected = expected.replace("\n...", "").replace("'", "").strip()
    assert summary._as_yaml_str(value) == expected


def test_flops_of_calls_inside_a_lifted_transform() -> None:
    class Cell(nn.Module):
        @nn.compact
        def __call__(self, carry: jax.Array, x: jax.Array) -> tuple[jax.Array, jax.Array]:
            h = nn.Dense(4, name="proj")(jnp.concatenate([carry, x], -1))
            return h, h

    class Loop(nn.Module):
        @nn.compact
        def __call__(self, xs: jax.Array) -> jax.Array:
            scan = nn.scan(
                Cell,
                variable_broadcast="params",
                split_rngs={"params": False},
                in_axes=1,
                out_axes=1,
            )
            return scan(name="cell")(jnp.zeros((xs.shape[0], 4)), xs)[1]

    with jax.check_tracer_leaks(True):
        text = Loop().tabulate(
            jax.random.key(0), jnp.ones((2, 5, 3)), compute_flops=True, console_kwargs=CONSOLE
        )
    assert "cell/proj" in text and "flops" in text
