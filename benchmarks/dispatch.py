"""Dispatch overhead of a compiled call: raw ``jax.jit`` on a dict of arrays versus
``pytreemod.jit``, ``eqx.filter_jit`` and ``nnx.jit`` on the same MLP (Linear(32) layers,
batch 8): a forward pass and an adam train step, at depth 2, 20 and 100. Then each
documented ``pm.jit`` train-step form against raw JAX, each call awaited (blocking) and
pipelined (asynchronous dispatch, one wait per block of calls).

Run: ``python -m benchmarks.dispatch`` (prints a Markdown table).
"""

import argparse
import gc
import statistics
import time
from collections.abc import Callable
from typing import Any, cast

import equinox as eqx
import jax
import jax.numpy as jnp
import optax
from flax import nnx

import pytreemod as pm
from pytreemod._codegen import compile_unflatten

from ._timing import machine, per_call_us

WIDTH, BATCH = 32, 8


class Linear(pm.Module):
    weight: pm.Param[jax.Array]
    bias: pm.Param[jax.Array]

    def __init__(self, n_in: int, n_out: int, *, key: jax.Array):
        self.weight = pm.Param(jax.random.normal(key, (n_in, n_out)) / n_in**0.5)
        self.bias = pm.Param(jnp.zeros(n_out))

    def __call__(self, x: jax.Array) -> jax.Array:
        return x @ self.weight.value + self.bias.value


class MLP(pm.Module):
    layers: list[Linear]

    def __init__(self, depth: int, *, key: jax.Array):
        keys = jax.random.split(key, depth)
        self.layers = [Linear(WIDTH, WIDTH, key=k) for k in keys]

    def __call__(self, x: jax.Array) -> jax.Array:
        for layer in self.layers[:-1]:
            x = jax.nn.relu(layer(x))
        return self.layers[-1](x)


def raw_forward(params: list[dict[str, jax.Array]], x: jax.Array) -> jax.Array:
    for p in params[:-1]:
        x = jax.nn.relu(x @ p["w"] + p["b"])
    return x @ params[-1]["w"] + params[-1]["b"]


class EqxMLP(eqx.Module):
    layers: list[eqx.nn.Linear]

    def __init__(self, depth: int, *, key: jax.Array):
        self.layers = [eqx.nn.Linear(WIDTH, WIDTH, key=k) for k in jax.random.split(key, depth)]

    def __call__(self, x: jax.Array) -> jax.Array:
        for layer in self.layers[:-1]:
            x = jax.nn.relu(jax.vmap(layer)(x))
        return jax.vmap(self.layers[-1])(x)


class NnxMLP(nnx.Module):
    def __init__(self, depth: int, *, rngs: nnx.Rngs):
        self.layers = nnx.List([nnx.Linear(WIDTH, WIDTH, rngs=rngs) for _ in range(depth)])

    def __call__(self, x: jax.Array) -> jax.Array:
        for layer in self.layers[:-1]:
            x = jax.nn.relu(layer(x))
        return self.layers[-1](x)


def models(depth: int) -> tuple[MLP, list[dict[str, jax.Array]]]:
    """The pytreemod MLP and the same parameters as raw JAX's list of dicts."""
    model = MLP(depth, key=jax.random.key(0))
    return model, [{"w": layer.weight.value, "b": layer.bias.value} for layer in model.layers]


def contestants(depth: int) -> dict[str, dict[str, Callable[[], Any]]]:
    """For each task, the zero-argument calls to time (state threaded through closures;
    a train step returns the state it stored)."""
    key = jax.random.key(0)
    x = jnp.ones((BATCH, WIDTH))
    y = jnp.zeros((BATCH, WIDTH))
    opt = optax.adam(1e-3)

    model, params = models(depth)
    eqx_model = EqxMLP(depth, key=key)
    nnx_model = NnxMLP(depth, rngs=nnx.Rngs(0))
    nnx_opt = nnx.Optimizer(nnx_model, opt, wrt=nnx.Param)

    raw_fwd = jax.jit(raw_forward)
    pm_fwd = pm.jit(lambda m, x: m(x))
    eqx_fwd = eqx.filter_jit(lambda m, x: m(x))
    nnx_fwd = nnx.jit(lambda m, x: m(x))

    @jax.jit
    def raw_step(p: Any, s: Any, x: jax.Array, y: jax.Array) -> Any:
        loss, g = jax.value_and_grad(lambda p: jnp.mean((raw_forward(p, x) - y) ** 2))(p)
        u, s = opt.update(g, s, p)
        return optax.apply_updates(p, u), s, loss

    @pm.jit
    def pm_step(m: MLP, s: Any, x: jax.Array, y: jax.Array) -> Any:
        loss, g = pm.value_and_grad(lambda m: jnp.mean((m(x) - y) ** 2))(m)
        u, s = opt.update(g, s, cast(Any, m))
        return optax.apply_updates(cast(Any, m), u), s, loss

    @eqx.filter_jit
    def eqx_step(m: EqxMLP, s: Any, x: jax.Array, y: jax.Array) -> Any:
        loss, g = eqx.filter_value_and_grad(lambda m: jnp.mean((m(x) - y) ** 2))(m)
        u, s = opt.update(g, s, cast(Any, eqx.filter(m, eqx.is_array)))
        return eqx.apply_updates(m, u), s, loss

    @nnx.jit
    def nnx_step(m: NnxMLP, o: nnx.Optimizer, x: jax.Array, y: jax.Array) -> jax.Array:
        loss, g = nnx.value_and_grad(lambda m: jnp.mean((m(x) - y) ** 2))(m)
        o.update(m, g)
        return loss

    state: dict[str, Any] = {
        "raw": (params, opt.init(params)),
        "pm": (model, opt.init(cast(Any, model))),
        "eqx": (eqx_model, opt.init(eqx.filter(eqx_model, eqx.is_array))),
    }

    def run_raw() -> Any:
        p, s = state["raw"]
        p, s, _ = raw_step(p, s, x, y)
        state["raw"] = (p, s)
        return state["raw"]

    def run_pm() -> Any:
        m, s = state["pm"]
        m, s, _ = pm_step(m, s, x, y)
        state["pm"] = (m, s)
        return state["pm"]

    def run_eqx() -> Any:
        m, s = state["eqx"]
        m, s, _ = eqx_step(m, s, x, y)
        state["eqx"] = (m, s)
        return state["eqx"]

    return {
        "forward": {
            "raw jax.jit": lambda: raw_fwd(params, x),
            "pytreemod.jit": lambda: pm_fwd(model, x),
            "eqx.filter_jit": lambda: eqx_fwd(eqx_model, x),
            "nnx.jit": lambda: nnx_fwd(nnx_model, x),
        },
        "adam step": {
            "raw jax.jit": run_raw,
            "pytreemod.jit": run_pm,
            "eqx.filter_jit": run_eqx,
            "nnx.jit": lambda: nnx_step(nnx_model, nnx_opt, x, y),
        },
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--depths", type=int, nargs="+", default=[2, 20, 100])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--forms-only", action="store_true", help="only the train-step forms table")
    args = parser.parse_args()
    print(f"Machine: {machine()}\n")
    if args.forms_only:
        step_forms_table(args.depths, max(args.rounds, 15))
        collections_table(args.depths)
        return
    print("| task | depth | leaves | raw jax.jit (µs) | pytreemod.jit | eqx.filter_jit | nnx.jit |")
    print("|---|---|---|---|---|---|---|")
    for depth in args.depths:
        leaves = 2 * depth
        for task, fns in contestants(depth).items():
            calls = max(200, 20000 // depth) if task == "forward" else max(100, 4000 // depth)
            t = per_call_us(fns, calls=calls, rounds=args.rounds)
            raw = t["raw jax.jit"]
            cells = [
                f"{t[n]:.1f} µs ({t[n] / raw:.2f}x)"
                for n in ("pytreemod.jit", "eqx.filter_jit", "nnx.jit")
            ]
            print(f"| {task} | {depth} | {leaves} | {raw:.1f} | " + " | ".join(cells) + " |")
    print(
        "\nOverhead per call beyond raw jax.jit is the ratio's excess times the raw time; "
        "it should grow no faster than the leaf count."
    )
    overhead_table(args.depths, args.rounds)
    step_forms_table(args.depths, max(args.rounds, 15))
    collections_table(args.depths)


def _amortized_us(fns: dict[str, Callable[[], Any]], steps: int, repeats: int) -> dict[str, float]:
    """Mean microseconds per call over ``repeats`` interleaved runs of ``steps`` calls each,
    garbage collector on: every collection the calls cause is paid for in the mean."""
    total = dict.fromkeys(fns, 0.0)
    for _ in range(repeats):
        for name, fn in fns.items():
            jax.effects_barrier()
            start = time.perf_counter()
            for _ in range(steps):
                fn()
            jax.effects_barrier()
            total[name] += time.perf_counter() - start
    return {name: t / (steps * repeats) * 1e6 for name, t in total.items()}


def _blocking(fn: Callable[[], Any]) -> Callable[[], Any]:
    """``fn``, then wait for the state it returns: no overlap with the next call."""
    return lambda: jax.block_until_ready(fn())


def _build_free_us(depth: int, repeats: int = 5) -> dict[str, float]:
    """Microseconds to build one adam step's output tree from its arrays and free it again:
    pytreemod's generated builder (what ``pm.jit`` runs per call) against JAX's C++
    ``tree_unflatten`` of raw JAX's dicts. Collector off."""
    model, params = models(depth)
    opt = optax.adam(1e-3)
    loss = jnp.zeros(())
    leaves, treedef = jax.tree.flatten((model, opt.init(cast(Any, model)), loss))
    build = compile_unflatten(treedef)
    raw_leaves, raw_treedef = jax.tree.flatten((params, opt.init(params), loss))
    makers = {
        "pm": lambda: build(leaves),
        "raw": lambda: jax.tree.unflatten(raw_treedef, raw_leaves),
    }
    n = max(50, 10000 // depth)
    best = dict.fromkeys(makers, float("inf"))
    for _ in range(repeats):
        for name, make in makers.items():
            start = time.perf_counter()
            outs = [make() for _ in range(n)]
            del outs
            best[name] = min(best[name], (time.perf_counter() - start) / n * 1e6)
    return best


def overhead_table(depths: list[int], rounds: int) -> None:
    """The adam step's overhead per leaf in three regimes, to separate pytreemod's own
    Python work from what the collector and the machine add to it."""
    print(
        "\n### Adam step: overhead per leaf\n\n"
        "| depth | leaves | GC on, mean: raw (µs) | GC on, mean: pytreemod "
        "| overhead per leaf: GC on | GC off | GC off, each step awaited "
        "| of which building and freeing the output |\n"
        "|---|---|---|---|---|---|---|---|"
    )
    for depth in depths:
        leaves = 2 * depth
        fns = contestants(depth)["adam step"]
        pair = {"raw": fns["raw jax.jit"], "pm": fns["pytreemod.jit"]}
        calls = max(100, 4000 // depth)
        gc.collect()
        gc.disable()
        try:
            off = per_call_us(pair, calls=calls, rounds=rounds)
            awaited = per_call_us(
                {k: _blocking(f) for k, f in pair.items()}, calls=calls, rounds=rounds
            )
            built = _build_free_us(depth)
        finally:
            gc.enable()
        on = _amortized_us(pair, steps=max(1000, 40000 // depth), repeats=3)
        per_leaf = [f"{(t['pm'] - t['raw']) / leaves:.2f} µs" for t in (on, off, awaited, built)]
        print(
            f"| {depth} | {leaves} | {on['raw']:.1f} | {on['pm']:.1f} µs "
            f"({on['pm'] / on['raw']:.2f}x) | " + " | ".join(per_leaf) + " |"
        )
    print(
        "\nGC on, mean: every collection a long run of steps causes is counted at its "
        "true rate (a best round of few calls can miss the rare full collections). GC off: "
        "best round, calls dispatched asynchronously as in training, so pytreemod's Python "
        "work runs while XLA computes on the same cores. Each step awaited: GC off, and "
        "each step waits for its result before the next call. Per step, pytreemod builds "
        "a module, its field dict and a Variable per parameter for every layer of the "
        "model and of each adam moment, against one dict per layer for raw JAX; the last "
        "column is the cost of building and freeing them beyond raw JAX's. What grows "
        "with depth is the cost of having that many objects: CPython's generational "
        "collector promotes a step's live output more often the more objects each step "
        "allocates, and the work competes with XLA's threads for two cores."
    )


def step_forms(depth: int) -> dict[str, Callable[[], Any]]:
    """Zero-argument adam steps, each returning its new state: raw JAX, then the train-step
    forms pytreemod documents with ``pm.jit`` (optax on the module itself; partition and
    combine, optax on the params dict; ``pm.TrainState``)."""
    x = jnp.ones((BATCH, WIDTH))
    y = jnp.zeros((BATCH, WIDTH))
    opt = optax.adam(1e-3)
    model, params = models(depth)

    def loss(m: MLP) -> jax.Array:
        return jnp.mean((m(x) - y) ** 2)

    @jax.jit
    def raw_step(p: Any, s: Any) -> Any:
        value, g = jax.value_and_grad(lambda p: jnp.mean((raw_forward(p, x) - y) ** 2))(p)
        u, s = opt.update(g, s, p)
        return optax.apply_updates(p, u), s, value

    @pm.jit
    def module_step(m: MLP, s: Any) -> Any:
        value, g = pm.value_and_grad(loss)(m)
        u, s = opt.update(g, s, cast(Any, m))
        return optax.apply_updates(cast(Any, m), u), s, value

    @pm.jit
    def partition_step(m: MLP, s: Any) -> Any:
        structure, p, rest = pm.partition(m, "params")
        value, g = jax.value_and_grad(lambda p: loss(pm.combine(structure, p, rest)))(p)
        u, s = opt.update(g, s, p)
        return pm.combine(structure, optax.apply_updates(p, u), rest), s, value

    @pm.jit
    def train_state_step(ts: Any) -> Any:
        return ts.apply_gradients(pm.grad(loss)(ts.model))

    state: dict[str, Any] = {
        "raw": (params, opt.init(params)),
        "module": (model, opt.init(cast(Any, model))),
        "partition": (model, opt.init(pm.state(model, "params"))),
        "train_state": pm.TrainState.create(model, opt),
    }

    def threaded(name: str, step: Callable[..., Any]) -> Callable[[], Any]:
        def run() -> Any:
            a, s, _ = step(*state[name])
            state[name] = (a, s)
            return state[name]

        return run

    def run_train_state() -> Any:
        state["train_state"] = train_state_step(state["train_state"])
        return state["train_state"]

    return {
        "raw jax.jit": threaded("raw", raw_step),
        "pm.jit, optax on the module": threaded("module", module_step),
        "pm.jit, partition/combine": threaded("partition", partition_step),
        "pm.jit, pm.TrainState": run_train_state,
    }


def _median_us(
    fns: dict[str, Callable[[], Any]], *, calls: int, rounds: int, blocking: bool
) -> tuple[dict[str, float], dict[str, float]]:
    """Median microseconds per call over interleaved rounds of ``calls`` calls (in an
    order that rotates every round), wall clock and CPU time of the whole process (every
    thread: Python, dispatch, XLA's work): each call awaited (``blocking``), or dispatched
    back to back and awaited once per round."""
    for fn in fns.values():
        for _ in range(10):
            jax.block_until_ready(fn())
    wall: dict[str, list[float]] = {name: [] for name in fns}
    cpu: dict[str, list[float]] = {name: [] for name in fns}
    items = list(fns.items())
    for r in range(rounds):
        # The order rotates every round, so no contestant always runs first or last.
        for name, fn in items[r % len(items) :] + items[: r % len(items)]:
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
            wall[name].append((time.perf_counter() - start) / calls * 1e6)
            cpu[name].append((time.process_time() - start_cpu) / calls * 1e6)
    return (
        {name: statistics.median(t) for name, t in wall.items()},
        {name: statistics.median(t) for name, t in cpu.items()},
    )


def step_forms_table(depths: list[int], rounds: int) -> None:
    """Every documented ``pm.jit`` step form against raw ``jax.jit``, blocking and
    pipelined: pipelined, nothing hides Python's work behind the device's."""
    names = list(step_forms(2))
    print(
        "\n### Train-step forms, blocking and pipelined\n\n"
        "| depth | regime | clock | raw jax.jit (µs) | " + " | ".join(names[1:]) + " |\n"
        "|---|---|---|---|" + "---|" * (len(names) - 1)
    )
    for depth in depths:
        fns = step_forms(depth)
        calls = max(20, 2000 // depth)
        for blocking in (True, False):
            regime = "each awaited" if blocking else "pipelined"
            for clock, t in zip(
                ("wall", "CPU"), _median_us(fns, calls=calls, rounds=rounds, blocking=blocking)
            ):
                raw = t["raw jax.jit"]
                cells = [f"{t[n]:.1f} µs ({t[n] / raw:.2f}x)" for n in names[1:]]
                print(f"| {depth} | {regime} | {clock} | {raw:.1f} | " + " | ".join(cells) + " |")
    print(
        f"\nMedian over {rounds} interleaved rounds. Each awaited: every call waits for its "
        "result. Pipelined: calls are dispatched back to back and the round waits once at "
        "the end, as a training loop that does not read its loss each step. Wall: elapsed "
        "time. CPU: CPU time of the whole process (Python, dispatch and XLA's threads), "
        "which background load on a shared machine disturbs less than elapsed time."
    )


def collections_table(depths: list[int], steps: int = 300) -> None:
    """Garbage collections per 1000 pipelined steps of each step form, by generation: a
    count, so background load does not move it. Each step allocates its output's objects
    (arrays; for pytreemod, a module per layer and a Variable per parameter too); the more
    a step allocates, the more often the collector runs and promotes live outputs, and
    every 10 promotions of enough objects trigger a full collection of the whole heap."""
    names = list(step_forms(2))
    print(
        "\n### Garbage collections per 1000 steps (generations 0 / 1 / 2)\n\n"
        "| depth | " + " | ".join(names) + " |\n|---|" + "---|" * len(names)
    )
    for depth in depths:
        fns = step_forms(depth)
        cells = []
        for fn in fns.values():
            for _ in range(10):
                fn()
            jax.block_until_ready(fn())
            gc.collect()
            before = [g["collections"] for g in gc.get_stats()]
            out = None
            for _ in range(steps):
                out = fn()
            jax.block_until_ready(out)
            after = [g["collections"] for g in gc.get_stats()]
            cells.append(" / ".join(f"{(b - a) * 1000 / steps:.0f}" for a, b in zip(before, after)))
        print(f"| {depth} | " + " | ".join(cells) + " |")
    print(f"\nHeap: {len(gc.get_objects())} tracked objects at the end; {steps} steps each.")


if __name__ == "__main__":
    main()
