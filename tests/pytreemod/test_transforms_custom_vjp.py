"""pm.custom_vjp: jax.custom_vjp over modules (the pytreemod transform nnx.custom_vjp is
built on). Arrays are the inputs; non-array leaves are static, as in pm.vjp."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import pytreemod as pm


class Affine(pm.Module):
    w: pm.Param
    b: pm.Param
    scale: float
    label: str = pm.field(static=True, default="affine")

    def __init__(self, w: jax.Array, b: jax.Array, scale: float = 1.0):
        self.w = pm.Param(w)
        self.b = pm.Param(b)
        self.scale = scale

    def __call__(self, x: jax.Array) -> jax.Array:
        return self.scale * (self.w.value * x + self.b.value)


def _rule(factor: float) -> pm.CustomVjp:
    """``Affine.__call__`` whose backward rule is ``factor`` times the true VJP."""

    def fwd(m: Affine, x: jax.Array) -> tuple[jax.Array, tuple[Affine, jax.Array]]:
        return m(x), (m, x)

    def bwd(res: tuple[Affine, jax.Array], g: jax.Array) -> tuple[Affine, jax.Array]:
        m, x = res
        dm = Affine(factor * g * x * m.scale, factor * g * m.scale, m.scale)
        return dm, factor * g * m.w.value * m.scale

    f = pm.custom_vjp(lambda m, x: m(x))
    f.defvjp(fwd, bwd)
    return f


def _loss(f, m: Affine, x: jax.Array) -> jax.Array:
    return jnp.sum(f(m, x) ** 2)


@settings(max_examples=8, deadline=None)
@given(
    w=st.floats(-2, 2, width=32),
    b=st.floats(-2, 2, width=32),
    x=st.floats(-2, 2, width=32),
    factor=st.sampled_from([1.0, 3.0]),
)
def test_law_the_custom_backward_is_the_gradient(w: float, b: float, x: float, factor: float):
    """grad through the rule is ``factor`` times plain autodiff, for the module (a module
    of gradients) and the array argument alike."""
    m, xs = Affine(jnp.array([w]), jnp.array([b]), 2.0), jnp.array([x])
    plain = pm.grad(lambda m, x: _loss(lambda m, x: m(x), m, x), argnums=(0, 1))(m, xs)
    custom = pm.grad(lambda m, x: _loss(_rule(factor), m, x), argnums=(0, 1))(m, xs)
    assert isinstance(custom[0], Affine)
    assert custom[0].scale == 2.0 and custom[0].label == "affine"
    (dm, dx), (pm_, px) = custom, plain
    for got, want in [(dm.w.value, pm_.w.value), (dm.b.value, pm_.b.value), (dx, px)]:
        np.testing.assert_allclose(got, factor * np.asarray(want), rtol=1e-5, atol=1e-6)


def test_the_rule_replaces_autodiff_under_jit_and_the_value_is_funs():
    @pm.custom_vjp
    def clip(x: jax.Array) -> jax.Array:
        return x

    clip.defvjp(lambda x: (x, None), lambda _, g: (jnp.clip(g, -1.0, 1.0),))
    assert vars(clip)["__name__"] == "clip"  # functools.update_wrapper
    np.testing.assert_allclose(clip(jnp.array([4.0])), [4.0])
    g = jax.jit(jax.grad(lambda x: 5.0 * clip(x)))(2.0)
    np.testing.assert_allclose(g, 1.0)
    np.testing.assert_allclose(jax.grad(lambda x: 5.0 * clip(x))(2.0), 1.0)
    # jit inside grad: fun is traced first, fwd only when the jaxpr is differentiated
    np.testing.assert_allclose(jax.grad(jax.jit(lambda x: 5.0 * clip(x)))(2.0), 1.0)


def test_module_output_and_residual_keep_their_static_leaves():
    f = pm.custom_vjp(lambda m: Affine(m.w.value * 2, m.b.value, m.scale))

    def fwd(m: Affine) -> tuple[Affine, tuple[str, float]]:
        return f(m), ("a note", m.scale)  # a string residual: static, returned as is

    def bwd(res: tuple[str, float], g: Affine) -> tuple[Affine]:
        note, scale = res
        assert note == "a note" and scale == 3.0
        assert isinstance(g, Affine) and g.scale == 3.0  # the output cotangent: a module
        return (Affine(g.w.value * 2, g.b.value, g.scale),)

    f.defvjp(fwd, bwd)
    m = Affine(jnp.ones(2), jnp.zeros(2), 3.0)
    out = f(m)
    assert isinstance(out, Affine) and out.scale == 3.0
    grads = pm.grad(lambda m: jnp.sum(f(m).w.value + 5.0 * f(m).b.value))(m)
    np.testing.assert_allclose(grads.w.value, [2.0, 2.0])  # bwd's doubling, not autodiff's
    np.testing.assert_allclose(grads.b.value, [5.0, 5.0])


def test_nondiff_arguments_come_first_in_bwd_and_may_hold_traced_arrays():
    @pm.custom_vjp(nondiff_argnums=(0, 2))
    def f(power: int, m: Affine, shift: jax.Array) -> jax.Array:
        return jnp.sum(m.w.value**power) + shift

    def fwd(power: int, m: Affine, shift: jax.Array) -> tuple[jax.Array, Affine]:
        return f(power, m, shift), m

    def bwd(power: int, shift: jax.Array, m: Affine, g: jax.Array) -> tuple[Affine]:
        assert power == 2  # a Python number stays static
        return (Affine(g * power * m.w.value + shift, jnp.zeros_like(m.b.value), m.scale),)

    f.defvjp(fwd, bwd)
    m = Affine(jnp.array([1.0, 2.0]), jnp.zeros(2))
    grads = jax.jit(lambda m, s: pm.grad(lambda m: f(2, m, s))(m))(m, jnp.array(10.0))
    np.testing.assert_allclose(grads.w.value, [12.0, 14.0])


def test_none_is_a_zero_cotangent_for_an_argument_or_one_array():
    f = pm.custom_vjp(lambda m, x: m(x))

    def bwd(res: None, g: jax.Array) -> tuple[Affine, None]:
        zero_b = Affine(g, jnp.zeros(1), 1.0)
        object.__setattr__(zero_b, "b", None)  # None in place of one array
        return zero_b, None

    f.defvjp(lambda m, x: (m(x), None), bwd)
    m = Affine(jnp.ones(1), jnp.ones(1))
    dm, dx = pm.grad(lambda m, x: jnp.sum(f(m, x)), argnums=(0, 1))(m, jnp.ones(1))
    np.testing.assert_allclose(dm.w.value, [1.0])
    np.testing.assert_allclose(dm.b.value, [0.0])
    np.testing.assert_allclose(dx, [0.0])


def test_python_numbers_are_static_and_keywords_are_resolved_to_positions():
    seen: list[object] = []

    def fun(x: jax.Array, k: float = 1.0) -> jax.Array:
        seen.append(type(k))
        return x * k

    f = pm.custom_vjp(fun)
    # k is static: whatever bwd puts at its place is ignored.
    f.defvjp(lambda x, k=1.0: (fun(x, k), k), lambda k, g: (g * k, "ignored"))
    assert jax.grad(lambda x: f(x, k=3.0))(jnp.array(1.0)) == 3.0
    assert seen == [float]


def test_symbolic_zeros_reach_the_rules():
    f = pm.custom_vjp(lambda x, y: x * y)

    def fwd(x, y):
        assert x.perturbed and not y.perturbed
        return x.value * y.value, y.value

    f.defvjp(fwd, lambda y, g: (g * y, None), symbolic_zeros=True)
    np.testing.assert_allclose(jax.grad(lambda x: f(x, jnp.array(3.0)))(jnp.array(2.0)), 3.0)


def test_errors_name_the_fix():
    f = pm.custom_vjp(lambda m, x: m(x))
    m, x = Affine(jnp.ones(1), jnp.ones(1)), jnp.ones(1)
    with pytest.raises(pm.TransformError, match=r"no backward rule; call .*defvjp"):
        f(m, x)
    with pytest.raises(pm.TransformError, match="nondiff_argnums entries must be"):
        pm.custom_vjp(lambda x: x, nondiff_argnums=(-1,))
    with pytest.raises(TypeError, match="custom_vjp: expected a callable value"):
        pm.custom_vjp(3)  # type: ignore[arg-type]

    g = pm.custom_vjp(lambda x, k: x, nondiff_argnums=(3,))
    g.defvjp(lambda x, k: (x, None), lambda *a: (None,))
    with pytest.raises(pm.TransformError, match=r"names argument 3 but .* got 2 arguments"):
        g(x, 1)

    f.defvjp(lambda m, x: m(x), lambda r, g: (m, g))  # fwd returns no pair
    with pytest.raises(pm.TransformError, match=r"fwd must return a pair \(out, residual\)"):
        jax.grad(lambda x: jnp.sum(f(m, x)))(x)

    f.defvjp(lambda m, x: (m(x), None), lambda r, g: (g,))  # one cotangent for two args
    with pytest.raises(pm.TransformError, match="bwd must return a tuple of 2 cotangents"):
        jax.grad(lambda x: jnp.sum(f(m, x)))(x)

    f.defvjp(lambda m, x: (m(x), None), lambda r, g: ({"w": g}, g))
    with pytest.raises(pm.TransformError, match="cotangent for argument 0 has the structure"):
        jax.grad(lambda x: jnp.sum(f(m, x)))(x)


def test_arguments_that_do_not_fit_or_are_keyword_only_are_reported():
    def kw_only(x: jax.Array, *, k: float) -> jax.Array:
        return x * k

    f = pm.custom_vjp(kw_only)
    f.defvjp(lambda x, *, k: (x * k, None), lambda r, g: (g,))
    with pytest.raises(pm.TransformError, match=r"keyword-only arguments \['k'\]"):
        f(jnp.ones(1), k=2.0)
    with pytest.raises(pm.TransformError, match="the arguments do not fit the function"):
        f(jnp.ones(1), q=2.0)  # pyright: ignore[reportCallIssue]
