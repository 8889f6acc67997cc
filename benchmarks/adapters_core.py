"""adapters.core benchmarks: remat_scan's memory, and the Python cost of Scope code.

Run: ``python -m benchmarks.adapters_core`` (prints Markdown tables).

(a) **Memory.** The train step (loss, gradients, SGD update) of a 100-block residual net
written against ``Scope``: blocks stacked by a plain ``lift.scan`` (every block's
activations stored for the backward pass) against ``lift.remat_scan`` with
``lengths=(10, 10)`` (the lifting note's O(sqrt(n)) memory). Reported: XLA's temporary
buffer size of the compiled step (``memory_analysis().temp_size_in_bytes``) and the ratio.

(b) **Python cost.** Trace + lower time of ``init`` and of a jitted ``apply`` (train mode,
``batch_stats`` mutable) of one ResNet-18 source written against the functional core, run
once with ``adapters.core`` and once with ``flax.core`` (only the import differs). Each
measurement starts from cleared JAX caches (and a cleared adapters parameter-shape
cache); best of ``--repeats`` interleaved rounds.
"""

import argparse
import math
import time
from collections.abc import Callable
from types import ModuleType
from typing import Any

import jax
import jax.numpy as jnp

import adapters.core as ac
from adapters.core import _scope as ac_scope

from ._timing import machine

# ----------------------------------------------------------------------------- (a) memory

WIDTH, BATCH, DEPTH = 256, 256, 100


def block(scope: ac.Scope, x: jax.Array) -> jax.Array:
    h = ac.nn.dense(scope, x, WIDTH)
    return x + jnp.tanh(h)


def scanned(scope: ac.Scope, x: jax.Array) -> jax.Array:
    body = lambda scope, c, _: (block(scope, c), None)
    f = ac.lift.scan(body, variable_axes={"params": 0}, split_rngs={"params": True}, length=DEPTH)
    return f(scope, x, None)[0]


def remat_scanned(scope: ac.Scope, x: jax.Array) -> jax.Array:
    return ac.lift.remat_scan(block, lengths=(10, 10))(scope, x)


def train_step_temp_bytes(net: Callable[..., jax.Array]) -> tuple[int, Any]:
    x = jnp.ones((BATCH, WIDTH))
    params = jax.eval_shape(lambda k: ac.init(net)(k, x)[1]["params"], jax.random.key(0))

    def step(params: Any, x: jax.Array) -> tuple[Any, jax.Array]:
        def loss(params: Any) -> jax.Array:
            return jnp.mean(ac.apply(net)({"params": params}, x) ** 2)

        value, grads = jax.value_and_grad(loss)(params)
        return jax.tree.map(lambda p, g: p - 0.01 * g, params, grads), value

    compiled = jax.jit(step).lower(params, x).compile()
    analysis = compiled.memory_analysis()
    assert analysis is not None, "this backend reports no memory analysis"
    shapes = jax.tree.map(lambda p: p.shape, params)
    return int(analysis.temp_size_in_bytes), shapes


def memory_table() -> str:
    scan_bytes, scan_shapes = train_step_temp_bytes(scanned)
    remat_bytes, remat_shapes = train_step_temp_bytes(remat_scanned)
    activation = BATCH * WIDTH * 4
    rows = [
        "| stacking of the 100 blocks | kernel shape | temp memory (MiB) | "
        "activations of one block |",
        "|---|---|---:|---:|",
        f"| `lift.scan` (length 100) | {scan_shapes['kernel']} | {scan_bytes / 2**20:.2f} | "
        f"{scan_bytes / activation:.1f} |",
        f"| `lift.remat_scan` lengths (10, 10) | {remat_shapes['kernel']} | "
        f"{remat_bytes / 2**20:.2f} | {remat_bytes / activation:.1f} |",
        "",
        f"remat_scan / scan temp memory: **{remat_bytes / scan_bytes:.3f}x** "
        f"(one block's activation is {activation / 2**20:.2f} MiB; batch {BATCH}, width "
        f"{WIDTH}, {DEPTH} blocks, train step = value_and_grad + SGD update).",
    ]
    return "\n".join(rows)


# ----------------------------------------------------------------------------- (b) ResNet-18

STAGES = (2, 2, 2, 2)


def make_resnet18(core: ModuleType, nn: ModuleType) -> Callable[..., jax.Array]:
    """ResNet-18 as a scope function; ``core``/``nn`` are ``adapters.core``/``flax.core``
    and their ``nn``: the same source runs on both."""

    def basic_block(scope: Any, x: jax.Array, features: int, strides: int, train: bool) -> Any:
        conv = lambda name, *a, **k: scope.child(nn.conv, name)(*a, bias=False, **k)
        bn = lambda name, y: scope.child(nn.batch_norm, name)(
            y, use_running_average=not train, momentum=0.9, epsilon=1e-5
        )
        y = conv("conv1", x, features, (3, 3), strides=(strides, strides))
        y = nn.relu(bn("bn1", y))
        y = bn("bn2", conv("conv2", y, features, (3, 3)))
        if strides != 1 or x.shape[-1] != features:
            x = bn("proj_bn", conv("proj", x, features, (1, 1), strides=(strides, strides)))
        return nn.relu(x + y)

    def resnet18(scope: Any, x: jax.Array, train: bool = True) -> jax.Array:
        x = scope.child(nn.conv, "conv_init")(x, 64, (7, 7), strides=(2, 2), bias=False)
        x = scope.child(nn.batch_norm, "bn_init")(x, use_running_average=not train)
        x = nn.max_pool(nn.relu(x), (3, 3), strides=(2, 2), padding="SAME")
        for i, n_blocks in enumerate(STAGES):
            for j in range(n_blocks):
                strides = 2 if i > 0 and j == 0 else 1
                x = scope.child(basic_block, f"stage{i}_block{j}")(x, 64 * 2**i, strides, train)
        x = jnp.mean(x, axis=(1, 2))
        return scope.child(nn.dense, "head")(x, 1000)

    return resnet18


def lower_seconds(
    core: ModuleType, resnet: Callable[..., Any], x: Any, variables: Any
) -> tuple[float, float]:
    key = jax.ShapeDtypeStruct((), jax.random.key(0).dtype)

    def init_fn(k: jax.Array, x: jax.Array) -> Any:
        return core.init(resnet)(k, x)

    def apply_fn(v: Any, x: jax.Array) -> Any:
        return core.apply(resnet, mutable=["batch_stats"])(v, x)

    jax.clear_caches()
    ac_scope._INIT_SHAPES.clear()
    start = time.perf_counter()
    jax.jit(init_fn).lower(key, x)
    t_init = time.perf_counter() - start
    jax.clear_caches()
    ac_scope._INIT_SHAPES.clear()
    start = time.perf_counter()
    jax.jit(apply_fn).lower(variables, x)
    t_apply = time.perf_counter() - start
    return t_init, t_apply


def trace_table(repeats: int) -> str:
    import flax.core as fc
    import flax.core.nn as fnn

    x = jax.ShapeDtypeStruct((8, 224, 224, 3), jnp.float32)
    contestants = {
        "adapters.core": (ac, make_resnet18(ac, ac.nn)),
        "flax.core": (fc, make_resnet18(fc, fnn)),
    }
    variables = {
        name: jax.eval_shape(
            lambda k, x, core=core, f=f: core.init(f)(k, x)[1], jax.random.key(0), x
        )
        for name, (core, f) in contestants.items()
    }
    n_params = sum(
        math.prod(p.shape) for p in jax.tree.leaves(variables["adapters.core"]["params"])
    )
    best = {name: [float("inf"), float("inf")] for name in contestants}
    for _ in range(repeats):
        for name, (core, f) in contestants.items():
            t_init, t_apply = lower_seconds(core, f, x, variables[name])
            best[name][0] = min(best[name][0], t_init)
            best[name][1] = min(best[name][1], t_apply)
    ours, theirs = best["adapters.core"], best["flax.core"]
    rows = [
        "| ResNet-18 (functional core) | init: trace + lower (ms) | jitted apply: trace + "
        "lower (ms) |",
        "|---|---:|---:|",
        f"| adapters.core | {ours[0] * 1e3:.0f} | {ours[1] * 1e3:.0f} |",
        f"| flax.core | {theirs[0] * 1e3:.0f} | {theirs[1] * 1e3:.0f} |",
        f"| **ratio adapters / flax** | **{ours[0] / theirs[0]:.2f}x** | "
        f"**{ours[1] / theirs[1]:.2f}x** |",
        "",
        f"{n_params / 1e6:.1f}M parameters, input (8, 224, 224, 3), best of {repeats} "
        "interleaved rounds, caches cleared before each measurement.",
    ]
    return "\n".join(rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    print(f"Machine: {machine()}")
    print()
    print("### remat_scan memory (100-block residual net, train step)")
    print()
    print(memory_table())
    print()
    print("### Trace + lower time: ResNet-18 against Scope (adapters.core vs flax.core)")
    print()
    print(trace_table(args.repeats))


if __name__ == "__main__":
    main()
