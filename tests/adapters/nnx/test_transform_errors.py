"""Errors of NNX's mapped and scanned transforms name the arguments as the user wrote
them (parameter names, a Module's Variables by their path), in JAX's words."""

import jax.numpy as jnp
import pytest

from adapters import nnx


def test_vmap_sizes_that_disagree_name_the_parameters() -> None:
    layer = nnx.Linear(2, 3, rngs=nnx.Rngs(0))

    @nnx.vmap(in_axes=(None, 0, 0))
    def f(model: nnx.Linear, x: jnp.ndarray, bias: jnp.ndarray) -> jnp.ndarray:
        return model(x) + bias

    with pytest.raises(ValueError, match="vmap got inconsistent sizes") as info:
        f(layer, jnp.ones((4, 2)), jnp.ones((5, 3)))
    message = str(info.value)
    assert "one axis had size 4: axis 0 of argument x of type float32[4,2]" in message
    assert "one axis had size 5: axis 0 of argument bias of type float32[5,3]" in message


def test_vmap_sizes_name_a_mapped_module_variable_and_count_the_majority() -> None:
    layer = nnx.Linear(2, 3, rngs=nnx.Rngs(0))  # mapped over axis 0: kernel has 2, bias 3

    @nnx.vmap(in_axes=(0, 0))
    def f(model: nnx.Linear, xs: dict) -> jnp.ndarray:
        return xs["a"]

    with pytest.raises(ValueError, match="inconsistent sizes") as info:
        f(layer, {"a": jnp.ones((2, 1)), "b": jnp.ones((2, 1))})
    message = str(info.value)
    assert "most axes (3 of them) had size 2, e.g. axis 0 of" in message
    assert "one axis had size 3: axis 0 of argument model.bias of type float32[3]" in message


def test_scan_lengths_that_disagree_say_where_each_was_found() -> None:
    @nnx.scan(in_axes=(nnx.Carry, 0), out_axes=(nnx.Carry, 0))
    def g(carry: jnp.ndarray, xs: dict) -> tuple[jnp.ndarray, jnp.ndarray]:
        return carry, xs["a"]

    with pytest.raises(ValueError, match="different leading axis sizes: 4, 5") as info:
        g(jnp.ones(2), {"a": jnp.ones((4, 2)), "b": jnp.ones((5,))})
    assert "argument xs['b'] of type float32[5] has 5 along axis 0" in str(info.value)


@pytest.mark.parametrize(("graph", "updates"), [(True, False), (False, False)])
def test_grad_of_a_whole_model_holding_rngs_needs_allow_int(graph: bool, updates: bool) -> None:
    # Without a Param filter every Variable is differentiated, the RNG key and counter too.
    model = nnx.Sequential(nnx.Linear(2, 2, rngs=nnx.Rngs(0)), nnx.Dropout(0.5, rngs=nnx.Rngs(1)))

    def loss(m: nnx.Sequential) -> jnp.ndarray:
        return m(jnp.ones((1, 2))).sum()

    with pytest.raises(TypeError, match="grad requires real- or complex-valued inputs"):
        nnx.grad(loss, graph=graph, graph_updates=updates)(model)
    grads = nnx.grad(loss, graph=graph, graph_updates=updates, allow_int=True)(model)
    assert isinstance(grads, nnx.Sequential)
    assert nnx.grad(loss)(model)["layers"][0]["kernel"][...].shape == (2, 2)  # Params only


class _Holder(nnx.Module):
    def __init__(self) -> None:
        self.w = nnx.Param(jnp.ones(2))


@pytest.mark.parametrize("graph", [True, False])
def test_returning_a_variable_captured_from_outside_is_refused(graph: bool) -> None:
    outside = _Holder()
    f = nnx.jit(lambda: outside, graph=graph, graph_updates=False)
    with pytest.raises(ValueError, match=r"Cannot return captured Variable of type Param "):
        f()
    with pytest.raises(ValueError, match=r"from nnx.grad.\nFound at path: .out(\[1\])?.w"):
        grad = nnx.grad(
            lambda m: (m.w[...].sum(), outside), has_aux=True, graph=graph, graph_updates=False
        )
        grad(_Holder())
    g = nnx.jit(lambda: outside.w, graph=True, graph_updates=True)
    with pytest.raises(ValueError, match="Cannot extract graph node from different trace level"):
        g()


def test_paths_of_an_aliased_variable_read_as_attributes() -> None:
    f = nnx.jit(lambda m: m, graph=False)
    with pytest.raises(ValueError, match=r"- \.args\[0\]\.w\n  - \.out\.w") as info:
        f(_Holder())
    assert "does not support Variable aliasing" in str(info.value)


def test_a_new_variable_returned_twice_is_refused_in_tree_mode_only() -> None:
    def twice() -> tuple[nnx.Param, nnx.Param]:
        v = nnx.Param(jnp.ones(2))
        return v, v

    with pytest.raises(ValueError, match=r"- \.out\[0\]\n  - \.out\[1\]"):
        nnx.jit(twice, graph=False)()
    a, b = nnx.jit(twice, graph=True, graph_updates=False)()
    assert a is b  # graph mode keeps the sharing
