"""NNX transforms, part 1: jit, grad, remat, cond/switch, eval_shape, vjp/jvp, custom_vjp,
shard_map, checkify, make_jaxpr, split/merge_inputs, prefix, compat (Flax 0.12.8's
semantics in graph mode, graph mode without graph updates, and tree mode)."""

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx as fnnx
from jax.experimental import checkify as jax_checkify

from adapters import nnx
from adapters.nnx import extract
from adapters.nnx.transforms import general

MODES = [(True, True), (True, False), (False, False)]


class Scale(nnx.Module):
    def __init__(self, w: float = 2.0) -> None:
        self.w = nnx.Param(jnp.array(w))


class Counter(nnx.Module):
    def __init__(self) -> None:
        self.count = nnx.BatchStat(jnp.array(0))
        self.w = nnx.Param(jnp.array(2.0))

    def __call__(self, x: jax.Array) -> jax.Array:
        self.count[...] += 1
        return x * self.w[...]


@pytest.mark.parametrize(("graph", "updates"), MODES)
def test_jit_propagates_variable_changes_and_traces_once(graph: bool, updates: bool) -> None:
    traces = []

    @nnx.jit(graph=graph, graph_updates=updates)
    def f(m: Counter, x: jax.Array) -> jax.Array:
        traces.append(1)
        return m(x)

    m = Counter()
    w = m.w
    assert float(f(m, jnp.array(3.0))) == 6.0
    assert float(f(m, jnp.array(3.0))) == 6.0
    assert int(m.count[...]) == 2 and m.w is w and len(traces) == 1


def test_jit_graph_updates_structure_identity_and_swaps() -> None:
    m: Any = Counter()
    count, w = m.count, m.w

    @nnx.jit(graph=True, graph_updates=True)
    def f(m: Any) -> Any:
        m.count, m.w = m.w, m.count
        m.extra = nnx.Param(jnp.ones(2))
        return m

    assert f(m) is m
    assert m.count is w and m.w is count and m.extra.shape == (2,)


def test_jit_without_graph_updates_keeps_structure() -> None:
    m = Counter()

    @nnx.jit(graph=True, graph_updates=False)
    def f(m: Any) -> None:
        m.extra = 1
        m.w[...] = 5.0

    f(m)
    assert not hasattr(m, "extra") and float(m.w[...]) == 5.0


def test_aliasing_errors_match_flax() -> None:
    v = nnx.Param(jnp.array(1.0))
    with pytest.raises(ValueError, match="does not support Variable aliasing"):
        nnx.jit(lambda a, b: None, graph=False)(v, v)
    with pytest.raises(ValueError, match="does not support Variable aliasing"):
        nnx.jit(lambda a: a, graph=True, graph_updates=False)(v)
    shared = nnx.jit(lambda a, b: a[...] + b[...], graph=True)(v, v)
    assert float(shared) == 2.0
    sharding = jax.sharding.PartitionSpec
    with pytest.raises(ValueError, match="Inconsistent aliasing detected"):
        extract.check_prefix_aliasing((v, v), (sharding(), sharding("x")))


def test_prefix_checks_match_flax() -> None:
    d = nnx.Dict(a=nnx.Param(1))
    with pytest.raises(ValueError, match="Graph nodes are not allowed as prefixes"):
        nnx.grad(lambda x: x, argnums=d, graph=True, graph_updates=True)
    with pytest.raises(ValueError, match="cannot contain `DiffState` objects"):
        nnx.grad(lambda x: x, argnums=nnx.DiffState(0, ...), graph=False)
    with pytest.raises(ValueError, match="Variables prefixes are not supported"):
        nnx.jit(lambda x: x, in_shardings=(nnx.Param(1),))
    tree_state = nnx.prefix(Counter(), {...: None}, graph=True)
    with pytest.raises(ValueError, match="`TreeState` objects are only allowed"):
        nnx.jit(lambda x: x, in_shardings=(tree_state,), graph=True, graph_updates=True)


@pytest.mark.parametrize(("graph", "updates"), [(True, True), (False, False)])
def test_grad_matches_flax(graph: bool, updates: bool) -> None:
    ours, theirs = nnx.Linear(2, 3, rngs=nnx.Rngs(0)), fnnx.Linear(2, 3, rngs=fnnx.Rngs(0))
    x = jnp.ones((4, 2))

    def loss(m, x):
        return jnp.sum(m(x) ** 2)

    g = nnx.grad(loss, graph=graph, graph_updates=updates)(ours, x)
    h = fnnx.grad(loss, graph=graph, graph_updates=updates)(theirs, x)
    assert type(g).__name__ == type(h).__name__
    ours_kernel = g["kernel"][...] if updates else g.kernel[...]
    theirs_kernel = h["kernel"][...] if updates else h.kernel[...]
    np.testing.assert_allclose(ours_kernel, theirs_kernel, rtol=1e-6)


def test_grad_diffstate_aux_and_value() -> None:
    m = Counter()

    def loss(m: Counter, x: jax.Array):
        y = m(x)
        return y, y * 10

    (value, aux), grads = nnx.value_and_grad(
        loss, argnums=nnx.DiffState(0, nnx.Param), has_aux=True
    )(m, jnp.array(3.0))
    assert float(value) == 6.0 and float(aux) == 60.0
    assert float(grads["w"][...]) == 3.0 and "count" not in grads
    assert int(m.count[...]) == 1
    with pytest.raises(ValueError, match="argnum 0 is repeated in argnums"):
        nnx.grad(loss, argnums=(0, nnx.DiffState(0, ...)))


@pytest.mark.parametrize(("graph", "updates"), [(True, True), (False, False)])
def test_cond_switch_remat(graph: bool, updates: bool) -> None:
    m = Counter()
    kw: dict[str, Any] = {"graph": graph, "graph_updates": updates}
    nnx.cond(True, lambda m: m(1.0), lambda m: m(2.0) * 0, m, **kw)
    out = nnx.switch(1, [lambda m: m(1.0), lambda m: m(5.0)], m, **kw)
    assert float(out) == 10.0
    assert float(nnx.remat(lambda m, x: m(x), **kw)(m, jnp.array(1.0))) == 2.0
    assert int(m.count[...]) == 3


def test_vjp_jvp_and_their_mode_errors() -> None:
    m = Counter()
    out, vjp_fn = nnx.vjp(lambda m, x: m(x), m, jnp.array(3.0), graph=False)
    (gm, gx) = vjp_fn(jnp.array(1.0))
    assert float(out) == 6.0 and float(gm.w[...]) == 3.0 and float(gx) == 2.0
    w = nnx.Param(jnp.array(2.0))
    _, t_out = nnx.jvp(lambda w: w[...] * 3.0, (w,), (nnx.Param(jnp.array(1.0)),), graph=False)
    assert float(t_out) == 3.0
    with pytest.raises(NotImplementedError, match=r"not supported for nnx\.vjp"):
        nnx.vjp(lambda m: m(1.0), m, graph=True, graph_updates=True)
    with pytest.raises(NotImplementedError, match="reduce_axes"):
        nnx.vjp(lambda m: m(1.0), m, reduce_axes=("x",), graph=False)


def test_custom_vjp_tree_mode() -> None:
    @nnx.custom_vjp(graph=False)
    def f(m: Scale, x: jax.Array) -> jax.Array:
        return m.w[...] * x

    def fwd(m, x):
        return f(m, x), (m.w[...], x)

    def bwd(res, g):
        w, x = res
        return Scale(g * x * 100), g * w

    f.defvjp(fwd, bwd)
    g = nnx.grad(lambda m, x: f(m, x), graph=False)(Scale(), jnp.array(3.0))
    assert float(g.w[...]) == 300.0


def test_eval_shape_checkify_make_jaxpr() -> None:
    m = Counter()
    abstract = nnx.eval_shape(lambda: Counter(), graph=False)
    assert isinstance(abstract.w.get_value(), jax.ShapeDtypeStruct)
    err, out = nnx.checkify(lambda m: m(jnp.array(1.0)))(m)
    assert err.get() is None and float(out) == 2.0 and int(m.count[...]) == 1
    err, _ = nnx.checkify(lambda m: jnp.sin(m.w[...] * jnp.inf), errors=jax_checkify.float_checks)(
        m
    )
    assert err.get() is not None
    jaxpr = nnx.make_jaxpr(lambda m: m(1.0), graph_updates=False)(m)
    assert jaxpr.jaxpr.eqns and int(m.count[...]) == 1
    with pytest.raises(ValueError, match="does not support graph_updates=True"):
        nnx.make_jaxpr(lambda m: m(1.0), graph_updates=True)(m)


def test_bound_methods_and_kwargs_are_refused() -> None:
    m = Counter()
    for transform in (nnx.jit, nnx.grad, nnx.remat, nnx.checkify):
        with pytest.raises(ValueError, match="does not support bound methods"):
            transform(m.__call__)
    with pytest.raises(ValueError, match="Keyword-only arguments are not supported"):
        general.resolve_kwargs(lambda a, *, b: a, (1,), {"b": 2})


def test_split_merge_inputs_with_jax_cond() -> None:
    m = Counter()
    general.split_inputs(jax.lax.cond)(
        True, general.merge_inputs(lambda m: m(1.0) * 0), general.merge_inputs(lambda m: 0.0), m
    )
    assert int(m.count[...]) == 1


def test_prefix_node_states_and_state_sharding() -> None:
    m = Counter()
    axes = nnx.prefix(m, {nnx.Param: 0, ...: None}, graph=False)
    assert axes.w == 0 and axes.count is None
    with pytest.raises(ValueError, match="No filter matched leaf"):
        nnx.prefix(m, {nnx.Param: 0})
    states = nnx.NodeStates.from_states(1, 2)
    with pytest.raises(ValueError, match="No graphdef available"):
        _ = states.graphdef
    with pytest.raises(ValueError, match="Expected exactly one GraphDefState, got 2"):
        _ = states.state
    tree = nnx.to_tree((m, m))
    back = nnx.from_tree(tree)
    assert back[0] is back[1] and back[0] is not m
    spec = nnx.StateSharding({nnx.Param: "p"})
    assert spec.map_prefix(("w",), m.w) == "p" and spec == nnx.StateSharding({nnx.Param: "p"})
    with pytest.raises(ValueError, match="No axis found"):
        spec.map_prefix(("count",), m.count)
    with pytest.raises(ValueError, match="No axis found"):
        spec.group(("count",), m.count)
    with pytest.raises(NotImplementedError):
        extract.PrefixMapping().map_prefix((), m.w)


def test_jit_donation_shardings_and_aot() -> None:
    m = Counter()
    devices = np.array(jax.devices()[:1])
    mesh = jax.sharding.Mesh(devices, ("a",))
    sharding = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec())
    f = nnx.jit(lambda m, x: m(x), in_shardings=(nnx.StateSharding({...: sharding}), None))
    assert float(f(m, jnp.array(1.0))) == 2.0
    assert isinstance(m.w.get_value().sharding, jax.sharding.NamedSharding)
    g = nnx.jit(lambda m, x: m(x), donate_argnums=(0,), graph=False)
    assert float(g(m, jnp.array(1.0))) == 2.0 and float(m.w[...]) == 2.0
    compiled = nnx.jit(lambda m, x: m(x)).lower(m, jnp.array(1.0)).compile()
    assert float(compiled(m, jnp.array(2.0))) == 4.0 and int(m.count[...]) == 3


def test_shard_map_and_compat() -> None:
    mesh = jax.sharding.Mesh(np.array(jax.devices()[:1]), ("a",))
    spec = jax.sharding.PartitionSpec()
    m = Counter()
    out = nnx.shard_map(lambda m: m(1.0), mesh=mesh, in_specs=(spec,), out_specs=spec)(m)
    assert float(out) == 2.0 and int(m.count[...]) == 1
    assert nnx.compat.jit.keywords == {"graph": True, "graph_updates": True}
    assert nnx.compat.split.keywords == {"graph": True}
    with pytest.raises(AttributeError, match="has no attribute 'nothing'"):
        _ = nnx.compat.nothing


def test_prefix_string_filter_is_a_tag_as_in_flax() -> None:
    def build(lib: Any) -> Any:
        class Tagged(lib.Module):
            def __init__(self) -> None:
                self.a = lib.Param(jnp.ones(2), tag="foo")
                self.b = lib.Param(jnp.ones(2))

        return Tagged()

    for filter_map in ({"foo": 0, ...: None}, {"params": 0, ...: None}):
        ours = nnx.prefix(build(nnx), filter_map, graph=False)
        theirs = fnnx.prefix(build(fnnx), filter_map, graph=False)
        assert (ours.a, ours.b) == (theirs.a, theirs.b)
    # A StateSharding's string filter is a tag too.
    m = build(nnx)
    assert nnx.StateSharding({"foo": "x", ...: "y"}).map_prefix(("b",), m.b) == "y"


def test_cached_partial_feeds_jit_and_updates_the_originals() -> None:
    m = Counter()

    @nnx.jit
    def step(cached: Counter, x: jax.Array) -> tuple[Counter, jax.Array]:
        return cached, cached(x)

    f = nnx.cached_partial(step, m)
    first, y = f(jnp.array(3.0))
    second, _ = f(jnp.array(1.0))
    assert float(y) == 6.0 and first is second and first is not m
    assert first.w is m.w and int(m.count[...]) == 2
    # Only a transform that takes the offered cache may be called through it.
    with pytest.raises(ValueError, match="no context consumed it"):
        nnx.cached_partial(lambda cached: cached, m)()


def test_custom_vjp_graph_updates_matches_flax() -> None:
    def run(lib: Any) -> tuple[Any, ...]:
        class Foo(lib.Module):
            def __init__(self) -> None:
                self.x = lib.Param(jnp.array(1.0))
                self.y = lib.Param(jnp.array(2.0))
                self.calls = 0

        @lib.custom_vjp(graph=True, graph_updates=True)
        def f(m: Any, other: Any) -> Any:
            m.calls += 1
            return jnp.sin(m.x[...]) * m.y[...], other

        def f_fwd(m: Any, other: Any) -> Any:
            return f(m, other), (jnp.cos(m.x[...]), m)

        def f_bwd(res: Any, g: Any) -> Any:
            (m_g, other_g), (out_g, _) = g
            cos_x, m = res
            m_g["x"][...] = cos_x * out_g * m.y[...]
            m_g["y"][...] = jnp.sin(m.x[...]) * out_g
            return m_g, other_g

        f.defvjp(f_fwd, f_bwd)
        m, other = Foo(), Foo()

        def loss(m: Any, other: Any) -> Any:
            y, o = f(m, other)
            return y + o.x[...] * o.y[...]

        grads = lib.grad(loss, argnums=(0, 1), graph=True, graph_updates=True)(m, other)
        return (*(float(g[k][...]) for g in grads for k in ("x", "y")), m.calls)

    assert run(nnx) == pytest.approx(run(fnnx))
    with pytest.raises(ValueError, match="argnum 0 is repeated in nondiff_argnums"):
        nnx.custom_vjp(lambda m: m, nondiff_argnums=(0, nnx.DiffState(0, ...)))
    g = nnx.custom_vjp(lambda m, s: s, nondiff_argnums=(0,))
    g.defvjp(lambda m, s: (s, None), lambda m, res, g: (g,))
    with pytest.raises(TypeError, match="Passing integers to nondiff_argnums for graph nodes"):
        g(Scale(), jnp.array(1.0))
    h = nnx.custom_vjp(lambda m: m.w[...], graph=True, graph_updates=True)
    with pytest.raises(ValueError):  # Flax: a bare ValueError before defvjp
        h(Scale())
    h.defvjp(lambda m: (h(m), None), lambda res, g: ("not a state",))
    with pytest.raises(ValueError, match="Expected State or Variable, got <class 'str'>"):
        nnx.grad(h, graph=True, graph_updates=True)(Scale())


@pytest.mark.parametrize("graph", [True, False])
def test_custom_vjp_updates_cotangents_as_in_flax(graph: bool) -> None:
    def run(lib: Any) -> tuple[Any, ...]:
        seen: list[Any] = []

        class Foo(lib.Module):
            def __init__(self) -> None:
                self.x = lib.Param(jnp.array(1.0))
                self.n = lib.BatchStat(jnp.array(0.0))

        @lib.custom_vjp(graph=graph, graph_updates=False)
        def f(m: Any) -> Any:
            m.n[...] += 1.0
            return jnp.sin(m.x[...])

        def f_fwd(m: Any) -> Any:
            return f(m), (jnp.cos(m.x[...]), m)

        def f_bwd(res: Any, g: Any, updates_g: Any) -> Any:
            (m_up,) = updates_g
            seen.append((m_up.x is None, type(m_up.n).__name__))
            m_g = lib.clone(res[1])
            m_g.x[...] = res[0] * g
            return (m_g,)

        f.defvjp(f_fwd, f_bwd)
        m = Foo()
        params, rest = lib.split(m, lib.Param, ...)[1:]
        graphdef = lib.graphdef(m)
        grad = lib.grad(lambda p, r: f(lib.merge(graphdef, p, r)), graph=graph)(params, rest)
        return seen[0], float(grad["x"][...])

    assert run(nnx) == run(fnnx)
