"""Sharding from axis metadata: logical axis rules, partition specs, shardings, constraints.

conftest.py gives JAX 8 simulated CPU devices, so the meshes here are real 2x4 meshes.
"""

import threading
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from jax.sharding import AxisType, Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

import pytreemod as pm

RULES = (("batch", "data"), ("embed", None), ("mlp", "model"))
LAYERS = {pm.PARTITION_NAME: "layers"}
EMBED, HIDDEN, BATCH, DEPTH = 16, 32, 8, 12


def _f32(*shape: int) -> jax.Array:
    return jnp.ones(shape, dtype=jnp.float32)


@pytest.fixture
def mesh() -> Mesh:
    # Auto axes: XLA's sharding propagation (GSPMD), the model Flax's logical rules target.
    return jax.make_mesh((2, 4), ("data", "model"), axis_types=(AxisType.Auto, AxisType.Auto))


@pytest.fixture
def explicit_mesh() -> Mesh:
    return jax.make_mesh((2, 4), ("data", "model"), axis_types=(AxisType.Explicit,) * 2)


# ----------------------------------------------------------------------------- a model


class Dense(pm.Module):
    weight: pm.Param
    bias: pm.Param

    def __init__(self, n_in: int, n_out: int, names: tuple[str, str], *, key: jax.Array):
        kernel_init = pm.with_partitioning(jax.nn.initializers.lecun_normal(), names)
        bias_init = pm.with_partitioning(jax.nn.initializers.zeros, names[1:])
        self.weight = pm.Param(kernel_init(key, (n_in, n_out)))
        self.bias = pm.Param(bias_init(key, (n_out,)))

    def __call__(self, x: jax.Array) -> jax.Array:
        return x @ pm.unbox(self.weight.value) + pm.unbox(self.bias.value)[None]


class MLP(pm.Module):
    up: Dense
    down: Dense

    def __init__(self, embed: int, hidden: int, *, key: jax.Array):
        k1, k2 = jax.random.split(key)
        self.up = Dense(embed, hidden, ("embed", "mlp"), key=k1)
        self.down = Dense(hidden, embed, ("mlp", "embed"), key=k2)

    def __call__(self, x: jax.Array) -> jax.Array:
        h = jax.nn.relu(self.up(x))
        # Activations sharded too; a no-op when no mesh is known (single device).
        h = pm.with_logical_constraint(h, ("batch", "mlp"))
        return self.down(h)


OPT = optax.adam(1e-2)


def _loss(model: Any, x: jax.Array, y: jax.Array) -> jax.Array:
    return jnp.mean((model(x) - y) ** 2)


def _train_step(model: Any, opt_state: Any, x: jax.Array, y: jax.Array) -> tuple[Any, Any, Any]:
    loss, grads = jax.value_and_grad(_loss)(model, x, y)
    updates, opt_state = OPT.update(grads, opt_state, model)
    return optax.apply_updates(model, updates), opt_state, loss


def _data() -> tuple[jax.Array, jax.Array]:
    x = jax.random.normal(jax.random.key(1), (BATCH, EMBED))
    y = jax.random.normal(jax.random.key(2), (BATCH, EMBED))
    return x, y


def _boxes(tree: Any) -> list[pm.Partitioned]:
    return [
        b
        for b in jax.tree.leaves(tree, is_leaf=lambda x: isinstance(x, pm.Partitioned))
        if isinstance(b, pm.Partitioned)
    ]


def _assert_sharded_as_named(tree: Any, mesh: Mesh, *, exact: bool = True) -> int:
    """Every box's array has the NamedSharding its names give under the active rules.

    With ``exact=False`` an equivalent sharding passes too (XLA's propagation may drop
    trailing ``None``s: ``P('model')`` for ``P('model', None)``).
    """
    boxes = _boxes(tree)
    for box in boxes:
        expected = pm.logical_to_mesh_axes(box.names)
        sharding = box.value.sharding
        assert isinstance(sharding, NamedSharding)
        assert sharding.mesh == mesh
        if exact:
            assert sharding.spec == expected, (box.names, sharding.spec, expected)
        else:
            target = NamedSharding(mesh, expected)
            assert sharding.is_equivalent_to(target, box.value.ndim), (box.names, sharding.spec)
    return len(boxes)


# ----------------------------------------------------------------------------- the sharded step


def test_sharded_adam_step_matches_single_device(mesh: Mesh) -> None:
    model = MLP(EMBED, HIDDEN, key=jax.random.key(0))
    x, y = _data()
    with jax.numpy_dtype_promotion("standard"):  # optax's b1 ** count is not strict-clean
        opt_state = OPT.init(model)  # pyright: ignore[reportArgumentType]
        # Reference: one device, no mesh, no rules.
        ref_model, _, ref_loss = jax.jit(_train_step)(model, opt_state, x, y)

        with pm.logical_axis_rules(RULES):
            model_sh = pm.get_sharding(model, mesh)
            opt_sh = pm.get_sharding(opt_state, mesh)
            data_sh = pm.logical_to_mesh_sharding(("batch", "embed"), mesh)
            assert data_sh.spec == P("data", None)
            s_model, s_opt = pm.shard(model, mesh), pm.shard(opt_state, mesh)
            sx, sy = jax.device_put(x, data_sh), jax.device_put(y, data_sh)
            assert _assert_sharded_as_named(s_model, mesh) == 4
            # Adam's moments are boxed like the parameters they belong to.
            assert _assert_sharded_as_named(s_opt, mesh) == 8
            assert s_model.up.weight.value.value.sharding.spec == P(None, "model")
            assert s_model.down.weight.value.value.sharding.spec == P("model", None)
            assert s_model.up.bias.value.value.sharding.spec == P("model")
            assert s_model.down.bias.value.value.sharding.spec == P(None)

            step = jax.jit(
                _train_step,
                in_shardings=(model_sh, opt_sh, data_sh, data_sh),
                out_shardings=(model_sh, opt_sh, NamedSharding(mesh, P())),
            )
            with jax.set_mesh(mesh):  # lets with_logical_constraint find the mesh
                new_model, new_opt, loss = step(s_model, s_opt, sx, sy)
                lowered = step.lower(s_model, s_opt, sx, sy).as_text()
            assert "sharding_constraint" in lowered  # the activation constraint is there
            assert _assert_sharded_as_named(new_model, mesh) == 4
            assert _assert_sharded_as_named(new_opt, mesh) == 8

    np.testing.assert_allclose(loss, ref_loss, rtol=1e-5)
    for a, b in zip(jax.tree.leaves(new_model), jax.tree.leaves(ref_model)):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


def test_sharded_step_with_pm_jit_and_constraints(mesh: Mesh) -> None:
    # pm.jit follows the shardings of its (already sharded) inputs; a constraint built from
    # get_sharding pins the outputs.
    model = MLP(EMBED, HIDDEN, key=jax.random.key(0))
    x, y = _data()

    @pm.jit
    def step(model: MLP, opt_state: Any, x: jax.Array, y: jax.Array) -> Any:
        new_model, new_opt, loss = _train_step(model, opt_state, x, y)
        new_model = jax.lax.with_sharding_constraint(new_model, pm.get_sharding(new_model, mesh))
        new_opt = jax.lax.with_sharding_constraint(new_opt, pm.get_sharding(new_opt, mesh))
        return new_model, new_opt, loss

    with jax.numpy_dtype_promotion("standard"), pm.logical_axis_rules(RULES):
        opt_state = OPT.init(model)  # pyright: ignore[reportArgumentType]
        _, _, ref_loss = jax.jit(_train_step)(model, opt_state, x, y)
        data_sh = pm.logical_to_mesh_sharding(("batch", "embed"), mesh)
        s_model, s_opt = pm.shard(model, mesh), pm.shard(opt_state, mesh)
        sx, sy = jax.device_put(x, data_sh), jax.device_put(y, data_sh)
        new_model, new_opt, loss = step(s_model, s_opt, sx, sy)
        assert _assert_sharded_as_named(new_model, mesh, exact=False) == 4
        assert _assert_sharded_as_named(new_opt, mesh, exact=False) == 8
    np.testing.assert_allclose(loss, ref_loss, rtol=1e-5)


def test_sharded_init_without_materializing(mesh: Mesh) -> None:
    # Shapes first (no allocation), then an init jitted straight into its shardings.
    def init(key: jax.Array) -> MLP:
        return MLP(EMBED, HIDDEN, key=key)

    shapes = pm.eval_shape(init, jax.random.key(0))
    with pm.logical_axis_rules(RULES):
        shardings = pm.get_sharding(shapes, mesh)
        model = jax.jit(init, out_shardings=shardings)(jax.random.key(0))
        assert _assert_sharded_as_named(model, mesh) == 4
    assert pm.tree_equal(model, init(jax.random.key(0)))


# ----------------------------------------------------------------------------- stacked layers


class Block(pm.Module):
    weight: pm.Param

    def __init__(self, *, key: jax.Array):
        init = pm.with_partitioning(jax.nn.initializers.lecun_normal(), ("embed", "mlp"))
        self.weight = pm.Param(init(key, (EMBED, EMBED)))

    def __call__(self, x: jax.Array) -> jax.Array:
        return jnp.tanh(x @ pm.unbox(self.weight.value))


def _stack(depth: int = DEPTH) -> Block:
    make = pm.vmap(lambda k: Block(key=k), metadata_params=LAYERS)
    return make(jax.random.split(jax.random.key(0), depth))


def test_vmapped_stack_has_a_layers_axis() -> None:
    stack = _stack()
    box = stack.weight.value
    assert isinstance(box, pm.Partitioned)
    assert box.names == ("layers", "embed", "mlp")
    assert box.value.shape == (DEPTH, EMBED, EMBED)
    spec = pm.get_partition_spec(stack).weight.value
    assert spec == P("layers", "embed", "mlp")  # literal without rules
    with pm.logical_axis_rules(RULES):  # no rule for 'layers': replicated
        spec = pm.get_partition_spec(stack).weight.value
    assert len(spec) == box.value.ndim == 3
    assert spec == P(None, None, "model")
    with pm.logical_axis_rules((("layers", "data"), *RULES)):
        assert pm.get_partition_spec(stack).weight.value == P("data", None, "model")


@pytest.mark.parametrize(
    ("rules", "spec"),
    [(RULES, P(None, None, "model")), ((("layers", "data"), *RULES), P("data", None, "model"))],
)
def test_scan_over_a_sharded_stack(mesh: Mesh, rules: Any, spec: P) -> None:
    stack = _stack()
    x = jax.random.normal(jax.random.key(1), (BATCH, EMBED))

    @pm.scan(in_axes=(pm.Carry, 0), out_axes=pm.Carry, metadata_params=LAYERS)
    def forward(x: jax.Array, block: Block) -> jax.Array:
        # Inside the scan the box lost the 'layers' axis again.
        assert block.weight.value.names == ("embed", "mlp")
        return block(x)

    # Each iteration returns its block too: scanned outputs get the axis back.
    @pm.scan(in_axes=(pm.Carry, 0), out_axes=(pm.Carry, 0), metadata_params=LAYERS)
    def forward_and_blocks(x: jax.Array, block: Block) -> tuple[jax.Array, Block]:
        return block(x), block

    expected = x
    for i in range(DEPTH):
        expected = jnp.tanh(expected @ stack.weight.value.value[i])

    with pm.logical_axis_rules(rules):
        sharded = pm.shard(stack, mesh)
        assert sharded.weight.value.value.sharding.spec == spec
        sh = pm.get_sharding(stack, mesh)
        out = jax.jit(forward, in_shardings=(NamedSharding(mesh, P("data")), sh))(x, sharded)
        y, blocks = jax.jit(forward_and_blocks)(x, sharded)
    np.testing.assert_allclose(out, expected, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(y, expected, rtol=1e-5, atol=1e-6)
    assert blocks.weight.value.names == ("layers", "embed", "mlp")
    np.testing.assert_allclose(blocks.weight.value.value, stack.weight.value.value)


# ----------------------------------------------------------------------------- logical_to_mesh_axes


def test_flax_documented_example() -> None:
    rules = (("batch", "X"), ("features", "X"), ("heads", "Y"), ("batch", "Z"))
    names = ("batch", "length", "heads", "features")
    assert pm.logical_to_mesh_axes(names, rules) == P("X", None, "Y", None)


@pytest.mark.parametrize(
    ("names", "rules", "expected"),
    [
        # No rules: every axis replicated.
        (("batch", "mlp"), (), P(None, None)),
        # None names and names without a rule are replicated.
        ((None, "mlp", "other"), RULES, P(None, "model", None)),
        # The first applicable rule wins, even a None one.
        (("embed",), (("embed", None), ("embed", "model")), P(None)),
        # A mesh axis taken by an earlier rule sends the name to its next rule.
        (("a", "b"), (("a", "x"), ("b", "x"), ("b", "y")), P("x", "y")),
        # Precedence is the order of the rules, not of the dimensions.
        (("a", "b"), (("b", "x"), ("a", "x")), P(None, "x")),
        # A tuple of mesh axes, and its axes are then taken.
        (
            ("batch", "mlp"),
            (("batch", ("data", "model")), ("mlp", "model")),
            P(("data", "model"), None),
        ),
        # Lists are accepted and normalised to tuples.
        (("batch",), [["batch", ["data", "model"]]], P(("data", "model"))),
        # An empty tuple of mesh axes means replicated.
        (("batch",), (("batch", ()),), P(None)),
        ((), RULES, P()),
        (P("batch", None), RULES, P("data", None)),
    ],
)
def test_logical_to_mesh_axes(names: Any, rules: Any, expected: P) -> None:
    assert pm.logical_to_mesh_axes(names, rules) == expected


def test_logical_to_mesh_axes_of_none_is_none() -> None:
    assert pm.logical_to_mesh_axes(None, RULES) is None
    assert pm.logical_to_mesh_sharding(None, jax.make_mesh((8,), ("d",))) is None


def test_logical_to_mesh_axes_uses_active_rules_unless_given() -> None:
    assert pm.logical_to_mesh_axes(("batch", "mlp")) == P(None, None)
    with pm.logical_axis_rules(RULES):
        assert pm.logical_to_mesh_axes(("batch", "mlp")) == P("data", "model")
        assert pm.logical_to_mesh_axes(("batch", "mlp"), [("mlp", "data")]) == P(None, "data")


def test_logical_to_mesh_on_a_tree() -> None:
    tree = {"x": ("batch", "embed"), "w": [("embed", "mlp"), None]}
    out = pm.logical_to_mesh(tree, RULES)
    assert out == {"x": P("data", None), "w": [P(None, "model"), None]}


def test_duplicate_logical_names_are_an_error() -> None:
    with pytest.raises(pm.ShardingError, match=r"names \['mlp'\] occur more than once"):
        pm.logical_to_mesh_axes(("mlp", "embed", "mlp"), RULES)
    # Several None names are fine.
    assert pm.logical_to_mesh_axes((None, None), RULES) == P(None, None)


def test_non_string_logical_name_is_an_error() -> None:
    names: Any = ("batch", 3)
    with pytest.raises(pm.ShardingError, match="must be strings or None, got 3"):
        pm.logical_to_mesh_axes(names, RULES)


# ----------------------------------------------------------------------------- rules


@pytest.mark.parametrize(
    ("rules", "message"),
    [
        ({"batch": "data"}, "got a mapping"),
        ("batch", "got str"),
        (3, "got int"),
        ([("batch", "data", "x")], r"rule 0 is \('batch', 'data', 'x'\), not a"),
        ([("batch", "data"), "mlp"], "rule 1 is 'mlp', not a"),
        ([(1, "data")], "has logical name 1"),
        ([("batch", 3)], "maps to 3"),
        ([("batch", ("data", 3))], r"maps to \('data', 3\)"),
    ],
)
def test_bad_rules_are_rejected(rules: Any, message: str) -> None:
    with pytest.raises(pm.LogicalAxisRulesError, match=message):
        pm.logical_to_mesh_axes(("batch",), rules)
    with pytest.raises(pm.LogicalAxisRulesError, match=message):
        with pm.logical_axis_rules(rules):
            pass
    with pytest.raises(pm.LogicalAxisRulesError, match=message):
        pm.set_logical_axis_rules(rules)
    with pytest.raises(pm.LogicalAxisRulesError, match=message):
        pm.LogicallyPartitioned(_f32(2), ("batch",), rules=rules)
    assert pm.get_logical_axis_rules() == ()


def test_nested_rules_replace_and_restore() -> None:
    assert pm.get_logical_axis_rules() == ()
    with pm.logical_axis_rules([["batch", "data"]]):  # pyright: ignore[reportArgumentType]
        assert pm.get_logical_axis_rules() == (("batch", "data"),)
        with pm.logical_axis_rules((("batch", "model"), ("mlp", ["data"]))):
            assert pm.get_logical_axis_rules() == (("batch", "model"), ("mlp", ("data",)))
            assert pm.logical_to_mesh_axes(("batch", "mlp")) == P("model", ("data",))
            with pm.logical_axis_rules(()):  # no rules: Partitioned names are literal again
                box = pm.Partitioned(_f32(2, 2), ("batch", "mlp"))
                assert pm.get_partition_spec(box) == P("batch", "mlp")
            assert pm.get_partition_spec(box) == P("model", ("data",))
        assert pm.logical_to_mesh_axes(("batch", "mlp")) == P("data", None)
    assert pm.get_logical_axis_rules() == ()


def test_rules_are_restored_after_an_exception() -> None:
    with pytest.raises(RuntimeError, match="boom"):
        with pm.logical_axis_rules(RULES):
            raise RuntimeError("boom")
    assert pm.get_logical_axis_rules() == ()


def test_set_logical_axis_rules() -> None:
    try:
        pm.set_logical_axis_rules(RULES)
        assert pm.get_logical_axis_rules() == RULES
        with pm.logical_axis_rules([("mlp", "data")]):
            assert pm.get_logical_axis_rules() == (("mlp", "data"),)
        assert pm.get_logical_axis_rules() == RULES
    finally:
        pm.set_logical_axis_rules(())
    assert pm.get_logical_axis_rules() == ()


def test_rules_are_per_thread() -> None:
    seen: list[Any] = []
    with pm.logical_axis_rules(RULES):
        thread = threading.Thread(target=lambda: seen.append(pm.get_logical_axis_rules()))
        thread.start()
        thread.join()
    assert seen == [()]


# ----------------------------------------------------------------------------- get_partition_spec


class Holder(pm.Module):
    boxed: pm.Param
    plain: pm.Param
    bare: jax.Array
    scale: float
    name: str = pm.field(static=True, default="holder")


def _holder() -> Holder:
    return Holder(
        boxed=pm.Param(pm.Partitioned(_f32(4, 8), ("data", "model"))),
        plain=pm.Param(_f32(3)),
        bare=_f32(2, 2),
        scale=0.5,
    )


def test_get_partition_spec_literal_names_and_unboxed_arrays() -> None:
    specs = pm.get_partition_spec(_holder())
    assert isinstance(specs, Holder)
    assert isinstance(specs.boxed, pm.Param)
    assert specs.boxed.value == P("data", "model")
    assert specs.plain.value == P()
    assert specs.bare == P()
    assert specs.scale is None  # not an array
    assert specs.name == "holder"
    assert pm.get_partition_spec(_f32(3)) == P()
    assert pm.get_partition_spec({"n": 3, "s": None}) == {"n": None, "s": None}
    # numpy arrays and shape structs are arrays too
    assert pm.get_partition_spec([np.zeros(2), jax.ShapeDtypeStruct((2,), jnp.float32)]) == [
        P(),
        P(),
    ]


def test_get_partition_spec_resolves_through_active_rules() -> None:
    tree = {
        "w": pm.Param(pm.Partitioned(_f32(4, 8), ("embed", "mlp"))),
        "x": pm.Partitioned(_f32(8, 4), ("batch", None)),
        "b": _f32(8),
    }
    with pm.logical_axis_rules(RULES):
        specs = pm.get_partition_spec(tree)
    assert specs == {"w": pm.Param(P(None, "model")), "x": P("data", None), "b": P()}


def test_get_partition_spec_of_optimizer_state() -> None:
    params = {"w": pm.Partitioned(_f32(4, 8), ("embed", "mlp")), "b": _f32(8)}
    with jax.numpy_dtype_promotion("standard"):
        state = optax.adam(1e-3).init(params)
    with pm.logical_axis_rules(RULES):
        specs = pm.get_partition_spec(state)
    assert specs[0].mu == {"w": P(None, "model"), "b": P()}
    assert specs[0].nu == {"w": P(None, "model"), "b": P()}
    assert specs[0].count == P()


def test_get_partition_spec_of_shapes() -> None:
    shapes = pm.eval_shape(lambda: _holder())
    specs = pm.get_partition_spec(shapes)
    assert specs.boxed.value == P("data", "model")
    assert specs.bare == P()


def test_box_rank_mismatch_is_an_error() -> None:
    # Plain jax.vmap over a boxed tree removes an axis of the value but not of the names.
    tree = {"w": pm.Param(pm.Partitioned(_f32(4, 8), ("embed", "mlp")))}
    with pytest.raises(
        pm.ShardingError, match=r"at \.w\.value: Partitioned has names \('embed', 'mlp'\)"
    ):
        jax.vmap(pm.get_partition_spec)(tree)


def test_get_partition_spec_inside_transforms() -> None:
    tree = {"w": pm.Partitioned(_f32(4, 8), ("embed", "mlp"))}

    @jax.jit
    def f(t: Any) -> jax.Array:
        assert pm.get_partition_spec(t) == {"w": P(None, "model")}
        return t["w"].value.sum()

    with pm.logical_axis_rules(RULES):
        assert f(tree) == 32.0


# ----------------------------------------------------------------------------- LogicallyPartitioned


def test_logically_partitioned_names_are_always_logical(mesh: Mesh) -> None:
    box = pm.LogicallyPartitioned(_f32(4, 8), ("data", "mlp"))
    assert isinstance(box, pm.Partitioned)
    assert box.rules is None
    # No rules: replicated (a plain Partitioned would take 'data' literally).
    assert box.get_partition_spec() == P(None, None)
    assert pm.get_partition_spec(box) == P(None, None)
    assert pm.get_partition_spec(pm.Partitioned(box.value, box.names)) == P("data", "mlp")
    with pm.logical_axis_rules(RULES):
        assert box.get_partition_spec() == P(None, "model")
        assert box.get_sharding(mesh) == NamedSharding(mesh, P(None, "model"))
        # Its own rules win over the active ones.
        own = box.replace(rules=(("data", "data"),))
        assert pm.get_partition_spec({"b": own}) == {"b": P("data", None)}


def test_with_logical_partitioning_and_axes(mesh: Mesh) -> None:
    init = pm.with_logical_partitioning(
        jax.nn.initializers.ones, ["embed", "mlp"], mesh=mesh, rules=[("mlp", "model")]
    )
    box = init(jax.random.key(0), (4, 8))
    assert type(box) is pm.LogicallyPartitioned
    assert box.names == ("embed", "mlp")
    assert box.rules == (("mlp", "model"),)
    assert box.mesh is mesh
    stacked = box.add_axis(0, LAYERS)
    assert type(stacked) is pm.LogicallyPartitioned
    assert stacked.rules == box.rules
    assert stacked.names == ("layers", "embed", "mlp")
    assert stacked.remove_axis(0, LAYERS) == box
    # The box's own mesh is used when none is given.
    assert box.get_sharding() == NamedSharding(mesh, P(None, "model"))
    assert pm.get_sharding(box) == NamedSharding(mesh, P(None, "model"))
    assert pm.shard(box).value.sharding.spec == P(None, "model")


def test_logically_partitioned_unbox_constrains_when_traced(mesh: Mesh) -> None:
    box = pm.LogicallyPartitioned(_f32(4, 8), ("batch", "mlp"))
    assert box.unbox() is box.value  # concrete: returned as is
    assert pm.unbox(box) is box.value

    def double(b: pm.LogicallyPartitioned) -> jax.Array:
        return b.unbox() * 2

    def double_raw(b: pm.LogicallyPartitioned) -> jax.Array:
        return b.unbox(apply_constraint=False) * 2

    with pm.logical_axis_rules(RULES):
        # No mesh known: no constraint.
        assert "sharding_constraint" not in jax.jit(double).lower(box).as_text()
        with jax.set_mesh(mesh):
            out = jax.jit(double)(box)
            assert "sharding_constraint" in jax.jit(double).lower(box).as_text()
            assert "sharding_constraint" not in jax.jit(double_raw).lower(box).as_text()
        assert isinstance(out.sharding, NamedSharding)
        assert out.sharding.spec == P("data", "model")
        np.testing.assert_allclose(out, 2.0)


# ----------------------------------------------------------------------------- get_sharding, shard


def test_get_sharding(mesh: Mesh) -> None:
    with pm.logical_axis_rules((("data", "data"), ("model", "model"))):
        shardings = pm.get_sharding(_holder(), mesh)
    assert shardings.boxed.value == NamedSharding(mesh, P("data", "model"))
    assert shardings.plain.value == NamedSharding(mesh, P())
    assert shardings.bare == NamedSharding(mesh, P())
    assert shardings.scale is None


def test_get_sharding_takes_the_mesh_from_the_box_or_the_context(mesh: Mesh) -> None:
    boxed = pm.Partitioned(_f32(4, 8), ("data", "model"), mesh)
    assert pm.get_sharding(boxed) == NamedSharding(mesh, P("data", "model"))
    tree = {"w": pm.Partitioned(_f32(4, 8), ("data", "model")), "b": _f32(8)}
    with jax.set_mesh(mesh):
        shardings = pm.get_sharding(tree)
    assert shardings == {
        "w": NamedSharding(mesh, P("data", "model")),
        "b": NamedSharding(mesh, P()),
    }
    with pytest.raises(pm.ShardingError, match=r"at \.b: no mesh to build a NamedSharding"):
        pm.get_sharding({"b": _f32(8)})


def test_get_sharding_rejects_specs_the_mesh_cannot_take(mesh: Mesh) -> None:
    tree = {"w": pm.Param(pm.Partitioned(_f32(4, 8), ("embed", "mlp")))}
    with pytest.raises(
        pm.ShardingError,
        match=r"at \.w\.value: .* names mesh axes \['embed', 'mlp'\] that the mesh does not",
    ):
        pm.get_sharding(tree, mesh)  # literal names, but they are logical ones
    twice = {"w": pm.Partitioned(_f32(4, 8), ("data", "data"))}
    with pytest.raises(pm.ShardingError, match=r"uses mesh axes \['data'\] for more than one"):
        pm.get_sharding(twice, mesh)
    with pytest.raises(pm.ShardingError, match="names mesh axes"):
        pm.logical_to_mesh_sharding(("batch",), mesh, [("batch", "nope")])


def test_shard_places_arrays_and_keeps_everything_else(mesh: Mesh) -> None:
    holder = _holder()
    sharded = pm.shard(holder, mesh)
    assert isinstance(sharded, Holder)
    assert sharded.scale == 0.5 and sharded.name == "holder"
    box = sharded.boxed.value
    assert isinstance(box, pm.Partitioned) and box.names == ("data", "model")
    assert box.value.sharding == NamedSharding(mesh, P("data", "model"))
    assert sharded.plain.value.sharding == NamedSharding(mesh, P())
    assert sharded.bare.sharding == NamedSharding(mesh, P())
    assert pm.tree_equal(jax.device_get(sharded), jax.device_get(holder))
    # numpy arrays become sharded jax arrays
    placed = pm.shard({"a": np.ones((4, 4), np.float32)}, mesh)["a"]
    assert isinstance(placed, jax.Array) and placed.sharding == NamedSharding(mesh, P())


def test_shard_keeps_tied_variables_tied(mesh: Mesh) -> None:
    shared = pm.Param(pm.Partitioned(jnp.ones((4, 4)), ("data", "model")))
    tree = {"encoder": shared, "decoder": shared, "other": pm.Param(jnp.zeros(2))}
    sharded = pm.shard(tree, mesh)
    assert sharded["encoder"] is sharded["decoder"]
    assert sharded["other"] is not sharded["encoder"]
    placed = sharded["encoder"].value
    assert placed.value.sharding == NamedSharding(mesh, P("data", "model"))
    # jax.device_put of the same tree builds a Variable per place: the tie is lost
    untied = jax.device_put(tree)
    assert untied["encoder"] is not untied["decoder"]


def test_shard_rejects_uneven_splits(mesh: Mesh) -> None:
    tree = {"w": pm.Param(pm.Partitioned(_f32(3, 8), ("data", "model")))}
    with pytest.raises(
        pm.ShardingError,
        match=r"at \.w\.value: axis 0 of shape \(3, 8\) has size 3, which the 2 devices",
    ):
        pm.shard(tree, mesh)
    both = {"w": pm.Partitioned(_f32(4, 6), (None, ("data", "model")))}
    with pytest.raises(pm.ShardingError, match=r"the 8 devices of mesh axes \('data', 'model'\)"):
        pm.shard(both, mesh)


def test_shard_on_an_explicit_mesh(explicit_mesh: Mesh) -> None:
    with pm.logical_axis_rules(RULES):
        sharded = pm.shard(MLP(EMBED, HIDDEN, key=jax.random.key(0)), explicit_mesh)
        assert _assert_sharded_as_named(sharded, explicit_mesh) == 4


# ----------------------------------------------------------------------------- constraints


def test_with_logical_constraint_with_a_mesh(mesh: Mesh) -> None:
    x = _f32(8, 16)
    with pm.logical_axis_rules(RULES):
        y = pm.with_logical_constraint(x, ("batch", "mlp"), mesh=mesh)
        assert y.sharding == NamedSharding(mesh, P("data", "model"))
        # Explicit rules override the active ones; PartitionSpecs are accepted as names.
        y = pm.with_logical_constraint(x, P("batch", "mlp"), rules=[("mlp", "data")], mesh=mesh)
        assert y.sharding == NamedSharding(mesh, P(None, "data"))
        # Inside jit, under jax.set_mesh, no mesh argument is needed.
        with jax.set_mesh(mesh):
            y = pm.with_logical_constraint(x, ("batch", None))
            assert y.sharding == NamedSharding(mesh, P("data", None))
            f = jax.jit(lambda a: pm.with_logical_constraint(a * 2, ("batch", "mlp")))
            assert f(x).sharding == NamedSharding(mesh, P("data", "model"))
            assert "sharding_constraint" in f.lower(x).as_text()


def test_with_logical_constraint_without_a_mesh_is_a_no_op() -> None:
    x = _f32(8, 16)
    with pm.logical_axis_rules(RULES):
        assert pm.with_logical_constraint(x, ("batch", "mlp")) is x
        f = jax.jit(lambda a: pm.with_logical_constraint(a, ("batch", "mlp")))
        assert "sharding_constraint" not in f.lower(x).as_text()


def test_with_logical_constraint_on_trees_and_boxes(mesh: Mesh) -> None:
    tree = {"a": _f32(8, 4), "b": pm.Partitioned(_f32(8, 4), ("x", "y"))}
    with pm.logical_axis_rules(RULES):
        # One spec for every array; boxes are unboxed.
        out = pm.with_logical_constraint(tree, ("batch", None), mesh=mesh)
        assert isinstance(out["b"], jax.Array)
        assert out["a"].sharding.spec == out["b"].sharding.spec == P("data", None)
        # A tree of specs; None leaves an array alone.
        out = pm.with_logical_constraint(tree, {"a": (None, "mlp"), "b": None}, mesh=mesh)
        assert out["a"].sharding.spec == P(None, "model")
        assert out["b"] is tree["b"].value
        with pytest.raises(pm.ShardingError, match="not a prefix of the structure of x"):
            pm.with_logical_constraint(tree, {"a": ("batch", None)}, mesh=mesh)


def test_with_logical_constraint_rank_mismatch(mesh: Mesh) -> None:
    with pytest.raises(
        pm.ShardingError, match=r"logical names \('batch',\) have 1 entries but the array has"
    ):
        pm.with_logical_constraint(_f32(8, 4), ("batch",), mesh=mesh)
    with pytest.raises(pm.ShardingError, match=r"at \.w: logical names"):
        pm.with_logical_constraint({"w": _f32(8)}, ("batch", "mlp"), mesh=mesh)


def test_with_logical_constraint_fallbacks(mesh: Mesh) -> None:
    x = _f32(8, 4)
    with pm.logical_axis_rules(RULES):
        y = pm.with_logical_constraint(x, ("batch", "unknown"), mesh=mesh)
        assert y.sharding.spec == P("data", None)
        y = pm.with_logical_constraint(
            x, ("batch", "unknown"), mesh=mesh, fallback=pm.RulesFallback.NO_CONSTRAINT
        )
        assert y is x
        # None is a deliberate "replicated", not a missing rule.
        y = pm.with_logical_constraint(
            x, ("batch", None), mesh=mesh, fallback=pm.RulesFallback.RAISE_ERROR
        )
        assert y.sharding.spec == P("data", None)
        with pytest.raises(pm.ShardingError, match=r"logical axis names \['unknown'\] .* match no"):
            pm.with_logical_constraint(
                x, ("batch", "unknown"), mesh=mesh, fallback=pm.RulesFallback.RAISE_ERROR
            )


def test_with_logical_constraint_on_an_explicit_mesh(explicit_mesh: Mesh) -> None:
    x = _f32(8, 16)
    with pm.logical_axis_rules(RULES):
        y = pm.with_logical_constraint(x, ("batch", "mlp"), mesh=explicit_mesh)
        assert y.sharding == NamedSharding(explicit_mesh, P("data", "model"))
        with jax.set_mesh(explicit_mesh):
            f = jax.jit(lambda a: pm.with_logical_constraint(a * 2, ("batch", "mlp")))
            assert f(x).sharding == NamedSharding(explicit_mesh, P("data", "model"))


def test_errors_are_pytreemod_and_value_errors() -> None:
    check: Callable[[type], bool] = lambda cls: (
        issubclass(cls, pm.PytreemodError) and issubclass(cls, ValueError)
    )
    assert check(pm.ShardingError) and check(pm.LogicalAxisRulesError)


def test_box_methods_agree_with_tree_functions_under_rules() -> None:
    box = pm.Partitioned(jnp.zeros((4, 8)), ("embed", "mlp"))
    assert box.get_partition_spec() == P("embed", "mlp")
    mesh = jax.make_mesh((2, 4), ("data", "model"), axis_types=(AxisType.Auto, AxisType.Auto))
    with pm.logical_axis_rules([("mlp", "model"), ("embed", None)]):
        assert box.get_partition_spec() == pm.get_partition_spec(box) == P(None, "model")
        assert box.get_sharding(mesh) == NamedSharding(mesh, P(None, "model"))
