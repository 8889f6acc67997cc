"""pm.tabulate: rows per submodule, call shapes, per-collection counts and bytes, FLOPs."""

import math
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import pytreemod as pm
from pytreemod import _tabulate
from pytreemod._tabulate import Summary, tabulate

F32 = jnp.float32


class Block(pm.Module):
    lin: pm.nn.Linear
    bn: pm.nn.BatchNorm
    drop: pm.nn.Dropout

    def __init__(self, n_in: int, n_out: int, *, key: jax.Array) -> None:
        self.lin = pm.nn.Linear(n_in, n_out, key=key)
        self.bn = pm.nn.BatchNorm(n_out)
        self.drop = pm.nn.Dropout(0.5)

    def __call__(self, x: jax.Array, key: jax.Array | None = None) -> jax.Array:
        return jax.nn.relu(self.drop(self.bn(self.lin(x)), key=key))


class Net(pm.Module):
    blocks: tuple[Block, ...]
    heads: dict[str, pm.nn.Linear]
    unused: pm.nn.Linear

    def __init__(self, *, key: jax.Array) -> None:
        k1, k2, k3, k4 = jax.random.split(key, 4)
        self.blocks = (Block(6, 8, key=k1), Block(8, 5, key=k2))
        self.heads = {"out": pm.nn.Linear(5, 3, key=k3)}
        self.unused = pm.nn.Linear(2, 2, key=k4)

    def __call__(self, x: jax.Array, *, key: jax.Array) -> jax.Array:
        k1, k2 = jax.random.split(key)
        h = self.blocks[1](self.blocks[0](x, key=k1), key=k2)
        return self.heads["out"](h)

    def features(self, x: jax.Array) -> jax.Array:
        return self.blocks[0].lin(x)


def sizes(tree: Any) -> tuple[int, int]:
    leaves = jax.tree.leaves(tree)
    return sum(x.size for x in leaves), sum(x.size * x.dtype.itemsize for x in leaves)


@pytest.fixture(scope="module")
def net() -> Net:
    return Net(key=jax.random.key(0))


@pytest.fixture(scope="module")
def summary(net: Net) -> Summary:
    return tabulate(net, jnp.ones((4, 6)), key=jax.random.key(1))


def test_every_submodule_has_a_row_in_tree_order(summary: Summary) -> None:
    names = [r.name for r in summary.rows]
    assert names == [
        "",
        ".blocks[0]",
        ".blocks[0].lin",
        ".blocks[0].bn",
        ".blocks[0].drop",
        ".blocks[1]",
        ".blocks[1].lin",
        ".blocks[1].bn",
        ".blocks[1].drop",
        ".heads.out",
        ".unused",
    ]
    assert [r.depth for r in summary.rows] == [0, 1, 2, 2, 2, 1, 2, 2, 2, 1, 1]
    assert summary.row(".blocks[1].bn").module_type is pm.nn.BatchNorm
    assert summary.rows[0].module_type is Net


def test_inputs_and_outputs_are_the_shapes_of_each_call(summary: Summary) -> None:
    sds = jax.ShapeDtypeStruct
    root = summary.rows[0]
    assert root.inputs is not None
    assert root.inputs[0] == (sds((4, 6), F32),)
    assert set(root.inputs[1]) == {"key"}
    assert root.outputs == sds((4, 3), F32)
    lin = summary.row(".blocks[1].lin")
    assert lin.inputs == ((sds((4, 8), F32),), {})
    assert lin.outputs == sds((4, 5), F32)
    assert summary.row(".heads.out").outputs == sds((4, 3), F32)


def test_uncalled_submodules_have_no_call_data(summary: Summary) -> None:
    row = summary.row(".unused")
    assert row.inputs is None and row.outputs is None and row.flops is None
    assert row.total == {"params": (6, 24)}


def test_counts_equal_the_sizes_of_the_arrays(net: Net, summary: Summary) -> None:
    assert summary.collections == ("params", "batch_stats")
    for col in summary.collections:
        assert summary.totals[col] == sizes(pm.state(net, col))
        assert summary.rows[0].total[col] == summary.totals[col]
    block = summary.row(".blocks[0]")
    assert block.own == {}  # everything it holds belongs to its submodules
    assert block.total["params"] == sizes(pm.state(net.blocks[0], "params"))
    assert block.total["batch_stats"] == (16, 64)
    lin = summary.row(".blocks[0].lin")
    assert lin.own == lin.total == {"params": (6 * 8 + 8, (6 * 8 + 8) * 4)}
    assert lin.variables == {"params": {"kernel": "f32[6, 8]", "bias": "f32[8]"}}
    assert summary.row(".blocks[0].bn").variables["batch_stats"] == {
        "mean": "f32[8]",
        "var": "f32[8]",
    }


def test_bytes_follow_each_dtype() -> None:
    class Mixed(pm.Module):
        w: pm.Param
        table: pm.Param
        count: pm.BatchStat
        raw: jax.Array

        def __call__(self, x: jax.Array) -> jax.Array:
            return x

    model = Mixed(
        pm.Param(jnp.ones((3, 4), jnp.bfloat16)),
        pm.Param(jnp.ones((10,), jnp.int8)),
        pm.BatchStat(jnp.zeros((2,), jnp.float32)),
        jnp.ones((5,), jnp.float16),  # a bare array counts as a parameter
    )
    s = tabulate(model, jnp.ones(2), compute_flops=False)
    assert s.totals == {"params": (12 + 10 + 5, 12 * 2 + 10 + 5 * 2), "batch_stats": (2, 8)}
    assert s.rows[0].variables["params"] == {"w": "bf16[3, 4]", "table": "i8[10]", "raw": "f16[5]"}
    text = str(s)
    assert "27 (44 B)" in text and "2 (8 B)" in text


def test_shared_variables_count_once() -> None:
    w = pm.Param(jnp.ones((4, 4)))

    class Tied(pm.Module):
        a: pm.Param
        b: pm.Param

        def __call__(self, x: jax.Array) -> jax.Array:
            return x @ self.a.value @ self.b.value

    s = tabulate(Tied(w, w), jnp.ones((1, 4)), compute_flops=False)
    assert s.totals == {"params": (16, 64)}


def test_flops_of_a_linear_layer_are_about_two_in_out_batch() -> None:
    n_in, n_out, batch = 16, 32, 8
    layer = pm.nn.Linear(n_in, n_out, key=jax.random.key(0))
    s = tabulate(layer, jnp.ones((batch, n_in)))
    assert s.flops is not None and s.flops > 0
    matmul = 2 * n_in * n_out * batch
    assert matmul <= s.flops <= matmul + 2 * batch * n_out  # the bias adds one per output
    assert s.rows[0].flops == s.flops
    assert f"FLOPs: {s.flops:,}" in str(s)


def test_forward_and_backward_flops() -> None:
    n_in, n_out, batch = 16, 32, 8
    layer = pm.nn.Linear(n_in, n_out, key=jax.random.key(0))

    class WithIndex(pm.Module):
        lin: pm.nn.Linear

        def __call__(self, x: jax.Array) -> tuple[jax.Array, jax.Array]:
            y = self.lin(x)
            return y, jnp.argmax(y, -1)  # an integer output gets a float0 cotangent

    s = tabulate(WithIndex(layer), jnp.ones((batch, n_in)), compute_vjp_flops=True)
    forward = s.row(".lin").flops
    backward = s.row(".lin").vjp_flops
    assert forward is not None and backward is not None
    # the backward pass multiplies twice more (for the kernel and for the input)
    assert 2.5 * forward <= backward <= 3.5 * forward
    assert s.vjp_flops is not None and s.vjp_flops >= backward
    text = str(s)
    assert "vjp_flops" in text and f"FLOPs of forward and backward pass: {s.vjp_flops:,}" in text
    only = tabulate(layer, jnp.ones((batch, n_in)), compute_flops=False, compute_vjp_flops=True)
    assert only.flops is None and only.vjp_flops == backward
    header = next(line for line in str(only).splitlines() if "path" in line)
    assert "vjp_flops" in header and "flops ┃" not in header.replace("vjp_flops", "")


def test_each_row_gets_its_own_flops(summary: Summary) -> None:
    lin = summary.row(".blocks[0].lin")
    assert lin.flops is not None and lin.flops >= 2 * 4 * 6 * 8
    block = summary.row(".blocks[0]")
    assert block.flops is not None and block.flops > lin.flops
    assert summary.flops is not None and summary.flops > block.flops


def test_cost_analysis_forms() -> None:
    flops = _tabulate._cost_flops
    assert flops({"flops": 12.0, "bytes accessed": 3.0}) == 12
    assert flops([{"flops": 7.0}]) == 7  # older JAX: one dict per computation
    assert flops([]) is None
    assert flops(None) is None
    assert flops({"bytes accessed": 3.0}) is None
    assert flops({"flops": -1.0}) is None  # backends report -1 for "unknown"


def test_a_backend_without_cost_analysis_gives_no_flops(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(jax.stages.Lowered, "cost_analysis", lambda self: None)
    monkeypatch.setattr(jax.stages.Compiled, "cost_analysis", lambda self: [])
    layer = pm.nn.Linear(2, 3, key=jax.random.key(0))
    s = tabulate(layer, jnp.ones((1, 2)))
    assert s.flops is None and s.rows[0].flops is None
    assert "FLOPs:" not in str(s)


def test_depth_limits_rows_but_totals_include_children(net: Net) -> None:
    x = jnp.ones((4, 6))
    top = tabulate(net, x, key=jax.random.key(1), depth=0, compute_flops=False)
    assert [r.name for r in top.rows] == [""]
    assert top.rows[0].total == top.totals
    one = tabulate(net, x, key=jax.random.key(1), depth=1, compute_flops=False)
    assert [r.name for r in one.rows] == ["", ".blocks[0]", ".blocks[1]", ".heads.out", ".unused"]
    assert one.row(".blocks[1]").total["params"] == (8 * 5 + 5 + 5 + 5, (8 * 5 + 15) * 4)


def test_without_flops_there_is_no_flops_column(net: Net) -> None:
    s = tabulate(net, jnp.ones((4, 6)), key=jax.random.key(1), compute_flops=False)
    assert s.flops is None and all(r.flops is None for r in s.rows)
    header = next(line for line in str(s).splitlines() if "path" in line)
    assert "flops" not in header and "params" in header


def test_repeated_calls_are_listed_on_request() -> None:
    class Twice(pm.Module):
        lin: pm.nn.Linear

        def __call__(self, x: jax.Array) -> jax.Array:
            return self.lin(self.lin(x)[..., :3])

    model = Twice(pm.nn.Linear(3, 5, key=jax.random.key(0)))
    x = jnp.ones((2, 3))
    once = tabulate(model, x, compute_flops=False)
    assert [r.name for r in once.rows] == ["", ".lin"]
    both = tabulate(model, x, show_repeated=True)
    assert [(r.name, r.repeated) for r in both.rows] == [
        ("", False),
        (".lin", False),
        (".lin", True),
    ]
    second = both.rows[2]
    assert second.total == {} and second.flops is not None
    assert second.inputs == ((jax.ShapeDtypeStruct((2, 3), F32),), {})
    assert "(repeated call)" in str(both)


def test_other_methods_and_bound_methods(net: Net) -> None:
    x = jnp.ones((4, 6))
    by_name = tabulate(net, x, method="features", compute_flops=False)
    by_method = tabulate(net.features, x, compute_flops=False)
    for s in (by_name, by_method):
        assert s.rows[0].method == "features"
        assert s.rows[0].outputs == jax.ShapeDtypeStruct((4, 8), F32)
        assert s.row(".blocks[0]").inputs is None  # not called by `features`
        assert s.row(".blocks[0].lin").inputs is not None
        assert "Net (features)" in str(s)


def test_stochastic_and_stateful_layers_need_keys_and_mutable(net: Net) -> None:
    x = jnp.ones((4, 6))
    with pytest.raises(pm.StateWriteError, match=r"Cannot update \.blocks\[0\]\.bn\.mean"):
        tabulate(net, x, key=jax.random.key(1), mutable=False)
    with pytest.raises(ValueError, match=r"needs a PRNG key") as info:
        tabulate(net.blocks[0], x)
    assert any(".drop, a Dropout" in note for note in getattr(info.value, "__notes__", []))


def test_a_rejected_input_names_the_submodule(net: Net) -> None:
    with pytest.raises(pm.ShapeError, match="in_features") as info:
        tabulate(net, jnp.ones((4, 7)), key=jax.random.key(1))
    notes = [n for n in getattr(info.value, "__notes__", []) if "pm.tabulate" in n]
    assert len(notes) == 1  # the innermost call only
    assert ".blocks[0].lin, a Linear, on inputs (f32[4, 7])" in notes[0]


def test_no_class_is_patched_while_the_model_runs(net: Net) -> None:
    seen: list[Any] = []

    class Probe(pm.Module):
        inner: Net

        def __call__(self, x: jax.Array, *, key: jax.Array) -> jax.Array:
            # Read while pm.tabulate runs the model: the classes hold what they held.
            seen.extend(cls.__dict__["__call__"] for cls in (Probe, Net, pm.nn.Linear))
            return self.inner(x, key=key)

    before = [cls.__dict__["__call__"] for cls in (Probe, Net, pm.nn.Linear)]
    s = tabulate(Probe(net), jnp.ones((4, 6)), key=jax.random.key(1), compute_flops=False)
    assert seen == before
    assert s.row(".inner.blocks[0].lin").inputs is not None  # and calls were recorded
    # Outside pm.tabulate a call is the plain bound method.
    assert net.__call__.__func__ is Net.__dict__["__call__"].__func__


def test_abstract_models_and_inputs(net: Net) -> None:
    abstract = jax.eval_shape(lambda: Net(key=jax.random.key(0)))
    x = jax.ShapeDtypeStruct((2, 6), F32)
    s = tabulate(abstract, x, key=jax.random.key(1))
    assert s.totals == sizes_of_abstract(abstract)
    assert s.rows[0].outputs == jax.ShapeDtypeStruct((2, 3), F32)
    assert s.flops is not None and s.flops > 0


def sizes_of_abstract(model: Any) -> dict[str, tuple[int, int]]:
    out: dict[str, tuple[int, int]] = {}
    for col, state in pm.to_variables(model).items():
        leaves = jax.tree.leaves(state)
        n = sum(math.prod(x.shape) for x in leaves)
        out[col] = (n, sum(math.prod(x.shape) * x.dtype.itemsize for x in leaves))
    return out


def test_a_super_call_is_one_row() -> None:
    class Scaled(pm.nn.Linear):
        def __init__(self, n_in: int, n_out: int, *, key: jax.Array) -> None:
            super().__init__(n_in, n_out, key=key)

        def __call__(self, x: Any) -> Any:  # pyright: ignore[reportIncompatibleMethodOverride]
            return 2 * super().__call__(x)

    class Wrap(pm.Module):
        inner: Scaled

        def __call__(self, x: jax.Array) -> jax.Array:
            return self.inner(x)

    model = Wrap(Scaled(3, 4, key=jax.random.key(0)))
    s = tabulate(model, jnp.ones((1, 3)), show_repeated=True, compute_flops=False)
    assert [r.name for r in s.rows] == ["", ".inner"]


def test_text_rendering(summary: Summary) -> None:
    text = str(summary)
    lines = text.splitlines()
    assert "Net Summary" in lines[0]
    assert "\x1b[" not in text  # plain text, no terminal codes
    for name in ("path", "type", "inputs", "outputs", "flops", "params", "batch_stats"):
        assert name in lines[2]
    for row in summary.rows:
        if row.name:
            assert row.name in text
    assert "key=key<fry>[]" in text
    assert "kernel: f32[6, 8]" in text
    assert "Total" in text and "Total variables:" in text
    assert all(line == line.rstrip() for line in lines)
    assert repr(summary).startswith("Summary(")

    class Printer:  # what IPython passes to _repr_pretty_
        def __init__(self) -> None:
            self.out = ""

        def text(self, text: str) -> None:
            self.out += text

    printer = Printer()
    summary._repr_pretty_(printer, False)
    assert printer.out == text


def test_rendering_options(net: Net) -> None:
    s = tabulate(
        net,
        jnp.ones((4, 6)),
        key=jax.random.key(1),
        depth=1,
        compute_flops=False,
        console_kwargs={"width": 60},
        table_kwargs={"title": "My model"},
        column_kwargs={"no_wrap": False},
    )
    text = str(s)
    assert "My model" in text and "Net Summary" not in text
    assert max(len(line) for line in text.splitlines()) <= 60


def test_rich_and_print(summary: Summary, capsys: pytest.CaptureFixture[str]) -> None:
    import rich.table

    table = summary.__rich__()
    assert isinstance(table, rich.table.Table)
    assert [c.header for c in table.columns][:4] == ["path", "type", "inputs", "outputs"]
    summary.print(width=200, force_terminal=False)
    assert ".blocks[0].lin" in capsys.readouterr().out


def test_row_lookup_error(summary: Summary) -> None:
    with pytest.raises(KeyError, match=r"No row with path '\.nope'"):
        summary.row(".nope")


def test_bad_arguments(net: Net) -> None:
    x = jnp.ones((4, 6))
    with pytest.raises(TypeError, match=r"summarises a pytreemod Module .* got function"):
        tabulate(lambda x: x, x)
    with pytest.raises(ValueError, match=r"depth must be None or >= 0, got -1"):
        tabulate(net, x, depth=-1)
    with pytest.raises(AttributeError, match=r"Net has no method 'encode'"):
        tabulate(net, x, method="encode")


def test_numpy_and_python_inputs() -> None:
    class Add(pm.Module):
        def __call__(self, x: Any, scale: float = 1.0, *, tag: str = "") -> Any:
            return x * scale

    s = tabulate(Add(), np.ones((2,), np.float32), 3.0, tag="a", compute_flops=False)
    assert s.rows[0].inputs == ((jax.ShapeDtypeStruct((2,), F32), 3.0), {"tag": "a"})
    assert "tag='a'" in str(s) and "3.0" in str(s)


def test_calls_inside_a_transform_over_the_model_are_not_attributed() -> None:
    class Stack(pm.Module):
        layers: pm.nn.Linear

        def __call__(self, x: jax.Array) -> jax.Array:
            def body(x: jax.Array, layer: pm.nn.Linear) -> tuple[jax.Array, None]:
                return layer(x), None

            scan = pm.scan(body, in_axes=(pm.Carry, 0), out_axes=(pm.Carry, 0))
            return scan(x, self.layers)[0]

    keys = jax.random.split(jax.random.key(0), 3)
    stack = Stack(jax.vmap(lambda k: pm.nn.Linear(4, 4, key=k))(keys))
    s = tabulate(stack, jnp.ones((2, 4)))
    assert [r.name for r in s.rows] == ["", ".layers"]
    assert s.row(".layers").inputs is None  # called on slices rebuilt by the scan
    assert s.totals == {"params": (3 * 20, 3 * 20 * 4)}
    assert s.rows[0].outputs == jax.ShapeDtypeStruct((2, 4), F32)
