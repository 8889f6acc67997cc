"""nnx.jit's fast path (a call plan remembered from one full lowering): every change the
full path would see is seen, nothing is traced twice, and a dead model's plan goes."""

import contextlib
import functools
import gc
from typing import Any

import hypothesis.strategies as st
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from hypothesis import given, settings

from adapters import nnx
from adapters.errors import TraceContextError
from adapters.nnx import _structure


class Block(nnx.Module):
    def __init__(self, scale: float) -> None:
        self.w = nnx.Param(jnp.full((3,), scale))
        self.calls = nnx.BatchStat(jnp.array(0))

    def __call__(self, x: jax.Array) -> jax.Array:
        self.calls[...] += 1
        return x * self.w[...]


class Stack(nnx.Module):
    def __init__(self, *scales: float) -> None:
        self.blocks = nnx.List([Block(s) for s in scales])
        self.extra = nnx.data([Block(10.0)])  # a plain list: no mutation hook

    def __call__(self, x: jax.Array) -> jax.Array:
        for b in self.blocks:
            x = b(x)
        return self.extra[0](x)


def counted(graph: bool = True) -> tuple[Any, list[int]]:
    traces = [0]

    def f(m: Stack, x: jax.Array) -> jax.Array:
        traces[0] += 1
        return m(x)

    return nnx.jit(f, graph=graph), traces


@pytest.mark.parametrize("graph", [True, False])
def test_repeated_calls_trace_once_and_take_the_fast_path(graph: bool) -> None:
    f, traces = counted(graph)
    m, x = Stack(2.0, 3.0), jnp.ones(3)
    for _ in range(4):
        np.testing.assert_allclose(f(m, x), 60.0 * np.ones(3))
    assert traces[0] == 1
    assert int(m.blocks[0].calls[...]) == 4  # each call's Variable update written back
    assert len(f.plans.plans) == 1 and f.plans.last_used


def test_structural_changes_between_calls_are_seen() -> None:
    f, _ = counted()
    m, x = Stack(2.0), jnp.ones(3)
    np.testing.assert_allclose(f(m, x), 20.0 * np.ones(3))
    m.blocks.append(Block(3.0))  # nnx.List mutation
    np.testing.assert_allclose(f(m, x), 60.0 * np.ones(3))
    m.blocks[0] = Block(5.0)  # attribute replaced
    np.testing.assert_allclose(f(m, x), 150.0 * np.ones(3))
    m.extra[0] = Block(1.0)  # plain list: caught by its snapshot
    np.testing.assert_allclose(f(m, x), 15.0 * np.ones(3))
    m.blocks[0].w = nnx.Param(jnp.zeros(3))
    np.testing.assert_allclose(f(m, x), np.zeros(3))


def test_value_changes_outside_are_read_and_new_shapes_retrace() -> None:
    traces = [0]

    @nnx.jit
    def f(m: Block, x: jax.Array) -> jax.Array:
        traces[0] += 1
        return m(x)

    m = Block(2.0)
    f(m, jnp.ones(3))
    m.w[...] = jnp.full((3,), 4.0)
    np.testing.assert_allclose(f(m, jnp.ones(3)), 4.0 * np.ones(3))
    assert traces[0] == 1
    m.w.set_value(jnp.ones((2, 3)))
    assert f(m, jnp.ones((1, 3))).shape == (2, 3)
    assert traces[0] == 2


def test_metadata_change_and_state_mutation_invalidate_plans() -> None:
    m = Stack(2.0)
    before = _structure.epoch()
    m.blocks[0].w.set_metadata(note="x")
    assert _structure.epoch() > before
    state = nnx.state(m)
    before = _structure.epoch()
    state["blocks"] = {}
    assert _structure.epoch() > before


def sgd_losses(jit: bool, donate: bool) -> tuple[list[float], Any]:
    model = nnx.Linear(3, 2, rngs=nnx.Rngs(0))
    opt = nnx.Optimizer(model, optax.sgd(0.01), wrt=nnx.Param)

    def step(model: nnx.Linear, opt: nnx.Optimizer, x: jax.Array) -> jax.Array:
        loss, grads = nnx.value_and_grad(lambda m: jnp.sum(m(x) ** 2))(model)
        opt.update(model, grads)
        return loss

    if jit:
        step = nnx.jit(step, donate_argnums=(0, 1) if donate else None)
    x = jnp.ones((4, 3))
    return [float(step(model, opt, x)) for _ in range(4)], (model, opt, step)


@pytest.mark.parametrize("donate", [False, True])
def test_optimizer_steps_match_eager_ones(donate: bool) -> None:
    eager, _ = sgd_losses(False, False)
    losses, (_, opt, step) = sgd_losses(True, donate)
    np.testing.assert_allclose(losses, eager, rtol=1e-5)
    assert int(opt.step[...]) == 4
    assert len(step.plans.plans) == 1
    assert bool(step.plans.plans[0].donated) == donate


def test_static_arguments_and_keywords_pass_through() -> None:
    traces = [0]

    @nnx.jit(static_argnames="power")
    def f(m: Block, x: jax.Array, power: int = 1) -> jax.Array:
        traces[0] += 1
        return m(x) ** power

    m = Block(2.0)
    np.testing.assert_allclose(f(m, jnp.ones(3), power=2), 4.0 * np.ones(3))
    np.testing.assert_allclose(f(m, jnp.ones(3), power=2), 4.0 * np.ones(3))
    np.testing.assert_allclose(f(m, jnp.ones(3), power=3), 8.0 * np.ones(3))
    assert traces[0] == 2
    assert int(m.calls[...]) == 3


def test_a_dead_model_takes_its_plan_with_it() -> None:
    f, _ = counted()
    m = Stack(2.0)
    f(m, jnp.ones(3))
    assert len(f.plans.plans) == 1
    del m
    gc.collect()
    assert f.plans.plans == []


def test_updates_from_another_trace_level_are_refused() -> None:
    f, _ = counted()
    m = Stack(2.0)
    f(m, jnp.ones(3))  # the plan exists; now call under an outer trace
    with pytest.raises(TraceContextError, match="Cannot mutate BatchStat from a different trace"):
        jax.jit(lambda x: f(m, x))(jnp.ones(3))


def test_a_structure_changed_on_every_call_stops_building_plans() -> None:
    class Growing(nnx.Module):
        def __init__(self) -> None:
            self.n = 0
            self.w = nnx.Param(jnp.ones(2))

    @nnx.jit
    def f(m: Growing) -> jax.Array:
        return m.w[...] * 2

    m = Growing()
    for i in range(8):
        m.n = i  # a static attribute: every call sees a new structure
        f(m)
    assert not f.plans.enabled


OPS = st.lists(st.sampled_from(["call", "append", "replace", "plain", "value"]), max_size=8)


@settings(max_examples=8, deadline=None)
@given(OPS)
def test_fast_path_agrees_with_eager_calls(ops: list[str]) -> None:
    """Law: any sequence of calls and mutations gives the eager results and state."""
    jitted, eager = Stack(2.0), Stack(2.0)
    f, _ = counted()
    x = jnp.arange(3.0)
    for k, op in enumerate(ops):
        for m in (jitted, eager):
            if op == "append":
                m.blocks.append(Block(1.0 + k))
            elif op == "replace":
                m.blocks[0] = Block(0.5 * k)
            elif op == "plain":
                m.extra[0] = Block(float(k))
            elif op == "value":
                m.blocks[-1].w[...] = jnp.full((3,), float(k))
        if op == "call":
            np.testing.assert_allclose(f(jitted, x), eager(x), rtol=1e-6)
    np.testing.assert_allclose(f(jitted, x), eager(x), rtol=1e-6)
    for a, b in zip(jax.tree.leaves(nnx.state(jitted)), jax.tree.leaves(nnx.state(eager))):
        np.testing.assert_allclose(a, b, rtol=1e-6)


def test_calls_under_another_transform_build_no_plan() -> None:
    f, _ = counted()
    m = Stack(2.0)

    @nnx.scan(in_axes=(nnx.Carry, None), out_axes=nnx.Carry, length=6)
    def loop(x: jax.Array, m: Stack) -> jax.Array:
        return f(m, x)

    np.testing.assert_allclose(loop(jnp.ones(3), m), 20.0**6 * np.ones(3), rtol=1e-6)
    assert f.plans.enabled and f.plans.wasted == 0
    for _ in range(3):
        f(m, jnp.ones(3))
    assert len(f.plans.plans) == 1 and f.plans.last_used


def test_a_plan_serves_calls_from_another_thread() -> None:
    # The plan keeps its building thread's graph context; another thread's calls read
    # their own context and still take the plan.
    import threading

    f, traces = counted()
    m, x = Stack(1.0), jnp.ones(3)
    f(m, x)
    results: list[Any] = []
    worker = threading.Thread(target=lambda: results.append(f(m, x)))
    worker.start()
    worker.join()
    np.testing.assert_allclose(results[0], 10.0 * np.ones(3))
    assert traces[0] == 1 and int(m.blocks[0].calls[...]) == 2


# --------------------------------------------------------------------- jax.Ref results


@pytest.mark.parametrize("graph", [True, False])
def test_ref_variables_made_inside_come_back_as_new_refs(graph: bool) -> None:
    @nnx.jit(graph=graph)
    def make(x: jax.Array) -> nnx.Param[jax.Array]:
        return nnx.Param(x * 2, ref=True)

    for _ in range(2):
        v = make(jnp.ones(2))
        assert v.ref and isinstance(v.get_raw_value(), jax.Ref)
        np.testing.assert_allclose(v[...], 2.0 * np.ones(2))


def test_a_ref_passed_in_and_returned_is_the_callers_own_ref() -> None:
    class Holder(nnx.Pytree):
        def __init__(self) -> None:
            self.r = nnx.data(jax.new_ref(jnp.array(1)))

    @nnx.jit(graph=True, graph_updates=True)
    def bump(h: Holder) -> Holder:
        h.r[...] += 1
        return h

    h = Holder()
    ref = h.r
    for expected in (2, 3):
        out = bump(h)
        assert out is h and h.r is ref  # written in place by JAX, returned as itself
        assert int(ref[...]) == expected
    assert bump.plans is not None and not bump.plans.plans  # Refs take the full path


def test_a_ref_variable_argument_is_updated_in_place_and_returned_as_itself() -> None:
    v = nnx.Variable(jnp.zeros(2), ref=True)
    ref = v.get_raw_value()

    @nnx.jit(graph=True, graph_updates=False)
    def add(v: nnx.Variable[jax.Array], x: jax.Array) -> jax.Array:
        v[...] += x
        return v.get_raw_value()

    out = add(v, jnp.ones(2))
    assert out is ref and v.get_raw_value() is ref
    np.testing.assert_allclose(v[...], np.ones(2))


def test_eval_shape_of_a_function_returning_a_new_ref() -> None:
    make = nnx.jit(lambda x: nnx.Param(x, ref=True))
    v = make.eval_shape(jnp.ones(3))
    assert v.get_raw_value().shape == (3,)


# ------------------------------------------------------ out_shardings of repeated nodes


def test_out_shardings_of_a_node_returned_several_times() -> None:
    mesh = jax.sharding.Mesh(jax.devices()[:1], ("d",))
    sharding = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec())
    abstract = nnx.eval_shape(lambda: nnx.Linear(2, 2, rngs=nnx.Rngs(0)))
    prefixes = nnx.prefix((abstract, abstract), {...: sharding}, graph=True)

    @nnx.jit(out_shardings=prefixes, graph=True, graph_updates=False)
    def twice() -> tuple[nnx.Linear, nnx.Linear]:
        layer = nnx.Linear(2, 2, rngs=nnx.Rngs(0))
        return layer, layer

    a, b = twice()
    assert a is b
    assert a.kernel[...].sharding == sharding and a.bias[...].sharding == sharding


def test_a_single_model_argument_takes_the_plan_and_sees_changes() -> None:
    # One node argument, no keywords, nothing donated: the plan's unrolled call.
    traces = [0]

    @nnx.jit
    def f(model: nnx.Linear, x: jax.Array) -> tuple[jax.Array, nnx.Param[jax.Array]]:
        traces[0] += 1
        return model(x), nnx.Param(x, ref=True)

    model, x = nnx.Linear(2, 2, rngs=nnx.Rngs(0)), jnp.ones((1, 2))
    for _ in range(3):
        y, v = f(model, x)
        np.testing.assert_allclose(y, model(x), rtol=1e-6)
        assert isinstance(v.get_raw_value(), jax.Ref)  # a new Ref on every call
    assert traces[0] == 1 and f.plans.last_used
    model.bias = nnx.Param(jnp.full((2,), 7.0))  # structure changed: the full path again
    np.testing.assert_allclose(f(model, x)[0], model(x), rtol=1e-6)
    np.testing.assert_allclose(f(model, x, **{})[0], model(x), rtol=1e-6)


def test_out_shardings_state_sharding_of_a_returned_node() -> None:
    mesh = jax.sharding.Mesh(jax.devices()[:1], ("d",))
    sharding = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec())

    @nnx.jit(out_shardings=(nnx.StateSharding({nnx.Param: sharding}), None), graph=True)
    def make(x: jax.Array) -> tuple[nnx.Linear, jax.Array]:
        return nnx.Linear(2, 2, rngs=nnx.Rngs(0)), x + 1

    layer, y = make(jnp.zeros(2))
    assert layer.kernel[...].sharding == sharding
    np.testing.assert_allclose(y, np.ones(2))


def test_out_shardings_of_another_structure_than_the_returned_node_is_an_error() -> None:
    mesh = jax.sharding.Mesh(jax.devices()[:1], ("d",))
    sharding = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec())
    no_bias = nnx.Linear(2, 2, use_bias=False, rngs=nnx.Rngs(0))  # one leaf, not two
    prefix = jax.tree.map(lambda _: sharding, no_bias)

    @nnx.jit(out_shardings=prefix, graph=False)
    def make() -> nnx.Linear:
        return nnx.Linear(2, 2, rngs=nnx.Rngs(0))

    with pytest.raises(
        ValueError, match="has 2 state leaves where its out_shardings entry gives 1"
    ):
        make()


def test_a_compiled_call_returns_the_callers_ref_after_a_static_argument() -> None:
    v = nnx.Variable(jnp.zeros(2), ref=True)
    ref = v.get_raw_value()

    def add(scale: int, v: nnx.Variable[jax.Array]) -> jax.Array:
        v[...] += scale
        return v.get_raw_value()

    compiled = nnx.jit(add, static_argnums=0).lower(3, v).compile()
    assert compiled(3, v) is ref
    np.testing.assert_allclose(v[...], 3.0 * np.ones(2))


# ------------------------------------------------- the call nnx.jit serves in one frame


def _inline_ready(graph: bool = True, node_first: bool = True) -> tuple[Any, Any, list[int]]:
    """A jitted f(block, x) (or f(x, block)) called twice: the second call sets up
    the one-frame path that the third and later calls take."""
    traces = [0]

    def f(a: Any, b: Any) -> jax.Array:
        traces[0] += 1
        block, x = (a, b) if node_first else (b, a)
        return block(x)

    jitted, m = nnx.jit(f, graph=graph), Block(2.0)
    for _ in range(2):
        jitted(m, jnp.ones(3)) if node_first else jitted(jnp.ones(3), m)
    assert jitted.plans.inline is not None
    return jitted, m, traces


@pytest.mark.parametrize("node_first", [True, False])
@pytest.mark.parametrize("graph", [True, False])
def test_the_one_frame_call_writes_back_and_reads_outside_changes(
    graph: bool, node_first: bool
) -> None:
    f, m, traces = _inline_ready(graph, node_first)
    m.w[...] = jnp.full((3,), 5.0)  # a value change outside: read by the next call
    x = jnp.arange(3.0)
    out = f(m, x) if node_first else f(x, m)
    np.testing.assert_allclose(out, 5.0 * np.arange(3.0))
    assert int(m.calls[...]) == 3 and traces[0] == 1


def test_the_one_frame_call_is_dropped_with_a_dead_model() -> None:
    f, m, traces = _inline_ready()
    del m
    gc.collect()
    assert f.plans.inline is None and f.plans.plans == []
    other = Block(3.0)  # may reuse the dead model's id: the full path serves it
    np.testing.assert_allclose(f(other, jnp.ones(3)), 3.0 * np.ones(3))
    assert int(other.calls[...]) == 1  # (the same structure: no new trace)
    assert traces[0] == 1 and f.plans.inline is None


def test_the_one_frame_call_defers_to_other_threads_and_open_contexts() -> None:
    import threading

    f, m, traces = _inline_ready()
    results: list[Any] = []
    worker = threading.Thread(target=lambda: results.append(f(m, jnp.ones(3))))
    worker.start()
    worker.join()
    with nnx.update_context("test"):  # a graph context open: the full path
        inside = f(m, jnp.ones(3))
    np.testing.assert_allclose(results[0], 2.0 * np.ones(3))
    np.testing.assert_allclose(inside, 2.0 * np.ones(3))
    assert int(m.calls[...]) == 4 and traces[0] == 1


def test_the_one_frame_call_returns_refs_made_inside() -> None:
    def f(block: Block, x: jax.Array) -> Any:
        return block(x), jax.new_ref(x)

    jitted, m = nnx.jit(f), Block(2.0)
    for _ in range(3):
        out, ref = jitted(m, jnp.ones(3))
        np.testing.assert_allclose(out, 2.0 * np.ones(3))
        assert isinstance(ref, jax.Ref)
        np.testing.assert_allclose(ref[...], np.ones(3))
    assert int(m.calls[...]) == 3


def test_cached_partial_calls_take_the_one_frame_path() -> None:
    def f(block: Block, x: jax.Array) -> jax.Array:
        return block(x)

    m = Block(2.0)
    jitted = nnx.jit(f)
    cached = nnx.cached_partial(jitted, m)
    for _ in range(3):
        np.testing.assert_allclose(cached(jnp.ones(3)), 2.0 * np.ones(3))
    assert jitted.plans.inline is not None  # (cached_partial calls the jitted function)
    m.w[...] = jnp.full((3,), 4.0)
    np.testing.assert_allclose(cached(jnp.ones(3)), 4.0 * np.ones(3))
    assert int(m.calls[...]) == 4


class Pure(nnx.Module):
    """No state written by a call: the one-frame path keeps its value list between calls."""

    def __init__(self) -> None:
        self.w = nnx.Param(jnp.full((3,), 2.0))

    def __call__(self, x: jax.Array) -> jax.Array:
        return x * self.w[...]


def _write_paths() -> dict[str, Any]:
    new = jnp.full((3,), 7.0)
    return {
        "setitem": lambda m: m.w.__setitem__(..., new),
        "set_value": lambda m: m.w.set_value(new),
        "set_raw_value": lambda m: m.w.set_raw_value(new),
        "nnx.update": lambda m: nnx.update(m, nnx.State({"w": nnx.Param(new)})),
        "update_from_state": lambda m: m.w.update_from_state(nnx.Param(new)),
        "a jitted write": lambda m: nnx.jit(lambda m: m.w.set_value(new))(m),
    }


@pytest.mark.parametrize("path", sorted(_write_paths()))
@pytest.mark.parametrize("graph", [True, False])
def test_the_kept_values_are_dropped_by_every_write(graph: bool, path: str) -> None:
    f, m = nnx.jit(lambda m, x: m(x), graph=graph), Pure()
    for _ in range(3):
        np.testing.assert_allclose(f(m, jnp.ones(3)), 2.0 * np.ones(3))
    assert f.plans.inline is not None and _structure.COUNTER.held  # a list is kept
    _write_paths()[path](m)
    assert not _structure.COUNTER.held  # emptied: no stale value, no array kept alive
    np.testing.assert_allclose(f(m, jnp.ones(3)), 7.0 * np.ones(3))


def test_a_write_to_another_models_variable_only_costs_a_fresh_read() -> None:
    f, m, other = nnx.jit(lambda m, x: m(x)), Pure(), Pure()
    for _ in range(3):
        f(m, jnp.ones(3))
    other.w[...] = jnp.zeros(3)
    np.testing.assert_allclose(f(m, jnp.ones(3)), 2.0 * np.ones(3))
    assert _structure.COUNTER.held


def test_kept_values_do_not_outlive_the_model_or_the_function() -> None:
    import weakref

    f, m = nnx.jit(lambda m, x: m(x)), Pure()
    for _ in range(3):
        f(m, jnp.ones(3))
    array = weakref.ref(m.w.get_raw_value())
    del m
    gc.collect()
    assert array() is None  # no write happened, yet the kept list let it go
    g, other = nnx.jit(lambda m, x: m(x)), Pure()
    for _ in range(3):
        g(other, jnp.ones(3))
    kept = g.plans.plans[0].inline[4]
    assert kept == [[other.w.get_raw_value()]]
    del g
    gc.collect()
    assert kept == []  # the function's plans released their values


def test_values_read_while_another_write_lands_are_not_kept(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from adapters.nnx.transforms import compilation

    f, m = nnx.jit(lambda m, x: m(x)), Pure()
    for _ in range(3):
        f(m, jnp.ones(3))
    m.w[...] = jnp.full((3,), 3.0)  # empties the kept list: the next call reads afresh
    read = compilation.raw_of

    def racing(variable: Any) -> Any:
        value = read(variable)
        m.w.set_raw_value(jnp.full((3,), 4.0))  # another thread's write, after the read
        return value

    monkeypatch.setattr(compilation, "raw_of", racing)
    np.testing.assert_allclose(f(m, jnp.ones(3)), 3.0 * np.ones(3))  # read before the write
    monkeypatch.setattr(compilation, "raw_of", read)
    np.testing.assert_allclose(f(m, jnp.ones(3)), 4.0 * np.ones(3))  # not the stale list


# ----------------------------------------------------- open graph contexts, all threads


def _open_contexts() -> dict[str, Any]:
    from adapters.nnx import graphlib

    return {
        "update_context": lambda: nnx.update_context("test"),
        "split_context": lambda: graphlib.split_context(),
        "merge_context": lambda: graphlib.merge_context(),
        "static cache offered": lambda: graphlib.static_cache({}),
    }


@pytest.mark.parametrize("kind", sorted(_open_contexts()))
def test_ready_is_the_epoch_only_while_no_context_is_open(kind: str) -> None:
    counter = _structure.COUNTER
    assert counter.ready == counter.epoch and counter.busy == 0
    unconsumed = "static" in kind  # an offer nothing took is an error at its exit
    with (
        pytest.raises(ValueError, match="no context consumed it")
        if unconsumed
        else (contextlib.nullcontext())
    ):
        with _open_contexts()[kind]():
            assert counter.ready == -1 and counter.busy == 1
            _structure.bump()  # a change meanwhile: ready comes back as the new epoch
    assert counter.ready == counter.epoch and counter.busy == 0


def test_a_context_open_in_another_thread_leaves_this_threads_calls_to_the_plan() -> None:
    import threading

    f, m, traces = _inline_ready()
    opened, done = threading.Event(), threading.Event()

    def hold() -> None:
        with nnx.update_context("other thread"):
            opened.set()
            done.wait(30)

    worker = threading.Thread(target=hold)
    worker.start()
    try:
        opened.wait(30)
        assert _structure.COUNTER.ready == -1  # the one-frame check fails ...
        for _ in range(2):  # ... and the plan's own checks serve the call
            np.testing.assert_allclose(f(m, jnp.ones(3)), 2.0 * np.ones(3))
        assert traces[0] == 1 and len(f.plans.plans) == 1
    finally:
        done.set()
        worker.join()
    assert _structure.COUNTER.ready == _structure.COUNTER.epoch
    assert int(m.calls[...]) == 4


@pytest.mark.parametrize("served_by", ["one-frame call", "plan"])
def test_a_static_cache_offered_around_a_plain_function_is_taken_by_the_jitted_call(
    served_by: str,
) -> None:
    from adapters.nnx import graphlib

    f, m, traces = _inline_ready()
    if served_by == "plan":
        f.plans.inline = None
    with graphlib.static_cache({}):  # no error at exit: the call took the offer
        np.testing.assert_allclose(f(m, jnp.ones(3)), 2.0 * np.ones(3))
        assert graphlib.GRAPH_CONTEXT.tmp_static_cache is None
    assert _structure.COUNTER.busy == 0 and traces[0] == 1


def test_cached_partial_of_nnx_jit_makes_no_offer() -> None:
    m = Block(2.0)
    jitted = nnx.jit(lambda block, x: block(x))
    cached = nnx.cached_partial(jitted, m)
    seen: list[int] = []  # what is open when the first call lowers
    original = jitted._lower

    def lower(args: Any, kwargs: Any) -> Any:
        seen.append(_structure.COUNTER.busy)
        return original(args, kwargs)

    jitted._lower = lower
    np.testing.assert_allclose(cached(jnp.ones(3)), 2.0 * np.ones(3))
    assert seen == [0] and isinstance(cached, functools.partial) and cached.func is jitted


def test_writes_outside_every_trace_skip_the_trace_check(monkeypatch: pytest.MonkeyPatch) -> None:
    from adapters.nnx import tracers

    f, traces = counted()
    m = Stack(2.0)
    f(m, jnp.ones(3))  # built outside every trace: its results were concrete
    assert f.plans.plans[0].top
    asked: list[int] = []
    real = tracers.current_jax_trace
    monkeypatch.setattr(tracers, "current_jax_trace", lambda: asked.append(1) or real())
    f(m, jnp.ones(3))
    assert asked == [] and int(m.blocks[0].calls[...]) == 2  # concrete results: no check
    with pytest.raises(TraceContextError, match="from a different trace"):
        jax.jit(lambda x: f(m, x))(jnp.ones(3))  # traced results: checked, refused
    assert asked and traces[0] == 1
