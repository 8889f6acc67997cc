# Norms' scale and bias are Optional fields; these norms have both.
# pyright: reportOptionalMemberAccess=false
"""Behaviour a new user should not be surprised by (issue 32, items 5 and 6): ``tree_at``
keeps a Variable when given a bare array, norms take key-free initializers without a
key, every Conv class lists its arguments, ``apply_updates`` keeps the model's type."""

import inspect
import pathlib

import jax
import jax.numpy as jnp
import pytest

import pytreemod as pm

KEY = jax.random.key(0)
nn = pm.nn


def test_tree_at_puts_a_bare_array_inside_the_selected_variable() -> None:
    model = nn.Sequential([nn.Linear(2, 3, key=KEY)])
    new = pm.tree_at(lambda m: m.layers[0].kernel, model, jnp.zeros((2, 3)))
    assert jax.tree.structure(new) == jax.tree.structure(model)
    assert type(new.layers[0].kernel) is pm.Param
    assert new.layers[0].kernel.value.tolist() == [[0.0] * 3] * 2
    doubled = pm.tree_at(lambda m: m.layers[0].bias, model, replace_fn=lambda v: v.value + 1)
    assert type(doubled.layers[0].bias) is pm.Param
    assert doubled.layers[0].bias.value.tolist() == [1.0, 1.0, 1.0]
    # Another Variable replaces the wrapper: the collection changes because it was asked.
    stat = pm.tree_at(lambda m: m.layers[0].bias, model, pm.BatchStat(jnp.ones(3)))
    assert type(stat.layers[0].bias) is pm.BatchStat


def test_tree_at_keeps_axis_metadata_boxes() -> None:
    tree = {"w": pm.Param(pm.Partitioned(jnp.ones((2, 2)), ("embed", "mlp")))}
    for where in (lambda t: t["w"], lambda t: t["w"].value):
        new = pm.tree_at(where, tree, jnp.zeros((2, 2)))
        box = new["w"].value
        assert isinstance(box, pm.Partitioned) and box.names == ("embed", "mlp")
        assert box.value.tolist() == [[0.0, 0.0], [0.0, 0.0]]


def test_norms_take_initializers_that_need_no_key_without_one() -> None:
    init = nn.initializers
    assert nn.LayerNorm(3, scale_init=init.ones).scale.value.tolist() == [1.0] * 3
    assert nn.LayerNorm(3, scale_init=init.constant(2.0)).scale.value.tolist() == [2.0] * 3
    assert nn.RMSNorm(2, scale_init=jax.nn.initializers.constant(0.5)).scale.value.tolist() == [
        0.5,
        0.5,
    ]
    assert nn.LayerNorm(2, bias_init=init.constant(0.25)).bias.value.tolist() == [0.25] * 2
    with pytest.raises(
        pm.LayerConfigError,
        match=r"^LayerNorm: this scale_init needs a PRNG key \(called without one it raised "
        r"TypeError: .*\); pass key=jax\.random\.key\(seed\)\. Initializers that take no "
        r"randomness \(ones, zeros, constant\(v\)\) need none\.$",
    ):
        nn.LayerNorm(3, scale_init=init.normal())
    assert nn.LayerNorm(3, scale_init=init.normal(), key=KEY).scale.shape == (3,)


@pytest.mark.parametrize(
    "cls",
    [nn.Conv1d, nn.Conv2d, nn.Conv3d, nn.ConvTranspose1d, nn.ConvTranspose2d, nn.ConvTranspose3d],
    ids=lambda c: c.__name__,
)
def test_each_conv_class_docstring_lists_its_arguments_and_defaults(cls: type) -> None:
    doc = inspect.getdoc(cls) or ""
    assert "**Arguments:**" in doc
    names = ["in_features", "out_features", "kernel_size", "strides", "padding", "use_bias"]
    names += ["dtype", "param_dtype", "precision", "kernel_init", "bias_init", "key"]
    assert [n for n in names if f"``{n}``" not in doc] == []
    assert '``"SAME"`` (default)' in doc and "``lecun_normal()``" in doc


def test_apply_updates_keeps_the_model_its_dtypes_and_none_parts() -> None:
    model = nn.Linear(2, 2, key=KEY, param_dtype=jnp.bfloat16)
    updates = jax.tree.map(lambda v: jnp.ones(v.shape, jnp.float32), model)
    with jax.numpy_dtype_promotion("standard"):  # bfloat16 + float32, as optax adds them
        new = pm.apply_updates(model, updates)
    assert type(new) is nn.Linear and jax.tree.structure(new) == jax.tree.structure(model)
    assert new.kernel.value.dtype == jnp.bfloat16
    assert new.bias.value.astype(jnp.float32).tolist() == [1.0, 1.0]  # zeros + 1
    updates = jax.tree.map(lambda v: jnp.ones(v.shape, v.dtype), model)
    partial = pm.apply_updates(model, pm.replace(updates, kernel=None))
    assert partial.kernel is model.kernel
    assert bool((partial.bias.value == model.bias.value + 1).all())


def test_a_damaged_orbax_checkpoint_error_is_short(tmp_path: pathlib.Path) -> None:
    ocp = pytest.importorskip("orbax.checkpoint")
    model = {"w": pm.Param(jnp.arange(6.0))}
    with ocp.CheckpointManager(tmp_path) as manager:
        manager.save(1, args=ocp.args.StandardSave(pm.state(model)))
        manager.wait_until_finished()
    for data in (tmp_path / "1").rglob("d/*"):
        data.write_bytes(data.read_bytes()[:10])  # truncated chunks
    with pytest.raises(
        pm.CheckpointFormatError,
        match=r"1'?: the Orbax checkpoint is damaged or incomplete \(ValueError: OUT_OF_RANGE: "
        r"Error reading .* of local file .*\); nothing was loaded",
    ) as info:
        pm.load(tmp_path / "1", model)
    assert "tensorstore_spec" not in str(info.value) and len(str(info.value)) < 600
