"""Trace time of ``pm.nn`` models against the same models hand-written in raw JAX.

Run: ``python -m benchmarks.trace [--rounds N]`` (prints Markdown tables).

``pm.nn``'s layers wear ``pm.trace_once``: under a trace, each distinct (configuration,
input shapes) of a layer is traced once and later calls replay it as a nested ``jit``
equation, which XLA inlines. Measured in one process, all contestants interleaved in
every round (in reverse order every other round), each number the **median** over
rounds, every measurement starting cold (``jax.clear_caches()`` and trace_once's own
cache emptied first):

(a) **Deep unrolled model.** ``jax.jit(grad(loss)).trace(...).lower()`` of 48 residual
    MLP blocks (``x + Linear(gelu(Linear(LayerNorm(x))))``, width 128), written with
    ``pm.nn`` (``pm.grad`` over the ``"params"``; ``pm.nn.gelu``, and ``jax.nn.gelu``
    in a second row), in raw JAX (dict parameters, the same math, ``jax.nn.gelu``) and
    with Equinox (``eqx.nn`` layers, ``jax.vmap`` over the batch).
(b) **ResNet-18 under ``jax.eval_shape``:** construction (``init``) and an evaluation
    forward pass (BatchNorm reads its running averages), ``pm.nn`` (``pm.nn.relu``)
    against raw JAX (``jax.nn.relu``), in a loop of its own (``--resnet-rounds``, 41),
    the ratio the median of per-round ratios.
(c) **Jitted init of a ResNet-18:** a fresh ``jax.jit`` of the construction, traced,
    compiled and run once, ``pm.nn`` against raw JAX; plus the optimised HLO instruction
    counts of both init programs.
(d) **Compile time** (``Lowered.compile()``) of (a)'s ``pm.nn`` grad step, trace_once on
    and off (``pm.disable_trace_once()``), and whether the optimised HLO is the same.
"""

import argparse
import gc
import hashlib
import re
import statistics
import time
from collections.abc import Callable
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp

import pytreemod as pm
from pytreemod import _trace_cache

from ._timing import machine

DEPTH, WIDTH, BATCH = 48, 128, 8
STAGES = (2, 2, 2, 2)
IMAGE = (8, 224, 224, 3)

# ----------------------------------------------------------------------------- (a) deep MLP


Activation = Callable[[jax.Array], jax.Array]


class PmBlock(pm.Module):
    norm: pm.nn.LayerNorm
    up: pm.nn.Linear
    down: pm.nn.Linear
    act: Activation = pm.field(static=True)

    def __init__(self, *, key: jax.Array, act: Activation = pm.nn.gelu):
        k1, k2 = jax.random.split(key)
        self.norm = pm.nn.LayerNorm(WIDTH)
        self.up = pm.nn.Linear(WIDTH, 4 * WIDTH, key=k1)
        self.down = pm.nn.Linear(4 * WIDTH, WIDTH, key=k2)
        self.act = act

    def __call__(self, x: jax.Array) -> jax.Array:
        return x + self.down(self.act(self.up(self.norm(x))))


class PmDeep(pm.Module):
    blocks: tuple[PmBlock, ...]

    def __init__(self, *, key: jax.Array, act: Activation = pm.nn.gelu):
        self.blocks = tuple(PmBlock(key=k, act=act) for k in jax.random.split(key, DEPTH))

    def __call__(self, x: jax.Array) -> jax.Array:
        for block in self.blocks:
            x = block(x)
        return x


def pm_deep_step(model: PmDeep, x: jax.Array) -> Any:
    return pm.grad(lambda m: jnp.mean(m(x) ** 2), argnums=pm.DiffState(0, "params"))(model)


def _raw_layer_norm(p: dict[str, jax.Array], x: jax.Array, eps: float = 1e-6) -> jax.Array:
    mean = jnp.mean(x, axis=-1, keepdims=True)
    mean2 = jnp.mean(x * x, axis=-1, keepdims=True)
    var = jnp.maximum(0.0, mean2 - mean * mean)
    return (x - mean) * (jax.lax.rsqrt(var + eps) * p["scale"]) + p["bias"]


def raw_deep_params(key: jax.Array) -> list[dict[str, Any]]:
    init = jax.nn.initializers.lecun_normal()
    blocks = []
    for k in jax.random.split(key, DEPTH):
        k1, k2 = jax.random.split(k)
        blocks.append(
            {
                "norm": {"scale": jnp.ones(WIDTH), "bias": jnp.zeros(WIDTH)},
                "up": {"w": init(k1, (WIDTH, 4 * WIDTH)), "b": jnp.zeros(4 * WIDTH)},
                "down": {"w": init(k2, (4 * WIDTH, WIDTH)), "b": jnp.zeros(WIDTH)},
            }
        )
    return blocks


def raw_deep_step(params: list[dict[str, Any]], x: jax.Array) -> Any:
    def loss(params: list[dict[str, Any]]) -> jax.Array:
        h = x
        for p in params:
            y = _raw_layer_norm(p["norm"], h) @ p["up"]["w"] + p["up"]["b"]
            h = h + jax.nn.gelu(y) @ p["down"]["w"] + p["down"]["b"]
        return jnp.mean(h**2)

    return jax.grad(loss)(params)


class EqxBlock(eqx.Module):
    norm: eqx.nn.LayerNorm
    up: eqx.nn.Linear
    down: eqx.nn.Linear

    def __init__(self, key: jax.Array):
        k1, k2 = jax.random.split(key)
        self.norm = eqx.nn.LayerNorm(WIDTH, eps=1e-6)
        self.up = eqx.nn.Linear(WIDTH, 4 * WIDTH, key=k1)
        self.down = eqx.nn.Linear(4 * WIDTH, WIDTH, key=k2)

    def __call__(self, x: jax.Array) -> jax.Array:
        return x + self.down(jax.nn.gelu(self.up(self.norm(x))))


def eqx_deep_step(blocks: list[EqxBlock], x: jax.Array) -> Any:
    def loss(blocks: list[EqxBlock]) -> jax.Array:
        h = x
        for block in blocks:
            h = jax.vmap(block)(h)
        return jnp.mean(h**2)

    return eqx.filter_grad(loss)(blocks)


# ----------------------------------------------------------------------------- ResNet-18


class PmBasicBlock(pm.Module):
    conv1: pm.nn.Conv2d
    bn1: pm.nn.BatchNorm
    conv2: pm.nn.Conv2d
    bn2: pm.nn.BatchNorm
    proj: pm.nn.Conv2d | None
    proj_bn: pm.nn.BatchNorm | None

    def __init__(self, n_in: int, n_out: int, strides: int, *, key: jax.Array):
        k1, k2, k3 = jax.random.split(key, 3)
        bn = lambda: pm.nn.BatchNorm(n_out, use_running_average=True, momentum=0.9)
        self.conv1 = pm.nn.Conv2d(n_in, n_out, 3, strides=strides, use_bias=False, key=k1)
        self.bn1 = bn()
        self.conv2 = pm.nn.Conv2d(n_out, n_out, 3, use_bias=False, key=k2)
        self.bn2 = bn()
        if strides != 1 or n_in != n_out:
            self.proj = pm.nn.Conv2d(n_in, n_out, 1, strides=strides, use_bias=False, key=k3)
            self.proj_bn = bn()
        else:
            self.proj, self.proj_bn = None, None

    def __call__(self, x: jax.Array) -> jax.Array:
        y = pm.nn.relu(self.bn1(self.conv1(x)))
        y = self.bn2(self.conv2(y))
        if self.proj is not None and self.proj_bn is not None:
            x = self.proj_bn(self.proj(x))
        return pm.nn.relu(x + y)


def _stage_plan() -> list[tuple[int, int, int]]:
    """(in, out, strides) of every basic block."""
    plan, n_in = [], 64
    for i, n_blocks in enumerate(STAGES):
        for j in range(n_blocks):
            n_out = 64 * 2**i
            plan.append((n_in, n_out, 2 if i > 0 and j == 0 else 1))
            n_in = n_out
    return plan


class PmResNet18(pm.Module):
    stem: pm.nn.Conv2d
    stem_bn: pm.nn.BatchNorm
    blocks: tuple[PmBasicBlock, ...]
    head: pm.nn.Linear

    def __init__(self, *, key: jax.Array, num_classes: int = 1000):
        plan = _stage_plan()
        keys = jax.random.split(key, len(plan) + 2)
        self.stem = pm.nn.Conv2d(3, 64, 7, strides=2, use_bias=False, key=keys[0])
        self.stem_bn = pm.nn.BatchNorm(64, use_running_average=True)
        self.blocks = tuple(
            PmBasicBlock(*spec, key=k) for spec, k in zip(plan, keys[1:-1], strict=True)
        )
        self.head = pm.nn.Linear(512, num_classes, key=keys[-1])

    def __call__(self, x: jax.Array) -> jax.Array:
        x = pm.nn.relu(self.stem_bn(self.stem(x)))
        x = pm.nn.max_pool(x, (3, 3), strides=(2, 2), padding="SAME")
        for block in self.blocks:
            x = block(x)
        return self.head(jnp.mean(x, axis=(1, 2)))


def raw_resnet_init(key: jax.Array, num_classes: int = 1000) -> dict[str, Any]:
    init = jax.nn.initializers.lecun_normal()

    def bn(n: int) -> dict[str, jax.Array]:
        return {
            "scale": jnp.ones(n),
            "bias": jnp.zeros(n),
            "mean": jnp.zeros(n),
            "var": jnp.ones(n),
        }

    plan = _stage_plan()
    keys = jax.random.split(key, len(plan) + 2)
    blocks = []
    for (n_in, n_out, strides), k in zip(plan, keys[1:-1], strict=True):
        k1, k2, k3 = jax.random.split(k, 3)
        block = {
            "conv1": init(k1, (3, 3, n_in, n_out)),
            "bn1": bn(n_out),
            "conv2": init(k2, (3, 3, n_out, n_out)),
            "bn2": bn(n_out),
        }
        if strides != 1 or n_in != n_out:
            block["proj"] = init(k3, (1, 1, n_in, n_out))
            block["proj_bn"] = bn(n_out)
        blocks.append(block)
    return {
        "stem": init(keys[0], (7, 7, 3, 64)),
        "stem_bn": bn(64),
        "blocks": blocks,
        "head": {"w": init(keys[-1], (512, num_classes)), "b": jnp.zeros(num_classes)},
    }


def _conv(x: jax.Array, w: jax.Array, strides: int) -> jax.Array:
    return jax.lax.conv_general_dilated(
        x, w, (strides, strides), "SAME", dimension_numbers=("NHWC", "HWIO", "NHWC")
    )


def _bn(p: dict[str, jax.Array], x: jax.Array, eps: float = 1e-5) -> jax.Array:
    return (x - p["mean"]) * (jax.lax.rsqrt(p["var"] + eps) * p["scale"]) + p["bias"]


def raw_resnet_apply(params: dict[str, Any], x: jax.Array) -> jax.Array:
    x = jax.nn.relu(_bn(params["stem_bn"], _conv(x, params["stem"], 2)))
    x = jax.lax.reduce_window(x, -jnp.inf, jax.lax.max, (1, 3, 3, 1), (1, 2, 2, 1), "SAME")
    for p, (_, _, strides) in zip(params["blocks"], _stage_plan(), strict=True):
        y = jax.nn.relu(_bn(p["bn1"], _conv(x, p["conv1"], strides)))
        y = _bn(p["bn2"], _conv(y, p["conv2"], 1))
        if "proj" in p:
            x = _bn(p["proj_bn"], _conv(x, p["proj"], strides))
        x = jax.nn.relu(x + y)
    return jnp.mean(x, axis=(1, 2)) @ params["head"]["w"] + params["head"]["b"]


# ----------------------------------------------------------------------------- timing


def _cold() -> None:
    """Forget every trace: JAX's caches and trace_once's replays."""
    jax.clear_caches()
    _trace_cache._entries.clear()
    gc.collect()


def _seconds(fn: Callable[[], object]) -> float:
    _cold()
    start = _clock()
    fn()
    return _clock() - start


def interleaved_medians(fns: dict[str, Callable[[], object]], rounds: int) -> dict[str, float]:
    """Median seconds of each function over ``rounds`` rounds, all functions run once per
    round in turn, each from cold caches. The order reverses every round, so that what
    one function leaves behind (freed memory, the collector's counts) does not always
    fall on the same next one."""
    times = interleaved_times(fns, rounds)
    return {name: statistics.median(ts) for name, ts in times.items()}


def interleaved_times(fns: dict[str, Callable[[], object]], rounds: int) -> dict[str, list[float]]:
    """Each function's seconds in every round, as ``interleaved_medians`` runs them."""
    for fn in fns.values():  # warm up imports and one-off module-level work
        fn()
    times: dict[str, list[float]] = {name: [] for name in fns}
    items = list(fns.items())
    for r in range(rounds):
        for name, fn in items if r % 2 == 0 else reversed(items):
            times[name].append(_seconds(fn))
    return times


def median_ratio(a: list[float], b: list[float]) -> float:
    """The median of the per-round ratios ``a[i] / b[i]``: a slow period of the machine
    falls on both sides of a round's ratio, not on one side of a ratio of medians."""
    return statistics.median(x / y for x, y in zip(a, b, strict=True))


def program_hash(text: str) -> str:
    """A hash of what an optimised HLO module computes, blind to names, metadata and the
    order of independent instructions: every instruction is hashed from its shape,
    opcode, attributes and its operands' (or called computations') hashes; the module
    from its entry computation's root."""
    text = re.sub(r",? ?metadata=\{[^}]*\}", "", text)
    computations: dict[str, str] = {}
    instructions: dict[str, str] = {}
    current, entry = "", ""
    for line in text.splitlines():
        head = re.match(r"^(ENTRY )?%([\w.-]+) \(.*\{$", line)
        if head:
            current, instructions = head[2], {}
            entry = current if head[1] else entry
            continue
        m = re.match(r"^\s+(ROOT )?%([\w.-]+) = (.*)$", line)
        if m and current:
            ref = lambda r, known=instructions: known.get(r[1]) or computations.get(r[1]) or "?"
            digest = hashlib.sha1(re.sub(r"%([\w.-]+)", ref, m[3]).encode()).hexdigest()
            instructions[m[2]] = digest
            if m[1]:
                computations[current] = digest
    return computations[entry]


def same_programs() -> tuple[bool, bool]:
    """Whether the 48-block model's jitted forward pass, and its grad step, compile to
    the same optimised HLO with trace_once on and off."""
    x = jnp.ones((BATCH, WIDTH))
    model = PmDeep(key=jax.random.key(0))
    out = []
    for fn in (lambda m, x: m(x), pm_deep_step):
        hlo = lambda fn=fn: jax.jit(lambda m, x: fn(m, x)).lower(model, x).compile().as_text() or ""
        on = program_hash(hlo())
        with pm.disable_trace_once():  # a new function: jit has no trace of it cached
            off = program_hash(hlo())
        out.append(on == off)
    return out[0], out[1]


def _instructions(compiled: Any) -> int:
    return sum(1 for line in compiled.as_text().splitlines() if " = " in line)


def _op_counts(compiled: Any) -> dict[str, int]:
    counts: dict[str, int] = {}
    for m in re.finditer(r" = \S+ (\w[\w-]*)\(", compiled.as_text()):
        counts[m.group(1)] = counts.get(m.group(1), 0) + 1
    return counts


def deep_contestants() -> dict[str, Callable[[], object]]:
    key = jax.random.key(0)
    x = jnp.ones((BATCH, WIDTH))
    pm_model = PmDeep(key=key)
    pm_jax_gelu = PmDeep(key=key, act=jax.nn.gelu)
    raw_params = raw_deep_params(key)
    eqx_blocks = [EqxBlock(k) for k in jax.random.split(key, DEPTH)]

    def lower(step: Callable[..., Any], *args: Any) -> Callable[[], object]:
        return lambda: jax.jit(lambda *a: step(*a)).trace(*args).lower()

    def pm_off() -> object:
        with pm.disable_trace_once():
            return lower(pm_deep_step, pm_model, x)()

    return {
        "pytreemod (pm.nn)": lower(pm_deep_step, pm_model, x),
        "pytreemod, jax.nn.gelu": lower(pm_deep_step, pm_jax_gelu, x),
        "pytreemod, trace_once off": pm_off,
        "raw JAX": lower(raw_deep_step, raw_params, x),
        "Equinox": lower(eqx_deep_step, eqx_blocks, x),
    }


def resnet_contestants() -> dict[str, Callable[[], object]]:
    key = jax.random.key(0)
    x = jax.ShapeDtypeStruct(IMAGE, jnp.float32)
    pm_model = pm.eval_shape(PmResNet18, key=key)
    raw_params = jax.eval_shape(raw_resnet_init, key)
    return {
        "pm init": lambda: jax.eval_shape(lambda k: PmResNet18(key=k), key),
        "raw init": lambda: jax.eval_shape(raw_resnet_init, key),
        "pm apply": lambda: jax.eval_shape(lambda m, x: m(x), pm_model, x),
        "raw apply": lambda: jax.eval_shape(raw_resnet_apply, raw_params, x),
    }


def jit_init_contestants() -> dict[str, Callable[[], object]]:
    key = jax.random.key(0)

    def run(init: Callable[[jax.Array], Any]) -> Callable[[], object]:
        return lambda: jax.block_until_ready(jax.jit(lambda k: init(k))(key))

    return {"pm": run(lambda k: PmResNet18(key=k)), "raw": run(raw_resnet_init)}


def compile_contestants() -> dict[str, Callable[[], object]]:
    key = jax.random.key(0)
    x = jnp.ones((BATCH, WIDTH))
    model = PmDeep(key=key)

    def lowered() -> Any:
        return jax.jit(lambda m, x: pm_deep_step(m, x)).trace(model, x).lower()

    def on() -> object:
        lo = lowered()
        start = _clock()
        compiled = lo.compile()
        _compile_seconds["on"].append(_clock() - start)
        return compiled

    def off() -> object:
        with pm.disable_trace_once():
            lo = lowered()
        start = _clock()
        compiled = lo.compile()
        _compile_seconds["off"].append(_clock() - start)
        return compiled

    return {"on": on, "off": off}


_compile_seconds: dict[str, list[float]] = {"on": [], "off": []}
# The process's CPU time (all threads, XLA's included) by default: on a shared machine
# other jobs disturb it much less than wall-clock time. ``--clock wall`` switches.
_clock: Callable[[], float] = time.process_time


def _ratio(a: float, b: float) -> str:
    return f"**{a / b:.2f}x**"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--init-rounds", type=int, default=5)
    parser.add_argument("--resnet-rounds", type=int, default=41)
    parser.add_argument("--clock", choices=("cpu", "wall"), default="cpu")
    args = parser.parse_args()
    global _clock
    _clock = time.process_time if args.clock == "cpu" else time.perf_counter
    deep, resnet = deep_contestants(), resnet_contestants()
    inits, compiles = jit_init_contestants(), compile_contestants()
    # One interleaved run: every round times every contestant of (a), (b) and (d).
    fns = {
        **{f"deep/{k}": v for k, v in deep.items()},
        **{f"compile/{k}": v for k, v in compiles.items()},
    }
    med = interleaved_medians(fns, args.rounds)
    # (b) is a 2-5% question on 50-100 ms calls: a loop of its own, with more rounds, and
    # the median of per-round ratios.
    rn = interleaved_times(resnet, args.resnet_rounds)
    med.update({f"resnet/{k}": statistics.median(v) for k, v in rn.items()})
    rn_ratio = {
        part: median_ratio(rn[f"pm {part}"], rn[f"raw {part}"]) for part in ("init", "apply")
    }
    init_med = interleaved_medians({f"init/{k}": v for k, v in inits.items()}, args.init_rounds)
    comp = {k: statistics.median(v[1:]) for k, v in _compile_seconds.items()}  # v[0]: warm-up

    print(f"Machine: {machine()}")
    print()
    print(f"### (a) grad trace+lower of a {DEPTH}-block unrolled residual MLP")
    print()
    raw = med["deep/raw JAX"]
    print("| contestant | trace+lower (ms) | ratio to raw JAX |")
    print("|---|---:|---:|")
    for name in deep:
        t = med[f"deep/{name}"]
        print(f"| {name} | {t * 1e3:.0f} | {_ratio(t, raw)} |")
    print()
    print("### (b) ResNet-18 under `jax.eval_shape`")
    print()
    print("| | init (ms) | evaluation forward (ms) |")
    print("|---|---:|---:|")
    print(
        f"| pytreemod (pm.nn) | {med['resnet/pm init'] * 1e3:.1f} | "
        f"{med['resnet/pm apply'] * 1e3:.1f} |"
    )
    print(f"| raw JAX | {med['resnet/raw init'] * 1e3:.1f} | {med['resnet/raw apply'] * 1e3:.1f} |")
    print(
        f"| **ratio pm / raw** (median of per-round ratios) | **{rn_ratio['init']:.2f}x** | "
        f"**{rn_ratio['apply']:.2f}x** |"
    )
    print()
    print("### (c) Jitted init of a ResNet-18 (fresh trace + compile + run)")
    print()
    key = jax.random.key(0)
    pm_c = jax.jit(lambda k: PmResNet18(key=k)).lower(key).compile()
    raw_c = jax.jit(raw_resnet_init).lower(key).compile()
    print("| | seconds | optimised HLO instructions |")
    print("|---|---:|---:|")
    print(f"| pytreemod (pm.nn) | {init_med['init/pm']:.2f} | {_instructions(pm_c)} |")
    print(f"| raw JAX | {init_med['init/raw']:.2f} | {_instructions(raw_c)} |")
    print(f"| **ratio pm / raw** | {_ratio(init_med['init/pm'], init_med['init/raw'])} | |")
    print()
    print(f"### (d) Compile time of the {DEPTH}-block pm.nn grad step, trace_once on and off")
    print()
    same_forward, same_grad = same_programs()
    print("| trace_once | compile (s) |")
    print("|---|---:|")
    print(f"| on | {comp['on']:.2f} |")
    print(f"| off | {comp['off']:.2f} |")
    print(f"| **ratio on / off** | {_ratio(comp['on'], comp['off'])} |")
    print()
    print(
        f"Times are the process's {'CPU' if args.clock == 'cpu' else 'wall-clock'} time. "
        f"Medians of {args.rounds} interleaved rounds ((a) and (d) in one loop; (b) "
        f"{args.resnet_rounds} rounds of its own; (c) {args.init_rounds} rounds), every "
        "measurement from cold caches. Same optimised "
        f"HLO with trace_once on and off (names, metadata and the order of independent "
        f"instructions aside): "
        f"forward pass {same_forward}, grad step {same_grad}."
    )


if __name__ == "__main__":
    main()
