"""Dispatch overhead of a compiled call: raw ``jax.jit`` on a dict of arrays versus
``pytreemod.jit``, ``eqx.filter_jit`` and ``nnx.jit`` on the same MLP (Linear(32) layers,
batch 8): a forward pass and an adam train step, at depth 2, 20 and 100.

Run: ``python -m benchmarks.dispatch`` (prints a Markdown table).
"""

import argparse
import gc
from collections.abc import Callable
from typing import Any, cast

import equinox as eqx
import jax
import jax.numpy as jnp
import optax
from flax import nnx

import pytreemod as pm

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


def contestants(depth: int) -> dict[str, dict[str, Callable[[], Any]]]:
    """For each task, the zero-argument calls to time (state threaded through closures)."""
    key = jax.random.key(0)
    x = jnp.ones((BATCH, WIDTH))
    y = jnp.zeros((BATCH, WIDTH))
    opt = optax.adam(1e-3)

    model = MLP(depth, key=key)
    params = [{"w": layer.weight.value, "b": layer.bias.value} for layer in model.layers]
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

    def run_raw() -> None:
        p, s = state["raw"]
        p, s, _ = raw_step(p, s, x, y)
        state["raw"] = (p, s)

    def run_pm() -> None:
        m, s = state["pm"]
        m, s, _ = pm_step(m, s, x, y)
        state["pm"] = (m, s)

    def run_eqx() -> None:
        m, s = state["eqx"]
        m, s, _ = eqx_step(m, s, x, y)
        state["eqx"] = (m, s)

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
    args = parser.parse_args()
    print(f"Machine: {machine()}\n")
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
    deepest = max(args.depths)
    fns = contestants(deepest)["adam step"]
    pair = {"raw jax.jit": fns["raw jax.jit"], "pytreemod.jit": fns["pytreemod.jit"]}
    gc.disable()
    try:
        t = per_call_us(pair, calls=max(100, 4000 // deepest), rounds=args.rounds)
    finally:
        gc.enable()
    print(
        f"\nSame adam step at depth {deepest} with Python's garbage collector disabled: raw "
        f"{t['raw jax.jit']:.1f} µs, pytreemod.jit {t['pytreemod.jit']:.1f} µs "
        f"({t['pytreemod.jit'] / t['raw jax.jit']:.2f}x). The difference from the table is "
        "the collector's work on the objects a returned model and optimizer state consist "
        "of (a module, its field dict and a Variable per parameter, against one dict per "
        "layer in raw JAX)."
    )
    print(
        "\nOverhead per call beyond raw jax.jit is the ratio's excess times the raw time; "
        "it should grow no faster than the leaf count."
    )


if __name__ == "__main__":
    main()
