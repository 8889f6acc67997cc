"""Linear, Identity, MLP, Sequential/Lambda: shapes, defaults, numerics vs jnp and Flax."""

from collections.abc import Callable

import jax
import jax.numpy as jnp
import pytest

import pytreemod as pm
from pytreemod.nn import functional as F

from ._compare import close, jcall, linen, make, randn, run_linen

Key = Callable[[], jax.Array]


def test_linear_shapes_names_and_collections(getkey: Key) -> None:
    layer = make(pm.nn.Linear, 3, 4, key=getkey())
    assert layer.kernel.shape == (3, 4) and layer.bias is not None and layer.bias.shape == (4,)
    variables = pm.to_variables(layer)
    assert set(variables) == {"params"} and set(variables["params"]) == {"kernel", "bias"}
    assert layer(jnp.ones((2, 7, 3))).shape == (2, 7, 4)  # eager works too
    assert jax.eval_shape(layer, jnp.ones(3)).shape == (4,)  # no batch axes


def test_linear_matches_jnp_reference(getkey: Key) -> None:
    layer = make(pm.nn.Linear, 3, 4, bias_init=jax.nn.initializers.normal(), key=getkey())
    x = randn(getkey(), (2, 7, 3))
    assert layer.bias is not None
    close(jcall(layer, x), x @ layer.kernel.value + layer.bias.value.reshape(1, 1, 4))


def test_linear_without_bias(getkey: Key) -> None:
    layer = make(pm.nn.Linear, 3, 4, use_bias=False, key=getkey())
    assert layer.bias is None
    assert set(pm.to_variables(layer)["params"]) == {"kernel"}
    x = randn(getkey(), (2, 7, 3))
    close(jcall(layer, x), x @ layer.kernel.value)


@pytest.mark.parametrize("use_bias", [True, False])
def test_linear_matches_flax_dense(getkey: Key, use_bias: bool) -> None:
    nn = linen()
    layer = make(
        pm.nn.Linear, 3, 4, use_bias=use_bias, bias_init=jax.nn.initializers.normal(), key=getkey()
    )
    x = randn(getkey(), (2, 7, 3))
    ref = run_linen(nn.Dense(4, use_bias=use_bias), pm.to_variables(layer), x)
    close(jcall(layer, x), ref)


def test_linear_default_initializers_are_flax_defaults(getkey: Key) -> None:
    nn = linen()
    key = getkey()
    kkey = key  # the kernel draws from the layer's key (a zeros bias needs none)
    layer = pm.nn.Linear(3, 4, key=key)
    flax_kernel_init = nn.Dense.__dataclass_fields__["kernel_init"].default
    flax_bias_init = nn.Dense.__dataclass_fields__["bias_init"].default
    close(layer.kernel.value, flax_kernel_init(kkey, (3, 4), jnp.float32), tol=0)
    assert layer.bias is not None
    close(layer.bias.value, flax_bias_init(kkey, (4,), jnp.float32), tol=0)


def test_linear_dtype_promotion_is_explicit(getkey: Key) -> None:
    layer = make(pm.nn.Linear, 3, 4, key=getkey())
    y = jax.eval_shape(layer, jnp.ones((2, 3), jnp.bfloat16))  # strict promotion is on
    assert y.dtype == jnp.float32
    half = make(pm.nn.Linear, 3, 4, dtype=jnp.bfloat16, key=getkey())
    assert jax.eval_shape(half, jnp.ones((2, 3))).dtype == jnp.bfloat16


def test_linear_accepts_partitioned_kernels(getkey: Key) -> None:
    init = pm.with_partitioning(jax.nn.initializers.lecun_normal(), ("embed", "mlp"))
    layer = pm.nn.Linear(3, 4, kernel_init=init, key=getkey())
    assert isinstance(layer.kernel.value, pm.Partitioned)
    assert jax.eval_shape(layer, jnp.ones((2, 3))).shape == (2, 4)


def test_identity_returns_its_input() -> None:
    x = jnp.arange(3.0)
    assert pm.nn.Identity()(x, 1, flag=True) is x


def test_mlp_structure_and_reference(getkey: Key) -> None:
    mlp = make(
        pm.nn.MLP,
        3,
        [8, 8],
        4,
        activation=jax.nn.tanh,
        final_activation=jax.nn.sigmoid,
        key=getkey(),
    )
    assert [layer.kernel.shape for layer in mlp.layers] == [(3, 8), (8, 8), (8, 4)]
    x = randn(getkey(), (2, 7, 3))

    def reference(mlp: pm.nn.MLP, x: jax.Array) -> jax.Array:
        h = x
        for layer in mlp.layers[:-1]:
            assert layer.bias is not None
            h = jnp.tanh(h @ layer.kernel.value + layer.bias.value[None, None])
        last = mlp.layers[-1]
        assert last.bias is not None
        return jax.nn.sigmoid(h @ last.kernel.value + last.bias.value[None, None])

    close(jcall(mlp, x), jcall(reference, mlp, x))


def test_mlp_single_hidden_int_and_no_final_bias(getkey: Key) -> None:
    mlp = jax.eval_shape(lambda k: pm.nn.MLP(3, 16, 1, use_final_bias=False, key=k), getkey())
    assert len(mlp.layers) == 2 and mlp.layers[-1].bias is None
    single = make(pm.nn.MLP, 3, (), 4, key=getkey())
    assert len(single.layers) == 1
    assert jax.eval_shape(single, jnp.ones(3)).shape == (4,)


def test_sequential_wraps_functions_and_splits_keys(getkey: Key) -> None:
    k1, k2 = getkey(), getkey()

    def build(*, key: jax.Array) -> pm.nn.Sequential:
        return pm.nn.Sequential(
            [
                pm.nn.Linear(3, 8, key=k1),
                jax.nn.relu,
                pm.nn.Dropout(0.5),
                pm.nn.Linear(8, 4, key=k2),
            ]
        )

    model = make(build, key=k1)
    assert isinstance(model.layers[1], pm.nn.Lambda)
    assert len(model) == 4 and isinstance(model[0], pm.nn.Linear)
    x = randn(getkey(), (2, 7, 3))
    expected = jcall(lambda m, v: m[3](jax.nn.relu(m[0](v))), model, x)
    close(jcall(lambda m, v: m(v, deterministic=True), model, x), expected)
    train = pm.jit(lambda m, v, k: m(v, key=k))
    y1, y2 = train(model, x, jax.random.key(1)), train(model, x, jax.random.key(2))
    assert y1.shape == (2, 7, 4) and not jnp.allclose(y1, y2)
    assert isinstance(model[:2], pm.nn.Sequential)


def test_sequential_is_a_pytree_under_jit_and_grad(getkey: Key) -> None:
    model = pm.nn.Sequential([pm.nn.Linear(3, 4, key=getkey()), jax.nn.gelu])

    def loss(m: pm.nn.Sequential, x: jax.Array) -> jax.Array:
        return jnp.sum(m(x) ** 2)

    grads = jax.jit(jax.grad(loss))(model, jnp.ones((2, 7, 3)))
    assert grads.layers[0].kernel.value.shape == (3, 4)


def test_functional_linear_matches_layer(getkey: Key) -> None:
    layer = make(pm.nn.Linear, 3, 4, key=getkey())
    x = randn(getkey(), (2, 7, 3))
    assert layer.bias is not None
    close(jcall(layer, x), jcall(F.linear, x, layer.kernel.value, layer.bias.value), tol=0)
