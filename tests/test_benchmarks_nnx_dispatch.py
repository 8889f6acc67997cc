"""benchmarks/nnx_dispatch.py measures what it claims: every contestant's forward pass
computes the same output from the same arrays, a ratio is reported for each contestant
that runs, and a contestant that fails is reported beside the others' numbers. Nothing
here is timed."""

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from benchmarks import nnx_dispatch as bench


@pytest.fixture(autouse=True)
def _default_promotion() -> Any:
    # JAX's default promotion, as users run it: the raw MLP broadcasts its biases.
    with jax.numpy_rank_promotion("allow"):
        yield


def test_forward_contestants_compute_the_same_output() -> None:
    failed: dict[str, str] = {}
    fns = bench.build(bench.forward_contestants(), failed)
    # The reference contestants must all run; adapters' forms are compared where they run
    # (a failing one is what the benchmark reports, not what this test checks).
    reference = [n for n in bench.forward_contestants() if not n.startswith("adapters")]
    assert set(reference) <= set(fns), failed
    expected = np.asarray(fns[bench.RAW]())
    for name, fn in fns.items():
        np.testing.assert_allclose(np.asarray(fn()), expected, rtol=1e-5, err_msg=name)


def _cheap_tasks() -> dict[str, dict[str, Any]]:
    """Stand-ins for the compiled calls (the measurement is under test): one twice as
    slow as raw, one that fails from its third call on."""
    count = [0]

    def breaks_later() -> jax.Array:
        count[0] += 1
        if count[0] > 2:
            raise RuntimeError("lost its graph")
        return jnp.zeros(())

    def slow() -> jax.Array:
        jnp.zeros(())
        return jnp.zeros(())

    return {
        "forward": {bench.RAW: lambda: jnp.zeros(()), "slow": slow, "flaky": breaks_later},
        "adam step": {bench.RAW: lambda: jnp.zeros(()), "slow": slow},
    }


def test_measure_reports_ratios_and_a_contestant_failing_midway(
    capsys: pytest.CaptureFixture[str],
) -> None:
    failed = {"never built": "ValueError: no context consumed it"}
    result = bench.measure(_cheap_tasks(), calls=2, rounds=3, failed=failed)
    assert set(result) == {
        (task, regime, clock)
        for task in ("forward", "adam step")
        for regime in ("awaited", "pipelined")
        for clock in ("wall", "CPU")
    }
    for cell in result.values():
        assert cell[f"{bench.RAW} ratio"] == pytest.approx(1.0)
        assert cell["slow"] > 0 and cell["slow ratio"] > 0
        assert "flaky" not in cell  # it failed part-way: its rounds do not pair with raw's
    assert failed["forward: flaky"] == "RuntimeError: lost its graph"
    bench.dispatch_table(result, [bench.RAW, "slow", "flaky", "never built"], failed)
    out = capsys.readouterr().out
    assert "| flaky | failed | - |" in out and "| never built | failed | - |" in out
    assert "- forward: flaky failed: RuntimeError: lost its graph" in out
    assert "| slow | " in out and "x) |" in out


def test_a_failing_trace_contestant_leaves_the_others_timed(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(jax, "clear_caches", lambda: None)  # keep the suite's compiled programs

    def broken() -> Any:
        raise TypeError("no lower")

    times = bench.trace_times({"flax.nnx, graph mode": lambda: lambda: 1, "bad": broken}, 2)
    assert list(times) == ["flax.nnx, graph mode"] and len(times["flax.nnx, graph mode"]) == 2
    assert "- trace+lower, bad failed: TypeError: no lower" in capsys.readouterr().out
    bench.trace_table(times, 2)
    out = capsys.readouterr().out
    assert "| adapters.nnx | failed | failed |" in out
    assert "| **ratio adapters / flax** (median of per-round ratios) | - | - |" in out


def test_python_calls_counts_the_functions_a_call_runs(
    capsys: pytest.CaptureFixture[str],
) -> None:
    def inner() -> int:
        return 1

    def outer() -> jax.Array:
        inner()
        inner()
        return jnp.zeros(())

    # The call itself, `outer`, its two `inner`s, and JAX's block_until_ready machinery.
    assert bench.python_calls(outer) > bench.python_calls(inner) >= 2
    bench.calls_table({"forward": {"outer": outer}}, ["outer", "missing"])
    out = capsys.readouterr().out
    assert "| missing | - |" in out and "| outer | " in out


def test_thread_cpu_gives_each_contestant_a_ratio_to_raw(
    capsys: pytest.CaptureFixture[str],
) -> None:
    tasks = {"forward": {bench.RAW: lambda: jnp.zeros(()), "other": lambda: jnp.ones(())}}
    best = bench.thread_cpu(tasks["forward"], calls=2, rounds=2)
    assert set(best) == {bench.RAW, "other"} and all(t >= 0 for t in best.values())
    bench.thread_cpu_table(tasks, [bench.RAW, "other", "missing"], calls=2, rounds=2)
    out = capsys.readouterr().out
    assert "| missing | - |" in out and "| other | " in out and "x) |" in out
