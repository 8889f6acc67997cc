"""adapters.linen against flax.linen: the Python cost of Linen code, and dispatch.

Run: ``python -m benchmarks.linen`` (prints Markdown tables).

One ResNet-18 source written as Linen code (``nn.compact`` blocks, ``nn.Conv``,
``nn.BatchNorm``, ``nn.Dense``) is instantiated twice, once with ``adapters.linen`` and once
with ``flax.linen`` as ``nn``: only the import differs.

(a) **Trace time.** ``jax.eval_shape`` of ``init`` and of a training ``apply`` (BatchNorm
statistics mutable) runs the modules' Python once with abstract arrays and compiles
nothing: it is the cost a user pays on every retrace. Best of ``--repeats`` interleaved
rounds.

(b) **Dispatch.** Per-call time of ``jax.jit(model.apply)`` of a small MLP, where the call
overhead (flattening the variables dict, the compiled-call dispatch) dominates the
computation. (adapters.linen's lowered program holds nested ``jit`` calls for repeated
layers; XLA inlines them, so compiled programs and run times are XLA's alone.)
"""

import argparse
import sys
import time
from collections.abc import Callable
from types import ModuleType
from typing import Any

import jax
import jax.numpy as jnp

from ._timing import machine, per_call_us

STAGES = (2, 2, 2, 2)


def make_resnet18(nn: ModuleType) -> Any:
    """ResNet-18 classes over the Linen namespace ``nn``; returns the top-level class."""

    class BasicBlock(nn.Module):
        features: int
        strides: int = 1

        @nn.compact
        def __call__(self, x: jax.Array, train: bool) -> jax.Array:
            norm = lambda: nn.BatchNorm(use_running_average=not train, momentum=0.9)
            y = nn.Conv(self.features, (3, 3), strides=self.strides, use_bias=False)(x)
            y = nn.relu(norm()(y))
            y = norm()(nn.Conv(self.features, (3, 3), use_bias=False)(y))
            if self.strides != 1 or x.shape[-1] != self.features:
                x = nn.Conv(self.features, (1, 1), strides=self.strides, use_bias=False)(x)
                x = norm()(x)
            return nn.relu(x + y)

    class ResNet18(nn.Module):
        num_classes: int = 1000

        @nn.compact
        def __call__(self, x: jax.Array, train: bool = False) -> jax.Array:
            x = nn.Conv(64, (7, 7), strides=2, use_bias=False)(x)
            x = nn.relu(nn.BatchNorm(use_running_average=not train)(x))
            x = nn.max_pool(x, (3, 3), strides=(2, 2), padding="SAME")
            for i, n_blocks in enumerate(STAGES):
                for j in range(n_blocks):
                    x = BasicBlock(64 * 2**i, 2 if i > 0 and j == 0 else 1)(x, train)
            return nn.Dense(self.num_classes)(jnp.mean(x, axis=(1, 2)))

    return ResNet18


def _contestants() -> dict[str, Any]:
    import flax.linen as flax_nn

    import adapters.linen as adapters_nn

    return {"adapters.linen": make_resnet18(adapters_nn), "flax.linen": make_resnet18(flax_nn)}


def _seconds(fn: Callable[[], object]) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def trace_table(repeats: int) -> str:
    x = jax.ShapeDtypeStruct((8, 224, 224, 3), jnp.float32)
    key = jax.random.key(0)
    models = {name: cls() for name, cls in _contestants().items()}
    variables = {
        name: jax.eval_shape(lambda x, m=m: m.init(key, x), x) for name, m in models.items()
    }
    best = {name: [float("inf"), float("inf")] for name in models}
    for _ in range(repeats):
        for name, m in models.items():
            v = variables[name]
            init = lambda m=m: jax.eval_shape(lambda x: m.init(key, x), x)
            train = lambda m=m, v=v: jax.eval_shape(
                lambda v, x: m.apply(v, x, train=True, mutable=["batch_stats"]), v, x
            )
            best[name][0] = min(best[name][0], _seconds(init))
            best[name][1] = min(best[name][1], _seconds(train))
    ours, theirs = best["adapters.linen"], best["flax.linen"]
    eqns = {
        name: (
            _equations(jax.make_jaxpr(lambda x, m=m: m.init(key, x))(x).jaxpr),
            _equations(
                jax.make_jaxpr(
                    lambda v, x, m=m: m.apply(v, x, train=True, mutable=["batch_stats"])
                )(variables[name], x).jaxpr
            ),
        )
        for name, m in models.items()
    }
    rows = [
        "| ResNet-18 (Linen source) | `init` under eval_shape (ms) | training `apply` under "
        "eval_shape (ms) |",
        "|---|---:|---:|",
        f"| adapters.linen | {ours[0] * 1e3:.1f} | {ours[1] * 1e3:.1f} |",
        f"| flax.linen | {theirs[0] * 1e3:.1f} | {theirs[1] * 1e3:.1f} |",
        f"| **ratio adapters / flax** | **{ours[0] / theirs[0]:.2f}x** | "
        f"**{ours[1] / theirs[1]:.2f}x** |",
        "",
        f"Input (8, 224, 224, 3); best of {repeats} interleaved rounds. Equations traced "
        f"by Python (init, apply; a nested jaxpr reused by several calls counted once): "
        f"adapters.linen {eqns['adapters.linen']}, flax.linen {eqns['flax.linen']}. "
        "adapters.linen's layers trace each distinct (configuration, input shapes) once "
        "and record repeats as a nested `jit` of that trace (`pm.trace_once`); the "
        "compiled program is the same (XLA inlines the calls).",
    ]
    return "\n".join(rows)


def _equations(jaxpr: Any, seen: set[int] | None = None) -> int:
    """Equations of ``jaxpr`` and of its nested jaxprs (inner ``jit``s...), each distinct
    nested jaxpr counted once: the equations Python had to trace."""
    from jax.extend.core import jaxprs_in_params

    seen = set() if seen is None else seen
    if id(jaxpr) in seen:
        return 0
    seen.add(id(jaxpr))
    return sum(1 + sum(_equations(j, seen) for j in jaxprs_in_params(e.params)) for e in jaxpr.eqns)


def make_mlp(nn: ModuleType) -> Any:
    """A three-layer MLP over the Linen namespace ``nn`` (small: dispatch dominates)."""

    class MLP(nn.Module):
        @nn.compact
        def __call__(self, x: jax.Array) -> jax.Array:
            for _ in range(2):
                x = nn.relu(nn.Dense(32)(x))
            return nn.Dense(10)(x)

    return MLP


def dispatch_table(calls: int, rounds: int) -> str:
    import flax.linen as flax_nn

    import adapters.linen as adapters_nn

    x = jnp.ones((8, 32))
    fns: dict[str, Callable[[], object]] = {}
    same_hlo = []
    for name, nn in (("adapters.linen", adapters_nn), ("flax.linen", flax_nn)):
        model = make_mlp(nn)()
        variables = model.init(jax.random.key(0), x)
        apply = jax.jit(model.apply)
        same_hlo.append(_compiled_text(apply.lower(variables, x)))
        fns[name] = lambda apply=apply, variables=variables: apply(variables, x)
    us = per_call_us(fns, calls=calls, rounds=rounds)
    python_calls = {name: _python_calls_per_call(fn) for name, fn in fns.items()}
    ours, theirs = us["adapters.linen"], us["flax.linen"]
    rows = [
        "| MLP 32-32-10, batch 8 | `jax.jit(model.apply)` per call (us) |",
        "|---|---:|",
        f"| adapters.linen | {ours:.1f} |",
        f"| flax.linen | {theirs:.1f} |",
        f"| **ratio adapters / flax** | **{ours / theirs:.2f}x** |",
        "",
        f"{calls} calls per round, best of {rounds} interleaved rounds. Compiled programs "
        f"identical (XLA's optimised HLO, source metadata and instruction numbering "
        f"stripped): {same_hlo[0] == same_hlo[1]}. Python function calls per dispatch "
        f"(0: jit's C++ fast path, no Python runs): adapters.linen "
        f"{python_calls['adapters.linen']:g}, flax.linen {python_calls['flax.linen']:g}.",
    ]
    return "\n".join(rows)


def _compiled_text(lowered: Any) -> str:
    """XLA's optimised HLO of ``lowered`` without source locations and numbering."""
    import re

    text = lowered.compile().as_text()
    if "StackFrames" in text:
        text = text[text.index("\n\n", text.index("StackFrames")) :]
    return re.sub(r"\.\d+", "", re.sub(r", metadata=\{[^}]*\}", "", text))


def _python_calls_per_call(fn: Callable[[], object], calls: int = 100) -> float:
    """Python functions entered per call of ``fn`` besides ``fn`` itself (after warm-up),
    counted with a profile hook: 0 means the call stayed in jit's C++ dispatch path."""
    count = 0

    def hook(frame: Any, event: str, arg: Any) -> None:
        nonlocal count
        if event == "call":
            count += 1

    fn()
    sys.setprofile(hook)
    try:
        for _ in range(calls):
            fn()
    finally:
        sys.setprofile(None)
    return count / calls - 1  # minus ``fn`` itself (the benchmark's lambda)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=15)
    args = parser.parse_args()
    print(f"Machine: {machine()}")
    print()
    print("### Trace time of Linen code: ResNet-18 (adapters.linen vs flax.linen)")
    print()
    print(trace_table(args.repeats))
    print()
    print("### Dispatch of a jitted Linen apply")
    print()
    print(dispatch_table(args.calls, args.rounds))


if __name__ == "__main__":
    main()
