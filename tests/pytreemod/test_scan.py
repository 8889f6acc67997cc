"""pm.scan: scan over layers, Carry/StateAxes, lengths and axes, errors, axis metadata."""

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import pytreemod as pm

LAYERS = {pm.PARTITION_NAME: "layers"}


class Layer(pm.Module):
    weight: pm.Param
    bias: pm.Param
    act: Callable[[jax.Array], jax.Array] = pm.field(static=True, default=jnp.tanh)

    def __init__(self, key: jax.Array, n: int = 3):
        self.weight = pm.Param(jax.random.normal(key, (n, n), dtype=jnp.float32) / n)
        self.bias = pm.Param(jnp.full(n, 0.1, dtype=jnp.float32))

    def __call__(self, x: jax.Array) -> jax.Array:
        return self.act(x @ self.weight.value + self.bias.value)


class BoxedLayer(pm.Module):
    weight: pm.Param

    def __init__(self, key: jax.Array):
        init = pm.with_partitioning(jax.nn.initializers.normal(0.5), ("embed", "mlp"))
        self.weight = pm.Param(init(key, (3, 3), jnp.float32))

    def __call__(self, x: jax.Array) -> jax.Array:
        return jnp.tanh(x @ self.weight.value.value)


class Decoder(pm.Module):
    """Stacked weights (params), a running cache, a counter and a broadcast statistic."""

    weight: pm.Param  # (L, n): one row per step
    cache: pm.Cache  # (n,): carried
    count: pm.BatchStat  # (): carried or broadcast, depending on the test
    scale: pm.Intermediate  # (): broadcast


def _x() -> jax.Array:
    return jnp.array([0.5, -1.0, 2.0], dtype=jnp.float32)


def _stack(getkey: Callable[[], jax.Array], depth: int = 4) -> Layer:
    return pm.vmap(Layer)(jax.random.split(getkey(), depth))


def _unstack(layers: Any, i: int) -> Any:
    return jax.tree.map(lambda a: a[i], layers)


# --- scan over layers ---------------------------------------------------------------------


def test_scan_over_layers_equals_python_loop(getkey: Callable[[], jax.Array]) -> None:
    layers = _stack(getkey)

    @pm.scan(in_axes=(pm.Carry, 0), out_axes=pm.Carry)
    def forward(x: jax.Array, layer: Layer) -> jax.Array:
        assert layer.weight.value.shape == (3, 3)  # one layer at a time
        return layer(x)

    y = forward(_x(), layers)
    expected = _x()
    for i in range(4):
        expected = _unstack(layers, i)(expected)
    np.testing.assert_allclose(y, expected, rtol=1e-5, atol=1e-6)
    # Under jit too.
    np.testing.assert_allclose(pm.jit(forward)(_x(), layers), expected, rtol=1e-5, atol=1e-6)


def test_scan_out_axes_carry_and_stacked_ys(getkey: Callable[[], jax.Array]) -> None:
    layers = _stack(getkey)

    @pm.scan(in_axes=(pm.Carry, 0), out_axes=(pm.Carry, 0))
    def forward(x: jax.Array, layer: Layer) -> tuple[jax.Array, dict[str, Any]]:
        y = layer(x)
        return y, {"h": y, "norm": jnp.sum(y**2)}

    y, ys = forward(_x(), layers)
    assert ys["h"].shape == (4, 3) and ys["norm"].shape == (4,)
    h = _x()
    for i in range(4):
        h = _unstack(layers, i)(h)
        np.testing.assert_allclose(ys["h"][i], h, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(ys["norm"][i], jnp.sum(h**2), rtol=1e-5)
    np.testing.assert_allclose(y, h, rtol=1e-5, atol=1e-6)


def test_scan_gradient_matches_loop(getkey: Callable[[], jax.Array]) -> None:
    layers = _stack(getkey, depth=3)
    forward = pm.scan(lambda x, layer: layer(x), in_axes=(pm.Carry, 0), out_axes=pm.Carry)

    def loop(layers: Layer) -> jax.Array:
        x = _x()
        for i in range(3):
            x = _unstack(layers, i)(x)
        return jnp.sum(x)

    g = pm.grad(lambda ls: jnp.sum(forward(_x(), ls)))(layers)
    gl = pm.grad(loop)(layers)
    assert type(g) is Layer
    np.testing.assert_allclose(g.weight.value, gl.weight.value, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(g.bias.value, gl.bias.value, rtol=1e-5, atol=1e-6)


def test_scan_modules_as_carry(getkey: Callable[[], jax.Array]) -> None:
    # The carry can itself be a module; broadcast (None) arguments are the same each step.
    class Acc(pm.Module):
        total: pm.Param
        steps: pm.BatchStat

    acc = Acc(pm.Param(jnp.zeros(3, dtype=jnp.float32)), pm.BatchStat(jnp.zeros((), jnp.int32)))
    xs = jnp.arange(12, dtype=jnp.float32).reshape(4, 3)
    scale = jnp.array(2.0, dtype=jnp.float32)

    @pm.scan(in_axes=(pm.Carry, None, 0), out_axes=(pm.Carry, 0))
    def step(acc: Acc, scale: jax.Array, x: jax.Array) -> tuple[Acc, jax.Array]:
        new = Acc(pm.Param(acc.total.value + scale * x), pm.BatchStat(acc.steps.value + 1))
        return new, new.total.value

    out, ys = step(acc, scale, xs)
    assert type(out) is Acc and int(out.steps.value) == 4
    np.testing.assert_allclose(out.total.value, 2.0 * xs.sum(0))
    np.testing.assert_allclose(ys, 2.0 * jnp.cumsum(xs, axis=0))


def test_scan_two_carried_arguments() -> None:
    xs = jnp.arange(5, dtype=jnp.float32)

    @pm.scan(in_axes=(pm.Carry, pm.Carry, 0), out_axes=(pm.Carry, 0))
    def fib(a: jax.Array, b: jax.Array, x: jax.Array) -> Any:
        return (b, a + b + x), a

    (a, b), ys = fib(jnp.zeros((), jnp.float32), jnp.ones((), jnp.float32), xs)
    ea, eb, eys = 0.0, 1.0, []
    for x in range(5):
        eys.append(ea)
        ea, eb = eb, ea + eb + x
    np.testing.assert_allclose(ys, eys)
    assert float(a) == ea and float(b) == eb


def test_scan_without_carry_is_a_map() -> None:
    xs = jnp.arange(6, dtype=jnp.float32).reshape(3, 2)
    out = pm.scan(lambda x: {"sq": x**2}, in_axes=0, out_axes=0)(xs)
    np.testing.assert_allclose(out["sq"], xs**2)


# --- StateAxes in scan ----------------------------------------------------------------------


def _decoder() -> Decoder:
    return Decoder(
        pm.Param(jnp.arange(12, dtype=jnp.float32).reshape(4, 3) / 10.0),
        pm.Cache(jnp.zeros(3, dtype=jnp.float32)),
        pm.BatchStat(jnp.zeros((), dtype=jnp.float32)),
        pm.Intermediate(jnp.array(2.0, dtype=jnp.float32)),
    )


def _decode_loop(m: Decoder, x: jax.Array, carry_count: bool) -> tuple[Decoder, Any, Any]:
    cache, count, rows, ys = m.cache.value, m.count.value, [], []
    for i in range(4):
        w = m.weight.value[i]
        x = x * w * m.scale.value + cache
        cache = cache + x
        count = count + 1.0 if carry_count else m.count.value + 1.0
        rows.append(w * 2.0)
        ys.append(x)
    new = m.replace(
        weight=pm.Param(jnp.stack(rows)),
        cache=pm.Cache(cache),
        count=pm.BatchStat(count if carry_count else m.count.value),
    )
    return new, x, jnp.stack(ys)


@pytest.mark.parametrize("carry_count", [False, True])
def test_scan_state_axes_carry_scan_and_broadcast(carry_count: bool) -> None:
    m, x0 = _decoder(), jnp.ones(3, dtype=jnp.float32)
    axes = pm.StateAxes(
        {
            "params": 0,
            "cache": pm.Carry,
            pm.BatchStat: pm.Carry if carry_count else None,
            ...: None,
        }
    )
    seen: list[Any] = []

    @pm.scan(in_axes=(axes, pm.Carry), out_axes=(pm.Carry, 0))
    def step(m: Decoder, x: jax.Array) -> Any:
        seen.append((m.weight.value.shape, m.cache.value.shape))
        x = x * m.weight.value * m.scale.value + m.cache.value
        new = m.replace(
            weight=pm.Param(m.weight.value * 2.0),  # scanned state: stacked back
            cache=pm.Cache(m.cache.value + x),  # carried
            count=pm.BatchStat(m.count.value + 1.0),  # carried, or read-only when broadcast
            scale=pm.Intermediate(m.scale.value * 100.0),  # broadcast: change is dropped
        )
        return (new, x), x

    (out, x), ys = step(m, x0)
    expected, ex, eys = _decode_loop(m, x0, carry_count)
    assert seen == [((3,), (3,))]
    assert type(out) is Decoder
    np.testing.assert_allclose(out.weight.value, expected.weight.value, rtol=1e-6)
    np.testing.assert_allclose(out.cache.value, expected.cache.value, rtol=1e-6)
    np.testing.assert_allclose(out.count.value, 4.0 if carry_count else 0.0)
    np.testing.assert_allclose(out.scale.value, 2.0)  # broadcast: the input's
    np.testing.assert_allclose(x, ex, rtol=1e-6)
    np.testing.assert_allclose(ys, eys, rtol=1e-6)


def test_scan_state_axes_scanned_on_axis_1() -> None:
    m = _decoder()
    m = m.replace(weight=pm.Param(m.weight.value.T))  # (3, L): layers on axis 1
    axes = pm.StateAxes({"params": 1, "cache": pm.Carry, ...: None})

    @pm.scan(in_axes=(axes, pm.Carry), out_axes=(pm.Carry, 0))
    def step(m: Decoder, x: jax.Array) -> Any:
        x = x * m.weight.value * m.scale.value + m.cache.value
        new = m.replace(weight=pm.Param(m.weight.value * 2.0), cache=pm.Cache(m.cache.value + x))
        return (new, x), x

    (out, _), ys = step(m, jnp.ones(3, dtype=jnp.float32))
    expected, _, eys = _decode_loop(_decoder(), jnp.ones(3, dtype=jnp.float32), False)
    assert out.weight.value.shape == (3, 4)
    np.testing.assert_allclose(out.weight.value, expected.weight.value.T, rtol=1e-6)
    np.testing.assert_allclose(ys, eys, rtol=1e-6)


def test_scan_state_axes_unmatched_variable_names_path() -> None:
    axes = pm.StateAxes({"params": 0, "cache": pm.Carry})
    with pytest.raises(
        pm.TransformError, match=r"scan in_axes: .* does not match args\[0\]\.count .*batch_stats"
    ):
        pm.scan(lambda m, x: ((m, x), x), in_axes=(axes, pm.Carry))(_decoder(), _x())


# --- length, reverse, unroll, axes -----------------------------------------------------------


def _cumsum_step(c: jax.Array, x: jax.Array) -> tuple[jax.Array, jax.Array]:
    c = c * 0.5 + x
    return c, c


@pytest.mark.parametrize("reverse", [False, True])
@pytest.mark.parametrize("unroll", [1, 2, True])
def test_scan_reverse_and_unroll_match_lax_scan(reverse: bool, unroll: int | bool) -> None:
    xs = jnp.arange(10, dtype=jnp.float32).reshape(5, 2)
    c0 = jnp.zeros(2, dtype=jnp.float32)
    c, ys = pm.scan(_cumsum_step, reverse=reverse, unroll=unroll)(c0, xs)
    ec, eys = jax.lax.scan(_cumsum_step, c0, xs, reverse=reverse)
    np.testing.assert_allclose(c, ec)
    np.testing.assert_allclose(ys, eys)


def test_scan_length_without_scanned_inputs() -> None:
    @pm.scan(in_axes=(pm.Carry,), out_axes=(pm.Carry, 0), length=5)
    def count(c: jax.Array) -> tuple[jax.Array, jax.Array]:
        return c + 1, c * 10

    c, ys = count(jnp.zeros((), dtype=jnp.int32))
    assert int(c) == 5
    np.testing.assert_array_equal(ys, [0, 10, 20, 30, 40])
    # A length that agrees with the scanned inputs is fine.
    c2, _ = pm.scan(_cumsum_step, length=3)(
        jnp.zeros(2, jnp.float32), jnp.ones((3, 2), jnp.float32)
    )
    assert c2.shape == (2,)


def test_scan_along_nonzero_axis() -> None:
    xs = jnp.arange(10, dtype=jnp.float32).reshape(2, 5)  # scanned along axis 1
    c0 = jnp.zeros(2, dtype=jnp.float32)
    c, ys = pm.scan(_cumsum_step, in_axes=(pm.Carry, 1), out_axes=(pm.Carry, 1))(c0, xs)
    ec, eys = jax.lax.scan(_cumsum_step, c0, xs.T)
    np.testing.assert_allclose(c, ec)
    assert ys.shape == (2, 5)
    np.testing.assert_allclose(ys, eys.T)
    c_neg, ys_neg = pm.scan(_cumsum_step, in_axes=(pm.Carry, 1), out_axes=(pm.Carry, -1))(c0, xs)
    np.testing.assert_allclose(c_neg, ec)
    np.testing.assert_allclose(ys_neg, eys.T)


# --- errors ----------------------------------------------------------------------------------


def test_mismatched_carry_in_in_axes_and_out_axes() -> None:
    xs = jnp.ones((3, 2), dtype=jnp.float32)
    c0 = jnp.zeros(2, dtype=jnp.float32)
    with pytest.raises(pm.TransformError, match=r"must both contain Carry or neither"):
        pm.scan(_cumsum_step, in_axes=(pm.Carry, 0), out_axes=(0, 0))(c0, xs)
    with pytest.raises(pm.TransformError, match=r"must both contain Carry or neither"):
        pm.scan(lambda x: (x, x), in_axes=(0,), out_axes=(pm.Carry, 0))(xs)


def test_scan_without_scanned_input_or_length() -> None:
    with pytest.raises(pm.TransformError, match=r"no input is scanned .* length="):
        pm.scan(lambda c, b: (c, c), in_axes=(pm.Carry, None))(
            jnp.zeros(2, jnp.float32), jnp.ones(2, jnp.float32)
        )


def test_scanned_inputs_of_different_lengths() -> None:
    c0 = jnp.zeros(2, dtype=jnp.float32)
    with pytest.raises(
        pm.TransformError,
        match=r"differ in length: argument `a` \(positional 1\) has 3, argument `b` "
        r"\(positional 2\) has 4 along the scanned axis",
    ):
        pm.scan(lambda c, a, b: (c, a), in_axes=(pm.Carry, 0, 0))(
            c0, jnp.ones((3, 2), jnp.float32), jnp.ones((4, 2), jnp.float32)
        )
    with pytest.raises(
        pm.TransformError, match=r"`t` \(positional 1\) at \.a has 3, argument `t` .* at \.b has 4"
    ):
        pm.scan(lambda c, t: (c, c), in_axes=(pm.Carry, 0))(
            c0, {"a": jnp.ones(3, jnp.float32), "b": jnp.ones(4, jnp.float32)}
        )
    with pytest.raises(
        pm.TransformError, match=r"length=5 but argument `x` \(positional 1\) has 3"
    ):
        pm.scan(_cumsum_step, length=5)(c0, jnp.ones((3, 2), jnp.float32))


def test_length_errors_name_variadic_and_method_arguments() -> None:
    c0 = jnp.zeros(2, dtype=jnp.float32)

    def step(c: jax.Array, *xs: jax.Array) -> tuple[jax.Array, jax.Array]:
        return c, xs[0]

    with pytest.raises(pm.TransformError, match=r"argument `\*xs\[1\]` \(positional 2\) has 5"):
        pm.scan(step, in_axes=(pm.Carry, 0, 0))(
            c0, jnp.ones((3, 2), jnp.float32), jnp.ones((5, 2), jnp.float32)
        )

    class Accumulate(pm.Module):
        scale: float = pm.field(static=True, default=0.5)

        def step(self, total: jax.Array, item: jax.Array) -> tuple[jax.Array, jax.Array]:
            return total + self.scale * item, total

    with pytest.raises(
        pm.TransformError, match=r"length=3 but argument `item` \(positional 1\) has 4"
    ):
        pm.scan(Accumulate().step, length=3)(c0, jnp.ones((4, 2), jnp.float32))


def test_carry_structure_change_rejected(getkey: Callable[[], jax.Array]) -> None:
    layer = Layer(getkey())
    xs = jnp.ones((3, 3), dtype=jnp.float32)
    with pytest.raises(pm.TransformError, match=r"carry returned by the body does not have the"):
        pm.scan(lambda m, x: (m.replace(act=jax.nn.relu), x))(layer, xs)
    with pytest.raises(pm.TransformError, match=r"does not have the structure"):
        pm.scan(lambda m, x: (m.replace(bias=pm.BatchStat(m.bias.value)), x))(layer, xs)
    with pytest.raises(pm.TransformError, match=r"Carry output must be the 2 carried"):
        pm.scan(lambda a, b, x: (a, x), in_axes=(pm.Carry, pm.Carry, 0))(
            jnp.zeros(3, jnp.float32), jnp.zeros(3, jnp.float32), xs
        )


def test_out_axes_with_two_carries_rejected() -> None:
    xs = jnp.ones((3, 2), dtype=jnp.float32)
    with pytest.raises(pm.TransformError, match=r"must contain exactly one Carry"):
        pm.scan(lambda c, x: (c, c), in_axes=(pm.Carry, 0), out_axes=(pm.Carry, pm.Carry))(
            jnp.zeros(2, jnp.float32), xs
        )


def test_out_axes_prefix_length_mismatch() -> None:
    xs = jnp.ones((3, 2), dtype=jnp.float32)
    with pytest.raises(pm.TransformError, match=r"out_axes .* has 2 entries but the function"):
        pm.scan(lambda c, x: (c, x, x), in_axes=(pm.Carry, 0), out_axes=(pm.Carry, 0))(
            jnp.zeros(2, jnp.float32), xs
        )


def test_shared_variable_with_inconsistent_scan_specs() -> None:
    class H(pm.Module):
        v: pm.Param

    p = pm.Param(jnp.ones((3, 2), dtype=jnp.float32))
    with pytest.raises(
        pm.TransformError, match=r"args\[0\]\.v and args\[1\]\.v are the same Variable"
    ):
        pm.scan(lambda a, b: (a, b.v.value), in_axes=(pm.Carry, 0))(H(p), H(p))


# --- axis metadata ------------------------------------------------------------------------------


def test_scan_metadata_params(getkey: Callable[[], jax.Array]) -> None:
    layers = pm.vmap(BoxedLayer, metadata_params=LAYERS)(jax.random.split(getkey(), 3))
    assert layers.weight.value.names == ("layers", "embed", "mlp")
    seen: list[Any] = []

    @pm.scan(in_axes=(pm.Carry, 0), out_axes=(pm.Carry, 0), metadata_params=LAYERS)
    def forward(x: jax.Array, layer: BoxedLayer) -> tuple[jax.Array, BoxedLayer]:
        seen.append(layer.weight.value.names)
        new = layer.replace(
            weight=pm.Param(layer.weight.value.replace_boxed(layer.weight.value.value * 2.0))
        )
        return layer(x), new

    y, stacked = forward(_x(), layers)
    assert seen == [("embed", "mlp")]
    # The stacked outputs' boxes got the axis back, named by metadata_params.
    assert stacked.weight.value.names == ("layers", "embed", "mlp")
    np.testing.assert_allclose(stacked.weight.value.value, 2.0 * layers.weight.value.value)
    expected = _x()
    for i in range(3):
        expected = _unstack(layers, i)(expected)
    np.testing.assert_allclose(y, expected, rtol=1e-5, atol=1e-6)


def test_scan_metadata_on_carried_module_with_state_axes(getkey: Callable[[], jax.Array]) -> None:
    class CachedLayer(pm.Module):
        layer: BoxedLayer
        cache: pm.Cache

    layers = pm.vmap(BoxedLayer, metadata_params=LAYERS)(jax.random.split(getkey(), 3))
    model = CachedLayer(layers, pm.Cache(jnp.zeros(3, dtype=jnp.float32)))
    seen: list[Any] = []

    @pm.scan(
        in_axes=(pm.StateAxes({"params": 0, "cache": pm.Carry}), pm.Carry),
        out_axes=(pm.Carry, 0),
        metadata_params=LAYERS,
    )
    def forward(m: CachedLayer, x: jax.Array) -> Any:
        seen.append(m.layer.weight.value.names)
        box = m.layer.weight.value
        y = m.layer(x)
        new = CachedLayer(
            m.layer.replace(weight=pm.Param(box.replace_boxed(box.value + 1.0))),
            pm.Cache(m.cache.value + y),
        )
        return (new, y), y

    (out, y), ys = forward(model, _x())
    assert seen == [("embed", "mlp")]
    # Scanned state is stacked back with its boxes' names intact.
    assert out.layer.weight.value.names == ("layers", "embed", "mlp")
    np.testing.assert_allclose(out.layer.weight.value.value, layers.weight.value.value + 1.0)
    np.testing.assert_allclose(out.cache.value, jnp.sum(ys, axis=0), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(y, ys[-1])


def test_scan_metadata_params_mismatch_is_an_error(getkey: Callable[[], jax.Array]) -> None:
    layers = pm.vmap(BoxedLayer, metadata_params=LAYERS)(jax.random.split(getkey(), 2))
    with pytest.raises(pm.AxisMetadataError, match=r"expected axis name None"):
        pm.scan(lambda x, layer: layer(x), in_axes=(pm.Carry, 0), out_axes=pm.Carry)(_x(), layers)


def test_scan_out_axes_none_for_stacked_output_is_rejected() -> None:
    f = pm.scan(lambda c, x: (c, x), in_axes=(pm.Carry, 0), out_axes=(pm.Carry, None))
    with pytest.raises(pm.TransformError, match=r"scan out_axes: None at output"):
        f(jnp.zeros(()), jnp.ones(3))


class _Reduced(pm.AxisMetadata):
    """Stores the mean over a scanned axis and broadcasts it back when the axis is removed."""

    value: Any

    def unbox(self) -> Any:
        return self.value

    def add_axis(self, index: int, params: Any) -> "_Reduced":
        return self.replace(value=jnp.mean(self.value, axis=index))

    def remove_axis(self, index: int, params: Any) -> "_Reduced":
        shape = list(self.value.shape)
        shape.insert(index, params["length"])
        return self.replace(value=jnp.broadcast_to(self.value, shape))


def test_box_axes_change_outside_the_loop() -> None:
    # remove_axis sees the stacked input before the loop (it may broadcast a stored value
    # to the scanned length), add_axis the stacked output after it.
    seen: list[tuple[int, ...]] = []

    def step(c: jax.Array, box: _Reduced, x: jax.Array) -> tuple[jax.Array, _Reduced]:
        seen.append(box.value.shape)
        return c + box.value, box.replace(value=box.value * x)

    xs = jnp.arange(4.0)
    f = pm.scan(
        step, in_axes=(pm.Carry, 0, 0), out_axes=(pm.Carry, 0), metadata_params={"length": 4}
    )
    c, out = f(jnp.zeros(()), _Reduced(jnp.asarray(3.0)), xs)
    assert seen == [()]
    np.testing.assert_allclose(c, 12.0, rtol=1e-6)
    assert out.value.shape == ()
    np.testing.assert_allclose(out.value, 3.0 * jnp.mean(xs), rtol=1e-6)
