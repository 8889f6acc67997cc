"""pm.jit's fast path on containers of arrays (optimizer states, batches): recognised
without flattening, and any change of structure or a non-array leaf is checked again."""

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax
from jax.core import Tracer

import pytreemod as pm


def _slow_calls(f: Any) -> Any:
    """A counter of the calls of ``f`` that were checked (not recognised)."""
    wrapper = f._pytreemod_jit
    count = [0]
    original = wrapper._resolve

    def counting(*a: Any, **k: Any) -> Any:
        count[0] += 1
        return original(*a, **k)

    wrapper._resolve = counting
    return lambda: count[0]


def _layers(n: int, scale: float = 1.0) -> dict[str, Any]:
    return {"layers": {i: {"b": jnp.full(2, scale), "w": jnp.ones(3) * i} for i in range(n)}}


def _step() -> Any:
    traces: list[Any] = []

    @pm.jit
    def step(state: Any) -> Any:
        traces.append(state)
        return jax.tree.map(lambda x: x + 1, state)

    step.traces = traces  # type: ignore[attr-defined]
    return step


def test_a_nested_dict_state_takes_the_fast_path() -> None:
    step = _step()
    slow = _slow_calls(step)
    state = _layers(6)
    for _ in range(5):
        state = step(state)
    # Checked once; every later call (an output, of the same structure) is recognised.
    assert slow() == 1
    np.testing.assert_allclose(state["layers"][5]["w"], jnp.ones(3) * 5 + 5)
    np.testing.assert_allclose(state["layers"][0]["b"], jnp.full(2, 6.0))


def test_a_python_number_deep_in_the_state_is_static() -> None:
    step = _step()
    slow = _slow_calls(step)
    state = step(step(_layers(6)))
    calls = slow()
    state["layers"][3]["b"] = 2.0  # a new dict at the top would be recognised too
    out = step(state)
    assert slow() == calls + 1  # checked again
    assert out["layers"][3]["b"] == 3.0
    assert step.traces[-1]["layers"][3]["b"] == 2.0  # a constant, not a tracer
    assert isinstance(step.traces[-1]["layers"][2]["b"], Tracer)


def test_another_key_in_one_of_many_alike_dicts_is_checked() -> None:
    step = _step()
    slow = _slow_calls(step)
    state = step(step(_layers(6)))
    calls = slow()
    inner = state["layers"][4]
    state["layers"][4] = {"c": inner["b"], "w": inner["w"]}  # same length, other key
    out = step(state)
    assert slow() == calls + 1
    assert sorted(out["layers"][4]) == ["c", "w"]
    state["layers"][4] = {"b": inner["b"]}  # a key fewer
    assert sorted(step(state)["layers"][4]) == ["b"]
    assert slow() == calls + 2


def test_a_moved_none_among_alike_dicts_is_checked() -> None:
    # None may stand for a missing key's value: a key renamed next to a None is seen.
    step = _step()
    slow = _slow_calls(step)
    state = [{"x": None, "y": jnp.ones(2) * i} for i in range(5)]
    state = step(step(state))
    calls = slow()
    state[2] = {"z": None, "y": state[2]["y"]}
    out = step(state)
    assert slow() == calls + 1
    assert sorted(out[2]) == ["y", "z"]
    np.testing.assert_allclose(out[2]["y"], jnp.ones(2) * 2 + 3)


def test_a_longer_tuple_among_alike_tuples_is_checked() -> None:
    step = _step()
    slow = _slow_calls(step)
    state = step(step([(jnp.zeros(2), jnp.ones(2)) for _ in range(5)]))
    calls = slow()
    state[1] = (*state[1], jnp.zeros(2))
    out = step(state)
    assert slow() == calls + 1
    assert len(out[1]) == 3 and len(out[0]) == 2
    np.testing.assert_allclose(out[1][2], jnp.ones(2))


def test_a_large_container_of_unlike_children_is_recognised_and_checked() -> None:
    # Too many different structures to write out: checked by flattening it, still
    # without the full check of the call.
    step = _step()
    slow = _slow_calls(step)
    state = {i: jnp.ones(2) if i % 2 else [jnp.ones(2), (jnp.zeros(1),)] for i in range(80)}
    for _ in range(4):
        state = step(state)
    assert slow() == 1
    np.testing.assert_allclose(state[3], jnp.full(2, 5.0))
    state[2] = [state[2][0], (1.0,)]
    out = step(state)
    assert slow() == 2
    assert out[2][1][0] == 2.0
    assert step.traces[-1][2][1][0] == 1.0


def test_a_renamed_key_of_a_dict_with_many_keys_is_checked() -> None:
    step = _step()
    slow = _slow_calls(step)
    state = step(step(_layers(12)))
    assert slow() == 1
    layers = dict(state["layers"])
    layers[100] = layers.pop(7)  # as many keys as before, one of them another
    out = step({"layers": layers})
    assert slow() == 2
    assert 100 in out["layers"] and 7 not in out["layers"]


class _Nothing(NamedTuple):
    pass


def test_empty_named_tuples_in_the_output_keep_their_type() -> None:
    # An optimizer's EmptyState holds nothing: every call may return the same instance.
    empty_state = optax.sgd(0.1).init(jnp.zeros(()))[0]  # optax's EmptyState()
    f = pm.jit(lambda x: (x + 1, empty_state, _Nothing()))
    for i in range(3):
        y, empty, nothing = f(jnp.ones(2) * i)
        np.testing.assert_allclose(y, jnp.ones(2) * i + 1)
        assert type(empty) is type(empty_state) and empty == ()
        assert type(nothing) is _Nothing and len(nothing) == 0
