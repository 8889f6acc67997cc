"""NNX speed: dispatch of ``nnx.jit`` calls and trace time of an NNX model, real
``flax.nnx`` against ``adapters.nnx``, both measured as ratios to raw ``jax.jit``.

(a) **Dispatch per call**, each call awaited and pipelined (dispatched back to back,
    one wait per round), wall clock and CPU time of the whole process: a tiny MLP
    (``DEPTH`` Linear(32) layers, batch 8), its forward pass and an adam step (loss,
    gradients, optax update). Contestants: raw ``jax.jit`` on a list of dicts of the
    arrays, ``pm.jit`` on a pytreemod module, and for each of ``flax.nnx`` and
    ``adapters.nnx``: ``nnx.jit`` in graph mode, ``nnx.jit(graph=False)`` (tree mode) and
    ``nnx.cached_partial(nnx.jit(f), model)``; the NNX steps update an ``nnx.Optimizer``
    inside the jitted function. All models hold the same arrays. Each number is the
    **median of per-round ratios** to raw ``jax.jit``, over interleaved rounds whose
    order rotates, so a slow period of the machine falls on both sides of a ratio.
(b) **Trace + lower** of a ``TRACE_DEPTH``-block unrolled residual MLP
    (``x + Linear(gelu(Linear(LayerNorm(x))))``, width 128): a fresh
    ``nnx.jit(grad step).lower(model, x)`` from cold caches, in graph and tree mode,
    flax.nnx against adapters.nnx (CPU time; median of per-round ratios).

A contestant that raises is reported as failed beside the others' numbers.

Run: ``python -m benchmarks.nnx_dispatch`` (prints Markdown tables);
``--profile NAME`` prints the functions that dominate one contestant's calls (cProfile).
"""

import argparse
import cProfile
import gc
import io
import os
import pstats
import statistics
import time
from collections.abc import Callable
from types import ModuleType
from typing import Any, cast

import jax
import jax.numpy as jnp
import optax
from flax import nnx as flax_nnx

import pytreemod as pm
from adapters import nnx as adapters_nnx

from ._timing import machine

WIDTH, BATCH, DEPTH = 32, 8, 2
TRACE_DEPTH, TRACE_WIDTH = 48, 128
RAW = "raw jax.jit"
LIBRARIES: dict[str, ModuleType] = {"flax.nnx": flax_nnx, "adapters.nnx": adapters_nnx}
FORMS = ("nnx.jit", "nnx.jit(graph=False)", "cached_partial(nnx.jit)")
Call = Callable[[], Any]


# ----------------------------------------------------------------------------- models


class PmLinear(pm.Module):
    weight: pm.Param[jax.Array]
    bias: pm.Param[jax.Array]

    def __init__(self, weight: jax.Array, bias: jax.Array):
        self.weight = pm.Param(weight)
        self.bias = pm.Param(bias)

    def __call__(self, x: jax.Array) -> jax.Array:
        return x @ self.weight.value + self.bias.value


class PmMLP(pm.Module):
    layers: list[PmLinear]

    def __init__(self, params: list[dict[str, jax.Array]]):
        self.layers = [PmLinear(p["w"], p["b"]) for p in params]

    def __call__(self, x: jax.Array) -> jax.Array:
        for layer in self.layers[:-1]:
            x = jax.nn.relu(layer(x))
        return self.layers[-1](x)


def raw_forward(params: list[dict[str, jax.Array]], x: jax.Array) -> jax.Array:
    for p in params[:-1]:
        x = jax.nn.relu(x @ p["w"] + p["b"])
    return x @ params[-1]["w"] + params[-1]["b"]


def nnx_mlp(nnx: ModuleType, params: list[dict[str, jax.Array]]) -> Any:
    """An NNX MLP of ``nnx.Linear`` layers (the module ``nnx`` is flax's or adapters')
    holding the given arrays."""

    def given(array: jax.Array) -> Callable[..., jax.Array]:
        return lambda *_: array

    class MLP(nnx.Module):
        def __init__(self, rngs: Any) -> None:
            self.layers = nnx.List(
                [
                    nnx.Linear(
                        WIDTH, WIDTH, kernel_init=given(p["w"]), bias_init=given(p["b"]), rngs=rngs
                    )
                    for p in params
                ]
            )

        def __call__(self, x: jax.Array) -> jax.Array:
            for layer in self.layers[:-1]:
                x = jax.nn.relu(layer(x))
            return self.layers[-1](x)

    return MLP(nnx.Rngs(0))


def mlp_params(depth: int = DEPTH) -> list[dict[str, jax.Array]]:
    keys = jax.random.split(jax.random.key(0), depth)
    return [
        {"w": jax.random.normal(k, (WIDTH, WIDTH)) / WIDTH**0.5, "b": jnp.zeros(WIDTH)}
        for k in keys
    ]


def _mse(out: jax.Array, y: jax.Array) -> jax.Array:
    return jnp.mean((out - y) ** 2)


# ----------------------------------------------------------------------------- (a) contestants


def forward_contestants(depth: int = DEPTH) -> dict[str, Callable[[], Call]]:
    """For each contestant, a builder of its zero-argument forward call (building may
    raise: a contestant that fails is reported, not fatal)."""
    params, x = mlp_params(depth), jnp.ones((BATCH, WIDTH))
    fwd = lambda m, x: m(x)

    def raw() -> Call:
        f = jax.jit(raw_forward)
        return lambda: f(params, x)

    def pytreemod() -> Call:
        f, m = pm.jit(fwd), PmMLP(params)
        return lambda: f(m, x)

    builders: dict[str, Callable[[], Call]] = {RAW: raw, "pm.jit": pytreemod}
    for lib, nnx in LIBRARIES.items():

        def graph(nnx: ModuleType = nnx) -> Call:
            f, m = nnx.jit(fwd), nnx_mlp(nnx, params)
            return lambda: f(m, x)

        def tree(nnx: ModuleType = nnx) -> Call:
            f, m = nnx.jit(fwd, graph=False), nnx_mlp(nnx, params)
            return lambda: f(m, x)

        def cached(nnx: ModuleType = nnx) -> Call:
            f = nnx.cached_partial(nnx.jit(fwd), nnx_mlp(nnx, params))
            return lambda: f(x)

        for form, build in zip(FORMS, (graph, tree, cached)):
            builders[f"{lib}: {form}"] = build
    return builders


def step_contestants(depth: int = DEPTH) -> dict[str, Callable[[], Call]]:
    """For each contestant, a builder of its zero-argument adam step, which returns the
    step's loss (raw and pytreemod keep their new state in a closure; NNX updates its
    model and ``nnx.Optimizer`` in place). Every step takes the batch ``(x, y)`` as
    arguments, as a training step does (none bakes it in as a constant)."""
    params = mlp_params(depth)
    x, y = jnp.ones((BATCH, WIDTH)), jnp.zeros((BATCH, WIDTH))
    opt = optax.adam(1e-3)

    def threaded(step: Callable[..., Any], state: Any) -> Call:
        box = [state]

        def run() -> Any:
            *new, loss = step(*box[0], x, y)
            box[0] = tuple(new)
            return loss

        return run

    def raw() -> Call:
        @jax.jit
        def step(p: Any, s: Any, x: jax.Array, y: jax.Array) -> Any:
            loss, g = jax.value_and_grad(lambda p: _mse(raw_forward(p, x), y))(p)
            u, s = opt.update(g, s, p)
            return optax.apply_updates(p, u), s, loss

        return threaded(step, (params, opt.init(params)))

    def pytreemod() -> Call:
        @pm.jit
        def step(m: PmMLP, s: Any, x: jax.Array, y: jax.Array) -> Any:
            loss, g = pm.value_and_grad(lambda m: _mse(m(x), y))(m)
            u, s = opt.update(g, s, cast(Any, m))
            return optax.apply_updates(cast(Any, m), u), s, loss

        model = PmMLP(params)
        return threaded(step, (model, opt.init(cast(Any, model))))

    def nnx_step(nnx: ModuleType) -> Callable[..., jax.Array]:
        def step(m: Any, o: Any, x: jax.Array, y: jax.Array) -> jax.Array:
            loss, g = nnx.value_and_grad(lambda m: _mse(m(x), y))(m)
            o.update(m, g)
            return loss

        return step

    builders: dict[str, Callable[[], Call]] = {RAW: raw, "pm.jit": pytreemod}
    for lib, nnx in LIBRARIES.items():

        def model_opt(nnx: ModuleType) -> tuple[Any, Any]:
            m = nnx_mlp(nnx, params)
            return m, nnx.Optimizer(m, opt, wrt=nnx.Param)

        def graph(nnx: ModuleType = nnx) -> Call:
            f, (m, o) = nnx.jit(nnx_step(nnx)), model_opt(nnx)
            return lambda: f(m, o, x, y)

        def tree(nnx: ModuleType = nnx) -> Call:
            f, (m, o) = nnx.jit(nnx_step(nnx), graph=False), model_opt(nnx)
            return lambda: f(m, o, x, y)

        def cached(nnx: ModuleType = nnx) -> Call:
            f = nnx.cached_partial(nnx.jit(nnx_step(nnx)), *model_opt(nnx))
            return lambda: f(x, y)

        for form, build in zip(FORMS, (graph, tree, cached)):
            builders[f"{lib}: {form}"] = build
    return builders


TASKS: dict[str, Callable[[], dict[str, Callable[[], Call]]]] = {
    "forward": forward_contestants,
    "adam step": step_contestants,
}


# ----------------------------------------------------------------------------- (a) timing


def _error(e: BaseException) -> str:
    return f"{type(e).__name__}: {(str(e).splitlines() or [''])[0][:160]}"


def build(builders: dict[str, Callable[[], Call]], failed: dict[str, str]) -> dict[str, Call]:
    """Each builder's call, compiled and warmed up (10 calls); those that raise go to
    ``failed`` with their error instead."""
    calls: dict[str, Call] = {}
    for name, make in builders.items():
        try:
            fn = make()
            for _ in range(10):
                jax.block_until_ready(fn())
        except Exception as e:  # one failing contestant must not hide the others' numbers
            failed[name] = _error(e)
            continue
        calls[name] = fn
    return calls


def _round(fn: Call, calls: int, blocking: bool) -> tuple[float, float]:
    """Wall and CPU microseconds per call over ``calls`` calls."""
    jax.block_until_ready(fn())
    start, start_cpu = time.perf_counter(), time.process_time()
    if blocking:
        for _ in range(calls):
            jax.block_until_ready(fn())
    else:
        out = None
        for _ in range(calls):
            out = fn()
        jax.block_until_ready(out)
    return (
        (time.perf_counter() - start) / calls * 1e6,
        (time.process_time() - start_cpu) / calls * 1e6,
    )


Result = dict[tuple[str, str, str], dict[str, float]]


def measure(
    tasks: dict[str, dict[str, Call]], *, calls: int, rounds: int, failed: dict[str, str]
) -> Result:
    """For every (task, regime, clock): each contestant's median microseconds per call
    and the median of its per-round ratios to raw ``jax.jit``. All tasks, regimes and
    contestants run in every round, the contestants' order rotating each round. A
    contestant that raises while timed goes to ``failed`` (keyed ``task: name``)."""
    samples: dict[tuple[str, str, str], dict[str, list[float]]] = {}
    for r in range(rounds):
        for task, fns in tasks.items():
            for regime in ("awaited", "pipelined"):
                items = list(fns.items())
                items = items[r % len(items) :] + items[: r % len(items)]
                for name, fn in items:
                    try:
                        wall, cpu = _round(fn, calls, blocking=regime == "awaited")
                    except Exception as e:
                        failed[f"{task}: {name}"] = _error(e)
                        del fns[name]
                        continue
                    for clock, t in (("wall", wall), ("CPU", cpu)):
                        samples.setdefault((task, regime, clock), {}).setdefault(name, []).append(t)
    result: Result = {}
    for key, times in samples.items():
        raw = times.get(RAW)
        cell: dict[str, float] = {}
        for name, ts in times.items():
            if len(ts) != rounds:  # failed part-way: its rounds do not pair with raw's
                continue
            cell[name] = statistics.median(ts)
            if raw is not None and len(raw) == rounds:
                cell[f"{name} ratio"] = statistics.median(t / b for t, b in zip(ts, raw))
        result[key] = cell
    return result


def dispatch_table(result: Result, names: list[str], failed: dict[str, str]) -> None:
    tasks = list(dict.fromkeys(task for task, _, _ in result))
    columns = [(t, g) for t in tasks for g in ("awaited", "pipelined")]
    print(
        "| contestant | "
        + " | ".join(f"{t}, {g}: wall (ratio) | CPU ratio" for t, g in columns)
        + " |\n|---|"
        + "---:|---:|" * len(columns)
    )
    for name in names:
        cells = []
        for task, regime in columns:
            wall, cpu = result[task, regime, "wall"], result[task, regime, "CPU"]
            if name in wall and f"{name} ratio" in wall:
                cells.append(f"{wall[name]:.1f} µs ({wall[f'{name} ratio']:.2f}x)")
                cells.append(f"{cpu[f'{name} ratio']:.2f}x")
            elif name in wall:
                cells += [f"{wall[name]:.1f} µs", "-"]
            else:
                cells += ["failed", "-"]
        print(f"| {name} | " + " | ".join(cells) + " |")
    if failed:
        print()
    for name, error in failed.items():
        print(f"- {name} failed: {error}")


def python_calls(fn: Call, calls: int = 20) -> float:
    """Python function calls per call of ``fn`` (cProfile's count, awaited calls): a count,
    so background load does not move it."""
    prof = cProfile.Profile()
    prof.enable()
    for _ in range(calls):
        jax.block_until_ready(fn())
    prof.disable()
    return cast(Any, pstats.Stats(prof)).total_calls / calls


def calls_table(tasks: dict[str, dict[str, Call]], names: list[str]) -> None:
    print(
        "| contestant | "
        + " | ".join(f"{task}: Python calls per call" for task in tasks)
        + " |\n|---|"
        + "---:|" * len(tasks)
    )
    for name in names:
        cells = [f"{python_calls(fns[name]):.0f}" if name in fns else "-" for fns in tasks.values()]
        print(f"| {name} | " + " | ".join(cells) + " |")


def thread_cpu(fns: dict[str, Call], calls: int = 300, rounds: int = 40) -> dict[str, float]:
    """Per contestant, the calling thread's CPU time per pipelined call (the Python and
    C++ dispatch work, not XLA's threads), the minimum over interleaved rounds: a
    waiting thread accrues none, so background load moves it far less than wall time."""
    best = {name: float("inf") for name in fns}
    for _ in range(rounds):
        for name, fn in fns.items():
            out = None
            start = time.thread_time()
            for _ in range(calls):
                out = fn()
            best[name] = min(best[name], (time.thread_time() - start) / calls)
            jax.block_until_ready(out)
    return best


def thread_cpu_table(
    tasks: dict[str, dict[str, Call]], names: list[str], calls: int = 300, rounds: int = 40
) -> None:
    best = {task: thread_cpu(fns, calls, rounds) for task, fns in tasks.items()}
    print(
        "| contestant | "
        + " | ".join(f"{task}: calling thread's CPU per call (ratio)" for task in tasks)
        + " |\n|---|"
        + "---:|" * len(tasks)
    )
    for name in names:
        cells = []
        for times in best.values():
            if name in times and RAW in times:
                cells.append(f"{times[name] * 1e6:.2f} µs ({times[name] / times[RAW]:.2f}x)")
            else:
                cells.append("-")
        print(f"| {name} | " + " | ".join(cells) + " |")


# ----------------------------------------------------------------------------- (b) trace time


def deep_model(nnx: ModuleType, depth: int = TRACE_DEPTH) -> Any:
    class Block(nnx.Module):
        def __init__(self, rngs: Any) -> None:
            self.norm = nnx.LayerNorm(TRACE_WIDTH, rngs=rngs)
            self.up = nnx.Linear(TRACE_WIDTH, 4 * TRACE_WIDTH, rngs=rngs)
            self.down = nnx.Linear(4 * TRACE_WIDTH, TRACE_WIDTH, rngs=rngs)

        def __call__(self, x: jax.Array) -> jax.Array:
            return x + self.down(nnx.gelu(self.up(self.norm(x))))

    class Deep(nnx.Module):
        def __init__(self, rngs: Any) -> None:
            self.blocks = nnx.List([Block(rngs) for _ in range(depth)])

        def __call__(self, x: jax.Array) -> jax.Array:
            for block in self.blocks:
                x = block(x)
            return x

    return Deep(nnx.Rngs(0))


def trace_contestants(depth: int = TRACE_DEPTH) -> dict[str, Callable[[], Call]]:
    """Builders of zero-argument calls that trace and lower a fresh ``nnx.jit`` of the
    deep model's grad step."""
    x = jnp.ones((BATCH, TRACE_WIDTH))
    builders: dict[str, Callable[[], Call]] = {}
    for lib, nnx in LIBRARIES.items():
        for mode, graph in (("graph", True), ("tree", False)):

            def make(nnx: ModuleType = nnx, graph: bool = graph) -> Call:
                model = deep_model(nnx, depth)

                def step(m: Any, x: jax.Array) -> Any:
                    return nnx.grad(lambda m: jnp.mean(m(x) ** 2))(m)

                return lambda: nnx.jit(step, graph=graph).lower(model, x)

            builders[f"{lib}, {mode} mode"] = make
    return builders


def _cold() -> None:
    jax.clear_caches()
    gc.collect()


def trace_times(builders: dict[str, Callable[[], Call]], rounds: int) -> dict[str, list[float]]:
    """CPU seconds of each call in every round, each from cold caches (one untimed call
    first), the order reversing every round. Failures are reported and dropped."""
    calls: dict[str, Call] = {}
    for name, make in builders.items():
        try:
            fn = make()
            fn()
        except Exception as e:
            print(f"- trace+lower, {name} failed: {_error(e)}")
            continue
        calls[name] = fn
    times: dict[str, list[float]] = {name: [] for name in calls}
    items = list(calls.items())
    for r in range(rounds):
        for name, fn in items if r % 2 == 0 else reversed(items):
            _cold()
            start = time.process_time()
            fn()
            times[name].append(time.process_time() - start)
    return times


def trace_table(times: dict[str, list[float]], rounds: int, depth: int = TRACE_DEPTH) -> None:
    print(
        f"| {depth}-block unrolled NNX MLP, grad step | trace+lower, graph mode (ms) "
        "| trace+lower, tree mode (ms) |\n|---|---:|---:|"
    )
    for lib in LIBRARIES:
        cells = []
        for mode in ("graph", "tree"):
            ts = times.get(f"{lib}, {mode} mode")
            cells.append(f"{statistics.median(ts) * 1e3:.0f}" if ts else "failed")
        print(f"| {lib} | " + " | ".join(cells) + " |")
    cells = []
    for mode in ("graph", "tree"):
        a, f = times.get(f"adapters.nnx, {mode} mode"), times.get(f"flax.nnx, {mode} mode")
        if a and f:
            cells.append(f"**{statistics.median(x / y for x, y in zip(a, f)):.2f}x**")
        else:
            cells.append("-")
    print("| **ratio adapters / flax** (median of per-round ratios) | " + " | ".join(cells) + " |")
    print(
        f"\nWidth {TRACE_WIDTH}, batch {BATCH}; CPU time of the process, {rounds} interleaved "
        "rounds (order reversing every round), each `nnx.jit(step).lower(model, x)` a fresh "
        "wrapper after `jax.clear_caches()`."
    )


# ----------------------------------------------------------------------------- main


def profile(name: str, task: str, calls: int = 2000, top: int = 25) -> None:
    """cProfile of ``calls`` awaited calls of one contestant: the functions that dominate."""
    failed: dict[str, str] = {}
    fns = build({name: TASKS[task]()[name]}, failed)
    if name not in fns:
        print(f"{name} failed: {failed[name]}")
        return
    fn = fns[name]
    prof = cProfile.Profile()
    prof.enable()
    for _ in range(calls):
        jax.block_until_ready(fn())
    prof.disable()
    out = io.StringIO()
    stats = pstats.Stats(prof, stream=out).strip_dirs()
    stats.sort_stats("tottime").print_stats(top)
    stats.sort_stats("cumulative").print_stats(top)
    print(out.getvalue())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=31)
    parser.add_argument("--calls", type=int, default=300, help="calls per round")
    parser.add_argument("--trace-rounds", type=int, default=5, help="0 skips part (b)")
    parser.add_argument("--profile", metavar="NAME", help="profile one contestant instead")
    parser.add_argument("--task", default="forward", choices=list(TASKS))
    args = parser.parse_args()
    if args.profile:
        profile(args.profile, args.task, calls=10 * args.calls)
        return
    start = time.perf_counter()
    load = os.getloadavg()[0]
    print(f"Machine: {machine()}\n")
    print(
        f"Load average {load:.1f} on {os.cpu_count()} cores when this started (shared with "
        "other jobs: absolute times are noisy; ratios come from interleaved rounds).\n"
    )
    failed: dict[str, str] = {}
    built: dict[str, dict[str, Call]] = {}
    for task, make in TASKS.items():
        task_failed: dict[str, str] = {}
        built[task] = build(make(), task_failed)
        failed.update({f"{task}: {name}": error for name, error in task_failed.items()})
    names = list(TASKS["forward"]())
    result = measure(built, calls=args.calls, rounds=args.rounds, failed=failed)
    print(f"### (a) Dispatch per call: MLP of {DEPTH} Linear({WIDTH}) layers, batch {BATCH}\n")
    dispatch_table(result, names, failed)
    print(
        f"\n{args.calls} calls per round, median over {args.rounds} interleaved rounds "
        "(order rotating); ratios are medians of per-round ratios to raw `jax.jit`. Awaited: "
        "every call waits for its result. Pipelined: calls back to back, one wait per round. "
        "CPU: CPU time of the whole process (Python, dispatch and XLA's threads). The adam "
        "step: raw JAX and `pm.jit` thread (params, optax state) through the call; the NNX "
        "forms call `nnx.Optimizer.update` inside the jitted function; every step takes "
        "the batch as arguments.\n"
    )
    print(
        "Python function calls per call (cProfile's count over 20 awaited calls; raw `jax.jit` "
        "runs no Python on its C++ fast path, the block-until-ready call aside):\n"
    )
    calls_table(built, names)
    print(
        "\nDispatch work of the calling thread (`time.thread_time()` per pipelined call, "
        "minimum over 40 interleaved rounds of 300 calls):\n"
    )
    thread_cpu_table(built, names)
    if args.trace_rounds > 0:
        print(f"\n### (b) Trace + lower of a {TRACE_DEPTH}-block unrolled NNX model\n")
        trace_table(trace_times(trace_contestants(), args.trace_rounds), args.trace_rounds)
    print(f"\nWhole run: {time.perf_counter() - start:.0f} s.")


if __name__ == "__main__":
    main()
