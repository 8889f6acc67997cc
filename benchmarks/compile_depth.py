"""Compile time of a residual MLP's train step as depth grows: a Python loop over layers
(unrolled: compile time grows with depth) against scan over layers (flat in depth), in
raw JAX, pytreemod and Equinox.

Run: ``python -m benchmarks.compile_depth`` (prints a Markdown table). Each number is
trace + lower + compile of ``jax.value_and_grad`` of the loss, best of ``--repeats``
rounds, with JAX's caches cleared before each measurement; every round interleaves all
variants and depths, so drift in the process cannot pass for a depth effect.
"""

import argparse
import time
from collections.abc import Callable
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp

import pytreemod as pm

from ._timing import machine

WIDTH, BATCH = 64, 16


class Block(pm.Module):
    weight: pm.Param[jax.Array]
    bias: pm.Param[jax.Array]

    def __init__(self, *, key: jax.Array):
        self.weight = pm.Param(jax.random.normal(key, (WIDTH, WIDTH)) / WIDTH**0.5)
        self.bias = pm.Param(jnp.zeros(WIDTH))

    def __call__(self, x: jax.Array) -> jax.Array:
        return x + jax.nn.relu(x @ self.weight.value + self.bias.value)


def _raw_block(p: dict[str, jax.Array], x: jax.Array) -> jax.Array:
    return x + jax.nn.relu(x @ p["w"] + p["b"])


def compile_seconds(
    make: Callable[[], tuple[Callable[..., Any], tuple[Any, ...]]], repeats: int
) -> float:
    best = float("inf")
    for _ in range(repeats):
        jax.clear_caches()
        fn, args = make()
        start = time.perf_counter()
        jax.jit(fn).lower(*args).compile()
        best = min(best, time.perf_counter() - start)
    return best


def variants(depth: int) -> dict[str, Callable[[], tuple[Callable[..., Any], tuple[Any, ...]]]]:
    key = jax.random.key(0)
    keys = jax.random.split(key, depth)
    x = jnp.ones((BATCH, WIDTH))

    def loss_of(forward: Callable[[Any, jax.Array], jax.Array]) -> Callable[..., Any]:
        return jax.value_and_grad(lambda p, x: jnp.mean(forward(p, x) ** 2))

    def raw_loop() -> tuple[Callable[..., Any], tuple[Any, ...]]:
        params = [{"w": jnp.ones((WIDTH, WIDTH)), "b": jnp.zeros(WIDTH)} for _ in range(depth)]

        def forward(ps: list[dict[str, jax.Array]], x: jax.Array) -> jax.Array:
            for p in ps:
                x = _raw_block(p, x)
            return x

        return loss_of(forward), (params, x)

    def raw_scan() -> tuple[Callable[..., Any], tuple[Any, ...]]:
        params = {"w": jnp.ones((depth, WIDTH, WIDTH)), "b": jnp.zeros((depth, WIDTH))}

        def forward(ps: dict[str, jax.Array], x: jax.Array) -> jax.Array:
            return jax.lax.scan(lambda x, p: (_raw_block(p, x), None), x, ps)[0]

        return loss_of(forward), (params, x)

    def pm_loop() -> tuple[Callable[..., Any], tuple[Any, ...]]:
        blocks = [Block(key=k) for k in keys]

        def forward(bs: list[Block], x: jax.Array) -> jax.Array:
            for b in bs:
                x = b(x)
            return x

        return (lambda bs, x: pm.value_and_grad(lambda bs: jnp.mean(forward(bs, x) ** 2))(bs)), (
            blocks,
            x,
        )

    def pm_scan() -> tuple[Callable[..., Any], tuple[Any, ...]]:
        stack = pm.vmap(lambda k: Block(key=k))(keys)
        forward = pm.scan(lambda x, b: b(x), in_axes=(pm.Carry, 0), out_axes=pm.Carry)

        def fn(stack: Block, x: jax.Array) -> Any:
            return pm.value_and_grad(lambda s: jnp.mean(forward(x, s) ** 2))(stack)

        return fn, (stack, x)

    def eqx_scan() -> tuple[Callable[..., Any], tuple[Any, ...]]:
        make = eqx.filter_vmap(lambda k: eqx.nn.Linear(WIDTH, WIDTH, key=k))
        stack = make(keys)
        dynamic, static = eqx.partition(stack, eqx.is_array)

        def forward(dynamic: Any, x: jax.Array) -> jax.Array:
            def body(x: jax.Array, d: Any) -> tuple[jax.Array, None]:
                layer = eqx.combine(d, static)
                return x + jax.nn.relu(jax.vmap(layer)(x)), None

            return jax.lax.scan(body, x, dynamic)[0]

        return loss_of(forward), (dynamic, x)

    return {
        "raw loop": raw_loop,
        "raw lax.scan": raw_scan,
        "pytreemod loop": pm_loop,
        "pytreemod scan": pm_scan,
        "equinox scan": eqx_scan,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--depths", type=int, nargs="+", default=[8, 32, 64])
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    print(f"Machine: {machine()}\n")
    # Interleave every (variant, depth) pair within each round and keep the best round:
    # measuring all of depth 8 first and depth 64 last lets drift in the process (heap
    # growth, background load) masquerade as a depth effect.
    makers = {depth: variants(depth) for depth in args.depths}
    results: dict[str, dict[int, float]] = {}
    for _ in range(args.repeats):
        for depth in args.depths:
            for name, make in makers[depth].items():
                seconds = compile_seconds(make, 1)
                by_depth = results.setdefault(name, {})
                by_depth[depth] = min(by_depth.get(depth, float("inf")), seconds)
    head = " | ".join(f"depth {d} (s)" for d in args.depths)
    first, last = args.depths[0], args.depths[-1]
    print(f"| variant | {head} | depth {last} / depth {first} |")
    print("|---|" + "---|" * (len(args.depths) + 1))
    for name, by_depth in results.items():
        cells = " | ".join(f"{by_depth[d]:.3f}" for d in args.depths)
        print(f"| {name} | {cells} | {by_depth[last] / by_depth[first]:.2f}x |")


if __name__ == "__main__":
    main()
