"""Linen transforms: the generic lifting of core transforms to Module classes and
methods (jit, remat, fold_rngs, vmap, scan, direct autodiff/control transforms)."""

import functools
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import adapters.linen as nn
from adapters import errors


class Scale(nn.Module):
    features: int = 2

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        w = self.param("w", jax.nn.initializers.lecun_normal(), (x.shape[-1], self.features))
        return x @ w


def test_jit_class_matches_plain_and_traces_once_per_configuration() -> None:
    traces: list[int] = []

    class Traced(nn.Module):
        @nn.compact
        def __call__(self, x: jax.Array) -> jax.Array:
            traces.append(1)
            return Scale(3)(x)

    x = jnp.ones((2, 4))
    variables = nn.jit(Traced)().init(jax.random.key(0), x)
    assert variables["params"]["Scale_0"]["w"].shape == (4, 3)
    jitted = nn.jit(Traced)()
    before = len(traces)
    y1 = jitted.apply(variables, x)
    y2 = jitted.apply(variables, x + 1)
    assert len(traces) == before + 1  # the second call reuses the compiled program
    np.testing.assert_allclose(y1, Traced().apply(variables, x), rtol=1e-6)
    np.testing.assert_allclose(y2, Traced().apply(variables, x + 1), rtol=1e-6)


def test_jit_and_fold_rngs_draw_the_same_keys() -> None:
    x = jnp.ones((1, 3))
    a = nn.jit(Scale)(2).init(jax.random.key(0), x)
    b = nn.fold_rngs(Scale)(2).init(jax.random.key(0), x)
    np.testing.assert_array_equal(a["params"]["w"], b["params"]["w"])


def test_jit_method_decorator_with_static_argnums() -> None:
    class Net(nn.Module):
        @nn.jit
        @nn.compact
        def __call__(self, x: jax.Array) -> jax.Array:
            return Scale(2)(x)

        @functools.partial(nn.jit, static_argnums=2)
        def scaled(self, x: jax.Array, power: int) -> jax.Array:
            return self(x) ** power

    x = jnp.ones((1, 2))
    variables = Net().init(jax.random.key(0), x)
    y = Net().apply(variables, x, 2, method="scaled")
    np.testing.assert_allclose(y, Net().apply(variables, x) ** 2, rtol=1e-6)


def test_remat_keeps_names_and_values() -> None:
    class Net(nn.Module):
        @nn.compact
        def __call__(self, x: jax.Array) -> jax.Array:
            return nn.remat(Scale)(3)(x)

    x = jnp.ones((1, 2))
    variables = Net().init(jax.random.key(0), x)
    assert list(variables["params"]) == ["CheckpointScale_0"]
    grads = jax.grad(lambda v: Net().apply(v, x).sum())(variables)
    assert grads["params"]["CheckpointScale_0"]["w"].shape == (2, 3)


def test_vmap_class_with_per_entry_parameters() -> None:
    Ensemble = nn.vmap(
        Scale,
        variable_axes={"params": 0},
        split_rngs={"params": True},
        in_axes=0,
    )
    x = jnp.ones((5, 1, 3))
    variables = Ensemble(2).init(jax.random.key(0), x)
    w = variables["params"]["w"]
    assert w.shape == (5, 3, 2)
    assert not np.allclose(w[0], w[1])
    y = Ensemble(2).apply(variables, x)
    np.testing.assert_allclose(y[1], x[1] @ w[1], rtol=1e-6)


def test_scan_over_layers() -> None:
    class Cell(nn.Module):
        @nn.compact
        def __call__(self, carry: jax.Array, x: jax.Array) -> tuple[jax.Array, jax.Array]:
            h = jnp.tanh(Scale(carry.shape[-1])(carry) + x)
            return h, h

    Scanned = nn.scan(
        Cell,
        variable_broadcast="params",
        split_rngs={"params": False},
        in_axes=0,
        out_axes=0,
    )
    carry = jnp.zeros((1, 3))
    xs = jnp.ones((4, 1, 3))
    (final, ys), variables = Scanned().init_with_output(jax.random.key(0), carry, xs)
    assert variables["params"]["Scale_0"]["w"].shape == (3, 3)
    assert ys.shape == (4, 1, 3)
    np.testing.assert_allclose(final, ys[-1], rtol=1e-6)


class TwoInputCell(nn.Module):
    @nn.compact
    def __call__(self, carry: jax.Array, x: jax.Array, bias: jax.Array) -> Any:
        h = nn.Dense(carry.shape[-1])(x) + bias + carry
        return h, h


def test_scan_length_errors_name_the_scanned_arguments() -> None:
    scan = functools.partial(nn.scan, variable_broadcast="params", split_rngs={"params": False})
    carry, xs, biases = jnp.zeros((1, 3)), jnp.ones((5, 1, 2)), jnp.ones((4, 1, 3))
    differ = (
        r"lift\.scan: the scanned inputs differ in length: argument `x` \(positional 1\) "
        r"has 5, argument `bias` \(positional 2\) has 4 along the scanned axis"
    )
    with pytest.raises(errors.LiftError, match=differ):  # a transformed class
        scan(TwoInputCell)().init(jax.random.key(0), carry, xs, biases)

    def step(cell: TwoInputCell, carry: jax.Array, x: jax.Array, bias: jax.Array) -> Any:
        return cell(carry, x, bias)

    class Loop(nn.Module):
        @nn.compact
        def __call__(self, carry: jax.Array, xs: jax.Array, biases: jax.Array) -> Any:
            return scan(step)(TwoInputCell(), carry, xs, biases)

    with pytest.raises(errors.LiftError, match=differ):  # a transformed function
        Loop().init(jax.random.key(0), carry, xs, biases)
    with pytest.raises(ValueError, match=r"length=4 but argument `x` \(positional 1\) has 5"):
        scan(TwoInputCell, length=4)().init(jax.random.key(0), carry, xs, biases)


def test_direct_value_and_grad_and_vjp() -> None:
    class Net(nn.Module):
        @nn.compact
        def __call__(self, x: jax.Array) -> Any:
            layer = Scale(1)

            def loss(mdl: Scale, x: jax.Array) -> jax.Array:
                return jnp.sum(mdl(x))

            value, (grad_x,) = nn.value_and_grad(loss, layer, x)
            y, vjp_fn = nn.vjp(lambda mdl, x: mdl(x), layer, x)
            params_grad, x_grad = vjp_fn(jnp.ones_like(y))
            return value, grad_x, x_grad, params_grad["params"]["w"]

    x = jnp.arange(3.0).reshape(1, 3)
    (value, grad_x, x_grad, w_grad), variables = Net().init_with_output(jax.random.key(0), x)
    w = variables["params"]["Scale_0"]["w"]
    np.testing.assert_allclose(value, jnp.sum(x @ w), rtol=1e-6)
    np.testing.assert_allclose(grad_x, w.T, rtol=1e-6)
    np.testing.assert_allclose(x_grad, w.T, rtol=1e-6)
    np.testing.assert_allclose(w_grad, x.T, rtol=1e-6)


def test_value_and_grad_of_integer_inputs_is_float0_zeros() -> None:
    # As jax.vjp (Flax's lift) gives: integer inputs get float0 zeros of their shape.
    class Net(nn.Module):
        @nn.compact
        def __call__(self, x: jax.Array, ids: jax.Array) -> Any:
            def loss(mdl: Scale, x: jax.Array, ids: jax.Array) -> jax.Array:
                return jnp.sum(mdl(x) * ids[:, None].astype(x.dtype))

            return nn.value_and_grad(loss, Scale(1), x, ids)

    x, ids = jnp.ones((3, 2)), jnp.arange(3)
    (_, (grad_x, grad_ids)), variables = Net().init_with_output(jax.random.key(0), x, ids)
    w = variables["params"]["Scale_0"]["w"]
    assert grad_ids.dtype == jax.dtypes.float0 and grad_ids.shape == (3,)
    np.testing.assert_allclose(grad_x, ids[:, None].astype(jnp.float32) * w.T, rtol=1e-6)


def test_value_and_grad_needs_a_scalar() -> None:
    class Net(nn.Module):
        @nn.compact
        def __call__(self, x: jax.Array) -> Any:
            return nn.value_and_grad(lambda mdl, x: mdl(x), Scale(2), x)

    with pytest.raises(TypeError, match="scalar"):
        Net().init(jax.random.key(0), jnp.ones((1, 2)))


def test_transformed_methods_cannot_return_modules() -> None:
    class Leaky(nn.Module):
        @nn.compact
        def __call__(self) -> Any:
            return Scale()

    with pytest.raises(errors.TransformedMethodReturnValueError, match="cannot return Modules"):
        nn.remat(Leaky)().init(jax.random.key(0))


def test_bad_transform_targets() -> None:
    with pytest.raises(errors.TransformTargetError, match="not a Module class or callable"):
        nn.remat(3)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="transform methods argument must be None"):
        nn.vmap(Scale, methods=3)
    with pytest.raises(NotImplementedError, match="reduce_axes"):
        nn.grad(lambda m, x: x, Scale(), 1.0, reduce_axes=("batch",))

    class Net(nn.Module):
        @nn.compact
        def __call__(self) -> Any:
            return nn.vjp(Scale, self)

    with pytest.raises(ValueError, match="can only be applied on a Module method"):
        Net().init(jax.random.key(0))


def test_jit_of_a_module_with_unhashable_attributes() -> None:
    class Holder(nn.Module):
        table: Any

        @nn.compact
        def __call__(self, x: jax.Array) -> jax.Array:
            return x

    with pytest.raises(ValueError, match="Value at 'table' is not hashable"):
        nn.jit(Holder)(table=np.ones(2)).init(jax.random.key(0), jnp.ones(()))


def test_cond_and_while_loop_on_a_bound_module() -> None:
    class Net(nn.Module):
        @nn.compact
        def __call__(self, x: jax.Array, flag: jax.Array) -> Any:
            layer = Scale(2)
            layer(x)  # create the parameters outside the branches
            y = nn.cond(flag, lambda m, x: m(x), lambda m, x: -m(x), layer, x)
            n = nn.while_loop(lambda m, c: c < 5, lambda m, c: c + 2, layer, jnp.array(0))  # type: ignore[arg-type]
            return y, n

    x = jnp.ones((1, 2))
    variables = Net().init(jax.random.key(0), x, jnp.array(True))
    y_true, n = Net().apply(variables, x, jnp.array(True))
    y_false, _ = Net().apply(variables, x, jnp.array(False))
    np.testing.assert_allclose(y_true, -y_false)
    assert int(n) == 6


def _transformed_program(lib: Any) -> Any:
    class Lin(lib.Module):
        features: int = 3

        @lib.compact
        def __call__(self, x: jax.Array) -> jax.Array:
            w = self.param("w", jax.nn.initializers.lecun_normal(), (x.shape[-1], self.features))
            return x @ w

    class Cell(lib.Module):
        def setup(self) -> None:
            self.proj = Lin(3)

        def __call__(self, carry: jax.Array, x: jax.Array) -> tuple[jax.Array, jax.Array]:
            carry = jnp.tanh(self.proj(carry) + x)
            return carry, carry

        def project(self, x: jax.Array) -> jax.Array:
            return self.proj(x)

    class Net(lib.Module):
        @lib.compact
        def __call__(self, x: jax.Array, xs: jax.Array) -> jax.Array:
            stack = lib.scan(
                Cell,
                variable_axes={"params": 0},
                split_rngs={"params": True},
                length=xs.shape[0],
            )
            carry, ys = stack(name="stack")(x, xs)
            ensemble = lib.vmap(
                Cell,
                variable_axes={"params": 0},
                split_rngs={"params": True},
                in_axes=0,
                methods=["project"],
            )
            members = ensemble()
            z = members.project(jnp.broadcast_to(carry, (2, *carry.shape)))
            head = lib.remat(functools.partial(Lin, features=2))()  # pyright: ignore[reportCallIssue]
            return head(z.sum(0) + ys.sum(0))

    return Net()


def test_scan_vmap_remat_program_matches_flax() -> None:
    flax_nn = pytest.importorskip("flax.linen")
    x = jnp.linspace(0.0, 1.0, 3).reshape(1, 3)
    xs = jnp.ones((4, 1, 3))
    ours, theirs = _transformed_program(nn), _transformed_program(flax_nn)
    ours_vars = ours.init(jax.random.key(0), x, xs)
    theirs_vars = jax.tree.map(lambda a: a, theirs.init(jax.random.key(0), x, xs))
    assert jax.tree.map(jnp.shape, ours_vars) == jax.tree.map(jnp.shape, theirs_vars)
    assert jax.tree.map(jnp.shape, ours_vars)["params"]["stack"] == {"proj": {"w": (4, 3, 3)}}
    np.testing.assert_allclose(
        ours.apply(theirs_vars, x, xs), theirs.apply(theirs_vars, x, xs), rtol=1e-5, atol=1e-5
    )


def test_vmap_of_a_method_with_a_module_argument() -> None:
    class Apply(nn.Module):
        @nn.compact
        def __call__(self, layer: nn.Module, x: jax.Array) -> jax.Array:
            return layer(x) + Scale(2)(x)

    class Host(nn.Module):
        @nn.compact
        def __call__(self, x: jax.Array) -> jax.Array:
            shared = Scale(2)
            mapped = nn.vmap(
                Apply,
                variable_axes={"params": None},
                split_rngs={"params": False},
                in_axes=(None, 0),
            )
            return mapped()(shared, x)

    x = jnp.ones((5, 1, 3))
    variables = Host().init(jax.random.key(0), x)
    shapes = jax.tree.map(jnp.shape, variables["params"])
    assert shapes == {"Scale_0": {"w": (3, 2)}, "VmapApply_0": {"Scale_0": {"w": (3, 2)}}}
    assert Host().apply(variables, x).shape == (5, 1, 2)


def test_scan_vmap_remat_program_initializes_as_flax() -> None:
    # The rng streams go into lifted transforms as in Flax (path suffix and counters shared;
    # split streams split), so the same key gives the same initial parameters.
    flax_nn = pytest.importorskip("flax.linen")
    x = jnp.linspace(0.0, 1.0, 3).reshape(1, 3)
    xs = jnp.ones((4, 1, 3))
    ours = _transformed_program(nn).init(jax.random.key(0), x, xs)
    theirs = _transformed_program(flax_nn).init(jax.random.key(0), x, xs)
    for a, b in zip(jax.tree.leaves(ours), jax.tree.leaves(theirs), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-6)


def _dropout_twice(lib: Any) -> Any:
    class Drop(lib.Module):
        @lib.compact
        def __call__(self, x: jax.Array) -> jax.Array:
            return lib.Dropout(0.5, deterministic=False)(x)

    class Net(lib.Module):
        @lib.compact
        def __call__(self, x: jax.Array) -> tuple[jax.Array, ...]:
            d = lib.jit(Drop)()
            e = lib.vmap(Drop, split_rngs={"dropout": True}, variable_axes={})()
            return d(x), d(x), e(x), lib.remat(Drop)()(x)

    return Net()


def test_dropout_masks_under_transforms_match_flax() -> None:
    # A jitted module called twice draws two masks (its counter advances even when the
    # second call reuses the compiled program), as in Flax.
    flax_nn = pytest.importorskip("flax.linen")
    x = jnp.ones((3, 8))
    rngs = {"dropout": jax.random.key(1)}
    ours = _dropout_twice(nn).apply({}, x, rngs=rngs)
    theirs = _dropout_twice(flax_nn).apply({}, x, rngs=rngs)
    assert not np.array_equal(ours[0], ours[1])
    for a, b in zip(ours, theirs, strict=True):
        np.testing.assert_array_equal(a, b)
