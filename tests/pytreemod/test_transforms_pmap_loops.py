"""pm.pmap, pm.fori_loop, pm.remat's static_argnums, and pm.vmap naming an unmapped output in
JAX's error: the pytreemod transforms NNX's transforms are built on."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import pytreemod as pm


class Scale(pm.Module):
    w: pm.Param
    name: str = pm.field(static=True, default="scale")

    def __init__(self, w: jax.Array):
        self.w = pm.Param(w)

    def __call__(self, x: jax.Array) -> jax.Array:
        return x * self.w.value


def test_pmap_maps_modules_and_broadcasts_with_none():
    model = Scale(jnp.full((1, 3), 2.0))  # one device: a leading axis of 1
    out = pm.pmap(lambda m, x: m(x), in_axes=(0, None))(model, jnp.arange(3.0))
    np.testing.assert_allclose(out, [[0.0, 2.0, 4.0]])


def test_pmap_module_output_keeps_its_static_fields_and_axis_name_works():
    def step(m: Scale) -> Scale:
        return Scale(jax.lax.psum(m.w.value, "d"))

    out = pm.pmap(step, axis_name="d")(Scale(jnp.ones((1, 2))))
    assert isinstance(out, Scale) and out.name == "scale"
    np.testing.assert_allclose(out.w.value, [[1.0, 1.0]])


def test_pmap_static_broadcasted_argnums_pass_the_value_untraced():
    seen: list[object] = []

    def f(x: jax.Array, mode: str, k: int) -> jax.Array:
        seen.append((mode, k))
        return x * k if mode == "mul" else x + k

    out = pm.pmap(f, in_axes=(0, None, None), static_broadcasted_argnums=(1, 2))(
        jnp.ones((1, 2)), "mul", 3
    )
    np.testing.assert_allclose(out, [[3.0, 3.0]])
    assert seen == [("mul", 3)]


def test_pmap_donate_argnums_runs_and_returns_the_new_values():
    model = Scale(jnp.full((1, 2), 2.0))
    out = pm.pmap(lambda m, x: Scale(m(x)), donate_argnums=0)(model, jnp.ones((1, 2)))
    np.testing.assert_allclose(out.w.value, [[2.0, 2.0]])


def test_pmap_rejects_an_argument_both_static_and_donated():
    with pytest.raises(pm.TransformError, match=r"both static .* and donated"):
        pm.pmap(lambda x: x, static_broadcasted_argnums=0, donate_argnums=0)


def test_pmap_rejects_argnums_out_of_range():
    f = pm.pmap(lambda x: x, donate_argnums=3)
    with pytest.raises(pm.TransformError, match="name argument 3 but the function got 1"):
        f(jnp.ones((1, 2)))


def test_pmap_mapped_sizes_are_checked_by_name():
    f = pm.pmap(lambda a, b: a + b)
    with pytest.raises(pm.TransformError, match="pmap: the sizes of the mapped axes"):
        f(jnp.ones((1, 2)), jnp.ones((2, 2)))


def test_fori_loop_threads_a_module():
    def body(i: jax.Array, m: Scale) -> Scale:
        return Scale(m.w.value + i)

    out = pm.fori_loop(0, 4, body, Scale(jnp.zeros(2)))
    np.testing.assert_allclose(out.w.value, [6.0, 6.0])
    unrolled = pm.fori_loop(0, 4, body, Scale(jnp.zeros(2)), unroll=2)
    np.testing.assert_allclose(unrolled.w.value, [6.0, 6.0])


def test_fori_loop_rejects_a_changed_structure():
    def body(i: jax.Array, state: dict[str, jax.Array]) -> dict[str, jax.Array]:
        return {"a": state["a"], "b": state["a"]}

    with pytest.raises(pm.TransformError, match="fori_loop: body_fun returned a loop state"):
        pm.fori_loop(0, 2, body, {"a": jnp.zeros(2)})


def test_remat_static_argnums_hand_an_array_untraced():
    def f(x: jax.Array, table: np.ndarray) -> jax.Array:
        assert isinstance(table, np.ndarray)  # not a tracer
        return jnp.sin(x) * float(table.sum())

    table = np.array([1.0, 2.0])
    g = jax.grad(lambda x: pm.remat(f, static_argnums=1)(x, table).sum())(jnp.ones(2))
    np.testing.assert_allclose(g, 3.0 * np.cos(1.0) * np.ones(2), rtol=1e-6)
    neg = jax.grad(lambda x: pm.remat(f, static_argnums=(-1,))(x, table).sum())(jnp.ones(2))
    np.testing.assert_allclose(neg, g)


def test_remat_static_argnums_out_of_range():
    with pytest.raises(pm.TransformError, match="static_argnums names argument 2"):
        pm.remat(lambda x: x, static_argnums=2)(jnp.ones(2))


def test_vmap_names_a_batched_output_given_out_axes_none():
    f = pm.vmap(lambda x: {"kept": x.sum(), "oops": x}, out_axes={"kept": None, "oops": None})
    with pytest.raises(
        ValueError, match=r"output\.kept'\], got axis spec None but output was batched"
    ):
        f(jnp.ones((3, 2)))


def test_vjp_over_a_module_gives_module_cotangents():
    m = Scale(jnp.array([1.0, 2.0]))
    out, vjp_fn = pm.vjp(lambda m, x: m(x), m, jnp.array([3.0, 4.0]))
    np.testing.assert_allclose(out, [3.0, 8.0])
    dm, dx = vjp_fn(jnp.ones(2))
    assert isinstance(dm, Scale) and dm.name == "scale"
    np.testing.assert_allclose(dm.w.value, [3.0, 4.0])
    np.testing.assert_allclose(dx, [1.0, 2.0])
    _, vjp_aux, aux = pm.vjp(lambda m: (m.w.value**2, "aux"), m, has_aux=True)
    assert aux == "aux"
    np.testing.assert_allclose(vjp_aux(jnp.ones(2))[0].w.value, [2.0, 4.0])


def test_vjp_rejects_a_cotangent_of_another_structure():
    _, vjp_fn = pm.vjp(lambda m: m, Scale(jnp.ones(2)))
    with pytest.raises(pm.TransformError, match="vjp: the cotangent has the structure"):
        vjp_fn({"w": jnp.ones(2)})


def test_jvp_over_a_module():
    m = Scale(jnp.array([1.0, 2.0]))
    out, tangent = pm.jvp(lambda m: m.w.value**2, (m,), (Scale(jnp.ones(2)),))
    np.testing.assert_allclose(out, [1.0, 4.0])
    np.testing.assert_allclose(tangent, [2.0, 4.0])
    _, t_aux, aux = pm.jvp(lambda m: (m, 1), (m,), (m,), has_aux=True)
    assert aux == 1 and isinstance(t_aux, Scale)


def test_jvp_rejects_tangents_of_another_structure_and_a_bad_aux():
    m = Scale(jnp.ones(2))
    with pytest.raises(pm.TransformError, match="jvp: the tangents have the structure"):
        pm.jvp(lambda m: m, (m,), ({"w": jnp.ones(2)},))
    with pytest.raises(pm.TransformError, match="jvp: has_aux=True needs the function"):
        pm.jvp(lambda m: m, (m,), (m,), has_aux=True)


def test_grad_allow_int_and_holomorphic():
    tree = {"x": jnp.array(2.0), "n": jnp.array(3)}
    g = pm.grad(lambda t: t["x"] * 2.0, allow_int=True)(tree)
    assert g["n"].dtype == jax.dtypes.float0
    assert pm.grad(lambda t: t["x"] * 2.0)(tree)["n"] is None
    z = jnp.array(1.0 + 1.0j)
    np.testing.assert_allclose(pm.grad(lambda z: z**2, holomorphic=True)(z), 2.0 * z)


def test_scan_traces_its_body_once_per_structure():
    traces: list[int] = []

    def step(c: jax.Array, x: jax.Array) -> tuple[jax.Array, jax.Array]:
        traces.append(1)
        return c + x, c

    scanned = pm.scan(step)
    outs = [scanned(jnp.zeros(()), jnp.arange(3.0))[0] for _ in range(3)]
    assert [float(c) for c in outs] == [3.0, 3.0, 3.0] and len(traces) == 1
    scanned(jnp.zeros(()), jnp.arange(4.0))  # another length: the same body
    assert len(traces) == 1
    scanned(jnp.zeros(2), jnp.ones((3, 2)))  # another element shape: traced again
    assert len(traces) == 2


def test_scan_with_a_broadcast_array_sees_the_new_value_each_call():
    def step(c: jax.Array, w: jax.Array, x: jax.Array) -> tuple[jax.Array, jax.Array]:
        return c + w * x, c

    scanned = pm.scan(step, in_axes=(pm.Carry, None, 0))
    first, _ = scanned(jnp.zeros(()), jnp.array(1.0), jnp.arange(3.0))
    second, _ = scanned(jnp.zeros(()), jnp.array(2.0), jnp.arange(3.0))
    assert (float(first), float(second)) == (3.0, 6.0)


def test_scan_split_transpose_gives_the_same_gradient():
    def loss(w: jax.Array, split: bool) -> jax.Array:
        step = pm.scan(lambda c, x: (jnp.sin(c * w + x), c), split_transpose=split)
        return step(jnp.ones(()), jnp.arange(3.0))[0]

    g = jax.grad(loss)(jnp.array(0.5), False)
    np.testing.assert_allclose(jax.grad(loss)(jnp.array(0.5), True), g, rtol=1e-6)


def test_checkify_over_a_module_returns_the_error_and_the_output():
    from jax.experimental import checkify as jax_checkify

    def f(m: Scale, x: jax.Array) -> Scale:
        jax_checkify.check(jnp.all(x > 0), "x must be positive")
        return Scale(m(x))

    err, out = pm.checkify(f)(Scale(jnp.ones(2)), jnp.array([1.0, 2.0]))
    err.throw()
    assert isinstance(out, Scale)
    np.testing.assert_allclose(out.w.value, [1.0, 2.0])
    err, _ = pm.jit(pm.checkify(f))(Scale(jnp.ones(2)), jnp.array([-1.0, 2.0]))
    with pytest.raises(jax_checkify.JaxRuntimeError, match="x must be positive"):
        err.throw()
    nan_err, _ = pm.checkify(lambda x: jnp.log(x), errors=jax_checkify.float_checks)(-1.0)
    with pytest.raises(jax_checkify.JaxRuntimeError, match="nan generated"):
        nan_err.throw()
